"""Every role as the deploy leaves it, by the plan's one rule (:mod:`rocmfleet.plan.hostdrift`).

One check per role, ``drift::role_as_wanted[ROLE]``: the role's files, directories, packages, units
and removed paths of the host's plan (the parent's, planned on the topology, device group ids and OS
read from the host: :mod:`rocmfleet.fleet.check.hostplan`) have no drift. Items another check
already asserts by the same rule are left to it, so that one fault fails one check (:data:`COVERED`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain import tuning
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.facts.state import Gathered
from rocmfleet.fleet.check import checkfile, expect
from rocmfleet.plan import drift as drift_rule
from rocmfleet.plan import hostdrift
from rocmfleet.plan.drift import Drift
from rocmfleet.plan.model import HostPlan, Role

if TYPE_CHECKING:
    from testinfra.host import Host

#: Items asserted by another check (one fault, one failed check): ``docker::docker_running`` (the
#: service), ``tuning::numa_balancing_persisted`` and ``tuning::cpu_unit_enabled`` (the sysctl file,
#: the CPU unit and its file, each with its text in the message); the vllm instances' files and
#: units are ``vllm::instance_files_as_wanted`` and ``vllm::unit_enabled_and_active`` (:func:`covered`).
COVERED: dict[str, tuple[str, ...]] = {
    "docker": (expect.DOCKER_UNIT,),
    "tuning": (tuning.SYSCTL_FILE, tuning.CPU_UNIT_PATH, tuning.CPU_UNIT),
}


def covered(plan: HostPlan, role: Role) -> set[str]:
    """The items of ``role`` that another check asserts (:data:`COVERED`; for ``vllm`` each
    instance's environment file, unit file, secrets file and unit, placed or not)."""
    items = set(COVERED.get(role, ()))
    if role == "vllm" and plan.checks is not None:
        for i in plan.checks.instances:
            items |= {i.env_file, i.unit_path, i.secrets_file, i.unit}
    return items


def plan_read(host: Host, plan: HostPlan) -> Gathered:
    """The read of every item of the host's plan (:func:`rocmfleet.plan.drift.query`), in one
    ``state.sh`` command of its own, once per host and process (:func:`rocmfleet.fleet.check.expect.read_state`).

    Raises:
        CannotCheck: the plan was made without the host's facts (their read failed: the placement
            and the kernel's packages are not known), or the command failed or its output was cut
            short or unknown.
    """
    if plan.topology_source.startswith(checkfile.UNREAD):
        raise CannotCheck(f"the plan was made without the host's facts: {plan.topology_source}")
    return expect.read_state(host, "plan-state", lambda: dict(drift_rule.query(plan)))


def failure(plan: HostPlan, found: list[Drift], skip: set[str]) -> str | None:
    """The message of a role's check: its drift items but ``skip``'s, ``; ``-separated (``None``:
    as wanted); the plan's problem first when it has one.

    Raises:
        CannotCheck: every remaining item is one the read did not report (it could not tell).
    """
    left = [d for d in found if d.item not in skip]
    if left and all(d.field == "not read" for d in left):
        raise CannotCheck("the read could not tell: " + "; ".join(str(d) for d in left))
    if not left:
        return None
    return "; ".join([*([f"plan: {plan.problem}"] if plan.problem else []), *(hostdrift.said(d) for d in left)])


@pytest.mark.parametrize("role", hostdrift.ROLES)
def test_role_as_wanted(host: Host, plan: HostPlan, role: Role) -> None:
    """One per role (``drift::role_as_wanted[base]``, ``[rocm]``, ``[tuning]``, ``[exporter]``, ``[docker]``,
    ``[vllm]``): the role's items of the host's plan (files with content, mode and owner; directories;
    packages, versions and holds as dpkg has them; units; paths kept absent) are as the deploy
    leaves them: :func:`rocmfleet.plan.drift.drift` is empty. Items another check asserts are
    left to it (:data:`COVERED`). Each drifted item is named, ``; ``-separated."""
    got = plan_read(host, plan)
    if plan.packages and not got.packages:  # dpkg-query failed: "not installed" would be a guess
        raise CannotCheck("dpkg-query reported none of the packages asked for")
    found = hostdrift.role_drift(hostdrift.role_items(plan, role), got)[role]
    message = failure(plan, found, covered(plan, role))
    assert message is None, message
