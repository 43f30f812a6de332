"""The state file of a rollout (or rolling restart): per host the image before and after and the step reached.

:class:`RolloutState`, JSON in ``<results>/<inventory>/rollout-state.json`` (the results root
beside the inventory file unless given, :func:`results_root`): per host the image before (read
from the host at the start) and after, and the step reached (:data:`STEPS`). Each step is
written *before* it is taken (``switching``) and after it succeeded (``switched``), by an atomic
rename, so a killed control process leaves a file that says what may have happened:
``--resume`` re-runs an unfinished step (the deploy is idempotent), ``--rollback`` returns every
host that may have changed (:meth:`RolloutState.touched`) to its image before. A file whose parts
contradict each other (:meth:`RolloutState.consistency_problems`) is refused with every problem
listed (:func:`state_problems`) before anything runs. A recorded rollout refuses a plain deploy
and another rollout of the inventory (:func:`deploy_refusal`). Nothing here talks to a host.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rocmfleet.fleet.rollout.batches import over_bound
from rocmfleet.fleet.rollout.records import CaseNumbers as CaseNumbers
from rocmfleet.fleet.rollout.records import ImageRef as ImageRef
from rocmfleet.fleet.rollout.records import SoakPlan as SoakPlan
from rocmfleet.fleet.rollout.records import SoakResult as SoakResult

#: Steps of one host, in order. ``pending``: untouched; ``drained``: out of the load balancer;
#: ``switching``: its deploy started (it may or may not have changed); ``switched``: the deploy
#: ended well (readiness included); ``gated``: the gate passed; ``done``: undrained again.
#: Rollback: ``rolling_back`` (started), ``rolled_back`` (ready on the image before),
#: ``rollback_failed`` (the deploy back failed: the report says why).
#: ``failed``: a rolling restart's host that failed after its drain; a restart has no image to
#: go back to, so it is left drained (it is not healthy) for the operator, and ``--resume``
#: restarts and gates it again.
#: ``soaking`` (``rollout --soak``): undrained and serving the new image, its soak not judged yet
#: (:mod:`rocmfleet.fleet.rollout.soak`); ``done`` once the soak passed.
STEPS = ("pending", "drained", "switching", "switched", "gated", "soaking", "done")
ROLLBACK_STEPS = ("rolling_back", "rolled_back", "rollback_failed")
FAILED: Final = "failed"
#: Steps after which the host may run another image than before: its image before must be known.
TOUCHED_STEPS = ("switching", "switched", "gated", "soaking", "done", *ROLLBACK_STEPS)
#: Steps of a host in service on the new image: drained before its rollback.
SERVING_STEPS = ("soaking", "done")
Step = Literal[
    "pending",
    "drained",
    "switching",
    "switched",
    "gated",
    "soaking",
    "done",
    "rolling_back",
    "rolled_back",
    "rollback_failed",
    "failed",
]

#: States of the whole rollout; a rollout ``running``, ``paused``, ``failed`` or ``rollback_failed``
#: blocks another rollout and a plain deploy of the same inventory (its hosts may run two images).
#: A rolling restart blocks them only while ``running`` or ``paused``: a failed one changed no
#: image, and a deploy may be what fixes its failed host. ``paused``: a batch's gate could not
#: judge the image (rocmfleet.fleet.rollout.runner); ``--resume`` continues it.
Status = Literal["running", "paused", "done", "failed", "rolled_back", "rollback_failed"]
#: What a state file records: a rollout of a new image, or a rolling restart of the same one.
Kind = Literal["rollout", "restart"]
BLOCKING = ("running", "paused", "failed", "rollback_failed")

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
        replicas: per service, the replicas it takes out of service when it switches (empty in a
            state file written before rollouts were planned per service).
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
    replicas: dict[str, int] = Field(default_factory=dict)


class ServiceBound(BaseModel):
    """One service of a rollout: its replicas on the hosts the rollout covers and how many of
    them a batch may hold (``--max-unavailable`` for it: :func:`rocmfleet.fleet.rollout.batches.service_bounds`)."""

    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(ge=0)
    max_unavailable: int = Field(ge=1)


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

    #: The run id (:func:`rocmfleet.fleet.bench.runs.new_run_id`, ``YYYYMMDDTHHMMSSZ``): a directory name under
    #: the results root, so never a path (``/``, ``..``) or empty.
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    kind: Kind = "rollout"
    inventory: str
    status: Status = "running"
    target: ImageRef | None = None
    #: ``--canary N``: replicas of each service in the canary (hosts, in a file without ``services``).
    canary: int = Field(default=1, ge=0)
    #: The most hosts one batch holds (a file without ``services``: ``--max-unavailable``, in hosts).
    max_unavailable: int = Field(default=1, ge=1)
    #: Per service, its replicas and bound; empty in a file written before per-service plans
    #: (read as then: ``canary`` and ``max_unavailable`` counted in hosts).
    services: dict[str, ServiceBound] = Field(default_factory=dict)
    #: ``--canary-group``: the inventory group that is the canary, or ``None``.
    canary_group: str | None = None
    #: How many of the first batches are the canary (``None`` in an older file: derived from
    #: ``canary`` and ``max_unavailable``, :meth:`canary_batch_count`).
    canary_batches: int | None = Field(default=None, ge=0)
    batches: list[list[str]]
    hosts: dict[str, HostState]
    data_edit: DataEdit | None = None
    started: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    updated: str | None = None
    failure: str | None = None
    #: ``--soak``: the soak of the canary (or of every batch); ``None``: no soak.
    soak: SoakPlan | None = None
    #: Each soak's last outcome, by the index (as text) of the batch after which it ran.
    soaks: dict[str, SoakResult] = Field(default_factory=dict)

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
        replicas = {name: host.replicas for name, host in self.hosts.items()}
        bounds = {name: bound.max_unavailable for name, bound in self.services.items()}
        for i, batch in enumerate(self.batches if self.services else []):
            for service, count in over_bound([h for h in batch if h in replicas], replicas, bounds).items():
                problems.append(
                    f"batches[{i}]: {count} replicas of {service!r}: at most its max_unavailable ({bounds[service]})"
                )
        for name, host in self.hosts.items():
            unknown = sorted(set(host.replicas) - set(self.services))
            if unknown:
                problems.append(f"hosts.{name}.replicas: {', '.join(unknown)}: not one of this rollout's services")
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
        if self.soak is None and any(h.step == "soaking" for h in self.hosts.values()):
            soaking = ", ".join(n for n, h in self.hosts.items() if h.step == "soaking")
            problems.append(f"soak: null: {soaking} are 'soaking', which a rollout without a soak never records")
        if self.soak is not None and self.kind == "restart":
            problems.append("soak: a restart changes no image, so it has no soak; must be null")
        if self.canary_batches is not None and self.canary_batches > len(self.batches):
            problems.append(f"canary_batches: {self.canary_batches}: more than the {len(self.batches)} batches")
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

    def canary_batch_count(self) -> int:
        """How many of the first batches are the canary: ``canary_batches``, or in an older file
        the ``canary`` hosts split by ``max_unavailable`` hosts."""
        if self.canary_batches is not None:
            return self.canary_batches
        return min(len(self.batches), -(-self.canary // max(1, self.max_unavailable)))

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
        rolling restart only while ``running`` or ``paused``: see :data:`Status`)."""
        return self.status in ("running", "paused") if self.kind == "restart" else self.status in BLOCKING


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
        RunLocked: another process holds it, or the results directory cannot hold the lock file
            (a path under a file, no permission): nothing has started either way.
    """
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise RunLocked(
            f"cannot write the state's lock file {lock} ({exc.strerror or exc}); give a results directory "
            f"that can be written (${RESULTS_ENV})"
        ) from None
    with handle:
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
