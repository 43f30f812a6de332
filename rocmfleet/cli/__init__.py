"""The ``rocmfleet`` command: :func:`build_parser` gathers one module per command (arguments, their
refusals and the wiring to :mod:`rocmfleet.fleet` or :mod:`rocmfleet.config`), :func:`main` runs one.

rocmfleet validate INVENTORY          check every host's data; exit 2 on any problem
rocmfleet plan INVENTORY [--files|--json]
                                      what a deploy would leave on every host, offline
rocmfleet check INVENTORY             compliance checks on every host; exit 0 pass, 1 fail, 2 no run
rocmfleet bench INVENTORY             smoke benchmark on every host; exit 0 pass, 1 fail, 2 no run
rocmfleet rollout INVENTORY [--bake]  roll an image across the fleet: canary, gated batches, rollback
rocmfleet restart INVENTORY           rolling restart with drain and gate (same machinery, same image)
rocmfleet status INVENTORY            per host and instance: unit, image, ready, uptime, rollout step
rocmfleet metrics targets INVENTORY [-o FILE]
                                      Prometheus file_sd targets: every vLLM instance and exporter
rocmfleet cache bake INVENTORY --host H [--write GROUP_FILE]
                                      bake the compile caches into an image and push it
rocmfleet vault encrypt-string NAME   read a secret on stdin, print `NAME: !vault |` YAML
rocmfleet vault rekey FILE...         re-encrypt vault data with a new password
rocmfleet schema                      print the JSON Schema of host data (for editors)
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable

from rocmfleet.cli import bench, cache, check, common, init, metrics, plan, rollout, schema, status, validate, vault
from rocmfleet.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED, VERBOSE_HELP, commands, version

__all__ = ["build_parser", "commands", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``rocmfleet`` command's parser: every subcommand, its options and its exit statuses
    (``docs/reference/cli.md`` is generated from it by :mod:`rocmfleet.clidoc`)."""
    parser = argparse.ArgumentParser(prog="rocmfleet", description="MI300X vLLM fleet toolkit")
    parser.add_argument("--version", action="version", version=f"rocmfleet {version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (init, validate, plan, check, bench, rollout, status, metrics, cache, vault, schema):
        module.add(sub)
    for action in (a for _name, c in commands(parser, "rocmfleet") for a in c._actions):
        if isinstance(action, argparse._SubParsersAction) and action.metavar is None:
            # argparse's "required" error names an action by metavar, else dest: a group without its command
            # then says "required: {targets}" (its choices, as its usage line shows them), not "metrics_command"
            action.metavar = "{" + ",".join(action.choices) + "}"
    for _name, command in commands(parser, "rocmfleet"):
        if command is not parser and command._subparsers is None:  # -v also after the command, as pyinfra's
            command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rocmfleet`` console script; returns the exit status."""
    import argcomplete

    parser = build_parser()
    argcomplete.autocomplete(parser)  # answers a shell's completion request and exits; else nothing
    args = parser.parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.func
    common.whole_writes()  # under PYTHONUNBUFFERED a pipe closed mid-write would drop the rest silently
    try:
        if args.verbose:
            from rocmfleet.fleet.commandlog import told_commands

            with told_commands(lambda line: print(line, file=sys.stderr, flush=True)):
                return command(args)
        return command(args)
    except KeyboardInterrupt:
        print(f"\nrocmfleet: {args.command}: interrupted; {_INTERRUPTED.get(args.command, 'nothing more was done')}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # standard output's reader went away (`rocmfleet plan ... | head -1`): what is still buffered
        # goes nowhere, so that Python's own flush at exit raises nothing more (Python's documentation,
        # "Note on SIGPIPE" in the signal module)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"rocmfleet: {args.command}: standard output was closed (its reader ended): output cut short",
              file=sys.stderr)  # fmt: skip
        return EXIT_PIPE_CLOSED
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        # a full disk or quota (`rocmfleet plan --json > plan.json`): what is still buffered for
        # standard output goes nowhere, as above, and the command says what it could not write
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        where = exc.filename or "standard output"
        print(f"rocmfleet: {args.command}: cannot write {where}: {exc.strerror}; output cut short", file=sys.stderr)
        return EXIT_FAILED


#: ``errno`` of a write that found no room: the disk is full (ENOSPC), the user's quota is spent
#: (EDQUOT) or the file is at its size limit (EFBIG); write(2).
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


#: What an interrupted command left, said after Ctrl-C instead of a traceback.
_INTERRUPTED = {
    "rollout": rollout.INTERRUPTED_ROLLOUT,
    "restart": rollout.INTERRUPTED_RESTART,
    "cache": cache.INTERRUPTED,
    "check": check.INTERRUPTED,
    "bench": bench.INTERRUPTED,
}
