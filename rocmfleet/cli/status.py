"""``rocmfleet status INVENTORY``: per host and instance: unit, image, ready, uptime, rollout step, drift."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from rocmfleet.cli.common import fleet_arguments, limit_list

if TYPE_CHECKING:
    from rocmfleet.config.settings import HostConfig
    from rocmfleet.facts.state import Gathered
    from rocmfleet.fleet.rollout.status import DriftRule, RoleDrift


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    st = sub.add_parser(
        "status",
        help="per host and instance: unit state, image, ready, uptime, rollout step, drift; every role's drift",
        epilog="exit status: 0 every instance ready; 1 an instance not ready or a host unreadable; "
        "2 bad inventory or options",
    )
    fleet_arguments(st)
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.inventory import load_targets
    from rocmfleet.fleet.rollout.fleetimage import CommandError
    from rocmfleet.fleet.rollout.report import drift_cell, host_drift, host_drift_lines, status_json
    from rocmfleet.fleet.rollout.status import fleet_status

    try:
        targets = load_targets(args.inventory, limit_list(args.limit), exclude=limit_list(args.exclude))
        rows, state = fleet_status(args.inventory, targets, drift_rule())
    except (CommandError, ValueError) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(status_json([r.row() for r in rows], state, host_drift(rows)), end="")
    else:
        import rich.console
        import rich.table

        steps = state.hosts if state is not None and state.blocking else {}
        table = rich.table.Table(
            "host", "instance", "unit", "image", "ready", "uptime", "rollout step", "drift", box=None
        )
        for r in rows:
            uptime = "-" if r.uptime_s is None else f"{r.uptime_s / 3600:.1f} h"
            step = steps[r.host].step if r.host in steps else "-"
            ready = {True: "yes", False: "NO", None: "-"}[r.ready] + (f" ({r.not_ready})" if r.not_ready else "")
            if r.image is None:  # the host could not be read: the error in place of the image
                image, drift = r.error or "-", drift_cell(r.drift)
            else:  # the image was read; an error is the drift read's, said in its cell
                image, drift = str(r.image), r.error if r.error and r.drift is None else drift_cell(r.drift)
            unit = f"{r.active}/{r.sub}"
            if r.error and r.error.startswith("watchdog gave up"):  # why the unit is left failed
                unit += f" ({r.error})"
            table.add_row(r.host, r.instance, unit, image, ready, uptime, step, drift)
        console = rich.console.Console()
        if not console.is_terminal:  # piped (`| grep`, `| cat`): whole cells, never `active/runn…`
            console = rich.console.Console(width=10_000)
        console.print(table)
        for line in host_drift_lines(rows):  # every role's drift (rocmfleet.plan.hostdrift)
            print(line)
        print(_status_summary(rows))
        if state is not None:
            what = state.target.reference if state.target else "same image"
            print(f"{state.kind} {state.id} ({what}): {state.status}")
    bad = any(r.error or r.ready is False for r in rows)
    return 1 if bad else 0


def drift_rule() -> DriftRule:
    """The plan's rules for the status's one ``HostState`` read of a host: it asks the vllm role's
    items (:func:`rocmfleet.plan.vllmplan.query`) and the host's plan's
    (:func:`rocmfleet.plan.hostdrift.read_query`); each instance's drift is
    :func:`rocmfleet.plan.hostdrift.instance_drift`'s, every role's is the host's plan
    (:func:`rocmfleet.plan.hostdrift.host_plan`) against the read (:func:`rocmfleet.plan.hostdrift.role_drift`).

    The command passes it to :func:`rocmfleet.fleet.rollout.status.fleet_status`, which makes the read.
    """
    from rocmfleet.fleet.rollout.status import DriftRule

    return DriftRule(query=_query, instances=_instances, roles=_roles)


def _query(config: HostConfig) -> dict[str, Any]:
    """The ``state_args`` keywords of the status's read: the vllm role's and the host's plan's, merged."""
    from rocmfleet.plan import hostdrift, hoststate, vllmplan
    from rocmfleet.plan.build import plan_host

    return hoststate.merge_queries(vllmplan.query(config), hostdrift.read_query(config, planner=plan_host))


def _instances(config: HostConfig, got: Gathered, host: str) -> dict[str, list[str]]:
    """Per instance, why the deploy would change it (:func:`rocmfleet.plan.hostdrift.instance_drift`)."""
    from rocmfleet.plan import hostdrift
    from rocmfleet.plan.build import plan_host

    return hostdrift.instance_drift(config, got, host, planner=plan_host)


def _roles(host: str, config: HostConfig, got: Gathered) -> tuple[RoleDrift, str]:
    """Every role's drift of ``host`` (``((role, (reasons...)), ...)``) and its plan's problem (``""``: none)."""
    from rocmfleet.plan import hostdrift
    from rocmfleet.plan.build import plan_host

    plan = hostdrift.host_plan(host, config, got, planner=plan_host)
    roles = hostdrift.as_dict(hostdrift.role_drift(plan, got))
    return tuple((role, tuple(why)) for role, why in roles.items()), plan.problem


def _status_summary(rows: list[Any]) -> str:
    """``3 host(s), 4 instance(s): 3 ready, 1 not ready; 1 host(s) with drift, 0 host(s) unreadable``
    (with drift: a role's item not as its plan wants, :attr:`InstanceStatus.roles`)."""
    hosts = {r.host for r in rows}
    unreadable = {r.host for r in rows if r.image is None and r.error}
    drifted = {r.host for r in rows if r.roles and any(why for _role, why in r.roles)}
    ready = sum(r.ready is True for r in rows)
    not_ready = sum(r.ready is False for r in rows)
    return (
        f"{len(hosts)} host(s), {len(rows)} instance(s): {ready} ready, {not_ready} not ready; "
        f"{len(drifted)} host(s) with drift, {len(unreadable)} host(s) unreadable"
    )
