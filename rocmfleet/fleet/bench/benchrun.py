"""``rocmfleet bench``: the smoke benchmark on every host of an inventory, over SSH.

I/O only. For each host (in parallel, one thread each) and each of its vLLM instances in turn,
every case of the profile's sweep runs one after the other as ``docker exec <container> vllm
bench serve ... --save-result`` against the instance's own port; the JSON vLLM writes in the
container is read back (``docker exec ... cat``), kept at :func:`rocmfleet.fleet.bench.runs.result_path`
and removed from the container. What runs, how a result is judged and how the run is reported
come from :mod:`rocmfleet.fleet.bench.bench` and :mod:`rocmfleet.fleet.bench.bench_report`.

SSH is :mod:`rocmfleet.fleet.connect`'s, as for ``rocmfleet check``: one :class:`~rocmfleet.fleet.connect.Session`
per host, with the inventory's keys, known-hosts file, ``ssh_strict_host_key_checking`` and sudo
settings (see that module for what each means).
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from rocmfleet.config.instances import Instance
from rocmfleet.domain import hfmodel
from rocmfleet.domain.benchshape import Case, shape_for, sweep_for
from rocmfleet.domain.vllmfiles import files_of
from rocmfleet.fleet.bench.bench import BenchParseError, BenchResult, bench_command, load_result
from rocmfleet.fleet.bench.bench_report import case_line, markdown_summary, plots
from rocmfleet.fleet.bench.client import EXEC, BenchClient, client_container, client_json
from rocmfleet.fleet.bench.client import metadata as client_metadata
from rocmfleet.fleet.bench.clientrun import client_run
from rocmfleet.fleet.bench.runs import (
    KILL_AFTER_S,
    container_result_path,
    docker_exec,
    instance_dir,
    latest_baseline,
    new_run_id,
    result_path,
    save_verdict,
    target_name,
)
from rocmfleet.fleet.bench.verdicts import Verdict, judge
from rocmfleet.fleet.connect import CommandTimeout, ConnectError, Result, Session
from rocmfleet.fleet.target import FleetConfig, Target

#: Seconds a short command (``cat``, ``rm``) may take.
SHORT_COMMAND_S = 60
#: Most hosts benchmarked at once (one thread each; they mostly wait on SSH).
MAX_PARALLEL_HOSTS = 32
#: The run's Markdown summary, in ``<results dir>/<run id>/`` beside the host directories.
SUMMARY_NAME = "summary.md"

Emit = Callable[[str], None]


@dataclass(frozen=True)
class CaseOutcome:
    """One case on one instance: its result and verdict, or ``error`` when it gave none."""

    target: str  # "host" or "host/instance", as rocmfleet.fleet.bench.runs.load_run names it
    label: str  # "host instance:port", for the console
    case: Case
    result: BenchResult | None = None
    verdict: Verdict | None = None
    baseline_run: str | None = None
    error: str | None = None
    path: Path | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and self.verdict is not None and self.verdict.passed


@dataclass
class HostOutcome:
    """One host: its cases, or ``error`` when it could not be benchmarked at all (unreachable)."""

    host: str
    cases: list[CaseOutcome] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.cases) and all(c.passed for c in self.cases)


# --- SSH ------------------------------------------------------------------------------------


def connect(target: Target[FleetConfig]) -> Session:
    """An opened :class:`~rocmfleet.fleet.connect.Session` to ``target``.

    Raises :class:`~rocmfleet.fleet.connect.ConnectError`."""
    return Session.open(target.ssh)


def _secrets(target: Target[FleetConfig]) -> list[str]:
    """The host's decrypted secret values, to mask in anything printed (never printed themselves)."""
    settings = target.config.settings
    values = [s.reveal() for s in settings.vllm_secret_env.values()]
    values += [auth.password.reveal() for auth in settings.docker_registry_auth]
    return [v for v in values if v]


def _mask(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "*MASKED*")
    return text


def _tail(text: str, lines: int = 3, width: int = 300) -> str:
    """The last non-empty lines of a command's output, on one line."""
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(line if len(line) <= width else line[: width - 3] + "..." for line in kept) or "(no output)"


class _Where(TypedDict):
    """Which target and label a :class:`CaseOutcome` is about."""

    target: str
    label: str


def serving_client(target: Target[FleetConfig]) -> BenchClient:
    """The client of ``rocmfleet bench``: each serving container's own ``vllm bench serve``
    (:data:`~rocmfleet.fleet.bench.client.EXEC`), the host's image and its profile's vLLM version."""
    return BenchClient(target.config.image.reference, target.config.profile.vllm_version, EXEC)


def _run(conn: Session, command: str, timeout_s: float) -> Result:
    """``command`` on the host: a :class:`~rocmfleet.fleet.connect.Result` (``exited``, ``stdout``, ``stderr``).

    Never raises on the exit status; raises :class:`~rocmfleet.fleet.connect.CommandTimeout` past ``timeout_s``.
    """
    return conn.run(command, timeout_s=timeout_s)


# --- one host --------------------------------------------------------------------------------


def _bench_case(
    conn: Session,
    target: Target[FleetConfig],
    instance: Instance,
    inst_dir: str | None,
    case: Case,
    root: Path,
    run_id: str,
    deadline: float,
    secrets: list[str],
    client: BenchClient,
) -> CaseOutcome:
    """Run ``case`` with ``client`` against ``instance``, copy its JSON to ``root`` and judge it.

    :data:`~rocmfleet.fleet.bench.client.EXEC`: in the instance's container, the JSON read back
    with ``docker exec cat``; :data:`~rocmfleet.fleet.bench.client.RUN`: in a client container
    of its own (:func:`~rocmfleet.fleet.bench.clientrun.client_run`), the JSON on the host.
    """
    profile = target.config.profile
    files = files_of(instance)
    container = files.container
    own = client.mode != EXEC
    where = _Where(target=target_name(target.name, inst_dir), label=f"{target.name} {instance.name}:{instance.port}")
    remaining = deadline - time.monotonic()
    if remaining < 1:
        return CaseOutcome(**where, case=case, error="not run: the host's --timeout-s ran out")
    inside = container_result_path(run_id, case)
    metadata = {
        "rocmfleet_run_id": run_id,
        "rocmfleet_host": target.name,
        "rocmfleet_instance": instance.name,
        "rocmfleet_image": target.config.image.reference,
        **client_metadata(client),
    }
    argv = bench_command(
        case,
        instance.port,
        profile.model,
        inside,
        served_model_name=profile.served_model_name,
        tokenizer=hfmodel.container_snapshot(profile.model, profile.revision),
        metadata=metadata,
    )
    if own:
        hf_cache = target.config.settings.vllm_hf_cache_dir
        command = client_run(client, instance.name, argv, str(inside.parent), files.env_file, hf_cache, remaining)
        read_back = shlex.join(["cat", str(inside)])
    else:
        command = docker_exec(container, argv, remaining)
        read_back = docker_exec(container, ["cat", str(inside)])
    try:
        ran = _run(conn, command, remaining + KILL_AFTER_S + 30)
        if ran.exited == 124:
            return CaseOutcome(**where, case=case, error=f"timed out after {remaining:.0f} s (--timeout-s)")
        if ran.exited == 137:  # docker exec's status when the process got SIGKILL
            why = "killed (SIGKILL: the container stopped, memory ran out, or it outlived --timeout-s)"
            return CaseOutcome(**where, case=case, error=f"vllm bench serve {why}")
        if ran.exited != 0:
            why = _mask(_tail(ran.stderr if ran.stderr.strip() else ran.stdout), secrets)  # tracebacks: stderr
            return CaseOutcome(**where, case=case, error=f"vllm bench serve exited {ran.exited}: {why}")
        read = _run(conn, read_back, SHORT_COMMAND_S)
    except CommandTimeout:
        return CaseOutcome(**where, case=case, error="timed out (--timeout-s)")
    except Exception as exc:  # noqa: BLE001 - SSH or socket errors: this case failed, the run goes on
        return CaseOutcome(
            **where, case=case, error=f"connection lost: {type(exc).__name__}: {_mask(str(exc), secrets)}"
        )
    if read.exited != 0:
        place = client_container(instance.name) + "'s mount on the host" if own else container
        return CaseOutcome(**where, case=case, error=f"cannot read {inside} in {place}: {_tail(read.stderr)}")
    local = result_path(root, run_id, target.name, case, inst_dir)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(read.stdout)
    try:
        result = load_result(local)
    except BenchParseError as exc:
        return CaseOutcome(**where, case=case, error=str(exc).replace("\n", " "), path=local)
    baseline = latest_baseline(root, target.name, case, run_id, inst_dir, like=result)
    verdict = judge(result, profile.bench.thresholds, baseline)
    save_verdict(local, verdict)
    baseline_run = None if baseline is None else Path(baseline.source).relative_to(root).parts[0]
    return CaseOutcome(**where, case=case, result=result, verdict=verdict, baseline_run=baseline_run, path=local)


def bench_host(
    target: Target[FleetConfig],
    root: Path,
    run_id: str,
    timeout_s: float,
    emit: Emit,
    connector: Callable[[Target[FleetConfig]], Session] = connect,
    client: BenchClient | None = None,
) -> HostOutcome:
    """Every case of every instance of ``target``, one after the other, within ``timeout_s`` seconds.

    ``emit`` gets one :func:`rocmfleet.fleet.bench.bench_report.case_line` per case as it ends (or one line
    for the host when it cannot be reached). ``connector`` opens the SSH connection (tests
    pass a fake). ``client`` runs the cases (default :func:`serving_client`: each instance's own
    container).
    """
    client = client or serving_client(target)
    deadline = time.monotonic() + timeout_s
    secrets = _secrets(target)
    outcome = HostOutcome(target.name)
    try:
        conn = connector(target)
    except Exception as exc:  # noqa: BLE001 - DNS, TCP, SSH, host key, auth: the host fails, the run goes on
        why = str(exc).removeprefix(f"{target.ssh.where}: ") if isinstance(exc, ConnectError) else None
        why = why or f"{type(exc).__name__}: {str(exc) or 'no detail'}"
        outcome.error = f"unreachable ({target.ssh.where}): {_mask(why, secrets)}"
        emit(f"{target.name}: FAIL {outcome.error}")
        return outcome
    try:
        cases = sweep_for(shape_for(target.config.profile))
        instances = target.config.instances()
        names = [i.name for i in instances]
        for instance in instances:
            inst_dir = instance_dir(names, instance.name)
            try:
                for case in cases:
                    done = _bench_case(conn, target, instance, inst_dir, case, root, run_id, deadline, secrets, client)
                    outcome.cases.append(done)
                    emit(case_line(done.label, case, done.result, done.verdict, done.baseline_run, done.error))
            finally:
                scratch = container_result_path(run_id, cases[0]).parent
                remove = ["rm", "-rf", str(scratch)]
                with contextlib.suppress(Exception):  # best effort: /tmp of the container, or of the host
                    command = (
                        shlex.join(remove) if client.mode != EXEC else docker_exec(files_of(instance).container, remove)
                    )
                    _run(conn, command, SHORT_COMMAND_S)
    finally:
        conn.close()
    return outcome


def gate_results(
    target: Target[FleetConfig],
    root: Path,
    timeout_s: float,
    emit: Emit,
    client: BenchClient,
    connector: Callable[[Target[FleetConfig]], Session] = connect,
) -> tuple[str | None, dict[str, BenchResult], list[str]]:
    """:func:`bench_host` (run id ``run``, results under ``root``; ``connector`` and ``client``
    as there), as a rollout's gate reads it. A rollout passes the same ``client`` for the runs
    before and after a host's switch (:meth:`rocmfleet.fleet.rollout.hoststeps.HostSteps.bench`).

    Returns:
        ``(error, results, errors)``: the host's error when it could not be benchmarked at all (else
        ``None``), ``{"<target>:<case>": result}`` of the cases that gave a result, and
        ``"<target>:<case>: <error>"`` of those that did not.
    """
    outcome = bench_host(target, root, "run", timeout_s, emit, connector, client)
    results, errors = {}, []
    for case in outcome.cases:
        key = f"{case.target}:{case.case.name}"
        if case.result is not None and case.error is None:
            results[key] = case.result
        else:
            errors.append(f"{key}: {case.error}")
    return outcome.error, results, errors


# --- the fleet -------------------------------------------------------------------------------


def _new_run_dir(root: Path) -> tuple[str, Path]:
    """A fresh ``<root>/<run id>`` (waits a second when a run of this second exists)."""
    while True:
        run_id = new_run_id()
        run_dir = root / run_id
        try:
            run_dir.mkdir(parents=True)
            return run_id, run_dir
        except FileExistsError:
            time.sleep(1)


def write_reports(run_dir: Path, run_id: str, hosts: list[HostOutcome], title: str) -> tuple[Path, list[Path]]:
    """``summary.md`` and the PNGs of :func:`rocmfleet.fleet.bench.bench_report.plots` in ``run_dir``."""
    run: dict[str, list[tuple[Case, BenchResult, Verdict]]] = {}
    errors: dict[str, list[str]] = {}
    for host in hosts:
        if host.error:
            errors.setdefault(host.host, []).append(host.error)
        for c in host.cases:
            if c.result is not None and c.verdict is not None and c.error is None:
                run.setdefault(c.target, []).append((c.case, c.result, c.verdict))
            else:
                errors.setdefault(c.target, []).append(f"{c.case.name}: {c.error}")
    summary = run_dir / SUMMARY_NAME
    summary.write_text(markdown_summary(run, f"{title} {run_id}", errors))
    return summary, plots(run, run_dir)


def bench(
    targets: Sequence[Target[FleetConfig]],
    results_dir: str | Path,
    timeout_s: float,
    emit: Emit = print,
    title: str = "Smoke benchmark",
    connector: Callable[[Target[FleetConfig]], Session] = connect,
    on_done: Callable[[str, Path, list[HostOutcome]], None] | None = None,
) -> int:
    """Benchmark ``targets`` in parallel; results, Markdown and plots under ``results_dir/<run id>/``.

    Args:
        targets: from :func:`rocmfleet.fleet.inventory.load_fleet`.
        results_dir: the results root (:func:`rocmfleet.fleet.bench.runs.result_path`); earlier runs in it
            are the baselines.
        timeout_s: seconds each host may take, all its instances and cases together.
        emit: where the console lines go.
        title: the Markdown summary's title (the run id follows it).
        connector: opens a host's SSH connection (:func:`connect`; tests pass a fake).
        on_done: given ``(run id, run directory, every host's outcome)`` once the reports are
            written (``rocmfleet bench --json`` prints :func:`json_report` of them).

    Returns:
        0 when every host passed, 1 when any failed (a limit, a regression, unreachable, a
        benchmark error).
    """
    root = Path(results_dir)
    run_id, run_dir = _new_run_dir(root)
    lock = threading.Lock()

    def locked_emit(line: str) -> None:
        with lock:
            emit(line)

    locked_emit(f"run {run_id}: {len(targets)} host(s), results in {run_dir}")
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_HOSTS, len(targets)), thread_name_prefix="bench") as pool:
        futures = [pool.submit(bench_host, t, root, run_id, timeout_s, locked_emit, connector) for t in targets]
        hosts = []
        for target, future in zip(targets, futures, strict=True):
            try:
                hosts.append(future.result())
            except Exception as exc:  # noqa: BLE001 - one host's failure must not lose the others' report
                hosts.append(
                    HostOutcome(target.name, error=f"error: {type(exc).__name__}: {_mask(str(exc), _secrets(target))}")
                )
                locked_emit(f"{target.name}: FAIL {hosts[-1].error}")
    summary, pngs = write_reports(run_dir, run_id, hosts, title)
    if on_done is not None:
        on_done(run_id, run_dir, hosts)
    failed = [h.host for h in hosts if not h.passed]
    emit(f"Markdown: {summary}")
    emit(f"Plots: {', '.join(map(str, pngs)) or 'none (no results)'}")
    emit(
        f"{len(hosts) - len(failed)} of {len(hosts)} host(s) passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


#: Metrics of each case in :func:`json_report` (the result JSON's keys; ``None`` when absent).
JSON_METRICS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")


def json_report(run_id: str, run_dir: Path, hosts: list[HostOutcome]) -> str:
    """``rocmfleet bench --json``: the run, and per host and case its verdict, reasons and metrics.

    Shape: ``{"run_id", "results": run directory, "passed": bool, "hosts": [{"host", "passed",
    "error", "cases": [{"target", "case", "passed", "reasons", "notes", "error", "baseline_run",
    "result_file", "client", "metrics": {key: number | null}}]}]}``; metric units are in the key
    (tok/s, ms). ``client``: ``{"image", "vllm_version", "temperature", "seed"}`` as the result
    records them (:class:`rocmfleet.fleet.bench.client.ClientInfo`; null each when not recorded),
    null when the case gave no result.
    """
    import json

    def case(c: CaseOutcome) -> dict[str, object]:
        return {
            "target": c.target,
            "case": c.case.name,
            "passed": c.passed,
            "reasons": list(c.verdict.reasons) if c.verdict else [],
            "notes": list(c.verdict.notes) if c.verdict else [],
            "error": c.error,
            "baseline_run": c.baseline_run,
            "result_file": str(c.path) if c.path else None,
            "client": client_json(c.result.client) if c.result else None,
            "metrics": {key: (c.result.value(key) if c.result else None) for key in JSON_METRICS},
        }

    report = {
        "run_id": run_id,
        "results": str(run_dir),
        "passed": all(h.passed for h in hosts),
        "hosts": [
            {"host": h.host, "passed": h.passed, "error": h.error, "cases": [case(c) for c in h.cases]} for h in hosts
        ],
    }
    return json.dumps(report, indent=2) + "\n"
