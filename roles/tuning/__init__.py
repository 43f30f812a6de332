"""Tuning role: AMD's MI300X OS settings (``../shared/reference/mi300x.md`` §1.1), each a data switch.

NUMA balancing off (sysctl.d, live where the kernel allows), the kernel command line through
``/etc/default/grub`` and ``update-grub`` (the rocm role's reboot applies it), and C2 disabled
at every boot by a systemd oneshot. Logic in :mod:`rocmfleet.domain.tuning`. The files, the CPU unit
and ``cpupower`` are the host plan's items (:func:`rocmfleet.plan.roleitems.tuning_items`), applied
where they drift on the host's one ``HostState`` read; the live sysctl and ``/etc/default/grub``'s
text, which no plan item holds, are read in the same read (:func:`query`). Operations run only for
what differs.
"""

from __future__ import annotations

from pyinfra.context import host
from pyinfra.facts.files import FileContents
from pyinfra.operations import files, server, systemd

from rocmfleet.domain import tuning
from rocmfleet.facts.state import Gathered
from rocmfleet.operations import planitems
from rocmfleet.operations import reboot as reboot_ops
from rocmfleet.operations import tuning as tuning_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import drift
from rocmfleet.plan.model import HostPlan

NUMA_BALANCING = "kernel.numa_balancing"


def query(settings: tuning.TuningSettings) -> dict[str, object]:
    """What the role reads besides its plan items (``HostState`` arguments): the GRUB defaults and
    their text, the live sysctl, and every ``cpupower`` package name an OS may use (Debian's
    package, or Ubuntu's wrapper and its kernel's, a dpkg-query pattern: the items are planned on
    the OS the read shows)."""
    return {
        "paths": [tuning.GRUB_DEFAULTS],
        "texts": [tuning.GRUB_DEFAULTS],
        "sysctls": [NUMA_BALANCING],
        "packages": ["linux-cpupower", "linux-tools-common", "linux-tools-*"] if settings.cpu_unit_needed else [],
    }


@deploy("tuning")
def apply(settings: tuning.TuningSettings, items: HostPlan, got: Gathered) -> list[str]:
    """Apply every switched-on setting; a switched-off one is removed again: an operation per item of
    ``items`` that drifted on ``got``, the live sysctl and the kernel command line by their own rules.

    Args:
        settings: the host's tuning settings.
        items: the tuning role's items of the host's plan (``hostdrift.role_items(plan, "tuning")``).
        got: the host's ``HostState`` read with ``drift.query(items)`` and :func:`query`.

    Returns:
        why a reboot is expected (``--dry``), as :func:`predicted_reboot` says, from the GRUB
        defaults read once.
    """
    drifted = drift.drifted(items, got)
    _numa_balancing(items, drifted, got)
    grub = _grub_lines(got)
    _kernel_cmdline(settings, grub)
    _cpu_unit(items, drifted)
    return predicted_reboot(settings, grub)


def _sysctl_settled(got: Gathered, key: str, value: str) -> bool:
    """``rocmfleet.operations.tuning.sysctl_live`` would do nothing: the kernel lacks ``key``, it
    already holds ``value``, or ``/proc/sys`` is read-only here (a container)."""
    item = got.sysctls.get(key)
    return item is not None and (item.value is None or item.value == value or not item.writable)


def _numa_balancing(items: HostPlan, drifted: set[str], got: Gathered) -> None:
    if tuning.SYSCTL_FILE in drifted:
        for r in items.removals:
            if r.path == tuning.SYSCTL_FILE:
                planitems.absent(name=f"Remove {tuning.SYSCTL_FILE}", item=r)
        for f in items.files:
            if f.path == tuning.SYSCTL_FILE:
                planitems.file(name=f"Render {tuning.SYSCTL_FILE}", item=f)
    if any(f.path == tuning.SYSCTL_FILE for f in items.files) and not _sysctl_settled(got, NUMA_BALANCING, "0"):
        tuning_ops.sysctl_live(name="Apply kernel.numa_balancing=0 live", key=NUMA_BALANCING, value="0")


def cmdline_settled(settings: tuning.TuningSettings, got: Gathered) -> bool:
    """The ``HostState`` read shows ``/etc/default/grub`` already holding the kernel command line
    the data asks for: the role neither edits it nor asks for a reboot (``False`` when the read
    could not tell, or the file is missing)."""
    item = got.paths.get(tuning.GRUB_DEFAULTS)
    if item is None or item.type != "file":
        return False
    text = _grub_text(got.texts.get(tuning.GRUB_DEFAULTS, []))
    return text is not None and tuning.edit_grub_defaults(text, settings.kernel_params) == text


def _grub_lines(got: Gathered) -> list[str] | None:
    """``/etc/default/grub``'s lines from the ``HostState`` read (``None``: no such file); read with
    ``FileContents`` when the read could not tell."""
    item = got.paths.get(tuning.GRUB_DEFAULTS)
    if item is not None and item.type == "missing":
        return None
    if item is not None and item.type == "file":
        return got.texts.get(tuning.GRUB_DEFAULTS, [])
    lines: list[str] | None = host.get_fact(FileContents, path=tuning.GRUB_DEFAULTS)
    return lines


def _grub_text(lines: list[str] | None) -> str | None:
    return None if lines is None else "".join(line + "\n" for line in lines)


def _kernel_cmdline(settings: tuning.TuningSettings, grub: list[str] | None) -> None:
    params = settings.kernel_params
    text = _grub_text(grub)
    if text is not None and tuning.edit_grub_defaults(text, params) == text:
        return  # GRUB_CMDLINE_LINUX already holds the parameters: nothing to write, regenerate or reboot for
    grub_op = tuning_ops.grub_cmdline(name="Set the kernel command line in /etc/default/grub", params=params)
    server.shell(name="Regenerate the GRUB configuration", commands=["update-grub"], _if=grub_op.did_change)
    reboot_ops.require(
        name="A reboot applies the new kernel command line",
        key="kernel-cmdline",
        reason=f"kernel command line now {' '.join(params) or '(no rocmfleet parameter)'}",
        _if=grub_op.did_change,
    )


def predicted_reboot(settings: tuning.TuningSettings, grub: list[str] | None = None) -> list[str]:
    """Prepare-time guess for ``--dry``: the GRUB defaults would change.

    ``grub``: the lines of ``/etc/default/grub`` (the ``FileContents`` fact) when already read;
    read here otherwise."""
    text = _grub_text(grub if grub is not None else host.get_fact(FileContents, path=tuning.GRUB_DEFAULTS))
    if text is None:
        return []
    if tuning.edit_grub_defaults(text, settings.kernel_params) != text:
        return [f"kernel command line gets {' '.join(settings.kernel_params)}"]
    return []


def _cpu_unit(items: HostPlan, drifted: set[str]) -> None:
    for r in items.removals:
        if r.path == tuning.CPU_UNIT_PATH and r.path in drifted:
            removed = files.file(name=f"Remove {tuning.CPU_UNIT_PATH}", path=tuning.CPU_UNIT_PATH, present=False)
            server.shell(
                name=f"Disable the removed {tuning.CPU_UNIT}",
                commands=[
                    f"rm -f /etc/systemd/system/multi-user.target.wants/{tuning.CPU_UNIT}; systemctl daemon-reload"
                ],
                _if=removed.did_change,
            )
    packages = [p for p in items.packages if p.name in drifted]
    if packages:
        planitems.packages(name="Install cpupower", items=packages, update=False)
    unit_file = next((f for f in items.files if f.path == tuning.CPU_UNIT_PATH), None)
    written = unit_file is not None and unit_file.path in drifted
    if unit_file is not None and written:
        unit = planitems.file(name=f"Render {tuning.CPU_UNIT}", item=unit_file)
        systemd.daemon_reload(name="Reload systemd units", _if=unit.did_change)
    for u in items.units:
        if u.unit == tuning.CPU_UNIT and (written or u.unit in drifted):
            planitems.unit(name=f"Enable {tuning.CPU_UNIT}", item=u)
    if written:
        # Apply now too (C2 off needs no reboot); in a container the unit's condition skips it.
        server.shell(
            name=f"Run {tuning.CPU_UNIT} now", commands=[f"systemctl restart {tuning.CPU_UNIT}"], _if=unit.did_change
        )
