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
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
            if not LEGACY_VERSION.match(self.rocm_version) or version_tuple(self.rocm_version) > LEGACY_LAST:
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


def version_tuple(version: str) -> tuple[int, ...]:
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
