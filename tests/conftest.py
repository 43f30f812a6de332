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


def pyinfra_json(deploy_file: str, *flags: str, timeout_s: float = 3000) -> tuple[int, dict, str]:
    """``pyinfra --json FLAGS inventories/lab.py DEPLOY_FILE``: exit status, JSON report, stderr.

    Pass ``-y`` to apply: without it pyinfra only plans (as ``--dry``).
    """
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "--json", *flags, "inventories/lab.py", deploy_file],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )
    report = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, report, proc.stderr


@pytest.fixture(scope="session")
def lab():
    """A fresh lab (3 hosts, services, image in the registry); taken down after the session."""
    from tests.lab.config import LabState

    lab_command("up")
    yield LabState.load()
    lab_command("down")
