"""``rocmfleet status INVENTORY``: per host and instance: unit, image, ready, uptime, rollout step, drift."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rocmfleet.cli.common import fleet_arguments, limit_list


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
    from rocmfleet.fleet.rollout.fleetimage import CommandError
    from rocmfleet.fleet.rollout.report import drift_cell, host_drift, host_drift_lines, status_json
    from rocmfleet.fleet.rollout.status import fleet_status

    try:
        rows, state = fleet_status(args.inventory, limit_list(args.limit), exclude=limit_list(args.exclude))
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
