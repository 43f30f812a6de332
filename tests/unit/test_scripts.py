"""Host-side scripts (``rocmfleet/scripts``): shellcheck-clean, and run here under ``sh``."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest

from rocmfleet import scripts

SCRIPTS = sorted(p.name for p in scripts.DIR.glob("*.sh"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_is_shellcheck_clean(name):
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (./dev setup installs it)")
    result = subprocess.run(["shellcheck", "-s", "sh", str(scripts.DIR / name)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", scripts.command("vllm-probe.sh", *args)], capture_output=True, text=True)


@pytest.fixture
def listener():
    """A process of this machine listening on a free port of 127.0.0.1: (port, pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen();"
         " print(s.getsockname()[1], flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    port = int(proc.stdout.readline())
    yield port, proc.pid
    proc.kill()
    proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_owner_names_a_stranger_on_the_port(listener):
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    port, pid = listener
    result = run("owner", port, "vllm-nosuch")  # no such container: the listener is a stranger
    assert result.stdout.startswith(f"other {pid} {sys.executable} -c import socket")


def test_owner_of_a_free_port_is_free():
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    assert run("owner", free_port(), "vllm-nosuch").stdout == "free\n"


def test_a_stranger_answering_never_makes_the_instance_ready(listener):
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    port, pid = listener
    result = run("ready", port, "vllm-a", '"id":"m"', "{}")
    assert result.returncode == 1
    assert result.stderr.startswith(f"port {port}: other {pid} ") and "(not container vllm-a)" in result.stderr


def test_a_port_ss_cannot_read_is_not_free(tmp_path):
    (tmp_path / "ss").write_text("#!/bin/sh\necho 'Cannot open netlink socket: Permission denied' >&2\nexit 1\n")
    (tmp_path / "ss").chmod(0o755)
    command = scripts.command("vllm-probe.sh", "owner", 8000, "vllm-a")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env)
    assert result.stdout == "other ? (ss failed: Cannot open netlink socket: Permission denied)\n"


def test_the_probe_without_arguments_says_how_to_call_it():
    result = subprocess.run(["sh", str(scripts.DIR / "vllm-probe.sh")], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: vllm-probe.sh owner PORT CONTAINER")


def test_the_wait_says_how_to_call_it_when_a_target_is_incomplete():
    wait = ["sh", str(scripts.DIR / "vllm-wait.sh"), "5", "5", "1", "40", "PROBE", "WARMUP"]
    result = subprocess.run(wait, input="target a vllm-a.service\n", capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: vllm-wait.sh TIMEOUT_S ROLLBACK_TIMEOUT_S")
    result = subprocess.run([*wait, "a", "vllm-a.service"], input="", capture_output=True, text=True)
    assert result.returncode == 2 and "(stdin: lines 'target NAME UNIT" in result.stderr  # targets are not arguments


def test_owner_of_a_range_names_the_port_a_stranger_holds_and_knows_the_containers(listener, tmp_path):
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    port, pid = listener
    block = f"{port - 3}-{port + 6}"  # an instance's internal ports, one of them held
    stranger = run("owner", block, "vllm-nosuch").stdout
    assert stranger.startswith(f"other {pid} ") and stranger.endswith(f" on port {port}\n")
    (tmp_path / "docker").write_text(f"#!/bin/sh\necho PID\necho {pid}\n")  # `docker top`: the listener is ours
    (tmp_path / "docker").chmod(0o755)
    command = scripts.command("vllm-probe.sh", "owner", block, "vllm-a")
    env = {"PATH": f"{tmp_path}:/usr/sbin:/usr/bin:/sbin:/bin"}
    assert subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env).stdout == "ours\n"
    assert run("owner", f"{port + 1}-{port + 10}", "vllm-nosuch").stdout == "free\n"
