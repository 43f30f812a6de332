"""Smoke benchmark groundwork: the ``vllm bench serve`` command, its saved JSON, thresholds, baselines.

Everything here is pure (no SSH, no container): the cases of a sweep, the argv that runs one
case inside a host's container, the parser of the JSON vLLM writes with ``--save-result``, the
verdict against a profile's thresholds and the host's previous result, and the directory layout
that keeps results for later runs and for the rollout.

Sources: ``../shared/reference/mi300x.md`` §5.1 (flags of vLLM 0.33.0 ``vllm/benchmarks/serve.py``)
and §5.2 (keys of the saved JSON, and which of them older versions lack); AMD's published sweep
as issue 6 lists it.

Units: latencies in milliseconds (vLLM's ``*_ms`` keys; its per-request lists are in seconds and
are converted), durations in seconds, throughputs per second.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from rocmfleet.domain.benchshape import Case
from rocmfleet.domain.benchshape import Thresholds as Thresholds  # the rollout reads a profile's thresholds here
from rocmfleet.fleet.bench.client import SAMPLING, ClientInfo, client_info

#: Latency metrics the command asks for (``--percentile-metrics``) and the percentiles of each.
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
METRIC_PERCENTILES = (50, 90, 99)
#: Metrics every result must carry: vLLM writes them for generative models by default (§5.2, 0.9.2 too).
REQUIRED_METRICS = ("ttft", "tpot")
#: Metrics compared with the baseline: name, key, unit, True when higher is better. Central values
#: (not p99) so that a short smoke run does not flap; p99 has absolute limits in :class:`Thresholds`.
REGRESSION_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("output_throughput", "tok/s", True),
    ("median_ttft_ms", "ms", False),
    ("median_tpot_ms", "ms", False),
)

_STAT_KEY = re.compile(r"^(mean|median|std)_(.+)_ms$")
_PERCENTILE_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_(.+)_ms$")


# --- cases and the command -------------------------------------------------------------------


def bench_command(
    case: Case,
    port: int,
    model: str,
    result_path: str | PurePath,
    *,
    served_model_name: str | None = None,
    tokenizer: str | None = None,
    host: str = "127.0.0.1",
    save_detailed: bool = False,
    metadata: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``vllm bench serve`` argv of one case against the server on ``host:port``.

    Flags as vLLM 0.33.0 names them (reference §5.1); all exist in 0.9.2 as well.
    ``--backend vllm`` is valid in both (0.33 defaults to ``openai``, 0.9.2 to ``vllm``; both
    post to ``/v1/completions``). ``model`` is what the tokenizer loads (the profile's model, a
    path inside the container); ``served_model_name`` is the name requests use (vLLM's
    ``--served-model-name``, needed when the server serves the model under another name).
    ``tokenizer``: where the tokenizer loads from when not ``model``: the staged snapshot of a pinned
    hub model (:func:`rocmfleet.domain.hfmodel.container_snapshot`), read offline.
    ``result_path`` is where the JSON lands, as the command sees it (inside the container).
    ``save_detailed`` keeps per-request TTFTs and ITLs (large: one float per output token).
    ``metadata`` becomes extra top-level keys of the JSON (``--metadata KEY=VALUE``).

    Sampling is pinned in every run (:data:`rocmfleet.fleet.bench.client.SAMPLING`:
    ``--temperature 0 --seed 0``): since vllm-project/vllm PR #32723 (2026-01-20) the client
    sends no temperature unless told, so two clients on either side of it would sample
    differently (:mod:`rocmfleet.fleet.bench.client`).
    """
    if case.num_prompts < 1:
        raise ValueError(f"case {case.name}: num_prompts must be >= 1 (cases from sweep_for have it)")
    path = PurePosixPath(result_path)
    argv = [
        "vllm", "bench", "serve",
        "--backend", "vllm",
        "--host", host,
        "--port", str(port),
        "--model", model,
    ]  # fmt: skip
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    argv += [
        "--dataset-name", "random",
        "--random-input-len", str(case.isl),
        "--random-output-len", str(case.osl),
        "--max-concurrency", str(case.concurrency),
        "--num-prompts", str(case.num_prompts),
        "--ignore-eos",
        *SAMPLING,
        "--percentile-metrics", ",".join(PERCENTILE_METRICS),
        "--metric-percentiles", ",".join(map(str, METRIC_PERCENTILES)),
        "--save-result",
        "--result-dir", str(path.parent),
        "--result-filename", path.name,
    ]  # fmt: skip
    if save_detailed:
        argv.append("--save-detailed")
    if metadata:
        bad = [k for k in metadata if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise ValueError(f"metadata keys must be identifiers: {bad}")
        argv += ["--metadata", *(f"{k}={v}" for k, v in metadata.items())]  # nargs="*": kept last
    return argv


# --- the saved JSON --------------------------------------------------------------------------


class BenchParseError(ValueError):
    """A result that is not vLLM's ``--save-result`` JSON as rocmfleet knows it.

    ``problems`` holds ``(key, expected, got)`` for each, ``got`` as ``repr`` or ``"missing"``;
    the message names the source and every problem.
    """

    def __init__(self, source: str, problems: list[tuple[str, str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"  {key}: expected {expected}, got {got}" for key, expected, got in problems]
        super().__init__(f"{source}: cannot read it as a `vllm bench serve --save-result` result:\n" + "\n".join(lines))


@dataclass(frozen=True)
class Latency:
    """One latency metric of a run, in ms: vLLM's ``mean_/median_/std_/p{P}_<metric>_ms`` keys."""

    mean_ms: float
    median_ms: float
    std_ms: float | None = None
    percentiles_ms: dict[float, float] = field(default_factory=dict)

    def p(self, percentile: float) -> float | None:
        """The ``percentile``-th percentile in ms, or ``None`` when the run did not compute it."""
        return self.percentiles_ms.get(float(percentile))

    @property
    def p99_ms(self) -> float | None:
        return self.p(99)


@dataclass(frozen=True)
class BenchResult:
    """One ``vllm bench serve`` run as saved with ``--save-result`` (reference §5.2).

    ``samples_ms`` holds per-request values of successful requests, when the JSON has them:
    ``e2el`` from ``latencies`` (0.33 keeps it), ``ttft`` and ``tpot`` only with
    ``--save-detailed`` (``ttfts``, ``output_lens``).
    """

    source: str
    duration_s: float
    completed: int
    failed: int | None  # None: neither ``failed`` nor ``num_prompts`` in the JSON
    request_throughput: float  # requests/s
    output_throughput: float  # output tokens/s
    total_token_throughput: float  # input + output tokens/s
    metrics: dict[str, Latency]  # "ttft", "tpot", "itl", "e2el", ... as the run selected
    date: str | None = None  # vLLM's YYYYMMDD-HHMMSS, local time of the client
    backend: str | None = None
    model_id: str | None = None
    num_prompts: int | None = None
    request_rate: float | None = None  # requests/s; inf: all sent at once
    max_concurrency: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None
    samples_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)
    client: ClientInfo = field(default_factory=ClientInfo)  # which vllm bench serve ran it, its sampling

    @property
    def ttft(self) -> Latency:
        return self.metrics["ttft"]

    @property
    def tpot(self) -> Latency:
        return self.metrics["tpot"]

    @property
    def itl(self) -> Latency | None:
        return self.metrics.get("itl")

    @property
    def e2el(self) -> Latency | None:
        return self.metrics.get("e2el")

    def value(self, key: str) -> float | None:
        """A number by its JSON key: ``output_throughput``, ``median_ttft_ms``, ``p99_tpot_ms``..."""
        if key in ("output_throughput", "request_throughput", "total_token_throughput"):
            number: float | None = getattr(self, key)
            return number
        if m := _STAT_KEY.fullmatch(key):
            latency = self.metrics.get(m[2])
            return None if latency is None else getattr(latency, f"{m[1]}_ms")
        if m := _PERCENTILE_KEY.fullmatch(key):
            latency = self.metrics.get(m[2])
            return None if latency is None else latency.p(float(m[1]))
        raise KeyError(key)


class _Reader:
    """Reads typed values from one JSON object, collecting every problem instead of stopping."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.problems: list[tuple[str, str, str]] = []

    def bad(self, key: str, expected: str, value: Any = None, missing: bool = False) -> None:
        got = "missing" if missing else _show(value)
        self.problems.append((key, expected, got))

    def number(self, key: str, expected: str, required: bool = True) -> float | None:
        if key not in self.data or (not required and self.data[key] is None):
            if required:
                self.bad(key, expected, missing=True)
            return None
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            self.bad(key, expected, value)
            return None
        return float(value)

    def integer(self, key: str, expected: str, required: bool = True) -> int | None:
        if key not in self.data or (not required and self.data[key] is None):
            if required:
                self.bad(key, expected, missing=True)
            return None
        value = self.data[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.bad(key, expected, value)
            return None
        return value

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            self.bad(key, "a string or null", value)
            return None
        return value

    def numbers(self, key: str) -> list[float] | None:
        """An optional per-request list of numbers (``None`` entries, vLLM's failed requests: 0)."""
        value = self.data.get(key)
        if value is None:
            return None
        ok = isinstance(value, list) and all(
            v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)) for v in value
        )
        if not ok:
            self.bad(key, "a list of numbers (one per request)", value)
            return None
        return [0.0 if v is None else float(v) for v in value]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _request_rate(reader: _Reader) -> float | None:
    value = reader.data.get("request_rate")
    if value is None:
        return None
    if value == "inf" or (isinstance(value, float) and value == math.inf):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or math.isnan(value):
        reader.bad("request_rate", 'a positive number or the string "inf"', value)
        return None
    return float(value)


def _latencies(reader: _Reader) -> dict[str, Latency]:
    data = reader.data
    names = {m[2] for key in data if (m := _STAT_KEY.fullmatch(key))} | {
        m[2] for key in data if (m := _PERCENTILE_KEY.fullmatch(key))
    }
    metrics = {}
    for name in sorted(names | set(REQUIRED_METRICS)):
        what = f"{name.upper()} in ms (a finite number >= 0)"
        mean = reader.number(f"mean_{name}_ms", f"the mean {what}")
        median = reader.number(f"median_{name}_ms", f"the median {what}")
        std = reader.number(f"std_{name}_ms", f"the standard deviation of {what}", required=False)
        percentiles = {}
        for key in data:
            m = _PERCENTILE_KEY.fullmatch(key)
            if m and m[2] == name:
                value = reader.number(key, f"the {m[1]}th percentile of {what}")
                if value is not None:
                    percentiles[float(m[1])] = value
        if mean is not None and median is not None:
            metrics[name] = Latency(mean, median, std, dict(sorted(percentiles.items())))
    return metrics


def _samples(reader: _Reader) -> dict[str, tuple[float, ...]]:
    """Per-request values in ms of the successful requests (vLLM's lists are in seconds).

    Success: an empty ``errors`` entry when the list is there (``--save-detailed``), else a
    latency above 0 (vLLM leaves a failed request's latency and TTFT at 0.0). TPOT is vLLM's:
    ``(latency - ttft) / (output_len - 1)`` for requests with more than one output token.
    """
    lists = {key: reader.numbers(key) for key in ("latencies", "ttfts", "output_lens")}
    errors = reader.data.get("errors")
    present = {key: v for key, v in lists.items() if v is not None}
    if errors is not None:
        if not isinstance(errors, list) or not all(e is None or isinstance(e, str) for e in errors):
            reader.bad("errors", "a list of strings (one per request)", errors)
            return {}
        present["errors"] = errors
    if len({len(v) for v in present.values()}) > 1:
        sizes = ", ".join(f"{k} {len(v)}" for k, v in present.items())
        reader.bad(" / ".join(present), "per-request lists of one length", sizes)
        return {}
    latencies, ttfts, output_lens = lists["latencies"], lists["ttfts"], lists["output_lens"]
    n = len(next(iter(present.values()), []))
    if errors is not None:
        ok = [not e for e in errors]
    else:
        ref = latencies if latencies is not None else ttfts
        ok = [v > 0 for v in ref] if ref is not None else []
    samples: dict[str, tuple[float, ...]] = {}
    if latencies is not None:
        samples["e2el"] = tuple(latencies[i] * 1000 for i in range(n) if ok[i])
    if ttfts is not None:
        samples["ttft"] = tuple(ttfts[i] * 1000 for i in range(n) if ok[i])
    if latencies is not None and ttfts is not None and output_lens is not None:
        samples["tpot"] = tuple(
            (latencies[i] - ttfts[i]) / (output_lens[i] - 1) * 1000 for i in range(n) if ok[i] and output_lens[i] > 1
        )
    return {k: v for k, v in samples.items() if v}


def parse_result(data: str | bytes | Mapping[str, Any], source: str) -> BenchResult:
    """Read one result: the file's text, or the object already decoded.

    Keys per reference §5.2. Required: ``duration``, ``completed``, the three throughputs and
    ``mean_/median_`` of TTFT and TPOT (in every version's output); the rest is optional
    (0.9.2 has no ``backend``, ``failed`` or ``max_*``). A missing ``failed`` is
    ``num_prompts - completed``.

    Args:
        data: JSON text (one object), or a mapping.
        source: what to name in errors, e.g. the file's path.

    Raises:
        BenchParseError: not JSON, several objects (use :func:`parse_results`), or missing or
            mistyped keys; it lists every problem.
    """
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":
                raise BenchParseError(
                    source,
                    [("(file)", "one JSON object (several, from --append-result: use parse_results)", exc.msg)],
                ) from None
            got = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            raise BenchParseError(source, [("(file)", "JSON text", got)]) from None
        except UnicodeDecodeError as exc:
            raise BenchParseError(source, [("(file)", "UTF-8 JSON text", str(exc))]) from None
    if not isinstance(data, Mapping):
        raise BenchParseError(source, [("(top level)", "a JSON object", type(data).__name__)])
    r = _Reader(data)
    duration = r.number("duration", "the benchmark duration in seconds (a number >= 0)")
    completed = r.integer("completed", "the count of successful requests (an integer >= 0)")
    num_prompts = r.integer("num_prompts", "the count of prompts (an integer >= 0)", required=False)
    failed = r.integer("failed", "the count of failed requests (an integer >= 0)", required=False)
    if "failed" not in data and num_prompts is not None and completed is not None:
        if num_prompts < completed:
            r.bad("failed", f"the key, or num_prompts ({num_prompts}) >= completed ({completed})", missing=True)
        else:
            failed = num_prompts - completed
    request_tp = r.number("request_throughput", "requests/s (a number >= 0)")
    output_tp = r.number("output_throughput", "output tokens/s (a number >= 0)")
    total_tp = r.number("total_token_throughput", "input + output tokens/s (a number >= 0)")
    optional: dict[str, Any] = dict(  # BenchResult's optional fields, read before the problems are counted
        date=r.text("date"),
        backend=r.text("backend") or r.text("endpoint_type"),
        model_id=r.text("model_id"),
        num_prompts=num_prompts,
        request_rate=_request_rate(r),
        max_concurrency=r.integer("max_concurrency", "an integer >= 1 or null", required=False),
        total_input_tokens=r.integer("total_input_tokens", "an integer >= 0", required=False),
        total_output_tokens=r.integer("total_output_tokens", "an integer >= 0", required=False),
        max_output_tokens_per_s=r.number("max_output_tokens_per_s", "a number >= 0", required=False),
        max_concurrent_requests=r.integer("max_concurrent_requests", "an integer >= 0", required=False),
        samples_ms=_samples(r),
        client=client_info(data),
    )
    metrics = _latencies(r)
    if r.problems:
        raise BenchParseError(source, r.problems)
    assert duration is not None and completed is not None  # else a problem was recorded
    assert request_tp is not None and output_tp is not None and total_tp is not None
    return BenchResult(source, duration, completed, failed, request_tp, output_tp, total_tp, metrics, **optional)


def parse_results(text: str, source: str) -> list[BenchResult]:
    """Every result of a file written with ``--append-result`` (one JSON object per line)."""
    return [
        parse_result(line, f"{source}:{number}")
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


def load_result(path: str | Path) -> BenchResult:
    """:func:`parse_result` of a file; an unreadable file is a :class:`BenchParseError` too."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise BenchParseError(str(path), [("(file)", "a readable file", exc.strerror or str(exc))]) from None
    return parse_result(text, str(path))
