"""testinfra's ``host`` over :class:`rocmfleet.connect.Session`: the checks' only way to a host.

``rocmfleet check`` runs the suite with ``-p rocmfleet.checks.backend`` and
``--hosts=rocmfleet://<inventory name>``: loaded as a pytest plugin, this module registers
:class:`SessionBackend` under that scheme in testinfra's ``testinfra.backend.BACKENDS`` table
(which maps a ``--hosts`` scheme to a backend class). The backend
reads the host's SSH settings from the expectations file :mod:`rocmfleet.checks.expect` names,
opens one :class:`~rocmfleet.connect.Session` on first use and runs every check's commands over
it, with the inventory's sudo settings (pyinfra's ``_sudo``/``_sudo_user``). Where sudo is
configured but refused, every command raises :class:`~rocmfleet.errors.CannotCheck`: the
checks are errors, never passes on an empty answer.
"""

from __future__ import annotations

import functools
from typing import Any

from testinfra.backend import base

from rocmfleet.connect import COMMAND_TIMEOUT_S, CommandTimeout, Session, SshSettings
from rocmfleet.errors import CannotCheck

#: The ``--hosts`` scheme, and where testinfra finds the class.
SCHEME = "rocmfleet"
BACKEND = "rocmfleet.checks.backend.SessionBackend"


def register() -> None:
    """Make ``--hosts=rocmfleet://NAME`` resolve to :class:`SessionBackend` (idempotent)."""
    from testinfra import backend

    backend.BACKENDS[SCHEME] = BACKEND


register()  # as a pytest plugin (-p rocmfleet.checks.backend), before testinfra resolves --hosts


class SessionBackend(base.BaseBackend):
    """A testinfra backend whose commands go over one shared :class:`Session`.

    Args:
        hostname: the inventory name (``--hosts=rocmfleet://NAME``).
        settings: the host's SSH settings; default: those in the expectations file.
        session: an opened session to use (tests); default: opened on first command.
        command_timeout_s: seconds each command may take.
    """

    NAME = SCHEME

    def __init__(
        self,
        hostname: str,
        *args: Any,
        settings: SshSettings | None = None,
        session: Session | None = None,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(hostname)  # sudo is the session's, never testinfra's --sudo
        self._settings = settings
        self._session = session
        self.command_timeout_s = command_timeout_s

    @functools.cached_property
    def session(self) -> Session:
        if self._session is not None:
            return self._session
        from rocmfleet.checks import expect

        settings = self._settings or expect.ssh_settings()
        if settings is None:
            raise CannotCheck(f"no SSH settings for {self.hostname}: run the checks with `rocmfleet check`")
        return Session.open(settings)

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        """``command % quoted(args)`` on the host, through sudo when the inventory says ``_sudo``.

        Raises:
            CannotCheck: sudo is configured but refused, or the command timed out.
        """
        cmd = self.quote(command, *args)
        problem = self.session.sudo_problem()
        if problem:
            raise CannotCheck(problem)
        try:
            result = self.session.run(cmd, timeout_s=self.command_timeout_s)
        except CommandTimeout as exc:
            raise CannotCheck(str(exc)) from None
        return self.result(result.exit_status, self.encode(cmd), result.stdout_bytes, result.stderr_bytes)
