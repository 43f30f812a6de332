"""AMD Cluster Validation Suite host checks that apply to one node (see :mod:`rocmfleet.fleet.check.cvs`)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import cvs
from rocmfleet.fleet.check.expect import in_container

if TYPE_CHECKING:
    from testinfra.host import Host

    from rocmfleet.domain.topology import Topology

SYSFS = "/sys/bus/pci/devices"


def test_gpu_pcie_links_not_downgraded(host: Host, topology: Topology) -> None:
    """Every GPU's PCIe link runs at its maximum speed and width (sysfs ``current_link_*`` against ``max_link_*``), as
    AMD's CVS checks."""
    gpus = [gpu.pci_address.lower() for gpu in topology.gpus]
    # one command for all GPUs: ls prints the paths that exist (exit 2 when one does not)
    listed = host.run("ls -d -- " + " ".join(shlex.quote(f"{SYSFS}/{gpu}") for gpu in gpus))
    if listed.rc not in (0, 2):
        raise CannotCheck(f"ls of the GPUs' sysfs paths exited {listed.rc}: {listed.stderr.strip()[-300:]}")
    absent = [gpu for gpu in gpus if f"{SYSFS}/{gpu}" not in listed.stdout.splitlines()]
    if absent and in_container(host):
        pytest.skip(f"container host: GPUs {', '.join(absent)} are not this machine's PCI devices")
    assert not absent, f"GPUs in KFD but not in PCI sysfs: {', '.join(absent)}"
    resolved = host.run("readlink -f " + " ".join(shlex.quote(f"{SYSFS}/{gpu}") for gpu in gpus))
    lines = resolved.stdout.splitlines()
    if resolved.rc != 0 or len(lines) != len(gpus):
        raise CannotCheck(f"readlink of the GPUs' sysfs paths: exit {resolved.rc}, {len(lines)} of {len(gpus)} paths")
    paths = {gpu: cvs.pci_path(line, gpu) for gpu, line in zip(gpus, lines, strict=True)}
    devices = sorted({device for path in paths.values() for device in path})
    files = " ".join(shlex.quote(f"{SYSFS}/{d}/{name}") for d in devices for name in cvs.LINK_FILES)
    # grep exits 2 when a bridge has no link attributes (not a PCIe port): parse_link_files judges.
    attrs = cvs.parse_link_files(host.run(f"grep -H '' {files} 2>/dev/null").stdout, devices)
    problems = [problem for gpu, path in paths.items() for problem in cvs.path_link_problems(gpu, path, attrs)]
    assert not problems, "; ".join(problems)


def test_no_amdgpu_errors_since_boot(host: Host) -> None:
    """The kernel log since boot has no amdgpu error lines (``journalctl -k -p err``), as AMD's CVS checks."""
    if in_container(host):
        pytest.skip("container host: the kernel log belongs to the machine it runs on")
    probe = host.run("journalctl -k -b 0 -n 1 --no-pager -o short-monotonic")
    if probe.rc != 0:
        raise CannotCheck(f"journalctl exited {probe.rc}: {probe.stderr.strip()}")
    cvs.kernel_log_readable(probe.stdout)
    log = host.run("journalctl -k -b 0 -p err --no-pager -o short-monotonic")
    if log.rc != 0:
        raise CannotCheck(f"journalctl exited {log.rc}: {log.stderr.strip()}")
    errors = cvs.amdgpu_errors(log.stdout)
    assert not errors, f"{len(errors)} amdgpu error(s) since boot, last: " + " | ".join(errors[-3:])
