"""What ROCm a host has and what to take off it: its apt files and packages by stream (:class:`HostRocm`, read by
``rocm-state.sh``), the packages of each stream, a stream change's removal and the downgrades refused
(``../shared/reference/mi300x.md`` §2)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from rocmfleet.domain.rocm import (
    AMDGPU_LIST,
    CURRENT_KEYRING,
    CURRENT_SOURCES,
    LEGACY_KEYRING,
    PIN_FILE,
    ROCM_LIST,
    RocmSettings,
    version_tuple,
)

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
    return max(versions, key=version_tuple) if versions else None


def downgrades(settings: RocmSettings, found: HostRocm) -> list[str]:
    """Moves to an older release within the host's stream, one message each (empty: none).

    Compared: the amdgpu driver directory (``amdgpu.list``) and the ROCm release (``rocm.list``
    or the ``amdrocm<ver>`` packages). A host that is changing streams has no downgrade: the
    other stream is removed first, whatever its versions.
    """
    if streams_on_host(found) - {settings.rocm_stream}:
        return []
    problems = []
    if found.driver_dir and version_tuple(settings.amdgpu_version) < version_tuple(found.driver_dir):
        problems.append(f"amdgpu driver {settings.amdgpu_version} is older than the installed {found.driver_dir}")
    have = installed_rocm_version(settings.rocm_stream, found)
    if have and version_tuple(settings.rocm_version) < version_tuple(have):
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
