"""Operations for MI300X OS tuning: the kernel command line in GRUB, live sysctl values."""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra.api.command import StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.files import FileContents
from pyinfra.operations import files

from rocmfleet.domain import tuning
from rocmfleet.facts.tuning import SysctlLive
from rocmfleet.operations import Commands
from rocmfleet.operations.fail import host_failure


@operation()
def grub_cmdline(params: list[str], path: str = tuning.GRUB_DEFAULTS) -> Commands:
    """
    Make ``GRUB_CMDLINE_LINUX`` in ``/etc/default/grub`` hold ``params``.

    + params: kernel parameters that must be there (``iommu=pt``, ``pci=realloc=off``)
    + path: the GRUB defaults file

    Only parameters rocmfleet manages are ever removed (:func:`rocmfleet.domain.tuning.edit_grub_defaults`);
    run ``update-grub`` and a reboot after a change (reference §1.1 rows 1-2 [A1]). A host
    without the file fails: rocmfleet sets the kernel command line through GRUB only.
    """
    lines = host.get_fact(FileContents, path=path)
    if lines is None:
        yield host_failure(f"rocmfleet: {path} not found; the kernel command line is set through GRUB")
        return
    text = "".join(line + "\n" for line in lines)
    new = tuning.edit_grub_defaults(text, params)
    if new == text:
        host.noop(f"GRUB_CMDLINE_LINUX has {' '.join(params) or 'no managed parameter'}")
        return
    yield from files.put._inner(src=StringIO(new), dest=path, mode="644")


@operation()
def sysctl_live(key: str, value: str) -> Commands:
    """
    Apply ``key=value`` to the running kernel where it can be written.

    + key: sysctl name (``kernel.numa_balancing``)
    + value: wanted value

    Inside a container ``/proc/sys`` is read-only: the value persisted in ``/etc/sysctl.d`` is
    reported instead of failing (it applies when the real host boots). A kernel without the key
    (no NUMA balancing built in) has nothing to change. Both are no-ops.

    Why not pyinfra's ``server.sysctl(persist=True)``: it runs ``sysctl key=value`` on every host
    whatever ``/proc/sys`` allows (failing container hosts and kernels without the key), and its
    persisted line is matched with the value in the pattern, so an old line with another value is
    appended to rather than replaced (pyinfra 3.10 ``operations/server.py``). The role writes the
    whole ``/etc/sysctl.d`` file from a template instead.
    """
    live = host.get_fact(SysctlLive, key=key)
    if live.get("value") is None:
        host.noop(f"{key}: not in this kernel; nothing to apply")
        return
    if live["value"] == value:
        host.noop(f"{key} = {value} (live)")
        return
    if not live.get("writable"):
        host.noop(
            f"{key} = {live['value']} live and /proc/sys is read-only here (container host): "
            f"{value} is persisted and applies at the next boot of the real host"
        )
        return
    yield StringCommand(f"sysctl -w {shlex.quote(f'{key}={value}')}")
