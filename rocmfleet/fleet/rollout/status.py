"""``rocmfleet status``: every vLLM instance of every host (unit, image, ready, uptime, drift) and
the rollout recorded."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmfleet import scripts
from rocmfleet.config.settings import HostConfig
from rocmfleet.facts.state import Gathered, parse_state, state_args
from rocmfleet.fleet.rollout import hoststeps
from rocmfleet.fleet.rollout.instancestatus import InstanceStatus
from rocmfleet.fleet.rollout.state import RolloutState, load_state, results_root, state_path
from rocmfleet.fleet.rollout.steps import StepError, step_failure
from rocmfleet.fleet.target import Target, parallel

#: Seconds the ``HostState`` read of a host may take (its GPU topology script runs under ``timeout 20``).
STATE_TIMEOUT_S = 120


#: ``(role, reasons)`` per role of a host (:func:`rocmfleet.plan.hostdrift.role_drift`, said per item).
RoleDrift = tuple[tuple[str, tuple[str, ...]], ...]

#: A host's drift: ``({instance: [reasons]}, ((role, (reasons...)), ...), plan problem)`` (an empty
#: list or tuple: as wanted; the problem ``""`` when the host's plan has none).
HostDrift = tuple[dict[str, list[str]], RoleDrift, str]


@dataclass(frozen=True)
class DriftRule:
    """The plan's rules the status applies to one ``HostState`` read, passed in by the command
    (:mod:`rocmfleet.cli.status`), so that the fleet's reads do not stack on the host's planning.

    ``query(config) -> {state_args keyword: value}``: what the read asks (the vllm role's items and
    the host's plan's); ``instances(config, got, host) -> {instance: [reasons]}``: why the deploy would
    change each instance (``ValueError``: a read it cannot judge); ``roles(host, config, got) ->
    (RoleDrift, plan problem)``: every role's drift from the host's plan, planned from ``config`` on
    the topology, device group ids and OS of ``got``.
    """

    query: Callable[[HostConfig], Mapping[str, Any]]
    instances: Callable[[HostConfig, Gathered, str], dict[str, list[str]]]
    roles: Callable[[str, HostConfig, Gathered], tuple[RoleDrift, str]]


def read_drift(steps: hoststeps.HostSteps, host: str, rule: DriftRule) -> HostDrift:
    """Per instance of ``host``, why the deploy would change it, and every role's drift: one
    ``HostState`` read over ``steps``' connection asking ``rule.query`` of the host's validated
    configuration (``steps.targets[host].config``), judged by ``rule.instances`` and ``rule.roles``.

    Returns:
        ``({instance: [reasons]}, ((role, (reasons...)), ...), plan problem)`` (an empty list or
        tuple: as wanted; the problem ``""`` when the host's plan has none).

    Raises:
        StepError: ``drift``, when the read fails (the host cannot be reached, ``state.sh`` exits
            non-zero or prints what the parser refuses, the GPU topology cannot be read).
    """
    config = steps.targets[host].config
    command = scripts.command("state.sh", *state_args(**rule.query(config)))
    result = steps.run(host, command, STATE_TIMEOUT_S, "drift")
    if result.exit_status != 0:
        raise StepError("drift", f"{host}: state.sh exited {result.exit_status}: {result.stderr.strip()[-300:]}")
    try:  # a file's stray byte is one U+FFFD in its own text, as in the check's read
        got = parse_state(result.stdout_bytes.decode("utf-8", "replace").splitlines())
        instances = rule.instances(config, got, host)
    except ValueError as exc:
        raise StepError("drift", f"{host}: {exc}") from None
    roles, problem = rule.roles(host, config, got)
    return instances, roles, problem


def fleet_status(
    inventory: str,
    targets: Mapping[str, Target[HostConfig]],
    rule: DriftRule,
    results_dir: str | None = None,
) -> tuple[list[InstanceStatus], RolloutState | None]:
    """``rocmfleet status``: every instance of every host (unit, image, ready, uptime, drift, its host's
    drift per role: :attr:`InstanceStatus.roles`, judged by ``rule``) and any rollout recorded.

    One connection per host carries its reads (:meth:`~rocmfleet.fleet.rollout.hoststeps.HostSteps.connected`).
    A host that cannot be read gets one row with ``error`` (nothing raised); a host whose
    ``HostState`` read alone fails keeps its rows, each with ``drift`` ``None`` and that ``error``.

    Args:
        inventory: the inventory file (the rollout recorded for it is read).
        targets: its hosts, by name in inventory order (:func:`rocmfleet.fleet.inventory.load_targets`,
            called by the command: only the commands load an inventory).
        rule: the plan's drift rules (:class:`DriftRule`).
        results_dir: where rollouts are recorded (``None``: the default).
    """
    steps = hoststeps.HostSteps(inventory, targets, Path("."), "status")

    def one(name: str) -> list[InstanceStatus]:
        drift: dict[str, list[str]] = {}
        roles: RoleDrift | None = None
        problem = ""
        failed: str | None = None
        try:
            with steps.connected(name):
                _now, instances, _started = steps.observe(name)
                ready = steps.ready(name)
                try:
                    drift, roles, problem = read_drift(steps, name, rule)
                except Exception as exc:  # noqa: BLE001 - the rows stay, without their drift
                    failed = step_failure(exc)
        except Exception as exc:  # noqa: BLE001 - a failure on one host is reported, not raised
            return [InstanceStatus(name, "-", "unknown", "unknown", None, None, None, step_failure(exc))]
        return [
            replace(
                i,
                ready=None if i.instance not in ready else ready[i.instance] is None,
                not_ready=ready.get(i.instance),
                error=i.error or failed,
                drift=tuple(drift[i.instance]) if i.instance in drift else None,
                roles=roles,
                problem=problem,
            )
            for i in instances
        ]

    rows = [row for rows in parallel(one, list(targets)) for row in rows]
    return rows, load_state(state_path(results_root(results_dir, inventory), inventory))
