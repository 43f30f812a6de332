"""A host's gate after its switch: readiness, ``rocmfleet check --select gpu,vllm`` and the smoke benchmark.

:func:`gate_decision`: readiness (the deploy's own wait), the check's failures on the host, and
the smoke benchmark against the host's own result from just before the switch (regression
tolerance and failed-request limit of the profile). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rocmfleet.fleet.bench.bench import REGRESSION_METRICS, BenchResult, Thresholds
from rocmfleet.fleet.bench.verdicts import judge
from rocmfleet.fleet.rollout.state import CaseNumbers
from rocmfleet.fleet.rollout.verdict import GateOutcome as GateOutcome


def _metrics(result: BenchResult) -> dict[str, float]:
    values = {key: result.value(key) for key, _unit, _better in REGRESSION_METRICS}
    values["failed"] = float(result.failed) if result.failed is not None else math.nan
    return {k: v for k, v in values.items() if v is not None and not math.isnan(v)}


def bench_numbers(
    before: Mapping[str, BenchResult], after: Mapping[str, BenchResult], thresholds: Thresholds | None = None
) -> dict[str, CaseNumbers]:
    """Per case name the report's numbers (:data:`rocmfleet.fleet.bench.bench.REGRESSION_METRICS` and
    ``failed``), the benchmark client and sampling of each run, and, for a case with both runs,
    what the comparison noted about them (another client: not compared; a client unknown)."""
    given = thresholds or Thresholds()
    relative = Thresholds(max_failed=given.max_failed, regression_tolerance=given.regression_tolerance)
    numbers = {}
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name), after.get(name)
        notes = []
        if a is not None and b is not None:
            notes = [n for n in judge(a, relative, b).notes if "client" in n]
        numbers[name] = CaseNumbers(
            before=_metrics(b) if b else {},
            after=_metrics(a) if a else {},
            client_before=b.client.describe() if b else None,
            client_after=a.client.describe() if a else None,
            notes=notes,
        )
    return numbers


def gate_decision(
    ready_error: str | None,
    check_failures: Sequence[str],
    before: Mapping[str, BenchResult],
    after: Mapping[str, BenchResult],
    bench_errors: Sequence[str],
    thresholds: Thresholds,
) -> GateOutcome:
    """Decide a host's gate, the first failing gate in order readiness, check, benchmark.

    Args:
        ready_error: why the host did not become ready (the deploy's message), or ``None``.
        check_failures: ``rocmfleet check --select gpu,vllm`` lines that did not pass.
        before, after: benchmark results per case name, just before and just after the switch.
        bench_errors: cases of the run after the switch that gave no result (a failed request
            loop, a timeout), each one line.
        thresholds: the profile's (``bench.thresholds``): ``max_failed`` and
            ``regression_tolerance`` are applied; the absolute latency and throughput limits
            are ``rocmfleet bench``'s, not the gate's (a host already over one would fail every
            rollout).

    A case of ``after`` without its ``before`` (the run before failed) is judged on failed
    requests only. A case of ``before`` missing from ``after`` fails the gate.

    A benchmark gate failed by regressions alone (no failed request, no missing result) is
    ``regression_only``: the rollout runs the benchmark once more and fails the host only when
    that run regresses too (:meth:`rocmfleet.fleet.rollout.runner.Runner._host`). One smoke run on a host
    whose CPUs are briefly busy (a 2-core lab machine, a neighbour's job) can be twice as slow as
    its baseline; a version that really is slower is slower twice.
    """
    if ready_error:
        return GateOutcome(passed=False, gate="readiness", reasons=[ready_error])
    if check_failures:
        return GateOutcome(passed=False, gate="check", reasons=list(check_failures))
    relative = Thresholds(max_failed=thresholds.max_failed, regression_tolerance=thresholds.regression_tolerance)
    hard = list(bench_errors)
    for name in sorted(set(before) - set(after)):
        if not any(e.startswith(name) for e in bench_errors):
            hard.append(f"{name}: no result after the switch")
    regressions: list[str] = []
    for name, result in sorted(after.items()):
        alone = judge(result, relative).reasons  # without a baseline: failed and completed requests only
        hard += [f"{name}: {reason}" for reason in alone]
        regressions += [f"{name}: {r}" for r in judge(result, relative, before.get(name)).reasons if r not in alone]
    if hard or regressions:
        return GateOutcome(passed=False, gate="benchmark", reasons=hard + regressions, regression_only=not hard)
    return GateOutcome(passed=True)
