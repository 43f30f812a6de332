"""``rocmfleet validate INVENTORY``: check every host's data before any connection; exit 2 on any problem."""

from __future__ import annotations

import argparse
import sys

from rocmfleet.cli.common import INVENTORY_HELP


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    p = sub.add_parser(
        "validate",
        help="validate an inventory and its group_vars before any connection",
        epilog="exit status: 0 every host's data is valid (a placeholder digest is warned about); "
        "2 a problem (each with its file, key, value and what is allowed)",
    )
    p.add_argument("inventory", help=INVENTORY_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.config.validate import EXIT_INVALID, InventoryError, placeholder_warning, report, validate_inventory

    try:
        configs, problems = validate_inventory(args.inventory)
    except InventoryError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if problems:
        print(f"rocmfleet: {report(problems)}", file=sys.stderr)
        return EXIT_INVALID
    for name, config in configs.items():
        instances = ", ".join(f"{i.name}:{i.port}" for i in config.instances())
        print(f"{name}: ok ({config.profile.name}, {config.image.reference}; {instances})")
    if warning := placeholder_warning(configs):
        print(f"rocmfleet: warning: {warning}", file=sys.stderr)
    return 0
