"""Shared fixtures. The ``lab`` fixture brings the lab up once per session and down at the end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lab_command(*args: str, timeout_s: float = 2400) -> None:
    """Run ``python -m tests.lab ARGS`` from the repository root; raise if it fails."""
    subprocess.run([sys.executable, "-m", "tests.lab", *args], cwd=ROOT, check=True, timeout=timeout_s)


@pytest.fixture(scope="session")
def lab():
    """A fresh lab (3 hosts, services, image in the registry); taken down after the session."""
    from tests.lab.config import LabState

    lab_command("up")
    yield LabState.load()
    lab_command("down")
