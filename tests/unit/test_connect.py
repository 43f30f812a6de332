"""rocmfleet.fleet.connect and the checks' testinfra backend, against a loopback SSH server (no lab)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import paramiko
import pytest
import testinfra.host

from rocmfleet.config.connection import SshSettings
from rocmfleet.config.sshkeys import pyinfra_ssh_keys
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet import commandlog, connect
from rocmfleet.fleet.check.backend import SessionBackend
from rocmfleet.fleet.check.hostplan import HostPlanning
from rocmfleet.fleet.connect import CommandTimeout, ConnectError, Session
from rocmfleet.plan.build import plan_host
from tests.unit.sshserver import LoopbackSshServer

#: Each test starts a loopback SSH server (paramiko, 127.0.0.1, throwaway keys): seconds, no lab.
pytestmark = pytest.mark.loopback

#: A stand-in sudo for the loopback server: takes pyinfra's options, runs the rest, or refuses.
FAKE_SUDO = """#!/bin/sh
if [ "$SUDO_MODE" = refuse ]; then echo "sudo: a password is required" >&2; exit 1; fi
while [ $# -gt 0 ]; do case "$1" in -H|-n) shift ;; -u) SUDO_AS=$2; shift 2 ;; *) break ;; esac; done
export SUDO_AS="${SUDO_AS:-root}"
exec "$@"
"""


def _server(tmp_path: Path, sudo_mode: str = "allow") -> LoopbackSshServer:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sudo").write_text(FAKE_SUDO)
    (bin_dir / "sudo").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SUDO_MODE": sudo_mode, "LC_ALL": "C"}
    return LoopbackSshServer(tmp_path, env)


@pytest.fixture
def server(tmp_path):
    srv = _server(tmp_path)
    yield srv
    srv.close()


def settings_for(server: LoopbackSshServer, **changes) -> SshSettings:
    base = SshSettings(
        hostname="127.0.0.1",
        port=server.port,
        user="ops",
        key=server.client_key_file,
        known_hosts_file=server.known_hosts,
        strict_host_key_checking="yes",
        connect_timeout_s=5,
    )
    return SshSettings(**{**base.to_dict(), **changes})


def test_settings_from_pyinfra_data_and_back():
    data = {
        "ssh_hostname": "10.0.0.1",
        "ssh_port": 2222,
        "ssh_user": "ops",
        "ssh_key": "/k",
        "ssh_known_hosts_file": "/kh",
        "ssh_strict_host_key_checking": "yes",
        "ssh_config_file": "/cfg",
        "ssh_connect_retries": 2,
        "_sudo": True,
        "_sudo_user": "root",
        "vllm_profile": "x",
    }
    one = SshSettings.from_host_data("gpu-1", data)
    assert (one.hostname, one.port, one.user, one.key, one.known_hosts_file) == ("10.0.0.1", 2222, "ops", "/k", "/kh")
    assert (one.strict_host_key_checking, one.sudo, one.sudo_user) == ("yes", True, "root")
    assert one.options == {"ssh_config_file": "/cfg", "ssh_connect_retries": 2}
    assert one.where == "ops@10.0.0.1:2222"
    assert SshSettings.from_dict(json.loads(json.dumps(one.to_dict()))) == one
    bare = SshSettings.from_host_data("gpu-2", {})
    assert (bare.hostname, bare.port, bare.user, bare.sudo, bare.where) == ("gpu-2", None, None, False, "gpu-2")
    with pytest.raises(ValueError, match="ssh_strict_host_key_checking 'maybe'"):
        SshSettings.from_host_data("gpu-3", {"ssh_strict_host_key_checking": "maybe"})


def test_the_keys_are_pyinfras_own_and_reach_its_connector_unchanged():
    from pyinfra.connectors.ssh import ConnectorData

    assert pyinfra_ssh_keys() == sorted(ConnectorData.__annotations__)
    assert {"ssh_config_file", "ssh_connect_retries", "ssh_paramiko_connect_kwargs"} <= set(pyinfra_ssh_keys())
    data = SshSettings.from_host_data(
        "gpu-1", {"ssh_config_file": "/cfg", "ssh_strict_host_key_checking": "ask", "ssh_allow_agent": False}
    ).connector_data()
    assert data == {
        "ssh_hostname": "gpu-1",
        "ssh_config_file": "/cfg",
        "ssh_allow_agent": False,
        "ssh_strict_host_key_checking": "yes",  # a fleet command never asks
        "ssh_paramiko_connect_kwargs": {"banner_timeout": 10.0, "auth_timeout": 10.0},
    }  # unset keys are left to pyinfra's defaults and the SSH config (Port, User, IdentityFile)
    mine = SshSettings("h", options={"ssh_paramiko_connect_kwargs": {"banner_timeout": 60}}).connector_data()
    assert mine["ssh_paramiko_connect_kwargs"] == {"banner_timeout": 60, "auth_timeout": 10.0}


def test_sudo_command_is_pyinfras_form():
    assert connect.sudo_command("cat /etc/shadow") == "sudo -H -n sh -c 'cat /etc/shadow'"
    assert connect.sudo_command("echo 'a b'", "svc") == "sudo -H -n -u svc sh -c 'echo '\"'\"'a b'\"'\"''"


def test_run_gives_status_stdout_stderr_and_long_output(server):
    with Session.open(settings_for(server)) as session:
        result = session.run("echo out; echo err >&2; exit 3")
        assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
        big = session.run("head -c 3000000 /dev/zero | tr '\\\\0' x; echo done >&2")
        assert len(big.stdout) == 3000000 and big.stderr == "done\n" and big.exited == 0
    assert server.users == ["ops"]


def test_a_command_past_its_deadline_raises(server):
    with Session.open(settings_for(server)) as session:
        started = time.monotonic()
        with pytest.raises(CommandTimeout, match="did not finish within 1 s"):
            session.run("sleep 5", timeout_s=1)
        assert time.monotonic() - started < 3
        assert session.run("echo still usable").stdout == "still usable\n"


def test_with_the_command_log_set_each_command_is_one_line_there(server, tmp_path, monkeypatch):
    log = tmp_path / "commands.jsonl"
    monkeypatch.setenv(commandlog.COMMAND_LOG_ENV, str(log))
    with Session.open(settings_for(server)) as session:
        session.run("exit 3")
        with pytest.raises(CommandTimeout):
            session.run("sleep 5; " + "x" * 300, timeout_s=1)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["exit"], line["command"]) for line in lines] == [
        (3, "exit 3"),
        (None, ("sleep 5; " + "x" * 300)[:120]),
    ]
    assert len({line["session"] for line in lines}) == 1 and lines[1]["s"] >= 1
    assert oct(log.stat().st_mode & 0o777) == "0o600"
    monkeypatch.delenv(commandlog.COMMAND_LOG_ENV)
    with Session.open(settings_for(server)) as session:
        session.run("true")
    assert len(log.read_text().splitlines()) == 2  # unset: nothing more


def test_told_commands_tells_each_command_of_this_process_and_its_children(server, monkeypatch):
    import pickle
    import subprocess
    import sys

    monkeypatch.delenv(commandlog.COMMAND_LOG_ENV, raising=False)
    told: list[str] = []
    child = (
        "import pickle, sys\nfrom rocmfleet.fleet.connect import Session\n"
        f"with Session.open(pickle.loads({pickle.dumps(settings_for(server))!r})) as s:\n"
        "    s.run('echo from the child')\n"
    )
    with commandlog.told_commands(told.append, poll_s=0.05):
        with Session.open(settings_for(server)) as session:
            session.run("exit 3")
            session.run("echo  a\n" + "x" * 300)
        subprocess.run([sys.executable, "-c", child], check=True, timeout=60)  # as the check's workers
    assert commandlog.COMMAND_LOG_ENV not in os.environ  # its own log is gone with the block
    first, second, third = told
    assert first.startswith(f"[ops@127.0.0.1:{server.port}] ") and first.endswith(" s, exit 3: exit 3")
    assert second.endswith(": echo a " + "x" * 112)  # the first 120 characters, white space folded
    assert third.endswith("exit 0: echo from the child")


def test_v_tells_commands_before_or_after_the_command(monkeypatch):
    from rocmfleet import entry
    from rocmfleet.cli import schema

    monkeypatch.delenv(commandlog.COMMAND_LOG_ENV, raising=False)
    seen = []
    monkeypatch.setattr(schema, "run", lambda args: seen.append(os.environ.get(commandlog.COMMAND_LOG_ENV)) or 0)
    for argv in (["schema"], ["-v", "schema"], ["schema", "-v"]):
        assert entry.main(argv) == 0
    assert seen[0] is None and seen[1] and seen[2]  # a log to tell from, only with -v


def test_unknown_and_changed_host_keys_are_pyinfras_rules(server, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(
        ConnectError, match=r"ops@127\.0\.0\.1:\d+: SSH error .*No host key for .* found in known_hosts"
    ):
        Session.open(settings_for(server, known_hosts_file=str(empty)))
    for strict in ("accept-new", None):  # None: pyinfra's default, accept-new
        Session.open(settings_for(server, known_hosts_file=str(empty), strict_host_key_checking=strict)).close()
    assert empty.read_text().startswith(f"[127.0.0.1]:{server.port} ecdsa-sha2-nistp256 ")  # as the deploy writes it
    other = paramiko.HostKeys()
    other.add(f"[127.0.0.1]:{server.port}", "ecdsa-sha2-nistp256", paramiko.ECDSAKey.generate())
    changed = tmp_path / "changed_known_hosts"
    other.save(str(changed))
    for strict in ("yes", "no", None):  # a changed key is refused whatever the policy
        with pytest.raises(ConnectError, match="SSH host key error"):
            Session.open(settings_for(server, known_hosts_file=str(changed), strict_host_key_checking=strict))


def test_a_missing_known_hosts_file_is_no_warning(server, tmp_path, caplog):
    # accept-new creates it; pyinfra's "Failed to load host keys from FILE: [Errno 2] ..." was noise
    # on the console of every fleet command on a fresh machine (new-user trial)
    import logging

    missing = tmp_path / "fresh" / "known_hosts"
    missing.parent.mkdir()
    with caplog.at_level(logging.WARNING):
        Session.open(settings_for(server, known_hosts_file=str(missing), strict_host_key_checking=None)).close()
    assert missing.is_file()
    assert not [r for r in caplog.records if "Failed to load host keys" in r.getMessage()]
    # another failure to load the file is still said
    kept = logging.LogRecord(
        "pyinfra", logging.WARNING, __file__, 1, "Failed to load host keys from %s: %s",
        ("/kh", PermissionError(13, "Permission denied")), None,
    )  # fmt: skip
    assert all(f.filter(kept) for f in logging.getLogger("pyinfra").filters)


def test_wrong_key_and_closed_port_are_connect_errors(server, tmp_path):
    stranger = tmp_path / "stranger"
    paramiko.ECDSAKey.generate().write_private_key_file(str(stranger))
    with pytest.raises(ConnectError, match=r"ops@127\.0\.0\.1:\d+: Authentication error \(username=ops, key="):
        Session.open(settings_for(server, key=str(stranger)))
    assert server.users == []
    closed = settings_for(server, port=1)
    assert connect.reachable(closed).startswith("ops@127.0.0.1:1: Could not connect")
    assert connect.reachable(settings_for(server)) is None


def test_ssh_connect_retries_are_pyinfras(tmp_path):
    """A host that drops the connection before its banner is tried 1 + ``ssh_connect_retries`` times."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def drop():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.close()

    threading.Thread(target=drop, daemon=True).start()
    settings = SshSettings("127.0.0.1", port=listener.getsockname()[1], connect_timeout_s=2)
    try:
        for retries, tries in ((0, 1), (2, 3)):
            accepted.clear()
            with pytest.raises(ConnectError):
                Session.open(SshSettings(**{**settings.to_dict(), "options": {"ssh_connect_retries": retries}}))
            assert len(accepted) == tries
    finally:
        listener.close()


def test_sudo_wraps_every_command_and_a_refusal_is_reported_once(tmp_path):
    allow = _server(tmp_path / "a" if (tmp_path / "a").mkdir() is None else tmp_path)
    try:
        with Session.open(settings_for(allow, sudo=True, sudo_user="svc")) as session:
            assert session.sudo_problem() is None
            assert session.run("echo $SUDO_AS").stdout == "svc\n"
            assert session.run("echo plain", sudo=False).stdout == "plain\n"
        assert allow.commands[-2] == "sudo -H -n -u svc sh -c 'echo $SUDO_AS'"
        assert allow.commands[-1] == "echo plain"
    finally:
        allow.close()
    (tmp_path / "r").mkdir()
    refuse = _server(tmp_path / "r", sudo_mode="refuse")
    try:
        with Session.open(settings_for(refuse, sudo=True)) as session:
            assert "sudo: a password is required" in session.sudo_problem()
            session.sudo_problem()
        assert refuse.commands.count("sudo -H -n sh -c true") == 1
        with Session.open(settings_for(refuse)) as session:  # no _sudo: never probed
            assert session.sudo_problem() is None
    finally:
        refuse.close()


def test_testinfra_backend_runs_over_the_session(server):
    with Session.open(settings_for(server)) as session:
        host = testinfra.host.Host(SessionBackend("gpu-1", session=session))
        assert host.run("echo %s", "a b").stdout == "a b\n"
        assert host.file(server.known_hosts).exists and not host.file("/no/such/file").exists
        assert host.file(server.known_hosts).content_string.startswith(f"[127.0.0.1]:{server.port} ")


def test_testinfra_backend_without_sudo_rights_raises_cannot_check(tmp_path):
    refuse = _server(tmp_path, sudo_mode="refuse")
    try:
        with Session.open(settings_for(refuse, sudo=True)) as session:
            host = testinfra.host.Host(SessionBackend("gpu-1", session=session))
            with pytest.raises(CannotCheck, match="sudo -n as ops on 127.0.0.1 failed"):
                host.file("/etc/passwd").exists  # noqa: B018 - the read is the test
    finally:
        refuse.close()


def test_key_files_are_never_key_material(server):
    assert os.path.isfile(settings_for(server).key)
    assert "PRIVATE KEY" not in str(settings_for(server).to_dict())


# --- rocmfleet check's host runner, end to end over the loopback server -----------------------

SAMPLE_CHECKS = """
from rocmfleet.fleet.check import expect
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.config.sshkeys import pyinfra_ssh_keys


def test_sees_its_expectations(host):
    plan = expect.host_plan(host)
    assert plan.checks.profile == "lab-tiny-llama"
    assert [i.name for i in expect.instances_of(host)] == ["tiny-llama-a", "tiny-llama-b"]
    secrets = {f.secret_names for f in plan.files if f.source == "secret"}
    assert secrets == {("HF_TOKEN",)}  # names only, never the value
    # planned on the facts read over the reachability probe's connection (this machine has no KFD)
    assert plan.topology_source == "read from the host" and not plan.instances and "kfd" in plan.problem.lower()


def test_runs_on_the_host(host):
    assert host.run("echo $SUDO_AS").stdout.strip() == "svc"


def test_finds_a_difference(host):
    assert host.file("/no/such/file").exists, "the file is missing"


def test_cannot_read(host):
    raise CannotCheck("the source is empty")
"""


def test_run_host_checks_a_long_named_host_with_its_own_expectations(tmp_path, lab_data):
    from rocmfleet.config.settings import host_config
    from rocmfleet.config.vault import Secret
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.target import Target

    server = _server(tmp_path)
    checks = tmp_path / "test_sample.py"
    checks.write_text(SAMPLE_CHECKS)
    name = "gpu-node-0042.rack-17.row-c.datacenter-west.example-corp.net"[:60].ljust(60, "x")
    config = host_config({**lab_data, "vllm_secret_env": {"HF_TOKEN": Secret("hf_neverShown")}})
    target = Target(name, settings_for(server, sudo=True, sudo_user="svc"), config)
    try:
        results = compliance.run_host(target, [str(checks)], timeout_s=60, planning=HostPlanning(plan_host))
    finally:
        server.close()
    outcomes = {r.check: (r.outcome, r.message) for r in results}
    assert outcomes == {
        "host::reachable": ("passed", ""),
        "sample::sees_its_expectations": ("passed", ""),
        "sample::runs_on_the_host": ("passed", ""),
        "sample::finds_a_difference": ("failed", "the file is missing"),
        "sample::cannot_read": ("error", "cannot check: the source is empty"),
    }
    assert all(r.host == name for r in results) and len(name) == 60
    assert "hf_neverShown" not in repr(results) and not any("hf_neverShown" in c for c in server.commands)


def test_run_host_without_sudo_rights_makes_every_host_check_an_error(tmp_path, lab_data):
    from rocmfleet.config.settings import host_config
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.target import Target

    server = _server(tmp_path, sudo_mode="refuse")
    checks = tmp_path / "test_sample.py"
    checks.write_text(SAMPLE_CHECKS)
    try:
        results = compliance.run_host(
            Target("gpu-1", settings_for(server, sudo=True), host_config(lab_data)),
            [str(checks)],
            60,
            planning=HostPlanning(plan_host),
        )
    finally:
        server.close()
    outcomes = {r.check: r.outcome for r in results}
    assert outcomes["sample::runs_on_the_host"] == outcomes["sample::finds_a_difference"] == "error"
    assert "sudo: a password is required" in next(r.message for r in results if r.check == "sample::runs_on_the_host")
    assert compliance.exit_status(results) == 1


def test_stdin_reaches_the_command_and_its_end_is_sent(server):
    payload = "".join(f"target i{i} {'x' * 3000}\n" for i in range(64))  # about 190 KB: more than one argument
    with Session.open(settings_for(server)) as session:
        result = session.run("wc -c", stdin=payload)
        assert result.exit_status == 0 and result.stdout.split()[0] == str(len(payload.encode()))
        assert session.run("cat", timeout_s=10).stdout == ""  # no stdin given: it ends at once
    assert all(len(c) < 100 for c in server.commands)  # the data did not travel in the command


#: Checks of several hosts in one process: the ``instance`` parameter and the per-host fixtures
#: come from the packaged suite's conftest, as in rocmfleet/fleet/check/.
GROUP_CONFTEST = "from rocmfleet.fleet.check.conftest import *  # noqa: F403\n"
GROUP_CHECKS = """
import os

import pytest

from rocmfleet.fleet.check import checkfile


def test_process(host):
    pytest.skip(f"pid {os.getpid()}")


def test_own_expectations(host, checks):
    wanted = {"root": ["tiny-llama-a", "tiny-llama-b"], "svc": ["solo"]}[checkfile.ssh_settings(host).user]
    assert [i.name for i in checks.instances] == wanted


def test_instance_belongs(host, checks, instance):
    assert instance in checks.instances


def test_slow_on_the_first(host):
    if host.backend.hostname.startswith("slow"):
        host.run("sleep 5")


def test_only_second_differs(host):
    assert host.run("true").rc == 0
    assert not host.backend.hostname.endswith("-2"), "the second host differs"
"""


def test_one_process_checks_several_hosts_each_with_its_own_data_and_deadline(tmp_path, lab_data):
    from rocmfleet.config.settings import host_config
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.target import Target

    server = _server(tmp_path)
    (tmp_path / "conftest.py").write_text(GROUP_CONFTEST)
    (tmp_path / "test_group.py").write_text(GROUP_CHECKS)
    one = host_config(lab_data)
    two = host_config({**lab_data, "vllm_instances": [{"name": "solo", "port": 9000, "gpus": [0]}]})
    targets = [
        Target("slow-" + "x" * 55, settings_for(server, user="root"), one),
        Target("gpu-2", settings_for(server, user="svc"), two),
    ]
    finished = []
    try:
        results = compliance.run_group(
            targets,
            [str(tmp_path / "test_group.py")],
            timeout_s=2,
            on_host=lambda h, r: finished.append(h),
            planning=HostPlanning(plan_host),
        )
    finally:
        server.close()
    by_host = {t.name: {r.check: (r.outcome, r.message) for r in results if r.host == t.name} for t in targets}
    pids = {checks["group::process"][1] for checks in by_host.values()}
    assert len(pids) == 1, pids  # one pytest process for both hosts
    slow, second = by_host[targets[0].name], by_host["gpu-2"]
    assert slow["group::own_expectations"] == second["group::own_expectations"] == ("passed", "")
    assert {c for c in slow if c.startswith("group::instance_belongs")} == {
        "group::instance_belongs[tiny-llama-a]",
        "group::instance_belongs[tiny-llama-b]",
    }
    assert {c for c in second if c.startswith("group::instance_belongs")} == {"group::instance_belongs[solo]"}
    assert slow["group::slow_on_the_first"] == ("error", "cannot check: checks did not finish within 2 s")
    assert slow["host::suite"] == ("error", "checks did not finish within 2 s")
    assert slow["group::only_second_differs"][0] == "error"  # the budget is spent: no command, no pass
    assert second["group::only_second_differs"] == ("failed", "the second host differs")
    assert "host::suite" not in second and second["group::slow_on_the_first"] == ("passed", "")
    assert sorted(finished) == sorted(t.name for t in targets)
    assert set(server.users) == {"root", "svc"}  # each host over its own session, with its own settings
    assert [r.host for r in results] == sorted([r.host for r in results], key=[t.name for t in targets].index)


def test_a_session_sends_small_messages_at_once(server):
    """TCP_NODELAY: a channel open is not held back for the peer's delayed ACK (40 ms a command)."""
    import socket

    with Session.open(settings_for(server)) as session:
        sock = session.client.get_transport().sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == connect.USER_TIMEOUT_S * 1000


# --- a host reached only through an SSH config entry, over a ProxyJump hop --------------------


def _behind_a_jump(tmp_path: Path) -> tuple[LoopbackSshServer, LoopbackSshServer, str]:
    """A jump server, a target server, and an OpenSSH config whose ``gpu-behind`` alias reaches the
    target only through ``bastion`` (HostName, Port, User, IdentityFile, ProxyJump, known hosts)."""
    (tmp_path / "jump").mkdir()
    (tmp_path / "target").mkdir()
    jump = _server(tmp_path / "jump")
    target = _server(tmp_path / "target")
    config = f"""
Host bastion
    HostName 127.0.0.1
    Port {jump.port}
    User hopper
    IdentityFile {jump.client_key_file}
    UserKnownHostsFile {jump.known_hosts}
    StrictHostKeyChecking yes

Host gpu-behind
    HostName 127.0.0.1
    Port {target.port}
    User ops
    IdentityFile {target.client_key_file}
    UserKnownHostsFile {target.known_hosts}
    ProxyJump bastion
"""
    return jump, target, config


def test_a_host_behind_an_ssh_config_alias_and_proxyjump_is_reached_as_the_deploy_reaches_it(tmp_path):
    from pyinfra.api import Config, Inventory, State

    jump, target, config = _behind_a_jump(tmp_path)
    config_file = tmp_path / "ssh_config"
    config_file.write_text(config)
    data = {"ssh_config_file": str(config_file), "ssh_strict_host_key_checking": "yes", "_sudo": True}
    try:
        settings = SshSettings.from_host_data("gpu-behind", data)
        with Session.open(settings) as session:
            assert session.run("echo $SUDO_AS").stdout == "root\n"
            assert session.run("echo second").stdout == "second\n"  # one connection carries both
        assert jump.forwarded == [("127.0.0.1", target.port)] and jump.users == ["hopper"]
        assert target.users == ["ops"] and target.commands[-1] == "sudo -H -n sh -c 'echo second'"
        for _ in range(50):  # closing the session closed its hop too (the server sees it a moment later)
            if not any(t.is_active() for t in jump.transports):
                break
            time.sleep(0.1)
        assert not any(t.is_active() for t in jump.transports)

        # pyinfra's own connection of the deploy, from the same host data: the same hop, user, target
        inventory = Inventory(([("gpu-behind", data)], {}))
        state = State(inventory, Config())
        host = inventory.get_host("gpu-behind")
        host.connect(raise_exceptions=True)
        ok, output = host.run_shell_command("echo deploy")
        host.disconnect()
        assert ok and output.stdout == "deploy"
        assert jump.forwarded == [("127.0.0.1", target.port)] * 2 and jump.users == ["hopper"] * 2
        assert target.users == ["ops", "ops"] and state is host.state

        # without the SSH config entry the alias is no address at all: the failure
        empty = tmp_path / "empty_ssh_config"
        empty.write_text("")
        with pytest.raises(ConnectError, match="gpu-behind: Could not resolve hostname"):
            Session.open(SshSettings.from_host_data("gpu-behind", {**data, "ssh_config_file": str(empty)}))
    finally:
        jump.close()
        target.close()


def test_the_users_own_ssh_config_is_read_from_home(tmp_path, monkeypatch):
    from pyinfra.connectors.sshuserclient import client as pyinfra_client

    jump, target, config = _behind_a_jump(tmp_path)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(config)
    monkeypatch.setenv("HOME", str(home))
    pyinfra_client.get_ssh_config.cache.clear()  # pyinfra reads ~/.ssh/config once per process
    try:
        assert connect.reachable(SshSettings.from_host_data("gpu-behind", {})) is None
        assert jump.forwarded == [("127.0.0.1", target.port)] and target.users == ["ops"]
    finally:
        pyinfra_client.get_ssh_config.cache.clear()
        jump.close()
        target.close()


def test_check_runs_on_a_host_behind_a_jump(tmp_path, lab_data):
    """The check process gets the whole SSH settings (``ssh_config_file`` too) and connects the same way."""
    from rocmfleet.config.settings import host_config
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.target import Target

    jump, target, config = _behind_a_jump(tmp_path)
    config_file = tmp_path / "ssh_config"
    config_file.write_text(config)
    checks = tmp_path / "test_behind.py"
    checks.write_text("def test_runs(host):\n    assert host.run('echo ok').stdout == 'ok\\n'\n")
    settings = SshSettings.from_host_data("gpu-behind", {"ssh_config_file": str(config_file)})
    try:
        behind = Target("gpu-behind", settings, host_config(lab_data))
        results = compliance.run_host(behind, [str(checks)], 60, planning=HostPlanning(plan_host))
    finally:
        jump.close()
        target.close()
    assert {r.check: r.outcome for r in results} == {"host::reachable": "passed", "behind::runs": "passed"}
    assert set(jump.forwarded) == {("127.0.0.1", target.port)} and set(target.users) == {"ops"}


def test_an_ssh_key_pyinfra_does_not_know_is_refused_with_did_you_mean(lab_data):
    from rocmfleet.config.errors import ConfigError
    from rocmfleet.config.settings import host_config

    data = {**lab_data, "ssh_prot": 2222, "ssh_confg_file": "~/.ssh/fleet", "ssh_qwertyuiopasdf": 1, "vllm_profle": "x"}
    with pytest.raises(ConfigError) as info:
        host_config(data)
    problems = {p.key: p.message for p in info.value.problems}
    assert problems["ssh_prot"].endswith("did you mean 'ssh_port'?")
    assert problems["ssh_confg_file"].endswith("did you mean 'ssh_config_file'?")
    assert (
        problems["ssh_qwertyuiopasdf"].startswith("not an SSH key pyinfra knows")
        and "ssh_paramiko_connect_kwargs" in (problems["ssh_qwertyuiopasdf"])
    )  # no near miss: pyinfra's keys are listed
    assert "vllm_profle" in problems  # every problem at once
    host_config({**lab_data, **dict.fromkeys(["ssh_config_file", "ssh_connect_retries"], None)})  # pyinfra's own: fine
