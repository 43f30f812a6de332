"""What the vllm role has to do on a host, from one ``HostState`` read (pure; ``roles/vllm`` acts on it).

The role reads the GPU topology and then, in one command, every file, unit, image and readiness
probe it manages (:func:`query`); :func:`plan` says which of them differ from what the host's
data wants. An instance is *clean* when its environment file, unit, secrets file, last good copies
and ``serve.json`` hold what this run would write, its unit is active and enabled and it is
serving (``vllm-probe.sh live``: its container holds the port and ``/health`` answers 200; the
known answer is asked after a change, not at every converge:
:func:`rocmfleet.domain.readiness.live_args`): the role then calls no operation for it. An instance that
is not serving goes through the operations, whose wait asks the full ready probe.
Anything not proven clean (no topology yet, a placement that fails, an item the read could not
see) goes through the role's operations, which read and decide at execution as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rocmfleet.config.settings import HostConfig, Instance
from rocmfleet.config.vault import Secret
from rocmfleet.domain import readiness, vllm
from rocmfleet.domain.placement import Placement, PlacementError
from rocmfleet.domain.topology import Topology, TopologyParseError
from rocmfleet.facts import topology as topology_script
from rocmfleet.facts.state import Gathered
from rocmfleet.facts.topology import parse_fact_output
from rocmfleet.facts.vllm import UNIT_MARKER
from rocmfleet.fleet.rollout import swap as rollout
from rocmfleet.plan import hoststate
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.scripts import DIR as SCRIPTS_DIR

#: Where rocmfleet's vLLM units live, and the glob of those it may have made.
UNIT_DIR = "/etc/systemd/system"
UNIT_GLOB = f"{UNIT_DIR}/vllm-*.service"
#: Device files whose group ids the containers are given (``rocmfleet.facts.devices.DeviceGroupIds``).
DEVICE_GLOB = "/dev/dri/renderD*"
#: Name of the GPU topology script's run in the ``HostState`` read (``rocmfleet.facts.topology.SCRIPT``).
TOPOLOGY_RUN = "gpu-topology"


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


def directories(config: HostConfig) -> list[tuple[str, str, str | None, str | None]]:
    """``(path, mode, user, group)`` of the directories the role creates, in order."""
    settings = config.settings
    return [
        (vllm.CONFIG_DIR, "700", "root", "root"),
        (settings.vllm_cache_dir, "755", None, None),
        (settings.vllm_hf_cache_dir, "755", None, None),
        (vllm.SCRIPT_DIR, "755", "root", "root"),
    ]


def script_files() -> list[WantedFile]:
    """The scripts the units run, as ``files.put`` installs them (``rocmfleet.domain.vllm.UNIT_SCRIPTS``)."""
    return [
        WantedFile(f"{vllm.SCRIPT_DIR}/{name}", (SCRIPTS_DIR / name).read_bytes(), mode, "root", "root")
        for name, mode in vllm.UNIT_SCRIPTS.items()
    ]


def last_good_of(instance: Instance) -> rollout.LastGoodFiles:
    """The instance's live files and its last good directory (as ``roles/vllm`` names them)."""
    names = vllm.files_of(instance)
    return rollout.last_good_files(
        vllm.CONFIG_DIR, instance.name, f"{UNIT_DIR}/{names.unit}", names.env_file, names.secrets_file
    )


def secrets_content(config: HostConfig) -> Secret:
    """The secrets file of every instance (``vllm_secret_env`` as ``NAME=value`` lines)."""
    values = {name: secret.reveal() for name, secret in config.settings.vllm_secret_env.items()}
    return Secret(vllm.env_lines(values))


def instance_files(
    config: HostConfig, instance: Instance, placement: Placement, topology: Topology, device_gids: list[int]
) -> list[WantedFile]:
    """The environment file and unit of ``instance`` as ``rocmfleet.operations.vllm.instance_files``
    renders them (``templates/vllm/``), locally."""
    names = vllm.files_of(instance)
    by_index = {g.index: g.pci_address for g in topology.gpus}
    bdfs = [by_index[i] for i in placement.gpus if i in by_index]
    env = hoststate.render(
        "templates/vllm/vllm.env.j2",
        instance=instance.name,
        env_lines=vllm.env_lines(vllm.container_env(config, placement)).rstrip("\n"),
    )
    unit = hoststate.render(
        "templates/vllm/vllm.service.j2", **vllm.unit_template_vars(config, instance, placement, device_gids, bdfs)
    )
    return [
        WantedFile(names.env_file, env.encode(), "600", "root", "root"),
        WantedFile(f"{UNIT_DIR}/{names.unit}", unit.encode(), "644"),
    ]


def query(config: HostConfig) -> dict[str, object]:
    """Keyword arguments of the one ``HostState`` read the role makes (``rocmfleet.facts.state``)."""
    paths = [d[0] for d in directories(config)] + [f.path for f in script_files()]
    for instance in config.instances():
        files = last_good_of(instance)
        paths += [*files.live.values(), *(files.saved(n) for n in files.live), files.serve_json]
    units = [vllm.files_of(i).unit for i in config.instances()]
    ready = [(i.name, readiness.live_args(i.port, vllm.files_of(i).container)) for i in config.instances()]
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
        directories: ``(path, mode, user, group)`` to create or fix.
        scripts: unit scripts (``WantedFile``) to install.
        orphans: instance names of rocmfleet's units the data no longer lists.
        dirty: instance names not clean (their operations run); all of them when the host has no
            usable placement yet.
        image_missing: the image is not on the host.
        placed: a placement was computed from the topology read.
        why: ``{instance: [reasons]}`` (for tests and debugging).
    """

    directories: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    scripts: list[WantedFile] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    dirty: list[str] = field(default_factory=list)
    image_missing: bool = True
    placed: bool = False
    why: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing to do: no operation is needed."""
        return not (self.directories or self.scripts or self.orphans or self.dirty or self.image_missing)


def plan(config: HostConfig, topology: Topology | None, got: Gathered, host_name: str = "") -> VllmPlan:
    """Compare what ``config`` wants with ``got`` (the read :func:`query` describes).

    Args:
        config: the host's validated configuration.
        topology: the ``GpuTopology`` fact (``None``: no KFD yet, e.g. before the driver's reboot).
        got: the ``HostState`` fact read with :func:`query`'s arguments.
        host_name: for placement messages.
    """
    result = VllmPlan(
        directories=[d for d in directories(config) if not hoststate.dir_ok(got, *d)],
        scripts=[f for f in script_files() if not hoststate.file_ok(got, f)],
        image_missing=got.images.get(config.image.reference) is None,
    )
    keep = {i.name for i in config.instances()}
    managed = {
        p.rsplit("/", 1)[-1].removesuffix(".service").removeprefix("vllm-") for p in got.marked.get(UNIT_GLOB, [])
    }
    result.orphans = sorted(managed - keep)
    placements: dict[str, Placement] = {}
    if topology is not None:
        try:
            placements = vllm.placements(config, topology, host_name)
            result.placed = True
        except PlacementError:
            placements = {}
    device_gids = hoststate.gids(got, [vllm.KFD, *(p for p in got.paths if p.startswith("/dev/dri/renderD"))])
    secrets = secrets_content(config).reveal().encode()
    for instance in config.instances():
        reasons = _instance_differs(
            config, instance, placements.get(instance.name), topology, device_gids, got, secrets
        )
        if reasons:
            result.dirty.append(instance.name)
            result.why[instance.name] = reasons
    return result


def _instance_differs(
    config: HostConfig,
    instance: Instance,
    placement: Placement | None,
    topology: Topology | None,
    device_gids: list[int],
    got: Gathered,
    secrets: bytes,
) -> list[str]:
    """Why ``instance`` is not clean (empty: clean)."""
    if placement is None or topology is None:
        return ["no placement before execution"]
    names = vllm.files_of(instance)
    wanted = instance_files(config, instance, placement, topology, device_gids)
    reasons = [f"{f.path} differs" for f in wanted if not hoststate.file_ok(got, f)]
    if not hoststate.file_ok(got, WantedFile(names.secrets_file, secrets, "600", "root", "root")):
        reasons.append(f"{names.secrets_file} differs")
    files = last_good_of(instance)
    if not all(hoststate.same_content(got, live, files.saved(n)) for n, live in files.live.items()):
        reasons.append("last good copies differ from the live files")
    record = rollout.serve_record(
        config.image.reference, vllm.serve_args(config, instance), vllm.container_env(config, placement)
    )
    if not hoststate.sha256_is(got, files.serve_json, record.encode()):
        reasons.append("serve.json differs")
    if not hoststate.unit_running_enabled(got, names.unit):
        reasons.append(f"{names.unit} not active and enabled")
    if got.ready.get(instance.name) != 0:
        reasons.append(f"not serving (vllm-probe.sh live exit {got.ready.get(instance.name)})")
    return reasons
