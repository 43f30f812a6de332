"""Smoke benchmark groundwork: result parser, sweep, command, verdicts, layout, reports.

The parser runs on vLLM's real JSON: ``../shared/fixtures/vllm-bench-serve-save-result-example.json``
(reference §5.2: 34 keys, about vLLM 0.18, ``--num-prompts 200 --request-rate 1``, one request
failed). Expected values below were read from that file by hand.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rocmfleet.bench import (
    AMD_PAIRS,
    BenchParseError,
    BenchResult,
    BenchShape,
    Case,
    Thresholds,
    bench_command,
    judge,
    latest_baseline,
    load_result,
    load_run,
    new_run_id,
    parse_result,
    parse_results,
    result_path,
    shape_for,
    sweep_for,
)
from rocmfleet.bench_report import markdown_summary, plots
from rocmfleet.profiles import PROFILES_DIR, load_profile

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
    lab = load_profile(PROFILES_DIR / "lab-tiny-llama.yml")
    shape = shape_for(lab, concurrency_scale=1 / 16)
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
    # every flag is one reference §5.1 lists for 0.33, or --served-model-name (serve.py add_cli_args)
    reference = set((FIXTURES.parent / "reference" / "mi300x.md").read_text().split("`"))
    flags = {a for a in argv + plain if a.startswith("--")} - {"--served-model-name"}
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
    assert "**2 of 3 hosts passed.**" in text
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
