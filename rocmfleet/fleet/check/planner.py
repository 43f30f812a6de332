"""How ``rocmfleet check`` and a rollout's checks plan a host: the :data:`~rocmfleet.fleet.check.hostplan.Planner`
they give :mod:`rocmfleet.fleet.check.compliance` (which imports no planning itself)."""

from __future__ import annotations

from rocmfleet.fleet.target import Target
from rocmfleet.plan.build import plan_host
from rocmfleet.plan.model import HostPlan
from rocmfleet.plan.sources import HostFacts


def plan_target(target: Target, facts: HostFacts) -> HostPlan:
    """``target``'s plan on ``facts`` (:func:`rocmfleet.plan.build.plan_host` of its validated
    configuration; never raises for the host: ``HostPlan.problem`` says what cannot be placed)."""
    return plan_host(target.name, target.config, facts)
