"""Converge the current host to serving vLLM: what ``deploy.py`` runs (``pyinfra INVENTORY deploy.py``).

An operator's ``deploy.py`` (``rocmfleet init`` writes it) is two lines::

    from rocmfleet.converge import converge

    converge()

pyinfra executes the deploy file once per host, so :func:`converge` runs once per host.

Roles run in a fixed order: base (apt proxy, packages), rocm (AMD's repositories, the amdgpu
driver), tuning (MI300X OS settings), one reboot if the driver or kernel command line changed,
exporter (AMD's device-metrics-exporter: its GPU agent needs the driver up), docker, vllm. A bare
host converges in one run: the vllm role reads the GPU topology at execution time, after the reboot
(``roles/vllm``), not while pyinfra prepares the run.

Every per-host problem fails that host alone, through pyinfra's own error path
(:mod:`rocmfleet.operations.fail`): the other hosts converge and pyinfra exits non-zero naming
the failed hosts. The inventory already validated every host before connecting
(``rocmfleet.config.validate.check_on_load``); a host whose data is still what was validated there
uses that config, one changed by ``--data`` overrides is validated again here.
"""

import sys
import types

from pyinfra import logger
from pyinfra.api.operation import OperationMeta
from pyinfra.context import ctx_state, host, state
from pyinfra.facts.server import LinuxDistribution, OsVersion

from rocmfleet import scripts
from rocmfleet.config import groupvars
from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import HostConfig, host_config
from rocmfleet.config.validate import validated_config
from rocmfleet.domain import gpuhealth, vllmfiles
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations import fail
from rocmfleet.plan import drift, hostdrift, hoststate, targetsdeploy, vllmplan
from rocmfleet.plan.build import plan_host
from rocmfleet.plan.model import HostPlan, Role
from rocmfleet.plan.sources import HostFacts
from rocmfleet.roles import base, docker, exporter, rocm, tuning
from rocmfleet.roles import vllm as vllm_role


def _register_deploy_file() -> None:
    # pyinfra orders each operation by walking the call stack (``inspect.getframeinfo`` of every
    # frame). The deploy file is exec()'d by pyinfra, not imported, so for its frames
    # ``inspect.getmodule`` finds no module and scans all of ``sys.modules`` (~900 here) each time:
    # about a fifth of the control CPU of a no-op converge. A module entry naming that file turns
    # the scan into one cache hit. Nothing that runs on the hosts changes.
    filename = state.current_deploy_filename
    if filename and "rocmfleet._deploy_file" not in sys.modules:
        module = types.ModuleType("rocmfleet._deploy_file")
        module.__file__ = filename
        sys.modules["rocmfleet._deploy_file"] = module


#: The ``HostState`` run that reads the GPUs' health (``rocmfleet/scripts/gpu-health.sh``).
GPU_HEALTH = "gpu-health"


def _report_gpu_health(correctable_max: int, got: Gathered) -> None:
    """Warn, in the deploy's output, of each GPU health problem the host's read shows (the ``gpu``
    check's rules, :mod:`rocmfleet.domain.gpuhealth`); the deploy goes on: the rollout's gate and
    ``rocmfleet check --select gpu`` keep such a host out of service."""
    _rc, lines = got.runs.get(GPU_HEALTH, (0, []))
    try:
        read = gpuhealth.parse_health("\n".join(lines))
    except ValueError as exc:
        logger.warning(f"{host.name}: GPU health unreadable: {exc}")
        return
    problems = gpuhealth.ecc_problems(read.ecc, correctable_max)
    if read.resets:
        problems.append(f"{len(read.resets)} amdgpu reset/hang line(s) in the kernel log since boot: {read.resets[-1]}")
    for problem in problems:
        logger.warning(f"{host.name}: GPU health: {problem} (rocmfleet check --select gpu)")


#: The roles whose items of the host's plan are planned on the OS and kernel the deploy's read shows,
#: before the read (:func:`read_query`). The vllm role's items are planned on the GPU topology, which
#: it reads when it runs (after the rocm role's reboot): ``roles/vllm`` plans them through :func:`_plan`.
PLANNED_ROLES: tuple[Role, ...] = ("base", "rocm", "tuning", "exporter", "docker")
#: Plans of this run by kind of host (``repr`` of its configuration, and the facts planned on): hosts
#: of one kind are planned once (a no-op converge's control CPU, issue 43).
_PLANS: dict[tuple[str, HostFacts], HostPlan] = {}
#: What the plan is made on before the read (the items' paths and names; kernel packages by pattern).
_SHAPE_FACTS = HostFacts("the deploy's query", None, kernel="*")


def _plan(kind: str, config: HostConfig, facts: HostFacts) -> HostPlan:
    """``plan_host`` of ``config`` on ``facts``, once per ``(kind, facts)`` in this process."""
    plan = _PLANS.get((kind, facts))
    if plan is None:
        plan = _PLANS[(kind, facts)] = plan_host("", config, facts)
    return plan


def read_plan(kind: str, config: HostConfig, got: Gathered) -> HostPlan:
    """The host's plan for the roles of :data:`PLANNED_ROLES`, on the OS and kernel its read shows
    (their items do not depend on the GPU topology: none is read for them, and no instance is
    placed in this plan; the vllm role's are planned on the topology it reads, ``roles/vllm``).

    Args:
        kind: ``repr(config)`` (hosts of one kind share the plan).
        config: the host's validated configuration.
        got: the deploy's ``HostState`` read (with ``os``; without, pyinfra's ``LinuxDistribution``
            and ``OsVersion`` are read, as the roles did before).
    """
    if got.os is not None:
        os_id, version, codename, kernel = got.os.id, got.os.version_id, got.os.codename, got.os.kernel
    else:  # the read could not tell (it always asks): pyinfra's own facts, one more command
        meta = host.get_fact(LinuxDistribution).get("release_meta", {})
        os_id, version, codename = meta.get("ID", ""), str(meta.get("VERSION_ID", "")), meta.get("VERSION_CODENAME", "")
        kernel = host.get_fact(OsVersion)
    facts = HostFacts(
        hostdrift.READ_SOURCE, None, os_id=os_id, os_version=version, os_codename=codename, kernel=kernel,
        assumed=("device_gids",),
    )  # fmt: skip
    return _plan(kind, config, facts)


def read_query(config: HostConfig, dry: bool, kind: str | None = None) -> dict[str, object]:
    """The ``HostState`` arguments of the deploy's one read of a host: every item of the roles of
    :data:`PLANNED_ROLES` (:func:`rocmfleet.plan.drift.query` of their items, planned before the read
    with kernel packages by pattern) and the OS; what each role reads besides its items
    (``roles/*.query``: the rocm role's facts as runs, the GRUB defaults and live sysctl, what apt
    offers of the exporter, Docker's owed restart); the vllm role's items (``vllmplan.query``); the
    GPU health run; and with ``dry`` (``--dry``, or a run that asks before executing) the facts the
    whole plan is planned on (:func:`rocmfleet.plan.hostdrift.read_query`: the GPU topology, the
    device nodes), for the drift lines.

    Args:
        config: the host's validated configuration.
        dry: whether pyinfra prepares with its change detection.
        kind: ``repr(config)`` when already made (hosts of one kind are planned once).
    """
    shape = _plan(kind if kind is not None else repr(config), config, _SHAPE_FACTS)
    planned = [drift.query(hostdrift.role_items(shape, role)) for role in PLANNED_ROLES]
    return hoststate.merge_queries(
        *planned,
        {"os": True},
        rocm.query(config.rocm),
        tuning.query(config.tuning),
        exporter.query(config.metrics),
        docker.query(config.settings),
        vllmplan.query(config),
        {"runs": [(GPU_HEALTH, scripts.text("gpu-health.sh"))]},
        hostdrift.read_query(config, planner=plan_host) if dry else {},
    )


def converge() -> None:
    """Plan and apply every role for pyinfra's current host (call it from a deploy file).

    Roles run in a fixed order: base, rocm, tuning, one reboot if needed, exporter, docker, vllm. A host
    whose data is bad fails alone, through :func:`rocmfleet.operations.fail.failed`; nothing
    is raised.

    Example (``deploy.py``)::

        from rocmfleet.converge import converge

        converge()
    """
    _register_deploy_file()
    # The inventory's scrape targets, once per run, on the control machine, before any operation
    # runs (metrics_targets_file; a write failure ends the run, one line, no traceback).
    if said := targetsdeploy.write_for_deploy(ctx_state.get()):  # type: ignore[no-untyped-call]  # the State, not its proxy
        logger.info(said)
    try:
        # Group files that could not be read (an inventory without check_on_load still loads them).
        if groupvars.problems():
            raise ConfigError(groupvars.problems())
        data = host.data.dict()
        config = validated_config(host.name, data) or host_config(data, groupvars.profiles_dir())
    except ConfigError as exc:
        fail.failed(name="Validate this host's data", message=f"rocmfleet: {host.name}: {exc}".replace("\n", "; "))
    else:
        # Said while pyinfra prepares with its change detection (``--dry``, or a run that asks before
        # executing), as the roles' own reasons are; never with ``-y`` (a no-op converge's cost).
        dry = not state.is_executing and state.check_for_changes
        # One read of everything the roles manage (every item of the host's plan, sysctls, the image,
        # whether each instance is serving); the plan of the host's kind on the OS and kernel it shows;
        # each role calls an operation per item of its own that drifted (rocmfleet.plan.drift).
        # With ``dry`` the same read also asks the topology the whole plan is planned on (hostdrift).
        kind = repr(config)
        got = host.get_fact(HostState, **read_query(config, dry, kind))
        plan = read_plan(kind, config, got)
        _report_gpu_health(config.settings.gpu_ecc_correctable_max, got)
        if dry:  # every role's drift by the plan's one rule, the one the roles below apply
            for line in hostdrift.dry_lines(host.name, config, got, planner=plan_host):
                logger.warning(f"{host.print_prefix}{line}")
        # What the rocm role would do (nothing, on a converged host: then none of its operations, its
        # reboot or its driver checks is called, and the host costs no command beyond the read).
        rocm_items = hostdrift.role_items(plan, "rocm")
        # A role with nothing to do is not entered: each ``@deploy`` call costs pyinfra's argument
        # handling even when the role then calls no operation (``roles/*.idle``).
        rocm_todo = rocm.reasons(config.rocm, rocm_items, got)
        rocm_idle = rocm.idle(config.rocm, rocm_todo)
        found = rocm.found_on(got) if rocm_idle else rocm.preflight(config.rocm, got=got, todo=rocm_todo)
        if not base.idle(items := hostdrift.role_items(plan, "base"), got):
            base.apply(items, got=got)
        if not rocm_idle:
            rocm.apply(config.rocm, rocm_items, got, found=found, todo=rocm_todo)
        tuning_reboot: list[str] = []
        if not tuning.idle(config.tuning, items := hostdrift.role_items(plan, "tuning"), got):
            tuning_reboot = tuning.apply(config.tuning, items, got)
        settled = not rocm_todo and not tuning_reboot and tuning.cmdline_settled(config.tuning, got)
        rebooted: OperationMeta | None = None
        if not settled:
            rebooted = rocm.reboot(
                config.rocm, predicted=tuning_reboot, got=got, found=found, drifted=drift.drifted(rocm_items, got)
            )
        if not exporter.idle(config.metrics, items := hostdrift.role_items(plan, "exporter"), got):
            exporter.apply(config.metrics, items, got)
        if not docker.idle(config.settings, items := hostdrift.role_items(plan, "docker"), got):
            instances = [(vllmfiles.files_of(i).container, i.port) for i in config.instances()]
            docker.apply(config.settings, items, got=got, instances=instances)
        # The vllm role's items: the plan of the host's kind on the topology the role reads (hosts of
        # one kind on one topology are planned once).
        vllm_role.apply(config, rebooted=rebooted, got=got, planner=lambda facts: _plan(kind, config, facts))
