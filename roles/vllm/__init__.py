"""vLLM role: image by digest, placement, argument check, per-instance files and systemd unit,
orphans removed, readiness with roll back to the last good version (the order: :mod:`rocmfleet.plan.swap`).

Placement reads the host's GPU topology when the operations execute, after the rocm role's
reboot (:class:`rocmfleet.operations.vllm.Placed`, with the planner's own
:func:`rocmfleet.plan.instance.place_host`): a bare host gets its driver, reboots and is placed in
the same run. A converged host costs no command of its own: the deploy's one
``HostState`` read holds the topology and everything the role manages (:mod:`rocmfleet.plan.vllmplan`).

What the role manages are its items of the host's plan (:func:`rocmfleet.plan.build.plan_host`, which
the caller passes in as ``planner``, planned on the topology read here): directories and scripts (applied with
:mod:`rocmfleet.operations.planitems`), each instance's environment file, unit, secrets file and
unit state; an operation runs only where they drift (:func:`rocmfleet.plan.drift.drift`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operation import OperationMeta
from pyinfra.context import host, state
from pyinfra.operations import docker, files, systemd
from pyinfra.operations.util import any_changed

from rocmfleet.config.hostsettings import HostSettings
from rocmfleet.config.instances import Instance
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import cachedirs, hfmodel, vllmfiles
from rocmfleet.domain.topology import Topology
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.facts.topology import GpuTopology
from rocmfleet.operations import planitems, secrets
from rocmfleet.operations import vllm as vllm_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import drift, vllmplan
from rocmfleet.plan import swap as rollout
from rocmfleet.plan.instance import last_good_of, secrets_content, stage_env_content
from rocmfleet.plan.model import HostPlan
from rocmfleet.plan.sources import HostFacts

#: A restored version waits at least the default readiness deadline (``vllm_ready_timeout_s``):
#: a short deadline set to fail a new version fast must not cut short the wait for the old one.
ROLLBACK_MIN_TIMEOUT_S = HostSettings.model_fields["vllm_ready_timeout_s"].default


def _topology(got: Gathered) -> Topology | None:
    """The GPU topology now, from the ``HostState`` read or else the ``GpuTopology`` fact
    (``None`` without KFD or when it cannot be read: placed at execution)."""
    found = vllmplan.topology_of(got)
    if found != "unknown":
        return found
    try:
        return host.get_fact(GpuTopology)
    except PyinfraError:
        return None


@deploy("vllm")
def apply(
    config: HostConfig,
    rebooted: OperationMeta | None = None,
    got: Gathered | None = None,
    *,
    planner: Callable[[HostFacts], HostPlan],
) -> None:
    """Place the instances, remove orphans, pull the image, check the new arguments with it, render
    each instance's files, (re)start what changed, wait until ready, roll back what is not, keep
    what is ready as the last good version.

    Reads the topology and then everything the role manages in one ``HostState`` fact
    (:mod:`rocmfleet.plan.vllmplan`); operations run only for what differs, and an instance whose
    files, unit, last good version and readiness are all as wanted gets none. ``rebooted``: the
    rocm role's reboot operation; when it reboots the host, the instances are waited for again.
    ``got``: the host's ``HostState`` read with (at least) ``vllmplan.query``'s items; read here
    when not given. ``planner``: the host's plan on given facts (:func:`rocmfleet.plan.build.plan_host` for
    this host; ``converge`` passes it, planning hosts of one kind once), passed in so that the role does
    not stack on the whole plan's build. ``--dry`` says what differs, one line per instance to change
    or remove (:func:`rocmfleet.plan.vllmplan.dry_lines`).

    The role's items are those of the host's plan (:func:`rocmfleet.plan.build.plan_host`) planned
    on the topology read here, after any reboot; what differs is their drift
    (:func:`rocmfleet.plan.vllmplan.plan`, the plan's rule :func:`rocmfleet.plan.drift.drift`).
    """
    got = got if got is not None else host.get_fact(HostState, **vllmplan.query(config))
    topology = _topology(got)
    items = drift.role_items(planner(vllmplan.read_facts(topology, got)), "vllm")
    todo = vllmplan.plan(config, items, topology, got, host.name)
    # Said as the rocm role's operations say what they would do: while pyinfra prepares with its
    # change detection (``--dry``, or a run that asks before executing), not with ``-y``.
    if not state.is_executing and state.check_for_changes:
        for line in vllmplan.dry_lines(todo, config.image.reference, vllmplan.staging(config)):
            logger.warning(f"{host.print_prefix}{line}")
    if todo.clean:
        if rebooted is not None:
            _wait_and_keep(
                config, list(config.instances()), vllm_ops.Placed(config, todo.placed), _if=rebooted.did_change
            )
        return
    for directory in host.loop(todo.directories):
        planitems.directory(name=f"Create {directory.path}", item=directory)
    # A host without GPUs, or whose instances do not fit them, fails here, before any change.
    placed = vllm_ops.Placed(config, todo.placed)
    vllm_ops.place(name="Place the vLLM instances on this host's GPUs", config=config, placed=placed)
    # What the units run: the follower of the detached container and the GPU memory check.
    # A running unit keeps the script it started with (files.put replaces the file, it does not
    # rewrite it in place); the next start of each unit runs the new one.
    for script in host.loop(todo.scripts):
        planitems.file(name=f"Install {script.path}", item=script)
    # A renamed or removed instance frees its GPUs and port before the new ones start.
    if todo.orphans:
        vllm_ops.remove_orphans(
            name="Remove vLLM instances the data no longer lists", keep=[i.name for i in config.instances()]
        )
    dirty = [i for i in config.instances() if i.name in todo.dirty]
    if not dirty and not todo.image_missing and not todo.model_missing:
        return
    # (a) The old containers keep serving while the new image is pulled.
    image = docker.image(name="Pull the vLLM image by digest", image=config.image.reference)
    # The model, once per host, with that image's own downloader, before any instance is touched:
    # the instances mount the cache read-only and read it offline (rocmfleet.domain.hfmodel).
    # A failed download fails the host here with one line.
    staged = vllmplan.staging(config)
    if staged is not None and todo.model_missing:
        secrets.secret_file(
            name=f"Write {hfmodel.STAGE_SECRETS_FILE}",
            path=hfmodel.STAGE_SECRETS_FILE,
            content=stage_env_content(config),
        )
        vllm_ops.stage_model(name=f"Stage {staged.model}@{staged.revision} in {staged.cache_dir}", staged=staged)
        files.file(name=f"Remove {hfmodel.STAGE_SECRETS_FILE}", path=hfmodel.STAGE_SECRETS_FILE, present=False)
    # A baked compile cache (rocmfleet cache bake) runs only where its cache key matches.
    vllm_ops.baked_cache_matches(name="Check a baked image's cache key against this host", config=config, placed=placed)

    # (b) Every instance's new arguments go through the new image's own parser before any file is
    # written: a rejection fails the host with all instances untouched.
    for instance in host.loop(dirty):
        names = vllmfiles.files_of(instance)
        vllm_ops.serve_args_check(
            name=f"Check the vllm serve arguments of {names.unit} with the image's vLLM",
            config=config,
            instance=instance.name,
            last_good=last_good_of(instance.name),
            placed=placed,
        )

    # A port held by anything but the instance's own container fails the host, also before any file
    # is written: no instance is swapped on a host where one of them could not start. The same for
    # its internal ports (VLLM_PORT's block, rocmfleet/domain/ports.py), in one read.
    for instance in host.loop(dirty):
        names = vllmfiles.files_of(instance)
        for port in (instance.port, instance.internal_ports.spec()):
            vllm_ops.port_is_ours(
                name=f"Check port {port} is free or held by {names.container}",
                instance=instance.name,
                port=port,
                container=names.container,
            )

    # (c) Write the files and swap what changed.
    secret_content = secrets_content(config)
    for instance in host.loop(dirty):
        names = vllmfiles.files_of(instance)
        unit_files = vllm_ops.instance_files(
            name=f"Render {names.env_file} and {names.unit}",
            config=config,
            instance=instance.name,
            placed=placed,
        )
        secret_env = secrets.secret_file(
            name=f"Write {names.secrets_file}", path=names.secrets_file, content=secret_content
        )
        systemd.daemon_reload(name="Reload systemd units", _if=unit_files.did_change)
        changed = any_changed(unit_files, secret_env, image)
        # New files deserve fresh starts, and a unit that is not running (failed at its start limit:
        # three quick crashes) is to be started by this deploy: either way its start limit is reset.
        # The unit's state as the role's HostState read found it (unknown: not running).
        unit_state = got.units.get(names.unit)
        running = unit_state is not None and unit_state.active == "active"
        vllm_ops.clear_start_limit(
            name=f"Clear the start limit of {names.unit}", unit=names.unit, _if=[changed] if running else []
        )
        started = systemd.service(name=f"Enable and start {names.unit}", service=names.unit, running=True, enabled=True)
        systemd.service(
            name=f"Restart {names.unit} for its new image, unit or environment",
            service=names.unit,
            restarted=True,
            # A unit that was just started already runs the new files.
            _if=[changed, started.did_not_change],
        )

    _wait_and_keep(config, dirty, placed)


def _wait_and_keep(
    config: HostConfig, instances: list[Instance], placed: vllm_ops.Placed | None = None, **op_args: Any
) -> None:
    """Wait until every instance is ready, rolling back those that are not, then keep the files
    of ``instances`` as their last good version. ``op_args``: pyinfra global arguments (``_if``)."""
    settings = config.settings
    # (d) Wait only after every instance was (re)started, so that they load their models together;
    # (e) one operation for all, so that each instance not ready by the deadline is rolled back.
    targets = rollout.wait_targets(config)
    wait = vllm_ops.ready_or_roll_back(
        name="Wait until every vLLM instance is ready; roll back each one that is not",
        targets=targets,
        timeout_s=settings.vllm_ready_timeout_s,
        rollback_timeout_s=max(settings.vllm_ready_timeout_s, ROLLBACK_MIN_TIMEOUT_S),
        **op_args,
    )
    if cachedirs.is_baked(config):
        # One read per instance, only where the deploy waited: what compiled since the start (issue 27).
        conditions = op_args.get("_if", [])
        vllm_ops.cache_proof(
            name="Prove the baked compile caches were used (nothing compiled since the start)",
            config=config,
            instances=[t.name for t in targets],
            _if=[*(conditions if isinstance(conditions, list) else [conditions]), wait.did_change],
        )

    # Only now, ready: these files become the version to roll back to.
    for instance in host.loop(instances):
        names = vllmfiles.files_of(instance)
        vllm_ops.last_good(
            name=f"Keep the files of {names.unit} as its last good version",
            config=config,
            instance=instance.name,
            files=last_good_of(instance.name),
            placed=placed,
            **op_args,
        )
