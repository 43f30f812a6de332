"""``rocmfleet check``: run the packaged testinfra checks against every host of an inventory.

One ``pytest`` process per host (testinfra's ``ssh://`` backend, with an ``ssh_config`` written
from the inventory's ``ssh_*`` data), several hosts at once, each under a deadline. Before the
suite, one plain ``ssh HOST true`` decides whether the host is reachable at all: an unreachable
host is one failed check, ``host::reachable``, not a page of connection errors.

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

from rocmfleet import checks
from rocmfleet.checks import expect
from rocmfleet.fleet import Target

#: Modules of the suite, in the order they run (``rocmfleet/checks/test_<name>.py``).
MODULES = ("rocm", "tuning", "docker", "vllm", "cvs")
REACHABLE = "host::reachable"
SUITE = "host::suite"
REACH_TIMEOUT_S = 20


@dataclass(frozen=True)
class CheckResult:
    """One check on one host. ``outcome`` is ``passed``, ``failed`` or ``skipped``."""

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
    try:
        proc = subprocess.run(
            ["ssh", *target.ssh_options(), target.hostname, "true"],
            capture_output=True,
            text=True,
            timeout=REACH_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        ok, why = proc.returncode == 0, proc.stderr.strip().splitlines()[-1:] or [f"ssh exited {proc.returncode}"]
    except subprocess.TimeoutExpired:
        ok, why = False, [f"ssh did not connect within {REACH_TIMEOUT_S} s"]
    return CheckResult(
        target.name, REACHABLE, "passed" if ok else "failed", "" if ok else why[0], "", time.monotonic() - started
    )


def run_host(
    target: Target, inventory: str, paths: list[str], timeout_s: float, overrides: dict | None = None
) -> list[CheckResult]:
    """Check one host: reachability, then the suite under ``timeout_s`` seconds.

    Returns:
        ``host::reachable`` and every check's result. A suite cut off by the deadline or one
        that could not run (pytest usage error, an invalid inventory) adds a failed
        ``host::suite`` result with pytest's last output lines.
    """
    reach = _reachable(target)
    if reach.outcome != "passed":
        return [reach]
    with tempfile.TemporaryDirectory(prefix=f"rocmfleet-check-{target.name}-") as tmp:
        ssh_config, report = Path(tmp, "ssh_config"), Path(tmp, "report.jsonl")
        # testinfra asks for ControlMaster=auto but sets no ControlPath, so without one every
        # check would open its own SSH connection; with it they share one per host.
        ssh_config.write_text(target.ssh_config() + f"  ControlPath {tmp}/cm-%C\n")
        argv = [sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider"]
        argv += ["-p", "rocmfleet.checks.report", f"--rocmfleet-report={report}", "--rootdir", tmp, "-c", os.devnull]
        argv += [*paths, f"--hosts=ssh://{target.hostname}", f"--ssh-config={ssh_config}"]
        env = {**os.environ, expect.INVENTORY_ENV: inventory, expect.HOST_ENV: target.name}
        env[expect.DATA_ENV] = json.dumps(overrides or {})
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
        results.append(CheckResult(target.name, SUITE, "failed", problem, "", time.monotonic() - started))
    return results


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(line for line in text.strip().splitlines()[-lines:])


def run_fleet(
    targets: list[Target],
    inventory: str,
    select: list[str] | None = None,
    timeout_s: float = 300,
    parallel: int = 10,
    overrides: dict | None = None,
    on_host=None,
) -> list[CheckResult]:
    """Check every target, ``parallel`` at a time; results in inventory order.

    ``on_host(results)`` is called as each host finishes (to print progress).
    """
    paths = module_paths(select)

    def one(target: Target) -> list[CheckResult]:
        results = run_host(target, inventory, paths, timeout_s, overrides)
        if on_host:
            on_host(results)
        return results

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return [r for host_results in pool.map(one, targets) for r in host_results]


def line(result: CheckResult, host_width: int = 0) -> str:
    """The line people read: ``lab-1  FAIL  vllm::ready[a]  why``; the host padded to ``host_width``."""
    word = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[result.outcome]
    text = f"{result.host:<{host_width}}  {word}  {result.check}"
    return text + (f"  {result.message}" if result.message else "")


def summary_table(results: list[CheckResult]) -> str:
    """A table of passed/failed/skipped per host, then the fleet's total."""
    hosts: dict[str, dict[str, int]] = {}
    for r in results:
        hosts.setdefault(r.host, {"passed": 0, "failed": 0, "skipped": 0})[r.outcome] += 1
    width = max([len("host"), *(len(h) for h in hosts)])
    rows = [f"{'host':<{width}}  passed  failed  skipped  result"]
    for name, counts in hosts.items():
        verdict = "FAIL" if counts["failed"] else "PASS"
        rows.append(f"{name:<{width}}  {counts['passed']:>6}  {counts['failed']:>6}  {counts['skipped']:>7}  {verdict}")
    failed = sum(1 for c in hosts.values() if c["failed"])
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
            skipped=str(sum(r.outcome == "skipped" for r in host_results)),
            time=f"{sum(r.duration_s for r in host_results):.3f}",
        )
        for r in host_results:
            case = ET.SubElement(suite, "testcase", classname=host, name=r.check, time=f"{r.duration_s:.3f}")
            if r.outcome == "failed":
                ET.SubElement(case, "failure", message=r.message).text = r.detail or r.message
            elif r.outcome == "skipped":
                ET.SubElement(case, "skipped", message=r.message)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def json_report(results: list[CheckResult], inventory: str) -> str:
    """The JSON report: inventory, per-host verdicts and every result."""
    hosts = {}
    for r in results:
        hosts.setdefault(r.host, "passed")
        if r.outcome == "failed":
            hosts[r.host] = "failed"
    return (
        json.dumps({"inventory": inventory, "hosts": hosts, "results": [asdict(r) for r in results]}, indent=2) + "\n"
    )


def exit_status(results: list[CheckResult]) -> int:
    """0 when nothing failed, 1 otherwise (2, a run that could not happen, is the CLI's)."""
    return 1 if any(r.outcome == "failed" for r in results) else 0
