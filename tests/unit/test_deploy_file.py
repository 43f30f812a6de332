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


def test_dry_says_every_roles_drift_of_the_one_read_and_y_does_not(tmp_path):
    """``--dry`` prints every role's drift by the plan's rule (``[HOST] drift ROLE: ITEM: why``) from
    the deploy's one read: lab-1's recorded read with every plan item as wanted but one file of
    each role edited by hand (``tests/unit/test_hostdrift.py``) says those six files and nothing
    else of the plan; a bare host (no answer) says what it could not read; ``-y`` says none."""
    from tests.unit.test_hostdrift import EDITED, FACTS, read

    lab1 = {k: v for k, v in FACTS["data"].items() if not k.startswith("ssh_")}
    lab1["fake_responses"] = {"' state.sh ": {"stdout": read(EDITED)}}
    hosts = {"lab-1": lab1, "bare-1": {}}
    proc = plan(tmp_path, hosts, "--dry")
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and proc.returncode == 0, output[-4000:]
    said = [line.split("] ", 1)[1].strip() for line in output.splitlines() if "[@fake/lab-1] " in line]
    drift = [line.removeprefix("drift ").split(": content ")[0] for line in said if line.startswith("drift ")]
    assert drift == [f"{role}: {path}" for role, path in EDITED.items()], said  # pyinfra pads the prefix
    assert all(": content 000000000000..., want " in line for line in said if line.startswith("drift "))
    bare = [line.split("] ", 1)[1].strip() for line in output.splitlines() if "[@fake/bare-1] drift " in line]
    assert "drift base: /etc/apt/apt.conf.d/80rocmfleet-lock-timeout: not reported by the read" in bare
    applied = plan(tmp_path, {"lab-1": lab1}, "--dry", "-y")  # -y: no change detection, no drift read
    assert "Traceback" not in applied.stderr and "] drift " not in applied.stdout + applied.stderr
