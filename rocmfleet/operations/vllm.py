"""Operations for vLLM servers: placement, files, orphans, readiness, the argument check before a
swap, roll back, last good versions.

The order that keeps a failed new version from leaving an instance broken is in
:mod:`rocmfleet.fleet.rollout.swap`; ``roles/vllm`` calls these operations in that order.

Placement needs the host's GPU topology, which a bare host only has after the driver is
installed and the host rebooted, later in the same run. So nothing is placed while pyinfra
prepares the run: the operations that need a placement compute it when they execute
(:func:`host_placement`, once per host and run), and a host whose topology is missing or does
not fit fails alone with one line saying why (:mod:`rocmfleet.operations.fail`).
"""

from __future__ import annotations

import json
import shlex
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pyinfra import host, state
from pyinfra.api import StringCommand, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import files as file_ops

from rocmfleet.config.settings import HostConfig, Instance
from rocmfleet.domain import cachedirs, cachekey, vllm
from rocmfleet.domain.placement import Placement, PlacementError
from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.facts.docker import ImageLabels
from rocmfleet.facts.rollout import LastGood
from rocmfleet.facts.topology import GpuTopology
from rocmfleet.facts.vllm import ManagedInstances, PortOwner, VllmReady
from rocmfleet.fleet.rollout import swap as rollout
from rocmfleet.operations import this_run
from rocmfleet.operations.fail import host_failure

#: Why a host that shows no KFD topology when the vllm role runs (after any reboot) fails.
NO_KFD = (
    "no GPUs in /sys/class/kfd after the driver install and reboot: amdgpu is not loaded or found no GPU "
    "(see `dmesg | grep -i amdgpu` and `dkms status`); no vLLM instance was placed"
)


@dataclass(frozen=True)
class HostPlacement:
    """Where each instance of a host runs, from the topology the host shows at execution.

    Attributes:
        placements: ``{instance name: Placement}`` (:func:`rocmfleet.domain.vllm.placements`).
        device_gids: numeric group ids owning ``/dev/kfd`` and the render nodes (``DeviceGroupIds``).
    """

    placements: dict[str, Placement]
    device_gids: list[int]


#: Placements computed while executing, per run (pyinfra's ``State``) and host name: the topology
#: does not change after the reboot, so one fact read serves every operation of the role.
_EXECUTED: weakref.WeakKeyDictionary[object, dict[str, HostPlacement | str]] = weakref.WeakKeyDictionary()


def host_placement(config: HostConfig) -> HostPlacement | str | None:
    """This host's :class:`HostPlacement`, or why there is none.

    Returns:
        the placement; a one-line reason (``str``) when the host has no KFD topology at execution
        or its instances do not fit its GPUs; ``None`` while pyinfra prepares the run and the
        host has no topology yet (a bare host before the driver's reboot: placed at execution).
    """
    run = _EXECUTED.setdefault(this_run(state), {})
    if state.is_executing and host.name in run:
        return run[host.name]
    result: HostPlacement | str | None
    try:
        topology = host.get_fact(GpuTopology)
        if topology is None:
            result = f"rocmfleet: {NO_KFD}" if state.is_executing else None
        else:
            result = HostPlacement(vllm.placements(config, topology, host.name), host.get_fact(DeviceGroupIds))
    except PlacementError as exc:
        result = f"rocmfleet: placement: {exc}"
    except PyinfraError as exc:
        result = f"rocmfleet: could not read the GPU topology: {exc}"
    if state.is_executing and result is not None:
        run[host.name] = result
    return result


def _instance(config: HostConfig, name: str) -> Instance:
    return next(i for i in config.instances() if i.name == name)


@operation()
def place(config: HostConfig):
    """
    Place the host's vLLM instances on the GPUs and NUMA nodes it shows now; fail the host if it
    cannot.

    + config: the host's validated configuration

    A no-op that says where each instance goes. While preparing a bare host (no KFD topology
    yet) it says placement waits for the driver; at execution a host without KFD, or whose
    instances do not fit, fails with the reason.

    **Example:**

    .. code:: python

        vllm.place(name="Place the vLLM instances on this host's GPUs", config=config)
    """
    placed = host_placement(config)
    if placed is None:
        host.noop("the GPU topology is read after the driver is installed and the host rebooted")
        return
    if isinstance(placed, str):
        yield host_failure(placed)
        return
    host.noop("; ".join(f"{name}: {', '.join(p.notes)}" for name, p in placed.placements.items()))


@operation()
def instance_files(config: HostConfig, instance: str, unit_path: str):
    """
    Render one instance's environment file and systemd unit from its placement on this host.

    + config: the host's validated configuration
    + instance: instance name
    + unit_path: where the unit goes (``/etc/systemd/system/vllm-<instance>.service``)

    Both files come from ``templates/vllm/`` (``files.template``), rendered at execution with
    the placement :func:`host_placement` computed, so that a bare host gets the topology it
    shows after the driver's reboot. A no-op when both files are up to date. The unit runs
    ``rocmfleet.domain.vllm.UNIT_SCRIPT`` (installed by ``roles/vllm``) with the GPUs' PCI addresses for
    the GPU memory check and the timings of ``rocmfleet.domain.vllm.unit_timings``.
    """
    placed = host_placement(config)
    if not isinstance(placed, HostPlacement):
        host.noop(f"{instance}: rendered once the host's GPU topology is known")
        return
    inst = _instance(config, instance)
    names = vllm.files_of(inst)
    placement = placed.placements[instance]
    yield from file_ops.template._inner(
        src="templates/vllm/vllm.env.j2",
        dest=names.env_file,
        user="root",
        group="root",
        mode="600",
        instance=instance,
        env_lines=vllm.env_lines(vllm.container_env(config, placement)).rstrip("\n"),
    )
    yield from file_ops.template._inner(
        src="templates/vllm/vllm.service.j2",
        dest=unit_path,
        mode="644",
        **vllm.unit_template_vars(config, inst, placement, placed.device_gids, _gpu_bdfs(placement)),
    )


def _gpu_bdfs(placement: Placement) -> list[str]:
    """PCI addresses of the placement's GPUs, from the host's topology (cached fact)."""
    topology = host.get_fact(GpuTopology)
    by_index = {g.index: g.pci_address for g in topology.gpus} if topology else {}
    return [by_index[i] for i in placement.gpus if i in by_index]


@operation()
def remove_orphans(keep: Sequence[str]):
    """
    Stop and remove the vLLM instances rocmfleet made on this host that the data no longer names.

    + keep: the instance names the host's data lists

    An instance is rocmfleet's when its unit file starts with the marker line of
    ``templates/vllm/vllm.service.j2`` (``ManagedInstances``); units without it are never
    touched. Each orphan is stopped and disabled, its container removed, its unit, environment
    and secrets files and last good copy deleted; then systemd reloads. Run it before new
    instances start, so that a renamed instance's old unit frees its GPUs and port first.

    **Example:**

    .. code:: python

        vllm.remove_orphans(name="Remove vLLM instances the data no longer lists", keep=["a", "b"])
    """
    orphans = sorted(set(host.get_fact(ManagedInstances)) - set(keep))
    if not orphans:
        host.noop("no vLLM instance of rocmfleet's besides those listed")
        return
    for name in orphans:
        unit, container = f"vllm-{name}.service", f"vllm-{name}"
        yield StringCommand("systemctl", "disable", "--now", unit)
        yield StringCommand(f"docker rm --force {container} >/dev/null 2>&1 || true")
        yield StringCommand(
            "rm", "-rf", f"/etc/systemd/system/{unit}", f"{vllm.CONFIG_DIR}/{name}.env",
            f"{vllm.CONFIG_DIR}/{name}.secrets", f"{vllm.CONFIG_DIR}/{name}.last-good",
        )  # fmt: skip
        yield StringCommand(f"systemctl reset-failed {unit} 2>/dev/null || true")
    yield StringCommand("systemctl", "daemon-reload")


@operation()
def clear_start_limit(unit: str):
    """
    Reset a unit's failed state and start rate limit (``systemctl reset-failed``).

    + unit: ``vllm-<instance>.service``

    Three quick failures leave a vLLM unit failed with ``start-limit-hit`` until the interval
    passes (``templates/vllm/vllm.service.j2``); run this when its files changed, so that the new
    version may start at once, and when the unit is not running, so that the deploy's start is not
    refused ("start of the service was attempted too often"). Harmless on a running unit.
    """
    yield StringCommand(f"systemctl reset-failed {shlex.quote(unit)} 2>/dev/null || true")


@operation()
def port_is_ours(instance: str, port: int, container: str):
    """
    Fail the host when a process other than the instance's own container listens on its port.

    + instance: instance name
    + port: its API port
    + container: its container (``vllm-<instance>``)

    A no-op when the port is free or held by the container (``PortOwner``). Otherwise the new
    server could never bind it, and a readiness probe of the port would ask the stranger.
    """
    owner = host.get_fact(PortOwner, port=port, container=container)
    if owner in ("free", "ours"):
        host.noop(f"port {port}: {owner}")
        return
    yield host_failure(
        f"rocmfleet: port {port} of vLLM instance {instance} is held by {owner.removeprefix('other ')} "
        f"(pid, command), not by its container {container}; stop that process or give the instance another port"
    )


@operation()
def serve_args_check(config: HostConfig, instance: str, last_good: rollout.LastGoodFiles):
    """
    Check ``vllm serve`` arguments with the image's own vLLM argument parser; fail the host if it
    rejects them.

    + config: the host's validated configuration: the image the instance is about to run (pulled
      already; by digest), its ``vllm serve`` arguments (``rocmfleet.domain.vllm.serve_args``)
    + instance: instance name (for messages and the check container's label)
    + last_good: its files (``rocmfleet.fleet.rollout.swap.last_good_files``)

    The container environment without secrets (``rocmfleet.domain.vllm.container_env``) depends on the
    placement, so the check runs once the host's topology is known (:func:`host_placement`).

    Runs ``python3`` in a throw-away container of ``image`` without devices or network
    (``rocmfleet.fleet.rollout.swap.serve_args_check_argv``): argparse's ``error: ...`` or vLLM's failed check
    fails the host before the running container is touched. A no-op when the instance's last good
    version (``serve.json``) already ran exactly this image, these arguments and this environment.

    **Example:**

    .. code:: python

        vllm.serve_args_check(
            name="Check vllm serve arguments of vllm-a",
            config=config,
            instance="a",
            last_good=rollout.last_good_files("/etc/rocmfleet/vllm", "a", unit, env_file, secrets_file),
        )
    """
    placed = host_placement(config)
    if not isinstance(placed, HostPlacement):
        host.noop(f"{instance}: checked once the host's GPU topology is known")
        return
    image, serve_args = config.image.reference, vllm.serve_args(config, _instance(config, instance))
    env = vllm.container_env(config, placed.placements[instance])
    record = rollout.serve_record(image, serve_args, env)
    saved = host.get_fact(LastGood, files=last_good)
    if saved.serve == json.loads(record):
        host.noop(f"{instance}: its last good version ran these vllm serve arguments on this image")
        return
    yield StringCommand(rollout.serve_args_check_script(image, serve_args, env, instance))


@operation()
def ready_or_roll_back(targets: Sequence[rollout.WaitTarget], timeout_s: int = 1800, rollback_timeout_s: int = 1800):
    """
    Wait until every instance is ready; roll back each one that is not by the deadline, and fail the host.

    + targets: the host's instances (``rocmfleet.fleet.rollout.swap.WaitTarget``; ``roll_back_to`` is
      filled in here, from the host)
    + timeout_s: deadline for new versions, seconds (model load and compilation take minutes)
    + rollback_timeout_s: deadline for a restored version to be ready again, seconds

    Instances that are ready (with the profile's known answer, ``WaitTarget.ready_probe``) are left
    alone; when all are, this is a no-op. An instance not ready by the deadline, or that answers the
    known-answer request wrongly, whose live files differ from a complete last good version gets those files
    back, a ``daemon-reload`` and a restart, and the operation waits for it to be ready again. The
    host fails in either case, with the new container's last log lines and, for each instance
    rolled back, which image it went back to (``rocmfleet.fleet.rollout.swap.wait_or_roll_back_script``).
    Wait for all instances in one operation: a failed operation stops the host, so a per-instance
    operation would leave the instances after the first failure unrolled.

    **Example:**

    .. code:: python

        vllm.ready_or_roll_back(name="Wait until vLLM is ready", targets=[target_a, target_b], timeout_s=1800)
    """
    waiting = [
        t
        for t in targets
        if not host.get_fact(VllmReady, port=t.port, model=t.model, container=t.container, ready_probe=t.ready_probe)
    ]
    if not waiting:
        host.noop(f"vLLM instances {', '.join(t.name for t in targets)} are ready")
        return
    planned = []
    for target in waiting:
        saved = host.get_fact(LastGood, files=target.files)
        back = saved.image if saved.complete and not saved.same else None
        port, model = saved.served if back else (None, None)  # what the restored version serves
        planned.append(
            replace(
                target,
                roll_back_to=back,
                back_port=port if port != target.port else None,
                back_model=model if model != target.model else None,
            )
        )
    wait = rollout.wait_or_roll_back_script(planned, timeout_s, rollback_timeout_s)
    yield StringCommand(wait.command, _stdin=wait.stdin)  # the targets on stdin: any number fits


@operation()
def last_good(config: HostConfig, instance: str, files: rollout.LastGoodFiles):
    """
    Keep the instance's live files as its last good version (it is ready with them).

    + config: the host's validated configuration (what the instance runs: image, ``vllm serve``
      arguments, environment; its port and served model name, to confirm it is ready)
    + instance: instance name
    + files: its live files and last good directory (``rocmfleet.fleet.rollout.swap.last_good_files``)

    Run it after the instance was found ready (``ready_or_roll_back``). A no-op when the copies
    and ``serve.json`` already match. The copies are made on the host (secrets are never printed).

    **Example:**

    .. code:: python

        vllm.last_good(name="Keep vllm-a as last good", config=config, instance="a", files=files)
    """
    placed = host_placement(config)
    if not isinstance(placed, HostPlacement):
        host.noop(f"{instance}: kept once the host's GPU topology is known")
        return
    inst = _instance(config, instance)
    port, model, container = inst.port, config.profile.served_model_name, vllm.files_of(inst).container
    record = rollout.serve_record(
        config.image.reference, vllm.serve_args(config, inst), vllm.container_env(config, placed.placements[instance])
    )
    saved = host.get_fact(LastGood, files=files)
    if saved.same and saved.serve == json.loads(record):
        host.noop(f"{instance}: its last good version is the running one")
        return
    probe = config.profile.ready_probe
    if state.is_executing and not host.get_fact(
        VllmReady, port=port, model=model, container=container, ready_probe=probe
    ):
        yield host_failure(
            f"rocmfleet: {instance}: not ready on port {port}; its files are not kept as the last good version"
        )
        return
    yield StringCommand(rollout.save_last_good_script(files, record))


@operation()
def baked_cache_matches(config: HostConfig):
    """
    Fail the host when its image is a baked compile-cache image (``rocmfleet cache bake``) whose
    cache key differs from what this host's instances would compile, naming the field.

    + config: the host's validated configuration (the image, after it was pulled)

    A no-op for an image that is not baked (its tag has no ``-rfcache-`` key) and for a baked one
    whose key matches (``rocmfleet.domain.cachekey.refusal``, with the GPU architecture of this host's
    placement). Runs before any file is written, so a mismatched cache never reaches a unit.
    """
    if not cachedirs.is_baked(config):
        host.noop("not a baked compile-cache image")
        return
    placed = host_placement(config)
    if not isinstance(placed, HostPlacement):
        host.noop("checked once the host's GPU topology is known")
        return
    arch = next((p.gfx_arch for p in placed.placements.values() if p.gfx_arch), "")
    labels = host.get_fact(ImageLabels, image=config.image.reference)
    problems = cachekey.refusal(config.image.reference, labels, config, arch)
    if problems:
        yield host_failure("rocmfleet: " + "; ".join(problems))
        return
    host.noop(f"baked cache key matches ({arch})")
