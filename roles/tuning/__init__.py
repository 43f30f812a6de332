"""Tuning role: AMD's MI300X OS settings (``../shared/reference/mi300x.md`` §1.1), each a data switch.

NUMA balancing off (sysctl.d, live where the kernel allows), the kernel command line through
``/etc/default/grub`` and ``update-grub`` (the rocm role's reboot applies it), and C2 disabled
at every boot by a systemd oneshot. Logic in :mod:`rocmfleet.tuning`.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import FileContents
from pyinfra.facts.server import LinuxDistribution, OsVersion
from pyinfra.operations import apt, files, server, systemd

from rocmfleet import tuning
from rocmfleet.operations import reboot as reboot_ops
from rocmfleet.operations import tuning as tuning_ops


@deploy("tuning")
def apply(settings: tuning.TuningSettings) -> None:
    """Apply every switched-on setting; a switched-off one is removed again."""
    _numa_balancing(settings)
    _kernel_cmdline(settings)
    _cpu_unit(settings)


def _numa_balancing(settings: tuning.TuningSettings) -> None:
    body = tuning.sysctl_conf(settings)
    if body is None:
        files.file(name=f"Remove {tuning.SYSCTL_FILE}", path=tuning.SYSCTL_FILE, present=False)
        return
    files.template(
        name=f"Render {tuning.SYSCTL_FILE}",
        src="templates/tuning/sysctl.conf.j2",
        dest=tuning.SYSCTL_FILE,
        mode="644",
        body=body.rstrip("\n"),
    )
    tuning_ops.sysctl_live(name="Apply kernel.numa_balancing=0 live", key="kernel.numa_balancing", value="0")


def _kernel_cmdline(settings: tuning.TuningSettings) -> None:
    params = settings.kernel_params
    grub = tuning_ops.grub_cmdline(name="Set the kernel command line in /etc/default/grub", params=params)
    server.shell(name="Regenerate the GRUB configuration", commands=["update-grub"], _if=grub.did_change)
    reboot_ops.require(
        name="A reboot applies the new kernel command line",
        key="kernel-cmdline",
        reason=f"kernel command line now {' '.join(params) or '(no rocmfleet parameter)'}",
        _if=grub.did_change,
    )


def predicted_reboot(settings: tuning.TuningSettings) -> list[str]:
    """Prepare-time guess for ``--dry``: the GRUB defaults would change."""
    lines = host.get_fact(FileContents, path=tuning.GRUB_DEFAULTS)
    if lines is None:
        return []
    text = "".join(line + "\n" for line in lines)
    if tuning.edit_grub_defaults(text, settings.kernel_params) != text:
        return [f"kernel command line gets {' '.join(settings.kernel_params)}"]
    return []


def _cpu_unit(settings: tuning.TuningSettings) -> None:
    if not settings.cpu_unit_needed:
        removed = files.file(name=f"Remove {tuning.CPU_UNIT_PATH}", path=tuning.CPU_UNIT_PATH, present=False)
        server.shell(
            name=f"Disable the removed {tuning.CPU_UNIT}",
            commands=[f"rm -f /etc/systemd/system/multi-user.target.wants/{tuning.CPU_UNIT}; systemctl daemon-reload"],
            _if=removed.did_change,
        )
        return
    distro = host.get_fact(LinuxDistribution).get("release_meta", {}).get("ID", "debian")
    apt.packages(
        name="Install cpupower",
        packages=tuning.cpupower_packages(distro, host.get_fact(OsVersion)),
        no_recommends=True,
    )
    commands = tuning.cpu_unit_commands(settings)
    unit = files.template(
        name=f"Render {tuning.CPU_UNIT}",
        src="templates/tuning/cpu-tuning.service.j2",
        dest=tuning.CPU_UNIT_PATH,
        mode="644",
        summary=", ".join(c.split(" ", 1)[1] for c in commands),
        exec_lines="\n".join(f"ExecStart={c}" for c in commands),
    )
    systemd.daemon_reload(name="Reload systemd units", _if=unit.did_change)
    systemd.service(name=f"Enable {tuning.CPU_UNIT}", service=tuning.CPU_UNIT, running=None, enabled=True)
    # Apply now too (C2 off needs no reboot); in a container the unit's condition skips it.
    server.shell(
        name=f"Run {tuning.CPU_UNIT} now", commands=[f"systemctl restart {tuning.CPU_UNIT}"], _if=unit.did_change
    )
