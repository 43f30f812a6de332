"""Smoke benchmark groundwork: result parser, sweep, command, verdicts, layout, reports.

The parser runs on vLLM's real JSON: ``../shared/fixtures/vllm-bench-serve-save-result-example.json``
(reference §5.2: 34 keys, about vLLM 0.18, ``--num-prompts 200 --request-rate 1``, one request
failed). Expected values below were read from that file by hand.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rocmfleet.config.connection import SshSettings
from rocmfleet.config.profiles import PROFILES_DIR, load_profile
from rocmfleet.config.settings import host_config
from rocmfleet.config.vault import Secret
from rocmfleet.domain.benchshape import AMD_PAIRS, BenchShape, Case, Thresholds, shape_for, sweep_for
from rocmfleet.fleet.bench import benchrun
from rocmfleet.fleet.bench.bench import (
    BenchParseError,
    BenchResult,
    bench_command,
    load_result,
    parse_result,
    parse_results,
)
from rocmfleet.fleet.bench.bench_report import case_line, markdown_summary, plots
from rocmfleet.fleet.bench.runs import (
    KILL_AFTER_S,
    container_result_path,
    docker_exec,
    instance_dir,
    latest_baseline,
    load_run,
    new_run_id,
    result_path,
    save_verdict,
    target_name,
    verdict_passed,
)
from rocmfleet.fleet.bench.verdicts import Verdict, judge
from rocmfleet.fleet.target import Target
from tests.unit.conftest import DIGEST, LAB_PROFILE

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
FIXTURE = FIXTURES / "vllm-bench-serve-save-result-example.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def result_from(raw: dict[str, Any], source: str = "test", **changes: Any) -> BenchResult:
    """The fixture's result with keys changed (``None`` removes a key)."""
    data = copy.deepcopy(raw)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return parse_result(data, source)


# --- parser on the real fixture --------------------------------------------------------------


#: What ``rocmfleet bench inventories/lab.py --limit lab-2`` saved from the lab's real vLLM 0.32.0
#: (the CPU build serving the generated tiny model): one case, 200 x 15 tokens at concurrency 4.
LAB_RESULT = Path(__file__).parent / "data" / "vllm-bench-serve-lab-0.32.0.json"


def test_lab_result_values_read_by_hand() -> None:
    r = load_result(LAB_RESULT)
    assert r.model_id == "/opt/models/tiny-llama" and r.backend == "vllm"
    assert (r.num_prompts, r.max_concurrency, r.request_rate) == (32, 4, math.inf)  # "inf" in the JSON
    assert (r.completed, r.failed) == (32, 0)
    # 32 prompts of 200 random tokens (the tokenizer gives 6408, not 6400) and exactly 15 out each
    assert (r.total_input_tokens, r.total_output_tokens) == (6408, 480)
    assert r.output_throughput == 637.9591202886107
    assert (r.ttft.mean_ms, r.ttft.p99_ms) == (33.02286546869482, 45.69574523993652)
    assert (r.tpot.mean_ms, r.tpot.p99_ms) == (4.266581058045307, 5.653170089329121)
    assert r.itl is not None and r.itl.p99_ms == 11.693481799502477
    assert r.e2el is not None and r.e2el.p(90) == 103.43103379946115
    assert judge(r, Thresholds(ttft_p99_ms=60000, tpot_p99_ms=10000)).passed


def test_fixture_values_read_by_hand() -> None:
    r = load_result(FIXTURE)
    assert r.source == str(FIXTURE)
    assert r.date == "20260722-060114"
    assert r.backend == "openai"
    assert r.model_id == "./Qwen2.5-VL-3B-Instruct"
    assert r.num_prompts == 200
    assert r.request_rate == 1.0
    assert r.max_concurrency is None
    assert r.duration_s == 204.45408433000557
    assert (r.completed, r.failed) == (199, 1)
    assert (r.total_input_tokens, r.total_output_tokens) == (39800, 25472)
    assert r.request_throughput == 0.9733236714351853
    assert r.output_throughput == 124.58542994370372
    assert r.total_token_throughput == 319.2501642307408
    assert r.max_output_tokens_per_s == 308.0
    assert r.max_concurrent_requests == 14
    assert (r.ttft.mean_ms, r.ttft.median_ms, r.ttft.std_ms) == (
        97.50969301155726,
        98.94429985433817,
        10.283567228285902,
    )
    assert r.ttft.p99_ms == 113.88637554366143
    assert (r.tpot.mean_ms, r.tpot.median_ms, r.tpot.p99_ms) == (
        34.43461520473263,
        34.45028747967261,
        35.01290820802995,
    )
    assert r.itl is not None
    assert (r.itl.mean_ms, r.itl.median_ms, r.itl.p99_ms) == (34.434617229796345, 34.34124984778464, 38.25465443544089)
    assert r.e2el is None  # the fixture's run used the default --percentile-metrics ttft,tpot,itl
    assert set(r.metrics) == {"ttft", "tpot", "itl"}
    assert r.ttft.percentiles_ms == {99.0: 113.88637554366143}
    assert r.samples_ms == {}  # 0.18 wrote no per-request lists
    assert r.value("p99_tpot_ms") == 35.01290820802995
    assert r.value("median_ttft_ms") == 98.94429985433817
    assert r.value("p50_ttft_ms") is None


def test_text_bytes_and_mapping_give_the_same_result(raw: dict[str, Any]) -> None:
    text = FIXTURE.read_text()
    assert parse_result(text, "x") == parse_result(text.encode(), "x") == parse_result(raw, "x")


def test_failed_computed_when_absent_as_in_vllm_092(raw: dict[str, Any]) -> None:
    # 0.9.2 wrote endpoint_type but no backend, failed or max_* keys (reference §5.2)
    r = result_from(
        raw, backend=None, failed=None, max_output_tokens_per_s=None, max_concurrent_requests=None, rtfx=None
    )
    assert r.failed == 200 - 199
    assert r.backend == "openai"  # from endpoint_type
    assert r.max_output_tokens_per_s is None and r.max_concurrent_requests is None


def test_failed_unknown_without_failed_and_num_prompts(raw: dict[str, Any]) -> None:
    assert result_from(raw, failed=None, num_prompts=None).failed is None


def test_inf_request_rate_and_our_percentiles(raw: dict[str, Any]) -> None:
    extra = {
        "request_rate": "inf",
        "max_concurrency": 64,
        "mean_e2el_ms": 5000.0,
        "median_e2el_ms": 4900.0,
        "std_e2el_ms": 300.0,
        "p50_e2el_ms": 4900.0,
        "p90_e2el_ms": 5400.0,
        "p99_e2el_ms": 5900.0,
        "p50_ttft_ms": 98.9,
        "p90_ttft_ms": 105.0,
        "p99.9_ttft_ms": 120.0,
    }
    r = result_from(raw, **extra)
    assert r.request_rate == math.inf
    assert r.max_concurrency == 64
    assert r.e2el is not None and r.e2el.percentiles_ms == {50.0: 4900.0, 90.0: 5400.0, 99.0: 5900.0}
    assert list(r.ttft.percentiles_ms) == [50.0, 90.0, 99.0, 99.9]
    assert r.ttft.p(99.9) == 120.0
    assert r.value("p90_e2el_ms") == 5400.0


def test_per_request_samples_in_ms_of_successful_requests(raw: dict[str, Any]) -> None:
    # seconds, as vLLM writes them; the third request failed (latency and TTFT left at 0.0)
    r = result_from(raw, latencies=[1.0, 2.0, 0.0], ttfts=[0.1, 0.2, 0.0], output_lens=[10, 19, 0])
    assert r.samples_ms["e2el"] == (1000.0, 2000.0)
    assert r.samples_ms["ttft"] == (100.0, 200.0)
    assert r.samples_ms["tpot"] == pytest.approx((100.0, 1800.0 / 18))  # (latency - ttft) / (out - 1)
    with_errors = result_from(raw, latencies=[1.0, 2.0], errors=["", "boom"])
    assert with_errors.samples_ms == {"e2el": (1000.0,)}


def test_append_result_file_has_one_object_per_line() -> None:
    line = FIXTURE.read_text().strip()
    text = f"\n{line}\n{line}\n"
    results = parse_results(text, "runs.json")
    assert [r.source for r in results] == ["runs.json:2", "runs.json:3"]
    with pytest.raises(BenchParseError, match=r"(?s)runs\.json: .*parse_results"):
        parse_result(text, "runs.json")


# --- malformed results -----------------------------------------------------------------------

MALFORMED: list[tuple[str, Any, list[str]]] = [
    ("not json", "{oops", ["(file)", "expected JSON text", "line 1 column 2"]),
    ("empty", "", ["(file)", "expected JSON text"]),
    ("top level list", "[1, 2]", ["(top level)", "a JSON object", "got list"]),
    ("no duration", {"duration": None}, ["duration: expected the benchmark duration in seconds", "got missing"]),
    ("completed as text", {"completed": "199"}, ["completed: expected", "integer", "got '199'"]),
    ("negative failed", {"failed": -1}, ["failed: expected", "got -1"]),
    ("bool throughput", {"output_throughput": True}, ["output_throughput: expected output tokens/s", "got True"]),
    ("nan ttft", {"p99_ttft_ms": float("nan")}, ["p99_ttft_ms: expected the 99th percentile of TTFT", "got nan"]),
    ("no ttft at all", {k: None for k in ("mean_ttft_ms", "median_ttft_ms")}, ["mean_ttft_ms", "median_ttft_ms"]),
    ("mean without median", {"median_itl_ms": None}, ["median_itl_ms: expected the median ITL in ms", "missing"]),
    ("bad request rate", {"request_rate": "fast"}, ["request_rate: expected", '"inf"', "got 'fast'"]),
    ("model id a number", {"model_id": 3}, ["model_id: expected a string or null", "got 3"]),
    ("latencies not numbers", {"latencies": ["a"]}, ["latencies: expected a list of numbers"]),
    ("lists of two lengths", {"latencies": [1.0], "ttfts": [0.1, 0.2]}, ["per-request lists of one length"]),
    ("failed absent, too few prompts", {"failed": None, "num_prompts": 10}, ["num_prompts (10) >= completed (199)"]),
]


@pytest.mark.parametrize(("change", "expected"), [(m[1], m[2]) for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_results_name_source_key_and_expectation(raw: dict[str, Any], change: Any, expected: list[str]):
    if isinstance(change, str):
        data: Any = change
    else:
        data = copy.deepcopy(raw)
        for key, value in change.items():
            if value is None:
                data.pop(key)
            else:
                data[key] = value
    with pytest.raises(BenchParseError) as info:
        parse_result(data, "host-1/2000x150-c64.json")
    message = str(info.value)
    assert message.startswith("host-1/2000x150-c64.json: ")
    for part in expected:
        assert part in message
    assert isinstance(info.value, ValueError)
    assert info.value.source == "host-1/2000x150-c64.json"


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(BenchParseError) as info:
        parse_result({"completed": "x"}, "s")
    keys = [key for key, _, _ in info.value.problems]
    for key in ("duration", "completed", "request_throughput", "output_throughput", "total_token_throughput"):
        assert key in keys
    assert "mean_ttft_ms" in keys and "median_tpot_ms" in keys


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(BenchParseError, match=r"(?s)missing\.json: .*a readable file"):
        load_result(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(BenchParseError, match="bad.json"):
        load_result(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(json.loads(FIXTURE.read_text()))), json_values, max_size=6))
def test_any_change_parses_or_raises_bench_parse_error(changes: dict[str, Any]) -> None:
    data = {**json.loads(FIXTURE.read_text()), **changes}
    try:
        parse_result(data, "fuzz")
    except BenchParseError as exc:
        assert str(exc).startswith("fuzz: ")


# --- sweep and command -----------------------------------------------------------------------


def test_default_sweep_is_amds() -> None:
    cases = sweep_for()
    assert [(c.isl, c.osl) for c in cases] == list(AMD_PAIRS)
    assert AMD_PAIRS == ((2000, 150), (1000, 1000), (5000, 1000), (10000, 1000), (3200, 800))
    assert {c.concurrency for c in cases} == {64}
    assert {c.num_prompts for c in cases} == {256}
    assert [c.name for c in cases][0] == "2000x150-c64"


def test_lab_sweep_fits_the_lab_model_and_scales_concurrency_down() -> None:
    lab = load_profile(LAB_PROFILE)
    # AMD's whole sweep instead of the lab profile's own `bench:` choice (one short case)
    shape = shape_for(lab, pairs=list(AMD_PAIRS), length_scale=1, prompts_per_slot=4)
    assert shape.max_model_len == 2048
    cases = sweep_for(shape)
    assert len(cases) == 5
    for case, (isl, osl) in zip(cases, AMD_PAIRS, strict=True):
        assert case.isl + case.osl <= 2048 - shape.reserve_tokens
        assert case.concurrency == 4 and case.num_prompts == 16
        assert abs(case.isl / case.osl - isl / osl) / (isl / osl) < 0.05  # the prefill/decode mix is kept
    assert (cases[1].isl, cases[1].osl) == (1000, 1000)  # fits as published


def test_sweep_over_concurrencies_caps_and_dedups() -> None:
    shape = BenchShape(pairs=[(100, 10), (100, 10), (50, 50)], concurrencies=[1, 8, 64], max_concurrency=8)
    cases = sweep_for(shape)
    assert [c.name for c in cases] == ["100x10-c1", "50x50-c1", "100x10-c8", "50x50-c8"]
    tiny = sweep_for(BenchShape(pairs=[(10, 1)], concurrencies=[2], length_scale=0.01))
    assert (tiny[0].isl, tiny[0].osl) == (1, 2)  # TPOT needs two output tokens


@pytest.mark.parametrize(
    "bad",
    [
        {"pairs": []},
        {"pairs": [(0, 10)]},
        {"concurrencies": [0]},
        {"concurrency_scale": 0},
        {"length_scale": 2},
        {"max_model_len": 16, "reserve_tokens": 16},
        {"typo": 1},
    ],
)
def test_bad_shapes_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        BenchShape.model_validate(bad)


def test_bench_command_argv() -> None:
    case = Case(2000, 150, 64, 256)
    argv = bench_command(
        case,
        8001,
        "/opt/models/tiny-llama",
        "/root/.cache/vllm/bench/run1/2000x150-c64.json",
        served_model_name="tiny-llama",
        metadata={"rocmfleet_host": "lab-1"},
    )
    assert argv == [
        "vllm", "bench", "serve",
        "--backend", "vllm",
        "--host", "127.0.0.1",
        "--port", "8001",
        "--model", "/opt/models/tiny-llama",
        "--served-model-name", "tiny-llama",
        "--dataset-name", "random",
        "--random-input-len", "2000",
        "--random-output-len", "150",
        "--max-concurrency", "64",
        "--num-prompts", "256",
        "--ignore-eos",
        "--temperature", "0",
        "--seed", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--save-result",
        "--result-dir", "/root/.cache/vllm/bench/run1",
        "--result-filename", "2000x150-c64.json",
        "--metadata", "rocmfleet_host=lab-1",
    ]  # fmt: skip
    plain = bench_command(case, 8000, "m", "out.json", save_detailed=True)
    assert "--served-model-name" not in plain and "--metadata" not in plain
    assert plain[-1] == "--save-detailed"
    assert plain[plain.index("--result-dir") + 1] == "."
    # every flag is one reference §5.1 lists for 0.33, or --served-model-name (serve.py add_cli_args),
    # or --temperature (its "sampling parameters" group: vllm PR #16022; rocmfleet.fleet.bench.client)
    reference = set((FIXTURES.parent / "reference" / "mi300x.md").read_text().split("`"))
    flags = {a for a in argv + plain if a.startswith("--")} - {"--served-model-name", "--temperature"}
    assert flags <= reference, flags - reference


def test_bench_command_needs_prompts_and_clean_metadata() -> None:
    with pytest.raises(ValueError, match="num_prompts"):
        bench_command(Case(1, 2, 3), 8000, "m", "x.json")
    with pytest.raises(ValueError, match="identifiers"):
        bench_command(Case(1, 2, 3, 4), 8000, "m", "x.json", metadata={"a b": "c"})


# --- thresholds, verdicts, baselines ---------------------------------------------------------


def test_thresholds_forbid_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValidationError):
        Thresholds.model_validate({"ttft_p99": 100})
    with pytest.raises(ValidationError):
        Thresholds(regression_tolerance=1.5)
    assert Thresholds().max_failed == 0


def test_fixture_fails_on_its_failed_request(raw: dict[str, Any]) -> None:
    r = result_from(raw)
    verdict = judge(r, Thresholds(), None)
    assert not verdict.passed
    assert verdict.reasons == ["failed: 1 requests > limit 0"]
    assert verdict.notes == ["no baseline: regression not checked"]
    assert judge(r, Thresholds(max_failed=1)).passed


def test_absolute_limits_name_metric_value_and_limit(raw: dict[str, Any]) -> None:
    r = result_from(raw, failed=0)
    t = Thresholds(ttft_p99_ms=100, tpot_p99_ms=40, min_output_throughput_tok_s=150)
    assert judge(r, t).reasons == [
        "p99_ttft_ms: 113.89 ms > limit 100.00 ms",
        "output_throughput: 124.59 tok/s < limit 150.00 tok/s",
    ]
    assert judge(r, Thresholds(ttft_p99_ms=120, tpot_p99_ms=36, min_output_throughput_tok_s=120)).passed
    no_p99 = result_from(raw, failed=0, p99_tpot_ms=None)
    assert judge(no_p99, Thresholds(tpot_p99_ms=40)).reasons[0].startswith("p99_tpot_ms: not in the result")


def test_nothing_completed_or_unknown_failures_fail(raw: dict[str, Any]) -> None:
    assert "completed: 0 requests succeeded" in judge(result_from(raw, completed=0, failed=0), Thresholds()).reasons
    unknown = result_from(raw, failed=None, num_prompts=None)
    assert judge(unknown, Thresholds()).reasons[0].startswith("failed: unknown")


def test_regression_past_tolerance_fails(raw: dict[str, Any]) -> None:
    baseline = result_from(raw, "runs/20260101T000000Z/h/case.json", failed=0)
    same = result_from(raw, failed=0)
    assert judge(same, Thresholds(), baseline) == judge(same, Thresholds(), baseline)
    assert judge(same, Thresholds(), baseline).passed
    within = result_from(raw, failed=0, output_throughput=124.58542994370372 * 0.91)
    assert judge(within, Thresholds(regression_tolerance=0.10), baseline).passed
    slower = result_from(raw, failed=0, output_throughput=100.0, median_ttft_ms=120.0)
    verdict = judge(slower, Thresholds(regression_tolerance=0.10), baseline)
    assert not verdict.passed
    assert verdict.reasons == [
        "output_throughput: 100.00 tok/s is 19.7% below the baseline 124.59 tok/s "
        "(limit 112.13 tok/s at tolerance 10%; baseline runs/20260101T000000Z/h/case.json)",
        "median_ttft_ms: 120.00 ms is 21.3% above the baseline 98.94 ms "
        "(limit 108.84 ms at tolerance 10%; baseline runs/20260101T000000Z/h/case.json)",
    ]
    assert judge(slower, Thresholds(regression_tolerance=0.25), baseline).passed


def test_baseline_of_another_shape_is_not_compared(raw: dict[str, Any]) -> None:
    baseline = result_from(raw, failed=0, max_concurrency=64)
    slower = result_from(raw, failed=0, max_concurrency=8, output_throughput=1.0)
    verdict = judge(slower, Thresholds(), baseline)
    assert verdict.passed
    assert "max_concurrency 64" in verdict.notes[0]


# --- layout ----------------------------------------------------------------------------------


def _save(root: Path, run_id: str, host: str, case: Case, data: dict[str, Any] | str, instance: str | None = None):
    path = result_path(root, run_id, host, case, instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_result_path_layout_and_unsafe_names(tmp_path: Path) -> None:
    case = Case(2000, 150, 64, 256)
    assert result_path(tmp_path, "20260722T060114Z", "gpu-01", case) == (
        tmp_path / "20260722T060114Z" / "gpu-01" / "2000x150-c64.json"
    )
    assert result_path("r", "1", "h", case, "tiny-llama-b") == Path("r/1/h/tiny-llama-b/2000x150-c64.json")
    for host in ("", "..", "a/b", "."):
        with pytest.raises(ValueError, match="directory name"):
            result_path(tmp_path, "1", host, case)
    assert Case.from_name("2000x150-c64") == case  # num_prompts is not part of the identity
    with pytest.raises(ValueError):
        Case.from_name("2000x150")


def test_run_ids_sort_in_time_order() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    early = new_run_id(datetime(2026, 7, 22, 9, 59, 59, tzinfo=timezone(timedelta(hours=2))))
    late = new_run_id(datetime(2026, 7, 22, 8, 0, 0, tzinfo=UTC))
    assert early == "20260722T075959Z" and late == "20260722T080000Z" and early < late


def test_latest_baseline_is_the_newest_good_result_before_the_run(tmp_path: Path, raw: dict[str, Any]) -> None:
    case = Case(2000, 150, 64)
    good = {**raw, "failed": 0}
    _save(tmp_path, "20260101T000000Z", "h1", case, {**good, "output_throughput": 1.0})
    _save(tmp_path, "20260201T000000Z", "h1", case, {**good, "output_throughput": 2.0})
    _save(tmp_path, "20260301T000000Z", "h1", case, raw)  # one request failed: never a baseline
    _save(tmp_path, "20260401T000000Z", "h1", case, "{broken")
    _save(tmp_path, "20260501T000000Z", "h1", case, {**good, "output_throughput": 5.0})  # this run
    _save(tmp_path, "20260201T000000Z", "h1", case, {**good, "output_throughput": 9.0}, instance="b")

    found = latest_baseline(tmp_path, "h1", case, "20260501T000000Z")
    assert found is not None and found.output_throughput == 2.0
    assert "20260201T000000Z" in found.source
    assert latest_baseline(tmp_path, "h1", case, None).output_throughput == 5.0  # type: ignore[union-attr]
    assert latest_baseline(tmp_path, "h1", case, "20260101T000000Z") is None
    assert latest_baseline(tmp_path, "h2", case, None) is None
    assert latest_baseline(tmp_path, "h1", Case(1, 2, 3), None) is None
    assert latest_baseline(tmp_path / "nothing", "h1", case, None) is None
    assert latest_baseline(tmp_path, "h1", case, None, instance="b").output_throughput == 9.0  # type: ignore[union-attr]


def test_a_result_that_failed_its_verdict_is_never_a_baseline(tmp_path: Path, raw: dict[str, Any]) -> None:
    case = Case(2000, 150, 64)
    good = {**raw, "failed": 0}
    _save(tmp_path, "20260101T000000Z", "h1", case, {**good, "output_throughput": 100.0})
    slow = _save(tmp_path, "20260201T000000Z", "h1", case, {**good, "output_throughput": 10.0})
    save_verdict(slow, Verdict(False, ["output_throughput: 10.00 tok/s is 90.0% below the baseline"]))
    assert verdict_passed(slow) is False
    found = latest_baseline(tmp_path, "h1", case, "20260301T000000Z")
    assert found is not None and found.output_throughput == 100.0  # the slow run did not lower the bar
    save_verdict(slow, Verdict(True))
    assert latest_baseline(tmp_path, "h1", case, "20260301T000000Z").output_throughput == 10.0  # type: ignore[union-attr]


def test_baseline_of_another_model_is_passed_over_for_an_older_comparable_one(
    tmp_path: Path, raw: dict[str, Any]
) -> None:
    case = Case(2000, 150, 64)
    good = {**raw, "failed": 0}
    _save(tmp_path, "20260101T000000Z", "h1", case, {**good, "output_throughput": 100.0})
    _save(tmp_path, "20260201T000000Z", "h1", case, {**good, "model_id": "other/model", "output_throughput": 7.0})
    this = parse_result(json.dumps({**good, "output_throughput": 99.0}), "this run")
    assert latest_baseline(tmp_path, "h1", case, "20260301T000000Z").output_throughput == 7.0  # type: ignore[union-attr]
    found = latest_baseline(tmp_path, "h1", case, "20260301T000000Z", like=this)
    assert found is not None and found.output_throughput == 100.0


def test_load_run_reads_hosts_and_instances(tmp_path: Path, raw: dict[str, Any]) -> None:
    run_id = "20260722T060114Z"
    _save(tmp_path, run_id, "h1", Case(5000, 1000, 64), raw)
    _save(tmp_path, run_id, "h1", Case(2000, 150, 64), raw)
    _save(tmp_path, run_id, "h0", Case(2000, 150, 8), raw, instance="tiny-llama-b")
    (tmp_path / run_id / "summary.json").write_text("{}")  # not a case file: ignored
    run = load_run(tmp_path, run_id)
    assert list(run) == ["h0/tiny-llama-b", "h1"]
    assert [c.name for c, _ in run["h1"]] == ["2000x150-c64", "5000x1000-c64"]
    assert run["h1"][0][1].completed == 199


# --- reports ---------------------------------------------------------------------------------


@pytest.fixture
def run(raw: dict[str, Any]) -> dict[str, list[Any]]:
    t = Thresholds(ttft_p99_ms=200, tpot_p99_ms=100)
    good = {**raw, "failed": 0, "mean_e2el_ms": 5180.0, "median_e2el_ms": 5170.0, "p99_e2el_ms": 5400.0}
    rows: dict[str, list[Any]] = {}
    for host, factor in (("gpu-01", 1.0), ("gpu-02", 0.95), ("gpu|03", 0.6)):
        rows[host] = []
        for case in sweep_for(BenchShape(pairs=[(2000, 150), (1000, 1000)], concurrencies=[8, 64])):
            data = {
                **good,
                "output_throughput": 124.6 * factor * case.concurrency / 8,
                "max_concurrency": case.concurrency,
            }
            result = parse_result(data, f"{host}/{case.name}.json")
            baseline = parse_result({**data, "output_throughput": 124.6 * case.concurrency / 8}, "baseline")
            rows[host].append((case, result, judge(result, t, baseline)))
    return rows


def test_markdown_summary(run: dict[str, list[Any]], raw: dict[str, Any]) -> None:
    text = markdown_summary(run, title="Smoke benchmark 20260722T060114Z")
    assert text.startswith("# Smoke benchmark 20260722T060114Z\n")
    assert "**2 of 3 instances passed.**" in text
    assert "| gpu-01 | PASS | 4/4 |" in text
    assert "| gpu\\|03 | **FAIL** | 0/4 |" in text
    assert "## gpu-02: PASS" in text and "## gpu|03: FAIL" in text
    # throughput, completed/failed, mean / p99 of TTFT, TPOT, ITL, E2E
    assert (
        "| 2000 x 150, c8 | PASS | 124.6 | 319.3 | 199 / 0 | 97.5 / 113.9 | 34.4 / 35.0 | 34.4 / 38.3 "
        "| 5,180.0 / 5,400.0 |" in text
    )
    assert "- 2000x150-c8: output_throughput: 74.76 tok/s is 40.0% below the baseline 124.60 tok/s" in text
    lone = {"h": [(Case(1, 2, 3), result_from(raw), judge(result_from(raw), Thresholds()))]}
    lone_text = markdown_summary(lone)
    assert "| 34.4 / 38.3 | – |" in lone_text  # no E2E in the fixture
    assert "- 1x2-c3: failed: 1 requests > limit 0" in lone_text
    assert "- no baseline: regression not checked" in lone_text
    assert "No results." in markdown_summary({})


def test_plots_write_pngs(run: dict[str, list[Any]], tmp_path: Path) -> None:
    paths = plots(run, tmp_path / "plots")
    assert [p.name for p in paths] == ["throughput.png", "ttft.png", "tpot.png", "throughput-vs-concurrency.png"]
    for path in paths:
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000


def test_plots_without_sweep_and_with_per_request_samples(raw: dict[str, Any], tmp_path: Path) -> None:
    detailed = result_from(
        raw,
        latencies=[1.0 + i / 100 for i in range(50)],
        ttfts=[0.1 + i / 1000 for i in range(50)],
        output_lens=[150] * 50,
    )
    assert set(detailed.samples_ms) == {"e2el", "ttft", "tpot"}
    case = Case(2000, 150, 64)
    one = {h: [(case, detailed, judge(detailed, Thresholds()))] for h in ("a", "b")}
    paths = plots(one, tmp_path)
    assert [p.name for p in paths] == ["throughput.png", "ttft.png", "tpot.png"]  # one concurrency: no sweep plot
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in paths)
    assert plots({}, tmp_path / "empty") == []


# --- a profile's bench section ---------------------------------------------------------------


def test_profile_bench_section_shapes_the_sweep_and_sets_thresholds() -> None:
    lab = load_profile(LAB_PROFILE)
    assert [c.name for c in sweep_for(shape_for(lab))] == ["200x15-c4"]  # AMD's 2000/150 at c64, scaled
    assert sweep_for(shape_for(lab))[0].num_prompts == 32
    assert lab.bench.thresholds.regression_tolerance == 0.9 and lab.bench.thresholds.max_failed == 0
    assert shape_for(lab, concurrencies=[2]).concurrencies == [2]  # overrides win over the profile
    assert shape_for(lab).max_model_len == 2048  # the profile's cap stays
    scout = load_profile(PROFILES_DIR / "llama-4-scout.yml")  # no bench section: AMD's sweep
    assert [(c.isl, c.osl, c.concurrency) for c in sweep_for(shape_for(scout))] == [(i, o, 64) for i, o in AMD_PAIRS]
    assert scout.bench.thresholds == Thresholds()


@pytest.mark.parametrize(
    ("section", "key"),
    [({"pairz": [[1, 2]]}, "bench.pairz"), ({"thresholds": {"ttft_p99": 1}}, "bench.thresholds.ttft_p99")],
)
def test_profile_bench_section_refuses_typos(tmp_path: Path, section: dict[str, Any], key: str) -> None:
    import yaml

    from rocmfleet.config.profiles import ProfileError

    data = yaml.safe_load(LAB_PROFILE.read_text())
    path = tmp_path / "lab-tiny-llama.yml"
    path.write_text(yaml.safe_dump({**data, "bench": section}))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert key in str(exc.value)


# --- what runs in the container --------------------------------------------------------------


def test_container_paths_instance_dirs_and_targets() -> None:
    case = Case(200, 15, 4, 32)
    assert (
        str(container_result_path("20260722T060114Z", case)) == "/tmp/rocmfleet-bench/20260722T060114Z/200x15-c4.json"
    )
    with pytest.raises(ValueError, match="directory name"):
        container_result_path("../x", case)
    assert instance_dir(["lab-tiny-llama-0"], "lab-tiny-llama-0") is None
    assert instance_dir(["a", "b"], "b") == "b"
    with pytest.raises(ValueError, match="not one of"):
        instance_dir(["a"], "c")
    assert target_name("lab-1") == "lab-1" and target_name("lab-1", "b") == "lab-1/b"


def test_docker_exec_quotes_and_times_out_inside_the_container() -> None:
    argv = bench_command(Case(200, 15, 4, 32), 8001, "/opt/m", "/tmp/x/c.json", metadata={"k": "a b"})
    command = docker_exec("vllm-tiny-llama-b", argv, 89.2)
    words = shlex.split(command)
    assert words[:7] == ["docker", "exec", "vllm-tiny-llama-b", "timeout", f"--kill-after={KILL_AFTER_S}", "90", "vllm"]
    assert words[6:] == argv and "'k=a b'" in command
    assert docker_exec("c", ["cat", "/tmp/a b"]) == "docker exec c cat '/tmp/a b'"
    with pytest.raises(ValueError, match="timeout_s"):
        docker_exec("c", ["true"], 0)


# --- console line and Markdown with errors ---------------------------------------------------


def test_case_line(raw: dict[str, Any]) -> None:
    good = result_from(raw, failed=0)
    case = Case(200, 15, 4)
    line = case_line("lab-1 tiny-llama-a:8000", case, good, judge(good, Thresholds()), "20260722T060114Z")
    assert line == (
        "lab-1 tiny-llama-a:8000 200x15-c4: PASS 124.6 output tok/s, p99 TTFT 113.9 ms, p99 TPOT 35.0 ms; "
        "baseline 20260722T060114Z"
    )
    assert case_line("h", case, good, judge(good, Thresholds())).endswith("; no baseline")
    bad = result_from(raw)
    assert case_line("h", case, bad, judge(bad, Thresholds(ttft_p99_ms=100))) == (
        "h 200x15-c4: FAIL failed: 1 requests > limit 0; p99_ttft_ms: 113.89 ms > limit 100.00 ms"
    )
    assert (
        case_line("h", case, error="vllm bench serve exited 1: boom")
        == "h 200x15-c4: FAIL vllm bench serve exited 1: boom"
    )


def test_markdown_summary_names_hosts_without_results(raw: dict[str, Any]) -> None:
    good = result_from(raw, failed=0)
    case = Case(200, 15, 4)
    run = {"lab-1/a": [(case, good, judge(good, Thresholds()))], "lab-1/b": [(case, good, judge(good, Thresholds()))]}
    errors = {"lab-1/b": ["200x8-c4: vllm bench serve exited 1: boom"], "lab-3": ["unreachable: OSError: no route"]}
    text = markdown_summary(run, "Smoke benchmark R", errors)
    assert "**1 of 3 instances passed.**" in text
    assert "| lab-1/a | PASS | 1/1 |" in text and "| lab-1/b | **FAIL** | 1/1 |" in text
    assert "| lab-3 | **FAIL** | 0/0 | – |" in text
    assert "## lab-3: FAIL\n\nNo results.\n\nWhy it failed:\n\n- unreachable: OSError: no route\n" in text
    assert "- 200x8-c4: vllm bench serve exited 1: boom" in text


# --- the runner, against fake hosts ----------------------------------------------------------


class FakeHost:
    """Stands in for an opened :class:`rocmfleet.fleet.connect.Session`: answers the runner's ``docker exec`` commands.

    ``vllm bench serve`` "writes" the fixture's JSON (no failed request, this case's shape,
    ``throughput`` tok/s) where ``--result-dir``/``--result-filename`` say; ``cat`` and ``rm -rf``
    act on those files.
    """

    def __init__(self, raw: dict[str, Any], throughput: float = 124.6, exit_code: int = 0, stderr: str = "") -> None:
        self.raw, self.throughput, self.exit_code, self.stderr = raw, throughput, exit_code, stderr
        self.files: dict[tuple[str, str], str] = {}
        self.commands: list[list[str]] = []
        self.closed = False

    def run(self, command: str, *, timeout_s: float) -> SimpleNamespace:
        assert timeout_s > 0
        words = shlex.split(command)
        self.commands.append(words)
        assert words[:2] == ["docker", "exec"]
        container, rest = words[2], words[3:]
        if rest[0] == "timeout":
            rest = rest[3:]
        if rest[:3] == ["vllm", "bench", "serve"]:
            if self.exit_code:
                return SimpleNamespace(exited=self.exit_code, stdout="", stderr=self.stderr)

            def flag(name: str) -> str:
                return rest[rest.index(name) + 1]

            data = {
                **self.raw,
                "failed": 0,
                "num_prompts": int(flag("--num-prompts")),
                "max_concurrency": int(flag("--max-concurrency")),
                "model_id": flag("--model"),
                "output_throughput": self.throughput,
            }
            self.files[(container, f"{flag('--result-dir')}/{flag('--result-filename')}")] = json.dumps(data)
            return SimpleNamespace(exited=0, stdout="", stderr="progress bars")
        if rest[0] == "cat":
            text = self.files.get((container, rest[1]))
            return SimpleNamespace(exited=int(text is None), stdout=text or "", stderr="" if text else "No such file")
        if rest[:2] == ["rm", "-rf"]:
            for key in [k for k in self.files if k[0] == container and k[1].startswith(rest[2] + "/")]:
                del self.files[key]
            return SimpleNamespace(exited=0, stdout="", stderr="")
        raise AssertionError(f"unexpected command {words}")

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fleet(lab_data: dict[str, Any]) -> list[Target]:
    """lab-1 with two instances (as inventories/lab.py), lab-2 with the profile's one; lab-2 has a secret."""
    one = {k: v for k, v in lab_data.items() if k != "vllm_instances"}
    one["vllm_secret_env"] = {"HF_TOKEN": Secret("hf_unitTestToken123")}
    return [
        Target("lab-1", SshSettings("10.213.0.11", user="root"), host_config(lab_data)),
        Target("lab-2", SshSettings("10.213.0.12", user="root"), host_config(one)),
    ]


def _run_ids(monkeypatch: pytest.MonkeyPatch, *ids: str) -> None:
    queue = list(ids)
    monkeypatch.setattr(benchrun, "new_run_id", lambda: queue.pop(0))


def test_bench_saves_results_reports_and_compares_with_the_previous_run(
    fleet: list[Target], raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = {"lab-1": FakeHost(raw), "lab-2": FakeHost(raw)}
    lines: list[str] = []
    _run_ids(monkeypatch, "20260722T060000Z", "20260722T070000Z")
    rc = benchrun.bench(fleet, tmp_path, 600, lines.append, connector=lambda t: hosts[t.name])
    assert rc == 0, lines
    case = Case(200, 15, 4, 32)
    paths = {
        "lab-1/tiny-llama-a": result_path(tmp_path, "20260722T060000Z", "lab-1", case, "tiny-llama-a"),
        "lab-1/tiny-llama-b": result_path(tmp_path, "20260722T060000Z", "lab-1", case, "tiny-llama-b"),
        "lab-2": result_path(tmp_path, "20260722T060000Z", "lab-2", case),
    }
    for path in paths.values():
        assert load_result(path).max_concurrency == 4
    assert list(load_run(tmp_path, "20260722T060000Z")) == list(paths)
    case_lines = [line for line in lines if " 200x15-c4: " in line]
    assert sorted(case_lines) == [  # sorted: lab-2's thread may print between lab-1's lines
        f"{label} 200x15-c4: PASS 124.6 output tok/s, p99 TTFT 113.9 ms, p99 TPOT 35.0 ms; no baseline"
        for label in ("lab-1 tiny-llama-a:8000", "lab-1 tiny-llama-b:8001", "lab-2 lab-tiny-llama-0:8000")
    ]
    summary = tmp_path / "20260722T060000Z" / "summary.md"
    text = summary.read_text()
    assert text.startswith("# Smoke benchmark 20260722T060000Z\n") and "**3 of 3 instances passed.**" in text
    assert f"Markdown: {summary}" in lines and lines[-1] == "2 of 2 host(s) passed"
    for name in ("throughput.png", "ttft.png", "tpot.png"):
        assert (summary.parent / name).read_bytes().startswith(PNG_MAGIC)
    # the commands: the profile's case against each instance's own port, inside its container
    serve = [w for w in hosts["lab-1"].commands if "serve" in w]
    assert [(w[2], w[w.index("--port") + 1]) for w in serve] == [
        ("vllm-tiny-llama-a", "8000"),
        ("vllm-tiny-llama-b", "8001"),
    ]
    assert serve[0][serve[0].index("--metadata") + 1 :] == [
        "rocmfleet_run_id=20260722T060000Z",
        "rocmfleet_host=lab-1",
        "rocmfleet_instance=tiny-llama-a",
        f"rocmfleet_image=10.213.0.1:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1@{DIGEST}",
        f"rocmfleet_client_image=10.213.0.1:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1@{DIGEST}",
        f"rocmfleet_client_vllm={fleet[0].config.profile.vllm_version}",
        "rocmfleet_temperature=0",
        "rocmfleet_seed=0",
    ]
    assert all(not h.files and h.closed for h in hosts.values())  # the containers' copies are removed

    # second run: lab-2 is 95% slower, past the lab profile's 90% tolerance
    hosts["lab-2"].throughput = 124.6 * 0.05
    lines.clear()
    rc = benchrun.bench(fleet, tmp_path, 600, lines.append, connector=lambda t: hosts[t.name])
    assert rc == 1
    lab2 = next(line for line in lines if line.startswith("lab-2 "))
    assert lab2.startswith("lab-2 lab-tiny-llama-0:8000 200x15-c4: FAIL output_throughput: 6.23 tok/s is 95.0% below")
    assert "20260722T060000Z" in lab2
    assert any(line.endswith("; baseline 20260722T060000Z") and line.startswith("lab-1 ") for line in lines)
    assert lines[-1] == "1 of 2 host(s) passed; failed: lab-2"
    assert "## lab-2: FAIL" in (tmp_path / "20260722T070000Z" / "summary.md").read_text()


def test_unreachable_host_fails_in_the_report_and_the_others_run(
    fleet: list[Target], raw: dict[str, Any], tmp_path: Path
) -> None:
    def connector(target: Target) -> FakeHost:
        if target.name == "lab-2":
            raise OSError(113, "No route to host")
        return FakeHost(raw)

    lines: list[str] = []
    assert benchrun.bench(fleet, tmp_path, 600, lines.append, connector=connector) == 1
    (down,) = [line for line in lines if line.startswith("lab-2: ")]
    assert down.startswith("lab-2: FAIL unreachable (root@10.213.0.12): ")
    assert down.endswith("OSError: [Errno 113] No route to host")
    assert sum(": PASS " in line for line in lines) == 2
    (run_dir,) = tmp_path.iterdir()
    text = (run_dir / "summary.md").read_text()
    assert "| lab-2 | **FAIL** | 0/0 | – |" in text and "OSError: [Errno 113] No route to host" in text
    assert lines[-1] == "1 of 2 host(s) passed; failed: lab-2"


def test_real_ssh_to_a_closed_port_is_an_unreachable_host(fleet: list[Target], tmp_path: Path) -> None:
    import dataclasses

    ssh = dataclasses.replace(fleet[1].ssh, hostname="127.0.0.1", port=1, known_hosts_file=str(tmp_path / "kh"))
    closed = dataclasses.replace(fleet[1], ssh=ssh)
    (tmp_path / "kh").write_text("")
    lines: list[str] = []
    outcome = benchrun.bench_host(closed, tmp_path, "R", 30, lines.append)
    assert not outcome.passed and outcome.cases == []
    assert lines == [f"lab-2: FAIL {outcome.error}"] and outcome.error.startswith("unreachable (root@127.0.0.1:1): ")


def test_benchmark_errors_and_timeouts_fail_the_case_with_secrets_masked(
    fleet: list[Target], raw: dict[str, Any], tmp_path: Path
) -> None:
    stderr = "Traceback ...\nhttpx.ConnectError: refused (token hf_unitTestToken123)\n"
    lines: list[str] = []
    outcome = benchrun.bench_host(
        fleet[1], tmp_path, "R", 600, lines.append, lambda t: FakeHost(raw, exit_code=1, stderr=stderr)
    )
    assert lines == [
        "lab-2 lab-tiny-llama-0:8000 200x15-c4: FAIL vllm bench serve exited 1: "
        "Traceback ... | httpx.ConnectError: refused (token *MASKED*)"
    ]
    assert not outcome.passed and outcome.cases[0].error
    lines.clear()
    benchrun.bench_host(fleet[1], tmp_path, "R", 600, lines.append, lambda t: FakeHost(raw, exit_code=124))
    assert lines == ["lab-2 lab-tiny-llama-0:8000 200x15-c4: FAIL timed out after 600 s (--timeout-s)"]
    lines.clear()
    outcome = benchrun.bench_host(fleet[0], tmp_path, "R", 0, lines.append, lambda t: FakeHost(raw))
    assert all(line.endswith("FAIL not run: the host's --timeout-s ran out") for line in lines) and len(lines) == 2


def test_gate_results_split_the_cases_that_gave_a_result_from_those_that_did_not(
    fleet: list[Target], raw: dict[str, Any], tmp_path: Path
) -> None:
    client = benchrun.serving_client(fleet[1])
    error, results, errors = benchrun.gate_results(fleet[1], tmp_path, 600, [].append, client, lambda t: FakeHost(raw))
    assert error is None and errors == [] and list(results) == ["lab-2:200x15-c4"]
    error, results, errors = benchrun.gate_results(
        fleet[1], tmp_path, 600, [].append, client, lambda t: FakeHost(raw, exit_code=124)
    )
    assert error is None and results == {}
    assert errors == ["lab-2:200x15-c4: timed out after 600 s (--timeout-s)"]


def test_cli_bench_without_a_valid_inventory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rocmfleet.entry import main

    assert main(["bench", str(tmp_path / "nope.py"), "--results-dir", str(tmp_path / "r")]) == 2
    assert "no such inventory file" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # nothing ran, nothing written


def test_the_json_report_has_every_case_with_its_verdict_and_metrics(
    fleet: list[Target], raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    def connector(target: Target) -> FakeHost:
        if target.name == "lab-2":
            raise OSError(113, "No route to host")
        return FakeHost(raw)

    _run_ids(monkeypatch, "20260722T080000Z")
    got: list[str] = []
    rc = benchrun.bench(fleet, tmp_path, 600, lambda _l: None, connector=connector,
                        on_done=lambda *a: got.append(benchrun.json_report(*a)))  # fmt: skip
    assert rc == 1
    report = json.loads(got[0])
    assert report["run_id"] == "20260722T080000Z" and report["passed"] is False
    one, two = report["hosts"]
    assert (one["host"], one["passed"], two["host"], two["passed"]) == ("lab-1", True, "lab-2", False)
    assert two["error"].startswith("unreachable (root@10.213.0.12): ") and two["cases"] == []
    assert [c["target"] for c in one["cases"]] == ["lab-1/tiny-llama-a", "lab-1/tiny-llama-b"]
    case = one["cases"][0]
    assert case["case"] == "200x15-c4" and case["passed"] is True and case["reasons"] == []
    assert case["metrics"]["output_throughput"] == 124.6 and Path(case["result_file"]).is_file()


def test_bench_json_keeps_standard_output_to_the_report(monkeypatch, capsys, tmp_path) -> None:
    import json

    from rocmfleet import entry
    from rocmfleet.fleet import inventory

    monkeypatch.setattr(inventory, "load_fleet", lambda *a, **k: [])

    def fake_bench(targets, results_dir, timeout_s, emit, on_done=None):
        emit("run 1: 0 host(s)")
        on_done("1", tmp_path, [benchrun.HostOutcome("h", error="unreachable")])
        return 1

    monkeypatch.setattr(benchrun, "bench", fake_bench)
    assert entry.main(["bench", "inv.py", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["hosts"][0]["host"] == "h" and err == "run 1: 0 host(s)\n"
