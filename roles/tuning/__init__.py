"""Tuning role: AMD's MI300X OS settings (``../shared/reference/mi300x.md`` §1.1), each a data switch.

NUMA balancing off (sysctl.d, live where the kernel allows), the kernel command line through
``/etc/default/grub`` and ``update-grub`` (the rocm role's reboot applies it), and C2 disabled
at every boot by a systemd oneshot. Logic in :mod:`rocmfleet.domain.tuning`. What the role manages is
read in the host's one ``HostState`` read (:func:`query`) plus ``/etc/default/grub``'s text;
operations run only for what differs.
"""

from __future__ import annotations

from pyinfra.context import host
from pyinfra.facts.files import FileContents
from pyinfra.facts.server import LinuxDistribution, OsVersion
from pyinfra.operations import apt, files, server, systemd

from rocmfleet.domain import tuning
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations import reboot as reboot_ops
from rocmfleet.operations import tuning as tuning_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import hoststate, tuningplan

NUMA_BALANCING = "kernel.numa_balancing"


def query(settings: tuning.TuningSettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments): its files, the GRUB defaults' text, the live
    sysctl, the CPU unit, and the OS (which ``cpupower`` package)."""
    return {
        "paths": [tuning.SYSCTL_FILE, tuning.CPU_UNIT_PATH, tuning.GRUB_DEFAULTS],
        "texts": [tuning.GRUB_DEFAULTS],
        "sysctls": [NUMA_BALANCING],
        "units": [tuning.CPU_UNIT] if settings.cpu_unit_needed else [],
        # Debian's package, or Ubuntu's wrapper and its kernel's (a dpkg-query pattern)
        "packages": ["linux-cpupower", "linux-tools-common", "linux-tools-*"] if settings.cpu_unit_needed else [],
        "os": settings.cpu_unit_needed,
    }


@deploy("tuning")
def apply(settings: tuning.TuningSettings, got: Gathered | None = None) -> list[str]:
    """Apply every switched-on setting; a switched-off one is removed again.

    Args:
        settings: the host's tuning settings.
        got: the host's ``HostState`` read with (at least) :func:`query`'s items; read here when
            not given.

    Returns:
        why a reboot is expected (``--dry``), as :func:`predicted_reboot` says, from the GRUB
        defaults read once.
    """
    got = got if got is not None else host.get_fact(HostState, **query(settings))
    _numa_balancing(settings, got)
    grub = _grub_lines(got)
    _kernel_cmdline(settings, grub)
    _cpu_unit(settings, got)
    return predicted_reboot(settings, grub)


def _numa_balancing(settings: tuning.TuningSettings, got: Gathered) -> None:
    wanted = tuningplan.sysctl_file(settings)
    if wanted is None:
        if not hoststate.absent(got, tuning.SYSCTL_FILE):
            files.file(name=f"Remove {tuning.SYSCTL_FILE}", path=tuning.SYSCTL_FILE, present=False)
        return
    if not hoststate.file_ok(got, wanted):
        data = tuningplan.sysctl_vars(settings) or {}
        files.template(
            name=f"Render {tuning.SYSCTL_FILE}",
            src=hoststate.template_path(tuningplan.SYSCTL_TEMPLATE),
            dest=tuning.SYSCTL_FILE,
            mode="644",
            body=data["body"],
        )
    if not hoststate.sysctl_settled(got, NUMA_BALANCING, "0"):
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


def _cpu_unit(settings: tuning.TuningSettings, got: Gathered) -> None:
    if not settings.cpu_unit_needed:
        if hoststate.absent(got, tuning.CPU_UNIT_PATH):
            return
        removed = files.file(name=f"Remove {tuning.CPU_UNIT_PATH}", path=tuning.CPU_UNIT_PATH, present=False)
        server.shell(
            name=f"Disable the removed {tuning.CPU_UNIT}",
            commands=[f"rm -f /etc/systemd/system/multi-user.target.wants/{tuning.CPU_UNIT}; systemctl daemon-reload"],
            _if=removed.did_change,
        )
        return
    if got.os is not None:
        distro, kernel = got.os.id or "debian", got.os.kernel
    else:
        distro = host.get_fact(LinuxDistribution).get("release_meta", {}).get("ID", "debian")
        kernel = host.get_fact(OsVersion)
    packages = tuning.cpupower_packages(distro, kernel)
    if not hoststate.packages_installed(got, packages):
        apt.packages(name="Install cpupower", packages=packages, no_recommends=True)
    wanted = tuningplan.cpu_unit_file(settings)
    assert wanted is not None  # cpu_unit_needed
    unit_ok = hoststate.file_ok(got, wanted)
    if not unit_ok:
        data = tuningplan.cpu_unit_vars(settings) or {}
        unit = files.template(
            name=f"Render {tuning.CPU_UNIT}",
            src=hoststate.template_path(tuningplan.CPU_UNIT_TEMPLATE),
            dest=tuning.CPU_UNIT_PATH,
            mode="644",
            summary=data["summary"],
            exec_lines=data["exec_lines"],
        )
        systemd.daemon_reload(name="Reload systemd units", _if=unit.did_change)
    if not unit_ok or not hoststate.unit_enabled(got, tuning.CPU_UNIT):
        systemd.service(name=f"Enable {tuning.CPU_UNIT}", service=tuning.CPU_UNIT, running=None, enabled=True)
    if not unit_ok:
        # Apply now too (C2 off needs no reboot); in a container the unit's condition skips it.
        server.shell(
            name=f"Run {tuning.CPU_UNIT} now", commands=[f"systemctl restart {tuning.CPU_UNIT}"], _if=unit.did_change
        )
