"""``rocmfleet check``: run the packaged testinfra checks against every host of an inventory.

The inventory is loaded and validated once, here (:func:`rocmfleet.fleet.inventory.load_fleet`).
Before the suite, one connection per host running ``true`` decides whether the host is reachable
at all (``--parallel`` hosts at a time): an unreachable host is one failed check,
``host::reachable``, not a page of connection errors. The same connection reads the facts the
host's plan is made on (its GPU topology, device group ids, OS:
:func:`rocmfleet.fleet.check.hostplan.reach_and_read`), and the host is planned here
(the caller's :class:`Planning`: :class:`rocmfleet.fleet.check.hostplan.HostPlanning` on
:func:`rocmfleet.plan.build.plan_host`). The reachable hosts are then dealt, in
inventory order, into at most ``--parallel`` ``pytest`` processes (:func:`groups`), run at once:
one process checks its hosts in turn (testinfra's ``--hosts``, one module-scoped parameter per
host), so the cost of starting pytest and importing the suite is paid once per process, not once
per host. Each process gets only its hosts' SSH settings and plans
(:func:`rocmfleet.fleet.check.checkfile.check_input`, a 0600 file; secrets by name only; never the
configuration), reaches each host over one SSH session of :mod:`rocmfleet.fleet.connect`
(testinfra backend ``rocmfleet://``, :mod:`rocmfleet.fleet.check.backend`) with the inventory's
sudo settings, and gives each host its own deadline: ``timeout_s`` seconds of command time.
Results are read as the process writes them (:mod:`rocmfleet.fleet.check.report`) and each host
is reported as soon as its last check ends (:class:`Collator`).

Outcomes: ``passed``, ``failed`` (the host is not as the inventory says), ``skipped`` (with the
reason) and ``error`` (the check could not be made: an empty or unreadable source, output of an
unknown format, sudo refused, the host's deadline spent); an error counts as a failure for the
exit status, never as a pass.

Check names are ``<module>::<check>[<instance>]``, e.g. ``tuning::numa_balancing_persisted``
or ``vllm::container_image_digest[tiny-llama-a]`` (from ``rocmfleet/fleet/check/test_<module>.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from rocmfleet.config.connection import SshSettings
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import cachedirs
from rocmfleet.fleet import check as checks
from rocmfleet.fleet.check import backend, checkfile, report
from rocmfleet.fleet.target import Target
from rocmfleet.plan.model import HostPlan
from rocmfleet.plan.sources import HostFacts

#: Modules of the suite, in the order they run (``rocmfleet/fleet/check/test_<name>.py``); all by
#: default. ``metrics`` (each instance's and the exporter's ``/metrics`` and their families) is one
#: command per host: what Prometheus and the dashboard need is part of "is this host as deployed".
#: ``drift`` asserts every role's items of the host's plan are as wanted (:mod:`rocmfleet.plan.hostdrift`).
MODULES = ("rocm", "tuning", "docker", "gpu", "vllm", "drift", "cache", "metrics", "cvs")
#: What a rollout checks before it starts and in each host's gate: a host whose GPUs fail their
#: health is never undrained (issue 26). The gate adds :data:`BAKED_GATE_MODULES` for a baked image
#: (:func:`gate_modules`).
GATE_MODULES = ("gpu", "vllm")
#: What a host's gate adds when the image it switched to is baked: its key matches, and its cache
#: was used (``test_cache.py``, :mod:`rocmfleet.domain.cacheproof`): a miss is the image's verdict.
BAKED_GATE_MODULES = ("cache",)
REACHABLE = "host::reachable"
SUITE = report.SUITE
REACH_TIMEOUT_S = 20
#: Seconds a check process may take beyond its hosts' deadlines: starting Python and pytest,
#: importing the suite, connecting (about 2 s of CPU on an idle machine; a loaded one is slower).
STARTUP_S = 120
_POLL_S = 0.5


@dataclass(frozen=True)
class CheckResult:
    """One check on one host. ``outcome`` is ``passed``, ``failed``, ``error`` or ``skipped``."""

    host: str
    check: str
    outcome: str
    message: str = ""
    detail: str = ""
    duration_s: float = 0.0


_T = TypeVar("_T")


class Planning(Protocol):
    """How the control side reaches a host, reads the facts its plan is made on and plans it, given by
    the command (``cli/check.py``, the rollout's): :class:`rocmfleet.fleet.check.hostplan.HostPlanning`
    on :func:`rocmfleet.plan.build.plan_host`, so that this module imports neither the facts' read nor
    the planning (both deep in the import graph; ``docs/layout.md``'s chain of at most 8).
    """

    def reach(self, settings: SshSettings, timeout_s: float) -> tuple[str | None, HostFacts]:
        """One connection running ``true`` (``None``: reachable; else why not, one line), then the
        host's facts over it (never raises for the host's answer)."""
        ...

    def facts(self, target: Target[HostConfig]) -> HostFacts:
        """``target``'s facts over a connection of their own (a check run without the probe)."""
        ...

    def plan(self, target: Target[HostConfig], facts: HostFacts) -> HostPlan:
        """``target``'s plan on ``facts``."""
        ...


def module_paths(select: list[str] | None = None) -> list[str]:
    """Files of the selected modules (all of :data:`MODULES` by default).

    Raises:
        ValueError: a name that is not one of :data:`MODULES`.
    """
    unknown = sorted(set(select or []) - set(MODULES))
    if unknown:
        raise ValueError(f"unknown check module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    root = Path(checks.__file__).parent
    return [str(root / f"test_{name}.py") for name in MODULES if not select or name in select]


def _reachable(target: Target[HostConfig], planning: Planning) -> tuple[CheckResult, HostFacts]:
    """``host::reachable``: one connection running ``true``; over it, the facts the host's plan is
    made on (``planning.reach``: :func:`rocmfleet.fleet.check.hostplan.reach_and_read`)."""
    started = time.monotonic()
    why, facts = planning.reach(target.ssh, REACH_TIMEOUT_S)
    result = CheckResult(
        target.name, REACHABLE, "failed" if why else "passed", why or "", "", time.monotonic() - started
    )
    return result, facts


def groups(items: list[_T], processes: int) -> list[list[_T]]:
    """``items`` dealt into at most ``processes`` groups, in order, sizes differing by at most one.

    ``groups([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]``; no empty group.
    """
    count = max(1, min(processes, len(items)))
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


class Collator:
    """One check process's report lines (:mod:`rocmfleet.fleet.check.report`) turned into results per host.

    Args:
        hosts: the inventory names the process checks, in inventory order.

    :meth:`feed` takes lines as they are written and returns the hosts finished by them;
    :meth:`finish` returns the rest. A line without a host (a check that used no host) counts
    for every host of the process.
    """

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = list(hosts)
        self.results: dict[str, list[CheckResult]] = {h: [] for h in self.hosts}
        self.done: list[str] = []

    def feed(self, lines: list[str]) -> list[tuple[str, list[CheckResult]]]:
        """Read complete JSON lines; return ``(host, results)`` of each host whose last check they hold."""
        finished = []
        for text in lines:
            entry = json.loads(text)
            host = entry.get("host")
            if host is not None and host not in self.results:
                continue  # not one of ours: never expected, nothing to attribute
            if entry.get("done"):
                if host not in self.done:
                    self.done.append(host)
                    finished.append((host, self.results[host]))
                continue
            for name in [host] if host is not None else self.hosts:
                self.results[name].append(
                    CheckResult(
                        name,
                        entry["check"],
                        entry["outcome"],
                        entry.get("message", ""),
                        entry.get("detail", ""),
                        entry.get("duration_s", 0.0),
                    )
                )
        return finished

    def finish(self, problem: str | None, duration_s: float = 0.0) -> list[tuple[str, list[CheckResult]]]:
        """The hosts not yet finished; each gets a ``host::suite`` error saying ``problem`` when there is one
        (the process was cut off, or pytest could not run)."""
        rest = []
        for host in self.hosts:
            if host in self.done:
                continue
            self.done.append(host)
            if problem:
                self.results[host].append(CheckResult(host, SUITE, "error", problem, "", duration_s))
            rest.append((host, self.results[host]))
        return rest


def _pytest_argv(names: list[str], paths: list[str], report_file: Path, root: str, budget_s: float) -> list[str]:
    argv = [sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider", "-p", "testinfra.plugin"]
    argv += [
        "-p",
        "rocmfleet.fleet.check.report",
        f"--rocmfleet-report={report_file}",
        "--rootdir",
        root,
        "-c",
        os.devnull,
    ]
    argv += ["-p", "rocmfleet.fleet.check.backend", f"--rocmfleet-host-budget={budget_s:g}"]
    return [*argv, *paths, "--hosts=" + ",".join(f"{backend.SCHEME}://{name}" for name in names)]


def run_group(
    targets: list[Target[HostConfig]],
    paths: list[str],
    timeout_s: float,
    on_host: Callable[[str, list[CheckResult]], None] | None = None,
    facts: Mapping[str, HostFacts] | None = None,
    *,
    planning: Planning,
) -> list[CheckResult]:
    """Run the suite on ``targets`` (reachable hosts) in one pytest process, which gets each host's
    plan (:func:`rocmfleet.fleet.check.checkfile.check_input`), never its configuration.

    Args:
        targets: the hosts, as :func:`rocmfleet.fleet.inventory.load_fleet` validated them.
        paths: check module files (:func:`module_paths`).
        timeout_s: each host's deadline, in seconds of command time; the process may take
            ``timeout_s`` per host plus :data:`STARTUP_S`.
        on_host: called with ``(host, results)`` of each host as soon as its last check ends.
        facts: what each host's plan is made on, by name, as the reachability probe read them;
            a host without them is read here (``planning.facts``).
        planning: reads a host's facts and plans it on them (:class:`Planning`).

    Returns:
        Every check's result, host by host in the order of ``targets``. A process cut off by its
        deadline, or one that could not run (a pytest usage error), adds a ``host::suite`` error
        with pytest's last output lines to each host it had not finished.
    """
    collator = Collator([t.name for t in targets])
    finished: dict[str, list[CheckResult]] = {}

    def emit(hosts: list[tuple[str, list[CheckResult]]]) -> None:
        for name, results in hosts:
            finished[name] = results
            if on_host:
                on_host(name, results)

    with tempfile.TemporaryDirectory(prefix="rocmfleet-check-") as tmp:  # mode 0700
        report_file, data = Path(tmp, "report.jsonl"), Path(tmp, "expect.json")
        with os.fdopen(os.open(data, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            read = {t.name: (facts or {}).get(t.name) or planning.facts(t) for t in targets}
            plans = {t.name: (t.ssh, planning.plan(t, read[t.name])) for t in targets}
            out.write(checkfile.check_input(plans))
        report_file.touch(0o600)
        env = {**os.environ, checkfile.FILE_ENV: str(data), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        started = time.monotonic()
        deadline = started + timeout_s * len(targets) + STARTUP_S
        with (
            open(Path(tmp, "output.txt"), "w+", encoding="utf-8") as output,
            open(report_file, encoding="utf-8") as lines,
        ):
            proc = subprocess.Popen(
                _pytest_argv(collator.hosts, paths, report_file, tmp, timeout_s),
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                text=True,
            )
            pending = ""
            problem = None
            while True:
                try:
                    proc.wait(timeout=_POLL_S)
                    running = False
                except subprocess.TimeoutExpired:
                    running = True
                pending += lines.read()
                *complete, pending = pending.split("\n")
                emit(collator.feed([text for text in complete if text.strip()]))
                if not running:
                    if proc.returncode not in (0, 1):
                        output.seek(0)
                        problem = f"pytest exited {proc.returncode}: " + _tail(output.read())
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    problem = f"checks did not finish within {timeout_s:g} s per host ({len(targets)} host(s))"
                    pending += lines.read()
                    *complete, pending = pending.split("\n")
                    emit(collator.feed([text for text in complete if text.strip()]))
                    break
        emit(collator.finish(problem, time.monotonic() - started))
    return [r for t in targets for r in finished.get(t.name, [])]


def run_host(
    target: Target[HostConfig], paths: list[str], timeout_s: float, *, planning: Planning
) -> list[CheckResult]:
    """Check one host: reachability, then the suite (:func:`run_group`, its facts read and its plan
    made by ``planning``), ``timeout_s`` seconds its deadline.

    Returns:
        ``host::reachable`` and, when it passed, every check's result.
    """
    reach, facts = _reachable(target, planning)
    if reach.outcome != "passed":
        return [reach]
    return [reach, *run_group([target], paths, timeout_s, facts={target.name: facts}, planning=planning)]


def gate_modules(config: cachedirs.CacheHost) -> tuple[str, ...]:
    """The check modules of a host's rollout gate: :data:`GATE_MODULES`, and :data:`BAKED_GATE_MODULES`
    when ``config``'s image is baked (:func:`rocmfleet.domain.cachedirs.is_baked`)."""
    return GATE_MODULES + (BAKED_GATE_MODULES if cachedirs.is_baked(config) else ())


def vllm_failures(target: Target[HostConfig], timeout_s: float, *, planning: Planning) -> list[str]:
    """``rocmfleet check --select gpu,vllm`` on one host (:func:`run_host`), with ``cache`` when its
    image is baked (:func:`gate_modules`), as a rollout's gate reads it: one ``check: outcome: message``
    line per check that neither passed nor was skipped; empty: it passes.

    Args:
        target: the host, with the image it runs now (the one the gate judges).
        timeout_s: the host's deadline, seconds.
        planning: reads the host's facts and plans it (:class:`Planning`).
    """
    results = run_host(target, module_paths(list(gate_modules(target.config))), timeout_s, planning=planning)
    return [f"{r.check}: {r.outcome}: {r.message}" for r in results if r.outcome not in ("passed", "skipped")]


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:])


def run_fleet(
    targets: list[Target[HostConfig]],
    select: list[str] | None = None,
    timeout_s: float = 300,
    parallel: int = 10,
    on_host: Callable[[list[CheckResult]], None] | None = None,
    *,
    planning: Planning,
) -> list[CheckResult]:
    """Check every target: reachability ``parallel`` hosts at a time, then the suite in at most
    ``parallel`` pytest processes at once (:func:`groups`); results in inventory order.

    Args:
        targets: the hosts, as :func:`rocmfleet.fleet.inventory.load_fleet` validated them.
        select: check modules (:data:`MODULES`); ``None`` for all.
        timeout_s: each host's deadline, in seconds of command time.
        parallel: reachability probes and pytest processes at once.
        on_host: called with each host's results (reachability first) as the host finishes.
        planning: reaches each host, reading its facts, and plans it on them (:class:`Planning`).
    """
    paths = module_paths(select)
    lock = threading.Lock()  # one host's lines together
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        probed = dict(zip([t.name for t in targets], pool.map(lambda t: _reachable(t, planning), targets), strict=True))
    reach = {name: result for name, (result, _) in probed.items()}
    facts = {name: read for name, (_, read) in probed.items()}
    if on_host:
        for target in targets:
            if reach[target.name].outcome != "passed":
                on_host([reach[target.name]])
    reachable = [t for t in targets if reach[t.name].outcome == "passed"]
    checked: dict[str, list[CheckResult]] = {}

    def one(group: list[Target[HostConfig]]) -> None:
        def host_done(name: str, results: list[CheckResult]) -> None:
            with lock:
                if on_host is not None:  # host_done is passed only then
                    on_host([reach[name], *results])

        done = host_done if on_host else None
        for result in run_group(group, paths, timeout_s, on_host=done, facts=facts, planning=planning):
            checked.setdefault(result.host, []).append(result)

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(one, groups(reachable, parallel)))
    return [r for t in targets for r in [reach[t.name], *checked.get(t.name, [])]]


def line(result: CheckResult, host_width: int = 0) -> str:
    """The line people read: ``lab-1  FAIL  vllm::ready[a]  why``; the host padded to ``host_width``.

    The word is ``PASS``, ``FAIL``, ``ERROR`` (could not check) or ``SKIP``.
    """
    word = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}[result.outcome]
    text = f"{result.host:<{host_width}}  {word}  {result.check}"
    return text + (f"  {result.message}" if result.message else "")


def summary_table(results: list[CheckResult]) -> str:
    """A table of passed/failed/errors/skipped per host, then the fleet's total (a host with an error fails)."""
    hosts: dict[str, dict[str, int]] = {}
    for r in results:
        hosts.setdefault(r.host, {"passed": 0, "failed": 0, "error": 0, "skipped": 0})[r.outcome] += 1
    width = max([len("host"), *(len(h) for h in hosts)])
    rows = [f"{'host':<{width}}  passed  failed  errors  skipped  result"]
    for name, c in hosts.items():
        verdict = "FAIL" if c["failed"] or c["error"] else "PASS"
        rows.append(
            f"{name:<{width}}  {c['passed']:>6}  {c['failed']:>6}  {c['error']:>6}  {c['skipped']:>7}  {verdict}"
        )
    failed = sum(1 for c in hosts.values() if c["failed"] or c["error"])
    rows.append(f"{len(hosts)} host(s), {failed} failed")
    return "\n".join(rows)


def junit_xml(results: list[CheckResult]) -> str:
    """JUnit XML: one ``testsuite`` per host, one ``testcase`` per check (classname = host)."""
    suites = ET.Element("testsuites", name="rocmfleet check")
    by_host: dict[str, list[CheckResult]] = {}
    for r in results:
        by_host.setdefault(r.host, []).append(r)
    for host, host_results in by_host.items():
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=host,
            tests=str(len(host_results)),
            failures=str(sum(r.outcome == "failed" for r in host_results)),
            errors=str(sum(r.outcome == "error" for r in host_results)),
            skipped=str(sum(r.outcome == "skipped" for r in host_results)),
            time=f"{sum(r.duration_s for r in host_results):.3f}",
        )
        for r in host_results:
            case = ET.SubElement(suite, "testcase", classname=host, name=r.check, time=f"{r.duration_s:.3f}")
            if r.outcome in ("failed", "error"):
                kind = "failure" if r.outcome == "failed" else "error"
                ET.SubElement(case, kind, message=r.message).text = r.detail or r.message
            elif r.outcome == "skipped":
                ET.SubElement(case, "skipped", message=r.message)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def json_report(results: list[CheckResult], inventory: str) -> str:
    """The JSON report: inventory, per-host verdicts (``passed``/``failed``) and every result."""
    hosts: dict[str, str] = {}
    for r in results:
        hosts.setdefault(r.host, "passed")
        if r.outcome in ("failed", "error"):
            hosts[r.host] = "failed"
    return (
        json.dumps({"inventory": inventory, "hosts": hosts, "results": [asdict(r) for r in results]}, indent=2) + "\n"
    )


def exit_status(results: list[CheckResult]) -> int:
    """0 when nothing failed or errored, 1 otherwise (2, a run that could not happen, is the CLI's)."""
    return 1 if any(r.outcome in ("failed", "error") for r in results) else 0
