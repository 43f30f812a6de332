"""``rocmfleet plan INVENTORY``: what a deploy would leave on every host, offline (no connection);
with ``--image``, the batches a rollout of it would run (as ``rocmfleet rollout --dry``)."""

from __future__ import annotations

import argparse
import sys

from rocmfleet.cli.common import fleet_arguments, image_narrowed, image_value, limit_list


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    pl = sub.add_parser(
        "plan",
        help="print what a deploy would leave on every host (services, files, packages, units) and, with --image, "
        "a rollout's batches, offline",
        epilog="exit status: 0 planned; 1 a host's instances cannot be placed on the topology or its OS is "
        "not supported (the others are planned); 2 a bad inventory, data or option (the rollout options as "
        "the rollout command refuses them). Nothing is connected to: the digest of --image is not resolved. "
        "In the text, owner -:- (a - for the user or the group) and mode - say that the deploy sets no owner "
        "(or mode) there: it leaves the file's or directory's as they are (a file it creates gets the "
        "connecting user's, root under sudo)",
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
    pl.add_argument(
        "--image",
        metavar="REPO:TAG[@DIGEST]",
        type=image_value,
        help="also plan a rollout of this image: its batches, canary first, as rollout --image ... --dry "
        "computes them (the digest is not resolved: nothing is connected to)",
    )
    pl.add_argument(
        "--group",
        metavar="GROUP",
        help="with --image, on a site that pins the image per group: the rollout of this group's pin (its hosts)",
    )
    pl.add_argument("--canary", type=int, metavar="N", help="with --image: replicas of each service in the canary "
                    "(default 1)")  # fmt: skip
    pl.add_argument("--canary-group", metavar="GROUP", help="with --image: this inventory group's hosts are the canary")
    pl.add_argument(
        "--max-unavailable",
        metavar="N|P%",
        help="with --image: most replicas of each service out of service at once: a count, or a percentage of "
        "that service's replicas, rounded down, at least 1 (default 1)",
    )
    pl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Refuse the rollout options that need ``--image`` (or that it refuses), then plan."""
    from rocmfleet.fleet import plancmd
    from rocmfleet.fleet.inventory import load_configs
    from rocmfleet.plan.build import plan_fleet

    rollout_options = {
        "--group": args.group,
        "--canary": args.canary,
        "--canary-group": args.canary_group,
        "--max-unavailable": args.max_unavailable,
    }
    refused = ""
    if args.image is None and (given := [k for k, v in rollout_options.items() if v is not None]):
        refused = f"{', '.join(given)} without --image: these plan a rollout's batches; give --image REPO:TAG too"
    elif args.image is not None and (args.limit or args.exclude):
        refused = image_narrowed("--image", "--limit" if args.limit else "--exclude")
    if refused:
        print(f"rocmfleet: {refused}", file=sys.stderr)
        print("rocmfleet plan: nothing planned (exit 2)", file=sys.stderr)
        return 2
    rollout = None
    if args.image is not None:
        rollout = plancmd.RolloutOptions(
            args.image, args.canary, "1" if args.max_unavailable is None else args.max_unavailable,
            plancmd.Groups(canary=args.canary_group, pin=args.group),
        )  # fmt: skip
    return plancmd.run(
        args.inventory,
        limit_list(args.limit),
        limit_list(args.exclude),
        args.topology,
        args.json,
        args.files,
        rollout=rollout,
        planning=plancmd.Planning(load_configs, plan_fleet),
    )
