"""The ROCm role's logic: settings, what each OS and stream gets, the apt files, DKMS checks.

Everything here follows ``../shared/reference/mi300x.md`` §2 (AMD's install pages [R1] [R2]
[R3] [R6]); the functions are pure so that unit tests compare their output with AMD's lines.

Two package streams:

- ``legacy``: ROCm 7.0 to 7.2.x from ``repo.radeon.com``: ``/etc/apt/keyrings/rocm.gpg``,
  ``amdgpu.list`` (kernel driver), ``rocm.list`` (userspace) and the ``rocm-pin-600`` pin
  (reference §2.2).
- ``current``: ROCm 10.x ("TheRock") userspace from ``stable.repo.amd.com``:
  ``/etc/apt/keyrings/amdrocm.gpg``, ``amdrocm-stable.sources`` (deb822) and
  ``amdrocm<ver>-gfx942`` packages (reference §2.3). Its kernel driver still comes from
  ``repo.radeon.com/amdgpu/<driver>/ubuntu`` (the 31.50 driver; reference §2.1, §2.3).

A host that only runs containers needs only the kernel driver (``amdgpu-dkms``; reference
§2.2 "A Docker-only host needs just amdgpu-dkms" [R5]); the userspace is opt-in.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rocmfleet.config.errors import ToolOutputError, quoted

PREFIX = "rocm_"

KEYRING_DIR = "/etc/apt/keyrings"
LEGACY_KEYRING = f"{KEYRING_DIR}/rocm.gpg"
CURRENT_KEYRING = f"{KEYRING_DIR}/amdrocm.gpg"
AMDGPU_LIST = "/etc/apt/sources.list.d/amdgpu.list"
ROCM_LIST = "/etc/apt/sources.list.d/rocm.list"
PIN_FILE = "/etc/apt/preferences.d/rocm-pin-600"
CURRENT_SOURCES = "/etc/apt/sources.list.d/amdrocm-stable.sources"
UDEV_RULE = "/etc/udev/rules.d/70-amdgpu.rules"
ADDUSER_CONF = "/etc/adduser.conf"
#: DKMS reads ``/etc/dkms/framework.conf`` then ``framework.conf.d/*.conf``; ``mok_signing_key``
#: and ``mok_certificate`` name the pair it signs modules with (dell/dkms README, "Module signing").
DKMS_SIGNING_CONF = "/etc/dkms/framework.conf.d/rocmfleet-mok.conf"

#: Pin file body, exactly as AMD documents it (reference §2.2 [R1]).
PIN = "Package: *\nPin: release o=repo.radeon.com\nPin-Priority: 600\n"

#: AMD's recommended udev rule (reference §2.4 [R3]).
UDEV_RULE_LINES = ('KERNEL=="kfd", MODE="0666"', 'SUBSYSTEM=="drm", KERNEL=="renderD*", MODE="0666"')

#: ROCm minor -> amdgpu driver directory (reference §2.1 [R2]: 30.10.x <-> 7.0, 30.20 <-> 7.1,
#: 30.30.x <-> 7.2, 31.50 <-> 10.0); 7.0.1 -> 30.10.1 is from AMD's docs conf [R2-conf].
DRIVER_FOR_ROCM = {"7.0": "30.10", "7.0.1": "30.10.1", "7.1": "30.20", "7.2": "30.30", "10.0": "31.50"}

#: Versions each stream ships (reference §2.1): legacy 7.0 to 7.2.4 (the last legacy release),
#: current 10.0 (the only 10.x whose install page the reference holds).
LEGACY_VERSION = re.compile(r"^7\.(0|1|2)(\.[0-9]+)?$")
LEGACY_LAST = (7, 2, 4)
CURRENT_VERSIONS = ("10.0",)


@dataclass(frozen=True)
class OsTarget:
    """What one supported OS release needs from AMD's repositories."""

    key: str  # ubuntu2404 / ubuntu2204 / debian12: the deb822 URI path segment (§2.3)
    name: str
    suite: str  # legacy stream and driver repository suite (§2.2: Debian 12 uses jammy)
    debian: bool  # Debian's list lines use arch=amd64 and it has no linux-modules-extra (§2.2)


OS_TARGETS = {
    ("ubuntu", "24.04"): OsTarget("ubuntu2404", "Ubuntu 24.04", "noble", debian=False),
    ("ubuntu", "22.04"): OsTarget("ubuntu2204", "Ubuntu 22.04", "jammy", debian=False),
    ("debian", "12"): OsTarget("debian12", "Debian 12", "jammy", debian=True),
}


class UnsupportedHost(ValueError):
    """The host's OS or kernel is not one AMD supports for the chosen stream; nothing was changed."""


class RocmSettings(BaseModel):
    """Everything the ``rocm`` role reads for one host (keys prefixed ``rocm_``)."""

    model_config = ConfigDict(extra="forbid")

    rocm_stream: Literal["legacy", "current"] = Field(
        default="current",
        description="`legacy`: ROCm <= 7.2.x from repo.radeon.com (rocm.gpg, list files, pin 600); "
        "`current`: ROCm 10.x from stable.repo.amd.com (amdrocm.gpg, deb822). Reference §2.1.",
    )
    rocm_version: str = Field(
        default="10.0", description="ROCm release, e.g. `7.2` or `7.2.1` (legacy) or `10.0` (current)."
    )
    rocm_amdgpu_version: str | None = Field(
        default=None,
        pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$",
        description="amdgpu driver directory under `<repo>/amdgpu/`; null: AMD's pairing "
        "(7.2 -> 30.30, 10.0 -> 31.50).",
    )
    rocm_userspace: bool = Field(
        default=False,
        description="Install the ROCm userspace on the host too; containers bring their own, so off by default.",
    )
    rocm_userspace_packages: list[str] | None = Field(
        default=None,
        description="Userspace packages; null: `rocm` (legacy) or `amdrocm<ver>-gfx942` (current, MI300X).",
    )
    rocm_driver_packages: list[str] = Field(
        default=["amdgpu-dkms", "amdgpu-dkms-firmware"],
        min_length=1,
        description="Kernel driver packages, held at the version of the configured amdgpu repository.",
    )
    rocm_repo_url: str = Field(
        default="https://repo.radeon.com",
        description="Base of AMD's legacy repository (`amdgpu/`, `rocm/apt/`, `graphics/`); change for a mirror.",
    )
    rocm_key_url: str = Field(
        default="https://repo.radeon.com/rocm/rocm.gpg.key", description="Signing key of `rocm_repo_url`."
    )
    rocm_current_repo_url: str = Field(
        default="https://stable.repo.amd.com/rocm/core/packages",
        description="Base of the current stream's repository; the OS directory (`debian12/`) is appended.",
    )
    rocm_current_key_url: str = Field(
        default="https://stable.repo.amd.com/rocm/gpg/packages.gpg",
        description="Signing key of `rocm_current_repo_url`.",
    )
    rocm_device_access: Literal["udev", "groups"] = Field(
        default="udev",
        description="`udev`: AMD's recommended rule making /dev/kfd and render nodes 0666; "
        "`groups`: add `rocm_device_users` to video and render. Reference §2.4.",
    )
    rocm_device_users: list[str] = Field(
        default_factory=list, description="Users added to `video` and `render` when `rocm_device_access: groups`."
    )
    rocm_supported_kernels: dict[str, list[str]] = Field(
        default={"ubuntu2404": ["6.8.*", "6.14.*"], "ubuntu2204": ["5.15.*", "6.8.*"], "debian12": ["6.1.*"]},
        description="Per OS (`ubuntu2404`, `ubuntu2204`, `debian12`): `uname -r` patterns the driver is "
        "deployed on (GA and HWE kernels of AMD's compatibility matrix); other kernels stop the host.",
    )
    rocm_reboot_parallel: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="Hosts rebooting at the same time (one at a time unless raised); at most 1000, more than "
        "pyinfra runs in parallel by default.",
    )
    rocm_reboot_timeout_s: int = Field(
        default=900,
        ge=30,
        le=7200,
        description="How long to wait for a host to come back; at most 2 h (a server's POST and a DKMS "
        "rebuild take minutes).",
    )
    rocm_allow_downgrade: bool = Field(
        default=False,
        description="Allow moving a host to an older release within its stream (an older ROCm version or "
        "amdgpu driver directory); otherwise such a host fails before anything changes. Stream changes "
        "(legacy <-> current) are always allowed.",
    )
    rocm_mok_signing_key: str | None = Field(
        default=None,
        pattern=r"^/",
        max_length=4096,
        description="Secure Boot: path on the host of the MOK private key DKMS signs amdgpu with "
        "(e.g. /var/lib/dkms/mok.key); set with `rocm_mok_certificate`. Null: no signing; a host with "
        "Secure Boot on then fails before any package changes.",
    )
    rocm_mok_certificate: str | None = Field(
        default=None,
        pattern=r"^/",
        max_length=4096,
        description="Secure Boot: path on the host of the MOK certificate (DER) matching "
        "`rocm_mok_signing_key`, enrolled with `mokutil --import` (e.g. /var/lib/dkms/mok.pub).",
    )
    rocm_check_module: bool = Field(
        default=True,
        description="After a reboot, require the `amdgpu` module loaded and /dev/kfd present "
        "(the lab turns this off: its hosts share the machine's kernel).",
    )

    @model_validator(mode="after")
    def _stream_version(self) -> RocmSettings:
        if self.rocm_stream == "legacy":
            if not LEGACY_VERSION.match(self.rocm_version) or _vtuple(self.rocm_version) > LEGACY_LAST:
                raise ValueError(
                    f"rocm_version {self.rocm_version!r} is not a legacy release; "
                    "rocm_stream legacy supports 7.0 to 7.2.4 (e.g. 7.2, 7.2.1)"
                )
        elif self.rocm_version not in CURRENT_VERSIONS:
            raise ValueError(
                f"rocm_version {self.rocm_version!r} is not supported on rocm_stream current; "
                f"supported: {', '.join(CURRENT_VERSIONS)} (legacy releases 7.0 to 7.2.4 need rocm_stream legacy)"
            )
        if (self.rocm_mok_signing_key is None) != (self.rocm_mok_certificate is None):
            raise ValueError(
                "rocm_mok_signing_key and rocm_mok_certificate go together: set both (MOK signing) or neither"
            )
        unknown = sorted(set(self.rocm_supported_kernels) - {t.key for t in OS_TARGETS.values()})
        if unknown:
            raise ValueError(
                f"rocm_supported_kernels: unknown OS {', '.join(unknown)}; "
                f"known: {', '.join(t.key for t in OS_TARGETS.values())}"
            )
        return self

    @property
    def amdgpu_version(self) -> str:
        """The amdgpu driver directory: ``rocm_amdgpu_version`` or AMD's pairing for the release."""
        if self.rocm_amdgpu_version:
            return self.rocm_amdgpu_version
        return DRIVER_FOR_ROCM.get(self.rocm_version) or DRIVER_FOR_ROCM[".".join(self.rocm_version.split(".")[:2])]

    @property
    def userspace_packages(self) -> list[str]:
        """Userspace packages for the stream (reference §2.2 step 3, §2.3 gfx942 packages)."""
        if self.rocm_userspace_packages is not None:
            return self.rocm_userspace_packages
        return ["rocm"] if self.rocm_stream == "legacy" else [f"amdrocm{self.rocm_version}-gfx942"]

    @property
    def driver_repo(self) -> str:
        """URL of the amdgpu driver repository (what ``apt-cache madison`` lists it as)."""
        return f"{self.rocm_repo_url.rstrip('/')}/amdgpu/{self.amdgpu_version}/ubuntu"


def _vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


# -- hosts ------------------------------------------------------------------------------------


def os_target(distro: str, version: str) -> OsTarget:
    """The :class:`OsTarget` for an ``/etc/os-release`` ``ID`` and ``VERSION_ID``.

    Raises:
        UnsupportedHost: names the OS and the supported ones.
    """
    target = OS_TARGETS.get((distro.lower(), version))
    if target is None:
        supported = ", ".join(t.name for t in OS_TARGETS.values())
        raise UnsupportedHost(f"{distro} {version} is not supported by the ROCm role; supported: {supported}")
    return target


def check_kernel(settings: RocmSettings, target: OsTarget, kernel: str) -> None:
    """Raise :class:`UnsupportedHost` unless ``kernel`` matches ``rocm_supported_kernels`` for the OS."""
    patterns = settings.rocm_supported_kernels.get(target.key, [])
    if not any(fnmatch.fnmatchcase(kernel, p) for p in patterns):
        allowed = ", ".join(patterns) or "none configured"
        raise UnsupportedHost(
            f"kernel {kernel} on {target.name} is not supported for amdgpu-dkms; supported: {allowed} "
            f"(rocm_supported_kernels.{target.key})"
        )


def header_packages(target: OsTarget, kernel: str) -> list[str]:
    """Headers (and ``linux-modules-extra`` on Ubuntu) for the running kernel (§2.2 step 1 [R2-prereq])."""
    if target.debian:
        return [f"linux-headers-{kernel}"]
    return [f"linux-headers-{kernel}", f"linux-modules-extra-{kernel}"]


# -- repository files -------------------------------------------------------------------------


def _arch(target: OsTarget, ubuntu: str) -> str:
    return "amd64" if target.debian else ubuntu


def amdgpu_list(settings: RocmSettings, target: OsTarget) -> str:
    """``/etc/apt/sources.list.d/amdgpu.list`` (reference §2.2 [R2]; Ubuntu pages: amd64,i386)."""
    return (
        f"deb [arch={_arch(target, 'amd64,i386')} signed-by={LEGACY_KEYRING}] "
        f"{settings.driver_repo} {target.suite} main\n"
    )


def rocm_list(settings: RocmSettings, target: OsTarget) -> str:
    """``/etc/apt/sources.list.d/rocm.list``, legacy userspace (reference §2.2 [R1])."""
    base = settings.rocm_repo_url.rstrip("/")
    opts = f"[arch=amd64 signed-by={LEGACY_KEYRING}]"
    return (
        f"deb {opts} {base}/rocm/apt/{settings.rocm_version} {target.suite} main\n"
        f"deb {opts} {base}/graphics/{settings.rocm_version}/ubuntu {target.suite} main\n"
    )


def current_repo(settings: RocmSettings, target: OsTarget) -> str:
    """URI of the current stream's repository for the OS, with AMD's trailing slash (§2.3)."""
    return f"{settings.rocm_current_repo_url.rstrip('/')}/{target.key}/"


def current_sources(settings: RocmSettings, target: OsTarget) -> str:
    """``/etc/apt/sources.list.d/amdrocm-stable.sources`` (deb822; reference §2.3 [R6])."""
    return (
        "X-Repo-Id: amdrocm-stable\n"
        "Types: deb\n"
        f"URIs: {current_repo(settings, target)}\n"
        "Suites: stable\n"
        "Components: main\n"
        "Architectures: amd64\n"
        f"Signed-By: {CURRENT_KEYRING}\n"
        "Enabled: yes\n"
    )


def repo_files(settings: RocmSettings, target: OsTarget) -> dict[str, str | None]:
    """Every apt file the role owns: path -> body, or ``None`` where the file must not exist.

    Files of the other stream (and ``rocm.list`` when the userspace is off) are absent, so a
    version or stream change leaves no old list file or pin behind.
    """
    legacy = settings.rocm_stream == "legacy"
    userspace = settings.rocm_userspace
    return {
        AMDGPU_LIST: amdgpu_list(settings, target),
        ROCM_LIST: rocm_list(settings, target) if legacy and userspace else None,
        PIN_FILE: PIN if legacy else None,
        CURRENT_SOURCES: current_sources(settings, target) if not legacy and userspace else None,
    }


def userspace_repo(settings: RocmSettings, target: OsTarget) -> str:
    """Repository URL the userspace packages must come from (for ``apt-cache madison``)."""
    if settings.rocm_stream == "legacy":
        return f"{settings.rocm_repo_url.rstrip('/')}/rocm/apt/{settings.rocm_version}"
    return current_repo(settings, target).rstrip("/")


# -- what a host has of each stream, stream changes, downgrades ------------------------------

STREAMS = ("legacy", "current")

#: Package-name patterns of each stream's userspace, in the order AMD uninstalls them: the
#: legacy page removes the meta package (``apt autoremove rocm``, or ``rocm<ver>`` for a
#: versioned install), then ``rocm-core``, on which every legacy ROCm package depends [R1
#: "Uninstalling"]. The current stream's packages are all named ``amdrocm*`` (reference §2.3).
#: The driver packages (``amdgpu-dkms``...) have the same names in both streams: the new
#: stream's driver replaces the old one in place.
STREAM_PACKAGES: dict[str, tuple[tuple[str, ...], ...]] = {
    "legacy": (("rocm", "rocm[0-9]*"), ("rocm-core", "rocm-core[0-9]*")),
    "current": (("amdrocm*",),),
}
#: Apt files and keyrings only one stream has; ``amdgpu.list`` and ``rocm.gpg`` serve the
#: kernel driver in both (reference §2.2, §2.3: the driver comes from repo.radeon.com).
STREAM_FILES: dict[str, tuple[str, ...]] = {
    "legacy": (ROCM_LIST, PIN_FILE),
    "current": (CURRENT_SOURCES, CURRENT_KEYRING),
}
#: Every path :class:`HostRocm` reports on; ``rocm-state.sh`` reads the first two's deb lines.
WATCHED_FILES = (AMDGPU_LIST, ROCM_LIST, PIN_FILE, CURRENT_SOURCES, CURRENT_KEYRING, LEGACY_KEYRING)

_CURRENT_PACKAGE = re.compile(r"^amdrocm(?:-core-(?:dev|sdk))?(?P<version>[0-9]+\.[0-9]+)(?:-gfx[0-9a-z]+)?$")
_DRIVER_DIR = re.compile(r"/amdgpu/(?P<dir>[0-9][0-9.]*)/ubuntu\b")
_LEGACY_DIR = re.compile(r"/rocm/apt/(?P<version>[0-9][0-9.]*)\s")


@dataclass(frozen=True)
class HostRocm:
    """What a host has of AMD's two streams, read by :class:`rocmfleet.facts.rocm.RocmOnHost`.

    ``files``: which of :data:`WATCHED_FILES` exist; ``packages``: AMD's installed packages
    (``amdgpu*``, ``rocm*``, ``amdrocm*``, ``amd-smi*``) -> version; ``driver_dir``: the amdgpu
    directory ``amdgpu.list`` points at; ``legacy_version``: the ROCm release ``rocm.list`` points at.
    """

    files: frozenset[str] = frozenset()
    packages: dict[str, str] | None = None
    driver_dir: str | None = None
    legacy_version: str | None = None

    @property
    def installed(self) -> dict[str, str]:
        return self.packages or {}


def parse_host_rocm(lines: list[str]) -> HostRocm:
    """Parse ``rocmfleet/scripts/rocm-state.sh`` output: ``file <path>``, ``amdgpu <line>``,
    ``rocm <line>`` and ``pkg <name> <dpkg status> <version>`` lines."""
    files, packages = set(), {}
    driver_dir = legacy_version = None
    for line in lines:
        kind, _, rest = line.strip().partition(" ")
        if kind == "file":
            files.add(rest.strip())
        elif kind == "amdgpu" and (m := _DRIVER_DIR.search(rest)):
            driver_dir = m.group("dir")
        elif kind == "rocm" and (m := _LEGACY_DIR.search(rest + " ")):
            legacy_version = m.group("version")
        elif kind == "pkg":
            parts = rest.split()
            if len(parts) == 3 and parts[1][:2] in ("ii", "hi", "iU", "iF", "hU", "hF"):
                packages[parts[0]] = parts[2]
    return HostRocm(frozenset(files), packages, driver_dir, legacy_version)


def _matching(names: Iterable[str], patterns: Iterable[str]) -> list[str]:
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns))


def stream_packages(stream: str, installed: Collection[str]) -> list[list[str]]:
    """Installed packages of ``stream``'s userspace, one list per AMD uninstall step (empty steps dropped)."""
    steps = [_matching(installed, patterns) for patterns in STREAM_PACKAGES[stream]]
    return [step for step in steps if step]


def streams_on_host(found: HostRocm) -> set[str]:
    """The streams a host shows signs of.

    Legacy: its pin, ``rocm.list`` or a ``rocm``/``rocm-core`` package. Current: its deb822
    source, ``amdrocm.gpg`` or an ``amdrocm*`` package; also a driver (``amdgpu.list``) with no
    sign of legacy, since the role's current stream writes the driver source and nothing else
    when the userspace is off.
    """
    streams = set()
    for stream in STREAMS:
        if found.files & set(STREAM_FILES[stream]) or stream_packages(stream, found.installed):
            streams.add(stream)
    if not streams and AMDGPU_LIST in found.files:
        streams.add("current")
    return streams


@dataclass(frozen=True)
class StreamRemoval:
    """What moving to the configured stream removes, in AMD's order: packages (one purge per
    step), then the stream's apt files and keyring."""

    stream: str
    package_steps: tuple[tuple[str, ...], ...]
    files: tuple[str, ...]

    def describe(self) -> str:
        packages = ", ".join(p for step in self.package_steps for p in step) or "none"
        files = ", ".join(self.files) or "none"
        return f"the ROCm {self.stream} stream: packages {packages}; files {files}"


def stream_removal(settings: RocmSettings, found: HostRocm) -> StreamRemoval | None:
    """What of the *other* stream must go before the configured one is installed, or None.

    AMD: "If you have ROCm 7.2.4 or older installed, please uninstall it before proceeding"
    (reference §2.1, [R6]); the legacy uninstall order is the meta package, then ``rocm-core``,
    then the repository files, then a cleared apt cache and a restart [R1 "Uninstalling"].
    """
    other = "current" if settings.rocm_stream == "legacy" else "legacy"
    steps = tuple(tuple(step) for step in stream_packages(other, found.installed))
    files = tuple(f for f in STREAM_FILES[other] if f in found.files)
    if not steps and not files:
        return None
    return StreamRemoval(other, steps, files)


def userspace_removal(settings: RocmSettings, found: HostRocm) -> StreamRemoval | None:
    """The configured stream's userspace packages on a host whose data has ``rocm_userspace`` off,
    in AMD's uninstall order, or None (the userspace is wanted, or there is none)."""
    if settings.rocm_userspace:
        return None
    steps = tuple(tuple(step) for step in stream_packages(settings.rocm_stream, found.installed))
    return StreamRemoval(settings.rocm_stream, steps, ()) if steps else None


def installed_rocm_version(stream: str, found: HostRocm) -> str | None:
    """The ROCm release a host has of ``stream``: ``rocm.list``'s (legacy) or the newest
    ``amdrocm<ver>*`` package's (current); None when it has no userspace of that stream."""
    if stream == "legacy":
        return found.legacy_version
    versions = [m.group("version") for n in found.installed if (m := _CURRENT_PACKAGE.match(n))]
    return max(versions, key=_vtuple) if versions else None


def downgrades(settings: RocmSettings, found: HostRocm) -> list[str]:
    """Moves to an older release within the host's stream, one message each (empty: none).

    Compared: the amdgpu driver directory (``amdgpu.list``) and the ROCm release (``rocm.list``
    or the ``amdrocm<ver>`` packages). A host that is changing streams has no downgrade: the
    other stream is removed first, whatever its versions.
    """
    if streams_on_host(found) - {settings.rocm_stream}:
        return []
    problems = []
    if found.driver_dir and _vtuple(settings.amdgpu_version) < _vtuple(found.driver_dir):
        problems.append(f"amdgpu driver {settings.amdgpu_version} is older than the installed {found.driver_dir}")
    have = installed_rocm_version(settings.rocm_stream, found)
    if have and _vtuple(settings.rocm_version) < _vtuple(have):
        problems.append(f"ROCm {settings.rocm_version} is older than the installed {have}")
    return problems


def downgrade_problem(settings: RocmSettings, found: HostRocm) -> str | None:
    """The message failing a host whose data moves it to an older release, or None (allowed or none)."""
    problems = downgrades(settings, found)
    if not problems or settings.rocm_allow_downgrade:
        return None
    return (
        f"rocmfleet: {'; '.join(problems)} ({settings.rocm_stream} stream): refusing a downgrade. "
        "Set rocm_allow_downgrade: true for this host to go back; nothing was changed on this host"
    )


# -- Secure Boot -------------------------------------------------------------------------------


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
