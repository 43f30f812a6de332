"""Fixtures the checks share: the host's expected configuration, its GPU topology, Docker state."""

from __future__ import annotations

import pytest

from rocmfleet.checks import expect
from rocmfleet.errors import CannotCheck
from rocmfleet.facts.topology import GpuTopology, parse_fact_output
from rocmfleet.topology import Topology


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each check taking ``instance`` once per vLLM instance of the host (none without an inventory)."""
    if "instance" in metafunc.fixturenames:
        config = expect.host_config()
        instances = config.instances() if config else []
        metafunc.parametrize("instance", instances, ids=[i.name for i in instances])


@pytest.fixture(scope="module")
def config():
    """The host's validated configuration; checks that need it skip without an inventory."""
    found = expect.host_config()
    if found is None:
        pytest.skip(f"no expectations given ({expect.FILE_ENV} is unset): nothing to compare with")
    return found


@pytest.fixture(scope="module")
def topology(host) -> Topology:
    """The host's GPUs and NUMA nodes, read with the deploy's own ``GpuTopology`` fact command."""
    result = host.run(GpuTopology().command())
    if result.rc != 0:
        raise CannotCheck(f"GpuTopology command exited {result.rc}: {result.stderr.strip() or result.stdout.strip()}")
    found = parse_fact_output(result.stdout.splitlines())
    if found is None:
        raise CannotCheck("no GPUs in /sys/class/kfd (is the amdgpu driver loaded?)")
    return found


@pytest.fixture(scope="module")
def docker_running(host) -> None:
    """Skip (the Docker check reports it) when Docker is not running."""
    if not host.service("docker.service").is_running:
        pytest.skip("Docker is not running (reported by test_docker_running)")
