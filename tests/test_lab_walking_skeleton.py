"""The walking skeleton against real lab hosts: converge, serve, idempotence, reboots, teardown.

Needs root and the lab (``./dev test`` brings both); run only these with ``pytest -m lab``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import testinfra

from tests.conftest import ROOT, lab_command

pytestmark = pytest.mark.lab

UNIT = "vllm-tiny-llama.service"
PORT = 8000
MODEL = "tiny-llama"


def pyinfra_deploy() -> tuple[int, dict, str]:
    """``pyinfra -y --json inventories/lab.py deploy.py``: exit status, JSON report, stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "--json", "inventories/lab.py", "deploy.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, report, proc.stderr


def complete(address: str, prompt: str = "The fleet is", timeout_s: float = 60) -> dict:
    """POST /v1/completions on ``address`` from this machine."""
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 8}).encode()
    request = urllib.request.Request(
        f"http://{address}:{PORT}/v1/completions", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        assert response.status == 200
        return json.loads(response.read())


def wait_for_completion(address: str, timeout_s: float = 900) -> dict:
    """Retry :func:`complete` until it answers or ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return complete(address)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{address}: no completion after {timeout_s} s ({exc})") from exc
            time.sleep(5)


@pytest.fixture(scope="module")
def ssh_config(lab, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ssh") / "config"
    path.write_text(
        "Host *\n  User root\n"
        f"  IdentityFile {lab.ssh_key}\n  UserKnownHostsFile {lab.known_hosts}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n"
    )
    return path


def testinfra_host(address: str, ssh_config: Path):
    return testinfra.get_host(f"ssh://root@{address}", ssh_config=str(ssh_config))


@pytest.fixture(scope="module")
def first_deploy(lab):
    return pyinfra_deploy()


def test_first_deploy_converges_every_host(lab, first_deploy):
    rc, report, stderr = first_deploy
    assert rc == 0, stderr[-4000:]
    assert report["results"]["failed_hosts"] == []
    assert report["results"]["totals"]["error"] == 0


def test_every_host_answers_completions_from_the_machine(lab, first_deploy):
    for address in lab.hosts.values():
        answer = complete(address)
        assert answer["model"] == MODEL
        assert answer["choices"][0]["text"]  # random weights: any text, but some


def test_units_are_active_and_files_are_as_rendered(lab, first_deploy, ssh_config):
    digest = next(iter(lab.images.values()))
    for address in lab.hosts.values():
        host = testinfra_host(address, ssh_config)
        service = host.service(UNIT)
        assert service.is_running and service.is_enabled
        env = host.file("/etc/rocmfleet/vllm/tiny-llama.env")
        assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
        unit = host.file(f"/etc/systemd/system/{UNIT}")
        assert unit.contains(f"@{digest}")
        running = host.check_output("docker inspect --format '{{.Image}} {{.Config.Image}}' vllm-tiny-llama")
        assert running.split()[1].endswith(f"@{digest}")


def test_second_deploy_reports_no_changes(lab, first_deploy):
    rc, report, stderr = pyinfra_deploy()
    assert rc == 0, stderr[-4000:]
    changed = {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}
    assert changed == {}, f"operations that changed something on the second run: {changed}"


def test_reboot_inside_a_host_brings_vllm_back(lab, first_deploy, ssh_config):
    name, address = sorted(lab.hosts.items())[0]
    host = testinfra_host(address, ssh_config)
    boot_id = host.file("/proc/sys/kernel/random/boot_id").content_string
    host.run("systemctl reboot")
    deadline = time.monotonic() + 180
    while True:
        time.sleep(3)
        try:
            fresh = testinfra_host(address, ssh_config)
            if fresh.file("/proc/sys/kernel/random/boot_id").content_string != boot_id:
                break
        except Exception:  # noqa: BLE001 - the host is down while it reboots
            pass
        assert time.monotonic() < deadline, f"{name} did not come back within 180 s"
    wait_for_completion(address)
    assert testinfra_host(address, ssh_config).service(UNIT).is_running


def test_lab_restart_brings_vllm_back(lab, first_deploy, ssh_config):
    name, address = sorted(lab.hosts.items())[1]
    lab_command("restart", name, timeout_s=600)
    wait_for_completion(address)
    assert testinfra_host(address, ssh_config).service(UNIT).is_running


def test_lab_down_leaves_nothing_behind(lab):
    from tests.lab import config

    lab_command("down")
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "systemd-nspawn" not in processes
    assert "tests.lab.hosts supervise" not in processes
    assert "docker-registry serve" not in processes
    assert "tinyproxy" not in processes
    assert not Path(f"/sys/class/net/{config.BRIDGE}").exists()
    assert str(config.LAB_DIR) not in Path("/proc/self/mountinfo").read_text()
    assert not list(Path("/sys/fs/cgroup").glob("*/lab"))
    assert not [link for link in os.listdir("/sys/class/net") if link.startswith("vb-lab")]
