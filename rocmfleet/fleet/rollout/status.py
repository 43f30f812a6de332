"""``rocmfleet status``: every vLLM instance of every host (unit, image, ready, uptime) and the rollout recorded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rocmfleet.fleet import inventory as fleet_inventory
from rocmfleet.fleet.rollout import hoststeps
from rocmfleet.fleet.rollout.hoststeps import InstanceStatus, parallel
from rocmfleet.fleet.rollout.runner import step_failure
from rocmfleet.fleet.rollout.state import RolloutState, load_state, results_root, state_path


def fleet_status(
    inventory: str, limit: list[str] | None = None, results_dir: str | None = None
) -> tuple[list[InstanceStatus], RolloutState | None]:
    """``rocmfleet status``: every instance of every host (unit, image, ready, uptime) and any rollout recorded."""
    targets = fleet_inventory.load_targets(inventory, limit)
    steps = hoststeps.HostSteps(inventory, targets, Path("."), "status")

    def one(name: str) -> list[InstanceStatus]:
        try:
            _now, instances, _started = steps.observe(name)
            ready = steps.ready(name)
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            return [InstanceStatus(name, "-", "unknown", "unknown", None, None, None, step_failure(exc))]
        return [replace(i, ready=ready.get(i.instance)) for i in instances]

    rows = [row for rows in parallel(one, list(targets)) for row in rows]
    return rows, load_state(state_path(results_root(results_dir, inventory), inventory))
