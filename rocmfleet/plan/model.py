"""The fleet plan as a value (pure data): what every host of a site should be, computed offline.

:func:`rocmfleet.plan.build.plan_fleet` builds a :class:`FleetPlan`; :func:`to_json` gives its stable
JSON (keys sorted, items in a fixed order: two runs on the same data give the same bytes).
Secrets appear by name only: a :class:`FilePlan` of a secrets file holds its path, mode, owner and
the names of its variables, never a value.

A *service* is one served model (:func:`rocmfleet.plan.services.service_name`); each of its
*replicas* is one vLLM instance today. A replica holds :class:`Rank` s, one per host process, so a
replica that spans hosts (multi-node vLLM) is more ranks, not another shape.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Literal

from rocmfleet.plan.checkmodel import CheckInstance, CheckValues

#: Which role of the deploy an item belongs to.
Role = Literal["base", "rocm", "tuning", "exporter", "docker", "vllm"]


@dataclass(frozen=True)
class Rank:
    """One process of a replica: on ``host``, the vLLM instance ``instance``, rank ``rank`` (0: the head)."""

    host: str
    instance: str
    rank: int = 0


@dataclass(frozen=True)
class ReplicaPlan:
    """One replica of a service: ``id`` (``HOST/INSTANCE`` of its head), its ranks, head first, and
    the profile and image reference its hosts run it with."""

    service: str
    id: str
    ranks: tuple[Rank, ...]
    profile: str
    image: str


@dataclass(frozen=True)
class ServiceImage:
    """An image a service's replicas run: its reference, the hosts that run it (inventory order) and
    the inventory groups that hold exactly those of the service's hosts (``rack_a`` on a site that
    pins the image per rack; empty when one image serves the whole service)."""

    image: str
    hosts: tuple[str, ...]
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServicePlan:
    """One served model: its name (what clients put in ``model``), the profiles its replicas run
    with (sorted, each once: more than one when hosts of one service differ, e.g. a TP-2 profile
    beside a TP-1 one of the same ``served_model_name``), the images they run (one
    :class:`ServiceImage` each, in order of first host: more than one during a per-group pin, each
    naming its hosts and groups) and its replicas (in host then instance order; each
    :class:`ReplicaPlan` names its own profile and image)."""

    name: str
    profiles: tuple[str, ...]
    images: tuple[ServiceImage, ...]
    replicas: tuple[ReplicaPlan, ...]


@dataclass(frozen=True)
class ServiceBound:
    """A service in a rollout: its replicas on the hosts the rollout covers and the most of them out
    of service at once (``--max-unavailable`` of it)."""

    service: str
    replicas: int
    max_unavailable: int


@dataclass(frozen=True)
class RolloutPlan:
    """The batches a rollout of ``image`` would run (``rocmfleet plan --image``), computed as
    ``rocmfleet rollout --dry`` computes them (:func:`rocmfleet.fleet.rollout.rolloutplan.plan`).

    Attributes:
        image: ``--image`` as given; ``digest``: its digest when given in it, else what says why not
            (the plan does not connect to the registry).
        group, pin_file: ``--group`` (``None``: the fleet-wide pin) and the group data file the
            rollout would pin the image in.
        hosts: the hosts that would switch (every host of the group or fleet but those whose image
            is pinned elsewhere: what a host runs is not known offline), inventory order.
        canary: how the canary is chosen (``1 replica(s) of each service``, ``group canary``);
            ``canary_hosts``: its hosts.
        services: each service's replicas and bound; ``batches``: the hosts of each batch, canary
            first; ``canary_batches``: how many of the first batches are the canary.
        lines: the plan as ``rollout --dry`` prints it (each host left out, pinned elsewhere; the
            services, the canary, the batches).
    """

    image: str
    digest: str
    group: str | None
    pin_file: str
    hosts: tuple[str, ...]
    canary: str
    canary_hosts: tuple[str, ...]
    services: tuple[ServiceBound, ...]
    batches: tuple[tuple[str, ...], ...]
    canary_batches: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class FilePlan:
    """A file as the deploy leaves it.

    Attributes:
        path: absolute path on the host.
        role: the role that writes it.
        mode: octal digits; ``None``: left alone.
        user, group: owner; ``None``: left alone.
        content: its text; ``None`` when not known offline (see ``source``) or secret.
        source: ``rendered`` (``content`` is what the deploy writes), ``secret`` (values never shown:
            ``secret_names`` lists the variables) or where the deploy gets it (``fetched from URL``).
        secret_names: names of the secret variables in a secrets file (sorted).
    """

    path: str
    role: Role
    mode: str | None
    user: str | None
    group: str | None
    content: str | None
    source: str = "rendered"
    secret_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class DirectoryPlan:
    """A directory the deploy creates: path, mode and owner (``None``: left alone)."""

    path: str
    role: Role
    mode: str | None
    user: str | None
    group: str | None


@dataclass(frozen=True)
class PackagePlan:
    """A package the deploy installs: its version (``*``: any; a glob; or ``the version of URL``: what
    that repository offers, known only on the host) and whether it is held (``apt-mark hold``)."""

    name: str
    role: Role
    version: str
    held: bool = False


@dataclass(frozen=True)
class UnitPlan:
    """A systemd unit as the deploy leaves it: ``running`` (``None``: left alone) and ``enabled``."""

    unit: str
    role: Role
    running: bool | None
    enabled: bool


@dataclass(frozen=True)
class ContainerPlan:
    """A container a unit runs: name, image reference and the instance it serves."""

    name: str
    image: str
    instance: str


@dataclass(frozen=True)
class InstancePlan:
    """One vLLM instance of a host, as placed on the plan's topology and rendered.

    Attributes:
        name, service: the instance and the service it is a replica of.
        port, internal_ports: its API port and its internal port block (``start-end``).
        gpus, render_nodes: KFD GPU indices and their ``/dev/dri/renderD*``.
        cpuset_cpus, cpuset_mems: the CPU binding (``""``: none), from the GPUs' NUMA nodes.
        unit, unit_path, container, env_file, secrets_file: names and paths on the host.
        unit_text, env_text: the rendered unit and environment file (what the deploy writes).
        serve_argv: ``vllm serve`` and its arguments.
        notes: what placement says of it (a missing NUMA node, ...).
    """

    name: str
    service: str
    port: int
    internal_ports: str
    gpus: tuple[int, ...]
    render_nodes: tuple[str, ...]
    cpuset_cpus: str
    cpuset_mems: str
    unit: str
    unit_path: str
    container: str
    env_file: str
    secrets_file: str
    unit_text: str
    env_text: str
    serve_argv: tuple[str, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Removal:
    """A path the deploy removes (or keeps absent), the role and why."""

    path: str
    role: Role
    why: str


@dataclass(frozen=True)
class ReadyTarget:
    """What the deploy waits for after a start: ``GET /health`` then the profile's probe request on
    ``port`` (``vllm-probe.sh ready PORT CONTAINER probe...``)."""

    instance: str
    port: int
    container: str
    probe: tuple[str, ...]


@dataclass(frozen=True)
class HostPlan:
    """Everything the deploy leaves on one host, every role, in the deploy's role order.

    Attributes:
        name, groups: the host and its inventory groups (sorted).
        topology_source: where its topology came from; ``assumed``: facts taken as defaults.
        problem: why no instance is placed (``""``: all placed).
        expect: the values the checks expect (``sysctl kernel.numa_balancing``, ``kernel cmdline``, ...).
        checks: what ``rocmfleet check``'s live checks compare with (:class:`CheckValues`; ``None``:
            a plan made without them).
    """

    name: str
    groups: tuple[str, ...]
    topology_source: str
    assumed: tuple[str, ...]
    problem: str
    files: tuple[FilePlan, ...]
    directories: tuple[DirectoryPlan, ...]
    packages: tuple[PackagePlan, ...]
    units: tuple[UnitPlan, ...]
    containers: tuple[ContainerPlan, ...]
    instances: tuple[InstancePlan, ...]
    ports: tuple[int, ...]
    removals: tuple[Removal, ...]
    reboot_reasons: tuple[str, ...]
    readiness: tuple[ReadyTarget, ...]
    expect: tuple[tuple[str, str], ...] = field(default=())
    checks: CheckValues | None = field(default=None, hash=False)


@dataclass(frozen=True)
class FleetPlan:
    """The services of a site (sorted by name), the plan of each host (in inventory order) and, with
    ``rocmfleet plan --image``, the rollout's batches (``None``: no rollout planned)."""

    services: tuple[ServicePlan, ...]
    hosts: tuple[HostPlan, ...]
    rollout: RolloutPlan | None = None


#: Text fields held once in the JSON's ``contents`` (by SHA-256), named by ``<field>_sha256`` where they were.
_SHARED_TEXT = {"content": "content_sha256", "unit_text": "unit_sha256", "env_text": "env_sha256"}
#: Containers nested this deep or less get a line per item in the JSON; deeper ones (a file, a
#: package, a replica) are one line each: a change shows as the lines of the items it changes.
_EXPANDED_DEPTH = 3


class _Plain:
    """Converts a plan to JSON-ready data, once per shared part: hosts of one kind share their
    items' tuples (:func:`rocmfleet.plan.build.plan_fleet`), converted and emitted once."""

    def __init__(self) -> None:
        self.contents: dict[str, str] = {}
        self.memo: dict[int, tuple[object, object]] = {}  # id -> (the original, kept alive; its data)
        self.emitted: dict[int, str] = {}

    def data(self, value: object) -> object:
        """``value`` as JSON-ready data: dataclasses as objects, tuples as lists, ``expect`` pairs as
        an object, each shared text (:data:`_SHARED_TEXT`) moved into ``contents``."""
        if isinstance(value, tuple) and value:
            known = self.memo.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            converted: object = [self.data(v) for v in value]
            self.memo[id(value)] = (value, converted)
            return converted
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            data: dict[str, object] = {}
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if f.name in _SHARED_TEXT and isinstance(item, str):
                    digest = hashlib.sha256(item.encode()).hexdigest()
                    self.contents[digest] = item
                    data[_SHARED_TEXT[f.name]] = digest
                elif f.name == "expect":
                    data[f.name] = dict(item)
                else:
                    data[f.name] = self.data(item)
            return data
        if isinstance(value, tuple | list):
            return [self.data(v) for v in value]
        return value

    def emit(self, value: object, depth: int = 0) -> str:
        """``value`` (JSON-ready) as JSON text at ``depth``: containers down to :data:`_EXPANDED_DEPTH`
        one item per line (indent 1), deeper ones on one line; keys sorted."""
        if depth > _EXPANDED_DEPTH or not isinstance(value, dict | list) or not value:
            return json.dumps(value, sort_keys=True, ensure_ascii=False)
        if (done := self.emitted.get(id(value))) is not None:
            return done
        pad = " " * (depth + 1)
        if isinstance(value, dict):
            items = [
                f"{pad}{json.dumps(k, ensure_ascii=False)}: {self.emit(value[k], depth + 1)}" for k in sorted(value)
            ]
            text = "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
        else:
            text = "[\n" + ",\n".join(pad + self.emit(v, depth + 1) for v in value) + "\n" + " " * depth + "]"
        if isinstance(value, list):  # the shared ones: a memoised tuple's list
            self.emitted[id(value)] = text
        return text


def to_dict(plan: FleetPlan | HostPlan) -> dict[str, object]:
    """``plan`` as JSON-ready data: its fields, and ``contents``: ``{SHA-256: text}`` of every file's
    content and every instance's unit and environment file, each text once however many hosts hold
    it (a file's ``content`` is its ``content_sha256`` there; ``None``: not known offline or secret).
    A 2,000-host fleet of a few kinds of host holds a few dozen texts, and a change to one shows once."""
    plain = _Plain()
    data = plain.data(plan)
    assert isinstance(data, dict)
    data["contents"] = plain.contents
    return data


def to_json(plan: FleetPlan | HostPlan) -> str:
    """The stable JSON of ``plan`` (:func:`to_dict`; keys sorted, a line per item down to a file,
    package, unit or replica, each of those on one line; one trailing newline)."""
    plain = _Plain()
    data = plain.data(plan)
    assert isinstance(data, dict)
    data["contents"] = plain.contents
    return plain.emit(data) + "\n"


def _loaded(kind: type, data: object, contents: dict[str, str], where: str) -> object:
    """``data`` (a :func:`to_dict` object) as a ``kind`` dataclass: lists back to tuples, each
    ``<field>_sha256`` back to its text from ``contents``, ``expect`` back to pairs.

    Raises:
        ValueError: a key missing or unknown, or a SHA-256 ``contents`` lacks; names ``where``.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: an object for {kind.__name__}, not {type(data).__name__}")
    hints = [f.name for f in dataclasses.fields(kind)]
    stored = {_SHARED_TEXT.get(name, name): name for name in hints} | {name: name for name in hints}
    if unknown := sorted(set(data) - set(stored)):
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} of {kind.__name__}")
    values: dict[str, object] = {}
    for key, value in data.items():
        name = stored[key]
        if name in _SHARED_TEXT and key != name:  # a text by its SHA-256 (a None one stays under its name)
            if value not in contents:
                raise ValueError(f"{where}.{key}: {value} is not in the plan's contents")
            values[name] = contents[value]
        elif name == "expect":
            values[name] = tuple((str(k), str(v)) for k, v in sorted(dict(value).items()))
        elif name in _SINGLE.get(kind, {}) and value is not None:
            values[name] = _loaded(_SINGLE[kind][name], value, contents, f"{where}.{key}")
        elif name in _NESTED.get(kind, {}):
            inner = _NESTED[kind][name]
            values[name] = tuple(
                _loaded(inner, item, contents, f"{where}.{key}[{i}]") for i, item in enumerate(value or [])
            )
        elif isinstance(value, list):
            values[name] = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        else:
            values[name] = value
    try:
        return kind(**values)
    except TypeError as exc:  # a required field missing
        raise ValueError(f"{where}: {exc}") from None


#: The fields of a :class:`HostPlan` (and of what it holds) that are tuples of dataclasses.
_NESTED: dict[type, dict[str, type]] = {
    HostPlan: {
        "files": FilePlan,
        "directories": DirectoryPlan,
        "packages": PackagePlan,
        "units": UnitPlan,
        "containers": ContainerPlan,
        "instances": InstancePlan,
        "removals": Removal,
        "readiness": ReadyTarget,
    },
    CheckValues: {"instances": CheckInstance},
}
#: The fields that are one dataclass.
_SINGLE: dict[type, dict[str, type]] = {HostPlan: {"checks": CheckValues}}


def host_from_dict(data: object, where: str = "plan") -> HostPlan:
    """The :class:`HostPlan` that :func:`to_dict` of a host plan gave: ``host_from_dict(to_dict(p)) == p``.

    Args:
        data: ``to_dict(plan)`` (or ``json.loads(to_json(plan))``): the plan's fields and ``contents``.
        where: what to call ``data`` in an error (a file name).

    Raises:
        ValueError: not a host plan's data (a key missing or unknown, a text not in ``contents``),
            naming ``where`` and the key.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a host plan is a JSON object, not {type(data).__name__}")
    body = dict(data)
    contents = body.pop("contents", {})
    if not isinstance(contents, dict):
        raise ValueError(f"{where}.contents: an object of SHA-256 -> text, not {type(contents).__name__}")
    loaded = _loaded(HostPlan, body, contents, where)
    assert isinstance(loaded, HostPlan)
    return loaded


def host_from_json(text: str, where: str = "plan") -> HostPlan:
    """:func:`host_from_dict` of the JSON ``text`` (:func:`to_json` of a :class:`HostPlan`).

    Raises:
        ValueError: not JSON, or not a host plan's (see :func:`host_from_dict`).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON: {exc}") from None
    return host_from_dict(data, where)
