"""``rocmfleet bench INVENTORY``: the smoke benchmark on every host; exit 0 pass, 1 fail, 2 no run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rocmfleet.cli.common import fleet_arguments, limit_list, positive

#: What an interrupted benchmark left, said after Ctrl-C instead of a traceback.
INTERRUPTED = "the results of the hosts that finished are in the results directory"


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    b = sub.add_parser(
        "bench",
        help="run the smoke benchmark (vllm bench serve) on every host of an inventory",
        epilog="exit status: 0 every host met its profile's thresholds; 1 a host failed them or its benchmark "
        "did not run; 2 the run could not happen (bad inventory or options, a results directory it cannot write)",
    )
    fleet_arguments(b)
    b.add_argument("--results-dir", default="bench-results", help="results root (default ./bench-results)")
    b.add_argument(
        "--json", action="store_true", help="print a JSON report to standard output (progress to standard error)"
    )
    b.add_argument(
        "--timeout-s", type=positive(float), default=3600, help="deadline per host in seconds (default 3600)"
    )
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.bench import benchrun
    from rocmfleet.fleet.inventory import FleetError, load_fleet

    try:
        targets = load_fleet(args.inventory, limit_list(args.limit), exclude=limit_list(args.exclude))
    except FleetError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    said = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the report alone

    def report(run_id: str, run_dir: Path, hosts: list[benchrun.HostOutcome]) -> None:
        sys.stdout.write(benchrun.json_report(run_id, run_dir, hosts))

    try:
        return benchrun.bench(
            targets,
            args.results_dir,
            args.timeout_s,
            emit=lambda line: print(line, flush=True, file=said),
            on_done=report if args.json else None,
        )
    except OSError as exc:  # the results directory cannot be written: nothing ran
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
