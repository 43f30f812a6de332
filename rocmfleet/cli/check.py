"""``rocmfleet check INVENTORY``: compliance checks on every host; exit 0 pass, 1 fail, 2 no run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from rocmfleet.cli.common import data_overrides, fleet_arguments, limit_list, positive, writable

#: What an interrupted check left, said after Ctrl-C instead of a traceback.
INTERRUPTED = "no report was written"


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    exits = "exit status: 0 all passed; 1 a check or host failed; 2 the run could not happen (bad inventory or options)"
    c = sub.add_parser("check", help="run the compliance checks against every host of an inventory", epilog=exits)
    fleet_arguments(c)
    c.add_argument(
        "--select",
        type=lambda v: v.split(","),
        help="check modules, comma-separated: rocm, tuning, docker, gpu, vllm, drift, cache, metrics, cvs "
        "(default: all)",
    )
    c.add_argument("--data", action="append", default=[], metavar="KEY=VALUE", help="override data, as pyinfra's")
    c.add_argument(
        "--timeout-s",
        type=positive(float),
        default=300,
        help="deadline per host: seconds of its commands (default 300)",
    )
    c.add_argument(
        "--parallel",
        type=positive(int),
        default=10,
        help="check processes at once, each checking its share of the hosts in turn (default 10)",
    )
    c.add_argument("--junit-xml", metavar="PATH", help="write a JUnit XML report (-: standard output)")
    c.add_argument("--json", metavar="PATH", help="write a JSON report (-: standard output)")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.fleet.check import compliance
    from rocmfleet.fleet.check.hostplan import HostPlanning
    from rocmfleet.fleet.inventory import FleetError, load_fleet
    from rocmfleet.plan.build import plan_host

    try:
        overrides = data_overrides(args.data)
        compliance.module_paths(args.select)  # an unknown module is refused before any connection
        for option, given in (("--junit-xml", args.junit_xml), ("--json", args.json)):
            if given is not None and not given.strip():  # an unset shell variable: never "no report"
                raise ValueError(f"{option} {given!r}: give a file, or - for standard output")
        if args.junit_xml == args.json == "-":
            raise ValueError("--junit-xml - and --json -: one report can go to standard output")
        writable(None if args.junit_xml == "-" else args.junit_xml, "--junit-xml")
        writable(None if args.json == "-" else args.json, "--json")
        targets = load_fleet(args.inventory, limit_list(args.limit), overrides, exclude=limit_list(args.exclude))
    except (FleetError, ValueError) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2

    width = max(len(t.name) for t in targets)
    # A report on standard output (`-`, as jq and junit tools read it) keeps it to itself: the
    # progress lines and the summary go to standard error.
    said = sys.stderr if "-" in (args.junit_xml, args.json) else sys.stdout

    def progress(results: list[compliance.CheckResult]) -> None:
        for result in results:
            print(compliance.line(result, width), flush=True, file=said)

    results = compliance.run_fleet(
        targets, args.select, args.timeout_s, args.parallel, on_host=progress, planning=HostPlanning(plan_host)
    )
    print(compliance.summary_table(results), file=said)
    status = compliance.exit_status(results)
    reports: list[tuple[str, str | None, Callable[[], str]]] = [
        ("--junit-xml", args.junit_xml, lambda: compliance.junit_xml(results)),
        ("--json", args.json, lambda: compliance.json_report(results, args.inventory)),
    ]
    for option, path, render in reports:
        if path == "-":
            sys.stdout.write(render())
        elif path:
            try:
                Path(path).write_text(render())
            except OSError as exc:  # the checks ran; their report could not be kept: not a pass
                print(f"rocmfleet: {option} {path}: cannot write the report ({exc.strerror or exc})", file=sys.stderr)
                status = max(status, 1)
    return status
