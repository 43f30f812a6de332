"""What the vllm role has to do on a host, from one ``HostState`` read (pure; ``roles/vllm`` acts on it).

The role reads the GPU topology and then, in one command, every file, unit, image and readiness
probe it manages (:func:`query`). Its items are those of the host's plan planned on that topology
(:func:`read_facts`; :func:`rocmfleet.plan.build.plan_host`, the vllm role's part:
directories, scripts, each instance's environment file, unit, secrets file and unit state), and
:func:`plan` says which drift from the read by the plan's one rule (:func:`rocmfleet.plan.drift.drift`;
a secrets file, which the plan knows by name, is compared with the content the deploy fills in).
An instance is *clean* when those items do not drift, its last good copies and ``serve.json``
hold what this run would keep, and it is serving (``vllm-probe.sh live``: its container holds the
port and ``/health`` answers 200; the known answer is asked after a change, not at every converge:
:func:`rocmfleet.domain.readiness.live_args`): the role then calls no operation for it. An instance
that is not serving goes through the operations, whose wait asks the full ready probe.
Anything not proven clean (no topology yet, a placement that fails, an item the read could not
see) goes through the role's operations, which read and decide at execution as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rocmfleet.config.instances import Instance
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import hfmodel, readiness, vllm, vllmfiles
from rocmfleet.domain.topology import Topology, TopologyParseError
from rocmfleet.facts import topology as topology_script
from rocmfleet.facts.state import Gathered
from rocmfleet.facts.topology import parse_fact_output
from rocmfleet.facts.vllm import UNIT_MARKER
from rocmfleet.plan import hoststate
from rocmfleet.plan.drift import Wanted, WantedDir, WantedUnit, drift, file_wanted
from rocmfleet.plan.instance import (
    HostPlacement,
    instance_files,
    last_good_of,
    place_host,
    secrets_content,
    serve_record,
)
from rocmfleet.plan.model import DirectoryPlan, FilePlan, HostPlan, UnitPlan
from rocmfleet.plan.sources import HostFacts
from rocmfleet.plan.vllmitems import directories as directories
from rocmfleet.plan.vllmitems import script_files as script_files
from rocmfleet.plan.vllmitems import staging as staging
from rocmfleet.plan.wantedfile import WantedFile

#: The glob of the vLLM units rocmfleet may have made (:func:`rocmfleet.domain.vllmfiles.layout`).
UNIT_GLOB = vllmfiles.layout("*").unit_path
#: Device files whose group ids the containers are given (``rocmfleet.facts.devices.DeviceGroupIds``).
DEVICE_GLOB = "/dev/dri/renderD*"
#: Name of the GPU topology script's run in the ``HostState`` read (``rocmfleet.facts.topology.SCRIPT``).
TOPOLOGY_RUN = "gpu-topology"
#: ``HostFacts.source`` of a plan made on a host's read (``rocmfleet.plan.hostdrift`` says the same).
READ_SOURCE = "read from the host"
#: Where the role installs the scripts its units run (``rocmfleet.domain.vllm.UNIT_SCRIPTS``).
SCRIPT_PATHS = tuple(f"{vllm.SCRIPT_DIR}/{name}" for name in vllm.UNIT_SCRIPTS)


def topology_of(got: Gathered) -> Topology | None | Literal["unknown"]:
    """The GPU topology from the ``HostState`` read (``None``: no KFD); ``"unknown"`` when the
    script did not run, timed out or printed what the ``GpuTopology`` parser refuses (the role then
    reads the fact itself, which reports the problem)."""
    ran = got.runs.get(TOPOLOGY_RUN)
    if ran is None or ran[0] != 0:
        return "unknown"
    try:
        return parse_fact_output(ran[1])
    except TopologyParseError:
        return "unknown"


def device_gids(got: Gathered) -> list[int]:
    """The group ids owning ``/dev/kfd`` and the render nodes, from the ``HostState`` read (as ``DeviceGroupIds``)."""
    return hoststate.gids(got, [vllm.KFD, *(p for p in got.paths if p.startswith("/dev/dri/renderD"))])


def wanted_instance(config: HostConfig, instance: Instance, placed: HostPlacement) -> list[Wanted]:
    """What the deploy leaves of ``instance``, for :func:`rocmfleet.plan.drift.drift`: its
    environment file and unit (:func:`rocmfleet.plan.instance.instance_files`), its secrets file
    and its unit running and enabled."""
    names = vllmfiles.files_of(instance)
    secrets = WantedFile(names.secrets_file, secrets_content(config).reveal().encode(), "600", "root", "root")
    return [*instance_files(config, instance, placed).files, secrets, WantedUnit(names.unit)]


def model_staged(staged: hfmodel.Staged | None, got: Gathered) -> bool:
    """Whether ``got`` (a read with :func:`query`'s paths) shows the model staged: its stamp a file and
    its snapshot (or branch ref) present, as ``model-stage.sh`` decides; ``True`` when there is nothing to stage."""
    if staged is None:
        return True
    stamp, present = got.paths.get(staged.stamp), got.paths.get(staged.present)
    return stamp is not None and stamp.type == "file" and present is not None and present.type != "missing"


def query(config: HostConfig) -> dict[str, object]:
    """Keyword arguments of the one ``HostState`` read the role makes (``rocmfleet.facts.state``)."""
    paths = [d[0] for d in directories(config)] + [f.path for f in script_files()]
    if staged := staging(config):
        paths += [staged.stamp, staged.present]
    for instance in config.instances():
        files = last_good_of(instance.name)
        paths += [*files.live.values(), *(files.saved(n) for n in files.live), files.serve_json]
    units = [vllmfiles.files_of(i).unit for i in config.instances()]
    ready = [(i.name, readiness.live_args(i.port, vllmfiles.files_of(i).container)) for i in config.instances()]
    return {
        "paths": [*paths, vllm.KFD],
        "globs": [DEVICE_GLOB],
        "units": units,
        "images": [config.image.reference],
        "marked": (UNIT_MARKER, [UNIT_GLOB]),
        "ready": ready,
        "runs": [(TOPOLOGY_RUN, topology_script.SCRIPT)],
    }


@dataclass
class VllmPlan:
    """What differs.

    Attributes:
        directories: the role's directories (plan items) to create or fix.
        scripts: the unit scripts (plan items, their content known) to install.
        orphans: instance names of rocmfleet's units the data no longer lists.
        dirty: instance names not clean (their operations run); all of them when the host has no
            usable placement yet.
        image_missing: the image is not on the host.
        model_missing: the profile's hub model is not staged in the host's cache (:func:`model_staged`).
        placed: the placement computed from the topology read (:func:`rocmfleet.plan.instance.place_host`),
            the line the host fails with, or ``None`` without a topology (placed at execution).
        why: ``{instance: [reasons]}`` (for tests and debugging).
    """

    directories: list[DirectoryPlan] = field(default_factory=list)
    scripts: list[FilePlan] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    dirty: list[str] = field(default_factory=list)
    image_missing: bool = True
    model_missing: bool = False
    placed: HostPlacement | str | None = None
    why: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing to do: no operation is needed."""
        return not (
            self.directories or self.scripts or self.orphans or self.dirty or self.image_missing or self.model_missing
        )


def read_facts(topology: Topology | None, got: Gathered) -> HostFacts:
    """What the vllm role's items are planned on: ``topology`` (the one the role reads when it runs,
    after any reboot; ``None``: no KFD) and the device nodes' group ids in ``got`` (the placement's
    ``DeviceGroupIds``; the OS is not read: no vllm item depends on it)."""
    return HostFacts(READ_SOURCE, topology, tuple(device_gids(got)), assumed=("os",))


def plan(
    config: HostConfig, items: HostPlan, topology: Topology | None, got: Gathered, host_name: str = ""
) -> VllmPlan:
    """Compare the vllm role's items of the host's plan with ``got`` by the plan's rule
    (:func:`rocmfleet.plan.drift.drift`).

    Args:
        config: the host's validated configuration.
        items: the vllm role's items (``drift.role_items(plan_host(..., read_facts(topology, got)), "vllm")``):
            directories, scripts, each placed instance's environment file and unit, secrets files
            (known by name: their content is filled in here from ``config``) and units.
        topology: the ``GpuTopology`` fact ``items`` were planned on (``None``: no KFD yet, e.g.
            before the driver's reboot): the placement the operations take.
        got: the ``HostState`` fact read with :func:`query`'s arguments.
        host_name: for placement messages.
    """
    drifted = {d.item for d in drift([WantedDir(d.path, d.mode, d.user, d.group) for d in items.directories], got)}
    scripts = set(SCRIPT_PATHS)
    result = VllmPlan(
        directories=[d for d in items.directories if d.path in drifted],
        image_missing=got.images.get(config.image.reference) is None,
        model_missing=not model_staged(staging(config), got),
    )
    result.scripts = [f for f in items.files if f.path in scripts and drift([file_wanted(f)], got)]
    keep = {i.name for i in config.instances()}
    managed = {vllmfiles.instance_of_unit(p) for p in got.marked.get(UNIT_GLOB, [])}
    result.orphans = sorted(managed - keep)
    if topology is not None:
        result.placed = place_host(config, topology, device_gids(got), host_name)
    placed = result.placed if isinstance(result.placed, HostPlacement) else None
    files = {f.path: f for f in items.files}
    units = {u.unit: u for u in items.units}
    secret = secrets_content(config).reveal().encode()
    for instance in config.instances():
        reasons = _instance_differs(config, instance, placed, files, units, secret, got)
        if reasons:
            result.dirty.append(instance.name)
            result.why[instance.name] = reasons
    return result


def dry_lines(todo: VllmPlan, image: str, staged: hfmodel.Staged | None = None) -> list[str]:
    """What ``--dry`` says of ``todo`` (the role prefixes each line with the host's ``[name]``): one
    line per dirty instance with its reasons joined by ``; ``, one per orphan, then one for the
    image when it is missing, one for the model when it is not staged and one for the role's
    directories and scripts to create or fix.

    Args:
        todo: :func:`plan`'s result.
        image: the pinned image reference (``config.image.reference``).
        staged: the model to stage (:func:`staging`), named in the model's line.

    Returns:
        the lines, in that order; none when ``todo`` is clean.
    """
    lines = [f"would change vllm instance {name}: {'; '.join(todo.why.get(name, []))}" for name in todo.dirty]
    lines += [f"would remove vllm instance {name} (no longer in the data)" for name in todo.orphans]
    if todo.image_missing:
        lines.append(f"would pull vllm image {image} (not on the host)")
    if todo.model_missing and staged is not None:
        lines.append(f"would stage model {staged.model}@{staged.revision} into {staged.cache_dir} (not staged)")
    paths = [d.path for d in todo.directories] + [f.path for f in todo.scripts]
    if paths:
        lines.append(f"would create or fix {', '.join(paths)} (vllm role)")
    return lines


def _instance_differs(
    config: HostConfig,
    instance: Instance,
    placed: HostPlacement | None,
    files: dict[str, FilePlan],
    units: dict[str, UnitPlan],
    secret: bytes,
    got: Gathered,
) -> list[str]:
    """Why ``instance`` is not clean (empty: clean), by the plan's rule: its environment file and
    unit as planned, its secrets file holding ``secret``, its unit's state as planned, its last good
    copies holding what the live files should and its ``serve.json`` what it runs; then whether it
    serves (a live read)."""
    names = vllmfiles.files_of(instance)
    env, unit = files.get(names.env_file), files.get(names.unit_path)
    if placed is None or env is None or unit is None or env.content is None or unit.content is None:
        return ["no placement before execution"]
    secrets = files[names.secrets_file]
    live: dict[str, WantedFile] = {
        "env": WantedFile(env.path, env.content.encode(), env.mode, env.user, env.group),
        "unit": WantedFile(unit.path, unit.content.encode(), unit.mode, unit.user, unit.group),
        "secrets": WantedFile(secrets.path, secret, secrets.mode, secrets.user, secrets.group),
    }
    wanted: list[Wanted] = [live["env"], live["unit"], live["secrets"]]
    if (state := units.get(names.unit)) is not None:
        wanted.append(WantedUnit(state.unit, state.running, state.enabled))
    reasons = [str(d) for d in drift(wanted, got)]
    copies = last_good_of(instance.name)
    # The last good copies hold what the live files should (rocmfleet.domain.lastgood: byte copies).
    saved = [WantedFile(copies.saved(n), live[n].content) for n in copies.live if n in live]
    if drift(saved, got):
        reasons.append("last good copies differ from the live files")
    record = serve_record(config, instance, placed.placements[instance.name])
    if drift([WantedFile(copies.serve_json, record.encode())], got):
        reasons.append("serve.json differs")
    if got.ready.get(instance.name) != 0:
        reasons.append(f"not serving (vllm-probe.sh live exit {got.ready.get(instance.name)})")
    return reasons


def plan_dict(config: HostConfig, todo: VllmPlan) -> dict[str, object]:
    """``todo`` as JSON-ready data, to print and to compare with a checked-in expectation
    (``tests/fixtures/plans/``): the placement, each instance's API and internal ports and files as
    rendered (the text of its environment file and unit; of its secrets file only the path and mode:
    secret values never leave the deploy) and why it is not clean, then the directories, scripts and
    orphans to fix.

    Args:
        config: the host's validated configuration (the one ``todo`` was planned from).
        todo: :func:`plan`'s result.
    """
    placed = todo.placed
    placement: object = placed
    if isinstance(placed, HostPlacement):
        placement = {
            "device_gids": placed.device_gids,
            "instances": {
                name: {
                    "gpus": list(p.gpus),
                    "gpu_bdfs": placed.gpu_bdfs.get(name, []),
                    "render_nodes": list(p.render_nodes),
                    "cpuset_cpus": p.cpuset_cpus,
                    "cpuset_mems": p.cpuset_mems,
                    "gfx_arch": p.gfx_arch,
                    "notes": list(p.notes),
                }
                for name, p in placed.placements.items()
            },
        }
    instances: dict[str, object] = {}
    for instance in config.instances():
        names = vllmfiles.files_of(instance)
        files: list[dict[str, object]] = []
        if isinstance(placed, HostPlacement):
            files = [
                {"path": f.path, "mode": f.mode, "user": f.user, "group": f.group, "text": f.content.decode()}
                for f in instance_files(config, instance, placed).files
            ]
        files.append({"path": names.secrets_file, "mode": "600", "user": "root", "group": "root"})
        instances[instance.name] = {
            "unit": names.unit,
            "container": names.container,
            "port": instance.port,
            "internal_ports": instance.internal_ports.spec(),
            "dirty": instance.name in todo.dirty,
            "why": todo.why.get(instance.name, []),
            "files": files,
        }
    return {
        "placed": placement,
        "instances": instances,
        "directories": [[d.path, d.mode, d.user, d.group] for d in todo.directories],
        "scripts": [f.path for f in todo.scripts],
        "orphans": todo.orphans,
        "image_missing": todo.image_missing,
        "model_missing": todo.model_missing,
        "clean": todo.clean,
    }
