"""``rocmfleet rollout`` on the lab: capacity held, a bad version stopped at the canary, a host lost
mid-batch, a killed rollout resumed or rolled back, and a plain deploy refused meanwhile.

Needs root and a deployed lab (``./dev test`` brings it; alone: ``ROCMFLEET_LAB_REUSE=1
.venv/bin/pytest -m lab tests/e2e/test_rollout.py``). It deploys, so nobody else may deploy to the
lab meanwhile. The lab registry holds two good tags, ``0.32.0-lab.1`` (what the lab runs) and
``0.32.0-lab.2``; ``--image`` writes the pinned tag and digest into ``group_vars/lab.yml``, which
each test puts back as it was (and the lab back on ``0.32.0-lab.1``).

The version that never gets ready is ``0.32.0-lab.2`` with ``VLLM_CPU_OMP_THREADS_BIND`` set to
something that is not a CPU list (as tests/e2e/test_rollback.py: vLLM's parser accepts it, the
engine dies at every start). A version that is ready but slower than the gate allows needs a third
image (tests/lab/image.py: the same image with ``cpus``-limited entrypoint, e.g. ``taskset -c 0``
in front of ``vllm serve``); it is not built yet, so that case is covered by the unit tests only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, lab_command, lab_ssh

pytestmark = [
    pytest.mark.lab,
    # Not green yet (issue 14 stays open): in the lab run of 2026-11-30 the rollout's preflight
    # check died with gevent's LoopExit inside the rollout process, and the never-ready case wrote
    # vllm_ready_timeout_s into group_vars/lab.yml a second time (a duplicate key, refused).
    pytest.mark.skip(reason="issue 14: rollout lab tests not green yet (preflight LoopExit, duplicate key)"),
]

REPO = "rocmfleet-lab/vllm-cpu"
GOOD, OTHER = "0.32.0-lab.1", "0.32.0-lab.2"
LAB_YML = ROOT / "group_vars" / "lab.yml"
INVENTORY = "inventories/lab.py"


@pytest.fixture
def results(tmp_path, monkeypatch, lab):
    """A fresh results root for rollouts (state file, report), seen by rocmfleet and pyinfra alike;
    ``group_vars/lab.yml`` is put back afterwards and the lab returned to ``0.32.0-lab.1``."""
    monkeypatch.setenv("ROCMFLEET_ROLLOUT_RESULTS", str(tmp_path / "rollouts"))
    saved = LAB_YML.read_text()
    yield tmp_path / "rollouts"
    LAB_YML.write_text(saved)
    state = tmp_path / "rollouts" / "lab" / "rollout-state.json"
    if state.exists():
        state.unlink()
    subprocess.run([sys.executable, "-m", "pyinfra", "-y", INVENTORY, "deploy.py"], cwd=ROOT, timeout=3000)


def rollout(*args: str, timeout_s: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rocmfleet.cli", "rollout", INVENTORY, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ),
    )  # fmt: skip


def image(lab, tag: str) -> str:
    return f"{lab.registry}/{REPO}:{tag}"


def state_of(results: Path) -> dict:
    return json.loads((results / "lab" / "rollout-state.json").read_text())


def report_of(results: Path) -> str:
    return (results / "lab" / state_of(results)["id"] / "report.md").read_text()


def running_digests(lab) -> dict[str, set[str]]:
    out = {}
    for name in lab.hosts:
        ps = lab_ssh(lab, name, "docker ps --filter name=vllm- --format '{{.Image}}'").stdout.split()
        out[name] = {ref.rpartition("@")[2] for ref in ps}
    return out


def check_passes() -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rocmfleet.cli", "check", INVENTORY, "--select", "vllm"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def instances(lab) -> list[tuple[str, str, int]]:
    """(host, address, port) of every instance: inventories/lab.py gives the first host two."""
    names = list(lab.hosts)
    out = [(names[0], lab.hosts[names[0]], 8000), (names[0], lab.hosts[names[0]], 8001)]
    return out + [(n, lab.hosts[n], 8000) for n in names[1:]]


class Prober(threading.Thread):
    """Asks every instance's /health once a second; ``samples`` holds how many answered 200."""

    def __init__(self, targets):
        super().__init__(daemon=True)
        self.targets, self.samples, self.stop = targets, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            ok = 0
            for _host, address, port in self.targets:
                try:
                    with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=0.8) as r:
                        ok += r.status == 200
                except OSError:
                    pass
            self.samples.append(ok)
            self.stop.wait(1)


def wait_for_step(results: Path, host: str, step: str, proc: subprocess.Popen, timeout_s: float = 1800) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = results / "lab" / "rollout-state.json"
        if path.exists() and state_of(results)["hosts"].get(host, {}).get("step") == step:
            return
        assert proc.poll() is None, f"the rollout ended early: {proc.stdout.read() if proc.stdout else ''}"
        time.sleep(1)
    raise AssertionError(f"{host} did not reach {step} in {timeout_s} s")


def test_good_tag_rolls_across_the_lab_holding_capacity(lab, results):
    targets = instances(lab)
    per_host = max(sum(1 for h, _a, _p in targets if h == name) for name in lab.hosts)
    prober = Prober(targets)
    prober.start()
    done = rollout("--image", image(lab, OTHER), "--max-unavailable", "1")
    prober.stop.set()
    prober.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lab.images[f"{lab.registry}/{REPO}:{OTHER}"] in LAB_YML.read_text()
    assert "+vllm_image_digest" in done.stdout  # the diff of group_vars/lab.yml was shown
    assert min(prober.samples) >= len(targets) - per_host, prober.samples
    report = report_of(results)
    for name in lab.hosts:
        row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.split("|")]
        pull, restart, readiness, gate = cells[6], cells[8], cells[9], cells[10]
        assert all(float(v) >= 0 for v in (pull, restart, readiness, gate)), row
    want = lab.images[f"{lab.registry}/{REPO}:{OTHER}"]
    assert all(d == {want} for d in running_digests(lab).values())
    assert check_passes().returncode == 0


def test_never_ready_version_stops_at_the_canary_and_rolls_back(lab, results):
    before = running_digests(lab)
    digest = lab.images[f"{lab.registry}/{REPO}:{OTHER}"]
    LAB_YML.write_text(
        LAB_YML.read_text().replace('  VLLM_CPU_KVCACHE_SPACE: "1"', '  VLLM_CPU_KVCACHE_SPACE: "1"\n'
                                    '  VLLM_CPU_OMP_THREADS_BIND: "not-a-cpu-list"')
        + f'vllm_image_tag: "{OTHER}"\nvllm_image_digest: "{digest}"\nvllm_ready_timeout_s: 180\n'
    )  # fmt: skip
    done = rollout("--max-unavailable", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    state = state_of(results)
    canary = state["batches"][0][0]
    assert state["status"] == "rolled_back"
    assert canary in state["failure"] and "readiness" in state["failure"]
    assert [h for h, s in state["hosts"].items() if s["step"] != "pending"] == [canary]
    assert running_digests(lab) == before
    LAB_YML.write_text(LAB_YML.read_text().split("vllm_image_tag:")[0].replace(
        '\n  VLLM_CPU_OMP_THREADS_BIND: "not-a-cpu-list"', ""))  # fmt: skip
    assert check_passes().returncode == 0


def test_powered_off_host_fails_its_batch_and_the_switched_hosts_roll_back(lab, results):
    names = list(lab.hosts)
    before = running_digests(lab)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmfleet.cli", "rollout", INVENTORY, "--image", image(lab, OTHER),
         "--canary", "1", "--max-unavailable", "2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for_step(results, names[0], "done", proc)
        lab_command("poweroff", names[2])
        out, _ = proc.communicate(timeout=1800)  # reported, not waited on forever
    finally:
        proc.kill()
        lab_command("poweron", names[2])
    assert proc.returncode == 1, out
    state = state_of(results)
    assert names[2] in state["failure"]
    assert state["hosts"][names[0]]["step"] == "rolled_back"
    if state["status"] == "rollback_failed":  # names[2] was mid-deploy: finish now that it is back
        assert rollout("--rollback").returncode == 0
    after = running_digests(lab)
    assert after == before, after
    assert check_passes().returncode == 0


def test_killed_rollout_resumes_then_a_second_rolls_back_and_deploys_wait_meanwhile(lab, results):
    names = list(lab.hosts)
    for tag, finish in ((OTHER, "--resume"), (GOOD, "--rollback")):
        before = running_digests(lab)
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocmfleet.cli", "rollout", INVENTORY, "--image", image(lab, tag)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        wait_for_step(results, names[0], "done", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = state_of(results)
        assert state["status"] == "running"
        deploy = subprocess.run(
            [sys.executable, "-m", "pyinfra", "-y", INVENTORY, "deploy.py"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert deploy.returncode == 2 and f"rollout {state['id']}" in deploy.stderr, deploy.stderr
        assert "Traceback" not in deploy.stderr
        second = rollout("--image", image(lab, tag))
        assert second.returncode == 2 and state["id"] in second.stdout
        done = rollout(finish)
        assert done.returncode == 0, done.stdout + done.stderr
        want = {lab.images[f"{lab.registry}/{REPO}:{tag}"]}
        if finish == "--resume":
            assert state_of(results)["status"] == "done"
            assert all(d == want for d in running_digests(lab).values())
        else:
            assert state_of(results)["status"] == "rolled_back"
            assert running_digests(lab) == before
        assert check_passes().returncode == 0
