"""Fleet rollouts, the pure part: batches, the state file, the gate decision and the report.

``rocmfleet rollout`` (and ``rocmfleet restart``) change what a fleet serves a few hosts at a
time; :mod:`rocmfleet.fleet.rollout.rolloutrun` does the I/O. Nothing here talks to a host.

* **Batches** (:func:`plan_batches`): the canary (``--canary N`` hosts, default 1), then batches
  of at most ``--max-unavailable`` hosts (a count, or a percentage of the hosts rolled out,
  :func:`parse_max_unavailable`). A batch is out of service from its drain to its undrain, and
  the next batch starts only when the whole batch is back: never more than ``max_unavailable``
  hosts out of service at once. A canary larger than ``max_unavailable`` is split too.
* **State** (:class:`RolloutState`, JSON in ``<results>/<inventory>/rollout-state.json``, the
  results root beside the inventory file unless given, :func:`results_root`):
  per host the image before (read from the host at the start) and after, and the step reached
  (:data:`STEPS`). Each step is written *before* it is taken (``switching``) and after it
  succeeded (``switched``), by an atomic rename, so a killed control process leaves a file
  that says what may have happened: ``--resume`` re-runs an unfinished step (the deploy is
  idempotent), ``--rollback`` returns every host that may have changed
  (:meth:`RolloutState.touched`) to its image before. A file whose parts contradict each
  other (:meth:`RolloutState.consistency_problems`) is refused with every problem listed
  (:func:`state_problems`) before anything runs.
* **Gate** (:func:`gate_decision`): readiness (the deploy's own wait), ``rocmfleet check
  --select vllm`` on the host, and the smoke benchmark against the host's own result from
  just before the switch (regression tolerance and failed-request limit of the profile).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rocmfleet.fleet.bench.bench import REGRESSION_METRICS, BenchResult, Thresholds, judge

#: Steps of one host, in order. ``pending``: untouched; ``drained``: out of the load balancer;
#: ``switching``: its deploy started (it may or may not have changed); ``switched``: the deploy
#: ended well (readiness included); ``gated``: the gate passed; ``done``: undrained again.
#: Rollback: ``rolling_back`` (started), ``rolled_back`` (ready on the image before),
#: ``rollback_failed`` (the deploy back failed: the report says why).
#: ``failed``: a rolling restart's host that failed after its drain; a restart has no image to
#: go back to, so it is left drained (it is not healthy) for the operator, and ``--resume``
#: restarts and gates it again.
STEPS = ("pending", "drained", "switching", "switched", "gated", "done")
ROLLBACK_STEPS = ("rolling_back", "rolled_back", "rollback_failed")
FAILED: Final = "failed"
#: Steps after which the host may run another image than before: its image before must be known.
TOUCHED_STEPS = ("switching", "switched", "gated", "done", *ROLLBACK_STEPS)
Step = Literal[
    "pending",
    "drained",
    "switching",
    "switched",
    "gated",
    "done",
    "rolling_back",
    "rolled_back",
    "rollback_failed",
    "failed",
]

#: States of the whole rollout; a rollout ``running``, ``failed`` or ``rollback_failed`` blocks
#: another rollout and a plain deploy of the same inventory (its hosts may run two images). A
#: rolling restart blocks them only while ``running``: a failed one changed no image, and a
#: deploy may be what fixes its failed host.
Status = Literal["running", "done", "failed", "rolled_back", "rollback_failed"]
#: What a state file records: a rollout of a new image, or a rolling restart of the same one.
Kind = Literal["rollout", "restart"]
BLOCKING = ("running", "failed", "rollback_failed")

#: Parts of a host's switch timed for the report, in its column order.
TIMED = ("pull", "drain", "restart", "readiness", "gate", "undrain")

#: The state file's name inside ``<results dir>/<inventory name>/``.
STATE_NAME = "rollout-state.json"
#: Environment variable naming the results root (default: ``rollout-results/`` beside the
#: inventory); the rollout and the deploy's guard both read it.
RESULTS_ENV = "ROCMFLEET_ROLLOUT_RESULTS"
DEFAULT_RESULTS = "rollout-results"
#: Set by the runner for its own deploys: the rollout id the deploy belongs to.
OWN_DEPLOY_ENV = "ROCMFLEET_ROLLOUT_ID"

_DIGEST = re.compile(r"^(?P<repository>[^@]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?@(?P<digest>sha256:[0-9a-f]{64})$")


class PlanError(ValueError):
    """Bad rollout options; the message names the option, the value and what is allowed."""


class ImageRef(BaseModel):
    """An image as a rollout pins it: repository, tag and manifest digest."""

    repository: str
    tag: str
    digest: str

    @property
    def reference(self) -> str:
        """``repository:tag@digest``, as the units run it."""
        return f"{self.repository}:{self.tag}@{self.digest}"

    def data(self) -> dict[str, str]:
        """The ``--data`` overrides that make a deploy run this image."""
        return {"vllm_image_repository": self.repository, "vllm_image_tag": self.tag, "vllm_image_digest": self.digest}

    @classmethod
    def parse(cls, reference: str) -> ImageRef | None:
        """``repo:tag@sha256:...`` (what ``docker inspect`` shows as ``Config.Image`` for our units),
        or ``None`` when the reference has no digest or no tag."""
        match = _DIGEST.match(reference.strip())
        if not match or not match["tag"]:
            return None
        return cls(repository=match["repository"], tag=match["tag"], digest=match["digest"])


def parse_max_unavailable(text: str, hosts: int) -> int:
    """``--max-unavailable``: ``N`` hosts or ``P%`` of ``hosts`` (rounded down, at least 1).

    Kubernetes' ``maxUnavailable`` rounds a percentage down too (``intstr`` with
    ``roundUp=false`` in the Deployment controller).

    Raises:
        PlanError: not a positive count or a percentage in (0, 100].
    """
    value = text.strip()
    if value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            percent = math.nan
        if not 0 < percent <= 100:
            raise PlanError(f"--max-unavailable {text}: a percentage must be in (0, 100]")
        return max(1, math.floor(hosts * percent / 100))
    if not value.isdigit() or int(value) < 1:
        raise PlanError(f"--max-unavailable {text}: expected a count of hosts >= 1 or a percentage like 25%")
    return int(value)


def plan_batches(hosts: Sequence[str], canary: int, max_unavailable: int) -> list[list[str]]:
    """The hosts in batches: the canary first (``canary`` hosts, split by ``max_unavailable``),
    then the rest in inventory order, at most ``max_unavailable`` per batch.

    Raises:
        PlanError: ``canary`` < 0 or ``max_unavailable`` < 1.
    """
    if canary < 0:
        raise PlanError(f"--canary {canary}: must be >= 0")
    if max_unavailable < 1:
        raise PlanError(f"--max-unavailable {max_unavailable}: must be >= 1")
    hosts = list(hosts)
    head, rest = hosts[:canary], hosts[canary:]
    chunks = [head[i : i + max_unavailable] for i in range(0, len(head), max_unavailable)]
    chunks += [rest[i : i + max_unavailable] for i in range(0, len(rest), max_unavailable)]
    return chunks


class CaseNumbers(BaseModel):
    """One benchmark case before and after a switch, for the report (metric key -> value)."""

    before: dict[str, float] = Field(default_factory=dict)
    after: dict[str, float] = Field(default_factory=dict)


class HostState(BaseModel):
    """One host of a rollout (unknown keys are refused: a typo in a hand-edited file is not ignored).

    Attributes:
        batch: index in :attr:`RolloutState.batches` (0 is the canary when there is one).
        before: the image its instances ran at the start (``None``: no instance ran an image
            pinned by digest; it cannot be rolled back and is refused at the start).
        after: the image it is moved to (``None`` for a restart: the same image).
        step: the step reached (:data:`STEPS`, :data:`ROLLBACK_STEPS`).
        times: seconds per part (:data:`TIMED`).
        bench: per case name, the numbers before and after (for the report's deltas).
        baseline: per case, the file (on the control machine) of the benchmark result from just
            before the switch, so that a gate after ``--resume`` still compares with it.
        error: why it failed (the gate's reasons), or why its rollback failed.
    """

    model_config = ConfigDict(extra="forbid")

    batch: int = Field(ge=0)
    before: ImageRef | None = None
    after: ImageRef | None = None
    step: Step = "pending"
    times: dict[str, float] = Field(default_factory=dict)
    bench: dict[str, CaseNumbers] = Field(default_factory=dict)
    baseline: dict[str, str] = Field(default_factory=dict)
    error: str | None = None


class DataEdit(BaseModel):
    """The group data file a rollout rewrote, and the values it had before (``None``: absent)."""

    path: str
    before: dict[str, str | None]
    after: dict[str, str]


class StateProblems(ValueError):
    """A state file whose parts contradict each other; ``problems``: one line each, ``key: value: what is allowed``."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class RolloutState(BaseModel):
    """The state file of one rollout (or rolling restart) of one inventory.

    Besides each field's type, the parts must agree (:meth:`consistency_problems`; checked when
    the state is built or loaded, raising :class:`StateProblems` through pydantic), so that
    ``--resume`` and ``--rollback`` never act on a hand-edited or corrupt file.
    """

    model_config = ConfigDict(extra="forbid")

    #: The run id (:func:`rocmfleet.fleet.bench.bench.new_run_id`, ``YYYYMMDDTHHMMSSZ``): a directory name under
    #: the results root, so never a path (``/``, ``..``) or empty.
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    kind: Kind = "rollout"
    inventory: str
    status: Status = "running"
    target: ImageRef | None = None
    canary: int = Field(default=1, ge=0)
    max_unavailable: int = Field(default=1, ge=1)
    batches: list[list[str]]
    hosts: dict[str, HostState]
    data_edit: DataEdit | None = None
    started: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    updated: str | None = None
    failure: str | None = None

    def consistency_problems(self) -> list[str]:
        """What contradicts what in this state, one line each (``key: value: what is allowed``):
        a batch that is empty or larger than ``max_unavailable``, a host in two batches or in
        none, a batch naming a host without an entry, a host whose ``batch`` is not the batch
        listing it, a rollout without its ``target`` (or a restart with one), a rollout's host
        whose step says its deploy started (:data:`TOUCHED_STEPS`) without its image ``before``."""
        problems = []
        seen: dict[str, int] = {}
        for i, batch in enumerate(self.batches):
            if not batch:
                problems.append(f"batches[{i}]: []: a batch names at least one host")
            if len(batch) > self.max_unavailable:
                problems.append(
                    f"batches[{i}]: {len(batch)} hosts: at most max_unavailable ({self.max_unavailable}) per batch"
                )
            for j, name in enumerate(batch):
                if name in seen:
                    problems.append(
                        f"batches[{i}][{j}]: {name!r}: already in batch {seen[name]}; a host is in one batch"
                    )
                    continue
                seen[name] = i
                if name not in self.hosts:
                    problems.append(f"batches[{i}][{j}]: {name!r}: no entry in hosts; every batched host has one")
        for name, host in self.hosts.items():
            if name not in seen:
                problems.append(f"hosts.{name}: in no batch; every host is in one batch")
            elif host.batch != seen[name]:
                problems.append(
                    f"hosts.{name}.batch: {host.batch}: batches[{seen[name]}] lists it; must be {seen[name]}"
                )
            if self.kind == "rollout" and host.step == FAILED:
                problems.append(f"hosts.{name}.step: 'failed': a rollout's host that failed is rolled back, not left")
            if self.kind == "rollout" and host.before is None and host.step in TOUCHED_STEPS:
                problems.append(
                    f"hosts.{name}.before: null: step {host.step!r} means its deploy started, so the image it ran "
                    "before (repository, tag, digest) is needed to roll it back"
                )
        if self.kind == "rollout" and self.target is None:
            problems.append("target: null: a rollout records the image it rolls out (repository, tag, digest)")
        if self.kind == "restart" and self.target is not None:
            problems.append(f"target: {self.target.reference!r}: a restart changes no image; must be null")
        return problems

    @model_validator(mode="after")
    def _consistent(self) -> RolloutState:
        problems = self.consistency_problems()
        if problems:
            raise StateProblems(problems)
        return self

    def touched(self) -> list[str]:
        """Hosts whose deploy started (they may run the new image): what a rollback returns."""
        return [name for name, h in self.hosts.items() if h.step in TOUCHED_STEPS and h.step != "rolled_back"]

    def drained(self) -> list[str]:
        """Hosts drained and not undrained yet."""
        return [
            name for name, h in self.hosts.items() if h.step in ("drained", "switching", "switched", "gated", FAILED)
        ]

    def remaining_batches(self) -> list[int]:
        """Indexes of batches with a host not ``done`` (what ``--resume`` still runs)."""
        return [i for i, batch in enumerate(self.batches) if any(self.hosts[h].step != "done" for h in batch)]

    @property
    def blocking(self) -> bool:
        """A rollout recorded as in progress: another rollout and plain deploys must wait (a
        rolling restart only while ``running``: see :data:`Status`)."""
        return self.status == "running" if self.kind == "restart" else self.status in BLOCKING


def state_path(results_dir: str | Path, inventory: str | Path) -> Path:
    """``<results_dir>/<inventory file stem>/rollout-state.json``."""
    return Path(results_dir) / Path(inventory).stem / STATE_NAME


def results_root(explicit: str | None = None, inventory: str | Path | None = None) -> Path:
    """The results root: ``explicit``, else ``$ROCMFLEET_ROLLOUT_RESULTS``, else ``rollout-results``
    beside the inventory file (``inventories/rollout-results`` for ``inventories/prod.py``), so
    that a rollout and a deploy started from different directories see the same state file;
    ``./rollout-results`` when no inventory is given."""
    chosen = explicit or os.environ.get(RESULTS_ENV)
    if chosen:
        return Path(chosen)
    if inventory is not None:
        return Path(inventory).resolve().parent / DEFAULT_RESULTS
    return Path(DEFAULT_RESULTS)


def save_state(state: RolloutState, path: Path) -> None:
    """Write ``state`` atomically (a temporary file, fsync, rename): a reader sees the old or the new file."""
    state.updated = datetime.now(UTC).isoformat(timespec="seconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")  # one per writer
    try:
        with open(fd, "w", encoding="utf-8") as out:
            out.write(state.model_dump_json(indent=2) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """Hold the lock of the rollout state ``path`` (``<path>.lock``, ``flock``) for one process.

    Two ``rocmfleet rollout``/``restart`` processes of one inventory (a ``--resume`` started twice,
    a ``--rollback`` beside a running rollout) would both drive the same hosts and overwrite each
    other's state. The kernel drops the lock when its process dies (SIGKILL included), so a
    killed rollout never leaves it held; the rollout's deploys do not inherit it.

    Raises:
        RunLocked: another process holds it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(f"another rollout or restart process holds {lock}: it is running now") from None
        yield


class RunLocked(Exception):
    """Another process runs a rollout or restart of the same inventory (:func:`run_lock`)."""


def _value(value: object) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _key(loc: Sequence[object]) -> str:
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key or "(file)"


def state_problems(text: str) -> tuple[RolloutState | None, list[str]]:
    """Parse a state file's text: the state, or ``None`` and every problem, one line each
    (``key: value: what is allowed``): not JSON, a key given twice in one object (JSON keeps the
    last silently), a wrong type, an unknown key, step or status (pydantic's message lists the
    allowed values), and the parts that contradict each other (:meth:`RolloutState.consistency_problems`)."""
    twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _v in items]
        twice.extend(sorted({k for k in keys if keys.count(k) > 1}))
        return dict(items)

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except ValueError as exc:
        return None, [f"(file): not JSON: {exc}"]
    problems = [f"{k!r}: given more than once in one object; each key once" for k in twice]
    try:
        state = RolloutState.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, StateProblems):
                problems += cause.problems
            elif error["type"] == "missing":
                problems.append(f"{_key(error['loc'])}: missing: required")
            else:
                problems.append(f"{_key(error['loc'])}: {_value(error['input'])}: {error['msg']}")
        return None, problems
    return (None, problems) if problems else (state, [])


def load_state(path: Path) -> RolloutState | None:
    """The state in ``path``, ``None`` when there is none.

    Raises:
        ValueError: the file exists but is not a consistent rollout state; the message names the
            file and lists every problem (:func:`state_problems`).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:  # a directory, no permission, a file where a directory belongs
        raise ValueError(f"{path}: cannot read the rollout state: {exc.strerror or exc}; nothing was done") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a rollout state file (not UTF-8: {exc}); nothing was done") from None
    try:
        state, problems = state_problems(text)
    except RecursionError:  # JSON nested deeper than Python's stack ("[" * 100000)
        state, problems = None, ["the JSON is nested too deeply to be a rollout state"]
    if state is None:
        listed = "".join(f"\n  - {p}" for p in problems)
        raise ValueError(
            f"{path}: not a usable rollout state file ({len(problems)} problem(s)); nothing was done:{listed}"
        )
    return state


def deploy_refusal(inventory_file: str | Path, results_dir: str | Path | None = None) -> str | None:
    """Why a plain deploy of ``inventory_file`` must not run now, or ``None``.

    A rollout recorded as in progress (:attr:`RolloutState.blocking`) refuses every deploy
    except its own (the runner sets :data:`OWN_DEPLOY_ENV` to the rollout's id).
    """
    path = state_path(results_root(str(results_dir) if results_dir else None, inventory_file), inventory_file)
    try:
        state = load_state(path)
    except ValueError as exc:
        return f"{exc}\nFix the file, or remove it, before deploying"
    if state is None or not state.blocking:
        return None
    if os.environ.get(OWN_DEPLOY_ENV) == state.id:
        return None
    what = f"to {state.target.reference}" if state.target else "(rolling restart)"
    back = (
        f" or return it with `rocmfleet {state.kind} {state.inventory} --rollback`" if state.kind == "rollout" else ""
    )
    return (
        f"rollout {state.id} of {state.inventory} {what} is recorded as {state.status} in {path}; "
        f"a deploy now would fight it. Finish it with `rocmfleet {state.kind} {state.inventory} --resume`{back}"
    )


# --- the gate ---------------------------------------------------------------------------------


class GateOutcome(BaseModel):
    """A host's gate: ``passed``, else which gate failed (``readiness``, ``check``, ``benchmark``)
    and its reasons with their numbers."""

    passed: bool
    gate: str | None = None
    reasons: list[str] = Field(default_factory=list)
    #: The benchmark gate failed on regressions alone (every request answered): a run that is
    #: slower than the host's baseline, which a second run confirms or not (:func:`gate_decision`).
    regression_only: bool = False


def _metrics(result: BenchResult) -> dict[str, float]:
    values = {key: result.value(key) for key, _unit, _better in REGRESSION_METRICS}
    values["failed"] = float(result.failed) if result.failed is not None else math.nan
    return {k: v for k, v in values.items() if v is not None and not math.isnan(v)}


def bench_numbers(before: Mapping[str, BenchResult], after: Mapping[str, BenchResult]) -> dict[str, CaseNumbers]:
    """Per case name the report's numbers (:data:`rocmfleet.fleet.bench.bench.REGRESSION_METRICS` and ``failed``)."""
    return {
        name: CaseNumbers(
            before=_metrics(before[name]) if name in before else {},
            after=_metrics(after[name]) if name in after else {},
        )
        for name in sorted(set(before) | set(after))
    }


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
        check_failures: ``rocmfleet check --select vllm`` lines that did not pass.
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
    that run regresses too (:meth:`rocmfleet.fleet.rollout.rolloutrun.Rollout._host`). One smoke run on a host
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


# --- progress and report ----------------------------------------------------------------------


def eta_s(done_batches: int, total_batches: int, elapsed_s: float) -> float | None:
    """Seconds left, from the mean time of the batches done so far (``None`` before the first)."""
    if done_batches <= 0:
        return None
    return elapsed_s / done_batches * (total_batches - done_batches)


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


def markdown_report(state: RolloutState, messages: Sequence[str] = ()) -> str:
    """The end-of-run report: what happened, then one row per host (before/after digest, seconds
    per part of :data:`TIMED`, step reached, benchmark deltas against the run before the switch)."""
    what = f"to `{state.target.reference}`" if state.target else "(rolling restart, same image)"
    lines = [
        f"# {state.kind.capitalize()} {state.id} of {state.inventory} {what}",
        "",
        f"Status: **{state.status}**; canary {state.canary}, at most {state.max_unavailable} host(s) out of service;"
        f" {len(state.batches)} batch(es). Started {state.started}, last update {state.updated or '-'}.",
    ]
    if state.failure:
        lines += ["", f"Failure: {state.failure}"]
    left = [name for name, h in state.hosts.items() if h.step == FAILED]
    if left:
        lines += ["", left_drained(state, left)]
    lines += [""] + [f"- {m}" for m in messages] + ([""] if messages else [])
    head = ["host", "batch", "before", "after", "step", *(f"{t} s" for t in TIMED), "benchmark (after vs before)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, host in state.hosts.items():
        times = [f"{host.times[t]:.1f}" if t in host.times else "-" for t in TIMED]
        bench = "<br>".join(f"{case}: {_delta(n)}" for case, n in host.bench.items()) or "-"
        row = [name, "canary" if host.batch == 0 and state.canary else str(host.batch)]
        row += [_short(host.before), _short(host.after), host.step, *times, bench]
        lines.append("| " + " | ".join(row) + " |")
    errors = [(name, h.error) for name, h in state.hosts.items() if h.error]
    if errors:
        lines += ["", "## Problems", ""] + [f"- **{name}**: {error}" for name, error in errors]
    return "\n".join(lines) + "\n"


def left_drained(state: RolloutState, hosts: Sequence[str]) -> str:
    """What a failed rolling restart left: its failed ``hosts`` drained, and what to do."""
    return (
        f"Left drained, not rolled back (a restart changes no image; they are not healthy): {', '.join(hosts)}. "
        f"Fix them, then `rocmfleet restart {state.inventory} --resume` restarts and gates them again; "
        "or undrain them by hand once they serve."
    )


def status_json(rows: Sequence[Mapping[str, object]], state: RolloutState | None) -> str:
    """``rocmfleet status --json``: ``{"rollout": {...} | null, "instances": [...]}``."""
    rollout = None
    if state is not None:
        rollout = {
            "id": state.id,
            "kind": state.kind,
            "status": state.status,
            "target": state.target.reference if state.target else None,
            "steps": {name: h.step for name, h in state.hosts.items()},
        }
    return json.dumps({"rollout": rollout, "instances": list(rows)}, indent=2) + "\n"
