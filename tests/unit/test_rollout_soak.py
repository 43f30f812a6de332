"""``rollout --soak``: the duration, the window's differencing, the bucket quantile, the Prometheus
source, the verdicts, the report, the runner with a stand-in soak, and the soak's reads on
stand-in hosts (rocmfleet/domain/soak.py, rocmfleet/fleet/metrics/{window,quantile,promapi}.py,
rocmfleet/fleet/rollout/{soak,soakmetrics,runner,report}.py)."""

from __future__ import annotations

import json
import math
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmfleet.domain.soak import DurationError, SoakThresholds, format_duration, parse_duration
from rocmfleet.fleet.connect import Result
from rocmfleet.fleet.metrics import promapi
from rocmfleet.fleet.metrics.quantile import bucket_quantile
from rocmfleet.fleet.metrics.window import Counts, Figures, difference, figures, is_api, snapshot, tpot_metric
from rocmfleet.fleet.rollout import report as rreport
from rocmfleet.fleet.rollout import state as rstate
from rocmfleet.fleet.rollout.soak import judge, soak_points
from rocmfleet.fleet.rollout.soakmetrics import MetricsSoak
from tests.unit.test_rollout_runner import (  # noqa: F401 - prod_targets, stand_in_fleet: fixtures
    NEW,
    PROD,
    SLOWER,
    FakeSteps,
    _plan,
    _runner,
    prod_targets,
    stand_in_fleet,
)

INF = math.inf

# --- the duration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("5m", 300), ("1h", 3600), ("1h30m", 5400), ("2m5s", 125), ("45", 45),
                          (" 10S ", 10), ("24h", 86400)],
)  # fmt: skip
def test_a_soak_duration_is_read_in_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m5", "1.5m", "30m1h", "1m1m", "-5m", "5 m", "1d"])
def test_a_soak_duration_that_is_not_one_is_refused_with_what_is_allowed(text):
    with pytest.raises(DurationError, match=r"^--soak .*: expected a duration like 90s, 5m, 1h or 1h30m, from 10s"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["9s", "0", "25h", "1441m"])
def test_a_soak_out_of_range_is_refused(text):
    with pytest.raises(DurationError, match="out of range; expected .* from 10s to 24h"):
        parse_duration(text)


def test_a_duration_is_written_as_it_is_read():
    assert [format_duration(s) for s in (90, 300, 3600, 5400, 10)] == ["1m30s", "5m", "1h", "1h30m", "10s"]


# --- the bucket quantile (Prometheus's bucketQuantile) -------------------------------------------


def test_the_quantile_interpolates_within_its_bucket():
    buckets = [(0.1, 10), (0.2, 30), (0.5, 90), (INF, 100)]
    # rank 50 of 100: in the 0.5 bucket (30 -> 90): 0.2 + 0.3 * (50 - 30) / 60
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.3)
    # rank 5: in the first bucket, from 0: 0.1 * 5 / 10
    assert bucket_quantile(0.05, buckets) == pytest.approx(0.05)
    # rank 99: in the +Inf bucket: the second-highest upper bound
    assert bucket_quantile(0.99, buckets) == 0.5
    assert bucket_quantile(0.9, buckets) == pytest.approx(0.5)  # rank 90 reaches the 0.5 bucket's count


def test_the_quantile_follows_prometheus_edge_rules():
    assert math.isnan(bucket_quantile(0.5, [(0.1, 1), (0.2, 2)]))  # no +Inf bucket
    assert math.isnan(bucket_quantile(0.5, [(INF, 5)]))  # fewer than two buckets
    assert math.isnan(bucket_quantile(0.5, [(0.1, 0), (INF, 0)]))  # no observation
    assert bucket_quantile(-0.1, [(0.1, 1), (INF, 1)]) == -INF
    assert bucket_quantile(1.1, [(0.1, 1), (INF, 1)]) == INF
    assert bucket_quantile(0.5, [(-1.0, 4), (0.5, 6), (INF, 6)]) == -1.0  # first bucket's bound <= 0
    # unsorted, a bound given twice (added), a count below an earlier one (raised to it)
    assert bucket_quantile(0.5, [(INF, 100), (0.2, 20), (0.1, 10), (0.2, 10), (0.5, 5)]) == pytest.approx(0.5)
    assert bucket_quantile(0.25, [(0.5, 5), (INF, 100), (0.1, 10), (0.2, 30)]) == pytest.approx(0.175)


# --- the window: snapshots differenced ------------------------------------------------------------


def page(ok2=0, err5=0, health=0, ttft=(), tpot=(), tpot_name="vllm:request_time_per_output_token_seconds",
         err4=0):  # fmt: skip
    """A vLLM /metrics page: ``ttft``/``tpot`` are cumulative bucket counts at le 0.05, 0.1, 0.5, +Inf."""
    lines = ["# HELP http_requests_total Total number of requests by method, status and handler.",
             "# TYPE http_requests_total counter"]  # fmt: skip
    for status, value in (("2xx", ok2), ("5xx", err5), ("4xx", err4)):
        if value:
            lines.append(f'http_requests_total{{handler="/v1/completions",method="POST",status="{status}"}} {value}')
    if health:
        lines.append(f'http_requests_total{{handler="none",method="GET",status="5xx"}} {health}')  # untemplated
        lines.append(f'http_requests_total{{handler="/tokenize",method="POST",status="5xx"}} {health}')
        # a load balancer's polls: a read of the API, no inference (recorded from vLLM 0.32's page)
        lines.append(f'http_requests_total{{handler="/v1/models",method="GET",status="2xx"}} {health * 10}')
    for name, counts in (("vllm:time_to_first_token_seconds", ttft), (tpot_name, tpot)):
        if not counts:
            continue
        lines += [f"# HELP {name} x", f"# TYPE {name} histogram"]
        for le, count in zip(("0.05", "0.1", "0.5", "+Inf"), counts, strict=True):
            lines.append(f'{name}_bucket{{engine="0",le="{le}",model_name="m"}} {count}')
        lines.append(f'{name}_count{{engine="0",model_name="m"}} {counts[-1]}')
        lines.append(f'{name}_sum{{engine="0",model_name="m"}} 1.0')
    return "\n".join(lines) + "\n"


def test_a_window_counts_inference_requests_and_their_5xx_only():
    start = snapshot(page(ok2=100, err5=0, health=3, ttft=(10, 20, 20, 20)))
    end = snapshot(page(ok2=150, err5=10, health=9, err4=4, ttft=(10, 40, 60, 60)))
    counts = difference(start, end)
    assert isinstance(counts, Counts)
    # 50 + 10 (the first 5xx: its series is new, counted from 0) + 4 (4xx: a request, not an error)
    assert (counts.requests, counts.errors) == (64, 10)
    assert counts.buckets["vllm:time_to_first_token_seconds"] == {0.05: 0, 0.1: 20, 0.5: 40, INF: 40}


@pytest.mark.parametrize(
    ("handler", "method", "counts"),
    [
        ("/v1/completions", "POST", True),
        ("/v1/chat/completions", "POST", True),
        ("/v1/embeddings", "POST", True),
        ("/v1/models", "GET", False),
        ("/v1/completions", "GET", False),
        ("/v1/completions/render", "POST", False),
        ("/tokenize", "POST", False),
        ("none", "GET", False),
    ],
)
def test_only_posts_to_inference_handlers_are_requests(handler, method, counts):
    assert is_api(handler, method) is counts


def test_a_counter_that_went_down_or_vanished_means_a_restart():
    start = snapshot(page(ok2=100, err5=5, ttft=(1, 2, 3, 3)))
    assert "restarted in the window (http_requests_total went down)" in difference(start, snapshot(page(ok2=3)))
    assert "restarted in the window" in difference(start, snapshot(page(ok2=120, ttft=(1, 2, 3, 3))))  # 5xx gone


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_a_counter_that_is_not_a_finite_number_leaves_the_instance_out(value):
    # the text format allows NaN and +Inf; differenced they gave NaN requests, which passed the
    # min_requests test (NaN < 20 is false) and judged nothing, then failed formatting the summary
    bad = page(ok2=100).replace(" 100\n", f" {value}\n")
    for start, end in ((snapshot(bad), snapshot(page(ok2=150))), (snapshot(page(ok2=100)), snapshot(bad))):
        assert difference(start, end) == (
            "a counter is not a finite number (http_requests_total): its window cannot be counted"
        )


def test_a_side_sums_its_instances_and_takes_quantiles_of_the_sum():
    a = difference(snapshot(page(ok2=0, ttft=(0, 0, 0, 0))), snapshot(page(ok2=40, ttft=(0, 40, 40, 40))))
    b = difference(snapshot(page(ok2=0, ttft=(0, 0, 0, 0))), snapshot(page(ok2=60, err5=6, ttft=(60, 60, 60, 60))))
    side = figures(["h1", "h2"], {"h1/a": a, "h2/a": b}, {"h2/b": "restarted in the window"}, tpot=None)
    assert (side.requests, side.errors, side.error_rate) == (106, 6, pytest.approx(6 / 106))
    assert side.latency_s["ttft_p50"] == pytest.approx(0.05 * 50 / 60)  # rank 50 of 100, first bucket
    assert "tpot_p50" not in side.latency_s and side.left_out == ["h2/b: restarted in the window"]


def test_tpot_is_the_histogram_every_side_has():
    new, old = Counts(buckets={"vllm:request_time_per_output_token_seconds": {}}), Counts(buckets={})
    assert tpot_metric(new) == "vllm:request_time_per_output_token_seconds"
    assert tpot_metric(new, old) is None
    old.buckets["vllm:time_per_output_token_seconds"] = {}
    new.buckets["vllm:time_per_output_token_seconds"] = {}
    assert tpot_metric(new, old) == "vllm:time_per_output_token_seconds"


# --- the verdicts --------------------------------------------------------------------------------


def side(hosts, requests, errors, **latency_ms):
    return Figures(hosts=hosts, instances=hosts, requests=requests, errors=errors,
                   latency_s={k: v / 1000 for k, v in latency_ms.items()})  # fmt: skip


LAT = {"ttft_p50": 40, "ttft_p99": 90, "tpot_p50": 20, "tpot_p99": 30}


def test_a_higher_error_rate_fails_naming_both_rates_and_counts():
    outcome, _notes = judge(side(["h1"], 160, 50, **LAT), side(["h2", "h3"], 320, 0, **LAT), SoakThresholds())
    assert outcome.verdict == "fail" and outcome.gate == "soak"
    assert outcome.reasons == [
        "error rate 31.2% (50 of 160 requests) against 0.0% (0 of 320) on the hosts not yet switched "
        "(allowed: +1.0 points)"
    ]


def test_an_error_rate_within_the_margin_passes():
    outcome, notes = judge(side(["h1"], 200, 3, **LAT), side(["h2"], 200, 2, **LAT), SoakThresholds())
    assert outcome.verdict == "pass" and notes == []


def test_too_little_traffic_on_either_side_is_inconclusive():
    outcome, _ = judge(side(["h1"], 5, 5), side(["h2"], 300, 0), SoakThresholds())
    assert outcome.verdict == "inconclusive"
    assert outcome.reasons[0] == (
        "too little traffic to judge: 5 request(s) on the soaked hosts (h1) in the window, fewer than min_requests 20"
    )
    outcome, _ = judge(side(["h1"], 300, 0), side(["h2"], 0, 0), SoakThresholds(min_requests=50))
    assert outcome.verdict == "inconclusive" and "0 request(s) on the hosts not yet switched (h2)" in outcome.reasons[0]


def test_slower_latency_fails_above_the_ratio_and_the_floor_only():
    slow = dict(LAT, ttft_p99=400)  # 90 -> 400 ms: x4.4
    outcome, _ = judge(side(["h1"], 100, 0, **slow), side(["h2"], 100, 0, **LAT), SoakThresholds())
    assert outcome.reasons == [
        "TTFT p99 400.0 ms against 90.0 ms on the hosts not yet switched (allowed: 135.0 ms, x1.5 or +10 ms)"
    ]
    tiny = {"ttft_p50": 0.004, "ttft_p99": 0.009, "tpot_p50": 0.002, "tpot_p99": 0.003}  # microseconds, x3
    fast = {k: v / 3 for k, v in tiny.items()}
    outcome, _ = judge(side(["h1"], 100, 0, **tiny), side(["h2"], 100, 0, **fast), SoakThresholds())
    assert outcome.verdict == "pass"  # under the 10 ms floor


def test_latency_missing_on_a_side_is_noted_not_judged():
    outcome, notes = judge(side(["h1"], 100, 0), side(["h2"], 100, 0, **LAT), SoakThresholds())
    assert outcome.verdict == "pass"
    assert "TTFT p50 not compared: no observation on the soaked hosts" in notes


def test_with_no_host_left_on_the_old_image_the_error_rate_is_judged_against_zero():
    outcome, notes = judge(side(["h9"], 100, 0, **LAT), None, SoakThresholds())
    assert outcome.verdict == "pass" and any("latency not compared" in n for n in notes)
    outcome, _ = judge(side(["h9"], 100, 5, **LAT), None, SoakThresholds(error_rate_margin=0.02))
    assert outcome.reasons == [
        "error rate 5.0% (5 of 100 requests) with no host on the old image left to compare (allowed: at most 2.0%)"
    ]


# --- where the soaks run -----------------------------------------------------------------------


def test_the_canary_is_soaked_once_after_its_last_batch_or_every_batch_with_soak_batches():
    state = _plan(["h1", "h2", "h3", "h4", "h5"], canary=2, most=1)
    assert soak_points(state) == {}
    state.soak = rstate.SoakPlan(duration_s=60)
    assert soak_points(state) == {1: [0, 1]}  # the canary of two hosts, split in two batches
    state.soak.every_batch = True
    assert soak_points(state) == {i: [i] for i in range(5)}
    nocanary = _plan(["h1", "h2"], canary=0, most=1)
    nocanary.soak = rstate.SoakPlan(duration_s=60)
    assert soak_points(nocanary) == {}


# --- the runner with a stand-in soak -------------------------------------------------------------


class FakeSoak:
    """Stands in for MetricsSoak: ``verdicts`` in order (the last repeats); records each call."""

    def __init__(self, *verdicts, steps=None):
        self.verdicts, self.calls, self.steps = list(verdicts), [], steps

    def __call__(self, hosts, compared, duration_s):
        serving = None if self.steps is None else sorted(self.steps.out_of_service)
        self.calls.append((list(hosts), list(compared), duration_s, serving))
        verdict = self.verdicts.pop(0) if len(self.verdicts) > 1 else self.verdicts[0]
        reasons = {
            "pass": [],
            "fail": ["error rate 31.2% (50 of 160 requests) against 0.0% (0 of 320) on the hosts not yet switched "
                     "(allowed: +1.0 points)"],
            "inconclusive": ["too little traffic to judge: 3 request(s) on the soaked hosts (h1) in the window, "
                             "fewer than min_requests 20"],
        }[verdict]  # fmt: skip
        return rstate.SoakResult(
            verdict=verdict, reasons=reasons, hosts=list(hosts), compared=list(compared),
            soaked=side(list(hosts), 160, 50 if verdict == "fail" else 0, **LAT),
            others=side(list(compared), 320, 0, **LAT) if compared else None,
            started="2026-01-01T00:00:00+00:00", ended="2026-01-01T00:05:00+00:00", window_s=300.0,
            source="direct", thresholds={k: float(v) for k, v in SoakThresholds().model_dump().items()},
        )  # fmt: skip


def _soaking(tmp_path, hosts, soak, canary=1, most=1, every=False, slept=None, lines=None, steps=None):
    state = _plan(hosts, canary=canary, most=most)
    state.soak = rstate.SoakPlan(duration_s=300, every_batch=every)
    steps = steps or FakeSteps()
    runner, path = _runner(tmp_path, state, steps, slept=slept, lines=lines)
    runner.soak = soak
    return runner, path, steps


def test_a_soak_that_passes_lets_the_next_batches_go_on(tmp_path):
    lines = []
    steps = FakeSteps()
    soak = FakeSoak("pass", steps=steps)
    runner, path, steps = _soaking(tmp_path, ["h1", "h2", "h3"], soak, lines=lines, steps=steps)
    assert runner.run() == 0
    state = rstate.load_state(path)
    assert state.status == "done" and all(h.step == "done" for h in state.hosts.values())
    # the canary soaked in service (nothing drained), against the two hosts not yet switched; they waited
    assert soak.calls == [(["h1"], ["h2", "h3"], 300, [])]
    assert steps.log.index(("undrain", "h1")) < steps.log.index(("drain", "h2"))
    assert state.soaks["0"].verdict == "pass"
    assert any("soak: h1 in service on the new image for 5m, then compared with 2 host(s) not yet switched (h2, h3)"
               in line for line in lines)  # fmt: skip
    assert any("soak of h1 ended: pass (error rate 0.0% (0 of 160) against 0.0% (0 of 320))" in line for line in lines)
    report = rreport.markdown_report(state)
    assert "## Soak" in report and "| soaked (new image) | h1 | 160 | 0 | 0.0% | 40.0 | 90.0 | 20.0 | 30.0 |" in report
    assert "| not yet switched (old image) | h2, h3 | 320 | 0 | 0.0% |" in report
    status = json.loads(rreport.status_json([], state))["rollout"]["soak"]
    assert status["duration_s"] == 300 and status["results"]["0"]["soaked"]["error_rate"] == 0.0


def test_a_soak_that_fails_rolls_the_canary_back(tmp_path):
    reverted = []
    soak = FakeSoak("fail")
    state = _plan(["h1", "h2", "h3"])
    state.soak = rstate.SoakPlan(duration_s=300)
    steps = FakeSteps()
    runner, path = _runner(tmp_path, state, steps, reverted=lambda: reverted.append(1))
    runner.soak = soak
    assert runner.run() == 1
    state = rstate.load_state(path)
    assert state.status == "rolled_back" and reverted == [1]
    assert state.failure == (
        "h1: soak gate failed: error rate 31.2% (50 of 160 requests) against 0.0% (0 of 320) on the hosts not yet "
        "switched (allowed: +1.0 points)"
    )
    assert state.hosts["h1"].step == "rolled_back" and steps.running["h1"] != NEW.digest
    # in service during its soak: drained before its rollback, undrained after
    mine = [s for s, h in steps.log if h == "h1"]
    assert mine[-3:] == ["drain", "rollback", "undrain"]
    assert [s for s, h in steps.log if h in ("h2", "h3")] == ["pull"]
    assert state.soaks["0"].verdict == "fail"
    report = rreport.markdown_report(state)
    assert "Verdict: **fail**: error rate 31.2% (50 of 160 requests)" in report


def test_a_soak_without_traffic_is_retried_then_pauses_and_resume_soaks_again(tmp_path):
    slept, lines = [], []
    soak = FakeSoak("inconclusive")
    runner, path, steps = _soaking(tmp_path, ["h1", "h2"], soak, slept=slept, lines=lines)
    assert runner.run() == 3
    state = rstate.load_state(path)
    assert state.status == "paused" and len(soak.calls) == 3 and slept == [10, 20]
    assert state.hosts["h1"].step == "soaking" and state.hosts["h2"].step == "pending"
    assert "h1: soak gate inconclusive: too little traffic to judge" in state.failure
    assert not any(s == "rollback" for s, _h in steps.log) and "h1" not in steps.out_of_service
    assert "In service on the new image, their soak not judged: h1" in rreport.markdown_report(state)
    again, _ = _runner(tmp_path, state, steps)
    again.soak = FakeSoak("pass")
    again.resume_paused()
    assert again.run() == 0
    state = rstate.load_state(path)
    assert state.status == "done" and again.soak.calls[0][:2] == (["h1"], ["h2"])
    assert state.soaks["0"].verdict == "pass"


def test_soak_batches_soaks_each_batch_against_the_hosts_still_waiting(tmp_path):
    soak = FakeSoak("pass")
    runner, path, _steps = _soaking(tmp_path, ["h1", "h2", "h3", "h4"], soak, most=2, every=True)
    assert runner.run() == 0
    assert [(hosts, compared) for hosts, compared, _d, _s in soak.calls] == [
        (["h1"], ["h2", "h3", "h4"]),
        (["h2", "h3"], ["h4"]),
        (["h4"], []),  # the last batch: nothing left on the old image
    ]
    state = rstate.load_state(path)
    assert sorted(state.soaks) == ["0", "1", "2"] and state.status == "done"
    assert "| not yet switched (old image) | none left |" in rreport.markdown_report(state)


def test_a_canary_larger_than_max_unavailable_is_soaked_once_all_together(tmp_path):
    soak = FakeSoak("pass")
    runner, path, steps = _soaking(tmp_path, ["h1", "h2", "h3"], soak, canary=2, most=1)
    assert runner.run() == 0
    assert [c[:2] for c in soak.calls] == [(["h1", "h2"], ["h3"])]
    assert steps.log.index(("undrain", "h1")) < steps.log.index(("drain", "h2"))  # h1 serves while h2 switches


def test_a_soaking_host_needs_a_soak_in_the_state():
    state = _plan(["h1", "h2"])
    data = json.loads(state.model_dump_json())
    data["hosts"]["h1"]["step"] = "soaking"
    _state, problems = rstate.state_problems(json.dumps(data))
    assert any(p.startswith("soak: null: h1 are 'soaking'") for p in problems)


# --- the soak's reads on stand-in hosts ----------------------------------------------------------


class MetricsHosts:
    """HostSteps' ``targets`` and ``run`` for MetricsSoak: each host's pages at each read, in order."""

    def __init__(self, pages, targets):
        self.pages, self.targets, self.commands = pages, targets, []

    def run(self, host, command, timeout_s, gate):
        self.commands.append((host, command))
        reads = self.pages[host]
        body = reads.pop(0) if len(reads) > 1 else reads[0]
        if isinstance(body, Exception):
            raise body
        out = []
        for port, text in body.items():
            out.append(f"# rocmfleet-metrics {port} ok\n{text}" if text is not None else
                       f"# rocmfleet-metrics {port} curl exit 7: Failed to connect")  # fmt: skip
        return Result(exit_status=0, stdout_bytes="\n".join(out).encode(), stderr_bytes=b"")


def _target(name, ports, thresholds=None):
    instances = [SimpleNamespace(name=f"vllm-{i}", port=port) for i, port in enumerate(ports)]
    profile = SimpleNamespace(soak=thresholds or SoakThresholds())
    return SimpleNamespace(name=name, config=SimpleNamespace(instances=lambda: instances, profile=profile))


def test_the_direct_soak_reads_every_host_at_the_start_and_end_and_fails_a_canary_serving_500s():
    zero = page(ok2=1, ttft=(0, 0, 0, 1), tpot=(0, 0, 0, 1))
    pages = {
        "h1": [{8000: zero}, {8000: page(ok2=111, err5=50, ttft=(0, 100, 110, 111), tpot=(50, 111, 111, 111))}],
        "h2": [{8000: zero, 8001: zero}, {8000: page(ok2=161, ttft=(0, 140, 161, 161), tpot=(100, 161, 161, 161)),
                                          8001: page(ok2=161, ttft=(0, 140, 161, 161), tpot=(100, 161, 161, 161))}],
        "h3": [RuntimeError("ssh: connection refused")],
    }  # fmt: skip
    targets = {"h1": _target("h1", [8000]), "h2": _target("h2", [8000, 8001]), "h3": _target("h3", [8000])}
    hosts = MetricsHosts(pages, targets)
    slept, now = [], iter([1000.0, 1300.0])
    soak = MetricsSoak(hosts, None, sleep=slept.append, clock=lambda: next(now))
    result = soak(["h1"], ["h2", "h3"], 300)
    assert slept == [300] and len(hosts.commands) == 6  # h1, h2, h3 at the start, then at the end
    assert all("metrics-read.sh" in c for _h, c in hosts.commands)
    assert result.verdict == "fail" and result.source == "direct" and result.window_s == 300.0
    assert result.reasons == [
        "error rate 31.2% (50 of 160 requests) against 0.0% (0 of 320) on the hosts not yet switched "
        "(allowed: +1.0 points)"
    ]
    assert result.others is not None and result.others.instances == ["h2/vllm-0", "h2/vllm-1"]
    assert result.others.left_out == ["h3/vllm-0: not read: RuntimeError: ssh: connection refused (at the start)"]
    assert result.soaked.tpot_metric == "vllm:request_time_per_output_token_seconds"
    assert result.started == "1970-01-01T00:16:40+00:00"


def test_the_direct_soak_leaves_a_restarted_instance_out_and_without_data_is_inconclusive():
    pages = {
        "h1": [{8000: page(ok2=500)}, {8000: page(ok2=30)}],  # restarted: its counters went down
        "h2": [{8000: page(ok2=1)}, {8000: page(ok2=300)}],
    }
    targets = {"h1": _target("h1", [8000]), "h2": _target("h2", [8000])}
    result = MetricsSoak(MetricsHosts(pages, targets), None, sleep=lambda s: None)(["h1"], ["h2"], 60)
    assert result.verdict == "inconclusive"
    assert result.reasons == [
        "no metrics from the soaked hosts: h1/vllm-0: restarted in the window (http_requests_total went down): "
        "its counters start again from 0"
    ]


# --- the Prometheus source -----------------------------------------------------------------------


class Prometheus(BaseHTTPRequestHandler):
    """/api/v1/query: canned vectors by the query's metric (``server.answers``); records the queries."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urllib.parse.urlparse(self.path)
        args = urllib.parse.parse_qs(url.query)
        self.server.asked.append((url.path, args["query"][0], args["time"][0]))
        if self.server.fail:
            body, code = {"status": "error", "errorType": "bad_data", "error": "parse error"}, 400
        else:
            name = next((n for n in self.server.answers if n in args["query"][0]), None)
            rows = self.server.answers.get(name, [])
            body = {"status": "success", "data": {"resultType": "vector", "result": rows}}
            code = 200
        payload = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def prom():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    server.asked, server.answers, server.fail = [], {}, False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _row(value, **labels):
    return {"metric": labels, "value": [1300.0, str(value)]}


def test_the_prometheus_source_asks_increase_over_the_window_by_host(prom):
    buckets = [("0.05", 0), ("0.1", 90), ("0.5", 100), ("+Inf", 100)]
    prom.answers = {
        "http_requests_total": [_row(110, host="h1", status="2xx"), _row(50, host="h1", status="5xx"),
                                _row(320, host="h2", status="2xx"), _row(7, host="elsewhere", status="5xx")],
        "vllm:time_to_first_token_seconds_bucket": [_row(c, host=h, le=le) for h in ("h1", "h2") for le, c in buckets],
        "vllm:request_time_per_output_token_seconds_bucket": [_row(c, host="h2", le=le) for le, c in buckets],
    }  # fmt: skip
    url = f"http://127.0.0.1:{prom.server_port}"
    counts = promapi.window_counts(url, ["h1", "h2"], 300, 1300.0)
    assert set(counts) == {"h1", "h2"} and (counts["h1"].requests, counts["h1"].errors) == (160, 50)
    path, query, at = prom.asked[0]
    assert path == "/api/v1/query" and at == "1300.000"
    assert query == (
        'sum by (host, status) (increase(http_requests_total{handler=~"/v1/(chat/)?completions|/v1/embeddings|'
        '/v1/responses|/v1/rerank|/v1/score|/v1/audio/.*",method="POST"}[300s]))'
    )
    assert any(q == "sum by (host, le) (increase(vllm:time_to_first_token_seconds_bucket[300s]))"
               for _p, q, _t in prom.asked)  # fmt: skip

    targets = {"h1": _target("h1", [8000]), "h2": _target("h2", [8000])}
    now = iter([1000.0, 1300.0, 1300.0])
    soak = MetricsSoak(MetricsHosts({}, targets), url, sleep=lambda s: None, clock=lambda: next(now))
    result = soak(["h1"], ["h2"], 300)
    assert result.source == url and result.verdict == "fail"
    assert result.reasons[0].startswith("error rate 31.2% (50 of 160 requests) against 0.0% (0 of 320)")
    assert result.soaked.latency_s["ttft_p50"] == pytest.approx(0.05 + 0.05 * 50 / 90)
    assert any(n.startswith("TPOT not compared") for n in result.notes)  # h1 has no TPOT series


def test_prometheus_rows_that_are_not_finite_numbers_are_not_counted(prom):
    prom.answers = {"http_requests_total": [_row("NaN", host="h1", status="2xx"), _row("+Inf", host="h1", status="5xx"),
                                            _row(40, host="h1", status="2xx")]}  # fmt: skip
    counts = promapi.window_counts(f"http://127.0.0.1:{prom.server_port}", ["h1"], 300, 1300.0)
    assert (counts["h1"].requests, counts["h1"].errors) == (40, 0)


def test_an_unreachable_prometheus_or_no_series_is_inconclusive(prom):
    targets = {"h1": _target("h1", [8000]), "h2": _target("h2", [8000])}
    url = f"http://127.0.0.1:{prom.server_port}"
    result = MetricsSoak(MetricsHosts({}, targets), url, sleep=lambda s: None)(["h1"], ["h2"], 60)
    assert result.verdict == "inconclusive"
    assert result.reasons[0].startswith(f"no metrics from the soaked hosts: h1: no series with host='h1' in {url}")
    prom.fail = True
    result = MetricsSoak(MetricsHosts({}, targets), url, sleep=lambda s: None)(["h1"], ["h2"], 60)
    assert result.verdict == "inconclusive" and result.reasons == [f"Prometheus not read: {url}: HTTP 400: parse error"]
    gone = "http://127.0.0.1:9"  # discard: nothing listens
    result = MetricsSoak(MetricsHosts({}, targets), gone, sleep=lambda s: None)(["h1"], ["h2"], 60)
    assert result.verdict == "inconclusive" and result.reasons[0].startswith(f"Prometheus not read: {gone}: ")


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--soak", "5x"], "argument --soak: '5x': expected a duration like 90s, 5m, 1h or 1h30m"),
        (["--soak", "5s"], "argument --soak: '5s': 5 s is out of range"),
        (["--soak-batches"], "--soak-batches with no --soak"),
        (["--soak", "1m", "--rollback"], "--soak with --rollback"),
        (["--soak", "1m", "--canary", "0"], "--soak without --soak-batches soaks the canary"),
        (["--soak", "1m", "--canary-group", "gpu_nodes"], "the canary is every host of this rollout"),
    ],
)
def test_bad_soak_options_are_refused_with_exit_2_and_no_traceback(argv, said, capsys, tmp_path, monkeypatch):
    from rocmfleet import entry

    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    if "--rollback" in argv:
        rstate.save_state(_plan(["h1"]), rstate.state_path(tmp_path, "inventories/prod.py"))
    try:
        code = entry.main(["rollout", "inventories/prod.py", "-y", *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err, err


def test_a_canary_that_fails_its_soak_from_the_cli_is_rolled_back_with_the_rates_on_stderr(
    stand_in_fleet,  # noqa: F811 - the fixture imported above
    capsys,
    monkeypatch,
):
    from rocmfleet import entry
    from rocmfleet.fleet.rollout import command

    steps, _group = stand_in_fleet
    soaks = []
    monkeypatch.setattr(command, "MetricsSoak", lambda steps, url: soaks.append(url) or FakeSoak("fail"))
    argv = ["rollout", PROD, "-y", "--image", f"{SLOWER.repository}:{SLOWER.tag}", "--soak", "2m"]
    code = entry.main(argv)
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and soaks == [None]
    assert "soak: the canary for 2m, in service on the new image" in out
    assert (
        "mi300x-a01: rolled_back: soak gate failed: error rate 31.2% (50 of 160 requests) against 0.0% (0 of 320) "
        "on the hosts not yet switched (allowed: +1.0 points)"
    ) in err
    state = rstate.load_state(rstate.state_path(rstate.results_root(None, PROD), PROD))
    assert state.soak == rstate.SoakPlan(duration_s=120) and state.soaks["0"].verdict == "fail"
    assert steps.running == {"mi300x-a01": state.hosts["mi300x-a01"].before.digest}


def test_a_profiles_soak_block_is_checked_with_every_problem_named(tmp_path):
    from rocmfleet.config.profiles import ProfileError, load_profile

    lab = "group_vars/profiles/lab-tiny-llama.yml"
    assert load_profile(lab).soak == SoakThresholds(
        error_rate_margin=0.05, latency_ratio=3.0, latency_floor_ms=250, min_requests=20
    )
    bad = tmp_path / "lab-tiny-llama.yml"
    text = Path(lab).read_text().split("\nsoak:\n")[0]
    bad.write_text(text + "\nsoak:\n  error_rate_margin: 2\n  latency_ratio: 0.5\n  min_requests: 0\n  floor: 1\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(bad)
    keys = {key for key, _message, _value in caught.value.problems}
    assert keys == {"soak.error_rate_margin", "soak.latency_ratio", "soak.min_requests", "soak.floor"}
    assert "did you mean" in str(caught.value) or "unknown key" in str(caught.value)


@pytest.mark.parametrize("margin", [0.51, 1.0])
def test_an_error_rate_margin_above_half_is_refused_with_what_it_means(tmp_path, margin):
    """At 1 any error rate passes: the margin is capped at 0.5, and the message says what it is."""
    from rocmfleet.config.profiles import ProfileError, load_profile

    lab = "group_vars/profiles/lab-tiny-llama.yml"
    bad = tmp_path / "lab-tiny-llama.yml"
    bad.write_text(Path(lab).read_text().split("\nsoak:\n")[0] + f"\nsoak:\n  error_rate_margin: {margin}\n")
    with pytest.raises(ProfileError) as caught:
        load_profile(bad)
    [(key, message, _value)] = caught.value.problems
    assert key == "soak.error_rate_margin"
    assert "at most 0.5" in message and "points of error rate" in message and "0.01 = 1 point" in message


def test_an_error_rate_margin_of_half_is_accepted():
    assert SoakThresholds(error_rate_margin=0.5).error_rate_margin == 0.5


def test_hosts_with_different_prometheus_urls_are_named_in_one_plain_list():
    from rocmfleet.fleet.rollout.command import CommandError, prometheus_url

    def target(url):
        return SimpleNamespace(config=SimpleNamespace(metrics=SimpleNamespace(metrics_prometheus_url=url)))

    hosts = {"a01": target("http://prom:9090"), "a02": target(None), "a03": target("http://prom:9090")}
    with pytest.raises(CommandError) as caught:
        prometheus_url(hosts)  # type: ignore[arg-type]
    said = str(caught.value)
    assert said.startswith(
        "--soak: the hosts name different metrics_prometheus_url values: http://prom:9090 for a01, a03; unset for a02; "
    )
    assert "((" not in said and "(none)" not in said
    assert prometheus_url({"a01": target(None), "a02": target(None)}) is None  # type: ignore[arg-type]
