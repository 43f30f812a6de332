"""``rocmfleet metrics targets INVENTORY [-o FILE]``: Prometheus file_sd targets of every vLLM instance and exporter."""

from __future__ import annotations

import argparse

from rocmfleet.cli.common import INVENTORY_HELP


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    m = sub.add_parser("metrics", help="Prometheus metrics of the fleet: scrape targets")
    msub = m.add_subparsers(dest="metrics_command", required=True)
    mt = msub.add_parser(
        "targets",
        help="print (or write) Prometheus file_sd JSON: every vLLM instance (job vllm) and AMD exporter "
        "(job amd-device-metrics) of an inventory, labelled host, rocmfleet_instance, model, served_model_name, "
        "image_digest, gpus, vllm_version",
        epilog="no host is contacted; no vault password is asked for (inline !vault values are read by name; a "
        "group file encrypted whole still needs it). exit status: 0 printed or written; 2 nothing written (bad "
        "inventory or data, each problem said, or a file it cannot write)",
    )
    mt.add_argument("inventory", help=INVENTORY_HELP)
    mt.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write FILE whole (a temporary file beside it, then renamed; mode 0644) and print a summary line; "
        "FILE ends in .json, .yml or .yaml, the names Prometheus's file_sd reads (-: standard output)",
    )
    mt.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.inventory import load_fleet
    from rocmfleet.fleet.metrics import command

    return command.run(args.inventory, args.output, load=load_fleet)
