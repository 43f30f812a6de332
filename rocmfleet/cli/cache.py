"""``rocmfleet cache bake INVENTORY --host H [--write GROUP_FILE]``: bake the compile caches into an image
and push it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rocmfleet.cli.common import INVENTORY_HELP, ask, cannot_ask, interactive, writable

#: What an interrupted bake left, said after Ctrl-C instead of a traceback.
INTERRUPTED = (
    "the bake starts the host's instance again on its way out: "
    "`rocmfleet status INVENTORY --limit HOST` shows whether it serves"
)


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    k = sub.add_parser("cache", help="compile caches baked into images")
    ksub = k.add_subparsers(dest="cache_command", required=True)
    kb = ksub.add_parser(
        "bake",
        help="warm the profile's first instance of one host up from empty caches, build and push an image with them",
        epilog="exit status: 0 pushed; 1 the bake failed on the host; 2 bad inventory or options",
    )
    kb.add_argument("inventory", help=INVENTORY_HELP)
    kb.add_argument("--host", required=True, help="the host to bake on (a canary: one instance stops meanwhile)")
    kb.add_argument(
        "--write",
        metavar="GROUP_FILE",
        help="set vllm_image_repository/_tag/_digest to the baked image in this group_vars file",
    )
    kb.add_argument("--dry", action="store_true", help="show what the bake would stop, build and push; change nothing")
    kb.add_argument(
        "-y", "--yes", action="store_true", help="start without asking (needed when standard input is not a terminal)"
    )
    kb.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rocmfleet.domain.cachedirs import baked_tag
    from rocmfleet.fleet.cache import cachebake
    from rocmfleet.fleet.connect import CommandTimeout, ConnectError
    from rocmfleet.fleet.inventory import FleetError, load_fleet

    try:
        writable(args.write, "--write")
        targets = load_fleet(args.inventory, [args.host], option="--host")
        if len(targets) != 1:
            raise ValueError(f"--host {args.host} matches {len(targets)} hosts; name one")
        if args.write and (unread := _not_loaded(args.write)):
            raise ValueError(f"--write {args.write}: {unread}")
        if args.write:  # the edit is tried before the bake, so a file it cannot edit stops nothing half-way
            cachebake.group_data_with_image(_read_text(args.write), "r", "t", "sha256:" + "0" * 64, args.write)
    except (FleetError, ValueError) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    from rocmfleet.fleet.rollout.state import deploy_refusal

    if refusal := deploy_refusal(args.inventory):  # the bake stops an instance: not under a rollout
        print(f"rocmfleet: {refusal}", file=sys.stderr)
        return 2
    config = targets[0].config
    instance = config.instances()[0]
    plan = (
        f"bake on {args.host}: stop its instance {instance.name} (port {instance.port}) meanwhile, warm it up from "
        f"empty caches with {config.image.reference}, build and push "
        f"{config.image.repository}:{baked_tag(config.image.tag, '0' * 12).replace('0' * 12, '<cache key>')} "
        "(the key is read on the host)" + (f", then pin it in {args.write}" if args.write else "")
    )
    print(f"plan: {plan}")
    if args.dry:
        print("--dry: nothing was changed")
        return 0
    if not args.yes and not (ask if interactive() else cannot_ask)("start this bake?"):
        print("rocmfleet: not confirmed; nothing was changed", file=sys.stderr)
        return 2
    try:
        baked = cachebake.bake(targets[0], emit=lambda line: print(line, flush=True))
    except (cachebake.BakeError, ConnectError, CommandTimeout) as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 1
    print(baked.reference)
    print(f"digest {baked.digest}  key {baked.key.short}  {baked.manifest.files} files, {baked.manifest.bytes} bytes")
    if args.write:
        path = Path(args.write)
        try:
            text = cachebake.group_data_with_image(
                _read_text(args.write), baked.repository, baked.tag, baked.digest, args.write
            )
            path.write_text(text, encoding="utf-8")
        except (OSError, ValueError) as exc:
            print(
                f"rocmfleet: pushed {baked.reference}, but --write {path} failed: {exc}; pin it by hand",
                file=sys.stderr,
            )
            return 1
        print(f"{path}: vllm_image_repository, vllm_image_tag, vllm_image_digest set")
    return 0


def _not_loaded(path: str) -> str | None:
    """Why the group file ``path`` would not pin an image for the inventory just loaded: it is not
    one of the group files the inventory read (a typo, another checkout), so the baked image
    written there would never be deployed. None when it is one."""
    from rocmfleet.config import groupvars

    loaded = [g.path for g in groupvars.LOADED]
    if Path(path).resolve() in {p.resolve() for p in loaded}:
        return None
    return "the inventory never loads this file (it reads " + (", ".join(map(str, loaded)) or "no group file") + ")"


def _read_text(path: str) -> str:
    """A group data file's text (``""`` when it does not exist yet).

    Raises:
        ValueError: it cannot be read or is not UTF-8, naming the file.
    """
    try:
        return Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it as UTF-8 text: {exc}") from None
