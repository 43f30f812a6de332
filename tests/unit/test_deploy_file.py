"""The real ``deploy.py`` prepared against pyinfra ``@fake`` hosts: a bare host (every command
answers nothing) and a host whose data is bad are planned without a traceback, each host alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import DIGEST

ROOT = Path(__file__).resolve().parents[2]
DATA = {
    "vllm_profile": "lab-tiny-llama",
    "docker_source": "debian",
    "vllm_image_repository": "10.213.0.1:5000/rocmfleet-lab/vllm-cpu",
    "vllm_image_tag": "0.32.0-lab.1",
    "vllm_image_digest": DIGEST,
    "vllm_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
    "fake_delay": 0,
    "fake_delay_jitter": 0,
}
OS_RELEASE = ["ID=debian", 'VERSION_ID="12"', "VERSION_CODENAME=bookworm"]


def plan(tmp_path: Path, hosts: dict[str, dict], *flags: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {[(f'@fake/{name}', {**DATA, **data}) for name, data in hosts.items()]!r}\n")
    return subprocess.run(
        [sys.executable, "-m", "pyinfra", *flags, str(inventory), "deploy.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )


def test_dry_run_of_bare_hosts_plans_every_role_without_a_traceback(tmp_path):
    proc = plan(tmp_path, {"bare-1": {}, "bare-2": {}}, "--dry", "-v")
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output[-4000:]
    assert proc.returncode == 0, output[-4000:]
    assert "noop: the GPU topology is read after the driver is installed and the host rebooted" in output


def test_bad_data_fails_the_host_through_pyinfra_with_the_problem(tmp_path):
    # (a run whose every host failed ends with pyinfra's "No hosts remaining"; the vllm role's tests
    # show the other hosts going on)
    proc = plan(tmp_path, {"bad-1": {"vllm_shm_size_gib": "lots"}}, "-y")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Traceback" not in output, output[-4000:]
    assert "[@fake/bad-1] rocmfleet: @fake/bad-1: invalid configuration:" in output
    assert "vllm_shm_size_gib" in output
