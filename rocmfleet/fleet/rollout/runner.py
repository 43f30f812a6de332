"""``rocmfleet rollout``, ``restart`` and ``status``: the runner and its steps on real hosts.

:class:`Runner` takes a :class:`~rocmfleet.fleet.rollout.fleetrollout.RolloutState` through its batches with
a :class:`Steps` object and writes the state file after every step; :class:`HostSteps` are the
steps on real hosts (tests pass stand-ins):

* **switch** and **rollback** run the deploy itself, ``pyinfra -y --limit HOST --data
  vllm_image_repository=... --data vllm_image_tag=... --data vllm_image_digest=... INVENTORY
  deploy.py``: the vllm role pulls, checks the arguments with the new image's parser, swaps,
  waits until ready and rolls a host that never gets ready back on its own. There is no second
  implementation of the swap here. Its environment carries
  :data:`~rocmfleet.fleet.rollout.fleetrollout.OWN_DEPLOY_ENV`, which lets it past the inventory's guard
  against deploys during a rollout.
* **pull** (``docker pull`` of the pinned reference), **drain**/**undrain** (the group data's
  ``vllm_drain_command``/``vllm_undrain_command``), **observe** (``rocmfleet/scripts/vllm-status.sh``)
  and the rolling restart's unit restart and wait (the deploy's own ``rocmfleet/scripts/vllm-wait.sh``
  with the deploy's targets, :func:`rocmfleet.fleet.rollout.rollout.wait_targets`, on stdin) go over
  :mod:`rocmfleet.fleet.connect`. A restart that fails leaves its host drained and marked ``failed``
  (nothing to roll back); ``--resume`` restarts and gates it again.
* **check** is ``rocmfleet check --select vllm`` on the one host (:func:`rocmfleet.fleet.check.compliance.run_host`),
  **bench** the smoke benchmark (:func:`rocmfleet.fleet.bench.benchrun.bench_host`), results under the
  rollout's directory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichBars

from rocmfleet import project, scripts
from rocmfleet.fleet.bench.bench import BenchResult, Thresholds
from rocmfleet.fleet.connect import Result
from rocmfleet.fleet.inventory import Target
from rocmfleet.fleet.rollout.fleetrollout import (
    FAILED,
    OWN_DEPLOY_ENV,
    DataEdit,
    GateOutcome,
    ImageRef,
    Kind,
    RolloutState,
    Step,
    bench_numbers,
    eta_s,
    gate_decision,
    left_drained,
    save_state,
)

#: The deploy file, beside ``rocmfleet/`` at the project root.
DEPLOY_FILE = project.DEPLOY_FILE
#: Seconds a ``docker pull`` may take (a vLLM ROCm image is 20-30 GB).
PULL_TIMEOUT_S = 3600
#: Seconds a deploy may take beyond the host's ``vllm_ready_timeout_s`` (pull, argument check, files).
DEPLOY_MARGIN_S = 1800
#: Seconds between readiness polls of a rolling restart.
POLL_S = 5
#: Seconds a rolling restart's wait may take beyond ``vllm_ready_timeout_s`` (its logs, its end).
WAIT_MARGIN_S = 120
#: Seconds between the checks that a host being deployed still answers SSH.
HEARTBEAT_S = 15
#: Failed checks in a row after which a host counts as lost and its deploy is stopped.
LOST_AFTER = 2
#: Seconds ``rocmfleet check --select vllm`` may take on one host.
CHECK_TIMEOUT_S = 300

Emit = Callable[[str], None]
_T = TypeVar("_T")


def to_stderr(line: str) -> None:
    """The default ``error`` of the commands: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


class StepError(RuntimeError):
    """A step failed on a host; ``gate`` names it (``pull``, ``drain``, ``switch``, ``readiness``,
    ``check``, ``benchmark``, ``undrain``, ``rollback``) and the message says why, with numbers."""

    def __init__(self, gate: str, message: str) -> None:
        super().__init__(message)
        self.gate = gate


def step_failure(exc: Exception) -> str:
    """One line for a step that raised: a :class:`StepError`'s message, or any other exception's
    type and message (a step's failure belongs to its host: reported, never raised out)."""
    return str(exc) if isinstance(exc, StepError) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class InstanceStatus:
    """One vLLM instance now: its unit's state, image, readiness and uptime."""

    host: str
    instance: str
    active: str
    sub: str
    image: str | None
    ready: bool | None = None
    uptime_s: float | None = None
    error: str | None = None

    def row(self) -> dict[str, object]:
        """JSON-ready fields."""
        return {
            "host": self.host,
            "instance": self.instance,
            "unit": f"{self.active}/{self.sub}",
            "image": self.image,
            "ready": self.ready,
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s),
            "error": self.error,
        }


def _epoch(rfc3339: str) -> float | None:
    """Docker's ``State.StartedAt`` (``2026-01-02T03:04:05.123456789Z``) as seconds since the epoch."""
    text = rfc3339.strip()
    if not text or text == "-" or text.startswith("0001-"):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return base + (float("0." + frac[:6]) if frac.isdigit() else 0.0)


def parse_status(host: str, stdout: str) -> tuple[float | None, list[InstanceStatus], dict[str, float | None]]:
    """Parse ``vllm-status.sh``: the host's clock, the instances, and each container's start (epoch s)."""
    now: float | None = None
    instances: list[InstanceStatus] = []
    started: dict[str, float | None] = {}
    for line in stdout.splitlines():
        if line.startswith("now "):
            try:
                now = float(line.split()[1])
            except (IndexError, ValueError):
                now = None
            continue
        parts = line.split("\t")
        if len(parts) != 5:
            continue
        name, active, sub, image, start = parts
        started[name] = start_s = _epoch(start)
        uptime = None if now is None or start_s is None or active != "active" else now - start_s
        instances.append(InstanceStatus(host, name, active, sub, None if image == "-" else image, None, uptime))
    return now, instances, started


def running_image(instances: Sequence[InstanceStatus]) -> tuple[ImageRef | None, str | None]:
    """The one image a host's instances run, or ``(None, why)`` when they run none or several."""
    refs = {i.image for i in instances}
    if not instances or refs == {None}:
        return None, "no vLLM container runs"
    if len(refs) > 1:
        return None, "its instances run different images: " + ", ".join(sorted(str(r) for r in refs))
    (ref,) = refs
    image = ImageRef.parse(str(ref))
    return (image, None) if image else (None, f"its containers run {ref}, not pinned as repository:tag@digest")


class Steps(Protocol):
    """What the runner does on one host; each raises :class:`StepError` when it fails."""

    def pull(self, host: str, image: ImageRef) -> None: ...
    def drain(self, host: str) -> None: ...
    def undrain(self, host: str) -> None: ...
    def bench(self, host: str, label: str) -> tuple[dict[str, BenchResult], list[str]]: ...
    def switch(self, host: str, image: ImageRef | None) -> dict[str, float]: ...
    def check(self, host: str) -> list[str]: ...
    def rollback(self, host: str, image: ImageRef) -> None: ...
    def thresholds(self, host: str) -> Thresholds: ...


class Progress(Protocol):
    """Where the runner says what it does (:class:`RichProgress`, or plain lines)."""

    def batch(self, index: int, total: int, hosts: Sequence[str], eta: float | None) -> None: ...
    def step(self, host: str, step: str) -> None: ...
    def host_done(self, host: str, ok: bool) -> None: ...
    def say(self, text: str) -> None: ...


@dataclass
class LineProgress:
    """Progress as plain lines (``emit``), with the elapsed time."""

    emit: Emit = print
    started: float = field(default_factory=time.monotonic)

    def _t(self) -> str:
        return f"[{time.monotonic() - self.started:7.1f}s]"

    def batch(self, index: int, total: int, hosts: Sequence[str], eta: float | None) -> None:
        left = f", about {eta / 60:.1f} min left" if eta is not None else ""
        self.emit(f"{self._t()} batch {index + 1}/{total}: {', '.join(hosts)}{left}")

    def step(self, host: str, step: str) -> None:
        self.emit(f"{self._t()} {host}: {step}")

    def host_done(self, host: str, ok: bool) -> None:
        self.emit(f"{self._t()} {host}: {'done' if ok else 'FAILED'}")

    def say(self, text: str) -> None:
        self.emit(f"{self._t()} {text}")


#: Makes the progress of a run of that many hosts (the CLI's: :class:`RichProgress` on a terminal).
ProgressFactory = Callable[[int], Progress]


class Runner:
    """Takes a rollout through its batches, or back (:meth:`roll_back`); thread-safe state writes.

    Args:
        state: the rollout, as planned or as loaded for ``--resume``/``--rollback``.
        path: its state file.
        steps: what to do on a host.
        progress: where to say it.
        on_data_revert: called once when a failed or rolled-back rollout must put the group
            data file back (the runner does not edit files itself).
    """

    def __init__(
        self,
        state: RolloutState,
        path: Path,
        steps: Steps,
        progress: Progress,
        on_data_revert: Callable[[], None] | None = None,
    ) -> None:
        self.state, self.path, self.steps, self.progress = state, path, steps, progress
        self.on_data_revert = on_data_revert
        self._lock = threading.Lock()
        self._before: dict[str, dict[str, BenchResult]] = {}
        self._pulls: dict[int, Future[dict[str, str]]] = {}

    def _set(self, host: str, step: Step | None = None, **changes: object) -> None:
        with self._lock:
            h = self.state.hosts[host]
            if step is not None:
                h.step = step
            for key, value in changes.items():
                setattr(h, key, value)
            save_state(self.state, self.path)
        if step is not None:
            self.progress.step(host, step)

    def _time(self, host: str, part: str, seconds: float) -> None:
        with self._lock:
            self.state.hosts[host].times[part] = round(self.state.hosts[host].times.get(part, 0.0) + seconds, 3)

    # --- forward ------------------------------------------------------------------------------

    def _pull_batch(self, index: int) -> dict[str, str]:
        """Pull the target image on batch ``index``'s hosts not done yet; ``{host: why}`` for failures."""
        failures: dict[str, str] = {}
        image = self.state.target
        if image is None:
            return failures
        for host in self.state.batches[index]:
            if self.state.hosts[host].step != "pending":
                continue
            started = time.monotonic()
            try:
                self.steps.pull(host, image)
            except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
                failures[host] = step_failure(exc)
            self._time(host, "pull", time.monotonic() - started)
        return failures

    def _prepull(self, pool: ThreadPoolExecutor, index: int) -> Future[dict[str, str]]:
        if index not in self._pulls:
            self._pulls[index] = pool.submit(self._pull_batch, index)
        return self._pulls[index]

    def _host(self, host: str) -> GateOutcome:
        """One host from where it stands to ``done``; a failure is returned, never raised."""
        h = self.state.hosts[host]
        gate = "drain"
        try:
            if h.step == "pending":
                started = time.monotonic()
                self.steps.drain(host)
                self._time(host, "drain", time.monotonic() - started)
                self._set(host, "drained")
            if h.step == "drained":
                gate = "benchmark"
                self._before[host], _errors = self.steps.bench(host, "before")
                self._set(host, None, baseline={key: r.source for key, r in self._before[host].items()})
                gate = "switch"
                self._set(host, "switching")
                for part, seconds in self.steps.switch(host, self.state.target).items():
                    self._time(host, part, seconds)
                self._set(host, "switched")
            if h.step in ("switching", "switched"):  # --resume after a kill: run the deploy again
                if h.step == "switching":
                    gate = "switch"
                    for part, seconds in self.steps.switch(host, self.state.target).items():
                        self._time(host, part, seconds)
                    self._set(host, "switched")
                started = time.monotonic()
                gate = "check"
                failures = self.steps.check(host)
                after, errors = ({}, []) if failures else self.steps.bench(host, "after")
                before = self._before.get(host) or self._saved_baseline(host)
                outcome = gate_decision(None, failures, before, after, errors, self.steps.thresholds(host))
                if outcome.regression_only:  # slower once: slower again, or noise (gate_decision)
                    first = "; ".join(outcome.reasons)
                    self.progress.say(f"{host}: benchmark slower than its baseline ({first}); running it once more")
                    after, errors = self.steps.bench(host, "after-again")
                    outcome = gate_decision(None, [], before, after, errors, self.steps.thresholds(host))
                    if not outcome.passed:
                        again = "slower twice" if outcome.regression_only else "slower, then the second run failed"
                        outcome.reasons.insert(0, f"{again}; first run: {first}")
                self._time(host, "gate", time.monotonic() - started)
                self._set(host, None, bench=bench_numbers(before, after))
                if not outcome.passed:
                    why = f"{outcome.gate} gate failed: " + "; ".join(outcome.reasons)
                    self._set(host, None, error=why)
                    return outcome
                self._set(host, "gated")
            if h.step == "gated":
                gate = "undrain"
                started = time.monotonic()
                self.steps.undrain(host)
                self._time(host, "undrain", time.monotonic() - started)
                self._set(host, "done", error=None)
        except StepError as exc:
            gate = "readiness" if exc.gate == "readiness" else exc.gate or gate
            self._set(host, None, error=f"{gate}: {exc}")
            return GateOutcome(passed=False, gate=gate, reasons=[str(exc)])
        except Exception as exc:  # noqa: BLE001 - anything else on one host fails the batch, not the runner
            self._set(host, None, error=f"{gate}: {type(exc).__name__}: {exc}")
            return GateOutcome(passed=False, gate=gate, reasons=[f"{type(exc).__name__}: {exc}"])
        return GateOutcome(passed=True)

    def run(self) -> int:
        """Run the remaining batches; on the first failure roll back (:meth:`roll_back`).

        Returns:
            0 when every host is done; 1 when a host failed (after the rollback).
        """
        remaining = self.state.remaining_batches()
        total = len(self.state.batches)
        started = time.monotonic()
        with ThreadPoolExecutor(
            max_workers=max(2, self.state.max_unavailable + 1), thread_name_prefix="rollout"
        ) as pool:
            for position, index in enumerate(remaining):
                hosts = [h for h in self.state.batches[index] if self.state.hosts[h].step != "done"]
                self.progress.batch(index, total, hosts, eta_s(position, len(remaining), time.monotonic() - started))
                pull_failures = self._prepull(pool, index).result()
                if position + 1 < len(remaining):  # the next batch downloads while this one switches
                    self._prepull(pool, remaining[position + 1])
                failed: dict[str, GateOutcome] = {}
                for host, why in pull_failures.items():
                    self._set(host, None, error=f"pull: {why}")
                    failed[host] = GateOutcome(passed=False, gate="pull", reasons=[why])
                if not failed:
                    outcomes = dict(zip(hosts, pool.map(self._host, hosts), strict=True))
                    failed = {h: o for h, o in outcomes.items() if not o.passed}
                    for host in hosts:
                        self.progress.host_done(host, host not in failed)
                if failed:
                    for future in self._pulls.values():
                        future.result()
                    reasons = [f"{host}: {o.gate} gate failed: {'; '.join(o.reasons)}" for host, o in failed.items()]
                    if self.state.kind == "restart":
                        return self._stop(list(failed), "; ".join(reasons))
                    return self.roll_back("; ".join(reasons))
        with self._lock:
            self.state.status = "done"
            self.state.failure = None
            save_state(self.state, self.path)
        self.progress.say(f"{self.state.kind} {self.state.id}: every host done")
        return 0

    def _stop(self, failed: Sequence[str], reason: str) -> int:
        """End a rolling restart that failed: there is no image to go back to, so nothing is
        rolled back. Its failed hosts that were drained are marked ``failed`` and left drained
        (not healthy: no traffic); a host whose drain failed stays ``pending``. Hosts done stay
        done, hosts not reached untouched.

        Returns:
            1.
        """
        with self._lock:
            for host in failed:
                if self.state.hosts[host].step != "pending":
                    self.state.hosts[host].step = FAILED
            self.state.status = "failed"
            self.state.failure = reason
            save_state(self.state, self.path)
        self.progress.say(f"{self.state.kind} {self.state.id}: failed: {reason}")
        left = [h for h in failed if self.state.hosts[h].step == FAILED]
        if left:
            self.progress.say(left_drained(self.state, left))
        return 1

    def retry_failed(self) -> None:
        """``--resume`` of a failed rolling restart: its ``failed`` hosts (still drained) go back to
        their restart, gated against the benchmark taken before their first one (``switching``;
        ``drained`` when that benchmark did not run), and the restart runs on (:meth:`run`)."""
        with self._lock:
            for host in self.state.hosts.values():
                if host.step == FAILED:
                    host.step = "switching" if host.baseline else "drained"
                    host.error = None
            self.state.status = "running"
            self.state.failure = None
            save_state(self.state, self.path)

    def _saved_baseline(self, host: str) -> dict[str, BenchResult]:
        """The benchmark results from just before ``host``'s switch, read back from their files (a
        resumed rollout: the process that took them is gone); an unreadable one is left out."""
        from rocmfleet.fleet.bench.bench import BenchParseError, load_result

        results = {}
        for key, path in self.state.hosts[host].baseline.items():
            try:
                results[key] = load_result(path)
            except BenchParseError as exc:
                self.progress.say(f"{host}: baseline {key} unreadable ({exc}): not compared")
        return results

    # --- back ---------------------------------------------------------------------------------

    def roll_back(self, reason: str | None = None) -> int:
        """Return every touched host to its image before (in groups of ``max_unavailable``), undrain
        hosts left drained, and revert the group data. Hosts never touched stay as they are.

        Returns:
            1 (a rollout that had to roll back failed), or 0 for an operator's ``--rollback``
            when every host came back (``reason`` ``None``); 1 when any host could not.

        Raises:
            ValueError: the state is a rolling restart's: it has no image to go back to (a failed
                restart ends with :meth:`_stop`).
        """
        if self.state.kind == "restart":
            raise ValueError(f"restart {self.state.id}: a rolling restart changes no image; nothing to roll back")
        with self._lock:
            self.state.status = "failed"
            if reason:
                self.state.failure = reason
            save_state(self.state, self.path)
        if reason:
            self.progress.say(f"rolling back: {reason}")
        if self.on_data_revert is not None and self.state.kind == "rollout":
            self.on_data_revert()
        # Hosts out of service (the failed batch, still drained) first, then those serving again
        # (done: undrained after their gate), each drained before its rollback: never more than
        # max_unavailable out at once, and no vLLM restarts while a load balancer sends it traffic.
        touched = sorted(self.state.touched(), key=lambda name: self.state.hosts[name].step == "done")
        problems = []
        size = max(1, self.state.max_unavailable)
        for i in range(0, len(touched), size):
            group = touched[i : i + size]
            with ThreadPoolExecutor(max_workers=len(group)) as pool:
                problems += [p for p in pool.map(self._back, group) if p]
        for host in [h for h, s in self.state.hosts.items() if s.step == "drained"]:
            try:
                self.steps.undrain(host)
                self._set(host, "pending")
            except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
                problems.append(f"{host}: undrain: {step_failure(exc)}")
        with self._lock:
            self.state.status = "rollback_failed" if problems else "rolled_back"
            if problems:
                self.state.failure = "; ".join(([reason] if reason else []) + [f"rollback: {p}" for p in problems])
            save_state(self.state, self.path)
        self.progress.say(f"{self.state.kind} {self.state.id}: {self.state.status}")
        return 1 if reason or problems else 0

    def _back(self, host: str) -> str | None:
        h = self.state.hosts[host]
        if h.before is None:  # refused when the state is loaded: a host touched has its image before
            return f"{host}: its image before is not recorded; not rolled back"
        if h.step == "done":
            try:
                self.steps.drain(host)
            except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
                # Serving on the new image (it passed its gate): left as it is rather than restarted in service.
                self._set(host, "rollback_failed", error=f"not rolled back: drain failed: {step_failure(exc)}")
                return f"{host}: not rolled back, still on the new image: drain: {step_failure(exc)}"
        self._set(host, "rolling_back")
        started = time.monotonic()
        try:
            self.steps.rollback(host, h.before)
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            said = (h.error + "; " if h.error else "") + f"rollback: {step_failure(exc)}"
            self._set(host, "rollback_failed", error=said)
            return f"{host}: {step_failure(exc)}"
        self._time(host, "rollback", time.monotonic() - started)
        try:
            self.steps.undrain(host)
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            self._set(host, "rolled_back")
            return f"{host}: back on {h.before.reference}, but undrain failed: {step_failure(exc)}"
        self._set(host, "rolled_back")
        return None


# --- on real hosts ---------------------------------------------------------------------------


def _tail(text: str, lines: int = 6) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def _die_with_parent() -> None:
    """``preexec_fn`` of a deploy: it gets SIGTERM when the rollout process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``, ``PR_SET_PDEATHSIG`` = 1 in ``linux/prctl.h``), so a killed
    rollout leaves no deploy running on its own that ``--resume`` or ``--rollback`` would race."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


class HostSteps:
    """:class:`Steps` on real hosts, over :mod:`rocmfleet.fleet.connect` and the deploy.

    Args:
        inventory: the inventory file (for the deploy and for reloading targets).
        targets: ``{host: Target}`` as :func:`rocmfleet.fleet.inventory.load_fleet` gives them, with the
            data the hosts should end with (after a group data edit, reloaded).
        run_dir: where benchmark results go (``bench/before``, ``bench/after``).
        rollout_id: put in the deploys' environment (:data:`~rocmfleet.fleet.rollout.fleetrollout.OWN_DEPLOY_ENV`).
        bench_timeout_s: seconds each host's benchmark may take.
        emit: where the deploy's and benchmark's lines go (a log file, not the console).
    """

    def __init__(
        self,
        inventory: str,
        targets: Mapping[str, Target],
        run_dir: Path,
        rollout_id: str,
        bench_timeout_s: float = 1800,
        emit: Emit = lambda line: None,
    ) -> None:
        self.inventory, self.targets, self.run_dir, self.rollout_id = inventory, dict(targets), run_dir, rollout_id
        self.bench_timeout_s, self.emit = bench_timeout_s, emit

    # -- SSH helpers --
    def _run(self, host: str, command: str, timeout_s: float, gate: str, stdin: str | None = None) -> Result:
        from rocmfleet.fleet.connect import Session

        try:
            with Session.open(self.targets[host].ssh) as session:
                return session.run(command, timeout_s=timeout_s, stdin=stdin)
        except Exception as exc:  # noqa: BLE001 - unreachable, timed out, broken: this step failed
            raise StepError(gate, f"{host}: {type(exc).__name__}: {exc}") from None

    def observe(self, host: str) -> tuple[float | None, list[InstanceStatus], dict[str, float | None]]:
        """The host's clock, its instances now and their containers' start times (no readiness)."""
        names = [i.name for i in self.targets[host].config.instances()]
        result = self._run(host, scripts.command("vllm-status.sh", *names), 60, "observe")
        if result.exit_status != 0:
            raise StepError("observe", f"{host}: vllm-status.sh exited {result.exit_status}: {_tail(result.stderr)}")
        return parse_status(host, result.stdout)

    def ready(self, host: str) -> dict[str, bool]:
        """Per instance, whether it is ready now (the deploy's own probe, one try, with the profile's
        known-answer request where it has one: ``ready_probe``)."""
        from rocmfleet.domain.readiness import probe_script
        from rocmfleet.domain.vllm import files_of

        config = self.targets[host].config
        model = config.profile.served_model_name or config.profile.model
        out = {}
        for instance in config.instances():
            probe = probe_script(instance.port, model, files_of(instance).container, config.profile.ready_probe)
            out[instance.name] = self._run(host, probe, 60, "readiness").exit_status == 0
        return out

    # -- steps --
    def pull(self, host: str, image: ImageRef) -> None:
        result = self._run(host, f"docker pull --quiet {shlex.quote(image.reference)}", PULL_TIMEOUT_S, "pull")
        if result.exit_status != 0:
            raise StepError(
                "pull", f"docker pull {image.reference} exited {result.exit_status}: {_tail(result.stderr)}"
            )

    def _hook(self, host: str, which: str) -> None:
        settings = self.targets[host].config.settings
        command = getattr(settings, f"vllm_{which}_command")
        if not command:
            return
        ports = ",".join(str(i.port) for i in self.targets[host].config.instances())
        line = f"ROCMFLEET_HOST={shlex.quote(host)} ROCMFLEET_PORTS={ports} sh -c {shlex.quote(command)}"
        result = self._run(host, line, settings.vllm_drain_timeout_s, which)
        if result.exit_status != 0:
            raise StepError(
                which, f"vllm_{which}_command exited {result.exit_status}: {_tail(result.stderr or result.stdout)}"
            )

    def drain(self, host: str) -> None:
        self._hook(host, "drain")

    def undrain(self, host: str) -> None:
        self._hook(host, "undrain")

    def bench(self, host: str, label: str) -> tuple[dict[str, BenchResult], list[str]]:
        from rocmfleet.fleet.bench.benchrun import bench_host

        outcome = bench_host(self.targets[host], self.run_dir / "bench" / label, "run", self.bench_timeout_s, self.emit)
        if outcome.error:
            raise StepError("benchmark", f"{label} the switch: {outcome.error}")
        results, errors = {}, []
        for case in outcome.cases:
            key = f"{case.target}:{case.case.name}"
            if case.result is not None and case.error is None:
                results[key] = case.result
            else:
                errors.append(f"{key}: {case.error}")
        return results, errors

    def thresholds(self, host: str) -> Thresholds:
        thresholds: Thresholds = self.targets[host].config.profile.bench.thresholds
        return thresholds

    def _deploy(self, host: str, image: ImageRef | None, gate: str) -> float:
        import json

        config = self.targets[host].config
        argv = [sys.executable, "-m", "pyinfra", "-y", "--limit", host]
        for key, value in (image.data() if image else {}).items():
            argv += ["--data", f"{key}={json.dumps(value)}"]  # quoted: a tag like 1.0 stays a string
        argv += [self.inventory, str(DEPLOY_FILE)]
        env = {**os.environ, OWN_DEPLOY_ENV: self.rollout_id}
        timeout = config.settings.vllm_ready_timeout_s + DEPLOY_MARGIN_S
        started = time.time()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
        )
        stdout, stderr = self._watch(host, proc, timeout, gate)
        for line in (stdout + stderr).splitlines():
            self.emit(f"{host} deploy: {line}")
        if proc.returncode != 0:
            said = [line for line in (stderr + stdout).splitlines() if "not ready" in line or "rolled back" in line]
            why = _tail("\n".join(said) if said else stderr + stdout)
            kind = "readiness" if said else gate
            raise StepError(
                kind, f"deploy of {image.reference if image else 'the same image'} exited {proc.returncode}: {why}"
            )
        return started

    def _watch(self, host: str, proc: subprocess.Popen[str], timeout_s: float, gate: str) -> tuple[str, str]:
        """Wait for the deploy ``proc``, asking every :data:`HEARTBEAT_S` seconds whether ``host``
        still answers SSH (:func:`rocmfleet.fleet.connect.reachable`). A host that does not answer
        :data:`LOST_AFTER` times in a row (powered off, cut off) stops the deploy: pyinfra's own
        connection to a dead host would wait for the kernel's TCP retries (about 15 minutes).

        Raises:
            StepError: the deploy ran past ``timeout_s`` or the host stopped answering.
        """
        from rocmfleet.fleet.connect import reachable

        deadline = time.monotonic() + timeout_s
        misses = 0
        while True:
            try:
                return proc.communicate(timeout=HEARTBEAT_S)
            except subprocess.TimeoutExpired:
                pass
            why = None
            if time.monotonic() > deadline:
                why = f"the deploy did not finish within {timeout_s:g} s"
            else:
                lost = reachable(self.targets[host].ssh, HEARTBEAT_S)
                misses = misses + 1 if lost else 0
                if misses >= LOST_AFTER:
                    why = f"{host} stopped answering SSH during the deploy ({lost}); the deploy was stopped"
            if why:
                proc.kill()
                proc.communicate()
                raise StepError(gate, why)

    def switch(self, host: str, image: ImageRef | None) -> dict[str, float]:
        """The deploy (``image``) or, for a rolling restart (``None``), a restart of the units and
        the deploy's readiness probe until ready. Returns ``restart`` and ``readiness`` seconds:
        from the start to the containers' start (host clock, corrected by the observed offset),
        and from there to ready."""
        if image is None:
            return self._restart(host)
        before_now = time.time()
        host_now, _instances, _started = self.observe(host)
        offset = (host_now - before_now) if host_now is not None else 0.0
        started = self._deploy(host, image, "switch")
        ended = time.time()
        _now, _instances, starts = self.observe(host)
        first = min((s for s in starts.values() if s is not None), default=None)
        if first is None or not started <= first - offset <= ended:
            return {"restart": ended - started}
        return {"restart": first - offset - started, "readiness": ended - (first - offset)}

    def _restart(self, host: str) -> dict[str, float]:
        """Restart the host's vLLM units, then wait as the deploy waits: ``vllm-wait.sh`` with every
        instance (:func:`rocmfleet.fleet.rollout.rollout.wait_targets`: known answer, warm-up; a unit systemd
        shows failed or a wrong answer is given up at once) and nothing to roll back to (a restart
        changes nothing to go back from). Its targets go on stdin.

        Raises:
            StepError: ``switch`` when the restart failed, ``readiness`` when an instance was not
                ready by ``vllm_ready_timeout_s`` (the wait's own report, with the logs, in the message).
        """
        from rocmfleet.fleet.rollout.rollout import wait_or_roll_back_script, wait_targets

        config = self.targets[host].config
        targets = wait_targets(config)
        units = " ".join(shlex.quote(t.unit) for t in targets)
        started = time.monotonic()
        result = self._run(host, f"systemctl restart {units}", 300, "switch")
        if result.exit_status != 0:
            raise StepError("switch", f"systemctl restart exited {result.exit_status}: {_tail(result.stderr)}")
        restarted = time.monotonic()
        timeout = config.settings.vllm_ready_timeout_s
        wait = wait_or_roll_back_script(targets, timeout, 0, POLL_S)
        result = self._run(host, wait.command, timeout + WAIT_MARGIN_S, "readiness", stdin=wait.stdin)
        for line in (result.stdout + result.stderr).splitlines():
            self.emit(f"{host} wait: {line}")
        if result.exit_status != 0:
            said = [line for line in result.stderr.splitlines() if "not ready" in line or "not waiting" in line]
            raise StepError("readiness", _tail("\n".join(said) if said else result.stderr + result.stdout))
        return {"restart": restarted - started, "readiness": time.monotonic() - restarted}

    def check(self, host: str) -> list[str]:
        from rocmfleet.fleet.check import compliance

        results = compliance.run_host(self.targets[host], compliance.module_paths(["vllm"]), CHECK_TIMEOUT_S)
        return [f"{r.check}: {r.outcome}: {r.message}" for r in results if r.outcome not in ("passed", "skipped")]

    def rollback(self, host: str, image: ImageRef) -> None:
        before = self.targets[host]
        target = before.config
        image_config = target.image.model_copy(
            update={"repository": image.repository, "tag": image.tag, "digest": image.digest}
        )
        self.targets[host] = replace(before, config=replace(target, image=image_config))
        self._deploy(host, image, "rollback")


# --- progress for people ---------------------------------------------------------------------


class RichProgress:
    """Progress with rich: one bar for the hosts done (elapsed, time left), one line per host of the
    current batch with its step and elapsed time; messages above them. Use as a context manager."""

    def __init__(self, total_hosts: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bars = RichBars(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.overall = self.bars.add_task("hosts", total=total_hosts)
        self.tasks: dict[str, TaskID] = {}
        self.batch_label = ""

    def __enter__(self) -> RichProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def batch(self, index: int, total: int, hosts: Sequence[str], eta: float | None) -> None:
        for task in self.tasks.values():
            self.bars.update(task, visible=False)
        self.batch_label = f"batch {index + 1}/{total}"
        left = f" (about {eta / 60:.1f} min left)" if eta is not None else ""
        self.bars.console.log(f"{self.batch_label}: {', '.join(hosts)}{left}")
        for host in hosts:
            self.tasks[host] = self.bars.add_task(f"  {self.batch_label} {host}: pending", total=None)

    def step(self, host: str, step: str) -> None:
        if host not in self.tasks:
            self.tasks[host] = self.bars.add_task(f"  {host}", total=None)
        self.bars.update(self.tasks[host], description=f"  {self.batch_label} {host}: {step}")

    def host_done(self, host: str, ok: bool) -> None:
        self.bars.advance(self.overall)
        self.bars.console.log(f"{host}: {'done' if ok else '[red]FAILED[/red]'}")

    def say(self, text: str) -> None:
        self.bars.console.log(text)


# --- the commands ----------------------------------------------------------------------------


class CommandError(RuntimeError):
    """The command cannot start (exit 2); the message says why."""


def _load(
    inventory: str, limit: list[str] | None = None, overrides: dict[str, object] | None = None
) -> dict[str, Target]:
    from rocmfleet.fleet.inventory import FleetError, load_fleet

    try:
        return {t.name: t for t in load_fleet(inventory, limit, overrides)}
    except FleetError as exc:
        raise CommandError(str(exc)) from None


def _with_image(target: Target, image: ImageRef) -> Target:
    config = target.config
    pinned = config.image.model_copy(update={"repository": image.repository, "tag": image.tag, "digest": image.digest})
    return replace(target, config=replace(config, image=pinned))


def _parallel(fn: Callable[[str], _T], items: Sequence[str], workers: int = 16) -> list[_T]:
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(fn, items))


def resolve(reference: str, targets: Mapping[str, Target]) -> ImageRef:
    """``REPO:TAG`` to an :class:`ImageRef`, the digest from the registry (once).

    The hosts' ``docker_insecure_registries`` say which registries speak plain HTTP, their
    ``docker_registry_auth`` the credentials.

    Raises:
        CommandError: a malformed reference or a registry that cannot say the digest.
    """
    from rocmfleet.fleet.registry import RegistryError, parse_image, resolve_digest

    try:
        name = parse_image(reference)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    insecure = sorted({r for t in targets.values() for r in t.config.settings.docker_insecure_registries})
    credentials = None
    for t in targets.values():
        for auth in t.config.settings.docker_registry_auth:
            if auth.registry in (name.registry, f"https://{name.registry}", f"http://{name.registry}"):
                credentials = (auth.username, auth.password.reveal())
    try:
        digest = resolve_digest(name, insecure, credentials)
    except RegistryError as exc:
        raise CommandError(f"cannot resolve {reference}: {exc}") from None
    return ImageRef(repository=name.repository, tag=name.tag, digest=digest)


def _data_file(image: ImageRef) -> tuple[Path, str, str]:
    """Which group data file takes the image, its text now and the edited text."""
    from rocmfleet.config import groupvars
    from rocmfleet.config.groupdata_edit import EditError, holders, set_keys

    loaded = [g for g in groupvars.LOADED if not g.fatal]  # every group file the inventory read, in order
    files = {str(g.path): g.path.read_text() for g in loaded}
    found = holders(files)
    if len(found) > 1:
        raise CommandError(
            f"vllm_image_* keys are set in more than one group data file ({', '.join(found)}); "
            "keep them in one, or edit them by hand and run `rocmfleet rollout` without --image"
        )
    if not found:
        groups = {g.group: str(g.path) for g in loaded}
        found = [v for g, v in groups.items() if g != "all"] or list(groups.values())
        if len(found) != 1:
            raise CommandError("no group data file holds vllm_image_*; add vllm_image_tag and vllm_image_digest to one")
    path = found[0]
    try:
        return Path(path), files[path], set_keys(files[path], image.data(), path)
    except EditError as exc:
        raise CommandError(str(exc)) from None


def _revert_data(edit: DataEdit, emit: Emit, error: Emit = to_stderr) -> Callable[[], None]:
    def revert() -> None:
        from rocmfleet.config.groupdata_edit import EditError, set_keys, unified_diff, unset_keys

        path = Path(edit.path)
        try:
            old = path.read_text()
            new = set_keys(old, {k: v for k, v in edit.before.items() if v is not None}, edit.path)
            new = unset_keys(new, [k for k, v in edit.before.items() if v is None], edit.path)
        except (OSError, EditError) as exc:
            error(f"rocmfleet: could not put {edit.path} back: {exc}; set {edit.before} there by hand")
            return
        if new != old:
            path.write_text(new)
            emit(f"{edit.path} put back as before the rollout:\n{unified_diff(old, new, edit.path)}")

    return revert


def _finish(state: RolloutState, path: Path, code: int, emit: Emit, error: Emit = to_stderr) -> int:
    """Write the report; each host's error and a failed end go to ``error``, a good end to ``emit``."""
    from rocmfleet.fleet.rollout.fleetrollout import markdown_report

    report = path.parent / state.id / "report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown_report(state))
    for name, host in state.hosts.items():
        if host.error:
            error(f"{name}: {host.step}: {host.error}")
    (error if code else emit)(f"{state.kind} {state.id}: {state.status}; report {report}; state {path}")
    return code


def run_rollout(
    inventory: str,
    kind: str = "rollout",
    image: str | None = None,
    canary: int | None = None,
    max_unavailable: str | None = None,
    force: bool = False,
    resume: bool = False,
    rollback: bool = False,
    limit: list[str] | None = None,
    results_dir: str | None = None,
    emit: Emit = print,
    progress_factory: ProgressFactory | None = None,
    error: Emit | None = None,
) -> int:
    """``rocmfleet rollout``/``restart``: plan, record and run, or ``--resume``/``--rollback`` one.

    Args:
        canary, max_unavailable: ``--canary`` (default 1) and ``--max-unavailable`` (default
            ``"1"``); ``None``: not given.
        emit: where progress and the report's summary go (stdout).
        error: where errors go (default stderr): why nothing started, each failed host's error,
            a failed end.

    With ``resume`` or ``rollback`` the recorded plan is what runs: ``image``, ``canary``,
    ``max_unavailable``, ``limit`` and ``force`` are refused (exit 2) rather than ignored.

    Returns:
        0 done (or rolled back on request); 1 a host failed (rolled back: see the report; a
        restart leaves it drained); 2 nothing was started (bad options, a failing fleet without
        ``--force``, a recorded rollout, a state file that is not consistent, an unreadable registry).
    """
    from rocmfleet.fleet.rollout import fleetrollout as fr

    say_error = error or to_stderr
    if kind not in ("rollout", "restart"):
        say_error(f"rocmfleet: {kind}: not a rollout or a restart")
        return 2
    checked: Kind = "rollout" if kind == "rollout" else "restart"
    root = fr.results_root(results_dir, inventory)
    path = fr.state_path(root, inventory)
    try:
        with fr.run_lock(path):
            return _run_rollout(
                inventory, checked, image, canary, max_unavailable, force, resume, rollback, limit, root, path,
                emit, progress_factory, say_error,
            )  # fmt: skip
    except fr.RunLocked as exc:
        say_error(f"rocmfleet: {exc}; nothing was done")
        return 2


def _run_rollout(
    inventory: str, kind: Kind, image: str | None, canary: int | None, max_unavailable: str | None, force: bool,
    resume: bool, rollback: bool, limit: list[str] | None, root: Path, path: Path, emit: Emit,
    progress_factory: ProgressFactory | None, say_error: Emit,
) -> int:  # fmt: skip
    """:func:`run_rollout` with its run lock held; ``root`` and ``path``: the results root and state file."""
    from rocmfleet.fleet.rollout import fleetrollout as fr

    try:
        if resume or rollback:
            given = {
                "--image": image,
                "--canary": canary,
                "--max-unavailable": max_unavailable,
                "--limit": ",".join(limit) if limit else None,
                "--force": True if force else None,
            }
            extra = [name if value is True else f"{name} {value}" for name, value in given.items() if value is not None]
            if extra:
                mode = "--resume" if resume else "--rollback"
                raise CommandError(
                    f"{mode} with {', '.join(extra)}: {mode} runs the plan recorded in {path} (its hosts, batches, "
                    f"canary, max-unavailable and image); give {mode} alone, or finish this {kind} and start a new one"
                )
        existing = fr.load_state(path)
        if resume or rollback:
            if existing is None:
                raise CommandError(f"no {kind} of {inventory} recorded in {path}")
            if existing.kind != kind:
                raise CommandError(
                    f"{path} records {existing.kind} {existing.id}, not a {kind}: "
                    f"use `rocmfleet {existing.kind} {inventory} {'--resume' if resume else '--rollback'}`"
                )
            return _continue(existing, path, inventory, rollback, emit, progress_factory, say_error)
        if existing is not None and existing.blocking:
            raise CommandError(fr.deploy_refusal(inventory, root) or f"{path}: a rollout is recorded")
        return _start(
            inventory,
            kind,
            image,
            1 if canary is None else canary,
            "1" if max_unavailable is None else max_unavailable,
            force,
            limit,
            root,
            path,
            emit,
            progress_factory,
            say_error,
        )
    except (CommandError, fr.PlanError, ValueError) as exc:
        say_error(f"rocmfleet: {exc}")
        return 2


def _runner(
    state: RolloutState,
    path: Path,
    targets: Mapping[str, Target],
    inventory: str,
    emit: Emit,
    progress_factory: ProgressFactory | None,
    error: Emit = to_stderr,
) -> tuple[Runner, Progress]:
    log = path.parent / state.id / "log.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def to_log(line: str) -> None:
        with lock, open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    steps = HostSteps(inventory, targets, path.parent / state.id, state.id, emit=to_log)
    revert = _revert_data(state.data_edit, emit, error) if state.data_edit else None
    progress = progress_factory(len(state.hosts)) if progress_factory else LineProgress(emit)
    return Runner(state, path, steps, progress, on_data_revert=revert), progress


def _drive(progress: Progress, action: Callable[[], int]) -> int:
    """``action()``, inside ``progress`` when it is a context manager (:class:`RichProgress`)."""
    if isinstance(progress, contextlib.AbstractContextManager):
        with progress:
            return action()
    return action()


def _continue(
    state: RolloutState,
    path: Path,
    inventory: str,
    rollback: bool,
    emit: Emit,
    progress_factory: ProgressFactory | None,
    error: Emit = to_stderr,
) -> int:
    if rollback and state.kind == "restart":
        raise CommandError(
            f"restart {state.id} ({state.status}) changes no image: nothing to roll back; "
            f"`rocmfleet restart {inventory} --resume` finishes it (a failed host is restarted and gated again)"
        )
    targets = _load(inventory, None)
    missing = sorted(set(state.hosts) - set(targets))
    if missing:
        raise CommandError(f"hosts of rollout {state.id} are no longer in {inventory}: {', '.join(missing)}")
    targets = {name: targets[name] for name in state.hosts}
    if state.kind == "rollout" and state.target is not None and not rollback:
        targets = {name: _with_image(t, state.target) for name, t in targets.items()}
    runner, progress = _runner(state, path, targets, inventory, emit, progress_factory, error)
    if rollback:
        code = _drive(progress, lambda: runner.roll_back(None))
    elif state.status == "running":
        code = _drive(progress, runner.run)
    elif state.kind == "restart" and state.status == "failed":
        runner.retry_failed()
        code = _drive(progress, runner.run)
    elif state.status in ("failed", "rollback_failed"):
        code = _drive(progress, lambda: runner.roll_back(state.failure or "resumed rollback"))
    else:
        emit(f"{state.kind} {state.id} is {state.status}: nothing to resume")
        return 0
    return _finish(state, path, code, emit, error)


def _start(
    inventory: str, kind: Kind, image: str | None, canary: int, max_unavailable: str, force: bool,
    limit: list[str] | None, root: Path, path: Path, emit: Emit, progress_factory: ProgressFactory | None,
    error: Emit = to_stderr,
) -> int:  # fmt: skip
    from rocmfleet.config.groupdata_edit import IMAGE_KEYS, parse, unified_diff
    from rocmfleet.fleet.bench.bench import new_run_id
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.rollout import fleetrollout as fr

    if canary < 0:
        raise CommandError(f"--canary {canary}: must be >= 0")
    targets = _load(inventory, limit)
    fr.parse_max_unavailable(max_unavailable, len(targets))  # refused before any connection
    wanted_ref = resolve(image, targets) if image else None
    if wanted_ref:
        emit(f"{image} is {wanted_ref.digest} (resolved once; every host gets this digest)")
    observer = HostSteps(inventory, targets, root, "observe")

    def observe(name: str) -> tuple[str, list[InstanceStatus], str | None]:
        try:
            return name, observer.observe(name)[1], None
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            return name, [], step_failure(exc) if isinstance(exc, StepError) else f"{name}: {step_failure(exc)}"

    before: dict[str, ImageRef] = {}
    problems = []
    # `unknown`, not `error`: that name is the callback this function reports with (issue 24)
    for name, instances, unknown in _parallel(observe, list(targets)):
        ref, why = (None, None) if unknown else running_image(instances)
        if unknown:
            problems.append(unknown)
        elif ref is None:
            problems.append(f"{name}: {why}")
        else:
            before[name] = ref
    if problems:
        raise CommandError("cannot start: what these hosts run is unknown (deploy them first): " + "; ".join(problems))
    wanted: dict[str, ImageRef] = {}
    for name, t in targets.items():
        img = t.config.image
        wanted[name] = wanted_ref or ImageRef(repository=img.repository, tag=img.tag, digest=img.digest)
    if kind == "restart":
        hosts = list(targets)
        target = None
    else:
        hosts = [n for n in targets if wanted[n].digest != before[n].digest]
        distinct = {wanted[n].reference for n in hosts}
        if len(distinct) > 1:
            raise CommandError(
                f"the hosts want different images ({', '.join(sorted(distinct))}); roll out one at a time with --limit"
            )
        target = wanted[hosts[0]] if hosts else wanted_ref
        if not hosts:
            emit(f"every host already runs {target.reference if target else 'what the data says'}: nothing to roll out")
            if not wanted_ref:
                return 0
    emit(f"preflight: rocmfleet check --select vllm on {len(hosts)} host(s)")
    current = [_with_image(targets[n], before[n]) for n in hosts]
    results = compliance.run_fleet(current, ["vllm"], CHECK_TIMEOUT_S)
    failing = [compliance.line(r) for r in results if r.outcome not in ("passed", "skipped")]
    if failing:
        for line in failing:
            error(line)
        if not force:
            raise CommandError(f"{len(failing)} check(s) fail on the fleet before the {kind}; fix them or pass --force")
        emit("--force: starting on a failing fleet")
    data_edit = None
    if wanted_ref is not None:
        file, old, new = _data_file(wanted_ref)
        if new != old:
            emit(unified_diff(old, new, str(file)))
            file.write_text(new)
            previous = parse(old, str(file))
            data_edit = fr.DataEdit(
                path=str(file),
                before={k: (str(previous[k]) if k in previous else None) for k in IMAGE_KEYS},
                after=wanted_ref.data(),
            )
        reloaded = _load(inventory, limit)
        wrong = [n for n, t in reloaded.items() if t.config.image.digest != wanted_ref.digest]
        if wrong:
            if data_edit is not None:
                file.write_text(old)
            raise CommandError(
                f"{file} now pins {wanted_ref.digest}, but {', '.join(wrong)} still get another image from data that "
                f"wins over it (host data or the inventory file); {file} was put back"
            )
        targets = reloaded
        if not hosts:
            return 0
    count = fr.parse_max_unavailable(max_unavailable, len(hosts))
    batches = fr.plan_batches(hosts, canary, count)
    index = {h: i for i, batch in enumerate(batches) for h in batch}
    state = fr.RolloutState(
        id=new_run_id(),
        kind=kind,
        inventory=inventory,
        target=target,
        canary=min(canary, len(hosts)),
        max_unavailable=count,
        batches=batches,
        hosts={h: fr.HostState(batch=index[h], before=before[h], after=target or before[h]) for h in hosts},
        data_edit=data_edit,
    )
    fr.save_state(state, path)
    emit(
        f"{kind} {state.id}: {len(hosts)} host(s) in {len(batches)} batch(es), "
        f"at most {count} out of service; state {path}"
    )
    runner, progress = _runner(state, path, {h: targets[h] for h in hosts}, inventory, emit, progress_factory, error)
    return _finish(state, path, _drive(progress, runner.run), emit, error)


def status(
    inventory: str, limit: list[str] | None = None, results_dir: str | None = None
) -> tuple[list[InstanceStatus], RolloutState | None]:
    """``rocmfleet status``: every instance of every host (unit, image, ready, uptime) and any rollout recorded."""
    from rocmfleet.fleet.rollout import fleetrollout as fr

    targets = _load(inventory, limit)
    steps = HostSteps(inventory, targets, Path("."), "status")

    def one(name: str) -> list[InstanceStatus]:
        try:
            _now, instances, _started = steps.observe(name)
            ready = steps.ready(name)
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            return [InstanceStatus(name, "-", "unknown", "unknown", None, None, None, step_failure(exc))]
        return [replace(i, ready=ready.get(i.instance)) for i in instances]

    rows = [row for rows in _parallel(one, list(targets)) for row in rows]
    return rows, fr.load_state(fr.state_path(fr.results_root(results_dir, inventory), inventory))
