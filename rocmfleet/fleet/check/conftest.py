"""Fixtures the checks share: each host's plan (what the parent planned: the check process never
reads the configuration), its GPU topology as read now, Docker state.

One check process may check several hosts (testinfra's ``--hosts``, a module-scoped parameter):
every fixture here is per host, looked up by the host's inventory name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.domain.topology import Topology
from rocmfleet.facts.topology import GpuTopology, parse_fact_output
from rocmfleet.fleet.check import checkfile, expect

if TYPE_CHECKING:
    from testinfra.host import Host

    from rocmfleet.plan.checkmodel import CheckInstance, CheckValues
    from rocmfleet.plan.model import HostPlan


def instance_names(per_host: dict[str, list[str]]) -> list[str]:
    """Every instance name of any host, each once, in first-seen order (the ``instance`` parameter)."""
    return list(dict.fromkeys(name for names in per_host.values() for name in names))


def runs_here(host_name: str | None, instance: str | None, per_host: dict[str, list[str]]) -> bool:
    """Whether a check of ``instance`` (``None``: not per instance) belongs on ``host_name``.

    ``instance`` is one of :func:`instance_names`; a host runs only its own instances.
    """
    return instance is None or instance in per_host.get(host_name or "", [])


def _per_host() -> dict[str, list[str]]:
    return {name: [i.name for i in expect.instances_of(name)] for name in checkfile.host_names()}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each check taking ``instance`` once per vLLM instance of each host (none without an inventory).

    The parameter is the instance name over every host of the process; the pairs of a host and an
    instance it does not run are deselected (:func:`pytest_collection_modifyitems`).
    """
    if "instance" in metafunc.fixturenames:
        names = instance_names(_per_host())
        metafunc.parametrize("instance", names, ids=names, indirect=True)


def _params(item: pytest.Item) -> tuple[str | None, str | None]:
    params = getattr(getattr(item, "callspec", None), "params", {})
    host = params.get("_testinfra_host")
    return (checkfile.host_name(host) if host is not None else None), params.get("instance")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    per_host = _per_host()
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if runs_here(*_params(item), per_host) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def instance(request: pytest.FixtureRequest, host: Host) -> CheckInstance:
    """The vLLM instance of this host named by the parameter (the plan's ``checks.instances``)."""
    found: CheckInstance = next(i for i in expect.instances_of(host) if i.name == request.param)
    return found


@pytest.fixture(scope="module")
def plan(host: Host) -> HostPlan:
    """The host's plan (:func:`rocmfleet.fleet.check.expect.host_plan`); checks that need it skip without one."""
    found = expect.host_plan(host)
    if found is None:
        pytest.skip(f"no plan given ({checkfile.FILE_ENV} is unset): nothing to compare with")
    return found


@pytest.fixture(scope="module")
def checks(host: Host, plan: HostPlan) -> CheckValues:
    """What the host's live checks compare with (the plan's ``checks``)."""
    found = expect.check_values(host)
    assert found is not None  # the plan fixture skipped without one
    return found


@pytest.fixture(scope="module")
def topology(host: Host) -> Topology:
    """The host's GPUs and NUMA nodes, read with the deploy's own ``GpuTopology`` fact command
    (once per host and run: :func:`rocmfleet.fleet.check.expect.once`)."""
    found: Topology = expect.once(host, "topology", lambda: _read_topology(host))
    return found


def _read_topology(host: Host) -> Topology:
    result = host.run(GpuTopology().command())
    if result.rc != 0:
        raise CannotCheck(f"GpuTopology command exited {result.rc}: {result.stderr.strip() or result.stdout.strip()}")
    found = parse_fact_output(result.stdout.splitlines())
    if found is None:
        raise CannotCheck("no GPUs in /sys/class/kfd (is the amdgpu driver loaded?)")
    return found


@pytest.fixture(scope="module")
def docker_running(host: Host) -> None:
    """Skip (the Docker check reports it) when Docker is not running."""
    if not expect.running(host, expect.DOCKER_UNIT):
        pytest.skip("Docker is not running (reported by test_docker_running)")
