"""``rocmfleet plan INVENTORY``: what a deploy would leave on every host, offline (no connection)."""

from __future__ import annotations

import argparse

from rocmfleet.cli.common import fleet_arguments, limit_list


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    pl = sub.add_parser(
        "plan",
        help="print what a deploy would leave on every host (services, files, packages, units), offline",
        epilog="exit status: 0 planned; 1 a host's instances cannot be placed on the topology or its OS is "
        "not supported (the others are planned); 2 a bad inventory, data or option",
    )
    fleet_arguments(pl)
    pl.add_argument(
        "--topology",
        metavar="NAME|FILE",
        help="the hosts' GPU topology: mi300x (default: 8x MI300X, SPX, NPS1) or mi308x-8gpu-cpx (recorded), "
        "the GPU topology script's output, a recorded host (JSON) or a KFD tree directory",
    )
    shape = pl.add_mutually_exclusive_group()  # the JSON holds every file's text already (``contents``)
    shape.add_argument("--json", action="store_true", help="print the plan as JSON (stable: sorted keys)")
    shape.add_argument("--files", action="store_true", help="print every file whole, after a header line")
    pl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.fleet import plancmd

    return plancmd.run(
        args.inventory, limit_list(args.limit), limit_list(args.exclude), args.topology, args.json, args.files
    )
