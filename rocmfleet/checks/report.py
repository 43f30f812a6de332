"""pytest plugin: one JSON line per check as it finishes, for ``rocmfleet check`` to read.

Loaded with ``-p rocmfleet.checks.report --rocmfleet-report=PATH``. Lines are written (and
flushed) as each check ends, so a host cut off by its timeout still reports what finished.
Each line: ``{"nodeid", "check", "outcome", "message", "detail", "duration_s"}``. The outcome is
``passed``, ``skipped``, ``failed`` (an ``assert`` about the host did not hold) or ``error``
(anything else raised, in the check or a fixture: the check could not be made, e.g.
:class:`rocmfleet.errors.CannotCheck` for an empty or unreadable source, a parser refusing
output it does not know, a connection or sudo failure). An error is never a pass.
"""

from __future__ import annotations

import json

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--rocmfleet-report", help="append one JSON line per check to this file")


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return report.longrepr[2].removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message = crash.message.removeprefix("AssertionError: ").split("\nassert ")[0].strip()
        return message.replace("rocmfleet.errors.CannotCheck: ", "cannot check: ", 1)
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""


def check_name(item: pytest.Item) -> str:
    """``<module>::<check>[<instance>]``: ``test_vllm.py::test_ready[a-ssh://h]`` → ``vllm::ready[a]``.

    testinfra's host parameter is dropped: the host is its own column.
    """
    module = item.path.stem.removeprefix("test_")
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    params = getattr(getattr(item, "callspec", None), "params", {})
    instance = params.get("instance")
    return f"{module}::{name}" + (f"[{instance.name}]" if instance is not None else "")


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: dict[str, dict] = {}
        self.names: dict[str, str] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.names = {item.nodeid: check_name(item) for item in items}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        excinfo = call.excinfo
        report.rocmfleet_error = bool(
            excinfo is not None and not report.skipped and not excinfo.errisinstance(AssertionError)
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.pending.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                "check": self.names.get(report.nodeid, report.nodeid),
                "outcome": "passed",
                "message": "",
                "detail": "",
                "duration_s": 0.0,
            },
        )
        entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
        if entry["outcome"] == "passed" and not report.passed:
            if report.skipped:
                entry["outcome"] = "skipped"
            else:
                entry["outcome"] = "error" if getattr(report, "rocmfleet_error", False) else "failed"
            entry["message"] = _message(report)
            entry["detail"] = "" if report.skipped else report.longreprtext
        if report.when == "teardown":
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(self.pending.pop(report.nodeid)) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--rocmfleet-report")
    if path:
        config.pluginmanager.register(_Recorder(path), "rocmfleet-report-recorder")
