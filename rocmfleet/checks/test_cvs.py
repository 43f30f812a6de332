"""AMD Cluster Validation Suite host checks that apply to one node (see :mod:`rocmfleet.cvs`)."""

from __future__ import annotations

import pytest

from rocmfleet import cvs
from rocmfleet.checks.expect import in_container

LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")


def test_gpu_pcie_links_not_downgraded(host, topology):
    problems, absent = [], []
    for gpu in topology.gpus:
        device = f"/sys/bus/pci/devices/{gpu.pci_address.lower()}"
        if not host.file(device).exists:
            absent.append(gpu.pci_address)
            continue
        attrs = {name: host.file(f"{device}/{name}").content_string for name in LINK_FILES}
        problems += cvs.link_problems(gpu.pci_address, attrs)
    if absent and in_container(host):
        pytest.skip(f"container host: GPUs {', '.join(absent)} are not this machine's PCI devices")
    assert not absent, f"GPUs in KFD but not in PCI sysfs: {', '.join(absent)}"
    assert not problems, "; ".join(problems)


def test_no_amdgpu_errors_since_boot(host):
    if in_container(host):
        pytest.skip("container host: the kernel log belongs to the machine it runs on")
    log = host.run("journalctl -k -b 0 -p err --no-pager -o short-monotonic")
    assert log.rc == 0, f"journalctl: {log.stderr.strip()}"
    errors = cvs.amdgpu_errors(log.stdout)
    assert not errors, f"{len(errors)} amdgpu error(s) since boot, last: " + " | ".join(errors[-3:])
