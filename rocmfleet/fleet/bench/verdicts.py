"""A benchmark result against its profile's thresholds and the host's previous result (:func:`judge`).

Sources as :mod:`rocmfleet.fleet.bench.bench`; units: milliseconds, tokens per second."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocmfleet.domain.benchshape import Thresholds as Thresholds  # the rollout reads a profile's thresholds here
from rocmfleet.fleet.bench.bench import REGRESSION_METRICS, BenchResult
from rocmfleet.fleet.bench.client import mismatch

# --- thresholds and verdicts -----------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """``passed`` unless a limit was broken; ``reasons`` says which (metric, value, limit).

    ``notes`` says what was not compared and why (no baseline, a baseline of another shape).
    """

    passed: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _f(value: float) -> str:
    return f"{value:.2f}"


def not_comparable(result: BenchResult, baseline: BenchResult) -> str | None:
    """Why ``baseline`` cannot be compared with ``result``, or ``None``."""
    for key in ("max_concurrency", "num_prompts", "model_id"):
        mine, theirs = getattr(result, key), getattr(baseline, key)
        if mine is not None and theirs is not None and mine != theirs:
            return f"baseline {baseline.source} has {key} {theirs!r}, this run {mine!r}: not compared"
    if why := mismatch(result.client, baseline.client):
        return f"baseline {baseline.source} was run by another client ({why}): not compared"
    return None


def judge(result: BenchResult, thresholds: Thresholds, baseline: BenchResult | None = None) -> Verdict:
    """Check ``result`` against ``thresholds`` and, when given, the host's previous ``baseline``.

    A result fails when: no request completed; more than ``max_failed`` requests failed (or
    the count is unknown); p99 TTFT or TPOT is over its limit or was not computed; output
    throughput is under its minimum; or one of :data:`REGRESSION_METRICS` is worse than the
    baseline's by more than ``regression_tolerance``. Each reason names the metric (its JSON
    key), the value and the limit. A baseline run by another known client (image or sampling,
    :func:`rocmfleet.fleet.bench.client.mismatch`) is not compared, and a note says why; one
    whose client is unknown (an older rocmfleet's result) is compared, and a note says that.
    """
    reasons: list[str] = []
    notes: list[str] = []
    if result.completed == 0:
        reasons.append("completed: 0 requests succeeded")
    if result.failed is None:
        reasons.append(f"failed: unknown (no `failed` or `num_prompts` in the result), limit {thresholds.max_failed}")
    elif result.failed > thresholds.max_failed:
        reasons.append(f"failed: {result.failed} requests > limit {thresholds.max_failed}")
    for key, limit in (("p99_ttft_ms", thresholds.ttft_p99_ms), ("p99_tpot_ms", thresholds.tpot_p99_ms)):
        if limit is None:
            continue
        value = result.value(key)
        if value is None:
            reasons.append(
                f"{key}: not in the result (run with --metric-percentiles including 99), limit {_f(limit)} ms"
            )
        elif value > limit:
            reasons.append(f"{key}: {_f(value)} ms > limit {_f(limit)} ms")
    limit = thresholds.min_output_throughput_tok_s
    if limit is not None and result.output_throughput < limit:
        reasons.append(f"output_throughput: {_f(result.output_throughput)} tok/s < limit {_f(limit)} tok/s")
    if baseline is None:
        notes.append("no baseline: regression not checked")
    elif why := not_comparable(result, baseline):
        notes.append(why)
    else:
        if not (result.client.known and baseline.client.known):
            which = "baseline's" if result.client.known else "this run's" if baseline.client.known else "both runs'"
            notes.append(
                f"{which} benchmark client unknown (a result without its client recorded): compared, "
                "but the two runs may have sampled differently"
            )
        tolerance = thresholds.regression_tolerance
        for key, unit, higher_is_better in REGRESSION_METRICS:
            value, base = result.value(key), baseline.value(key)
            if value is None or base is None or base <= 0:
                notes.append(f"{key}: not compared (missing or zero in this run or the baseline)")
                continue
            limit = base * (1 - tolerance) if higher_is_better else base * (1 + tolerance)
            worse = value < limit if higher_is_better else value > limit
            if worse:
                change = abs(value - base) / base
                reasons.append(
                    f"{key}: {_f(value)} {unit} is {change:.1%} {'below' if higher_is_better else 'above'} the "
                    f"baseline {_f(base)} {unit} (limit {_f(limit)} {unit} at tolerance {tolerance:.0%}; "
                    f"baseline {baseline.source})"
                )
    return Verdict(not reasons, reasons, notes)
