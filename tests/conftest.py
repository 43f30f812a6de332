"""Shared fixtures. The ``lab`` fixture brings the lab up once per session and down at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lab_command(*args: str, timeout_s: float = 2400) -> None:
    """Run ``python -m tests.lab ARGS`` from the repository root; raise if it fails."""
    subprocess.run([sys.executable, "-m", "tests.lab", *args], cwd=ROOT, check=True, timeout=timeout_s)


def pyinfra_json(
    deploy_file: str, *flags: str, inventory: str = "inventories/lab.py", timeout_s: float = 3000
) -> tuple[int, dict, str]:
    """``pyinfra --json FLAGS INVENTORY DEPLOY_FILE``: exit status, JSON report, stderr.

    Pass ``-y`` to apply: without it pyinfra only plans (as ``--dry``).
    """
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "--json", *flags, inventory, deploy_file],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, report, proc.stderr


def lab_ssh(lab, name: str, command: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Run ``command`` as root on lab host ``name``; returns the completed process (never raises on rc)."""
    return subprocess.run(
        ["ssh", "-i", lab.ssh_key, "-o", f"UserKnownHostsFile={lab.known_hosts}", "-o", "BatchMode=yes"]
        + [f"root@{lab.hosts[name]}", command],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def rocmfleet_cli(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """``rocmfleet ARGS`` (the console script's entry point) from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="session")
def ssh_config(lab, tmp_path_factory) -> Path:
    """An ``ssh_config`` for the lab's hosts (root, the lab key, strict host keys), for testinfra."""
    path = tmp_path_factory.mktemp("ssh") / "config"
    path.write_text(
        "Host *\n  User root\n"
        f"  IdentityFile {lab.ssh_key}\n  UserKnownHostsFile {lab.known_hosts}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n"
    )
    return path


def connect(address: str, ssh_config: Path):
    """A testinfra host for the lab host at ``address``."""
    import testinfra

    return testinfra.get_host(f"ssh://root@{address}", ssh_config=str(ssh_config))


@pytest.fixture(scope="session")
def lab():
    """A fresh lab (3 hosts, services, image in the registry); taken down after the session.

    With ``ROCMFLEET_LAB_REUSE=1`` the lab that is up (and deployed, ``./dev lab``) is used as it
    is and left up: for working on one lab test file at a time, not for a full run. With
    ``ROCMFLEET_LAB_FRESH=1`` the lab that is up is one ``./dev test`` brought up bare for this run
    (while the type checker and the fast tests ran): it is used, then taken down.
    """
    from tests.lab.config import LabState

    if os.environ.get("ROCMFLEET_LAB_REUSE") == "1":
        yield LabState.load()
        return
    if os.environ.get("ROCMFLEET_LAB_FRESH") != "1":
        lab_command("up")
    yield LabState.load()
    lab_command("down")


def lab_inventory(directory: Path, host_data: dict[str, dict]) -> str:
    """An inventory file in ``directory``: ``inventories/lab.py`` with ``host_data`` ({host: {key: value}})
    merged into those hosts' data (a fleet whose inventory changed). Returns its path."""
    path = directory / "lab_changed.py"
    path.write_text(
        "from inventories.lab import all as _all, gpu_nodes\n"
        f"_changes = {host_data!r}\n"
        "all = ([(name, {**data, **_changes.get(name, {})}) for name, data in _all[0]], _all[1])  # noqa: A001\n"
    )
    return str(path)
