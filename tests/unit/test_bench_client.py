"""One benchmark client with pinned sampling for a rollout's gate (issue 27): argv, metadata, comparison, reports."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rocmfleet.domain.benchshape import Case
from rocmfleet.fleet.bench import client as bclient
from rocmfleet.fleet.bench import clientrun
from rocmfleet.fleet.bench.bench import Thresholds, bench_command, parse_result
from rocmfleet.fleet.bench.bench_report import markdown_summary
from rocmfleet.fleet.bench.verdicts import judge
from rocmfleet.fleet.rollout import report as rreport
from rocmfleet.fleet.rollout import state as rstate
from rocmfleet.fleet.rollout.gate import bench_numbers

FIXTURE = (
    Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "vllm-bench-serve-save-result-example.json"
)
OLD = bclient.BenchClient("r/vllm:0.9.2@sha256:" + "a" * 64, "0.9.2", bclient.RUN)
NEW = bclient.BenchClient("r/vllm:0.33.0@sha256:" + "b" * 64, "0.33.0", bclient.RUN)


def _raw() -> dict[str, object]:
    data: dict[str, object] = json.loads(FIXTURE.read_text())
    return data


def _result(client: bclient.BenchClient | None, source: str, throughput: float | None = None) -> object:
    data = _raw()
    data.update(bclient.metadata(client) if client else {})
    if throughput is not None:
        data["output_throughput"] = throughput
    return parse_result(data, source)


@pytest.mark.parametrize("version", ["0.9.2", "0.14.0", "0.32.0", "0.33.0"])
def test_every_run_pins_greedy_sampling_and_the_seed(version: str) -> None:
    client = bclient.BenchClient("r/v:t@sha256:" + "c" * 64, version)
    argv = bench_command(Case(200, 15, 4, 32), 8000, "m", "/tmp/x/c.json", metadata=bclient.metadata(client))
    assert argv[argv.index("--temperature") + 1] == "0" and argv[argv.index("--seed") + 1] == "0"
    meta = argv[argv.index("--metadata") + 1 :]
    assert f"rocmfleet_client_vllm={version}" in meta and "rocmfleet_temperature=0" in meta


def test_the_client_container_runs_the_given_image_with_no_secret_in_its_arguments() -> None:
    argv = bench_command(Case(200, 15, 4, 32), 8000, "m", "/tmp/rocmfleet-bench/run/c.json")
    command = clientrun.client_run(OLD, "a", argv, "/tmp/rocmfleet-bench/run", "/etc/rocmfleet/vllm/a.env", "/hf", 99.5)
    leftover, _, run = command.partition("; ")
    assert shlex.split(leftover)[:4] == ["docker", "rm", "--force", "rocmfleet-bench-a"]
    words = shlex.split(run.split("&& ", 1)[1])
    image = words.index(OLD.image)
    assert words[:4] == ["docker", "run", "--rm", "--name"] and "--device" not in words
    assert words[image - 2 : image] == ["--entrypoint", "timeout"]
    assert words[image + 1 : image + 3] == ["--kill-after=10", "100"] and words[image + 3 :] == argv
    assert "/hf:/root/.cache/huggingface:ro" in words and "HF_HUB_OFFLINE=1" in words
    assert not any("HF_TOKEN" in w for w in words)
    with pytest.raises(ValueError):
        clientrun.client_run(OLD, "a", ["sh"], "/d", "/e", "/hf", 1)


def test_results_of_two_clients_are_not_compared_and_an_unknown_client_is_said() -> None:
    tolerance = Thresholds(max_failed=1, regression_tolerance=0.1)  # the fixture has one failed request
    base = _result(OLD, "base", 1000.0)
    slow = _result(NEW, "after", 500.0)
    verdict = judge(slow, tolerance, base)  # type: ignore[arg-type]
    assert verdict.passed and any("another client" in n and "not compared" in n for n in verdict.notes)
    same = judge(_result(NEW, "after", 500.0), tolerance, _result(NEW, "base", 1000.0))  # type: ignore[arg-type]
    assert not same.passed and "output_throughput" in same.reasons[0]
    unknown = judge(slow, tolerance, _result(None, "old", 1000.0))  # type: ignore[arg-type]
    assert not unknown.passed and any("baseline's benchmark client unknown" in n for n in unknown.notes)


def test_reports_name_the_client_and_sampling_of_both_runs() -> None:
    before = {"200x15-c4": _result(NEW, "b")}
    after = {"200x15-c4": _result(NEW, "a")}
    numbers = bench_numbers(before, after)  # type: ignore[arg-type]
    said = numbers["200x15-c4"].client_after
    assert said == numbers["200x15-c4"].client_before == f"vLLM 0.33.0 ({NEW.image}), temperature 0, seed 0"
    image = rstate.ImageRef(repository="r/vllm", tag="0.33.0", digest="sha256:" + "b" * 64)
    host = rstate.HostState(batch=0, before=image, after=image, step="done", bench=numbers)
    state = rstate.RolloutState.model_construct(
        id="x", kind="rollout", inventory="inv.py", target=image, status="done", canary=0, max_unavailable=1,
        batches=[["h"]], hosts={"h": host}, started="t", updated=None, failure=None,
    )  # fmt: skip
    assert rreport.benchmark_clients(state) == [f"- **h**: before and after the switch: {said}"]
    clients = json.loads(rreport.status_json([], state))["rollout"]["bench_clients"]
    assert clients == {"h": {"200x15-c4": {"before": said, "after": said, "notes": []}}}
    old = bench_numbers({"200x15-c4": _result(None, "b")}, after)["200x15-c4"]  # type: ignore[dict-item]
    host.bench = {"200x15-c4": old}
    line = rreport.benchmark_clients(state)[0]
    assert "before: client unknown" in line and f"after: {said}" in line and "may have sampled differently" in line
    verdict = judge(after["200x15-c4"], Thresholds())  # type: ignore[arg-type]
    text = markdown_summary({"h": [(Case(200, 15, 4), after["200x15-c4"], verdict)]})  # type: ignore[list-item]
    assert f"Benchmark client: {said}." in text
