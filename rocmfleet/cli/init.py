"""``rocmfleet init DIR``: write an operator's repository (:mod:`rocmfleet.config.site`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    i = sub.add_parser(
        "init",
        help="write an operator's repository: deploy.py, inventories/prod.py, group_vars/, .gitignore, README",
        epilog="exit status: 0 written; 2 a file is already there or cannot be written (nothing is overwritten)",
    )
    i.add_argument("directory", help="where (created when missing; may hold other files)")
    i.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shlex

    from rocmfleet.config.site import SiteExistsError, init

    if not args.directory.strip():
        print("rocmfleet: init: give a directory (an empty one writes nowhere you meant)", file=sys.stderr)
        return 2
    directory = Path(args.directory)
    try:
        written = init(directory)
    except SiteExistsError as exc:
        print(f"rocmfleet: init {directory}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rocmfleet: init {directory}: {exc.strerror or exc}: {exc.filename or directory}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(
        f"next: cd {shlex.quote(str(directory))}; edit inventories/prod.py and group_vars/; "
        "rocmfleet validate inventories/prod.py; pyinfra inventories/prod.py deploy.py --dry"
    )
    return 0
