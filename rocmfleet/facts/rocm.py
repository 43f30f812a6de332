"""Facts about the ROCm kernel driver, its packages, DKMS, Secure Boot and reboots."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api.facts import FactBase

from rocmfleet import scripts
from rocmfleet.domain import rocmhost
from rocmfleet.facts.state import apt_madison

#: Reasons a reboot is owed live here, one file each. ``/run`` is emptied by every boot, so a
#: reason lasts exactly until the next reboot, also across a deploy that failed before it.
REBOOT_DIR = "/run/rocmfleet/reboot-required.d"


class AptRepoVersions(FactBase[dict[str, list[tuple[str, str]]]]):
    """
    Versions apt knows per package, with the repository line each comes from
    (``apt-cache madison``): ``{"amdgpu-dkms": [("1:6.14.14...", "http://.../amdgpu/30.30/ubuntu jammy/main")]}``.
    """

    default = dict

    def command(self, packages: list[str]) -> str:
        return apt_madison(packages)

    def process(self, output: list[str]) -> dict[str, list[tuple[str, str]]]:
        versions: dict[str, list[tuple[str, str]]] = {}
        for line in output:
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3:
                versions.setdefault(parts[0], []).append((parts[1], parts[2]))
        return versions


class InstalledVersions(FactBase[dict[str, str]]):
    """Installed (``ii``/``hi``; not half-configured) versions of packages: ``{"amdgpu-dkms": "1:6.14..."}``."""

    default = dict

    def command(self, packages: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in packages)
        return f"dpkg-query -W -f '${{Package}} ${{db:Status-Abbrev}} ${{Version}}\\n' {quoted} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str]:
        installed = {}
        for line in output:
            parts = line.split()
            if len(parts) == 3 and parts[1][:2] in ("ii", "hi"):
                installed[parts[0]] = parts[2]
        return installed


class DkmsStatus(FactBase[str]):
    """Output of ``dkms status`` (empty without DKMS)."""

    default = str

    def command(self) -> str:
        return "if command -v dkms >/dev/null; then dkms status 2>&1; fi"

    def process(self, output: list[str]) -> str:
        return "\n".join(output)


class DkmsMakeLogs(FactBase[str]):
    """The last 30 lines of each ``/var/lib/dkms/<module>/*/build/make.log``, each under a
    ``--- <path> (last 30 lines) ---`` line (empty when DKMS left none)."""

    default = str

    def command(self, module: str) -> str:
        return (
            f"for f in /var/lib/dkms/{shlex.quote(module)}/*/build/make.log; do "
            '[ -e "$f" ] && { echo "--- $f (last 30 lines) ---"; tail -n 30 "$f"; }; done; true'
        )

    def process(self, output: list[str]) -> str:
        return "\n".join(output)


class Kernels(FactBase[dict[str, Any]]):
    """The running kernel and the installed ones (``/boot/vmlinuz-*``, plus the running one)."""

    default = dict

    def command(self) -> str:
        return 'uname -r; for f in /boot/vmlinuz-*; do [ -e "$f" ] && echo "${f#/boot/vmlinuz-}"; done; true'

    def process(self, output: list[str]) -> dict[str, Any]:
        lines = [line.strip() for line in output if line.strip()]
        return {"running": lines[0], "installed": sorted(set(lines))} if lines else {}


class SecureBoot(FactBase[dict[str, Any]]):
    """
    Secure Boot state and the configured MOK signing pair (``rocmfleet/scripts/secure-boot.sh``):
    ``{"enabled": bool | None, "key": bool, "certificate": bool, "enrolled": bool | None, "detail": str}``.
    ``enabled`` is None where the firmware does not say (no ``mokutil``); ``enrolled`` is None
    when no certificate was given or it is missing.
    """

    default = dict

    def command(self, key: str | None = None, certificate: str | None = None) -> str:
        pair = (key, certificate) if key and certificate else ()
        return scripts.command("secure-boot.sh", *pair)

    def process(self, output: list[str]) -> dict[str, Any]:
        info: dict[str, Any] = {"enabled": None, "key": False, "certificate": False, "enrolled": None}
        info["detail"] = "\n".join(output)
        for line in output:
            name, _, value = line.partition(": ")
            if name == "sb":
                state = value.lower()
                if "secureboot enabled" in state:
                    info["enabled"] = True
                elif "secureboot disabled" in state or "not supported" in state:
                    info["enabled"] = False
            elif name in ("key", "certificate"):
                info[name] = value.strip() == "present"
            elif name == "enrolled":
                info["enrolled"] = "already enrolled" in value
        return info


class RocmOnHost(FactBase[rocmhost.HostRocm]):
    """What a host has of AMD's two ROCm streams (apt files, keyrings, packages):
    :class:`rocmfleet.domain.rocmhost.HostRocm`, from ``rocmfleet/scripts/rocm-state.sh``."""

    def command(self) -> str:
        return scripts.command("rocm-state.sh", *rocmhost.WATCHED_FILES)

    def process(self, output: list[str]) -> rocmhost.HostRocm:
        return rocmhost.parse_host_rocm(output)

    @staticmethod
    def default() -> rocmhost.HostRocm:
        """A bare host prints nothing (no AMD file or package); pyinfra then returns this."""
        return rocmhost.parse_host_rocm([])


class RebootReasons(FactBase[list[str]]):
    """Reasons a reboot is owed (files under :data:`REBOOT_DIR`), one per line."""

    default = list

    def command(self) -> str:
        return f"cat {REBOOT_DIR}/* 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


class BootId(FactBase[str]):
    """``/proc/sys/kernel/random/boot_id``: new at every boot (also in containers)."""

    def command(self) -> str:
        return "cat /proc/sys/kernel/random/boot_id"

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""


class AmdgpuLoaded(FactBase[dict[str, bool]]):
    """Whether the ``amdgpu`` module is loaded and ``/dev/kfd`` exists."""

    default = dict

    def command(self) -> str:
        return (
            "[ -d /sys/module/amdgpu ] && echo module || true; [ -e /dev/kfd ] && echo kfd || true; "
            "systemd-detect-virt --container >/dev/null 2>&1 && echo container || true"
        )

    def process(self, output: list[str]) -> dict[str, bool]:
        lines = {line.strip() for line in output}
        return {"module": "module" in lines, "kfd": "kfd" in lines, "container": "container" in lines}


def keyring_fetch(src: str) -> str:
    """Shell that downloads the key at ``src`` through apt's proxy (``Acquire::http::Proxy``) and
    dearmors it into the temporary file ``$tmp`` (``$tmp.key`` the download); it fails, changing
    nothing, when the download or ``gpg`` does. Shared by :class:`KeyringMatches` and
    ``rocmfleet.operations.rocm.keyring``.

    Example: ``keyring_fetch("https://repo.radeon.com/rocm/rocm.gpg.key")``.
    """
    return (
        "eval $(apt-config shell P Acquire::http::Proxy); "
        f'tmp=$(mktemp); curl -fsSL --connect-timeout 10 ${{P:+--proxy "$P"}} {shlex.quote(src)} -o "$tmp.key" && '
        f'gpg --batch --yes --dearmor -o "$tmp" "$tmp.key"'
    )


def version_from_repo(versions: dict[str, list[tuple[str, str]]], package: str, repo: str) -> str | None:
    """The version of ``package`` that the repository ``repo`` offers, from :class:`AptRepoVersions`
    (``None``: apt knows none from there, e.g. its lists predate the source file)."""
    for version, source in versions.get(package, []):
        if source.split()[0].rstrip("/") == repo.rstrip("/"):
            return version
    return None


class KeyringMatches(FactBase[str]):
    """``same`` when the keyring at ``dest`` equals the dearmored key fetched by ``src_fetch`` and
    has mode 644 (apt reads keyrings as its unprivileged ``_apt`` user, and ignores one it cannot
    read); ``differs`` otherwise; nothing when the download failed."""

    def command(self, src_fetch: str, dest: str) -> str:
        quoted = shlex.quote(dest)
        return (
            f'{src_fetch} && if cmp -s "$tmp" {quoted} && [ "$(stat -c %a {quoted})" = 644 ]; '
            'then echo same; else echo differs; fi; rm -f "$tmp" "$tmp.key"'
        )

    def process(self, output: list[str]) -> str:
        return output[-1].strip() if output else "differs"
