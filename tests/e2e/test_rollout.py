"""``rocmfleet rollout`` on the lab: capacity held, a killed rollout resumed (a plain deploy and a
second rollout refused meanwhile), ``--bake`` of a slow version stopped at the canary, a host lost
mid-batch (the rollout pauses: a lost host is not the image's fault; ``--rollback`` returns both
hosts once it is back), a registry that stops answering lab-3 after the canary (the good tag's
rollout pauses, exit 3, and ``--resume`` finishes it once the registry is back: issue 26), and
``--bake`` of the pinned good tag end to end over lab-2 and lab-3 (issue 27). Every failed rollout
ends with its summary on stderr, exit 1 and no traceback (issue 24).

Needs root and a deployed lab (``./dev test`` brings it; alone: ``ROCMFLEET_LAB_REUSE=1
.venv/bin/pytest -m lab tests/e2e/test_rollout.py``). It deploys, so nobody else may deploy to the
lab meanwhile.

The lab registry holds two good tags, ``0.32.0-lab.1`` and ``0.32.0-lab.2``, and the bad stand-in
``0.32.0-lab.slow`` built by tests/lab/image.py (pushed here when a reused lab lacks it): ``vllm
serve --max-num-seqs 1``, ready, but the smoke benchmark's concurrent requests queue, so the time
to first token is many times the good version's.

Each rollout restarts vLLM on the hosts it switches and on those it returns, the lab's dearest
step, so the module keeps to one rollout per property, and only the good tag's rolls across every
host: the failure cases roll out over an inventory of lab-2 and lab-3 (:func:`without_lab_1`; one
instance each, lab-1 has two; ``--image`` with ``--limit`` is refused, as it should be), a canary
of one host and batches of one, which is all a failure after a switched host needs. A
version that never gets ready is rolled back by the deploy the canary's switch runs
(tests/e2e/test_rollback.py shows that on its host alone; the rollout's handling of a failed gate
is the slow version's case), and a killed rollout is shown resumed here, not also rolled back
(``--rollback`` runs in the lost-host case).

One baseline for the module: the tests run on whatever good tag the lab runs and move it to the
other one (``--image`` pins it in ``group_vars/lab.yml``, which stays consistent with what runs,
so ``rocmfleet check`` passes between tests). At the end ``group_vars/lab.yml`` is put back; a
reused lab (``ROCMFLEET_LAB_REUSE=1``) is also deployed as it was, a fresh one is left for
test_teardown.py to take down (putting it back would restart every instance for nothing).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocmfleet import scripts
from rocmfleet.domain import cachedirs
from tests.conftest import ROOT, lab_command, lab_inventory, lab_ssh, pyinfra_json, rocmfleet_cli
from tests.e2e.test_rollback import profile_edited
from tests.lab.image import FLAKY_TAG, SLOW_TAG

pytestmark = pytest.mark.lab

REPO = "rocmfleet-lab/vllm-cpu"
GOOD = ("0.32.0-lab.1", "0.32.0-lab.2")
LAB_YML = ROOT / "group_vars" / "lab.yml"
INVENTORY = "inventories/lab.py"


@pytest.fixture(scope="module")
def baseline(lab):
    """The lab with every tag in its registry; ``group_vars/lab.yml`` and the deployment put back at the end."""
    from tests.lab import image as lab_image

    lab.images.update(lab_image.publish(lab.registry))  # pushes only what the registry lacks
    lab.save()
    saved = LAB_YML.read_text()
    try:
        yield lab
    finally:
        LAB_YML.write_text(saved)
        if os.environ.get("ROCMFLEET_LAB_REUSE") == "1":  # a fresh lab is taken down next: nothing to put back
            subprocess.run([sys.executable, "-m", "pyinfra", "-y", INVENTORY, "deploy.py"], cwd=ROOT, timeout=1800)


@pytest.fixture
def results(tmp_path, monkeypatch, baseline):
    """A fresh results root for the rollouts of one test, seen by rocmfleet and pyinfra alike; a
    rollout the test left recorded (it failed half-way) is rolled back."""
    root = tmp_path / "rollouts"
    monkeypatch.setenv("ROCMFLEET_ROLLOUT_RESULTS", str(root))
    yield root
    path = root / "lab" / "rollout-state.json"
    if path.exists() and json.loads(path.read_text())["status"] in ("running", "failed", "rollback_failed"):
        rollout("--rollback")


def rollout(
    *args: str, inventory: str = INVENTORY, timeout_s: float = 1800, yes: bool = True
) -> subprocess.CompletedProcess:
    """``rocmfleet rollout INVENTORY [-y] ARGS`` with no terminal (``-y`` unless ``yes`` is false)."""
    return subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "rollout", inventory, *(["-y"] if yes else []), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ), stdin=subprocess.DEVNULL,
    )  # fmt: skip


def start_rollout(*args: str, inventory: str = INVENTORY) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rocmfleet.entry", "rollout", inventory, "-y", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def lab_hosts_from(tmp_path: Path, first: int, extra: dict | None = None) -> str:
    """``inventories/lab.py`` from its host number ``first`` (0-based) on, as
    ``<tmp>/inventory/lab.py``: the same group data, and the same name, so the same rollout record
    and results directory. It runs the lab's inventory file afresh on each load (``runpy``), as
    pyinfra does with an inventory: an import of it would be Python's cached module from the second
    load on, and its group files would go unrecorded (``rocmfleet.config.groupvars.LOADED``).
    ``extra`` is merged into every kept host's data."""
    path = tmp_path / "inventory" / "lab.py"
    path.parent.mkdir()
    path.write_text(
        "import runpy as _runpy\n"
        f"_lab = _runpy.run_path({str(ROOT / INVENTORY)!r})\n"
        f"_kept = [n for n, _d in _lab['all'][0]][{first}:]\n"
        f"_extra = {extra or {}!r}\n"
        "all = ([(n, {**d, **_extra}) for n, d in _lab['all'][0] if n in _kept], _lab['all'][1])  # noqa: A001\n"
        "gpu_nodes = ([n for n in _lab['gpu_nodes'][0] if n in _kept], _lab['gpu_nodes'][1])\n"
    )
    return str(path)


def without_lab_1(tmp_path: Path, extra: dict | None = None) -> str:
    """:func:`lab_hosts_from` lab-2: lab-2 and lab-3."""
    return lab_hosts_from(tmp_path, 1, extra)


def image(lab, tag: str) -> str:
    return f"{lab.registry}/{REPO}:{tag}"


def state_of(results: Path) -> dict:
    return json.loads((results / "lab" / "rollout-state.json").read_text())


def report_of(results: Path) -> str:
    return (results / "lab" / state_of(results)["id"] / "report.md").read_text()


def running(lab) -> dict[str, set[str]]:
    """``rocmfleet status --json``: per host the digests its instances run (every one ready)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "status", INVENTORY, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    rows = json.loads(proc.stdout)["instances"]
    assert all(r["ready"] for r in rows), rows
    out: dict[str, set[str]] = {name: set() for name in lab.hosts}
    for r in rows:
        out[r["host"]].add(str(r["image"]).rpartition("@")[2])
    return out


def other_good(lab) -> tuple[str, str]:
    """(the good tag the lab runs now, the other good tag)."""
    now = set().union(*running(lab).values())
    current = next(tag for tag in GOOD if lab.images[image(lab, tag)] in now)
    return current, next(tag for tag in GOOD if tag != current)


def check(*hosts: str) -> subprocess.CompletedProcess:
    limit = ["--limit", ",".join(hosts)] if hosts else []
    return subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "check", INVENTORY, "--select", "vllm", *limit],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def instances(lab) -> list[tuple[str, str, int]]:
    """(host, address, port) of every instance: inventories/lab.py gives the first host two."""
    names = list(lab.hosts)
    out = [(names[0], lab.hosts[names[0]], 8000), (names[0], lab.hosts[names[0]], 8001)]
    return out + [(n, lab.hosts[n], 8000) for n in names[1:]]


class Prober:
    """A client probing every instance once a second (tests/lab/prober.py, its own process);
    ``samples()`` gives how many answered 200 at each sample. With ``load``, it also sends every
    instance one completion a second that asks for logprobs (steady traffic for ``--soak``)."""

    def __init__(self, targets, out: Path, load: bool = False):
        self.out = out
        loading = ["--load", "tiny-llama"] if load else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.lab.prober", str(out), *loading, *(f"{a}:{p}" for _h, a, p in targets)],
            cwd=ROOT,
        )

    def stop(self) -> list[int]:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        return [int(line) for line in self.out.read_text().split()]

    def loads(self) -> tuple[int, int]:
        """Completions answered and failed (HTTP errors) over the whole run."""
        lines = Path(f"{self.out}.load").read_text().split("\n")
        pairs = [tuple(int(v) for v in line.split()) for line in lines if line.strip()]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def recorded_id(results: Path) -> str | None:
    """The id of the rollout recorded now, if any."""
    path = results / "lab" / "rollout-state.json"
    return state_of(results)["id"] if path.exists() else None


def wait_for_step(
    results: Path, host: str, step: str, proc: subprocess.Popen, earlier: str | None = None, timeout_s: float = 900
) -> None:
    """Wait until ``host`` reaches ``step`` in the state of the rollout ``proc`` runs (not in
    that of an ``earlier`` rollout, whose state file is there until the new one writes its own)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = results / "lab" / "rollout-state.json"
        if (
            path.exists()
            and (state := state_of(results))["id"] != earlier
            and state["hosts"].get(host, {}).get("step") == step
        ):
            return
        assert proc.poll() is None, f"the rollout ended early: {proc.stdout.read() if proc.stdout else ''}"
        time.sleep(1)
    raise AssertionError(f"{host} did not reach {step} in {timeout_s} s")


def assert_rolled_back_with_a_summary(results, done, status: str = "rolled_back") -> dict:
    """The command's end after a rollback (issue 24): exit 1, the summary line on stderr, no
    traceback; the state it left (``status``)."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    state = state_of(results)
    assert state["status"] == status, state
    path = results / "lab" / "rollout-state.json"
    summary = f"rollout {state['id']}: {status}; report {path.parent / state['id'] / 'report.md'}; state {path}"
    assert summary in done.stderr.splitlines(), done.stderr
    return state


def assert_stopped_at_the_canary(lab, results, done, before, gate: str) -> None:
    state = assert_rolled_back_with_a_summary(results, done)
    canary = state["batches"][0][0]
    assert canary in state["failure"] and gate in state["failure"], state["failure"]
    # The canary's error on stderr too.
    said = [line for line in done.stderr.splitlines() if line.startswith(f"{canary}: rolled_back: ")]
    assert len(said) == 1 and gate in said[0], done.stderr
    assert [h for h, s in state["hosts"].items() if s["step"] != "pending"] == [canary]
    assert running(lab) == before
    assert check().returncode == 0, check().stdout


def kill_after_the_canary(results: Path, canary: str, *args: str) -> tuple[dict, str]:
    """Start a rollout, SIGKILL it once ``canary`` is ``done``; (the state it left, its output)."""
    earlier = recorded_id(results)
    proc = start_rollout(*args)
    try:
        wait_for_step(results, canary, "done", proc, earlier)
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
    state = state_of(results)
    assert state["id"] != earlier and state["status"] == "running", state
    return state, out


def assert_deploys_wait(lab, state: dict) -> None:
    """While a rollout is recorded, a plain deploy stops with its id and a second rollout refuses."""
    deploy = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", INVENTORY, "deploy.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert deploy.returncode == 2 and f"rollout {state['id']}" in deploy.stderr, deploy.stderr
    assert "Traceback" not in deploy.stderr
    second = rollout("--image", image(lab, GOOD[0]))  # refused before it looks at the image
    assert second.returncode == 2 and state["id"] in second.stdout + second.stderr, second.stdout + second.stderr


def assert_dry_and_unasked_change_nothing(lab, results: Path, new_ref: str) -> None:
    """``--dry`` shows the plan and exits 0; without ``-y`` and without a terminal the rollout is
    refused with exit 2 at its question. Neither changes the group file, the containers or the
    record; ``rocmfleet status`` piped prints every field whole."""
    saved, before, record = LAB_YML.read_text(), started_at(lab), recorded_id(results)
    dry = rollout("--image", new_ref, "--dry", yes=False)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "plan: batch 1 (canary): " in dry.stdout and "--dry: rollout of 3 host(s)" in dry.stdout, dry.stdout
    assert "+vllm_image_digest" in dry.stdout  # the group file edit it would make
    unasked = rollout("--image", new_ref, yes=False)
    assert unasked.returncode == 2 and "not a terminal to ask on: pass -y" in unasked.stderr, unasked.stderr
    assert LAB_YML.read_text() == saved and started_at(lab) == before and recorded_id(results) == record
    piped = subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "status", INVENTORY],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "…" not in piped.stdout, piped.stdout
    for host, digests in running(lab).items():  # each host's row holds its image whole: registry, repo, digest
        rows = [line for line in piped.stdout.splitlines() if line.strip().startswith(f"{host} ")]
        assert rows and all(lab.registry in r and any(d in r for d in digests) for r in rows), piped.stdout


def started_at(lab) -> dict[str, str]:
    """Per lab host, its vLLM containers and their start times (the same only when none was restarted)."""
    script = (
        "docker ps --filter name=vllm- --format '{{.Names}}' | sort | "
        "while read n; do echo $n $(docker inspect -f '{{.State.StartedAt}}' $n); done"
    )
    times = {}
    for name in lab.hosts:
        proc = lab_ssh(lab, name, script, timeout_s=60)
        assert proc.returncode == 0 and "vllm-" in proc.stdout, proc.stderr
        times[name] = proc.stdout
    return times


def test_good_tag_rolls_across_the_lab_holding_capacity_through_a_kill_and_resume(baseline, results):
    """One rollout of the other good tag, ``--max-unavailable 1``, killed after the canary and
    finished with ``--resume``; a client probes every instance once a second all along."""
    lab = baseline
    names = list(lab.hosts)
    _current, new = other_good(lab)
    targets = instances(lab)
    per_host = max(sum(1 for h, _a, _p in targets if h == name) for name in lab.hosts)
    assert_dry_and_unasked_change_nothing(lab, results, image(lab, new))
    registry_ip, _, port = lab.registry.rpartition(":")
    cut = f"OUTPUT -p tcp -d {registry_ip} --dport {port} -j REJECT --reject-with tcp-reset"
    prober = Prober(targets, results.parent / "probe.txt", load=True)
    try:
        state, out = kill_after_the_canary(
            results, names[0], "--image", image(lab, new), "--max-unavailable", "1", "--soak", "30s"
        )
        assert "+vllm_image_digest" in out  # the diff of group_vars/lab.yml was shown
        assert_deploys_wait(lab, state)
        # The registry stops answering lab-3 after the canary (its port refused there): lab-3's
        # pre-pull, during lab-2's switch, fails and is retried (10 s, 20 s): an error the image
        # cannot have caused pauses the rollout; lab-2, switched and gated, keeps the new image.
        assert lab_ssh(lab, names[2], f"iptables -I {cut}").returncode == 0
        try:
            paused = rollout("--resume")
        finally:
            lab_ssh(lab, names[2], f"iptables -D {cut}")
        assert_paused_by_the_registry(lab, results, paused, names, lab.images[image(lab, new)])
        done = rollout("--resume")  # the registry is back
    finally:
        samples = prober.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert state_of(results)["status"] == "done"
    want = lab.images[image(lab, new)]
    assert want in LAB_YML.read_text()
    assert len(samples) > 30 and min(samples) >= len(targets) - per_host, samples
    report = report_of(results)
    print(report)  # the time split, for the record
    # The canary's soak on the prober's traffic, against lab-2 and lab-3 still on the old tag.
    assert "### After batch 1 (canary): " + names[0] in report, report
    assert "source: the instances' /metrics" in report and "Verdict: **pass**" in report, report
    assert prober.loads()[1] == 0  # the good tag failed no completion
    # One benchmark client for both runs of each host, the new image's, with its sampling (issue 27).
    for name in lab.hosts:
        line = next(line for line in report.splitlines() if line.startswith(f"- **{name}**: "))
        assert "before and after the switch: " in line and new in line, line
        assert "temperature 0" in line and "seed 0" in line, line
    for name in lab.hosts:
        row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.split("|")]
        pull, restart, readiness, gate = cells[6], cells[8], cells[9], cells[10]
        assert all(float(v) >= 0 for v in (pull, restart, readiness, gate)), row
        assert float(readiness) > 0 and float(gate) > 0, row
    assert all(d == {want} for d in running(lab).values())
    assert check().returncode == 0


def assert_paused_by_the_registry(lab, results: Path, paused, names: list[str], new_digest: str) -> None:
    """Exit 3 with its summary and no traceback; ``paused`` in the state file, naming lab-3's pull;
    lab-1 and lab-2 done on the new image, lab-3 untouched and serving the old one."""
    said = paused.stdout + paused.stderr
    assert paused.returncode == 3 and "Traceback" not in said, said
    assert f"{names[2]}: pull inconclusive" in said and "retry 2 of 2 in 20 s" in said, said
    assert "nothing was rolled back" in said and "--resume" in said, said
    state = state_of(results)
    assert state["status"] == "paused" and f"{names[2]}: pull gate inconclusive" in state["failure"], state
    assert [state["hosts"][n]["step"] for n in names] == ["done", "done", "pending"], state
    now = running(lab)
    assert now[names[0]] == now[names[1]] == {new_digest} and new_digest not in now[names[2]], now


def test_a_baked_slow_version_fails_the_benchmark_gate_at_the_canary_and_rolls_back(baseline, results, tmp_path):
    """``rollout --bake --image <slow tag>`` over lab-2 and lab-3: the bake on the canary (lab-2)
    from the slow tag, the baked image pushed, then the rollout of it: the canary's benchmark gate
    fails and it goes back to what it ran; lab-3 is never touched; ``group_vars/lab.yml`` is as it was."""
    lab = baseline
    canary = list(lab.hosts)[1]
    before = running(lab)
    saved = LAB_YML.read_text()
    # The slow version's median TTFT at the lab's concurrency is 1.6x to 4.4x the good one's
    # (measured 2026-12-03), and a baseline taken right after the bake restarted the canary's
    # instance can itself be twice another host's: the profile's tolerance (90%) let the slow
    # version through on some runs. For this rollout the gate allows 30%.
    with profile_edited("regression_tolerance: 0.9", "regression_tolerance: 0.3"):
        done = rollout("--bake", "--image", image(lab, SLOW_TAG), inventory=without_lab_1(tmp_path))
    assert LAB_YML.read_text() == saved
    assert f"bake on the canary {canary} from {image(lab, SLOW_TAG)}@sha256:" in done.stdout, done.stdout
    baked = [line for line in done.stdout.splitlines() if line.startswith(f"baked {image(lab, SLOW_TAG)}-rfcache-")]
    assert len(baked) == 1 and " files); rolling it out" in baked[0], done.stdout
    assert_stopped_at_the_canary(lab, results, done, before, "benchmark")
    assert state_of(results)["batches"] == [[canary], [list(lab.hosts)[2]]]
    assert "median_ttft_ms" in report_of(results)


def test_a_version_failing_real_traffic_passes_its_gate_and_fails_the_soak_against_the_old_hosts(
    baseline, results, tmp_path
):
    """``rollout --soak 45s --image <flaky tag>`` over lab-2 and lab-3 under the prober's steady
    load: the flaky version is ready and passes the smoke benchmark (it fails only completions
    that ask for logprobs), then, over the soak, the canary's instances count a third of the
    prober's completions as 5xx against none on lab-3, still on the old version: the soak fails
    the canary naming both error rates, and it is rolled back; lab-3 is never touched. The
    figures come from the lab's Prometheus (``metrics_prometheus_url``), which scrapes the
    targets the deploy wrote; the good tag's soak reads the instances' /metrics directly."""
    lab = baseline
    names = list(lab.hosts)
    before = running(lab)
    saved = LAB_YML.read_text()
    targets = [t for t in instances(lab) if t[0] != names[0]]
    prober = Prober(targets, results.parent / "probe-soak.txt", load=True)
    try:
        inventory = without_lab_1(tmp_path, {"metrics_prometheus_url": lab.prometheus})
        done = rollout("--soak", "45s", "--image", image(lab, FLAKY_TAG), inventory=inventory)
    finally:
        samples = prober.stop()
    assert LAB_YML.read_text() == saved
    ok, failed = prober.loads()
    assert ok > 0 and failed > 0, (ok, failed)  # the flaky version served and failed some
    assert_stopped_at_the_canary(lab, results, done, before, "soak")
    failure = state_of(results)["failure"]
    assert "error rate" in failure and "not yet switched" in failure, failure
    assert len(samples) > 30
    report = report_of(results)
    print(report)  # the comparison, for the record
    assert "## Soak" in report and f"source: Prometheus {lab.prometheus}" in report, report
    row = next(line for line in report.splitlines() if line.startswith("| not yet switched"))
    assert f"| {names[2]} |" in row and "| 0.0% |" in row, row


def test_powered_off_host_pauses_the_rollout_and_rollback_returns_both_once_it_is_back(baseline, results, tmp_path):
    """Over lab-2 and lab-3: lab-2 the canary, switched and gated; lab-3 powered off while it
    switches. A host that stops answering SSH cannot have been stopped by the image: its switch is
    retried, then the rollout pauses (exit 3) with lab-2 on the new image and lab-3 where it
    stopped; once lab-3 is back, the operator's ``--rollback`` returns both."""
    lab = baseline
    names = list(lab.hosts)
    before = running(lab)
    _current, new = other_good(lab)
    inventory = without_lab_1(tmp_path)
    proc = start_rollout("--image", image(lab, new), inventory=inventory)
    started = None
    try:
        wait_for_step(results, names[2], "switching", proc)
        lab_command("poweroff", names[2])
        started = time.monotonic()
        out, _ = proc.communicate(timeout=900)  # reported, not waited on forever
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
        lab_command("poweron", names[2])
    assert took < 600, f"{took:.0f} s after the power-off"
    assert proc.returncode == 3 and "Traceback" not in out, out  # stderr joins stdout here
    state = state_of(results)
    assert state["status"] == "paused" and f"{names[2]}: switch gate inconclusive" in state["failure"], state
    assert state["batches"] == [[names[1]], [names[2]]]
    assert state["hosts"][names[1]]["step"] == "done" and state["hosts"][names[2]]["step"] == "switching", state
    assert "rolling back" not in out and "retry 2 of 2" in out, out
    again = rollout("--rollback", inventory=inventory)
    assert again.returncode == 0, again.stdout + again.stderr
    assert state_of(results)["status"] == "rolled_back"
    assert running(lab) == before
    assert check().returncode == 0


def test_rollout_bake_of_the_pinned_tag_runs_end_to_end_holding_capacity(baseline, results, tmp_path):
    """``rollout --bake`` over lab-2 and lab-3 (``--max-unavailable 1``), from the good tag the
    group file pins, while a client probes both instances (issue 27): the bake on the canary
    (lab-2), whose instance is ready again before the preflight; the baked image rolled out to
    both, one host out of service at a time; ``rocmfleet check --select cache,vllm`` passes on
    both; lab-3, which never baked, started the baked image and compiled nothing while it was
    gated and served."""
    lab = baseline
    names = list(lab.hosts)
    inventory = without_lab_1(tmp_path)
    targets = [t for t in instances(lab) if t[0] != names[0]]
    prober = Prober(targets, results.parent / "probe-bake.txt")
    try:
        done = rollout("--bake", "--max-unavailable", "1", inventory=inventory, timeout_s=3000)
    finally:
        samples = prober.stop()
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in said, said
    lines = done.stdout.splitlines()
    assert any(line.startswith(f"bake on the canary {names[1]} from ") for line in lines), done.stdout
    ready_again = next(i for i, line in enumerate(lines) if "waiting until" in line and "is ready again" in line)
    preflight = next(i for i, line in enumerate(lines) if line.startswith("preflight: "))
    assert ready_again < preflight, done.stdout
    baked = [line.split()[1] for line in lines if line.startswith("baked ") and "rolling it out" in line]
    assert len(baked) == 1 and "-rfcache-" in baked[0], done.stdout
    digest = baked[0].rpartition("@")[2]
    state = state_of(results)
    assert state["status"] == "done" and state["batches"] == [[names[1]], [names[2]]], state
    assert len(samples) > 30 and min(samples) >= len(targets) - 1, samples  # N - max-unavailable answered
    now = running(lab)
    assert now[names[1]] == now[names[2]] == {digest}, now
    checked = subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "check", inventory, "--select", "cache,vllm"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-3000:]
    # lab-3 pulled the baked image and started it: nothing compiled since, through the gate's benchmark.
    container = "vllm-lab-tiny-llama-0"
    paths = "/root/.cache/vllm /root/.cache/inductor /root/.triton/cache /root/.aiter/jit"
    started = lab_ssh(lab, names[2], f"docker inspect --format '{{{{.State.StartedAt}}}}' {container}").stdout.strip()
    newer = lab_ssh(lab, names[2], f"docker exec {container} find {paths} -type f -newermt '{started}' 2>/dev/null")
    assert started and newer.stdout.strip() == "", newer.stdout[:2000]
    logs = lab_ssh(lab, names[2], f"docker logs {container} 2>&1").stdout
    assert "Compiling a graph for" not in logs and "Cannot load aot compilation" not in logs
    assert_a_cache_miss_fails_the_check(lab, names[2], baked[0], tmp_path)


def assert_a_cache_miss_fails_the_check(lab, host: str, baked_ref: str, tmp_path: Path) -> None:
    """A real miss on ``host``: the baked image with its torch.compile caches deleted in a layer on
    top (same labels, so the same key: the deploy accepts it) compiles at its start. The deploy
    warns, and ``rocmfleet check --select cache`` fails naming the compilers and vLLM's words."""
    repository_tag, digest = baked_ref.split("@")
    repository, tag = repository_tag.rsplit(":", 1)
    match = cachedirs.BAKED_TAG.fullmatch(tag)
    assert match, tag
    miss_ref = f"{repository}:{cachedirs.baked_tag(match['base'] + '-miss', match['key'])}"
    context = "/var/cache/rocmfleet-bake/issue27-miss.context"
    dockerfile = (
        f"FROM {repository}@{digest}\n"
        "RUN rm -rf /root/.cache/vllm/torch_compile_cache /root/.cache/inductor/* /root/.triton/cache/*\n"
    )
    made = lab_ssh(lab, host, scripts.command("cache-bake.sh", "dockerfile", context, dockerfile))
    assert made.returncode == 0, made.stderr
    pushed = lab_ssh(lab, host, scripts.command("cache-bake.sh", "build", context, miss_ref), timeout_s=1800)
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    lab_ssh(lab, host, scripts.command("cache-bake.sh", "clean", context))
    miss_digest = pushed.stdout.strip().rsplit("@", 1)[-1]
    (tmp_path / "miss").mkdir()
    inventory = lab_inventory(
        tmp_path / "miss", {host: {"vllm_image_tag": miss_ref.rsplit(":", 1)[1], "vllm_image_digest": miss_digest}}
    )
    code, _, err = pyinfra_json("deploy.py", "-y", "--limit", host, inventory=inventory)
    assert code == 0, err[-3000:]  # a miss is slower, not broken: the instance serves
    assert "rocmfleet: baked compile cache missed: lab-tiny-llama-0: " in err, err[-3000:]
    checked = rocmfleet_cli("check", inventory, "--limit", host, "--select", "cache")
    print(checked.stdout[-3000:])
    assert checked.returncode == 1 and "cache::baked_cache_was_used" in checked.stdout, checked.stdout[-3000:]
    assert "compiled since the start of the baked container" in checked.stdout, checked.stdout[-3000:]
    # what compiled, by compiler, with paths (vLLM 0.32's CPU build logs no "Compiling a graph" line
    # at its default level for this miss: the files are the proof)
    assert re.search(r"(TorchInductor|vLLM torch\.compile|Triton)[^:]*: \d+ \(/root/", checked.stdout), checked.stdout
