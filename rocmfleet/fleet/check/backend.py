"""testinfra's ``host`` over :class:`rocmfleet.fleet.connect.Session`: the checks' only way to a host.

``rocmfleet check`` runs the suite with ``-p rocmfleet.fleet.check.backend`` and
``--hosts=rocmfleet://NAME1,rocmfleet://NAME2,...`` (the hosts of one check process): loaded as
a pytest plugin, this module registers :class:`SessionBackend` under that scheme in testinfra's
``testinfra.backend.BACKENDS`` table (which maps a ``--hosts`` scheme to a backend class). Each
host's backend reads its SSH settings from the check file (:mod:`rocmfleet.fleet.check.checkfile`),
opens one :class:`~rocmfleet.fleet.connect.Session` on first use and runs every check's commands
of that host over it, with the inventory's sudo settings (pyinfra's ``_sudo``/``_sudo_user``).
Where sudo is configured but refused, every command raises :class:`~rocmfleet.domain.tooloutput.CannotCheck`:
the checks are errors, never passes on an empty answer.

Each host has its own deadline, ``--rocmfleet-host-budget`` seconds of command time (``rocmfleet
check --timeout-s``): a command gets at most what is left of it, and once it is spent every
further command of that host raises :class:`~rocmfleet.domain.tooloutput.CannotCheck` at once, so one hung
host cannot hold up the other hosts of its process.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest
from testinfra.backend import base

from rocmfleet.config.connection import SshSettings
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import checkfile
from rocmfleet.fleet.check.report import over_budget
from rocmfleet.fleet.connect import COMMAND_TIMEOUT_S, CommandTimeout, Session

#: The ``--hosts`` scheme, and where testinfra finds the class.
SCHEME = "rocmfleet"
BACKEND = "rocmfleet.fleet.check.backend.SessionBackend"


def register() -> None:
    """Make ``--hosts=rocmfleet://NAME`` resolve to :class:`SessionBackend` (idempotent)."""
    from testinfra import backend

    backend.BACKENDS[SCHEME] = BACKEND


register()  # as a pytest plugin (-p rocmfleet.fleet.check.backend), before testinfra resolves --hosts

#: Seconds of command time each host may use unless ``--rocmfleet-host-budget`` says otherwise.
_budget_s: float | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--rocmfleet-host-budget", type=float, help="seconds of command time each host may use")


def pytest_configure(config: pytest.Config) -> None:
    global _budget_s
    _budget_s = config.getoption("--rocmfleet-host-budget")


class SessionBackend(base.BaseBackend):  # type: ignore[misc]  # testinfra ships no type information
    """A testinfra backend whose commands go over one shared :class:`Session`.

    Args:
        hostname: the inventory name (``--hosts=rocmfleet://NAME``).
        settings: the host's SSH settings; default: those in the check file.
        session: an opened session to use (tests); default: opened on first command.
        command_timeout_s: seconds each command may take.
        budget_s: seconds of command time this host may use in all (default ``--rocmfleet-host-budget``;
            ``None``: no limit beyond ``command_timeout_s`` per command).

    Attributes:
        spent_s: seconds its commands took so far.
        overrun: the budget was used up (later commands raised :class:`CannotCheck`).
    """

    NAME = SCHEME

    def __init__(
        self,
        hostname: str,
        *args: Any,
        settings: SshSettings | None = None,
        session: Session | None = None,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        budget_s: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(hostname)  # sudo is the session's, never testinfra's --sudo
        self._settings = settings
        self._session = session
        self.command_timeout_s = command_timeout_s
        self.budget_s = budget_s if budget_s is not None else _budget_s
        self.spent_s = 0.0
        self.overrun = False

    @functools.cached_property
    def session(self) -> Session:
        if self._session is not None:
            return self._session
        settings = self._settings or checkfile.ssh_settings(self.hostname)
        if settings is None:
            raise CannotCheck(f"no SSH settings for {self.hostname}: run the checks with `rocmfleet check`")
        return Session.open(settings)

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        """``command % quoted(args)`` on the host, through sudo when the inventory says ``_sudo``.

        Raises:
            CannotCheck: sudo is configured but refused, the command timed out, or the host's
                budget is spent.
        """
        cmd = self.quote(command, *args)
        timeout_s = self.command_timeout_s
        if self.budget_s is not None:
            left = self.budget_s - self.spent_s
            if left <= 0:
                self.overrun = True
                raise CannotCheck(over_budget(self.budget_s))
            timeout_s = min(timeout_s, left)
        started = time.monotonic()
        try:
            problem = self.session.sudo_problem()
            if problem:
                raise CannotCheck(problem)
            result = self.session.run(cmd, timeout_s=timeout_s)
        except CommandTimeout as exc:
            if self.budget_s is not None and self.spent_s + time.monotonic() - started >= self.budget_s:
                self.overrun = True
                raise CannotCheck(over_budget(self.budget_s)) from None
            raise CannotCheck(str(exc)) from None
        finally:
            self.spent_s += time.monotonic() - started
        return self.result(result.exit_status, self.encode(cmd), result.stdout_bytes, result.stderr_bytes)
