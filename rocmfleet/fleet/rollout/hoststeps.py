"""The rollout's steps on real hosts (:class:`HostSteps`), and what a host's vLLM instances run now.

* **switch** and **rollback** run the deploy itself, ``pyinfra -y --limit HOST --data
  vllm_image_repository=... --data vllm_image_tag=... --data vllm_image_digest=... INVENTORY
  deploy.py``: the vllm role pulls, checks the arguments with the new image's parser, swaps,
  waits until ready and rolls a host that never gets ready back on its own. There is no second
  implementation of the swap here. Its environment carries
  :data:`~rocmfleet.fleet.rollout.state.OWN_DEPLOY_ENV`, which lets it past the inventory's guard
  against deploys during a rollout.
* **pull** (``docker pull`` of the pinned reference), **drain**/**undrain** (the watchdog's hold
  set or removed, :mod:`rocmfleet.domain.watchdog`, and the group data's
  ``vllm_drain_command``/``vllm_undrain_command``), **observe** (``rocmfleet/scripts/vllm-status.sh``)
  and the rolling restart's unit restart and wait (the deploy's own ``rocmfleet/scripts/vllm-wait.sh``
  with the deploy's targets, :func:`rocmfleet.plan.swap.wait_targets`, on stdin) go over
  :mod:`rocmfleet.fleet.connect`. A restart that fails leaves its host drained and marked ``failed``
  (nothing to roll back); ``--resume`` restarts and gates it again.
* **check** is ``rocmfleet check --select gpu,vllm`` on the one host (``gpu,vllm,cache`` when the image
  is baked: a cache miss fails the gate,
  :func:`rocmfleet.fleet.check.compliance.gate_modules`), **bench** the smoke benchmark,
  results under the rollout's directory: the rollout command passes them in (:data:`HostCheck`,
  :data:`HostBench`; :func:`rocmfleet.fleet.check.compliance.vllm_failures` and
  :func:`rocmfleet.fleet.bench.benchrun.gate_results`), so these steps need not load the check
  suite or the benchmark.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from rocmfleet import project, scripts
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import watchdog
from rocmfleet.domain.readiness import probe_script
from rocmfleet.domain.vllmfiles import files_of
from rocmfleet.fleet.bench.bench import BenchResult, Thresholds
from rocmfleet.fleet.bench.client import RUN, BenchClient
from rocmfleet.fleet.connect import Result, Session, reachable
from rocmfleet.fleet.rollout.instancestatus import InstanceStatus, parse_status
from rocmfleet.fleet.rollout.progress import Emit
from rocmfleet.fleet.rollout.state import OWN_DEPLOY_ENV, ImageRef
from rocmfleet.fleet.rollout.steps import StepError
from rocmfleet.fleet.target import Target
from rocmfleet.plan.swap import wait_or_roll_back_script, wait_targets

#: The packaged deploy file (``rocmfleet/deploy.py``: :func:`rocmfleet.converge.converge`), the same two
#: lines a site's ``deploy.py`` holds; a rollout converges each host with it, whatever else a site adds.
DEPLOY_FILE = project.DEPLOY_FILE
#: Seconds a ``docker pull`` may take (a vLLM ROCm image is 20-30 GB).
PULL_TIMEOUT_S = 3600
#: Seconds a deploy may take beyond the host's ``vllm_ready_timeout_s`` (pull, argument check, files).
DEPLOY_MARGIN_S = 1800
#: Seconds between readiness polls of a rolling restart.
POLL_S = 5
#: ``{host: Target}`` with each host's whole configuration, as the rollout takes them.
HostTargets = Mapping[str, Target[HostConfig]]
#: ``check(target, timeout_s) -> lines``: ``rocmfleet check --select gpu,vllm`` (and ``cache`` for a
#: baked image) on one host within ``timeout_s`` seconds, one ``check: outcome: message`` line per
#: check that neither passed nor was skipped (empty: it passes).
HostCheck = Callable[[Target[HostConfig], float], list[str]]
#: ``bench(target, directory, timeout_s, emit, client) -> (error, results, errors)``: the smoke
#: benchmark of one host run by ``client``, its results under ``directory``: ``error`` when the
#: host could not be benchmarked at all (else ``None``), ``{"<target>:<case>": result}`` of the cases that gave one, and
#: ``"<target>:<case>: <error>"`` of those that did not.
HostBench = Callable[
    [Target[HostConfig], Path, float, Emit, BenchClient], tuple[str | None, dict[str, BenchResult], list[str]]
]

#: Seconds a rolling restart's wait may take beyond ``vllm_ready_timeout_s`` (its logs, its end).
WAIT_MARGIN_S = 120
#: Seconds between the checks that a host being deployed still answers SSH.
HEARTBEAT_S = 15
#: Failed checks in a row after which a host counts as lost and its deploy is stopped.
LOST_AFTER = 2
#: The check that fails when a host does not answer SSH (rocmfleet.fleet.check.compliance.REACHABLE).
REACHABLE = "host::reachable"
#: Seconds ``rocmfleet status`` waits for an instance's known answer: a wedged engine (``/health``
#: 200, no answer) is "not ready" within the 30 s issue 26 asks, not after the probe's 60.
STATUS_ANSWER_S = 15
#: Seconds ``rocmfleet check --select gpu,vllm`` may take on one host.
CHECK_TIMEOUT_S = 300
#: A benchmark case's error that says the client, not the server, failed
#: (rocmfleet.fleet.bench.benchrun.run_case: the host's deadline, the SSH connection).
CLIENT_FAILURES = ("timed out", "not run: the host's --timeout-s ran out", "connection lost:")


def _tail(text: str, lines: int = 6) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def _die_with_parent() -> None:
    """``preexec_fn`` of a deploy: it gets SIGTERM when the rollout process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``, ``PR_SET_PDEATHSIG`` = 1 in ``linux/prctl.h``), so a killed
    rollout leaves no deploy running on its own that ``--resume`` or ``--rollback`` would race."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


class HostSteps:
    """:class:`Steps` on real hosts, over :mod:`rocmfleet.fleet.connect` and the deploy.

    Args:
        inventory: the inventory file (for the deploy and for reloading targets).
        targets: ``{host: Target}`` as :func:`rocmfleet.fleet.inventory.load_fleet` gives them, with the
            data the hosts should end with (after a group data edit, reloaded).
        run_dir: where benchmark results go (``bench/before``, ``bench/after``).
        rollout_id: put in the deploys' environment (:data:`~rocmfleet.fleet.rollout.state.OWN_DEPLOY_ENV`).
        bench_timeout_s: seconds each host's benchmark may take.
        emit: where the deploy's and benchmark's lines go (a log file, not the console).
        check: the check step (:data:`HostCheck`); ``None`` where the steps only observe
            (``rocmfleet status``): :meth:`check` then fails with a :class:`StepError`.
        bench: the benchmark step (:data:`HostBench`); ``None``: :meth:`bench` fails likewise.
    """

    def __init__(
        self,
        inventory: str,
        targets: Mapping[str, Target[HostConfig]],
        run_dir: Path,
        rollout_id: str,
        bench_timeout_s: float = 1800,
        emit: Emit = lambda line: None,
        check: HostCheck | None = None,
        bench: HostBench | None = None,
    ) -> None:
        self.inventory, self.targets, self.run_dir, self.rollout_id = inventory, dict(targets), run_dir, rollout_id
        self.bench_timeout_s, self.emit = bench_timeout_s, emit
        self._check, self._bench = check, bench
        self._held: dict[str, Session] = {}

    # -- SSH helpers --
    @contextlib.contextmanager
    def connected(self, host: str, gate: str = "observe") -> Iterator[None]:
        """Hold one connection to ``host`` while the block runs: every step of ``host`` inside it
        runs its commands over that connection (``rocmfleet status``: one per host per command);
        outside, each step opens its own.

        Raises:
            StepError: ``gate``, when ``host`` cannot be connected to.
        """
        try:
            session = Session.open(self.targets[host].ssh)
        except Exception as exc:  # noqa: BLE001 - unreachable, refused, broken: the step failed
            raise StepError(gate, f"{host}: {type(exc).__name__}: {exc}") from None
        self._held[host] = session
        try:
            yield
        finally:
            self._held.pop(host, None)
            session.close()

    def _run(self, host: str, command: str, timeout_s: float, gate: str, stdin: str | None = None) -> Result:
        try:
            held = self._held.get(host)
            if held is not None:
                result = held.run(command, timeout_s=timeout_s, stdin=stdin)
            else:
                with Session.open(self.targets[host].ssh) as session:
                    result = session.run(command, timeout_s=timeout_s, stdin=stdin)
        except Exception as exc:  # noqa: BLE001 - unreachable, timed out, broken: this step failed
            # SSH, not the image: the gate could not run (inconclusive)
            raise StepError(gate, f"{host}: {type(exc).__name__}: {exc}", inconclusive=True) from None
        if result.exit_status == -1:
            # No exit status came: sshd's session ended under the command (a host powering off
            # kills it by signal; paramiko's recv_exit_status gives -1 for "none sent"). The
            # host, not the image: the gate could not run (inconclusive).
            why = _tail(result.stderr)
            raise StepError(gate, f"{host}: the session ended with no exit status: {why}", inconclusive=True)
        return result

    def run(self, host: str, command: str, timeout_s: float, gate: str) -> Result:
        """``command`` on ``host`` (over the connection :meth:`connected` holds, if any); never
        raises on its exit status.

        Raises:
            StepError: ``gate``, inconclusive, when the host cannot be connected to, the command
                timed out or the connection broke.
        """
        return self._run(host, command, timeout_s, gate)

    def observe(
        self, host: str, gate: str = "observe"
    ) -> tuple[float | None, list[InstanceStatus], dict[str, float | None]]:
        """The host's clock, its instances now and their containers' start times (no readiness);
        a failure is ``gate``'s."""
        names = [i.name for i in self.targets[host].config.instances()]
        result = self._run(host, scripts.command("vllm-status.sh", *names), 60, gate)
        if result.exit_status != 0:
            raise StepError(gate, f"{host}: vllm-status.sh exited {result.exit_status}: {_tail(result.stderr)}")
        return parse_status(host, result.stdout)

    def ready(self, host: str) -> dict[str, str | None]:
        """Per instance, ``None`` when it is ready now, else why not, one line (the deploy's own
        probe, one try, with the profile's known-answer request where it has one:
        ``ready_probe``; a request unanswered after :data:`STATUS_ANSWER_S` seconds is not ready:
        a wedged engine)."""
        config = self.targets[host].config
        model = config.profile.served_model_name or config.profile.model
        out: dict[str, str | None] = {}
        for instance in config.instances():
            container = files_of(instance).container
            probe = probe_script(instance.port, model, container, config.profile.ready_probe, STATUS_ANSWER_S)
            result = self._run(host, probe, 60, "readiness")
            why = _tail(result.stderr, 1) if result.stderr.strip() else f"probe exited {result.exit_status}"
            out[instance.name] = None if result.exit_status == 0 else why[:300]
        return out

    # -- steps --
    def pull(self, host: str, image: ImageRef) -> None:
        result = self._run(host, f"docker pull --quiet {shlex.quote(image.reference)}", PULL_TIMEOUT_S, "pull")
        if result.exit_status != 0:
            # The registry or the host's way to it: the pinned digest was resolved when the rollout started.
            raise StepError(
                "pull",
                f"docker pull {image.reference} exited {result.exit_status}: {_tail(result.stderr)}",
                inconclusive=True,
            )

    def _hook(self, host: str, which: str) -> None:
        """The host's drain or undrain: the watchdog's hold (:data:`rocmfleet.domain.watchdog.HOLD_FILE`)
        set or removed, then the group data's hook, in one command."""
        settings = self.targets[host].config.settings
        command = getattr(settings, f"vllm_{which}_command")
        if which == "drain":
            # Until the host's gate is over: its deploy, its readiness wait, its benchmarks and check.
            # (three benchmarks: before, after and a second after; the check; their retries)
            hold_s = (
                settings.vllm_ready_timeout_s + DEPLOY_MARGIN_S + int(3 * self.bench_timeout_s) + 2 * CHECK_TIMEOUT_S
            )
            hold_s += 600
            hold = (
                f"mkdir -p {watchdog.STATE_DIR} && echo $(($(date +%s) + {hold_s})) "
                f"{shlex.quote(self.rollout_id)} > {watchdog.HOLD_FILE}"
            )
        else:
            hold = f"rm -f {watchdog.HOLD_FILE}"
        if not command:
            result = self._run(host, hold, 60, which)
            if result.exit_status != 0:
                raise StepError(which, f"{hold} exited {result.exit_status}: {_tail(result.stderr)}", inconclusive=True)
            return
        ports = ",".join(str(i.port) for i in self.targets[host].config.instances())
        line = f"{hold} && ROCMFLEET_HOST={shlex.quote(host)} ROCMFLEET_PORTS={ports} sh -c {shlex.quote(command)}"
        result = self._run(host, line, settings.vllm_drain_timeout_s, which)
        if result.exit_status != 0:
            raise StepError(
                which,
                f"vllm_{which}_command exited {result.exit_status}: {_tail(result.stderr or result.stdout)}",
                inconclusive=True,  # the load balancer's hook, not the image
            )

    def drain(self, host: str) -> None:
        self._hook(host, "drain")

    def undrain(self, host: str) -> None:
        self._hook(host, "undrain")

    def client(self, host: str) -> BenchClient:
        """The one benchmark client of ``host``'s runs before and after its switch: the image the
        host is moved to (its targets carry the data it ends with; a restart's is its own), run
        in a container of its own (:data:`rocmfleet.fleet.bench.client.RUN`), with that image's
        vLLM version (its profile's ``vllm_version``)."""
        config = self.targets[host].config
        return BenchClient(config.image.reference, config.profile.vllm_version, RUN)

    def bench(self, host: str, label: str) -> tuple[dict[str, BenchResult], list[str]]:
        if self._bench is None:
            raise StepError("benchmark", f"{host}: no benchmark step given to these host steps")
        error, results, errors = self._bench(
            self.targets[host], self.run_dir / "bench" / label, self.bench_timeout_s, self.emit, self.client(host)
        )
        if error:
            raise StepError("benchmark", f"{label} the switch: {error}", inconclusive=True)
        client = [e for e in errors if e.partition(": ")[2].startswith(CLIENT_FAILURES)]
        if client:  # the benchmark client could not run to its end: nothing to judge the image by
            raise StepError("benchmark", f"{label} the switch: " + "; ".join(client), inconclusive=True)
        return results, errors

    def thresholds(self, host: str) -> Thresholds:
        thresholds: Thresholds = self.targets[host].config.profile.bench.thresholds
        return thresholds

    def _deploy(self, host: str, image: ImageRef | None, gate: str) -> float:
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
            # Not ready, or rolled back by the deploy: the image's verdict. Anything else on a host
            # that no longer answers SSH is the host's, not the image's.
            lost = None if said else reachable(self.targets[host].ssh, HEARTBEAT_S)
            raise StepError(
                kind,
                f"deploy of {image.reference if image else 'the same image'} exited {proc.returncode}: {why}"
                + (f" ({host} does not answer SSH: {lost})" if lost else ""),
                inconclusive=bool(lost),
            )
        return started

    def _watch(self, host: str, proc: subprocess.Popen[str], timeout_s: float, gate: str) -> tuple[str, str]:
        """Wait for the deploy ``proc``, asking every :data:`HEARTBEAT_S` seconds whether ``host``
        still answers SSH (:func:`rocmfleet.fleet.connect.reachable`). A host that does not answer
        :data:`LOST_AFTER` times in a row (powered off, cut off) stops the deploy: pyinfra's own
        connection to a dead host would wait for the kernel's TCP retries (about 15 minutes).

        Raises:
            StepError: inconclusive: the deploy ran past ``timeout_s`` (its own readiness wait ends
                sooner: something else hung) or the host stopped answering.
        """
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
                raise StepError(gate, why, inconclusive=True)

    def switch(self, host: str, image: ImageRef | None) -> dict[str, float]:
        """The deploy (``image``) or, for a rolling restart (``None``), a restart of the units and
        the deploy's readiness probe until ready. Returns ``restart`` and ``readiness`` seconds:
        from the start to the containers' start (host clock, corrected by the observed offset),
        and from there to ready."""
        if image is None:
            return self._restart(host)
        before_now = time.time()
        host_now, _instances, _started = self.observe(host, "switch")
        offset = (host_now - before_now) if host_now is not None else 0.0
        started = self._deploy(host, image, "switch")
        ended = time.time()
        _now, _instances, starts = self.observe(host, "switch")
        first = min((s for s in starts.values() if s is not None), default=None)
        if first is None or not started <= first - offset <= ended:
            return {"restart": ended - started}
        return {"restart": first - offset - started, "readiness": ended - (first - offset)}

    def _restart(self, host: str) -> dict[str, float]:
        """Restart the host's vLLM units, then wait as the deploy waits: ``vllm-wait.sh`` with every
        instance (:func:`rocmfleet.plan.swap.wait_targets`: known answer, warm-up; a unit systemd
        shows failed or a wrong answer is given up at once) and nothing to roll back to (a restart
        changes nothing to go back from). Its targets go on stdin.

        Raises:
            StepError: ``switch`` when the restart failed, ``readiness`` when an instance was not
                ready by ``vllm_ready_timeout_s`` (the wait's own report, with the logs, in the message).
        """
        config = self.targets[host].config
        targets = wait_targets(config)
        units = " ".join(shlex.quote(t.unit) for t in targets)
        started = time.monotonic()
        # reset-failed first: a unit the watchdog left failed, or one at its start limit, is what a
        # person restarts; the restart is theirs, not one more crash (systemctl(1), reset-failed).
        result = self._run(host, f"systemctl reset-failed {units}; systemctl restart {units}", 300, "switch")
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
        if self._check is None:
            raise StepError("check", f"{host}: no check step given to these host steps")
        lines = self._check(self.targets[host], CHECK_TIMEOUT_S)
        # None ran to a verdict (every check an error: a timeout), or the host did not answer SSH:
        # the check could not judge the image.
        outcomes = [line.split(": ", 2)[1] if line.count(": ") >= 1 else "" for line in lines]
        unreachable = any(line.startswith(f"{REACHABLE}: ") for line in lines)
        if lines and (unreachable or all(o == "error" for o in outcomes)):
            raise StepError("check", "; ".join(lines), inconclusive=True)
        return lines

    def rollback(self, host: str, image: ImageRef) -> None:
        before = self.targets[host]
        target = before.config
        image_config = target.image.model_copy(
            update={"repository": image.repository, "tag": image.tag, "digest": image.digest}
        )
        self.targets[host] = replace(before, config=replace(target, image=image_config))
        self._deploy(host, image, "rollback")
