"""The kernel driver's checks on a ROCm host: Secure Boot and the DKMS signing key, the udev rule, and the
tools' output read for them (``dkms status``, ``apt-cache madison``, the reboot check, kernel order)
(``../shared/reference/mi300x.md`` §2)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocmfleet.domain.rocm import UDEV_RULE_LINES, RocmSettings
from rocmfleet.domain.tooloutput import ToolOutputError, quoted


def secure_boot_problem(settings: RocmSettings, info: Mapping[str, Any]) -> str | None:
    """Why a host with Secure Boot on cannot load the amdgpu module DKMS will build, or None.

    ``info`` is :class:`rocmfleet.facts.rocm.SecureBoot`'s answer for the configured pair:
    ``{"enabled": bool | None, "key": bool, "certificate": bool, "enrolled": bool | None, "detail": str}``.
    With Secure Boot on, the kernel loads only modules signed by an enrolled key, so DKMS must
    sign amdgpu with a Machine Owner Key the firmware knows (dell/dkms README, "Module signing").
    """
    if info.get("enabled") is not True:
        return None
    if not settings.rocm_mok_signing_key:
        return (
            "rocmfleet: Secure Boot is enabled and no module signing key is configured, so the amdgpu "
            "module DKMS builds would not load. Either disable Secure Boot in the firmware setup, or "
            "configure MOK signing: put a key pair on the host, enroll its certificate (mokutil --import "
            "<certificate>, then confirm in MOK Manager at the console on the next boot) and set "
            "rocm_mok_signing_key and rocm_mok_certificate to their paths. Nothing was changed on this host"
        )
    missing = [
        f"{name} {path} does not exist"
        for name, path, present in (
            ("rocm_mok_signing_key", settings.rocm_mok_signing_key, info.get("key")),
            ("rocm_mok_certificate", settings.rocm_mok_certificate, info.get("certificate")),
        )
        if not present
    ]
    if missing:
        return f"rocmfleet: Secure Boot is enabled and {'; '.join(missing)}. Nothing was changed on this host"
    if info.get("enrolled") is not True:
        return (
            f"rocmfleet: Secure Boot is enabled and the certificate {settings.rocm_mok_certificate} is not "
            "enrolled, so modules signed with it would not load. Enroll it (mokutil --import "
            f"{settings.rocm_mok_certificate}, then confirm in MOK Manager at the console on the next boot) "
            f"or disable Secure Boot in the firmware setup. Nothing was changed on this host\n{info.get('detail', '')}"
        )
    return None


def dkms_signing_conf(settings: RocmSettings) -> str | None:
    """Body of :data:`DKMS_SIGNING_CONF` for the configured MOK pair, or None (no signing configured)."""
    if not settings.rocm_mok_signing_key:
        return None
    return f"mok_signing_key={settings.rocm_mok_signing_key}\nmok_certificate={settings.rocm_mok_certificate}\n"


def udev_rule() -> str:
    return "\n".join(UDEV_RULE_LINES) + "\n"


# -- DKMS -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DkmsEntry:
    """One line of ``dkms status``: ``amdgpu/6.14.14-2204008.24.04, 6.14.0-29-generic, x86_64: installed``."""

    module: str
    version: str
    kernel: str
    arch: str
    state: str


_DKMS_LINE = re.compile(
    r"^(?P<module>[^/,\s]+)[/,]\s*(?P<version>[^,]+),\s*(?P<kernel>[^,]+),\s*(?P<arch>[^:]+):\s*(?P<state>.+)$"
)


#: A module added to DKMS but built for no kernel: ``amdgpu/6.14.14-2204008.24.04: added`` (dkms 3)
#: or ``amdgpu, 6.14.14: added`` (dkms 2).
_DKMS_ADDED = re.compile(r"^[^/,\s]+[/,]\s*[^,:]+:\s*added$")
#: A warning dkms prints among the lines (e.g. ``Warning: ...``, ``Error! ...``); not an entry.
_DKMS_NOTE = re.compile(r"^(Warning|Error|Deprecated)\b", re.IGNORECASE)


def parse_dkms_status(text: str, strict: bool = False) -> list[DkmsEntry]:
    """Parse ``dkms status`` (reference §2.5 [R2-post]); lines without a kernel (``added``) are skipped.

    Args:
        text: the whole output.
        strict: for a check (``rocmfleet check``): empty output, or a line that is neither an
            entry, an ``added`` line nor a dkms warning (a truncated line, another tool's
            format), raises instead of being skipped. The deploy's DKMS check reads it lenient
            and reports the whole output when the module is missing.

    Raises:
        ToolOutputError: with ``strict``, as above.
    """
    if strict and not text.strip():
        raise ToolOutputError("dkms status printed nothing: cannot tell which kernels amdgpu is built for")
    entries = []
    for line in text.splitlines():
        m = _DKMS_LINE.match(line.strip())
        if m:
            entries.append(DkmsEntry(**{k: v.strip() for k, v in m.groupdict().items()}))
        elif strict and line.strip() and not _DKMS_ADDED.match(line.strip()) and not _DKMS_NOTE.match(line.strip()):
            raise ToolOutputError(f"dkms status: a line of an unknown format: {line.strip()[:200]!r}")
    return entries


def parse_madison(text: str, package: str) -> list[tuple[str, str]]:
    """``(version, repository URL)`` of each line of ``apt-cache madison PACKAGE``, in apt's order.

    A line is ``amdgpu-dkms | 1:6.14.14.30300000-2278356.22.04 | https://repo.radeon.com/amdgpu/6.3/ubuntu
    jammy/main amd64 Packages``; the URL is the third field's first word, without a trailing ``/``.

    Raises:
        ToolOutputError: empty output (apt knows no version: ``apt-get update`` never ran or the
            repository is missing), or a line without the three fields, with another package
            name, or without a URL (truncated, or another format).
    """
    if not text.strip():
        raise ToolOutputError(f"apt-cache madison {package} printed nothing: apt knows no version of it")
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or parts[0] != package or not parts[1] or "://" not in parts[2].split(" ")[0]:
            raise ToolOutputError(f"apt-cache madison {package}: a line of an unknown format: {line.strip()[:200]!r}")
        found.append((parts[1], parts[2].split()[0].rstrip("/")))
    return found


def parse_madison_packages(text: str, packages: list[str]) -> dict[str, list[tuple[str, str]]]:
    """``{package: [(version, repository URL)]}`` from one ``apt-cache madison P1 P2...``
    (:func:`parse_madison` per package; one apt cache load instead of one per package).

    Raises:
        ToolOutputError: a line of none of ``packages``, or a package without any line.
    """
    lines: dict[str, list[str]] = {package: [] for package in packages}
    for line in text.splitlines():
        if not line.strip():
            continue
        name = line.split("|", 1)[0].strip()
        if name not in lines:
            raise ToolOutputError(f"apt-cache madison: a line of an unknown format: {line.strip()[:200]!r}")
        lines[name].append(line)
    return {package: parse_madison("\n".join(found), package) for package, found in lines.items()}


def reboot_reasons(rc: int, stdout: str, stderr: str = "") -> list[str]:
    """The reasons a reboot is owed, from ``rocmfleet/scripts/reboot-owed.sh`` (exit status and output).

    The script prints ``state: none`` (no reasons directory: nothing owed since boot) or
    ``state: listed`` and then each reason file's text.

    Raises:
        ToolOutputError: the script failed (the directory or a reason in it cannot be read, e.g.
            without sudo), or its output does not start with a ``state:`` line (truncated).
    """
    lines = stdout.splitlines()
    if rc != 0:
        raise ToolOutputError(f"cannot read the reboot reasons (exit {rc}): {stderr.strip()[-300:] or quoted(stdout)}")
    if not lines or lines[0] not in ("state: none", "state: listed"):
        raise ToolOutputError(f"reboot-owed.sh: output of an unknown format: {quoted(stdout)}")
    return [line for line in lines[1:] if line.strip()]


def kernel_sort_key(kernel: str) -> tuple[tuple[int, int | str], ...]:
    """Natural sort key for kernel releases (``6.8.0-45-generic`` < ``6.8.0-100-generic``)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+~]", kernel))


def newest_kernel(kernels: list[str]) -> str:
    return max(kernels, key=kernel_sort_key)


def dkms_problems(entries: list[DkmsEntry], module: str, kernels: list[str]) -> list[str]:
    """Kernels among ``kernels`` for which ``module`` is not ``installed``, one message each."""
    problems = []
    for kernel in dict.fromkeys(kernels):
        states = [e.state for e in entries if e.module == module and e.kernel == kernel]
        if not any(s.startswith("installed") for s in states):
            found = ", ".join(states) or "no entry"
            problems.append(f"{module} is not installed for kernel {kernel} (dkms status: {found})")
    return problems
