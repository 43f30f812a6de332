"""Exporter role: AMD's device-metrics-exporter on each GPU host (``metrics_exporter``, default on).

AMD's repository for the release (``metrics_exporter_repo_url``/``metrics_exporter_version``,
signed with repo.radeon.com's key, the keyring the rocm role keeps), ``amdgpu-exporter`` at the
version that repository offers and held (as the driver is), ``/etc/metrics/config.json``
(``ServerPort`` = ``metrics_exporter_port``) and the drop-in that makes the exporter read it, and
both units (``gpuagent``, ``amd-metrics-exporter``) enabled and running. The logic is
:mod:`rocmfleet.domain.exporter`; the items are the host plan's
(:func:`rocmfleet.plan.roleitems.exporter_items`), applied where they drift on the deploy's one
``HostState`` read (:func:`rocmfleet.plan.drift.drifted`), and the package also where apt offers
another version from the release's repository (:func:`rocmfleet.plan.exporterplan.package_problem`,
a live fact the plan cannot hold): a converged host gets no operation.

It runs after the rocm role's reboot and driver check: the GPU agent needs the driver up. The
rocm role stops both units before any driver change (AMD requires it); the reboot that follows
starts them. ``metrics_exporter: false`` leaves an installed exporter as it is (the plan has no
exporter item then).
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api.operation import OperationMeta
from pyinfra.context import host, state
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from rocmfleet.domain import exporter
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.facts.state import Gathered
from rocmfleet.operations import planitems
from rocmfleet.operations import rocm as rocm_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import drift, exporterplan
from rocmfleet.plan.model import FilePlan, HostPlan


def query(settings: MetricsSettings) -> dict[str, object]:
    """What the role reads besides its plan items (``HostState`` arguments): what apt offers of the
    package (:data:`rocmfleet.plan.exporterplan.RUN_VERSIONS`); nothing with ``metrics_exporter`` off."""
    return {"apt_versions": exporterplan.query(settings)["apt_versions"]} if settings.metrics_exporter else {}


def idle(settings: MetricsSettings, items: HostPlan, got: Gathered) -> bool:
    """:func:`apply` would call no operation on ``got`` (the deploy then does not enter it): the
    exporter is off, or none of its items drifted and its package has no problem."""
    if not settings.metrics_exporter:
        return True
    return not drift.drifted(items, got) and exporterplan.package_problem(settings, got) is None


@deploy("exporter")
def apply(settings: MetricsSettings, items: HostPlan, got: Gathered) -> None:
    """The exporter's source, package (held), config, drop-in and units: an operation per item of
    ``items`` that drifted on ``got``. With ``metrics_exporter`` off (no items): nothing.

    Args:
        settings: the host's metrics settings (the release's repository, for the package).
        items: the exporter role's items of the host's plan (``hostdrift.role_items(plan, "exporter")``).
        got: the host's ``HostState`` read with ``drift.query(items)`` and :func:`query`.
    """
    if not settings.metrics_exporter:
        return
    found = drift.drift(drift.plan_wanted(items), got)
    problem = exporterplan.package_problem(settings, got)
    todo = reasons(found, problem)
    if todo and not state.is_executing and state.check_for_changes:
        logger.warning(f"{host.print_prefix}would change the metrics exporter: {'; '.join(todo)}")
    drifted = {d.item for d in found}
    files = {f.path: f for f in items.files}
    if exporter.SOURCE_FILE in drifted:
        _put(files[exporter.SOURCE_FILE])
    if problem or exporter.PACKAGE in drifted:
        rocm_ops.packages_from_repo(
            name=f"Install AMD's metrics exporter from device-metrics-exporter/apt/{settings.metrics_exporter_version}"
            " and hold it",
            packages=[exporter.PACKAGE],
            repo=exporter.repo_url(settings),
            hold=True,
        )
    changed = [_put(files[path]) for path in (exporter.CONFIG_FILE, exporter.DROPIN_FILE) if path in drifted]
    if exporter.DROPIN_FILE in drifted:
        systemd.daemon_reload(name="Reload systemd for the exporter's drop-in", _if=changed[-1].did_change)
    for unit in items.units:  # the agent first: the exporter reads from it (exporter.UNITS' order)
        if unit.unit in drifted:
            planitems.unit(name=f"Enable and start {unit.unit}", item=unit)
    if changed:
        systemd.service(
            name=f"Restart {exporter.EXPORTER_UNIT} for its new configuration",
            service=exporter.EXPORTER_UNIT,
            running=True,
            restarted=True,
            _if=any_changed(*changed),
        )


def reasons(found: list[drift.Drift], problem: str | None) -> list[str]:
    """Why the role acts, one short reason each (empty: it calls no operation): the package's
    ``problem`` (:func:`rocmfleet.plan.exporterplan.package_problem`), then each drift of the files
    and units (``/etc/metrics/config.json: content <sha>, want <sha>``, ``gpuagent.service: active
    inactive, want active``); the package's own drift is said by its problem."""
    return ([problem] if problem else []) + [str(d) for d in found if d.item != exporter.PACKAGE]


def _put(item: FilePlan) -> OperationMeta:
    """:func:`rocmfleet.operations.planitems.file` of one of the role's files, named as before."""
    return planitems.file(name=f"Render {item.path}", item=item)
