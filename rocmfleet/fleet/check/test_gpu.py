"""GPU health (issue 26): every GPU the data names is there, no ECC errors the fleet does not
take, no GPU reset or hang since boot (:mod:`rocmfleet.domain.gpuhealth`). A rollout and a
rolling restart gate each host on these too, so a host with a failing GPU is never undrained."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rocmfleet import scripts
from rocmfleet.domain import gpuhealth, parts
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.domain.topology import Topology
from rocmfleet.fleet.check import expect
from rocmfleet.plan.checkmodel import CheckValues

if TYPE_CHECKING:
    from testinfra.host import Host


@pytest.fixture(scope="module")
def health(host: Host) -> gpuhealth.HealthRead:
    """``gpu-health.sh`` on the host, parsed (once per host and run)."""

    def read() -> gpuhealth.HealthRead:
        result = host.run(scripts.command("gpu-health.sh"))
        if result.rc != 0:
            raise CannotCheck(f"gpu-health.sh exited {result.rc}: {result.stderr.strip()[-300:]}")
        try:
            return gpuhealth.parse_health(result.stdout)
        except ValueError as exc:
            raise CannotCheck(f"amd-smi metric --ecc --json: {exc}") from None

    found: gpuhealth.HealthRead = expect.once(host, "gpu health", read)
    return found


def test_gpus_present(checks: CheckValues, topology: Topology) -> None:
    """The host shows ``vllm_gpu_count`` GPUs, and its devices, KFD nodes and partition modes agree
    (:func:`rocmfleet.domain.parts.topology_problems`: a GPU that fell off the bus or failed its
    init is named by its PCI address)."""
    part, mixed = parts.host_part(topology)
    problems = mixed + parts.topology_problems(topology, part, checks.gpu_count)
    assert not problems, "; ".join(problems)


def test_ecc_errors(checks: CheckValues, health: gpuhealth.HealthRead) -> None:
    """No GPU with an uncorrectable or deferred ECC error since boot, nor more correctable ones
    than ``gpu_ecc_correctable_max`` (amd-smi's counts, or amdgpu's RAS counters in sysfs)."""
    if health.source is None:
        pytest.skip("neither amd-smi nor amdgpu's RAS counters in sysfs give ECC counts on this host")
    problems = gpuhealth.ecc_problems(health.ecc, checks.ecc_correctable_max)
    assert not problems, f"{'; '.join(problems)} (from {health.source})"


def test_no_gpu_reset_since_boot(health: gpuhealth.HealthRead) -> None:
    """The kernel log since boot has no amdgpu job timeout, GPU reset or RAS reset."""
    if health.kernel_log_error is not None:
        pytest.skip(f"the kernel log cannot be read: {health.kernel_log_error}")
    assert not health.resets, (
        f"{len(health.resets)} amdgpu reset/hang line(s) in the kernel log since boot, the last: {health.resets[-1]}"
    )
