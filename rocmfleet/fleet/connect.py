"""The one SSH layer of every rocmfleet command that talks to hosts outside the deploy.

``rocmfleet check``, ``status``, ``bench``, ``rollout``, ``restart`` and ``cache bake`` connect
through this module, and only through it. One :class:`SshSettings` per host is read from the same
pyinfra inventory data the deploy uses, and one :class:`Session` per host opens one connection
with **pyinfra's own SSH connector** (``pyinfra.connectors.ssh.SSHConnector.connect``, pyinfra
3.10), so every ``ssh_*`` host data key pyinfra documents, ``~/.ssh/config`` (``Host`` aliases,
``HostName``, ``Port``, ``User``, ``IdentityFile``, ``ProxyJump``, ``ProxyCommand``,
``UserKnownHostsFile``, ...), known hosts, the agent and ``ssh_connect_retries`` mean exactly what
they mean in ``pyinfra ... deploy.py``. The commands then run on channels of that connection
(:meth:`Session.run`), with rocmfleet's deadlines. The check suite gets a testinfra backend over
that session (:mod:`rocmfleet.fleet.check.backend`); the benchmark runs its commands with
:meth:`Session.run`.

What rocmfleet adds or decides, once:

* **Never asks**: ``ssh_strict_host_key_checking: ask`` is taken as ``yes`` (a fleet command has
  nobody to answer; the deploy would prompt). Unset is pyinfra's default, ``accept-new``: a host
  missing from known_hosts is accepted and its key appended to the file, as the deploy does; a
  known_hosts file that does not exist yet is no warning (pyinfra's ``Failed to load host keys``
  line is dropped for it: :class:`_MissingKnownHosts`).
* **Sudo**: with ``_sudo`` every command runs as ``sudo -H -n [-u USER] sh -c 'COMMAND'``
  (pyinfra's own form, ``pyinfra/connectors/util.py``); ``-n`` makes sudo fail at once where it
  would ask for a password, and :meth:`Session.sudo_problem` says so once per host.
* **Timeouts**: :data:`CONNECT_TIMEOUT_S` for TCP (pyinfra's ``CONNECT_TIMEOUT``), the banner and
  authentication (paramiko's ``banner_timeout``/``auth_timeout``, which
  ``ssh_paramiko_connect_kwargs`` may override); every command has its own deadline
  (:class:`CommandTimeout`); keep-alives and ``TCP_USER_TIMEOUT`` notice a dead host.
* **No OpenSSH multiplexing**: a session is one SSH connection (plus one per ``ProxyJump`` hop)
  whose channels carry every command, so there is no ``ControlPath`` socket whose length depends
  on the host name (the 108-byte ``sun_path`` limit).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocmfleet.config.connection import SshSettings
from rocmfleet.fleet.commandlog import COMMAND_LOG_ENV, LOG_COMMAND_CHARS

if TYPE_CHECKING:
    import paramiko
    from pyinfra.api.inventory import Inventory
    from pyinfra.api.state import State

#: Seconds a command may run unless its caller says otherwise.
COMMAND_TIMEOUT_S = 120.0
#: Seconds between keep-alive packets, so a dead host is noticed during a long command.
KEEPALIVE_S = 15
#: Seconds data sent to a host may stay unacknowledged before the kernel drops the connection
#: (Linux ``TCP_USER_TIMEOUT``, tcp(7)). Without it a host that powers off mid-command is retried
#: for ``net.ipv4.tcp_retries2`` (about 15 minutes) before the command fails; with the keep-alive
#: packets above, a dead host ends the command within about a minute.
USER_TIMEOUT_S = 45


_READ_CHUNK = 65536
_POLL_S = 0.2


class ConnectError(RuntimeError):
    """A host cannot be connected to: DNS, TCP, SSH handshake, host key or authentication.

    The message names the destination (``user@address[:port]``) and pyinfra's reason.
    """


class CommandTimeout(RuntimeError):
    """A command did not finish within its deadline; the channel was closed."""


@functools.cache
def _pyinfra_state(connect_timeout_s: float) -> tuple[State, Inventory]:
    """A pyinfra ``State`` with no hosts, whose config carries ``CONNECT_TIMEOUT`` (one per timeout), and its inventory.

    pyinfra's SSH connector reads the connect timeout and its loaded-key cache from the state.
    """
    from pyinfra.api.config import Config
    from pyinfra.api.inventory import Inventory
    from pyinfra.api.state import State

    inventory = Inventory(([], {}))
    state = State()
    config = Config(CONNECT_TIMEOUT=connect_timeout_s, PARALLEL=1)  # type: ignore[no-untyped-call]  # pyinfra 3.10 leaves it unannotated
    state.init(inventory, config)  # State(inventory) skips an empty one
    return state, inventory


#: The logger pyinfra's SSH client logs to (``pyinfra/connectors/sshuserclient/client.py`` uses
#: ``pyinfra.logger``, pyinfra 3.10): it warns ``Failed to load host keys from FILE: ...`` for each
#: known_hosts file it cannot read.
_SSH_CLIENT_LOGGER = "pyinfra"


class _MissingKnownHosts(logging.Filter):
    """Drops pyinfra's warning that a known_hosts file does not exist (``[Errno 2]``): with the
    default ``accept-new`` a first connection creates it, and a host key that is then unknown or
    wrong is this module's :class:`ConnectError`, said once per host. Any other load failure (a
    file it cannot read, a bad line) is still said."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        missing = any(isinstance(a, FileNotFoundError) for a in args)
        return not (record.msg.startswith("Failed to load host keys") and missing)


def _quiet_missing_known_hosts() -> None:
    """Add :class:`_MissingKnownHosts` to pyinfra's SSH client logger, once."""
    logger = logging.getLogger(_SSH_CLIENT_LOGGER)
    if not any(isinstance(f, _MissingKnownHosts) for f in logger.filters):
        logger.addFilter(_MissingKnownHosts())


def sudo_command(command: str, user: str | None = None) -> str:
    """``command`` wrapped as pyinfra wraps it for ``_sudo``: ``sudo -H -n [-u USER] sh -c 'COMMAND'``."""
    as_user = f"-u {shlex.quote(user)} " if user else ""
    return f"sudo -H -n {as_user}sh -c {shlex.quote(command)}"


@dataclass(frozen=True)
class Result:
    """What a command gave: its exit status (``-1`` when the host sent none), stdout and stderr bytes."""

    exit_status: int
    stdout_bytes: bytes
    stderr_bytes: bytes

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def exited(self) -> int:
        """The exit status (fabric's name for it)."""
        return self.exit_status


class Session:
    """One SSH connection to one host; :meth:`run` any number of commands over it.

    Open with :meth:`open` (or as a context manager); thread-safe in the way paramiko's
    transport is (one channel per command).
    """

    def __init__(self, settings: SshSettings, client: paramiko.SSHClient) -> None:
        self.settings = settings
        self.client = client
        self._sudo_problem: str | None | bool = False  # False: not probed yet

    @classmethod
    def open(cls, settings: SshSettings, name: str | None = None) -> Session:
        """Connect as ``pyinfra ... deploy.py`` connects: pyinfra's ``SSHConnector.connect``.

        Args:
            settings: the host's SSH settings (its pyinfra data).
            name: the inventory name, for pyinfra's messages (default ``settings.hostname``).

        Raises:
            ConnectError: anything that stops the connection after pyinfra's
                ``ssh_connect_retries`` (the message names ``user@address[:port]`` and pyinfra's
                reason: could not connect or resolve, SSH error such as an unknown host key,
                host key mismatch, authentication error).
        """
        from pyinfra.api.host import Host
        from pyinfra.connectors.ssh import SSHConnector

        logging.getLogger("paramiko").setLevel(logging.CRITICAL)  # its errors reach our messages
        _quiet_missing_known_hosts()
        state, inventory = _pyinfra_state(settings.connect_timeout_s)
        host = Host(name or settings.hostname, inventory, [], connector_cls=SSHConnector)
        for key, value in settings.connector_data().items():
            setattr(host.data, key, value)  # pyinfra's override data: wins over the (empty) inventory's
        connector: SSHConnector | None = None
        try:
            connector = SSHConnector(state, host)
            connector.connect()
        except Exception as exc:  # noqa: BLE001 - pyinfra's ConnectError, a bad data type, a key file: all are "cannot connect"
            if connector is not None and connector.client is not None:
                connector.client.close()
            reason = str(exc) or type(exc).__name__
            raise ConnectError(f"{settings.where}: {reason}") from None
        client = connector.client
        assert client is not None  # connect() either sets it or raises
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
            for hop in _transports(transport):
                _tcp_options(hop.sock)
        return cls(settings, client)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection and those of its ``ProxyJump`` hops (idempotent)."""
        transport = self.client.get_transport()
        hops = _transports(transport)[1:] if transport is not None else []
        self.client.close()
        for hop in hops:
            hop.close()

    def command(self, command: str, sudo: bool | None = None) -> str:
        """``command`` as it is sent: wrapped by :func:`sudo_command` when ``sudo`` (default: the settings')."""
        if self.settings.sudo if sudo is None else sudo:
            return sudo_command(command, self.settings.sudo_user)
        return command

    def run(
        self,
        command: str,
        timeout_s: float = COMMAND_TIMEOUT_S,
        sudo: bool | None = None,
        stdin: str | bytes | None = None,
    ) -> Result:
        """Run ``command`` (a shell command line) on the host; never raises on its exit status.

        Args:
            command: passed to the login user's shell, after :meth:`command`'s sudo wrapping.
            timeout_s: seconds until :class:`CommandTimeout`.
            sudo: override the settings' ``_sudo`` for this command.
            stdin: sent to the command's stdin (str as UTF-8), then end of input. Data too large
                for one argument goes here: the whole command is one argument of the remote
                shell's ``-c``, at most 128 KiB on Linux (``MAX_ARG_STRLEN``). Without it the
                command's stdin ends at once, so one that reads it never waits.

        With :data:`COMMAND_LOG_ENV` set, the command is logged there once it ends (or fails).

        Raises:
            CommandTimeout: the command did not end within ``timeout_s`` (its channel is closed;
                a remote process that ignores the hangup may live on).
            paramiko.SSHException, OSError: the connection broke.
        """
        started = time.monotonic()
        result: Result | None = None
        try:
            result = self._run(command, timeout_s, sudo, stdin)
            return result
        finally:
            if os.environ.get(COMMAND_LOG_ENV):
                self._log(command, time.monotonic() - started, result)

    def _log(self, command: str, took_s: float, result: Result | None) -> None:
        """Append one :data:`COMMAND_LOG_ENV` line: session, host, seconds, exit status, command."""
        line = {
            "session": f"{os.getpid()}-{id(self):x}",
            "where": self.settings.where,
            "s": round(took_s, 4),
            "exit": result.exit_status if result else None,
            "command": command[:LOG_COMMAND_CHARS],
        }
        fd = os.open(os.environ[COMMAND_LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as out:  # one write per line: O_APPEND keeps lines whole
            out.write(json.dumps(line) + "\n")

    def _run(self, command: str, timeout_s: float, sudo: bool | None, stdin: str | bytes | None) -> Result:
        deadline = time.monotonic() + timeout_s
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            import paramiko

            raise paramiko.SSHException(f"{self.settings.where}: the SSH connection is closed")
        channel = transport.open_session(timeout=max(1.0, min(timeout_s, self.settings.connect_timeout_s)))
        try:
            channel.exec_command(self.command(command, sudo))
            if stdin:
                channel.settimeout(max(1.0, deadline - time.monotonic()))
                channel.sendall(stdin.encode() if isinstance(stdin, str) else stdin)
            channel.shutdown_write()
            channel.settimeout(_POLL_S)
            out, err = bytearray(), bytearray()
            out_done = False
            while True:
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(_READ_CHUNK)
                if not out_done:
                    try:
                        chunk = channel.recv(_READ_CHUNK)
                    except TimeoutError:
                        chunk = None
                    if chunk == b"":
                        out_done = True
                    elif chunk:
                        out += chunk
                if out_done and channel.exit_status_ready():
                    while channel.recv_stderr_ready():
                        err += channel.recv_stderr(_READ_CHUNK)
                    return Result(channel.recv_exit_status(), bytes(out), bytes(err))
                if time.monotonic() > deadline:
                    raise CommandTimeout(f"{self.settings.where}: {command!r} did not finish within {timeout_s:g} s")
                if out_done:
                    channel.status_event.wait(_POLL_S)
        finally:
            channel.close()

    def sudo_problem(self) -> str | None:
        """Why sudo cannot be used on this host (``None`` when it can, or when ``_sudo`` is off).

        Probed once per session with ``sudo -n true``: a user without the right, or whose sudo
        wants a password, gets sudo's own message (``sudo: a password is required``).
        """
        if not self.settings.sudo:
            return None
        if self._sudo_problem is False:
            probe = self.run(self.command("true", sudo=True), timeout_s=30, sudo=False)
            self._sudo_problem = (
                None
                if probe.exit_status == 0
                else (
                    f"sudo -n as {self.settings.user or 'the login user'} on {self.settings.hostname} failed "
                    f"(exit {probe.exit_status}): {probe.stderr.strip() or probe.stdout.strip() or 'no message'}"
                )
            )
        return self._sudo_problem  # type: ignore[return-value]


def _transports(transport: paramiko.Transport) -> list[paramiko.Transport]:
    """``transport``, then those of the ``ProxyJump`` hops it runs through (the first hop last).

    pyinfra's SSH client reaches a jumped host over a ``direct-tcpip`` channel of the hop's
    connection, so the transport's socket is a channel, whose transport is the hop's.
    """
    import paramiko

    chain = [transport]
    while isinstance(chain[-1].sock, paramiko.Channel):
        chain.append(chain[-1].sock.get_transport())
    return chain


def _tcp_options(sock: Any) -> None:
    """Set ``TCP_USER_TIMEOUT`` (:data:`USER_TIMEOUT_S`) and ``TCP_NODELAY`` on ``sock`` where it has them.

    ``TCP_NODELAY``: a command is a few small SSH messages each way (channel open, exec request,
    close); with Nagle's algorithm on, a message sent while the previous one is unacknowledged
    waits for the peer's delayed ACK (40 ms on Linux, tcp(7)), which measured 40-48 ms of every
    command's channel open on a loopback sshd. OpenSSH's client sets it for interactive sessions
    (``ssh_packet_set_interactive``); a command runner waits on every round trip the same way.
    """
    import socket

    if not hasattr(sock, "setsockopt"):
        return
    options = [(socket.TCP_NODELAY, 1)]
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        options.append((socket.TCP_USER_TIMEOUT, int(USER_TIMEOUT_S * 1000)))
    for option, value in options:
        with contextlib.suppress(OSError):  # not a TCP socket (a proxy command's pipe): the keep-alive alone
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def reachable(settings: SshSettings, timeout_s: float = 20) -> str | None:
    """``None`` when the host accepts a connection and runs ``true``; otherwise why not (one line)."""
    try:
        with Session.open(settings) as session:
            result = session.run("true", timeout_s=timeout_s, sudo=False)
    except (ConnectError, CommandTimeout) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the connection broke after it opened
        return f"{settings.where}: {type(exc).__name__}: {exc}"
    if result.exit_status != 0:
        return f"{settings.where}: `true` exited {result.exit_status}: {result.stderr.strip()}"
    return None
