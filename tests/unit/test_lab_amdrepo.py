"""The lab's stand-in AMD repositories (tests/lab/amdrepo.py) against the ROCm role's own apt
files: apt (with a private state directory, no root needed) reads what the role would write,
and finds each stream's packages where AMD has them; a wrong key, suite or name fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rocmfleet.config.settings import host_config
from rocmfleet.domain import rocm

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("apt-get", "apt-ftparchive", "dpkg-deb", "gpg")),
    reason="needs apt-get, apt-ftparchive (apt-utils), dpkg-deb and gpg",
)
DEBIAN12 = rocm.os_target("debian", "12")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    from tests.lab import amdrepo, config

    if not any(config.FIXTURES_DIR.glob("amd-smi-*.txt")):
        pytest.skip(f"no amd-smi fixtures in {config.FIXTURES_DIR}")
    cache = tmp_path_factory.mktemp("lab-cache")
    saved, config.CACHE_DIR = config.CACHE_DIR, cache
    try:
        return amdrepo.build()
    finally:
        config.CACHE_DIR = saved


class Apt:
    """apt-get/apt-cache on a private state directory, with keyrings dearmored from the served keys."""

    def __init__(self, root: Path, repo: Path) -> None:
        self.root, self.repo = root, repo
        for d in ("sources", "prefs", "state/lists/partial", "cache/archives/partial"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "status").touch()
        self.keyrings = {rocm.LEGACY_KEYRING: root / "rocm.gpg", rocm.CURRENT_KEYRING: root / "amdrocm.gpg"}
        served = {"rocm.gpg": "rocm/rocm.gpg.key", "amdrocm.gpg": "stable.repo.amd.com/rocm/gpg/packages.gpg"}
        for name, src in served.items():
            dest = root / name
            subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(dest), str(repo / src)], check=True)

    def settings(self, **data) -> rocm.RocmSettings:
        urls = {
            "rocm_repo_url": f"file://{self.repo}",
            "rocm_current_repo_url": f"file://{self.repo}/stable.repo.amd.com/rocm/core/packages",
        }
        return host_config({"vllm_profile": "llama-4-scout", "rocm_userspace": True, **urls, **data}).rocm

    def write(self, settings: rocm.RocmSettings, edit=lambda path, body: body) -> None:
        for old in (self.root / "sources").iterdir():
            old.unlink()
        for path, body in rocm.repo_files(settings, DEBIAN12).items():
            if body and path.startswith("/etc/apt/sources.list.d/"):
                for name, local in self.keyrings.items():
                    body = body.replace(name, str(local))
                (self.root / "sources" / Path(path).name).write_text(edit(path, body))

    def __call__(self, *command: str) -> subprocess.CompletedProcess:
        r = self.root
        options = [
            *("-o", "Dir::Etc::sourcelist=/dev/null", "-o", f"Dir::Etc::sourceparts={r}/sources"),
            *("-o", f"Dir::Etc::preferencesparts={r}/prefs", "-o", f"Dir::State={r}/state"),
            *("-o", f"Dir::Cache={r}/cache", "-o", f"Dir::State::status={r}/status"),
            *("-o", "APT::Sandbox::User=root", "-o", "Acquire::Languages=none"),
        ]
        return subprocess.run([command[0], *options, *command[1:]], capture_output=True, text=True)

    def offered(self, settings: rocm.RocmSettings) -> dict[str, str]:
        """package -> repository (madison's, ``file:`` form) for the role's driver and userspace packages."""
        out = self("apt-cache", "madison", *settings.rocm_driver_packages, *settings.userspace_packages)
        return {p.strip(): src.split()[0] for p, _, src in (line.split("|") for line in out.stdout.splitlines())}


@pytest.fixture
def apt(tmp_path, repo) -> Apt:
    return Apt(tmp_path, repo)


def _file(url: str) -> str:
    return url.replace("file://", "file:")


@pytest.mark.parametrize(
    "data",
    [{"rocm_stream": "legacy", "rocm_version": "7.2"}, {"rocm_stream": "legacy", "rocm_version": "7.1"}, {}],
    ids=["legacy-7.2", "legacy-7.1", "current-10.0"],
)
def test_role_files_find_each_stream_where_amd_has_it(apt, data):
    settings = apt.settings(**data)
    apt.write(settings)
    update = apt("apt-get", "update")
    assert update.returncode == 0 and "W:" not in update.stderr, update.stderr
    offered = apt.offered(settings)
    assert {p: offered.get(p) for p in settings.rocm_driver_packages} == dict.fromkeys(
        settings.rocm_driver_packages, _file(settings.driver_repo)
    )
    assert {p: offered.get(p) for p in settings.userspace_packages} == dict.fromkeys(
        settings.userspace_packages, _file(rocm.userspace_repo(settings, DEBIAN12))
    )


def test_current_source_signed_by_the_legacy_key_fails(apt):
    settings = apt.settings()
    current, legacy = str(apt.keyrings[rocm.CURRENT_KEYRING]), str(apt.keyrings[rocm.LEGACY_KEYRING])
    apt.write(settings, lambda path, body: body.replace(current, legacy))
    update = apt("apt-get", "update")
    assert "NO_PUBKEY" in update.stderr, update.stderr
    assert "amdrocm10.0-gfx942" not in apt.offered(settings)  # apt keeps no unverified index


@pytest.mark.parametrize(
    ("wrong", "right"), [("Suites: jammy", "Suites: stable"), ("/ubuntu2204/", "/debian12/")], ids=["suite", "os"]
)
def test_wrong_suite_or_os_directory_fails(apt, wrong, right):
    settings = apt.settings()
    apt.write(settings, lambda path, body: body.replace(right, wrong))
    update = apt("apt-get", "update")
    assert update.returncode != 0 and "does not have a Release file" in update.stderr, update.stderr


def test_legacy_names_are_not_in_the_current_repository(apt):
    settings = apt.settings()
    apt.write(settings)
    assert apt("apt-get", "update").returncode == 0
    names = apt("apt-cache", "pkgnames").stdout.split()
    assert "rocm" not in names and "rocm-core" not in names
    assert {"amdrocm10.0-gfx942", "amdrocm-core-dev10.0-gfx942", "amdrocm-core-sdk10.0-gfx942", "amdrocm10.0"} <= set(
        names
    )
