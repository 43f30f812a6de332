"""The tuning role's files as the deploy writes them (pure): one definition for the role, which
writes them where they drift from the ``HostState`` read, and ``rocmfleet check``, which asserts they do not.

Example::

    wanted = tuningplan.sysctl_file(settings)   # None: tuning_numa_balancing_off is false, no file
    drift.drift([wanted], got)   # [] when the host holds it (rocmfleet.plan.drift)
"""

from __future__ import annotations

from rocmfleet.domain import tuning
from rocmfleet.plan import hoststate
from rocmfleet.plan.hoststate import WantedFile

SYSCTL_TEMPLATE = "templates/tuning/sysctl.conf.j2"
CPU_UNIT_TEMPLATE = "templates/tuning/cpu-tuning.service.j2"


def sysctl_vars(settings: tuning.TuningSettings) -> dict[str, str] | None:
    """The template variables of :data:`rocmfleet.domain.tuning.SYSCTL_FILE` (``None``: no file)."""
    body = tuning.sysctl_conf(settings)
    return None if body is None else {"body": body.rstrip("\n")}


def sysctl_file(settings: tuning.TuningSettings) -> WantedFile | None:
    """``/etc/sysctl.d/60-rocmfleet-mi300x.conf`` as the role renders it, mode 644 (``None``:
    NUMA balancing is left alone and the file must not exist)."""
    data = sysctl_vars(settings)
    if data is None:
        return None
    return WantedFile(tuning.SYSCTL_FILE, hoststate.render(SYSCTL_TEMPLATE, **data).encode(), "644")


def cpu_unit_vars(settings: tuning.TuningSettings) -> dict[str, str] | None:
    """The template variables of the CPU tuning unit (``None``: no CPU setting asks for it)."""
    if not settings.cpu_unit_needed:
        return None
    commands = tuning.cpu_unit_commands(settings)
    return {
        "summary": ", ".join(c.split(" ", 1)[1] for c in commands),
        "exec_lines": "\n".join(f"ExecStart={c}" for c in commands),
    }


def cpu_unit_file(settings: tuning.TuningSettings) -> WantedFile | None:
    """``rocmfleet-cpu-tuning.service`` as the role renders it, mode 644 (``None``: not wanted,
    the file must not exist)."""
    data = cpu_unit_vars(settings)
    if data is None:
        return None
    return WantedFile(tuning.CPU_UNIT_PATH, hoststate.render(CPU_UNIT_TEMPLATE, **data).encode(), "644")
