"""Operations for vLLM servers: placement, files, orphans, readiness, the argument check before a
swap, roll back, last good versions.

The order that keeps a failed new version from leaving an instance broken is in
:mod:`rocmfleet.plan.swap`; ``roles/vllm`` calls these operations in that order.

Placement needs the host's GPU topology, which a bare host only has after the driver is
installed and the host rebooted, later in the same run. So the operations that need a placement
take a :class:`Placed`: while pyinfra prepares the run it holds the placement the role planned from
its ``HostState`` read (none on a bare host), and when the first of them executes it reads the
topology the host shows then and places the instances with the same pure function
(:func:`rocmfleet.plan.instance.place_host`), once per host and run. A host whose topology is
missing or does not fit fails alone with one line saying why (:mod:`rocmfleet.operations.fail`).
A converged host calls none of these operations.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Generator, Sequence
from dataclasses import replace
from io import StringIO

from pyinfra import logger
from pyinfra.api.command import PyinfraCommand, StringCommand
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operation import operation
from pyinfra.context import host, state
from pyinfra.operations import files as file_ops

from rocmfleet import scripts
from rocmfleet.config.instances import Instance
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import cachedirs, cachekey, cacheproof, hfmodel, lastgood, vllm, vllmfiles
from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.facts.docker import ImageLabels
from rocmfleet.facts.rollout import LastGood
from rocmfleet.facts.topology import GpuTopology
from rocmfleet.facts.vllm import CacheProof, ManagedInstances, PortOwner, VllmReady
from rocmfleet.operations.fail import host_failure
from rocmfleet.plan import instance as plan_instance
from rocmfleet.plan import swap as rollout
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.plan.instance import NO_KFD, HostPlacement

__all__ = ["NO_KFD", "Commands", "HostPlacement", "Placed"]

#: What an operation function yields (``@operation`` takes a generator).
Commands = Generator[str | PyinfraCommand, None, None]


class Placed:
    """One host's placement for the vllm role's operations, made by the role per host and run.

    Args:
        config: the host's validated configuration.
        planned: what the role planned while preparing (``rocmfleet.plan.vllmplan.VllmPlan.placed``):
            the placement, the line the host fails with, or ``None`` (no topology yet: a bare host).
    """

    def __init__(self, config: HostConfig, planned: HostPlacement | str | None = None) -> None:
        self.config = config
        self.planned = planned
        self._executed: HostPlacement | str | None = None

    def now(self) -> HostPlacement | str | None:
        """The placement the operations use now.

        Returns:
            while preparing, :attr:`planned`; at execution, the placement from the ``GpuTopology``
            and ``DeviceGroupIds`` facts the host shows then (read at the first call, kept after: the
            topology does not change after the driver's reboot), or the one line the host fails with.
        """
        if not state.is_executing:
            return self.planned
        if self._executed is None:
            try:
                self._executed = plan_instance.place_host(
                    self.config, host.get_fact(GpuTopology), host.get_fact(DeviceGroupIds), host.name
                )
            except PyinfraError as exc:
                self._executed = f"rocmfleet: could not read the GPU topology: {exc}"
        return self._executed


def _now(config: HostConfig, placed: Placed | None) -> HostPlacement | str | None:
    return (placed or Placed(config)).now()


def _instance(config: HostConfig, name: str) -> Instance:
    return next(i for i in config.instances() if i.name == name)


@operation()
def place(config: HostConfig, placed: Placed | None = None) -> Commands:
    """
    Place the host's vLLM instances on the GPUs and NUMA nodes it shows now; fail the host if it
    cannot.

    + config: the host's validated configuration
    + placed: the host's :class:`Placed` (the role's; default: placed here)

    A no-op that says where each instance goes. While preparing a bare host (no KFD topology
    yet) it says placement waits for the driver; at execution a host without KFD, or whose
    instances do not fit, fails with the reason.

    **Example:**

    .. code:: python

        vllm.place(name="Place the vLLM instances on this host's GPUs", config=config, placed=placed)
    """
    now = _now(config, placed)
    if now is None:
        host.noop("the GPU topology is read after the driver is installed and the host rebooted")
        return
    if isinstance(now, str):
        yield host_failure(now)
        return
    host.noop("; ".join(f"{name}: {', '.join(p.notes)}" for name, p in now.placements.items()))


@operation()
def instance_files(config: HostConfig, instance: str, placed: Placed | None = None) -> Commands:
    """
    Write one instance's environment file and systemd unit for its placement on this host.

    + config: the host's validated configuration
    + instance: instance name
    + placed: the host's :class:`Placed` (the role's; default: placed here)

    Both files are rendered by :func:`rocmfleet.plan.instance.instance_files` (``templates/vllm/``)
    with the placement the host shows at execution, so that a bare host gets the topology it
    shows after the driver's reboot, and written as ``files.template`` would (``files.put``: the
    same commands). A no-op when both files are up to date.
    """
    now = _now(config, placed)
    if not isinstance(now, HostPlacement):
        host.noop(f"{instance}: rendered once the host's GPU topology is known")
        return
    yield from _put_files(plan_instance.instance_files(config, _instance(config, instance), now).files)


def _put_files(wanted: Sequence[WantedFile]) -> Commands:
    for item in wanted:
        yield from file_ops.put._inner(
            src=StringIO(item.content.decode()),
            dest=item.path,
            user=item.user,
            group=item.group,
            mode=item.mode,
            add_deploy_dir=False,
            create_remote_dir=True,
        )


@operation()
def remove_orphans(keep: Sequence[str]) -> Commands:
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
    managed: list[str] = host.get_fact(ManagedInstances)
    orphans = sorted(set(managed) - set(keep))
    if not orphans:
        host.noop("no vLLM instance of rocmfleet's besides those listed")
        return
    for name in orphans:
        names = vllmfiles.layout(name)
        yield StringCommand("systemctl", "disable", "--now", names.unit)
        yield StringCommand(f"docker rm --force {names.container} >/dev/null 2>&1 || true")
        yield StringCommand("rm", "-rf", names.unit_path, names.env_file, names.secrets_file, names.last_good_dir)
        yield StringCommand(f"systemctl reset-failed {names.unit} 2>/dev/null || true")
    yield StringCommand("systemctl", "daemon-reload")


@operation()
def clear_start_limit(unit: str) -> Commands:
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
def stage_model(staged: hfmodel.Staged) -> Commands:
    """
    Have the profile's model at its revision in the host's Hugging Face cache, once
    (``rocmfleet/scripts/model-stage.sh``, :mod:`rocmfleet.domain.hfmodel`).

    + staged: the model, revision, cache and image (:func:`rocmfleet.plan.vllmplan.staging`)

    Nothing is started when the stamp and the snapshot are there (staged before, by this host or
    another sharing the cache); else one container of the image downloads it under a lock, with the
    secrets from :data:`rocmfleet.domain.hfmodel.STAGE_SECRETS_FILE` (``--env-file``: the token is never
    an argument). A failed download fails the host with one line (the downloader's last), before any
    instance's files or unit are touched.
    """
    yield StringCommand(scripts.command(hfmodel.STAGE_SCRIPT, *staged.script_args()))


@operation()
def port_is_ours(instance: str, port: int | str, container: str) -> Commands:
    """
    Fail the host when a process other than the instance's own container listens on its port, or
    on one of its internal ports.

    + instance: instance name
    + port: its API port, or its internal ports as ``FIRST-LAST`` (``Instance.internal_ports.spec()``,
      :mod:`rocmfleet.domain.ports`)
    + container: its container (``vllm-<instance>``)

    A no-op when the port (every port of the range) is free or held by the container (``PortOwner``).
    Otherwise the new server could never bind its API port (and a readiness probe of the port would
    ask the stranger), or vLLM would walk past the held internal port into another instance's block.
    """
    owner = host.get_fact(PortOwner, port=port, container=container)
    if owner in ("free", "ours"):
        host.noop(f"port {port}: {owner}")
        return
    if isinstance(port, int):
        yield host_failure(
            f"rocmfleet: port {port} of vLLM instance {instance} is held by {owner.removeprefix('other ')} "
            f"(pid, command), not by its container {container}; stop that process or give the instance another port"
        )
        return
    yield host_failure(
        f"rocmfleet: internal ports {port} (VLLM_PORT) of vLLM instance {instance}: a port is held by "
        f"{owner.removeprefix('other ')} (pid, command), not by its container {container}; stop that process or "
        "move every instance's internal ports with vllm_internal_port_base"
    )


@operation()
def serve_args_check(
    config: HostConfig, instance: str, last_good: lastgood.LastGoodFiles, placed: Placed | None = None
) -> Commands:
    """
    Check ``vllm serve`` arguments with the image's own vLLM argument parser; fail the host if it
    rejects them.

    + config: the host's validated configuration: the image the instance is about to run (pulled
      already; by digest), its ``vllm serve`` arguments (``rocmfleet.domain.vllm.serve_args``)
    + instance: instance name (for messages and the check container's label)
    + last_good: its files (:func:`rocmfleet.plan.instance.last_good_of`)
    + placed: the host's :class:`Placed` (the role's; default: placed here)

    The container environment without secrets (``rocmfleet.domain.vllm.container_env``) depends on the
    placement, so the check runs once the host's topology is known (:class:`Placed`).

    Runs ``python3`` in a throw-away container of ``image`` without devices or network
    (``rocmfleet.plan.swap.serve_args_check_argv``): argparse's ``error: ...`` or vLLM's failed check
    fails the host before the running container is touched. A no-op when the instance's last good
    version (``serve.json``) already ran exactly this image, these arguments and this environment.

    **Example:**

    .. code:: python

        vllm.serve_args_check(
            name="Check vllm serve arguments of vllm-a",
            config=config,
            instance="a",
            last_good=plan_instance.last_good_of("a"),
            placed=placed,
        )
    """
    now = _now(config, placed)
    if not isinstance(now, HostPlacement):
        host.noop(f"{instance}: checked once the host's GPU topology is known")
        return
    service = plan_instance.vllm_settings(config)
    image, serve_args = service.image, vllm.serve_args(service, _instance(config, instance))
    env = vllm.container_env(service, now.placements[instance])
    record = lastgood.serve_record(image, serve_args, env)
    saved = host.get_fact(LastGood, files=last_good)
    if saved.serve == json.loads(record):
        host.noop(f"{instance}: its last good version ran these vllm serve arguments on this image")
        return
    yield StringCommand(rollout.serve_args_check_script(image, serve_args, env, instance))


@operation()
def ready_or_roll_back(
    targets: Sequence[rollout.WaitTarget], timeout_s: int = 1800, rollback_timeout_s: int = 1800
) -> Commands:
    """
    Wait until every instance is ready; roll back each one that is not by the deadline, and fail the host.

    + targets: the host's instances (``rocmfleet.plan.swap.WaitTarget``; ``roll_back_to`` is
      filled in here, from the host)
    + timeout_s: deadline for new versions, seconds (model load and compilation take minutes)
    + rollback_timeout_s: deadline for a restored version to be ready again, seconds

    Instances that are ready (with the profile's known answer, ``WaitTarget.ready_probe``) are left
    alone; when all are, this is a no-op. An instance not ready by the deadline, or that answers the
    known-answer request wrongly, whose live files differ from a complete last good version gets those files
    back, a ``daemon-reload`` and a restart, and the operation waits for it to be ready again. The
    host fails in either case, with the new container's last log lines and, for each instance
    rolled back, which image it went back to (``rocmfleet.plan.swap.wait_or_roll_back_script``).
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
def cache_proof(config: HostConfig, instances: Sequence[str]) -> Commands:
    """
    Say, per instance of a baked image, whether its compile cache was used: a warning line naming
    what compiled since its container started (:func:`rocmfleet.domain.cacheproof.miss_line`), or
    that it could not be read.

    + config: the host's validated configuration (its image; a unbaked image: nothing to prove)
    + instances: names of the instances the deploy just waited for

    Run it right after ``ready_or_roll_back``, gated on that wait having run (``_if``): one
    ``rocmfleet/scripts/cache-proof.sh`` read per instance, at execution only; it changes nothing
    and never fails the host (a miss is the image's, and ``rocmfleet check --select cache`` and a
    rollout's gate fail on it).

    **Example:**

    .. code:: python

        vllm.cache_proof(name="Prove the baked caches were used", config=config, instances=["a"], _if=wait.did_change)
    """
    if not cachedirs.is_baked(config):
        host.noop(f"{config.image.reference} is not a baked image")
        return
    if not state.is_executing:
        host.noop("the baked caches are proven after the readiness wait")
        return
    proven = 0
    for name in instances:
        proof = host.get_fact(CacheProof, container=vllmfiles.layout(name).container)
        try:
            line = cacheproof.miss_line(name, proof)
        except ValueError as exc:
            logger.warning(f"{host.print_prefix}rocmfleet: cannot prove the baked compile cache was used: {exc}")
            continue
        if line:
            logger.warning(f"{host.print_prefix}rocmfleet: baked compile cache missed: {line}")
        else:
            proven += 1
    host.noop(f"baked caches: {proven} of {len(instances)} instance(s) compiled nothing since their start")
    yield from ()  # a read, never a change


@operation()
def last_good(
    config: HostConfig, instance: str, files: lastgood.LastGoodFiles, placed: Placed | None = None
) -> Commands:
    """
    Keep the instance's live files as its last good version (it is ready with them).

    + config: the host's validated configuration (what the instance runs: image, ``vllm serve``
      arguments, environment; its port and served model name, to confirm it is ready)
    + instance: instance name
    + files: its live files and last good directory (:func:`rocmfleet.plan.instance.last_good_of`)
    + placed: the host's :class:`Placed` (the role's; default: placed here)

    Run it after the instance was found ready (``ready_or_roll_back``). A no-op when the copies
    and ``serve.json`` already match. The copies are made on the host (secrets are never printed).

    **Example:**

    .. code:: python

        vllm.last_good(name="Keep vllm-a as last good", config=config, instance="a", files=files)
    """
    now = _now(config, placed)
    if not isinstance(now, HostPlacement):
        host.noop(f"{instance}: kept once the host's GPU topology is known")
        return
    inst = _instance(config, instance)
    port, model, container = inst.port, config.profile.served_model_name, vllmfiles.files_of(inst).container
    record = plan_instance.serve_record(config, inst, now.placements[instance])
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
    yield StringCommand(lastgood.save_last_good_script(files, record))


@operation()
def baked_cache_matches(config: HostConfig, placed: Placed | None = None) -> Commands:
    """
    Fail the host when its image is a baked compile-cache image (``rocmfleet cache bake``) whose
    cache key differs from what this host's instances would compile, naming the field.

    + config: the host's validated configuration (the image, after it was pulled)
    + placed: the host's :class:`Placed` (the role's; default: placed here)

    A no-op for an image that is not baked (its tag has no ``-rfcache-`` key) and for a baked one
    whose key matches (``rocmfleet.domain.cachekey.refusal``, with the GPU architecture of this host's
    placement). Runs before any file is written, so a mismatched cache never reaches a unit.
    """
    if not cachedirs.is_baked(config):
        host.noop("not a baked compile-cache image")
        return
    now = _now(config, placed)
    if not isinstance(now, HostPlacement):
        host.noop("checked once the host's GPU topology is known")
        return
    arch = next((p.gfx_arch for p in now.placements.values() if p.gfx_arch), "")
    labels = host.get_fact(ImageLabels, image=config.image.reference)
    problems = cachekey.refusal(config.image.reference, labels, config, arch)
    if problems:
        yield host_failure("rocmfleet: " + "; ".join(problems))
        return
    host.noop(f"baked cache key matches ({arch})")
