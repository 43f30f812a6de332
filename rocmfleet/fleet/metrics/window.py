"""A window of vLLM's serving figures: counters read at its start and end, differenced, and summed per side. Pure.

What is read from an instance's ``/metrics`` (:func:`snapshot`):

* requests and errors: ``http_requests_total{handler, method, status}``, which vLLM's API server
  gets from prometheus_fastapi_instrumentator (``vllm/entrypoints/serve/instrumentator/metrics.py``:
  ``Instrumentator(...).add()``, the package's ``metrics.default``; ``should_group_status_codes``
  defaults to true, so ``status`` is ``2xx``, ``4xx``, ``5xx``). Only ``/v1/`` handlers count
  (vLLM already leaves ``/health`` and ``/metrics`` out); an error is a ``5xx`` (``5..`` when
  a server does not group them): the server's failure, not the client's.
* TTFT: the ``vllm:time_to_first_token_seconds`` histogram; TPOT:
  ``vllm:request_time_per_output_token_seconds`` (vLLM 0.11 and later,
  ``vllm/v1/metrics/loggers.py``), or the older ``vllm:time_per_output_token_seconds``
  (:func:`tpot_metric` picks the one both sides have).

:func:`difference` subtracts a start from an end per series: a series absent at the start
counts from 0 (the first 5xx of an instance creates its series); a series that went down, or
disappeared, means the instance restarted in the window, whose figures are then not valid.
:func:`figures` sums the instances of one side and takes the quantiles of the summed buckets
(:func:`rocmfleet.fleet.metrics.quantile.bucket_quantile`), as
``histogram_quantile(q, sum by (le) (increase(..._bucket[w])))`` would.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocmfleet.fleet.metrics.figures import Figures as Figures
from rocmfleet.fleet.metrics.quantile import bucket_quantile
from rocmfleet.fleet.metrics.read import samples

REQUESTS = "http_requests_total"
TTFT = "vllm:time_to_first_token_seconds"
#: TPOT histograms, the preferred first (vLLM 0.11+, ``vllm/v1/metrics/loggers.py``), then the older name.
TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
HISTOGRAMS = (TTFT, *TPOT)
#: The figures compared, ``<histogram>_<quantile>`` -> (histogram kind, quantile).
LATENCIES: dict[str, tuple[str, float]] = {
    "ttft_p50": ("ttft", 0.5),
    "ttft_p99": ("ttft", 0.99),
    "tpot_p50": ("tpot", 0.5),
    "tpot_p99": ("tpot", 0.99),
}


#: The handlers whose requests count: the OpenAI API's inference routes (vLLM 0.32
#: ``vllm/entrypoints/openai/*/api_router.py``, ``vllm/entrypoints/pooling/*``), as a PromQL/Python
#: regular expression matched whole. ``GET /v1/models`` and other reads do not: a load balancer
#: polling them would meet ``soak.min_requests`` with no inference at all and dilute the error rate.
INFERENCE_HANDLERS = r"/v1/(chat/)?completions|/v1/embeddings|/v1/responses|/v1/rerank|/v1/score|/v1/audio/.*"
#: ... and only their ``POST`` requests (the instrumentator labels each request with its method).
INFERENCE_METHOD = "POST"


def is_api(handler: str, method: str = INFERENCE_METHOD) -> bool:
    """A request that counts: a ``POST`` to an inference handler (:data:`INFERENCE_HANDLERS`)."""
    return method == INFERENCE_METHOD and re.fullmatch(INFERENCE_HANDLERS, handler) is not None


def is_error(status: str) -> bool:
    """A server error: ``5xx`` (grouped, the instrumentator's default) or ``5..``."""
    return status.startswith("5")


def parse_le(text: str) -> float:
    """A bucket's ``le`` label as a float (``+Inf`` -> ``inf``).

    Raises:
        ValueError: not a number.
    """
    return float(text)  # float() reads "+Inf", "Inf" and "1e-3"


@dataclass
class Counts:
    """One instance's (or a side's) counters: requests and errors of ``/v1/`` handlers, and each
    histogram's cumulative bucket counts ``{name: {le: count}}`` (``le`` as a float)."""

    requests: float = 0.0
    errors: float = 0.0
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)

    def add(self, other: Counts) -> None:
        """Add ``other`` into this one (a side's sum)."""
        self.requests += other.requests
        self.errors += other.errors
        for name, buckets in other.buckets.items():
            mine = self.buckets.setdefault(name, {})
            for le, count in buckets.items():
                mine[le] = mine.get(le, 0.0) + count


#: One series: its name and its labels, sorted.
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def snapshot(text: str) -> dict[SeriesKey, float]:
    """The series of a ``/metrics`` page that a window needs: ``http_requests_total`` of ``/v1/``
    handlers and the buckets of :data:`HISTOGRAMS`.

    Raises:
        ValueError: the text is not the Prometheus text format.
    """
    wanted = {f"{name}_bucket" for name in HISTOGRAMS}
    out: dict[SeriesKey, float] = {}
    for sample in samples(text):
        if sample.name == REQUESTS:
            keep = is_api(sample.labels.get("handler", ""), sample.labels.get("method", ""))
        else:
            keep = sample.name in wanted
        if keep:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def difference(start: Mapping[SeriesKey, float], end: Mapping[SeriesKey, float]) -> Counts | str:
    """What happened between two :func:`snapshot` of one instance.

    Returns:
        The :class:`Counts` of the window, or why there are none: a counter that is not a finite
        number (the text format allows ``NaN`` and ``+Inf``; differenced, a ``NaN`` count passes
        every comparison unjudged), a counter went down, or a series present at the start is gone
        at the end (the instance restarted in the window).
    """
    odd = [key for key, value in (*start.items(), *end.items()) if not math.isfinite(value)]
    if odd:
        return f"a counter is not a finite number ({odd[0][0]}): its window cannot be counted"
    gone = [key for key in start if key not in end]
    down = [key for key, value in end.items() if value < start.get(key, 0.0)]
    if gone or down:
        name = (down or gone)[0][0]
        return f"restarted in the window ({name} went down): its counters start again from 0"
    counts = Counts()
    for (name, labels), value in end.items():
        increase = value - start.get((name, labels), 0.0)
        add_series(counts, name, dict(labels), increase)
    return counts


def add_series(counts: Counts, name: str, labels: Mapping[str, str], value: float) -> None:
    """Add one series' increase to ``counts`` (a ``/metrics`` series or a Prometheus query's row)."""
    if name == REQUESTS:
        # a Prometheus row is summed over handlers its query already chose (no handler label)
        if "handler" in labels and not is_api(labels["handler"], labels.get("method", INFERENCE_METHOD)):
            return
        counts.requests += value
        if is_error(labels.get("status", "")):
            counts.errors += value
    elif name.endswith("_bucket") and name[: -len("_bucket")] in HISTOGRAMS and "le" in labels:
        try:
            le = parse_le(labels["le"])
        except ValueError:
            return
        buckets = counts.buckets.setdefault(name[: -len("_bucket")], {})
        buckets[le] = buckets.get(le, 0.0) + value


def tpot_metric(*sides: Counts) -> str | None:
    """The TPOT histogram to compare: the first of :data:`TPOT` that every side has buckets of
    (the two measure different things: not mixed); ``None`` when there is none in common."""
    for name in TPOT:
        if all(name in side.buckets for side in sides):
            return name
    return None


def figures(
    hosts: Iterable[str], counted: Mapping[str, Counts], left_out: Mapping[str, str], tpot: str | None
) -> Figures:
    """One side's :class:`Figures`: ``counted`` (instance -> its window's :class:`Counts`) summed,
    the quantiles of the summed buckets; ``left_out``: instance -> why it is not counted;
    ``tpot``: the TPOT histogram to use (:func:`tpot_metric`)."""
    total = Counts()
    for counts in counted.values():
        total.add(counts)
    latency: dict[str, float] = {}
    names = {"ttft": TTFT, "tpot": tpot}
    for key, (kind, q) in LATENCIES.items():
        name = names[kind]
        if name is None or name not in total.buckets:
            continue
        value = bucket_quantile(q, total.buckets[name].items())
        if not math.isnan(value):
            latency[key] = value
    return Figures(
        hosts=list(hosts),
        instances=sorted(counted),
        left_out=[f"{name}: {why}" for name, why in sorted(left_out.items())],
        requests=total.requests,
        errors=total.errors,
        latency_s=latency,
        tpot_metric=tpot,
    )
