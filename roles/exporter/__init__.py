"""Exporter role: AMD's device-metrics-exporter on each GPU host (``metrics_exporter``, default on).

AMD's repository for the release (``metrics_exporter_repo_url``/``metrics_exporter_version``,
signed with repo.radeon.com's key, the keyring the rocm role keeps), ``amdgpu-exporter`` at the
version that repository offers and held (as the driver is), ``/etc/metrics/config.json``
(``ServerPort`` = ``metrics_exporter_port``) and the drop-in that makes the exporter read it, and
both units (``gpuagent``, ``amd-metrics-exporter``) enabled and running. The logic is
:mod:`rocmfleet.domain.exporter`; what differs comes from the deploy's one ``HostState`` read
(:func:`rocmfleet.plan.exporterplan.differs`): a converged host gets no operation.

It runs after the rocm role's reboot and driver check: the GPU agent needs the driver up. The
rocm role stops both units before any driver change (AMD requires it); the reboot that follows
starts them. ``metrics_exporter: false`` leaves an installed exporter as it is.
"""

from __future__ import annotations

from io import StringIO

from pyinfra import logger
from pyinfra.api.operation import OperationMeta
from pyinfra.context import host, state
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from rocmfleet.domain import exporter, rocm
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations import rocm as rocm_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import exporterplan, hoststate
from rocmfleet.plan.hoststate import WantedFile


def query(settings: MetricsSettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments): :func:`rocmfleet.plan.exporterplan.query`."""
    return exporterplan.query(settings)


@deploy("exporter")
def apply(settings: MetricsSettings, got: Gathered | None = None, todo: list[str] | None = None) -> None:
    """The exporter's source, package (held), config, drop-in and units, each only where it differs.

    ``got``: the host's ``HostState`` read with (at least) :func:`query`'s items; read here when not
    given. ``todo``: :func:`rocmfleet.plan.exporterplan.differs` of that read (computed here when
    not given); empty, the role calls no operation. With ``metrics_exporter`` off: nothing.
    """
    if not settings.metrics_exporter:
        return
    got = got if got is not None else host.get_fact(HostState, **query(settings))
    todo = todo if todo is not None else exporterplan.differs(settings, got)
    if todo and not state.is_executing and state.check_for_changes:
        logger.warning(f"{host.print_prefix}would change the metrics exporter: {'; '.join(todo)}")
    if not todo:
        return
    try:
        target = rocm.os_target(got.os.id, got.os.version_id) if got.os is not None else None
    except rocm.UnsupportedHost:
        target = None  # the rocm role's preflight failed this host already
    source, config, dropin = exporterplan.wanted_files(settings, target or rocm.OS_TARGETS[("debian", "12")])

    if not hoststate.file_ok(got, source):
        _put(source)
    if exporterplan.package_problem(settings, got):
        rocm_ops.packages_from_repo(
            name=f"Install AMD's metrics exporter from device-metrics-exporter/apt/{settings.metrics_exporter_version}"
            " and hold it",
            packages=[exporter.PACKAGE],
            repo=exporter.repo_url(settings),
            hold=True,
        )
    changed = [_put(item) for item in (config, dropin) if not hoststate.file_ok(got, item)]
    if not hoststate.file_ok(got, dropin):
        systemd.daemon_reload(name="Reload systemd for the exporter's drop-in", _if=changed[-1].did_change)
    for unit in exporter.UNITS:  # the agent first: the exporter reads from it
        if not hoststate.unit_running_enabled(got, unit):
            systemd.service(name=f"Enable and start {unit}", service=unit, running=True, enabled=True)
    if changed:
        systemd.service(
            name=f"Restart {exporter.EXPORTER_UNIT} for its new configuration",
            service=exporter.EXPORTER_UNIT,
            running=True,
            restarted=True,
            _if=any_changed(*changed),
        )


def _put(wanted: WantedFile) -> OperationMeta:
    """``files.put`` of one of the plan's files, with its content, mode and owner."""
    return files.put(
        name=f"Render {wanted.path}",
        src=StringIO(wanted.content.decode()),
        dest=wanted.path,
        mode=wanted.mode,
        user=wanted.user,
        group=wanted.group,
    )
