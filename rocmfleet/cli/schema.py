"""``rocmfleet schema``: print the JSON Schema of host data (for editors)."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    s = sub.add_parser("schema", help="print the JSON Schema of host data", epilog="exit status: 0")
    s.set_defaults(func=run)


def run(_args: argparse.Namespace) -> int:
    from rocmfleet.config.reference import json_schema

    print(json_schema(), end="")
    return 0
