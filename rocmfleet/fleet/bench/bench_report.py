"""Reports of a smoke benchmark run: a Markdown summary and PNG plots, saved beside the JSON.

A run is ``{target: [(case, result, verdict), ...]}``, a target being a host (or
``host/instance``, as :func:`rocmfleet.fleet.bench.runs.load_run` names it). Latencies are in ms,
throughputs in tokens/s.

Plots use matplotlib's object API on the Agg canvas (``matplotlib.figure.Figure``): no pyplot,
no display, no global state, so they work on a headless control host and in threads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rocmfleet.domain.benchshape import Case
from rocmfleet.fleet.bench.bench import BenchResult, Latency
from rocmfleet.fleet.bench.verdicts import Verdict

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.container import BarContainer
    from matplotlib.figure import Figure

#: One host's (or instance's) results, in sweep order.
Results = Sequence[tuple[Case, BenchResult, Verdict]]
Run = Mapping[str, Results]

PASS_COLOR, FAIL_COLOR = "#2b7bba", "#d62728"


def _cell(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _mean_p99(latency: Latency | None) -> str:
    if latency is None:
        return "–"
    return f"{_cell(latency.mean_ms)} / {_cell(latency.p99_ms)}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_summary(
    run: Run, title: str = "Smoke benchmark", errors: Mapping[str, Sequence[str]] | None = None
) -> str:
    """The run as Markdown: an overview, then per target a table of its cases and why any failed.

    Columns: output and total throughput (tok/s), requests completed/failed, and mean / p99 in
    ms of TTFT, TPOT, ITL and end-to-end latency ("–" where the run did not record it).
    ``errors``: per target, what kept cases from giving a result (an unreachable host, a
    benchmark that exited non-zero); such a target fails, and may have no results at all.
    Each target names the benchmark client that ran its cases and its sampling
    (:meth:`rocmfleet.fleet.bench.client.ClientInfo.describe`).
    """
    errors = {t: list(e) for t, e in (errors or {}).items() if e}
    run = {**run, **{t: [] for t in errors if t not in run}}
    passed_targets = [t for t, rows in run.items() if rows and all(v.passed for _, _, v in rows) and t not in errors]
    lines = [f"# {title}", ""]
    if not run:
        return "\n".join([*lines, "No results.", ""])
    lines += [
        f"**{len(passed_targets)} of {len(run)} instances passed.**",
        "",
        "| Host | Result | Cases passed | Best output tok/s |",
        "|---|---|---|---:|",
    ]
    for target, rows in run.items():
        ok = sum(v.passed for _, _, v in rows)
        best = max((r.output_throughput for _, r, _ in rows), default=None)
        verdict = "PASS" if target in passed_targets else "**FAIL**"
        lines.append(f"| {_escape(target)} | {verdict} | {ok}/{len(rows)} | {_cell(best)} |")
    for target, rows in run.items():
        verdict = "PASS" if target in passed_targets else "FAIL"
        lines += ["", f"## {target}: {verdict}", ""]
        clients = sorted({r.client.describe() for _, r, _ in rows})
        if clients:
            lines += [f"Benchmark client: {'; '.join(clients)}.", ""]
        if not rows:
            lines.append("No results.")
        else:
            lines += [
                "| Case (ISL x OSL, concurrency) | Result | Output tok/s | Total tok/s | Completed / failed "
                "| TTFT mean / p99 ms | TPOT mean / p99 ms | ITL mean / p99 ms | E2E mean / p99 ms |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
        for case, result, v in rows:
            failed = "?" if result.failed is None else str(result.failed)
            lines.append(
                f"| {case.isl} x {case.osl}, c{case.concurrency} | {'PASS' if v.passed else '**FAIL**'} "
                f"| {_cell(result.output_throughput)} | {_cell(result.total_token_throughput)} "
                f"| {result.completed} / {failed} | {_mean_p99(result.ttft)} | {_mean_p99(result.tpot)} "
                f"| {_mean_p99(result.itl)} | {_mean_p99(result.e2el)} |"
            )
        why = [f"{case.name}: {reason}" for case, _, v in rows for reason in v.reasons]
        why += errors.get(target, [])
        notes = sorted({note for _, _, v in rows for note in v.notes})
        if why:
            lines += ["", "Why it failed:", ""]
            lines += [f"- {reason}" for reason in why]
        if notes:
            lines += ["", "Notes:", ""]
            lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


# --- plots -----------------------------------------------------------------------------------


def _cases(run: Run) -> list[Case]:
    """Every case of the run, in the order first seen (the sweep's)."""
    seen: dict[tuple[int, int, int], Case] = {}
    for rows in run.values():
        for case, _, _ in rows:
            seen.setdefault((case.isl, case.osl, case.concurrency), case)
    return list(seen.values())


def _lookup(run: Run, target: str, case: Case) -> tuple[BenchResult, Verdict] | None:
    for c, result, verdict in run[target]:
        if (c.isl, c.osl, c.concurrency) == (case.isl, case.osl, case.concurrency):
            return result, verdict
    return None


#: Panels per row; more cases wrap onto further rows.
COLUMNS = 3


def _panels(n_panels: int, panel_height: float, title: str, sharey: bool = True) -> tuple[Figure, list[Axes]]:
    """A figure of ``n_panels`` panels (inches high each), :data:`COLUMNS` per row."""
    from matplotlib.figure import Figure

    columns = min(n_panels, COLUMNS)
    rows = math.ceil(n_panels / columns)
    fig = Figure(figsize=(max(6.5, 4.6 * columns), rows * panel_height + 0.8), layout="constrained")
    grid = fig.subplots(rows, columns, squeeze=False, sharey=sharey)
    fig.suptitle(title, fontsize=13)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _host_panel_height(targets: list[str]) -> float:
    return max(2.4, 0.35 * len(targets) + 1.4)


def _case_title(case: Case) -> str:
    return f"ISL {case.isl} / OSL {case.osl}, concurrency {case.concurrency}"


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def _host_axis(ax: Axes, targets: list[str], xlabel: str) -> None:
    """Hosts top to bottom in run order; explicit limits, as inverting a shared axis toggles it."""
    ax.set_yticks(range(len(targets)), targets)
    ax.set_ylim(len(targets) - 0.5, -0.5)
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


def _labelled_bars(
    ax: Axes, y: list[float], values: list[float], height: float, color: str | list[str], label: str | None = None
) -> BarContainer:
    widths = [0 if math.isnan(v) else v for v in values]
    if label is None:
        bars = ax.barh(y, widths, height, color=color)
    else:
        bars = ax.barh(y, widths, height, color=color, label=label)
    ax.bar_label(bars, labels=["n/a" if math.isnan(v) else f"{v:,.1f}" for v in values], padding=3, fontsize=8)
    return bars


def _throughput_plot(run: Run, targets: list[str], cases: list[Case], path: Path) -> None:
    title = "Output token throughput per host (red: the case failed)"
    fig, axes = _panels(len(cases), _host_panel_height(targets), title)
    for ax, case in zip(axes, cases, strict=True):
        found = [_lookup(run, t, case) for t in targets]
        values = [math.nan if f is None else f[0].output_throughput for f in found]
        colors = [PASS_COLOR if f is not None and f[1].passed else FAIL_COLOR for f in found]
        _labelled_bars(ax, list(range(len(targets))), values, 0.6, color=colors)
        _host_axis(ax, targets, "output tokens/s")
        ax.margins(x=0.2)
        ax.set_title(_case_title(case), fontsize=10)
    fig.savefig(path, dpi=110)


def _latency_plot(run: Run, targets: list[str], cases: list[Case], metric: str, label: str, path: Path) -> None:
    """Per case: box plots of per-request values when every host has them (``--save-detailed``),
    else paired bars of p50 (median) and p99 from vLLM's summary keys."""
    detailed = all(
        (hit := _lookup(run, t, case)) is not None and hit[0].samples_ms.get(metric) for t in targets for case in cases
    )
    how = "box: p25-p75, line: median, whiskers: p1-p99" if detailed else "p50 and p99"
    fig, axes = _panels(len(cases), _host_panel_height(targets), f"{label} per host, ms ({how})")
    y = list(range(len(targets)))
    for ax, case in zip(axes, cases, strict=True):
        found = [_lookup(run, t, case) for t in targets]
        if detailed:
            samples = [f[0].samples_ms[metric] for f in found if f is not None]
            ax.boxplot(samples, positions=y, orientation="horizontal", whis=(1, 99), showfliers=False, widths=0.6)
        else:
            latencies = [None if f is None else f[0].metrics.get(metric) for f in found]
            p50 = [math.nan if lat is None else lat.median_ms for lat in latencies]
            p99 = [math.nan if lat is None else _nan(lat.p99_ms) for lat in latencies]
            _labelled_bars(ax, [i - 0.19 for i in y], p50, 0.38, label="p50", color="#9ecae1")
            _labelled_bars(ax, [i + 0.19 for i in y], p99, 0.38, label="p99", color="#08519c")
            ax.margins(x=0.2)
        _host_axis(ax, targets, "ms")
        ax.set_title(_case_title(case), fontsize=10)
    if not detailed:
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8)
    fig.savefig(path, dpi=110)


def _sweeps(run: Run) -> dict[tuple[int, int], dict[str, list[tuple[int, float]]]]:
    """(isl, osl) -> target -> [(concurrency, output tok/s)], for pairs run at 2+ concurrencies."""
    sweeps: dict[tuple[int, int], dict[str, list[tuple[int, float]]]] = {}
    for target, rows in run.items():
        for case, result, _ in rows:
            sweeps.setdefault((case.isl, case.osl), {}).setdefault(target, []).append(
                (case.concurrency, result.output_throughput)
            )
    return {
        pair: {t: sorted(points) for t, points in by_target.items()}
        for pair, by_target in sweeps.items()
        if any(len({c for c, _ in points}) > 1 for points in by_target.values())
    }


def _sweep_plot(sweeps: dict[tuple[int, int], dict[str, list[tuple[int, float]]]], path: Path) -> None:
    n_targets = len({t for by_target in sweeps.values() for t in by_target})
    fig, axes = _panels(len(sweeps), 3.6, "Output token throughput against concurrency", sharey=False)
    for ax, ((isl, osl), by_target) in zip(axes, sweeps.items(), strict=True):
        for target, points in by_target.items():
            ax.plot([c for c, _ in points], [v for _, v in points], marker="o", label=target)
        ax.set_xscale("log", base=2)
        concurrencies = sorted({c for points in by_target.values() for c, _ in points})
        ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
        ax.set_title(f"ISL {isl} / OSL {osl}", fontsize=10)
        ax.set_xlabel("max concurrency")
        ax.set_ylabel("output tokens/s")
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=min(n_targets, 6), fontsize=8)
    fig.savefig(path, dpi=110)


def plots(run: Run, out_dir: str | Path) -> list[Path]:
    """Write the run's PNGs into ``out_dir`` (created); return their paths.

    ``throughput.png``: output tokens/s per host, one panel per case, failed cases in red.
    ``ttft.png``, ``tpot.png``: per host and case, distributions when the results carry
    per-request values (``--save-detailed``), else p50 and p99 bars.
    ``throughput-vs-concurrency.png``: only when an ISL/OSL pair ran at several concurrencies.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = [t for t, rows in run.items() if rows]
    cases = _cases(run)
    if not targets:
        return []
    written = [out / "throughput.png", out / "ttft.png", out / "tpot.png"]
    _throughput_plot(run, targets, cases, written[0])
    _latency_plot(run, targets, cases, "ttft", "Time to first token", written[1])
    _latency_plot(run, targets, cases, "tpot", "Time per output token", written[2])
    if sweeps := _sweeps(run):
        written.append(out / "throughput-vs-concurrency.png")
        _sweep_plot(sweeps, written[-1])
    return written


# --- console ---------------------------------------------------------------------------------


def case_line(
    label: str,
    case: Case,
    result: BenchResult | None = None,
    verdict: Verdict | None = None,
    baseline: str | None = None,
    error: str | None = None,
) -> str:
    """One console line per host, instance and case: ``LABEL CASE: PASS|FAIL`` and why.

    A pass shows output throughput (tok/s) and p99 TTFT and TPOT (ms), and ``baseline`` (the
    run compared with, or ``None``: none). A failure shows the verdict's reasons, or ``error``
    when the case gave no result (unreachable host, benchmark exited non-zero).
    """
    head = f"{label} {case.name}:"
    if error is not None or result is None or verdict is None:
        return f"{head} FAIL {error or 'no result'}"
    if not verdict.passed:
        return f"{head} FAIL {'; '.join(verdict.reasons)}"
    numbers = (
        f"{_cell(result.output_throughput)} output tok/s, p99 TTFT {_cell(result.ttft.p99_ms)} ms, "
        f"p99 TPOT {_cell(result.tpot.p99_ms)} ms"
    )
    return f"{head} PASS {numbers}; " + (f"baseline {baseline}" if baseline else "no baseline")
