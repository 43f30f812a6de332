"""pytest plugin: one JSON line per check as it finishes, for ``rocmfleet check`` to read.

Loaded with ``-p rocmfleet.fleet.check.report --rocmfleet-report=PATH``. Lines are written (and
flushed) as each check ends, so a process cut off by its timeout still reports what finished.
Each line: ``{"nodeid", "host", "check", "outcome", "message", "detail", "duration_s"}`` (``host``:
the inventory name, ``null`` for a test without testinfra's ``host``). After a host's last check,
one line ``{"host", "done": true}``, preceded by a ``host::suite`` error line when the host's
command budget ran out (:mod:`rocmfleet.fleet.check.backend`). The outcome is
``passed``, ``skipped``, ``failed`` (an ``assert`` about the host did not hold) or ``error``
(anything else raised, in the check or a fixture: the check could not be made, e.g.
:class:`rocmfleet.domain.tooloutput.CannotCheck` for an empty or unreadable source, a parser refusing
output it does not know, a connection or sudo failure). An error is never a pass.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from testinfra.host import Host


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--rocmfleet-report", help="append one JSON line per check to this file")


#: The most characters of a check's one-line message (a digest mismatch names three image references, about
#: 400); the whole text stays in the report's ``detail``.
MESSAGE_CHARS = 600


def short(message: str, limit: int = MESSAGE_CHARS) -> str:
    """``message`` as one line of at most ``limit`` characters: white space folded, the rest cut with
    ``…`` (an error that quotes a whole probe script or command stays readable)."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        reason: str = report.longrepr[2]
        return short(reason.removeprefix("Skipped: "))
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        message: str = crash.message
        message = message.removeprefix("AssertionError: ").split("\nassert ")[0].strip()
        return short(message.replace("rocmfleet.domain.tooloutput.CannotCheck: ", "cannot check: ", 1))
    return short(str(report.longrepr).strip().splitlines()[-1]) if report.longrepr else ""


#: The check name of the line saying a host's checks ran out of time.
SUITE = "host::suite"


def over_budget(budget_s: float) -> str:
    """The message of a host whose checks used up their ``budget_s`` seconds (the backend raises it)."""
    return f"checks did not finish within {budget_s:g} s"


def check_name(item: pytest.Item) -> str:
    """``<module>::<check>[<instance>]``: ``test_vllm.py::test_ready[a-ssh://h]`` → ``vllm::ready[a]``;
    a check per role (its parameter ``role``) the same way: ``drift::role_as_wanted[tuning]``.

    testinfra's host parameter is dropped: the host is its own column.
    """
    module = item.path.stem.removeprefix("test_")
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    params = getattr(getattr(item, "callspec", None), "params", {})
    instance = params.get("instance", params.get("role"))
    label = getattr(instance, "name", instance)
    return f"{module}::{name}" + (f"[{label}]" if instance is not None else "")


def host_of(item: pytest.Item) -> Host | None:
    """The testinfra ``Host`` a check runs on (``None`` for a test without one)."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("_testinfra_host")


def last_items(hosts: list[str | None]) -> dict[int, str]:
    """Index of each host's last item in run order -> that host (``hosts``: the host of each item)."""
    return {index: host for host, index in {h: i for i, h in enumerate(hosts) if h is not None}.items()}


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.pending: dict[str, dict[str, Any]] = {}
        self.names: dict[str, str] = {}
        self.hosts: dict[str, Host | None] = {}  # nodeid -> testinfra Host
        self.last: dict[str, str] = {}  # nodeid of a host's last check -> host name

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Names, hosts and each host's last check, in the final run order."""
        self.names = {item.nodeid: check_name(item) for item in session.items}
        self.hosts = {item.nodeid: host_of(item) for item in session.items}
        names = [host.backend.hostname if host is not None else None for host in self.hosts.values()]
        self.last = {session.items[i].nodeid: name for i, name in last_items(names).items()}

    def _write(self, *entries: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write("".join(json.dumps(entry) + "\n" for entry in entries))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report = outcome.get_result()
        excinfo = call.excinfo
        report.rocmfleet_error = bool(
            excinfo is not None and not report.skipped and not excinfo.errisinstance(AssertionError)
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        host = self.hosts.get(report.nodeid)
        entry = self.pending.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                "host": host.backend.hostname if host is not None else None,
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
            lines = [self.pending.pop(report.nodeid)]
            name = self.last.get(report.nodeid)
            if name is not None and host is not None:  # a host's last check has the host
                if getattr(host.backend, "overrun", False):
                    message = over_budget(host.backend.budget_s)
                    lines.append({"host": name, "check": SUITE, "outcome": "error", "message": message})
                lines.append({"host": name, "done": True})
            self._write(*lines)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--rocmfleet-report")
    if path:
        config.pluginmanager.register(_Recorder(path), "rocmfleet-report-recorder")
