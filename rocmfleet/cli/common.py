"""What the ``rocmfleet`` commands share: the inventory and host options of a fleet command
(``--limit``, ``--exclude``), ``--data``, option value types, output paths, asking for a start,
the exit statuses and the walk over the parser's commands."""

from __future__ import annotations

import argparse
import io
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

#: Exit statuses of every command: done; a host or check failed; nothing ran (bad input or options);
#: paused (``rollout``: a gate could not judge the image); ended by Ctrl-C (128 + SIGINT, as a shell says).
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_PAUSED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: Exit status when standard output's reader went away (``| head``): 128 + SIGPIPE, as a shell
#: reports a command that pipe killed.
EXIT_PIPE_CLOSED = 141


def whole_writes() -> None:
    """Give standard output a buffered layer when it has none, so that every write is whole or raises.

    Under ``PYTHONUNBUFFERED=1`` (``python -u``; many container images and CI runners set it)
    ``sys.stdout``'s binary layer is the raw file: ``TextIOWrapper.write`` hands it the whole text in
    one ``write(2)`` and ignores a short count. When the reader of a pipe goes away in the middle
    (``rocmfleet plan --files | head -c 100`` of a plan over the pipe's 64 KiB), the kernel returns
    the part it took instead of ``EPIPE``, and the rest is dropped with no error: the command ended
    0, as if it had written it all. A ``BufferedWriter`` writes the rest and meets ``EPIPE``
    (``BrokenPipeError``: exit 141, :data:`EXIT_PIPE_CLOSED`). Line buffering keeps what ``-u``
    is for: each line is written when it is complete. The new stream writes to the same descriptor
    and never closes it (``closefd=False``). A stream already buffered (the default), or one that is
    not the process's own standard output (a test's capture), is left as it is.
    """
    stream = sys.stdout
    raw = getattr(stream, "buffer", None)
    if stream is sys.__stdout__ and isinstance(stream, io.TextIOWrapper) and isinstance(raw, io.RawIOBase):
        stream.flush()
        sys.stdout = open(  # noqa: SIM115 - standard output for the rest of the process
            stream.fileno(), "w", buffering=1, encoding=stream.encoding, errors=stream.errors, closefd=False
        )


INVENTORY_HELP = "pyinfra inventory file, e.g. inventories/prod.py"
VERBOSE_HELP = "tell each command run on a host, once it ends, on standard error (host, seconds, exit status)"

#: An ``argparse`` number type: ``int`` or ``float``.
_Number = TypeVar("_Number", int, float)


def data_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--data KEY=VALUE`` pairs, each value parsed as pyinfra's own ``--data`` parses it."""
    from pyinfra_cli.util import parse_cli_arg

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--data {pair!r}: expected KEY=VALUE")
        overrides[key] = parse_cli_arg(value)
    return overrides


def limit_list(values: list[str] | None) -> list[str] | None:
    """``--limit`` values, repeatable and comma-separated (``--limit a,b --limit c``), as pyinfra."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()] or None


LIMIT_HELP = "host, glob or group (repeatable, or comma-separated)"
EXCLUDE_HELP = "host, glob or group left out, after --limit (repeatable, or comma-separated)"


def fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """The inventory and the hosts of it a fleet command works on (``--limit``, ``--exclude``)."""
    parser.add_argument("inventory", help=INVENTORY_HELP)
    parser.add_argument("--limit", action="append", type=limit_value, help=LIMIT_HELP)
    parser.add_argument("--exclude", action="append", type=limit_value, help=EXCLUDE_HELP)


def limit_value(text: str) -> str:
    """One ``--limit`` value; empty (``--limit ""``, ``--limit ,``: an unset shell variable) is an
    error, never "every host"."""
    if not any(item.strip() for item in text.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r} names no host: give a host, glob or group")
    return text


def image_value(text: str) -> str:
    """One ``--image REPO:TAG[@DIGEST]`` (``rollout``, ``plan``), checked with Docker's reference
    grammar before any connection or registry request; empty (an unset shell variable) is an
    error, never "the pinned image"."""
    from rocmfleet.fleet.registry import parse_image

    try:
        parse_image(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--image {text!r}: ")) from None
    return text


def image_narrowed(given: str, narrowed: str) -> str:
    """Why ``--image`` (or ``--bake``, ``given``) is refused with ``--limit`` or ``--exclude``
    (``narrowed``) by ``rollout`` and ``plan``."""
    return (
        f"{given} with {narrowed}: {given} rewrites the group data file that pins the image, for every "
        f"host it applies to, so the hosts outside {narrowed} would switch at their next plain deploy, with no "
        "canary, drain or gate; pin the new image in a group (or host) file of those hosts instead, then "
        "`rocmfleet rollout INVENTORY --limit ...` without --image"
    )


def writable(path: str | None, option: str) -> None:
    """Refuse an output path whose directory does not exist, before the run rather than after it."""
    if path and not Path(path).resolve().parent.is_dir():
        raise ValueError(f"{option} {path}: directory {Path(path).resolve().parent} does not exist")
    if path and Path(path).is_dir():
        raise ValueError(f"{option} {path}: is a directory; name a file to write")


def positive(kind: Callable[[str], _Number]) -> Callable[[str], _Number]:
    def parse(text: str) -> _Number:
        value = kind(text)
        if not math.isfinite(value) or value <= 0:  # float("inf") and float("nan") parse
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        return value

    return parse


def cannot_ask(_question: str) -> bool:
    """No terminal to ask on (a script, cron, CI): a start needs ``-y``, as pyinfra's prompt needs it."""
    print("rocmfleet: standard input is not a terminal to ask on: pass -y to start (--dry shows the plan)",
          file=sys.stderr)  # fmt: skip
    return False


def interactive() -> bool:
    """Whether standard input is a terminal to ask on (closed, ``<&-``, is not)."""
    return sys.stdin is not None and sys.stdin.isatty()


def ask(question: str) -> bool:
    """``question [y/N]`` on standard error (standard output may be a ``--json`` report), the
    answer from the terminal; only ``y`` or ``yes`` go on (EOF and Ctrl-D do not)."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False


def version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown`` from a bare checkout."""
    import importlib.metadata

    try:
        return importlib.metadata.version("rocmfleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """``(name, parser)`` of ``parser`` and every command under it, depth first (``rocmfleet cache``,
    then ``rocmfleet cache bake``); a command that runs has no ``_subparsers``."""
    found = [(prefix, parser)]
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, f"{prefix} {name}")
    return found
