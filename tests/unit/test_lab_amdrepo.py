"""The lab's stand-in AMD repositories (tests/lab/amdrepo.py) against the ROCm role's own apt
files: apt (with a private state directory, no root needed) reads what the role would write,
and finds each stream's packages where AMD has them; a wrong key, suite or name fails."""

from __future__ import annotations

import json
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


# -- AMD's metrics exporter: its repository, the stand-in package, the strict driver ------------


def test_the_exporter_role_source_finds_the_stand_in_exporter(apt):
    from rocmfleet.domain import exporter
    from rocmfleet.domain.metrics import MetricsSettings
    from rocmfleet.facts.rocm import AptRepoVersions, version_from_repo
    from tests.lab import amdrepo

    # a file: URL (the setting takes http(s) only: validation skipped for this local repository)
    settings = MetricsSettings.model_construct(
        metrics_exporter_repo_url=f"file://{apt.repo}/device-metrics-exporter/apt"
    )
    line = exporter.apt_source(settings, DEBIAN12).replace(rocm.LEGACY_KEYRING, str(apt.keyrings[rocm.LEGACY_KEYRING]))
    (apt.root / "sources" / "amdgpu-exporter.list").write_text(line)
    update = apt("apt-get", "update")
    assert update.returncode == 0 and "W:" not in update.stderr, update.stderr
    versions = AptRepoVersions().process(apt("apt-cache", "madison", exporter.PACKAGE).stdout.splitlines())
    # madison names a file: repository as file:/path; the role compares with its URL's form
    assert version_from_repo(versions, exporter.PACKAGE, _file(exporter.repo_url(settings))) == amdrepo.EXPORTER_VERSION


def test_the_stand_in_exporter_package_has_amds_units_and_binaries(repo):
    from tests.lab import amdrepo

    (deb,) = (repo / amdrepo.EXPORTER_REPO / "pool/main").glob("amdgpu-exporter_*.deb")
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in (
        "./usr/local/bin/gpuagent",
        "./usr/local/bin/amd-metrics-exporter",
        "./lib/systemd/system/gpuagent.service",
        "./lib/systemd/system/amd-metrics-exporter.service",
        "./usr/share/rocmfleet-lab/exporter-metrics.prom",
    ):
        assert path in listing, path
    assert "-rwxr-xr-x root/root" in next(line for line in listing.splitlines() if line.endswith("bin/gpuagent"))
    unit = (amdrepo.STANDIN_DIR / "amd-metrics-exporter.service").read_text()
    assert "Requires=gpuagent.service" in unit and "After=gpuagent.service" in unit
    assert "ExecStart=/usr/local/bin/amd-metrics-exporter\n" in unit  # the deploy's drop-in adds the config
    release = (repo / amdrepo.EXPORTER_REPO / "dists/jammy/Release").read_text()
    assert "Origin: repo.radeon.com" in release and "Suite: jammy" in release


def test_the_stand_in_driver_runs_the_gpu_holder_check_in_preinst_and_prerm(repo):
    from tests.lab import amdrepo

    (deb,) = (repo / "amdgpu/31.50/ubuntu/pool/main").glob("amdgpu-dkms_*.deb")
    control = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    assert " preinst" in control and " prerm" in control
    for script in ("preinst", "prerm"):
        body = subprocess.run(["dpkg-deb", "-I", str(deb), script], capture_output=True, text=True, check=True).stdout
        assert "driver_change() {" in body and f'driver_change {script} "$@"' in body
    assert amdrepo.EXPORTER_VERSION.startswith("1.5.4-")


def _fake_systemctl(tmp_path: Path, agent: str) -> dict[str, str]:
    """An environment whose ``systemctl is-active`` answers ``agent`` for gpuagent.service."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "systemctl"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$2" in gpuagent.service) echo {agent}; [ {agent} = active ] ;; *) echo inactive; exit 3 ;; esac\n'
    )
    fake.chmod(0o755)
    import os

    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "ROCMFLEET_LAB_DRIVER_LOG": str(tmp_path / "driver-changes.log"),
        "ROCMFLEET_LAB_PARTITION_LOG": str(tmp_path / "partition-changes.log"),
    }


STANDIN = Path(__file__).resolve().parents[1] / "lab" / "standin"


def _driver_change(tmp_path: Path, agent: str, *args: str) -> subprocess.CompletedProcess:
    script = f'set -e; . {STANDIN / "driver-change.sh"}; driver_change "$@"'
    env = _fake_systemctl(tmp_path, agent)
    return subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "args", [("prerm", "upgrade", "2"), ("prerm", "remove"), ("preinst", "upgrade", "1", "2")], ids=str
)
def test_a_driver_change_fails_while_the_gpu_agent_holds_the_gpus_and_is_logged(tmp_path, args):
    held = _driver_change(tmp_path, "active", *args)
    assert held.returncode != 0 and "Module amdgpu is in use" in held.stderr
    free = _driver_change(tmp_path, "inactive", *args)
    assert free.returncode == 0, free.stderr
    lines = (tmp_path / "driver-changes.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        f"amdgpu-dkms {args[0]} {' '.join(args[1:])} gpuagent=active amd-metrics-exporter=inactive refused",
        f"amdgpu-dkms {args[0]} {' '.join(args[1:])} gpuagent=inactive amd-metrics-exporter=inactive ok",
    ]


def test_a_first_driver_install_is_logged_and_never_refused(tmp_path):
    assert _driver_change(tmp_path, "active", "preinst", "install").returncode == 0
    assert (
        (tmp_path / "driver-changes.log")
        .read_text()
        .rstrip()
        .endswith("gpuagent=active amd-metrics-exporter=inactive ok")
    )


def test_the_stand_in_partition_change_refuses_while_the_gpu_agent_is_active(tmp_path):
    command = [str(STANDIN / "amd-smi"), "set", "--gpu", "all", "--compute-partition", "SPX"]
    held = subprocess.run(command, capture_output=True, text=True, env=_fake_systemctl(tmp_path, "active"))
    assert held.returncode == 1 and "stop it first" in held.stderr
    free = subprocess.run(command, capture_output=True, text=True, env=_fake_systemctl(tmp_path, "inactive"))
    assert free.returncode == 0, free.stderr
    log = (tmp_path / "partition-changes.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in log] == [
        "amd-smi set --gpu all --compute-partition SPX gpuagent=active refused",
        "amd-smi set --gpu all --compute-partition SPX gpuagent=inactive ok",
    ]


def _exporter_module():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("lab_exporter", str(STANDIN / "amd-metrics-exporter"))
    spec = importlib.util.spec_from_loader("lab_exporter", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_stand_in_exporter_serves_amds_families_with_the_labs_values(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    module = _exporter_module()
    recorded = (STANDIN / "exporter-metrics.prom").read_text()
    values = {"gpu_gfx_activity": {"3": 87.5}, "gpu_ecc_uncorrect_total": 2}
    families = {f.name: f for f in text_string_to_metric_families(module.exposition(recorded, values, "lab-2"))}
    for name in (
        "gpu_gfx_activity",
        "gpu_used_vram",
        "gpu_total_vram",
        "gpu_package_power",
        "gpu_junction_temperature",
    ):
        assert len(families[name].samples) == 8, name  # one series per stand-in MI300X
    gfx = {s.labels["gpu_id"]: s.value for s in families["gpu_gfx_activity"].samples}
    assert gfx["3"] == 87.5 and gfx["0"] == 0.0
    assert {s.value for s in families["gpu_ecc_uncorrect_total"].samples} == {2.0}
    sample = families["gpu_power_usage"].samples[0]
    assert sample.labels["hostname"] == "lab-2" and sample.labels["card_series"] == "AMD Instinct MI300X OAM"
    assert {"serial_number", "card_model", "gpu_partition_id", "gpu_compute_partition_type"} <= set(sample.labels)


def test_the_stand_in_exporter_listens_on_the_configs_server_port(tmp_path):
    import socket
    import sys
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"ServerPort": port}))
    assert _exporter_module().config_port(["x", "-amd-metrics-config", str(config)]) == port
    assert _exporter_module().config_port(["x"]) == 5000
    proc = subprocess.Popen([sys.executable, str(STANDIN / "amd-metrics-exporter"), "-amd-metrics-config", str(config)])
    try:
        for _ in range(50):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
            except urllib.error.HTTPError as exc:  # no GPU agent here: 503, from the config's port
                assert exc.code == 503
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail(f"the stand-in exporter did not answer on :{port}")
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_stand_in_gpu_agent_serves_on_when_a_client_hangs_up_at_once(tmp_path):
    """The exporter only connects to the agent's socket and closes it; the agent must keep serving
    (it died of BrokenPipeError once, and systemd's restart window showed as a stopped unit)."""
    import socket
    import subprocess
    import sys
    import time

    sock = tmp_path / "agent.sock"
    program = Path(__file__).resolve().parents[1] / "lab" / "standin" / "gpuagent"
    agent = subprocess.Popen([sys.executable, str(program), "-s", str(sock), "x"])
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(200):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(str(sock))
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        time.sleep(0.2)
        assert agent.poll() is None
    finally:
        agent.terminate()
        agent.wait(timeout=10)
