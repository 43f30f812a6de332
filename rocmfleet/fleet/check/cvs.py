"""Host checks from AMD's Cluster Validation Suite that apply to a single MI300X node.

CVS (github.com/ROCm/cvs) validates a node before it joins a cluster; the host-level checks a
fleet needs after every reboot are that each GPU's PCIe link trained at its full width and
speed (a link that comes up x8 or Gen4 halves host↔GPU bandwidth and model load time doubles)
and that the amdgpu driver logged no error since boot. The kernel exposes the link in PCI sysfs
(``current_link_speed``/``max_link_speed``, ``current_link_width``/``max_link_width``,
Documentation/ABI/testing/sysfs-bus-pci); ``amd-smi static`` reports the same maximum as
``MAX_PCIE_WIDTH: 16`` / ``MAX_PCIE_SPEED: 32 GT/s`` (``../shared/fixtures/``).

Every link from the root port down to the GPU is checked, not only the GPU's own: a switch
upstream port trained at 16 GT/s x8 above a GPU at 32 GT/s x16 caps the GPU just the same
(issue 16). The path is the GPU's resolved sysfs directory
(``/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0``: root port,
switch upstream port, switch downstream port, GPU).

Nothing here passes on an answer it cannot read: empty, truncated or unknown output raises
:class:`~rocmfleet.domain.tooloutput.CannotCheck` (its subclass :class:`LinkParseError` for sysfs links).
"""

from __future__ import annotations

import re

from rocmfleet.domain.tooloutput import CannotCheck

_SPEED = re.compile(r"^(\d+(?:\.\d+)?) ?GT/s(?: PCIe)?$")
#: Kernel log lines of the amdgpu driver (its messages start with ``amdgpu <bdf>:`` or ``[drm]``
#: with an amdgpu function name); matched case-insensitively.
_AMDGPU = re.compile(r"\bamdgpu\b", re.IGNORECASE)


LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_LINK_LINE = re.compile(r"^/sys/bus/pci/devices/([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/(\w+):(.*)$")
#: journalctl's own lines (``-- No entries --``, ``-- Journal begins at ... --``, ``-- Boot ... --``).
_JOURNAL_META = re.compile(r"^-- .* --$")
#: A ``-o short-monotonic`` entry: ``[    5.123456] host kernel: message``.
_JOURNAL_ENTRY = re.compile(r"^\[\s*\d+\.\d+\] ")


class LinkParseError(CannotCheck, ValueError):
    """A PCI sysfs link attribute this module does not understand; the message quotes it."""


def link_speed_gt_s(text: str) -> float:
    """GT/s from a sysfs link speed: ``"32.0 GT/s PCIe"`` (Linux ≥ 4.19), ``"16 GT/s"`` → 32.0, 16.0.

    Raises:
        LinkParseError: anything else (``"Unknown"``, an empty file), with the raw text.
    """
    match = _SPEED.match(text.strip())
    if not match:
        raise LinkParseError(f"unknown PCIe link speed {text.strip()!r} (expected like '32.0 GT/s PCIe')")
    return float(match.group(1))


def link_width(text: str) -> int:
    """Lanes from a sysfs link width (``"16"``); raises :class:`LinkParseError` otherwise."""
    value = text.strip()
    if not value.isdigit():
        raise LinkParseError(f"unknown PCIe link width {value!r} (expected a lane count such as '16')")
    return int(value)


def link_problems(device: str, attrs: dict[str, str]) -> list[str]:
    """What is downgraded on one PCI device's link; empty when it runs at its maximum.

    Args:
        device: the device's PCI address, for the messages.
        attrs: sysfs ``current_link_speed``, ``max_link_speed``, ``current_link_width``,
            ``max_link_width`` file contents.

    Raises:
        LinkParseError: an attribute is missing or not understood (the raw text is quoted).
    """
    missing = [
        k for k in ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width") if k not in attrs
    ]
    if missing:
        raise LinkParseError(f"{device}: no {', '.join(missing)} in sysfs")
    problems = []
    speed, max_speed = link_speed_gt_s(attrs["current_link_speed"]), link_speed_gt_s(attrs["max_link_speed"])
    width, max_width = link_width(attrs["current_link_width"]), link_width(attrs["max_link_width"])
    if width < max_width:
        problems.append(f"{device}: PCIe link x{width}, capable of x{max_width}")
    if speed < max_speed:
        problems.append(f"{device}: PCIe link {speed:g} GT/s, capable of {max_speed:g} GT/s")
    return problems


def pci_path(resolved: str, gpu: str) -> list[str]:
    """PCI addresses from the root port down to ``gpu``, from its resolved sysfs directory.

    Args:
        resolved: ``readlink -f /sys/bus/pci/devices/<gpu>`` output, e.g.
            ``/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:03:00.0``.
        gpu: the GPU's PCI address (lower case), which must end the path.

    Raises:
        LinkParseError: empty output, or a path that does not end at ``gpu``.
    """
    parts = resolved.strip().split("/")
    path = [part for part in parts if _BDF.match(part)]
    if not resolved.strip().startswith("/sys/devices/") or not path or path[-1] != gpu:
        raise LinkParseError(f"{gpu}: sysfs path {resolved.strip()!r} does not lead to the GPU")
    return path


def parse_link_files(text: str, devices: list[str]) -> dict[str, dict[str, str]]:
    """The link attributes of ``devices`` from ``grep -H '' /sys/bus/pci/devices/<bdf>/<attr>...``.

    Returns:
        ``{bdf: {attribute: text}}`` for every device that has link attributes; a device with
        none of the four (a bridge without a PCIe link of its own) is left out.

    Raises:
        LinkParseError: empty output, a line not of that form, or a device with some of the
            four attributes but not all.
    """
    found: dict[str, dict[str, str]] = {}
    if not text.strip():
        raise LinkParseError("no PCIe link attributes read (empty output)")
    for line in text.splitlines():
        match = _LINK_LINE.match(line)
        if not match or match.group(2) not in LINK_FILES or match.group(1) not in devices:
            raise LinkParseError(f"unexpected line reading PCIe link attributes: {line[:200]!r}")
        found.setdefault(match.group(1), {})[match.group(2)] = match.group(3)
    for device, attrs in found.items():
        missing = [name for name in LINK_FILES if name not in attrs]
        if missing:
            raise LinkParseError(f"{device}: no {', '.join(missing)} in sysfs")
    return found


def path_link_problems(gpu: str, path: list[str], attrs: dict[str, dict[str, str]]) -> list[str]:
    """What is downgraded on any link from the root port down to ``gpu``; empty when none is.

    Each device on ``path`` with link attributes must run at the most both ends allow: its
    ``current_*`` at least the smaller of its own ``max_*`` and its path neighbours' (so a GPU
    capable of Gen 4 under a Gen 5 root port is not a downgrade, a switch port at x8 of x16 is).

    Args:
        gpu: the GPU's PCI address, for the messages.
        path: :func:`pci_path`.
        attrs: :func:`parse_link_files` of the devices on ``path``.

    Raises:
        LinkParseError: the GPU itself has no link attributes, or any is not understood.
    """
    if gpu not in attrs:
        raise LinkParseError(f"{gpu}: no PCIe link attributes in sysfs")
    linked = [d for d in path if d in attrs]
    speeds = {
        d: (link_speed_gt_s(attrs[d]["current_link_speed"]), link_speed_gt_s(attrs[d]["max_link_speed"]))
        for d in linked
    }
    widths = {d: (link_width(attrs[d]["current_link_width"]), link_width(attrs[d]["max_link_width"])) for d in linked}
    problems = []
    for i, device in enumerate(linked):
        near = linked[max(0, i - 1) : i + 2]
        speed, width = speeds[device][0], widths[device][0]
        want_speed = min(speeds[d][1] for d in near)
        want_width = min(widths[d][1] for d in near)
        where = device if device == gpu else f"{device} (upstream of GPU {gpu})"
        if width < want_width:
            problems.append(f"{where}: PCIe link x{width}, capable of x{want_width}")
        if speed < want_speed:
            problems.append(f"{where}: PCIe link {speed:g} GT/s, capable of {want_speed:g} GT/s")
    return problems


def kernel_log_readable(probe: str) -> None:
    """Raise unless ``probe`` shows that the kernel log of this boot can be read at all.

    Args:
        probe: ``journalctl -k -b 0 -n 1 --no-pager -o short-monotonic`` output (every boot
            logs kernel messages, so a readable journal gives at least one entry). A user
            outside the ``systemd-journal``/``adm`` groups gets ``-- No entries --`` and exit 0.

    Raises:
        CannotCheck: no entry in ``probe``.
    """
    if not any(_JOURNAL_ENTRY.match(line) for line in probe.splitlines()):
        shown = " | ".join(probe.strip().splitlines()[:3]) or "empty output"
        raise CannotCheck(
            f"the kernel log of this boot cannot be read ({shown}): run as root, with _sudo, "
            "or as a member of systemd-journal"
        )


def amdgpu_errors(kernel_log: str) -> list[str]:
    """The amdgpu lines of a kernel log already filtered to priority err and worse.

    Args:
        kernel_log: ``journalctl -k -b 0 -p err --no-pager -o short-monotonic`` output (after
            :func:`kernel_log_readable`; ``-- No entries --`` then means no error).

    Raises:
        CannotCheck: empty output (journalctl prints ``-- No entries --`` when there is no
            entry), or a line that is neither an entry, its continuation, nor journalctl's own.
    """
    lines = kernel_log.splitlines()
    if not kernel_log.strip():
        raise CannotCheck("journalctl printed nothing (not even '-- No entries --')")
    for line in lines:
        if line.strip() and not (_JOURNAL_ENTRY.match(line) or _JOURNAL_META.match(line) or line[:1].isspace()):
            raise CannotCheck(f"journalctl output of an unknown format: {line[:200]!r}")
    return [line for line in lines if _JOURNAL_ENTRY.match(line) and _AMDGPU.search(line)]
