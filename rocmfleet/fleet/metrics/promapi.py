"""A window's counters from a Prometheus server (``metrics_prometheus_url``), through its HTTP API.

``GET <url>/api/v1/query?query=...&time=<end>`` (Prometheus docs, "HTTP API", "Instant
queries"): ``{"status": "success", "data": {"resultType": "vector", "result": [{"metric":
{...}, "value": [<time>, "<value>"]}]}}``; an error is ``{"status": "error", "errorType": ...,
"error": ...}`` with HTTP 4xx/5xx. The queries sum ``increase(...[<window>s])`` by the ``host``
label (the file_sd targets that ``rocmfleet metrics targets`` writes carry the inventory's host
name in it); histograms by ``(host, le)``, so each side's quantile is taken from its summed
buckets (:func:`rocmfleet.fleet.metrics.window.figures`), as ``histogram_quantile(q, sum by (le)
(increase(..._bucket[w])))`` would. ``increase`` handles counter resets itself (Prometheus docs,
"Functions", ``increase()``). Only the standard library's urllib: no dependency.
"""

from __future__ import annotations

import contextlib
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable

from rocmfleet.fleet.metrics.window import (
    HISTOGRAMS,
    INFERENCE_HANDLERS,
    INFERENCE_METHOD,
    REQUESTS,
    Counts,
    add_series,
)

#: Seconds one query may take.
QUERY_TIMEOUT_S = 30


class PrometheusError(RuntimeError):
    """Prometheus could not be asked or refused the query; the message names the URL and why."""


def query(url: str, promql: str, at: float, timeout_s: float = QUERY_TIMEOUT_S) -> list[tuple[dict[str, str], float]]:
    """One instant query at ``at`` (seconds since the epoch).

    Args:
        url: the server's base URL (``http://prometheus:9090``; a path prefix is kept).

    Returns:
        ``(labels, value)`` per series of the vector result.

    Raises:
        PrometheusError: unreachable, an HTTP error, not JSON, ``status`` not ``success``, or a
            result that is not a vector.
    """
    address = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
    try:
        with urllib.request.urlopen(address, timeout=timeout_s) as response:  # noqa: S310 - http(s) only (settings)
            body = response.read()
    except urllib.error.HTTPError as exc:
        said = exc.read().decode("utf-8", "replace")[:300]
        with contextlib.suppress(ValueError, AttributeError):  # Prometheus's JSON error, else the text
            said = json.loads(said).get("error", said)
        raise PrometheusError(f"{url}: HTTP {exc.code}: {said}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise PrometheusError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    try:
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise PrometheusError(f"{url}: {doc.get('errorType', 'error')}: {doc.get('error', body[:200])!r}")
        data = doc["data"]
        if data.get("resultType") != "vector":
            raise PrometheusError(f"{url}: expected a vector result, got {data.get('resultType')!r}")
        return [(dict(row["metric"]), float(row["value"][1])) for row in data["result"]]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise PrometheusError(f"{url}: not a Prometheus query answer: {type(exc).__name__}: {exc}") from None


def queries(window_s: int) -> dict[str, str]:
    """The PromQL queries of a window of ``window_s`` seconds, by the series name they count."""
    w = f"{int(window_s)}s"
    chosen = f'handler=~"{INFERENCE_HANDLERS}",method="{INFERENCE_METHOD}"'
    out = {REQUESTS: f"sum by (host, status) (increase({REQUESTS}{{{chosen}}}[{w}]))"}
    for name in HISTOGRAMS:
        out[f"{name}_bucket"] = f"sum by (host, le) (increase({name}_bucket[{w}]))"
    return out


def window_counts(
    url: str, hosts: Iterable[str], window_s: int, at: float, timeout_s: float = QUERY_TIMEOUT_S
) -> dict[str, Counts]:
    """Per host of ``hosts`` with a series, its :class:`~rocmfleet.fleet.metrics.window.Counts`
    over the ``window_s`` seconds that end at ``at``; a host with none is absent.

    Raises:
        PrometheusError: a query failed (:func:`query`).
    """
    wanted = set(hosts)
    out: dict[str, Counts] = {}
    for name, promql in queries(window_s).items():
        for labels, value in query(url, promql, at, timeout_s):
            host = labels.get("host")
            if host in wanted and math.isfinite(value):  # NaN: no sample to count; +Inf: nothing to count either
                add_series(out.setdefault(host, Counts()), name, labels, value)
    return out
