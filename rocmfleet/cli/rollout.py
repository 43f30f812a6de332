"""``rocmfleet rollout INVENTORY`` and ``rocmfleet restart INVENTORY``: roll an image across the fleet (canary,
gated batches, rollback), or restart it with the same machinery and image; every refusal of their options."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from typing import Any

from rocmfleet.cli.common import ask, cannot_ask, fleet_arguments, image_narrowed, image_value, interactive, limit_list

#: What an interrupted ``rollout`` or ``restart`` left, said after Ctrl-C instead of a traceback.
INTERRUPTED_ROLLOUT = (
    "the state file records how far it got: `rocmfleet status` shows the hosts, "
    "`rocmfleet rollout INVENTORY --resume` continues it and `--rollback` returns the switched hosts"
)
INTERRUPTED_RESTART = "the state file records how far it got: `rocmfleet restart INVENTORY --resume` finishes it"


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands to ``sub``, the ``rocmfleet`` parser's subcommands."""
    for name, what in (
        ("rollout", "roll an image across the fleet: canary, batches gated by readiness, checks and the benchmark"),
        ("restart", "rolling restart of the vLLM units: the rollout's batches, drain and gate, with the same image"),
    ):
        failed = "rolled back" if name == "rollout" else "left drained, not rolled back"
        ro = sub.add_parser(
            name,
            help=what,
            epilog=f"exit status: 0 done; 1 a host failed ({failed}); 2 not started; 3 paused (a gate could not "
            "judge the image: the registry, SSH, a hook or the benchmark client failed past --retries; nothing "
            "rolled back, --resume continues). Errors go to stderr. "
            + (
                "--resume and --rollback run the recorded plan: not with --image, --group, --canary, "
                "--canary-group, --max-unavailable, --limit or --force"
                if name == "rollout"
                else "--resume runs the recorded plan (a failed host is restarted and gated again): not with "
                "--canary, --canary-group, --max-unavailable, --limit or --force; --rollback and --soak are refused "
                "(a restart changes no image)"
            ),
        )
        fleet_arguments(ro)
        if name == "rollout":
            ro.add_argument(
                "--image",
                metavar="REPO:TAG[@DIGEST]",
                type=image_value,
                help="resolve its digest now (or check that the registry has the pinned one); pin both in group data",
            )
            ro.add_argument(
                "--group",
                metavar="GROUP",
                help="with --image, on a site that pins the image per group: roll this group's pin (its group "
                "file, its hosts)",
            )
            ro.add_argument(
                "--soak",
                metavar="DURATION",
                type=soak_value,
                help="after its gate, keep the canary in service on the new image for DURATION (90s, 5m, 1h; "
                "10s to 24h), then compare its error rate and TTFT/TPOT p50/p99 with the hosts not yet switched "
                "over the same window (thresholds: the profile's soak); a fail rolls back, no traffic or no "
                "metrics pauses. With --resume: soak as now given from there on",
            )
            ro.add_argument(
                "--soak-batches",
                action="store_true",
                help="with --soak: soak every batch, not only the canary (the last one, with no host left on "
                "the old image, on its error rate alone)",
            )
            ro.add_argument(
                "--bake",
                action="store_true",
                help="bake the compile caches on the canary from the image (--image or the pinned one), push, "
                "and roll the baked image out (rocmfleet cache bake, then this rollout)",
            )
        else:
            ro.add_argument(
                "--soak",
                metavar="DURATION",
                type=soak_value,
                help="refused: a soak compares a new image with the old one, and a restart changes no image "
                "(rollout --soak)",
            )
        ro.add_argument(
            "--canary", type=int, metavar="N", help="replicas of each service switched and gated first (default 1)"
        )
        ro.add_argument("--canary-group", metavar="GROUP", help="the hosts of this inventory group are the canary")
        ro.add_argument(
            "--max-unavailable",
            metavar="N|P%",
            help="most replicas of each service out of service at once: a count, or a percentage of that "
            "service's replicas, rounded down, at least 1 (default 1)",
        )
        ro.add_argument("--force", action="store_true", help="start even when the preflight check fails")
        ro.add_argument(
            "--retries",
            type=retries_value,
            default=None,
            metavar="N",
            help="retries of a step that could not judge the image (registry, SSH, hook, benchmark client), "
            "10 s apart, doubling, before the rollout pauses (default 2; also with --resume)",
        )
        ro.add_argument(
            "--dry",
            action="store_true",
            help=f"show the plan ({'the digest, the group file edit, ' if name == 'rollout' else ''}the batches) "
            "after the preflight check; change nothing",
        )
        ro.add_argument(
            "-y",
            "--yes",
            action="store_true",
            help="start without asking (needed when standard input is not a terminal)",
        )
        once = ro.add_mutually_exclusive_group()
        once.add_argument("--resume", action="store_true", help="continue the recorded one")
        once.add_argument(
            "--rollback",
            action="store_true",
            help="return every switched host to its image before"
            if name == "rollout"
            else "refused: a restart changes no image (--resume finishes it)",
        )
        ro.add_argument(
            "--json",
            action="store_true",
            help="print {exit_status, rollout: the record this run left, or null} on standard output at the end "
            "(the plan and progress to standard error); with --dry, rollout is the plan (image, digest, hosts, "
            "canary, the max-unavailable of each service, batches: as the rollout of rocmfleet plan --image --json), "
            "null when refused",
        )
        ro.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rollout`` and ``restart``: the run, then with ``--json`` its record (``null`` when refused) on stdout."""
    code, record = _run(args)
    if args.json:
        print(json.dumps({"exit_status": code, "rollout": record}, indent=2))
    return code


def _run(args: argparse.Namespace) -> tuple[int, Any]:
    import rich.console

    from rocmfleet.fleet import inventory
    from rocmfleet.fleet.check.hostplan import HostPlanning
    from rocmfleet.fleet.rollout import command
    from rocmfleet.fleet.rollout import progress as rollout_progress
    from rocmfleet.plan.build import plan_host

    console = rich.console.Console(stderr=True)

    def fleet() -> command.Fleet:  # the inventory's hosts, their planning: looked up when called (tests replace them)
        return command.Fleet(inventory.load_targets, HostPlanning(plan_host))

    def progress(total: int) -> rollout_progress.Progress:
        if console.is_terminal:
            return rollout_progress.RichProgress(total, console)
        return rollout_progress.LineProgress(lambda line: print(line, file=sys.stderr, flush=True))

    if (getattr(args, "image", None) or getattr(args, "bake", False)) and (args.limit or args.exclude):
        given = "--bake" if getattr(args, "bake", False) else "--image"
        print(f"rocmfleet: {image_narrowed(given, '--limit' if args.limit else '--exclude')}", file=sys.stderr)
        return 2, None
    if args.dry and getattr(args, "bake", False):
        print("rocmfleet: --dry with --bake: the bake builds and pushes an image; plan the rollout with "
              "--dry --image BAKED_REF after `rocmfleet cache bake`", file=sys.stderr)  # fmt: skip
        return 2, None
    if args.command == "restart" and args.soak is not None:
        print("rocmfleet: --soak with restart: a soak compares a new image with the old one; a restart changes no "
              "image (roll out a new image with `rocmfleet rollout INVENTORY --image ... --soak D`)",
              file=sys.stderr)  # fmt: skip
        return 2, None
    if getattr(args, "bake", False):
        if getattr(args, "soak", None) is not None:
            print("rocmfleet: --soak with --bake: run `rocmfleet cache bake`, then the rollout of the baked image "
                  "with --soak", file=sys.stderr)  # fmt: skip
            return 2, None
        if args.resume or args.rollback:
            print("rocmfleet: --bake starts a new rollout; not with --resume or --rollback", file=sys.stderr)
            return 2, None
        if args.json:
            print("rocmfleet: --json with --bake: run `rocmfleet cache bake`, then the rollout with --json",
                  file=sys.stderr)  # fmt: skip
            return 2, None
        if not args.yes and not interactive():  # the bake changes a host before any plan
            cannot_ask("")
            return 2, None
        from rocmfleet.fleet.cache import cachebake
        from rocmfleet.fleet.rollout import bake, targetimage

        # looked up here, when called: tests replace them in their modules
        rollout = functools.partial(command.run_rollout, fleet=fleet())
        steps = bake.BakeSteps(
            inventory.load_targets, targetimage.resolve, targetimage.with_image, cachebake.bake, rollout
        )
        baked = bake.bake_and_roll(
            args.inventory,
            args.image,
            canary=args.canary,
            groups=command.Groups(canary=args.canary_group, pin=args.group),
            limit=limit_list(args.limit),
            emit=lambda line: print(line, flush=True),
            error=rollout_progress.to_stderr,
            max_unavailable=args.max_unavailable,
            force=args.force,
            progress_factory=progress,
            steps=steps,
        )
        return baked, None
    soak = None
    if getattr(args, "soak_batches", False) and getattr(args, "soak", None) is None:
        print("rocmfleet: --soak-batches with no --soak: give the soak's duration, e.g. --soak 5m --soak-batches",
              file=sys.stderr)  # fmt: skip
        return 2, None
    if getattr(args, "soak", None) is not None:
        from rocmfleet.fleet.rollout.state import SoakPlan

        soak = SoakPlan(duration_s=args.soak, every_batch=args.soak_batches)
    limit = limit_list(args.limit)
    if args.exclude:  # the hosts left, by name: the recorded plan names them as a --limit would
        if args.resume or args.rollback:
            print("rocmfleet: --exclude with --resume or --rollback: they run the recorded plan", file=sys.stderr)
            return 2, None
        from rocmfleet.fleet.inventory import FleetError, load_targets

        try:
            limit = list(load_targets(args.inventory, limit, exclude=limit_list(args.exclude)))
        except FleetError as exc:
            print(f"rocmfleet: {exc}", file=sys.stderr)
            return 2, None
    confirm = None if args.yes or args.dry else ask if interactive() else cannot_ask
    planned: list[Any] = []  # --dry --json: the plan, as `rocmfleet plan --image --json`'s rollout
    said = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the record alone
    before = _recorded(args.inventory) if args.json else None
    code = command.run_rollout(
        args.inventory,
        kind=args.command,
        image=getattr(args, "image", None),
        canary=args.canary,
        max_unavailable=args.max_unavailable,
        force=args.force,
        resume=args.resume,
        rollback=args.rollback,
        limit=limit,
        emit=lambda line: print(line, flush=True, file=said),
        error=rollout_progress.to_stderr,
        progress_factory=progress,
        start=command.StartOptions(dry=args.dry, confirm=confirm, on_plan=planned.append),
        retries=args.retries,
        soak=soak,
        groups=command.Groups(canary=args.canary_group, pin=getattr(args, "group", None)),
        fleet=fleet(),
    )
    if args.dry:
        return code, dataclasses.asdict(planned[0]) if planned and code == 0 else None
    after = _recorded(args.inventory) if args.json else None
    if code == 2 or after is None:  # 2: nothing was started (or resumed, or rolled back)
        return code, None
    mine = before is None or after.id != before.id or args.resume or args.rollback
    return code, after.model_dump(mode="json") if mine else None


def _recorded(inventory: str) -> Any:
    """The rollout state recorded for ``inventory`` now (a ``RolloutState``), or ``None``."""
    from rocmfleet.fleet.rollout import state as rstate

    try:
        return rstate.load_state(rstate.state_path(rstate.results_root(None, inventory), inventory))
    except (OSError, ValueError):
        return None


def retries_value(text: str) -> int:
    """A count ``>= 0`` and at most 10 (``--retries``: 10 doublings from 10 s are hours)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 10, got {text}") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 10, got {text}")
    return value


def soak_value(text: str) -> int:
    """``--soak``: a duration in seconds (:func:`rocmfleet.domain.soak.parse_duration`)."""
    from rocmfleet.domain.soak import DurationError, parse_duration

    try:
        return parse_duration(text, option="")
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
