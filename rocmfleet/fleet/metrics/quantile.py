"""A quantile from a Prometheus histogram's cumulative buckets, as PromQL's ``histogram_quantile`` computes it. Pure.

Source: prometheus/prometheus ``promql/quantile.go``, ``bucketQuantile`` (with
``coalesceBuckets`` and ``ensureMonotonic``): sort the buckets by upper bound; the last must be
``+Inf`` (else NaN); buckets with the same bound are added together; counts are forced
monotonic; fewer than two buckets or no observation gives NaN. ``rank = q * observations``; the
first bucket whose count reaches the rank holds the quantile, interpolated linearly between its
lower bound (the previous bucket's upper bound, 0 for the first bucket) and its upper bound. A
rank in the ``+Inf`` bucket gives the upper bound of the second-highest bucket; a rank in a first
bucket whose upper bound is <= 0 gives that bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """The ``q``-quantile of a histogram, as Prometheus's ``histogram_quantile(q, ...)``.

    Args:
        q: the quantile, 0 to 1 (below 0: ``-inf``, above 1: ``+inf``, as Prometheus).
        buckets: ``(upper bound, cumulative count)`` pairs, the ``le`` label as a float
            (``float("inf")`` for ``+Inf``) and the bucket's count (over a window: its increase).

    Returns:
        The quantile in the buckets' unit (seconds for vLLM's), or NaN when there is none: no
        ``+Inf`` bucket, fewer than two buckets, or no observation.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for bound, count in buckets:  # coalesceBuckets: one bucket per upper bound
        merged[bound] = merged.get(bound, 0.0) + count
    bounds = sorted(merged)
    if not bounds or not math.isinf(bounds[-1]) or bounds[-1] < 0:
        return math.nan
    counts, highest = [], 0.0
    for bound in bounds:  # ensureMonotonic: a count below an earlier one is raised to it
        highest = max(highest, merged[bound])
        counts.append(highest)
    if len(bounds) < 2:
        return math.nan
    observations = counts[-1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = next((i for i in range(len(bounds) - 1) if counts[i] >= rank), len(bounds) - 1)  # sort.Search
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:  # q = 0 on an empty first bucket: Go's 0/0, NaN
        return math.nan
    return start + (end - start) * (rank / count)
