"""A signed apt repository standing in for AMD's package servers (repo.radeon.com).

Same paths, suites, package names and key layout as AMD documents
(``../shared/reference/mi300x.md`` §2.2), so the ROCm role runs unchanged against it; the
packages are empty stand-ins whose maintainer scripts do what matters to a deploy:
``amdgpu-dkms`` asks for a reboot (``/var/run/reboot-required``) as a kernel module package
does. Served over HTTP on the lab bridge by :mod:`tests.lab.services`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.lab import config

#: ROCm release -> amdgpu driver directory (30.30 <-> ROCm 7.2; reference §2.1).
RELEASES = {"7.2": "30.30", "7.1": "30.20"}
SUITE = "jammy"  # Debian 12 uses the jammy suite on the legacy stream (reference §2.2)
ORIGIN = "repo.radeon.com"  # what AMD's pin matches: "Pin: release o=repo.radeon.com"

_REBOOT_POSTINST = """#!/bin/sh
# rocmfleet lab stand-in: a kernel module package asks for a reboot, like the real amdgpu-dkms.
set -e
if [ "$1" = configure ]; then
    touch /var/run/reboot-required
    echo amdgpu-dkms >> /var/run/reboot-required.pkgs
fi
"""


def _packages(rocm: str, amdgpu: str) -> dict[str, list[tuple[str, str, str, str | None]]]:
    """Per repository path: (package, version, depends, postinst) stand-ins."""
    minor = rocm.replace(".", "")
    driver = f"1:6.14.14.{amdgpu.replace('.', '')}00-2278356.22.04"
    rocm_ver = f"{rocm}.0.{minor}00000-1~22.04"
    return {
        f"amdgpu/{amdgpu}/ubuntu": [
            ("amdgpu-dkms-firmware", driver, "", None),
            ("amdgpu-dkms", driver, "amdgpu-dkms-firmware", _REBOOT_POSTINST),
        ],
        f"rocm/apt/{rocm}": [
            ("amd-smi-lib", rocm_ver, "", None),
            ("rocm-core", rocm_ver, "", None),
            ("rocm", rocm_ver, "rocm-core, amd-smi-lib", None),
        ],
        f"graphics/{rocm}/ubuntu": [],
    }


def _recipe() -> str:
    return hashlib.sha256((repr(RELEASES) + SUITE + ORIGIN + _REBOOT_POSTINST).encode()).hexdigest()[:16]


def _build_deb(out: Path, name: str, version: str, depends: str, postinst: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / name
        (root / "DEBIAN").mkdir(parents=True)
        control = (
            f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n"
            "Maintainer: rocmfleet lab <lab@rocmfleet.invalid>\n"
            + (f"Depends: {depends}\n" if depends else "")
            + f"Description: rocmfleet lab stand-in for AMD's {name}\n"
            " Empty package; no GPU software inside.\n"
        )
        (root / "DEBIAN/control").write_text(control)
        if postinst:
            (root / "DEBIAN/postinst").write_text(postinst)
            (root / "DEBIAN/postinst").chmod(0o755)
        doc = root / f"usr/share/doc/{name}"
        doc.mkdir(parents=True)
        (doc / "README.rocmfleet-lab").write_text("rocmfleet lab stand-in package\n")
        subprocess.run(
            [
                "dpkg-deb",
                "--root-owner-group",
                "--build",
                str(root),
                str(out / f"{name}_{version.split(':')[-1]}_amd64.deb"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def _gpg(gnupghome: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GNUPGHOME": str(gnupghome)}
    return subprocess.run(["gpg", "--batch", "--yes", *args], check=True, env=env, **kwargs)  # type: ignore[call-overload]


def build() -> Path:
    """Build (once; cached by recipe) the signed stand-in repository tree.

    Returns:
        The directory to serve; ``rocm/rocm.gpg.key`` is the armored signing key, as AMD's.
    """
    repo = config.CACHE_DIR / "amd-repo"
    marker = repo / ".rocmfleet-lab-recipe"
    if marker.exists() and marker.read_text() == _recipe():
        return repo
    shutil.rmtree(repo, ignore_errors=True)
    gnupghome = config.CACHE_DIR / "amd-repo-gnupg"
    shutil.rmtree(gnupghome, ignore_errors=True)
    gnupghome.mkdir(mode=0o700, parents=True)
    _gpg(
        gnupghome,
        "--passphrase",
        "",
        "--quick-gen-key",
        "rocmfleet lab stand-in for AMD ROCm repository <lab@rocmfleet.invalid>",
        "rsa3072",
        "sign",
        "never",
        stderr=subprocess.DEVNULL,
    )
    (repo / "rocm").mkdir(parents=True)
    _gpg(gnupghome, "--armor", "--output", str(repo / "rocm/rocm.gpg.key"), "--export")

    for rocm, amdgpu in RELEASES.items():
        for path, debs in _packages(rocm, amdgpu).items():
            base = repo / path
            pool = base / "pool/main"
            pool.mkdir(parents=True, exist_ok=True)
            for deb in debs:
                _build_deb(pool, *deb)
            dist = base / f"dists/{SUITE}"
            binary = dist / "main/binary-amd64"
            binary.mkdir(parents=True)
            packages = subprocess.run(
                ["apt-ftparchive", "packages", "pool"], cwd=base, check=True, capture_output=True
            ).stdout
            (binary / "Packages").write_bytes(packages)
            release = subprocess.run(
                [
                    "apt-ftparchive",
                    "-o",
                    f"APT::FTPArchive::Release::Origin={ORIGIN}",
                    "-o",
                    "APT::FTPArchive::Release::Label=rocmfleet lab stand-in for repo.radeon.com",
                    "-o",
                    f"APT::FTPArchive::Release::Suite={SUITE}",
                    "-o",
                    f"APT::FTPArchive::Release::Codename={SUITE}",
                    "-o",
                    "APT::FTPArchive::Release::Architectures=amd64",
                    "-o",
                    "APT::FTPArchive::Release::Components=main",
                    "release",
                    ".",
                ],
                cwd=dist,
                check=True,
                capture_output=True,
            ).stdout
            (dist / "Release").write_bytes(release)
            _gpg(gnupghome, "--clearsign", "--output", str(dist / "InRelease"), str(dist / "Release"))
            _gpg(gnupghome, "--armor", "--detach-sign", "--output", str(dist / "Release.gpg"), str(dist / "Release"))
    marker.write_text(_recipe())
    return repo
