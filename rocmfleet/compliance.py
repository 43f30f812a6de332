"""``rocmfleet check``: run the packaged testinfra checks against every host of an inventory.

The inventory is loaded and validated once, here (:func:`rocmfleet.fleet.load_fleet`); each host
then gets one ``pytest`` process, several hosts at once, each under a deadline, given only its
own expectations (:func:`rocmfleet.checks.expect.expectations_json`, a 0600 file) and checked
over one SSH session of :mod:`rocmfleet.connect` (testinfra backend ``rocmfleet://``,
:mod:`rocmfleet.checks.backend`), with the inventory's sudo settings. Before the suite, one
connection running ``true`` decides whether the host is reachable at all: an unreachable host is
one failed check, ``host::reachable``, not a page of connection errors.

Outcomes: ``passed``, ``failed`` (the host is not as the inventory says), ``skipped`` (with the
reason) and ``error`` (the check could not be made: an empty or unreadable source, output of an
unknown format, sudo refused); an error counts as a failure for the exit status, never as a pass.

Check names are ``<module>::<check>[<instance>]``, e.g. ``tuning::numa_balancing_persisted``
or ``vllm::container_image_digest[tiny-llama-a]`` (from ``rocmfleet/checks/test_<module>.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from rocmfleet import checks, connect
from rocmfleet.checks import backend, expect
from rocmfleet.fleet import Target

#: Modules of the suite, in the order they run (``rocmfleet/checks/test_<name>.py``).
MODULES = ("rocm", "tuning", "docker", "vllm", "cache", "cvs")
REACHABLE = "host::reachable"
SUITE = "host::suite"
REACH_TIMEOUT_S = 20


@dataclass(frozen=True)
class CheckResult:
    """One check on one host. ``outcome`` is ``passed``, ``failed``, ``error`` or ``skipped``."""

    host: str
    check: str
    outcome: str
    message: str = ""
    detail: str = ""
    duration_s: float = 0.0


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


def _reachable(target: Target) -> CheckResult:
    started = time.monotonic()
    why = connect.reachable(target.ssh, REACH_TIMEOUT_S)
    return CheckResult(target.name, REACHABLE, "failed" if why else "passed", why or "", "", time.monotonic() - started)


def run_host(target: Target, paths: list[str], timeout_s: float) -> list[CheckResult]:
    """Check one host: reachability, then the suite under ``timeout_s`` seconds.

    Args:
        target: the host, as :func:`rocmfleet.fleet.load_fleet` validated it.
        paths: check module files (:func:`module_paths`).
        timeout_s: seconds the suite may take on this host.

    Returns:
        ``host::reachable`` and every check's result. A suite cut off by the deadline or one
        that could not run (a pytest usage error) adds a ``host::suite`` error with pytest's
        last output lines.
    """
    reach = _reachable(target)
    if reach.outcome != "passed":
        return [reach]
    with tempfile.TemporaryDirectory(prefix="rocmfleet-check-") as tmp:  # mode 0700
        report, data = Path(tmp, "report.jsonl"), Path(tmp, "expect.json")
        with os.fdopen(os.open(data, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            out.write(expect.expectations_json(target.name, target.ssh, target.config))
        argv = [sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider"]
        argv += ["-p", "rocmfleet.checks.report", f"--rocmfleet-report={report}", "--rootdir", tmp, "-c", os.devnull]
        argv += ["-p", "rocmfleet.checks.backend"]
        argv += [*paths, f"--hosts={backend.SCHEME}://{target.name}"]
        env = {**os.environ, expect.FILE_ENV: str(data)}
        started = time.monotonic()
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL
            )
            problem = (
                None
                if proc.returncode in (0, 1)
                else f"pytest exited {proc.returncode}: " + _tail(proc.stdout + proc.stderr)
            )
        except subprocess.TimeoutExpired:
            problem = f"checks did not finish within {timeout_s:g} s"
        lines = report.read_text().splitlines() if report.exists() else []
    results = [reach]
    for line in lines:
        entry = json.loads(line)
        results.append(
            CheckResult(
                target.name,
                entry["check"],
                entry["outcome"],
                entry["message"],
                entry["detail"],
                entry["duration_s"],
            )
        )
    if problem:
        results.append(CheckResult(target.name, SUITE, "error", problem, "", time.monotonic() - started))
    return results


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:])


def run_fleet(
    targets: list[Target],
    select: list[str] | None = None,
    timeout_s: float = 300,
    parallel: int = 10,
    on_host=None,
) -> list[CheckResult]:
    """Check every target, ``parallel`` at a time; results in inventory order.

    ``on_host(results)`` is called as each host finishes (to print progress).
    """
    paths = module_paths(select)

    def one(target: Target) -> list[CheckResult]:
        results = run_host(target, paths, timeout_s)
        if on_host:
            on_host(results)
        return results

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return [r for host_results in pool.map(one, targets) for r in host_results]


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
    hosts = {}
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
