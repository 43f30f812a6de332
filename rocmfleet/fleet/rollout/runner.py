"""The rollout runner: :class:`Runner` takes a :class:`~rocmfleet.fleet.rollout.state.RolloutState`
through its batches, or back, with a :class:`Steps` object, and writes the state file after every step.

A host's gate has one of three verdicts (``docs/fleet.md``, the rollout's step 4):

* **pass**: the host is done and serves the new image;
* **fail**: a verdict against the image (never ready, a wrong known answer, failed checks,
  slower than the gate allows): the batch fails and the runner rolls back (a rollout) or stops (a
  rolling restart), exit status 1;
* **inconclusive**: the step could not judge the image (:attr:`StepError.inconclusive`: the
  registry, SSH, the drain or undrain hook, the benchmark client): the host's step is retried
  ``retries`` times with a doubling back-off from ``backoff_s``; when they run out and no host
  of the batch failed, the rollout **pauses** (status ``paused``, exit status 3): hosts that
  passed keep the new image, hosts drained but not switched are undrained, and ``--resume``
  continues from where each host stands. This is Argo Rollouts' and Flagger's split between
  "the analysis failed" and "the analysis could not run"
  (https://argo-rollouts.readthedocs.io/en/stable/features/analysis/, "inconclusive").

With ``rollout --soak`` (:mod:`rocmfleet.fleet.rollout.soak`) the canary's hosts (or each
batch's, ``--soak-batches``) go from their gate to ``soaking``: back in service on the new image
while the rollout holds, for the soak's duration; then the soak's verdict is the batch's, as a
gate's: pass (``done``, the next batch starts), fail (rolled back), inconclusive (retried, each
time a whole soak, then paused; ``--resume`` soaks them again).

A host's step that raises anything else counts as a failure. The runner returns an exit status:
it never raises a host's failure. The steps on real hosts are
:class:`rocmfleet.fleet.rollout.hoststeps.HostSteps`; tests pass stand-ins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rocmfleet.fleet.bench.bench import BenchParseError, BenchResult, load_result
from rocmfleet.fleet.rollout.batches import eta_s, rollback_groups
from rocmfleet.fleet.rollout.gate import GateOutcome, bench_numbers, gate_decision
from rocmfleet.fleet.rollout.progress import Progress
from rocmfleet.fleet.rollout.report import left_drained, paused_note
from rocmfleet.fleet.rollout.soak import SoakStep, announce, outcome_of, soak_points, soaked_batches, summary
from rocmfleet.fleet.rollout.state import FAILED, SERVING_STEPS, RolloutState, Step, save_state
from rocmfleet.fleet.rollout.steps import BACKOFF_S, PAUSED_EXIT, RETRIES, StepError, Steps, step_failure


class Runner:
    """Takes a rollout through its batches, or back (:meth:`roll_back`); thread-safe state writes.

    Args:
        state: the rollout, as planned or as loaded for ``--resume``/``--rollback``.
        path: its state file.
        steps: what to do on a host.
        progress: where to say it.
        on_data_revert: called once when a failed or rolled-back rollout must put the group
            data file back (the runner does not edit files itself).
        retries: retries of an inconclusive step (:data:`RETRIES`), ``>= 0``.
        backoff_s: seconds before the first retry, doubled for each next one (:data:`BACKOFF_S`).
        sleep: how to wait (tests pass a stand-in).
        soak: the soak step (``state.soak`` set): :class:`rocmfleet.fleet.rollout.soakmetrics.MetricsSoak`
            on real hosts; ``None`` with a soak planned makes every soak inconclusive.
        soak_source: the Prometheus URL the soak reads, or ``None`` (the instances' ``/metrics``):
            for the progress line.
    """

    def __init__(
        self,
        state: RolloutState,
        path: Path,
        steps: Steps,
        progress: Progress,
        on_data_revert: Callable[[], None] | None = None,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
        sleep: Callable[[float], None] = time.sleep,
        soak: SoakStep | None = None,
        soak_source: str | None = None,
    ) -> None:
        self.state, self.path, self.steps, self.progress = state, path, steps, progress
        self.on_data_revert = on_data_revert
        self.retries, self.backoff_s, self.sleep = max(0, retries), backoff_s, sleep
        self.soak, self.soak_source = soak, soak_source
        #: Set once a batch failed or paused: a pre-pull of the next batch stops retrying.
        self._stopping = threading.Event()
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
            for attempt in range(self.retries + 1):
                try:
                    self.steps.pull(host, image)
                    failures.pop(host, None)
                    break
                except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
                    failures[host] = step_failure(exc)
                    if attempt < self.retries and not self._stopping.is_set():
                        self._wait_to_retry(host, "pull", failures[host], attempt)
                    else:
                        break
            self._time(host, "pull", time.monotonic() - started)
        return failures

    def _wait_to_retry(self, host: str, gate: str, why: str, attempt: int) -> None:
        """Say why ``host``'s ``gate`` is tried again, and wait :attr:`backoff_s` * 2**attempt."""
        delay = self.backoff_s * 2**attempt
        self.progress.say(f"{host}: {gate} inconclusive ({why}); retry {attempt + 1} of {self.retries} in {delay:g} s")
        self.sleep(delay)

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
                self._set(host, None, bench=bench_numbers(before, after, self.steps.thresholds(host)))
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
                soaks = h.batch in soaked_batches(self.state)  # in service, judged by its batch's soak
                self._set(host, "soaking" if soaks else "done", error=None)
        except StepError as exc:
            gate = "readiness" if exc.gate == "readiness" else exc.gate or gate
            self._set(host, None, error=f"{gate}: {exc}")
            return GateOutcome(passed=False, gate=gate, reasons=[str(exc)], inconclusive=exc.inconclusive)
        except Exception as exc:  # noqa: BLE001 - anything else on one host fails the batch, not the runner
            self._set(host, None, error=f"{gate}: {type(exc).__name__}: {exc}")
            return GateOutcome(passed=False, gate=gate, reasons=[f"{type(exc).__name__}: {exc}"])
        return GateOutcome(passed=True)

    def _host_retried(self, host: str) -> GateOutcome:
        """:meth:`_host`, again from where the host stands after each inconclusive outcome (every
        step resumes from the host's recorded step), up to :attr:`retries` times per step: a host
        that got further before its next inconclusive step starts counting again."""
        attempt, where = 0, self.state.hosts[host].step
        while True:
            outcome = self._host(host)
            if outcome.passed or not outcome.inconclusive:
                return outcome
            if self.state.hosts[host].step != where:
                attempt, where = 0, self.state.hosts[host].step
            if attempt >= self.retries:
                return outcome
            self._wait_to_retry(host, outcome.gate or "step", "; ".join(outcome.reasons), attempt)
            attempt += 1

    def run(self) -> int:
        """Run the remaining batches; on the first failure roll back (:meth:`roll_back`).

        Returns:
            0 when every host is done; 1 when a host failed (after the rollback, or a rolling
            restart's stop); :data:`PAUSED_EXIT` when the batch's failures were all inconclusive
            after their retries (:meth:`_pause`).
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
                    failed[host] = GateOutcome(passed=False, gate="pull", reasons=[why], inconclusive=True)
                if not failed:
                    outcomes = dict(zip(hosts, pool.map(self._host_retried, hosts), strict=True))
                    failed = {h: o for h, o in outcomes.items() if not o.passed}
                    for host in hosts:
                        self.progress.host_done(host, host not in failed)
                if not failed:
                    soaked, outcome = self._soak(index)
                    if not outcome.passed:
                        failed = {", ".join(soaked): outcome}
                if failed:
                    self._stopping.set()  # the next batch's pre-pull retries no more
                    for future in self._pulls.values():
                        future.result()
                    said = {True: "inconclusive", False: "failed"}
                    reasons = [
                        f"{h}: {o.gate} gate {said[o.inconclusive]}: " + "; ".join(o.reasons) for h, o in failed.items()
                    ]
                    if all(o.inconclusive for o in failed.values()):
                        return self._pause(list(failed), "; ".join(reasons))
                    if self.state.kind == "restart":
                        return self._stop(list(failed), "; ".join(reasons))
                    return self.roll_back("; ".join(reasons))
        with self._lock:
            self.state.status = "done"
            self.state.failure = None
            save_state(self.state, self.path)
        self.progress.say(f"{self.state.kind} {self.state.id}: every host done")
        return 0

    def _soak(self, index: int) -> tuple[list[str], GateOutcome]:
        """The soak after batch ``index``, if one runs there (:func:`~rocmfleet.fleet.rollout.soak.soak_points`):
        its hosts (``soaking``) against the hosts not yet switched (``pending``), retried like an
        inconclusive step (each retry a whole soak); ``done`` when it passes. Its result is
        recorded (``state.soaks``), each soaked host's ``error`` says a failure.

        Returns:
            The soaked hosts and the outcome (gate ``soak``); ``([], pass)`` where no soak runs.
            A batch's ``soaking`` hosts that no soak covers any more (``--resume`` without
            ``--soak-batches``) are ``done``.
        """
        covered = soak_points(self.state).get(index)
        if covered is None or self.state.soak is None:
            if index not in soaked_batches(self.state):
                for host in [h for h in self.state.batches[index] if self.state.hosts[h].step == "soaking"]:
                    self._set(host, "done")
            return [], GateOutcome(passed=True)
        hosts = [h for i in covered for h in self.state.batches[i] if self.state.hosts[h].step == "soaking"]
        if not hosts:  # soaked before (a --resume after its pass)
            return [], GateOutcome(passed=True)
        others = [name for name, h in self.state.hosts.items() if h.step == "pending" and name not in hosts]
        duration = self.state.soak.duration_s
        attempt = 0
        while True:
            for host in hosts:
                self.progress.step(host, "soaking")
            self.progress.say(announce(hosts, others, duration, self.soak_source))
            started = time.monotonic()
            if self.soak is None:
                outcome = GateOutcome(passed=False, gate="soak", reasons=["no soak step given"], inconclusive=True)
            else:
                try:
                    result = self.soak(hosts, others, duration)
                except Exception as exc:  # noqa: BLE001 - the soak could not run: not the image's verdict
                    outcome = GateOutcome(passed=False, gate="soak", reasons=[step_failure(exc)], inconclusive=True)
                else:
                    outcome = outcome_of(result)
                    with self._lock:
                        self.state.soaks[str(index)] = result
                    self.progress.say(summary(result))
            for host in hosts:
                self._time(host, "soak", time.monotonic() - started)
            said = "failed" if not outcome.inconclusive else "inconclusive"
            why = None if outcome.passed else f"soak gate {said}: " + "; ".join(outcome.reasons)
            for host in hosts:
                self._set(host, None, error=why)
            if outcome.passed or not outcome.inconclusive or attempt >= self.retries:
                break
            self._wait_to_retry(", ".join(hosts), "soak", "; ".join(outcome.reasons), attempt)
            attempt += 1
        if outcome.passed:
            for host in hosts:
                self._set(host, "done")
        return hosts, outcome

    def _pause(self, hosts: Sequence[str], reason: str) -> int:
        """Pause: the batch's ``hosts`` could not be judged (every failure inconclusive, retries
        spent). Hosts drained but not yet switched are undrained (they serve what they ran);
        a host on the new image but not gated stays drained; hosts done stay done. The state says
        ``paused`` and why; ``--resume`` continues each host from its step.

        Returns:
            :data:`PAUSED_EXIT`.
        """
        for host in [h for h in hosts if h in self.state.hosts]:
            if self.state.hosts[host].step == "drained":
                try:
                    self.steps.undrain(host)
                    self._set(host, "pending")
                except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
                    self.progress.say(f"{host}: left drained: undrain: {step_failure(exc)}")
        with self._lock:
            self.state.status = "paused"
            self.state.failure = reason
            save_state(self.state, self.path)
        done = [h for h, s in self.state.hosts.items() if s.step == "done"]
        kept = f"; {len(done)} host(s) that passed keep the new image" if done and self.state.target else ""
        self.progress.say(f"{self.state.kind} {self.state.id}: paused, nothing rolled back: {reason}{kept}")
        self.progress.say(paused_note(self.state))
        return PAUSED_EXIT

    def resume_paused(self) -> None:
        """``--resume`` of a paused rollout or restart: ``running`` again, each host's error cleared;
        :meth:`run` continues every host from its step."""
        with self._lock:
            for host in self.state.hosts.values():
                host.error = None
            self.state.status = "running"
            self.state.failure = None
            save_state(self.state, self.path)

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
        results = {}
        for key, path in self.state.hosts[host].baseline.items():
            try:
                results[key] = load_result(path)
            except BenchParseError as exc:
                self.progress.say(f"{host}: baseline {key} unreadable ({exc}): not compared")
        return results

    # --- back ---------------------------------------------------------------------------------

    def roll_back(self, reason: str | None = None) -> int:
        """Return every touched host to its image before (in groups within the rollout's bounds), undrain
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
        # a service's bound out at once, and no vLLM restarts while a load balancer sends it traffic.
        touched = sorted(self.state.touched(), key=lambda name: self.state.hosts[name].step in SERVING_STEPS)
        problems = []
        replicas = {name: h.replicas for name, h in self.state.hosts.items()}
        bounds = {name: b.max_unavailable for name, b in self.state.services.items()}
        for group in rollback_groups(touched, replicas, bounds, self.state.max_unavailable):
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
        if h.step in SERVING_STEPS:
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
