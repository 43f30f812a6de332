"""Boot, supervise and stop lab hosts (``systemd-nspawn --boot``).

Each host runs under a small supervisor process, as systemd's own ``systemd-nspawn@.service``
would: nspawn exits with status 133 when the host reboots, and the supervisor starts it again;
any other exit ends the supervisor. Run one by hand with
``python -m tests.lab.hosts supervise lab-1``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.lab import cgroups, config

#: nspawn's exit status when the container's systemd rebooted (systemd-nspawn@.service:
#: ``RestartForceExitStatus=133``).
REBOOT_STATUS = 133


def nspawn_command(host: str, tree: Path, cgroup_tree: Path) -> list[str]:
    """The nspawn command line that boots ``host`` (flags from issue 2, tried on this machine)."""
    return [
        "systemd-nspawn",
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine={host}",
        f"--directory={tree}",
        f"--network-bridge={config.BRIDGE}",
        "--capability=all",
        "--system-call-filter=@keyring bpf",
        "--property=DeviceAllow=char-* rwm",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
        f"--bind={cgroup_tree}:/sys/fs/cgroup",
    ]


def _pidfile(host: str) -> Path:
    return config.RUN_DIR / host / "supervisor.pid"


def supervise(host: str) -> int:
    """Boot ``host`` and boot it again after every reboot until it powers off or is stopped."""
    tree = config.HOSTS_DIR / host
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child and child.poll() is None:
            child.terminate()  # nspawn turns this into an orderly poweroff of the host

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        cgroup_tree = cgroups.create(host)
        child = subprocess.Popen(
            nspawn_command(host, tree, cgroup_tree),
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: cgroups.enter(host),
        )
        rc = child.wait()
        print(f"[{time.strftime('%H:%M:%S')}] nspawn for {host} exited with {rc}", flush=True)
        _kill_leftovers(host)
        if stopping or rc != REBOOT_STATUS:
            cgroups.destroy(host)
            return 0 if stopping else rc


def _kill_leftovers(host: str) -> None:
    for pid in cgroups.pids(host):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def is_running(host: str) -> bool:
    """True when ``host``'s supervisor process is alive."""
    pidfile = _pidfile(host)
    if not pidfile.exists():
        return False
    try:
        os.kill(int(pidfile.read_text()), 0)
    except (ProcessLookupError, ValueError):
        return False
    return True


def start(host: str) -> None:
    """Start ``host``'s supervisor in the background (logs in ``RUN_DIR/<host>/console.log``)."""
    if is_running(host):
        return
    rundir = config.RUN_DIR / host
    rundir.mkdir(parents=True, exist_ok=True)
    log = (rundir / "console.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.lab.hosts", "supervise", host],
        cwd=config.REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _pidfile(host).write_text(str(proc.pid))


def stop(host: str, timeout_s: float = 60) -> None:
    """Power ``host`` off (SIGTERM to its supervisor), forcing it after ``timeout_s`` seconds."""
    pidfile = _pidfile(host)
    if is_running(host):
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and is_running(host):
            time.sleep(0.5)
        if is_running(host):
            _kill_leftovers(host)
            os.kill(pid, signal.SIGKILL)
            time.sleep(1)
    _kill_leftovers(host)
    cgroups.destroy(host)
    pidfile.unlink(missing_ok=True)


def wait_for_ssh(address: str, key: Path, known_hosts: Path, timeout_s: float = 120) -> None:
    """Wait until ``root@address`` accepts the lab key and systemd has finished booting.

    Raises:
        TimeoutError: the host did not get there within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        result = subprocess.run(
            [
                "ssh",
                "-i",
                str(key),
                "-o",
                f"UserKnownHostsFile={known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=3",
                f"root@{address}",
                "systemctl is-system-running --wait",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        last = (result.stdout + result.stderr).strip()
        if result.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(1)
    raise TimeoutError(f"{address}: not up after {timeout_s:.0f} s (last answer: {last!r})")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "supervise":
        sys.exit("usage: python -m tests.lab.hosts supervise HOST")
    sys.exit(supervise(sys.argv[2]))
