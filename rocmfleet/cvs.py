"""Host checks from AMD's Cluster Validation Suite that apply to a single MI300X node.

CVS (github.com/ROCm/cvs) validates a node before it joins a cluster; the host-level checks a
fleet needs after every reboot are that each GPU's PCIe link trained at its full width and
speed (a link that comes up x8 or Gen4 halves host↔GPU bandwidth and model load time doubles)
and that the amdgpu driver logged no error since boot. The kernel exposes the link in PCI sysfs
(``current_link_speed``/``max_link_speed``, ``current_link_width``/``max_link_width``,
Documentation/ABI/testing/sysfs-bus-pci); ``amd-smi static`` reports the same maximum as
``MAX_PCIE_WIDTH: 16`` / ``MAX_PCIE_SPEED: 32 GT/s`` (``../shared/fixtures/``).
"""

from __future__ import annotations

import re

_SPEED = re.compile(r"^(\d+(?:\.\d+)?) ?GT/s(?: PCIe)?$")
#: Kernel log lines of the amdgpu driver (its messages start with ``amdgpu <bdf>:`` or ``[drm]``
#: with an amdgpu function name); matched case-insensitively.
_AMDGPU = re.compile(r"\bamdgpu\b", re.IGNORECASE)


class LinkParseError(ValueError):
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


def amdgpu_errors(kernel_log: str) -> list[str]:
    """The amdgpu lines of a kernel log already filtered to priority err and worse.

    Args:
        kernel_log: ``journalctl -k -b 0 -p err --no-pager -o short-monotonic`` output.
    """
    return [line for line in kernel_log.splitlines() if _AMDGPU.search(line)]
