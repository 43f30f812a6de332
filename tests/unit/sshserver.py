"""A loopback SSH server for unit tests: paramiko's server side on 127.0.0.1, throwaway keys.

It accepts one client key, runs each ``exec`` request with ``/bin/sh -c`` as the test's own
user (``PATH`` may be given, e.g. to put a stand-in ``sudo`` first), with what the client sent
before its end of input on stdin, and records the commands it received. It also accepts
``direct-tcpip`` channels (what ``ssh -J`` and pyinfra's ``ProxyJump`` open on a jump host) and
forwards each to its destination on the loopback interface, recording it in ``forwarded``. No
sshd, no root, no network beyond the loopback interface.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import paramiko


class _Interface(paramiko.ServerInterface):
    def __init__(self, server: LoopbackSshServer) -> None:
        self.server = server

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.get_base64() == self.server.client_key.get_base64():
            self.server.users.append(username)
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_direct_tcpip_request(
        self, chanid: int, origin: tuple[str, int], destination: tuple[str, int]
    ) -> int:
        if destination[0] not in ("127.0.0.1", "localhost"):
            return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        try:
            upstream = socket.create_connection(destination, timeout=5)
        except OSError:
            return paramiko.OPEN_FAILED_CONNECT_FAILED
        self.server.forwarded.append((destination[0], destination[1]))
        self.server.pending[chanid] = upstream
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        text = command.decode()
        self.server.commands.append(text)
        self.server.channels.append(channel)
        threading.Thread(target=self.server.execute, args=(channel, text), daemon=True).start()
        return True


class LoopbackSshServer:
    """Serve SSH on ``127.0.0.1:port`` until :meth:`close`.

    Attributes:
        port: the listening port (chosen by the kernel).
        client_key_file: the private key a client must use.
        known_hosts: a known_hosts file holding this server's host key.
        commands: every command received, as sent (after any sudo wrapping).
        forwarded: the ``(address, port)`` of every ``direct-tcpip`` channel it forwarded.
    """

    def __init__(self, directory: Path, env: dict[str, str] | None = None) -> None:
        self.host_key = paramiko.ECDSAKey.generate()
        self.client_key = paramiko.ECDSAKey.generate()
        self.client_key_file = str(directory / "id_ecdsa")
        self.client_key.write_private_key_file(self.client_key_file)
        self.env = env
        self.commands: list[str] = []
        self.users: list[str] = []
        self.forwarded: list[tuple[str, int]] = []
        self.pending: dict[int, socket.socket] = {}  # direct-tcpip channel id -> its upstream socket
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.known_hosts = str(directory / "known_hosts")
        keys = paramiko.HostKeys()
        keys.add(f"[127.0.0.1]:{self.port}", self.host_key.get_name(), self.host_key)
        keys.save(self.known_hosts)
        self.transports: list[paramiko.Transport] = []
        self.channels: list[paramiko.Channel] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            self.transports.append(transport)
            try:
                transport.start_server(server=_Interface(self))
            except (paramiko.SSHException, EOFError, OSError):
                continue
            threading.Thread(target=self._channels, args=(transport,), daemon=True).start()

    def _channels(self, transport: paramiko.Transport) -> None:
        while transport.is_active():
            channel = transport.accept(1)
            if channel is not None:
                self.channels.append(channel)  # a dropped server channel is closed by its __del__
                upstream = self.pending.pop(channel.get_id(), None)
                if upstream is not None:
                    threading.Thread(target=_pump, args=(channel, upstream), daemon=True).start()

    def execute(self, channel: paramiko.Channel, command: str) -> None:
        stdin = bytearray()  # what the client sends before its EOF (Session.run sends one at once)
        channel.settimeout(10)
        try:
            while chunk := channel.recv(65536):
                stdin += chunk
        except (TimeoutError, OSError, EOFError, paramiko.SSHException):
            pass
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
        )
        out, err = proc.communicate(bytes(stdin))
        try:
            channel.sendall(out)
            channel.sendall_stderr(err)
            channel.send_exit_status(proc.returncode)
            channel.shutdown_write()
            channel.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the client gave up (its timeout)

    def close(self) -> None:
        self.listener.close()
        for upstream in self.pending.values():
            upstream.close()
        for transport in self.transports:
            transport.close()


def _pump(channel: paramiko.Channel, upstream: socket.socket) -> None:
    """Copy bytes both ways between a ``direct-tcpip`` channel and its TCP destination until either ends."""
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    selector.register(upstream, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select(timeout=1):
                if key.fileobj is channel:
                    data = channel.recv(65536)
                    if not data:
                        return
                    upstream.sendall(data)
                else:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    channel.sendall(data)
            if channel.closed:
                return
    except (OSError, EOFError, paramiko.SSHException):
        return
    finally:
        selector.close()
        upstream.close()
        channel.close()
