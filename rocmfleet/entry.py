# PYTHON_ARGCOMPLETE_OK (argcomplete: `eval "$(register-python-argcomplete rocmfleet)"` completes the command)
"""The ``rocmfleet`` console script (``python -m rocmfleet.entry`` without it): builds the parser from
one module per command (``rocmfleet/cli/<command>.py``: arguments, their refusals and the wiring to
:mod:`rocmfleet.fleet` or :mod:`rocmfleet.config`) and runs one. The command modules are imported
under a guard, so that Ctrl-C while they load (about 0.4 s: pyinfra, pydantic, ansible-core's vault)
ends like any other interruption, with one line and exit status 130, not a traceback.

.. code:: console

    $ rocmfleet status inventories/prod.py   # ^C at once
    rocmfleet: interrupted while starting; nothing was done

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
from types import ModuleType

#: Exit status of a command ended by Ctrl-C (128 + SIGINT), as :data:`rocmfleet.cli.common.EXIT_INTERRUPTED`.
INTERRUPTED = 130
#: Exit status when standard output is closed (``>&-``): as for a pipe whose reader ended (128 +
#: SIGPIPE, :data:`rocmfleet.cli.common.EXIT_PIPE_CLOSED`).
STDOUT_CLOSED = 141


def command_modules() -> tuple[ModuleType, ...]:
    """The command modules, in the order ``--help`` lists their commands; each has ``add(subparsers)``."""
    from rocmfleet.cli import bench, cache, check, init, metrics, plan, rollout, schema, status, validate, vault

    return (init, validate, plan, check, bench, rollout, status, metrics, cache, vault, schema)


def build_parser() -> argparse.ArgumentParser:
    """The ``rocmfleet`` command's parser: every subcommand, its options and its exit statuses
    (``docs/reference/cli.md`` is generated from it by ``tools/clidoc.py``)."""
    from rocmfleet.cli.common import VERBOSE_HELP, commands, version

    parser = argparse.ArgumentParser(prog="rocmfleet", description="MI300X vLLM fleet toolkit")
    parser.add_argument("--version", action="version", version=f"rocmfleet {version()}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in command_modules():
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
    """Entry point of the ``rocmfleet`` console script: run the command ``argv`` names (default
    ``sys.argv[1:]``) and return its exit status; 130 when interrupted while the command modules load;
    141 when standard output is closed (Python then sets ``sys.stdout`` to ``None``, and pyinfra's
    import reads ``sys.stdout.isatty()``): nothing is done, one line on standard error."""
    if sys.stdout is None:
        if sys.stderr is not None:
            print("rocmfleet: standard output is closed; nothing was done", file=sys.stderr)
        return STDOUT_CLOSED
    try:
        command_modules()
    except KeyboardInterrupt:
        print("\nrocmfleet: interrupted while starting; nothing was done", file=sys.stderr)
        return INTERRUPTED
    return _run(argv)


def _run(argv: list[str] | None) -> int:
    """Parse ``argv`` and run its command; what ends it early (Ctrl-C, a closed pipe, a full disk)
    is one line on standard error and an exit status, not a traceback."""
    import argcomplete

    from rocmfleet.cli import common

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
        print(f"\nrocmfleet: {args.command}: interrupted; {_interrupted(args.command)}", file=sys.stderr)
        return common.EXIT_INTERRUPTED
    except BrokenPipeError:
        # standard output's reader went away (`rocmfleet plan ... | head -1`): what is still buffered
        # goes nowhere, so that Python's own flush at exit raises nothing more (Python's documentation,
        # "Note on SIGPIPE" in the signal module)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"rocmfleet: {args.command}: standard output was closed (its reader ended): output cut short",
              file=sys.stderr)  # fmt: skip
        return common.EXIT_PIPE_CLOSED
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        # a full disk or quota (`rocmfleet plan --json > plan.json`): what is still buffered for
        # standard output goes nowhere, as above, and the command says what it could not write
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        where = exc.filename or "standard output"
        print(f"rocmfleet: {args.command}: cannot write {where}: {exc.strerror}; output cut short", file=sys.stderr)
        return common.EXIT_FAILED


#: ``errno`` of a write that found no room: the disk is full (ENOSPC), the user's quota is spent
#: (EDQUOT) or the file is at its size limit (EFBIG); write(2).
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _interrupted(command: str) -> str:
    """What an interrupted ``command`` left, said after Ctrl-C instead of a traceback."""
    from rocmfleet.cli import bench, cache, check, rollout

    left = {
        "rollout": rollout.INTERRUPTED_ROLLOUT,
        "restart": rollout.INTERRUPTED_RESTART,
        "cache": cache.INTERRUPTED,
        "check": check.INTERRUPTED,
        "bench": bench.INTERRUPTED,
    }
    return left.get(command, "nothing more was done")


if __name__ == "__main__":
    sys.exit(main())
