"""``rocmfleet metrics targets INVENTORY [-o FILE]``: the fleet's Prometheus ``file_sd`` targets.

The inventory is validated as ``rocmfleet validate`` does (every problem at once, exit 2), with
inline ``!vault`` values read by name only, as ``rocmfleet plan`` reads them: no target holds a
secret, so no vault password is asked for (a group file encrypted whole still needs it); no host
is contacted. The JSON goes to standard output (also with ``-o -``, as ``check --json -``), or with
``-o`` to FILE, written whole (:func:`rocmfleet.plan.targetsfile.write_atomic`), and one
line says what it holds. FILE must end in ``.json``, ``.yml`` or ``.yaml``
(:func:`rocmfleet.domain.metrics.file_sd_name_problem`): Prometheus's file_sd reads no other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from rocmfleet.config.groupvars import secrets_by_name
from rocmfleet.domain.metrics import file_sd_name_problem
from rocmfleet.fleet.target import FleetConfig, Target
from rocmfleet.plan import metricstargets as targets
from rocmfleet.plan.targetsfile import scrape_address, write_file

#: ``-o STDOUT``: the JSON on standard output, as with no ``-o``.
STDOUT = "-"

#: Exit statuses: written (or printed); nothing written (bad inventory, data or output file).
EXIT_OK, EXIT_NOT_WRITTEN = 0, 2


def output_problem(output: str) -> str | None:
    """Why ``-o output`` cannot be written, before the inventory is read; ``None`` when it can be tried."""
    path = Path(output).expanduser()
    if not output.strip():
        return f"-o {output!r}: give a file (an unset shell variable is no file)"
    if path.is_dir():
        return f"-o {output}: is a directory; name a file to write"
    if not path.resolve().parent.is_dir():
        return f"-o {output}: directory {path.resolve().parent} does not exist"
    if problem := file_sd_name_problem(output):
        return f"-o {output}: {problem}, or - for standard output"
    return None


def run(
    inventory: str,
    output: str | None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    load: Callable[[str], Sequence[Target[FleetConfig]]],
) -> int:
    """Print or write ``inventory``'s targets (:func:`rocmfleet.plan.metricstargets.file_sd`).

    Args:
        inventory: a pyinfra inventory file.
        load: ``load(inventory) -> [Target]``, given by the command (:func:`rocmfleet.fleet.inventory.load_fleet`:
            only the commands load an inventory; a ``ValueError`` saying why it cannot).
        output: the file to write (``None`` or :data:`STDOUT`: the JSON on ``out``).
        out, err: where the JSON or the summary, and the errors, go (default stdout, stderr).

    Returns:
        :data:`EXIT_OK`, or :data:`EXIT_NOT_WRITTEN` with the reason on ``err`` (the inventory's
        every problem, as ``rocmfleet validate`` reports them, or the file's).
    """
    out, err = out or sys.stdout, err or sys.stderr
    if output == STDOUT:
        output = None
    if output is not None and (problem := output_problem(output)):
        print(f"rocmfleet: {problem}", file=err)
        return EXIT_NOT_WRITTEN
    try:
        with secrets_by_name():  # no secret is in a target: no vault password needed (as `rocmfleet plan`)
            fleet = load(inventory)
    except ValueError as exc:  # FleetError
        print(f"rocmfleet: {exc}", file=err)
        return EXIT_NOT_WRITTEN
    hosts = [targets.FleetHost(t.name, scrape_address(t.ssh), t.config) for t in fleet]
    if output is None:
        out.write(targets.render(targets.file_sd(hosts)))
        return EXIT_OK
    try:
        groups = write_file(output, hosts)
    except OSError as exc:
        print(f"rocmfleet: -o {output}: cannot write it ({exc.strerror or exc})", file=err)
        return EXIT_NOT_WRITTEN
    print(f"wrote {output}: {targets.summary(groups)}", file=out)
    return EXIT_OK
