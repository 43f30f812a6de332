"""Where a benchmark run's results live: the results directory's layout (a run, its hosts and cases, their
verdicts; the latest comparable baseline) and the paths and commands inside a host's container."""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from rocmfleet.domain.benchshape import CASE_NAME, Case
from rocmfleet.domain.benchshape import Thresholds as Thresholds  # the rollout reads a profile's thresholds here
from rocmfleet.fleet.bench.bench import BenchParseError, BenchResult, load_result
from rocmfleet.fleet.bench.verdicts import Verdict, not_comparable

# --- result layout ---------------------------------------------------------------------------


def new_run_id(now: datetime | None = None) -> str:
    """A run id: the UTC time, ``YYYYMMDDTHHMMSSZ``, so that string order is time order."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _segment(kind: str, value: str) -> str:
    if not value or value in (".", "..") or any(c in value for c in "/\\\0"):
        raise ValueError(f"{kind} {value!r} cannot be a directory name")
    return value


def result_path(root: str | Path, run_id: str, host: str, case: Case, instance: str | None = None) -> Path:
    """``<root>/<run_id>/<host>[/<instance>]/<isl>x<osl>-c<concurrency>.json``.

    ``instance``: for hosts that serve several vLLM instances, each gets its own directory.
    The run's Markdown and plots go in ``<root>/<run_id>/`` beside the host directories.
    """
    path = Path(root) / _segment("run id", run_id) / _segment("host", host)
    if instance is not None:
        path /= _segment("instance", instance)
    return path / f"{case.name}.json"


def load_run(root: str | Path, run_id: str) -> dict[str, list[tuple[Case, BenchResult]]]:
    """Every result of a run by target (``host`` or ``host/instance``), cases in sweep order.

    Raises:
        BenchParseError: a result file that cannot be read.
    """
    run_dir = Path(root) / _segment("run id", run_id)
    run: dict[str, list[tuple[Case, BenchResult]]] = {}
    for path in sorted(run_dir.rglob("*.json")):
        if not CASE_NAME.fullmatch(path.stem):
            continue
        target = path.parent.relative_to(run_dir).as_posix()
        run.setdefault(target, []).append((Case.from_name(path.stem), load_result(path)))
    for results in run.values():
        results.sort(key=lambda item: (item[0].concurrency, item[0].isl, item[0].osl))
    return dict(sorted(run.items()))


def latest_baseline(
    root: str | Path,
    host: str,
    case: Case,
    before_run_id: str | None,
    instance: str | None = None,
    like: BenchResult | None = None,
) -> BenchResult | None:
    """The host's newest result of ``case`` from a run before ``before_run_id`` (any, if ``None``).

    Skipped: unreadable files, runs where no request completed or any failed, and results whose
    saved verdict (:func:`save_verdict`) failed, so that neither a broken nor a slow run becomes
    the bar to meet (a regression that failed once would otherwise pass the next time). With
    ``like``, results it cannot be compared with (another model, concurrency or prompt count)
    are skipped too, so a profile change does not end regression checks. Run ids compare as
    strings (:func:`new_run_id`).
    """
    root = Path(root)
    if not root.is_dir():
        return None
    runs = sorted((p.name for p in root.iterdir() if p.is_dir()), reverse=True)
    for run_id in runs:
        if before_run_id is not None and run_id >= before_run_id:
            continue
        path = result_path(root, run_id, host, case, instance)
        if not path.is_file():
            continue
        try:
            result = load_result(path)
        except BenchParseError:
            continue
        comparable = like is None or not_comparable(like, result) is None
        if result.completed > 0 and result.failed == 0 and verdict_passed(path) is not False and comparable:
            return result
    return None


def verdict_path(result: str | Path) -> Path:
    """``<case>.verdict.json`` beside a result's ``<case>.json``."""
    result = Path(result)
    return result.with_name(result.stem + ".verdict.json")


def save_verdict(result: str | Path, verdict: Verdict) -> Path:
    """Write ``verdict`` beside the result it judged; returns the file written."""
    path = verdict_path(result)
    body = {"passed": verdict.passed, "reasons": verdict.reasons, "notes": verdict.notes}
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path


def verdict_passed(result: str | Path) -> bool | None:
    """The saved verdict of a result: ``True``/``False``, ``None`` when none was saved or it is unreadable."""
    try:
        return bool(json.loads(verdict_path(result).read_text())["passed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --- running it on a host --------------------------------------------------------------------

#: Where a case's JSON lands inside the container (``/tmp`` of the container, not the host);
#: the runner copies it out and removes ``<root>/<run_id>`` afterwards.
CONTAINER_RESULT_ROOT = PurePosixPath("/tmp/rocmfleet-bench")
#: Seconds coreutils ``timeout`` waits after SIGTERM before it sends SIGKILL.
KILL_AFTER_S = 10


def container_result_path(run_id: str, case: Case) -> PurePosixPath:
    """``/tmp/rocmfleet-bench/<run_id>/<case>.json``: the ``--result-dir``/``--result-filename`` of a case."""
    return CONTAINER_RESULT_ROOT / _segment("run id", run_id) / f"{case.name}.json"


def instance_dir(instance_names: Sequence[str], name: str) -> str | None:
    """The ``instance`` argument of :func:`result_path` for instance ``name`` of a host.

    ``None`` (results directly under the host) when the host serves one instance, the
    instance's name when it serves several: the layout :func:`load_run` reads.
    """
    if name not in instance_names:
        raise ValueError(f"instance {name!r} is not one of {list(instance_names)}")
    return None if len(instance_names) == 1 else name


def target_name(host: str, instance: str | None = None) -> str:
    """``host`` or ``host/instance``: how :func:`load_run` and the reports name a result's source."""
    return host if instance is None else f"{host}/{instance}"


def docker_exec(container: str, argv: Sequence[str], timeout_s: float | None = None) -> str:
    """The shell command that runs ``argv`` in ``container`` (``docker exec``), quoted for ``sh``.

    With ``timeout_s`` (seconds, rounded up), coreutils ``timeout`` runs *inside* the container,
    so the process itself is stopped (SIGTERM, then SIGKILL after :data:`KILL_AFTER_S`); killing
    the ``docker exec`` client would leave it running. ``timeout`` exits 124 when time ran out.
    """
    if timeout_s is not None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        argv = ["timeout", f"--kill-after={KILL_AFTER_S}", str(math.ceil(timeout_s)), *argv]
    return shlex.join(["docker", "exec", container, *argv])
