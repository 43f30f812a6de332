"""Runs last (file order): ``lab down`` leaves no process, mount, interface, namespace or cgroup."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import lab_command

pytestmark = pytest.mark.lab


def test_lab_down_leaves_nothing_behind(lab):
    from tests.lab import config

    lab_command("down")
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "systemd-nspawn" not in processes
    assert "tests.lab.hosts supervise" not in processes
    assert "docker-registry serve" not in processes
    assert "tinyproxy" not in processes
    assert not Path(f"/sys/class/net/{config.BRIDGE}").exists()
    assert str(config.LAB_DIR) not in Path("/proc/self/mountinfo").read_text()
    assert not list(Path("/sys/fs/cgroup").glob("*/lab"))
    assert not [link for link in os.listdir("/sys/class/net") if link.startswith("vb-lab")]
