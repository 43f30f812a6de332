"""``rollout --soak``: the soaked hosts serve a while, then are judged against the hosts not yet switched.

When a batch's hosts have passed their gate (readiness, check, smoke benchmark) and are back in
service, the canary (or, with ``--soak-batches``, each batch) **soaks**: the rollout holds (no
other batch switches) for the soak's duration while the soaked hosts serve real traffic on the
new image. Then its figures over that window (``/v1/`` requests, HTTP 5xx among them, TTFT and
TPOT p50/p99: :mod:`rocmfleet.fleet.metrics.window`) are compared with the same figures of the
rollout's hosts not yet switched (still on the old image, serving) over the same window, with
the profile's ``soak`` thresholds (:class:`rocmfleet.domain.soak.SoakThresholds`):

* **inconclusive** (retried, then paused; never rolled back): no metrics, or fewer than
  ``min_requests`` requests on either side;
* **fail** (rolled back like any failed gate): an error rate above the others' by more than
  ``error_rate_margin``, or a TTFT/TPOT p50/p99 above the others' times ``latency_ratio`` and by
  more than ``latency_floor_ms``;
* **pass**.

With no host left on the old image (the last batch of ``--soak-batches``, a canary of every
host) there is nothing to compare with: the soak still runs, and judges the error rate against
0% (at most ``error_rate_margin``) and the latency not at all (the report says so). An
operator who soaks every batch wants the last one watched for errors too.

The figures come from each instance's ``/metrics`` read at the window's start and end
(``metrics-read.sh``: one command per host per read) and differenced, or, with
``metrics_prometheus_url``, from Prometheus's ``increase()`` over the window
(:mod:`rocmfleet.fleet.metrics.promapi`). :mod:`rocmfleet.fleet.rollout.soakmetrics` reads them; this module is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rocmfleet.domain.soak import SoakThresholds, format_duration
from rocmfleet.fleet.metrics.figures import Figures, count, rate
from rocmfleet.fleet.rollout.state import RolloutState, SoakResult
from rocmfleet.fleet.rollout.verdict import GateOutcome

#: The source named in a result when the instances' ``/metrics`` were read directly.
DIRECT = "direct"
#: How the figures' sides are named in messages and the report.
SOAKED = "the soaked hosts"
OTHERS = "the hosts not yet switched"

#: ``soak(hosts, compared, duration_s) -> result``: the soak of ``hosts`` against ``compared``
#: (the runner's view of :class:`rocmfleet.fleet.rollout.soakmetrics.MetricsSoak`; tests pass a stand-in).
SoakStep = Callable[[Sequence[str], Sequence[str], int], SoakResult]


def soak_points(state: RolloutState) -> dict[int, list[int]]:
    """Where a rollout soaks: ``{batch index after which a soak runs: the batches it covers}``.

    Without ``every_batch`` one soak covers the canary: the canary's batches (a canary larger
    than ``--max-unavailable`` allows is split, :func:`rocmfleet.fleet.rollout.batches.plan_batches`),
    judged together after the last of them; with ``every_batch`` every batch is soaked on its own.
    No soak planned, or no canary without ``every_batch``: ``{}``.
    """
    if state.soak is None or not state.batches:
        return {}
    if state.soak.every_batch:
        return {i: [i] for i in range(len(state.batches))}
    canaries = state.canary_batch_count()
    return {canaries - 1: list(range(canaries))} if canaries else {}


def soaked_batches(state: RolloutState) -> set[int]:
    """Batches whose hosts soak after their gate (``soaking``, not ``done``)."""
    return {i for covered in soak_points(state).values() for i in covered}


def ms(seconds: float) -> str:
    """Seconds as ``12.3 ms``."""
    return f"{seconds * 1000:.1f} ms"


#: Report labels of :data:`rocmfleet.fleet.metrics.window.LATENCIES`.
LATENCY_NAMES = {"ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "tpot_p50": "TPOT p50", "tpot_p99": "TPOT p99"}


def judge(soaked: Figures, others: Figures | None, thresholds: SoakThresholds) -> tuple[GateOutcome, list[str]]:
    """The soak's verdict from both sides' figures (:mod:`rocmfleet.fleet.rollout.soak`'s rules).

    Args:
        soaked: the soaked hosts' figures over the window.
        others: the hosts not yet switched over the same window; ``None`` when none is left
            (the error rate is judged against 0%, the latency not at all).
        thresholds: the profile's ``soak``.

    Returns:
        The outcome (gate ``soak``; reasons with both sides' numbers) and notes for the report
        (figures not compared, instances left out).
    """
    notes = [f"left out: {line}" for side in (soaked, others) if side for line in side.left_out]
    least = thresholds.min_requests
    thin = [
        f"{count(side.requests)} request(s) on {name} ({', '.join(side.hosts)}) in the window, fewer than "
        f"min_requests {least}"
        for side, name in ((soaked, SOAKED), (others, OTHERS))
        if side is not None and side.requests < least
    ]
    if thin:
        reasons = ["too little traffic to judge: " + "; ".join(thin)] + notes
        return GateOutcome(passed=False, gate="soak", reasons=reasons, inconclusive=True), notes
    reasons = []
    margin = thresholds.error_rate_margin
    mine_rate = soaked.error_rate or 0.0
    if others is None:
        if mine_rate > margin:
            reasons.append(
                f"error rate {rate(soaked, ' requests')} with no host on the old image left to compare "
                f"(allowed: at most {margin:.1%})"
            )
        notes.append("no host on the old image left: the error rate judged against 0%, the latency not compared")
    else:
        if mine_rate > (others.error_rate or 0.0) + margin:
            reasons.append(
                f"error rate {rate(soaked, ' requests')} against {rate(others)} on {OTHERS} "
                f"(allowed: +{margin * 100:.1f} points)"
            )
        floor = thresholds.latency_floor_ms / 1000
        for key, label in LATENCY_NAMES.items():
            mine, theirs = soaked.latency_s.get(key), others.latency_s.get(key)
            if mine is None or theirs is None:
                notes.append(f"{label} not compared: no observation on {SOAKED if mine is None else OTHERS}")
                continue
            allowed = max(theirs * thresholds.latency_ratio, theirs + floor)
            if mine > allowed:
                reasons.append(
                    f"{label} {ms(mine)} against {ms(theirs)} on {OTHERS} (allowed: {ms(allowed)}, "
                    f"x{thresholds.latency_ratio:g} or +{thresholds.latency_floor_ms:g} ms)"
                )
    if reasons:
        return GateOutcome(passed=False, gate="soak", reasons=reasons), notes
    return GateOutcome(passed=True, gate="soak"), notes


def outcome_of(result: SoakResult) -> GateOutcome:
    """A :class:`SoakResult` as the runner's gate outcome."""
    return GateOutcome(
        passed=result.verdict == "pass",
        gate="soak",
        reasons=list(result.reasons),
        inconclusive=result.verdict == "inconclusive",
    )


def announce(hosts: Sequence[str], compared: Sequence[str], duration_s: int, source: str | None) -> str:
    """The progress line at a soak's start."""
    against = f"{len(compared)} host(s) not yet switched ({', '.join(compared)})" if compared else (
        "no host left on the old image (error rate judged against 0%)"
    )  # fmt: skip
    where = f"Prometheus {source}" if source else "the instances' /metrics"
    return (
        f"soak: {', '.join(hosts)} in service on the new image for {format_duration(duration_s)}, "
        f"then compared with {against}; from {where}"
    )


def summary(result: SoakResult) -> str:
    """The progress line at a soak's end: its verdict and both sides' main figures."""
    said = f"soak of {', '.join(result.hosts)} ended: {result.verdict}"
    rates = f"error rate {rate(result.soaked)}"
    if result.others is not None:
        rates += f" against {rate(result.others)}"
    reasons = f": {'; '.join(result.reasons)}" if result.reasons else ""
    return f"{said} ({rates}){reasons}"
