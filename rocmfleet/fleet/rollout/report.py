"""What a rollout says when it ends: its Markdown report, the hosts left drained, ``rocmfleet status --json``. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from rocmfleet.domain.soak import format_duration
from rocmfleet.fleet.bench.bench import REGRESSION_METRICS
from rocmfleet.fleet.metrics.figures import Figures, count
from rocmfleet.fleet.rollout.instancestatus import InstanceStatus
from rocmfleet.fleet.rollout.state import FAILED, TIMED, CaseNumbers, ImageRef, RolloutState, SoakResult


def _short(image: ImageRef | None) -> str:
    if image is None:
        return "-"
    return f"{image.tag}@{image.digest[7:19]}"


def _delta(numbers: CaseNumbers) -> str:
    parts = []
    for key, _unit, _better in REGRESSION_METRICS:
        b, a = numbers.before.get(key), numbers.after.get(key)
        if a is None:
            continue
        if b:
            parts.append(f"{key} {a:.2f} ({(a - b) / b:+.1%})")
        else:
            parts.append(f"{key} {a:.2f}")
    return "; ".join(parts) or "-"


def plan_words(state: RolloutState) -> str:
    """The canary and the bound in words: ``canary: group canary; at most 4 of 16 replicas of A, ...``
    (a state file without services: ``canary 1, at most 2 host(s) out of service``)."""
    if not state.services:
        return f"canary {state.canary}, at most {state.max_unavailable} host(s) out of service"
    canary = f"group {state.canary_group}" if state.canary_group else f"{state.canary} replica(s) of each service"
    bounds = ", ".join(f"{b.max_unavailable} of {b.replicas} of {s}" for s, b in state.services.items())
    return f"canary: {canary}; out of service at once, at most: {bounds}"


def markdown_report(state: RolloutState, messages: Sequence[str] = ()) -> str:
    """The end-of-run report: what happened, then one row per host (before/after digest, seconds
    per part of :data:`TIMED`, step reached, benchmark deltas against the run before the switch)."""
    what = f"to `{state.target.reference}`" if state.target else "(rolling restart, same image)"
    lines = [
        f"# {state.kind.capitalize()} {state.id} of {state.inventory} {what}",
        "",
        f"Status: **{state.status}**; {plan_words(state)}; {len(state.batches)} batch(es). "
        f"Started {state.started}, last update {state.updated or '-'}.",
    ]
    if state.failure:
        lines += ["", f"Failure: {state.failure}"]
    left = [name for name, h in state.hosts.items() if h.step == FAILED]
    if left:
        lines += ["", left_drained(state, left)]
    if state.status == "paused":
        lines += ["", paused_note(state)]
    lines += [""] + [f"- {m}" for m in messages] + ([""] if messages else [])
    head = ["host", "batch", "before", "after", "step", *(f"{t} s" for t in TIMED), "benchmark (after vs before)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, host in state.hosts.items():
        times = [f"{host.times[t]:.1f}" if t in host.times else "-" for t in TIMED]
        bench = "<br>".join(f"{case}: {_delta(n)}" for case, n in host.bench.items()) or "-"
        row = [name, "canary" if host.batch < state.canary_batch_count() else str(host.batch)]
        row += [_short(host.before), _short(host.after), host.step, *times, bench]
        lines.append("| " + " | ".join(row) + " |")
    if state.soak is not None:
        lines += ["", *soak_section(state)]
    clients = benchmark_clients(state)
    if clients:
        lines += ["", "## Benchmark client", ""] + clients
    errors = [(name, h.error) for name, h in state.hosts.items() if h.error]
    if errors:
        lines += ["", "## Problems", ""] + [f"- **{name}**: {error}" for name, error in errors]
    return "\n".join(lines) + "\n"


#: The soak table's figure columns (:data:`rocmfleet.fleet.metrics.window.LATENCIES` keys), in order.
SOAK_LATENCIES = (("ttft_p50", "TTFT p50 ms"), ("ttft_p99", "TTFT p99 ms"), ("tpot_p50", "TPOT p50 ms"),
                  ("tpot_p99", "TPOT p99 ms"))  # fmt: skip


def _soak_row(side: str, figures: Figures) -> str:
    rate = figures.error_rate
    cells = [side, ", ".join(figures.hosts) or "-", count(figures.requests), count(figures.errors)]
    cells.append("-" if rate is None else f"{rate:.1%}")
    cells += [f"{figures.latency_s[k] * 1000:.1f}" if k in figures.latency_s else "-" for k, _label in SOAK_LATENCIES]
    return "| " + " | ".join(cells) + " |"


def soak_table(result: SoakResult) -> list[str]:
    """One soak's comparison: a Markdown table (the soaked hosts, then the hosts not yet switched),
    the window and the source, the verdict with its reasons, the thresholds and notes."""
    head = ["side", "hosts", "requests", "errors (5xx)", "error rate", *(label for _k, label in SOAK_LATENCIES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), _soak_row("soaked (new image)", result.soaked)]
    if result.others is not None:
        lines.append(_soak_row("not yet switched (old image)", result.others))
    else:
        lines.append("| not yet switched (old image) | none left | - | - | - | - | - | - | - |")
    source = "the instances' /metrics (read at the start and the end)" if result.source == "direct" else (
        f"Prometheus {result.source}"
    )  # fmt: skip
    lines += [
        "",
        f"Window: {result.started} to {result.ended} ({result.window_s:g} s); source: {source}.",
        "",
        f"Verdict: **{result.verdict}**" + (": " + "; ".join(result.reasons) if result.reasons else "."),
    ]
    if result.thresholds:
        t = result.thresholds
        lines.append("")
        lines.append(
            f"Thresholds (profile `soak`): error rate at most +{t.get('error_rate_margin', 0) * 100:.1f} points; "
            f"TTFT/TPOT at most x{t.get('latency_ratio', 0):g} or +{t.get('latency_floor_ms', 0):g} ms; "
            f"at least {t.get('min_requests', 0):g} requests a side."
        )
    lines += [""] + [f"- {note}" for note in result.notes] if result.notes else []
    return lines


def soak_section(state: RolloutState) -> list[str]:
    """The report's ``## Soak`` section: the plan, then each soak's :func:`soak_table` (batch order)."""
    plan = state.soak
    if plan is None:
        return []
    what = "every batch" if plan.every_batch else "the canary"
    lines = [
        "## Soak",
        "",
        f"{what.capitalize()} is soaked for {format_duration(plan.duration_s)} in service on the new image, then "
        "compared with the hosts not yet switched over the same window.",
    ]
    if not state.soaks:
        lines += ["", "No soak has ended yet."]
    for index in sorted(state.soaks, key=int):
        result = state.soaks[index]
        canary = " (canary)" if int(index) < state.canary_batch_count() else ""
        lines += ["", f"### After batch {int(index) + 1}{canary}: {', '.join(result.hosts)}", "", *soak_table(result)]
    return lines


def benchmark_clients(state: RolloutState) -> list[str]:
    """One Markdown line per host benchmarked: the client that ran its benchmark before and after
    the switch, with its sampling (one client for both: the rollout's own), or both when they
    differ or one is unknown; then what the comparison noted (another client: not compared)."""
    lines = []
    for name, host in state.hosts.items():
        before = sorted({n.client_before for n in host.bench.values() if n.client_before})
        after = sorted({n.client_after for n in host.bench.values() if n.client_after})
        if not before and not after:
            continue
        if before == after and len(before) == 1:
            said = f"before and after the switch: {before[0]}"
        else:
            said = f"before: {'; '.join(before) or '-'}; after: {'; '.join(after) or '-'}"
        notes = sorted({note for n in host.bench.values() for note in n.notes})
        lines.append(f"- **{name}**: {said}" + "".join(f"; {note}" for note in notes))
    return lines


def left_drained(state: RolloutState, hosts: Sequence[str]) -> str:
    """What a failed rolling restart left: its failed ``hosts`` drained, and what to do."""
    return (
        f"Left drained, not rolled back (a restart changes no image; they are not healthy): {', '.join(hosts)}. "
        f"Fix them, then `rocmfleet restart {state.inventory} --resume` restarts and gates them again; "
        "or undrain them by hand once they serve."
    )


def paused_note(state: RolloutState) -> str:
    """What a paused rollout or restart left, and the two ways on."""
    drained = [n for n, h in state.hosts.items() if h.step in ("drained", "switching", "switched", "gated")]
    left = f"Left drained (not yet judged): {', '.join(drained)}. " if drained else ""
    soaking = [n for n, h in state.hosts.items() if h.step == "soaking"]
    if soaking:
        left += f"In service on the new image, their soak not judged: {', '.join(soaking)}. "
    back = ""
    if state.kind == "rollout":
        back = f", or `rocmfleet {state.kind} {state.inventory} --rollback` returns every host"
    return (
        f"Paused: the gate could not judge the image (an error it cannot have caused); nothing was rolled back. "
        f"{left}Once the cause is fixed, `rocmfleet {state.kind} {state.inventory} --resume` continues "
        f"where each host stands{back}."
    )


def drift_cell(drift: Sequence[str] | None) -> str:
    """The ``drift`` column of ``rocmfleet status``'s table: ``as wanted`` (no reason), ``N to
    change`` (``N`` reasons: ``--json`` lists them), ``-`` (not read)."""
    if drift is None:
        return "-"
    return f"{len(drift)} to change" if drift else "as wanted"


def host_drift(rows: Sequence[InstanceStatus]) -> dict[str, dict[str, object]]:
    """Each host's drift per role, from its first row (:attr:`InstanceStatus.roles`), in row order:
    ``{host: {"drift": {role: [reasons]} | null, "problem": str}}`` (``null``: not read)."""
    hosts: dict[str, dict[str, object]] = {}
    for r in rows:
        if r.host not in hosts:
            roles = None if r.roles is None else {role: list(why) for role, why in r.roles}
            hosts[r.host] = {"drift": roles, "problem": r.problem}
    return hosts


def host_drift_lines(rows: Sequence[InstanceStatus]) -> list[str]:
    """``rocmfleet status``'s lines under its table: ``HOST  ROLE: ITEM: why`` per drift item of each
    host, in row then role order (``HOST  plan: PROBLEM`` first when its plan has one); none for a
    host as wanted or not read."""
    out: list[str] = []
    for host, found in host_drift(rows).items():
        if found["problem"]:
            out.append(f"{host}  plan: {found['problem']}")
        roles = found["drift"]
        if isinstance(roles, dict):
            out += [f"{host}  {role}: {why}" for role, reasons in roles.items() for why in reasons]
    return out


def status_json(
    rows: Sequence[Mapping[str, object]],
    state: RolloutState | None,
    hosts: Mapping[str, Mapping[str, object]] | None = None,
) -> str:
    """``rocmfleet status --json``: ``{"rollout": {...} | null, "instances": [...]}``; ``rows`` are
    :meth:`rocmfleet.fleet.rollout.instancestatus.InstanceStatus.row`'s (``drift``: the reasons, or null);
    with ``hosts`` (:func:`host_drift`) also ``"hosts": {host: {"drift": {role: [reasons]}, "problem"}}``."""
    rollout = None
    if state is not None:
        rollout = {
            "id": state.id,
            "kind": state.kind,
            "status": state.status,
            "target": state.target.reference if state.target else None,
            "steps": {name: h.step for name, h in state.hosts.items()},
            "soak": None
            if state.soak is None
            else {
                "duration_s": state.soak.duration_s,
                "every_batch": state.soak.every_batch,
                "results": {index: result.model_dump(mode="json") for index, result in state.soaks.items()},
            },
            "bench_clients": {
                name: {
                    case: {"before": n.client_before, "after": n.client_after, "notes": n.notes}
                    for case, n in h.bench.items()
                }
                for name, h in state.hosts.items()
                if h.bench
            },
        }
    data: dict[str, object] = {"rollout": rollout, "instances": list(rows)}
    if hosts is not None:
        data["hosts"] = dict(hosts)
    return json.dumps(data, indent=2) + "\n"
