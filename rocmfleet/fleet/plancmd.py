"""``rocmfleet plan INVENTORY``: the fleet plan, offline (no host, no registry is contacted).

Loads and validates the inventory as ``rocmfleet validate`` does (pyinfra's inventory loading
only: nothing connects), keeps the hosts ``--limit``/``--exclude`` leave
(:func:`rocmfleet.fleet.inventory.select_hosts`), plans every host on the facts ``--topology``
names (:func:`rocmfleet.plan.sources.load`) and prints the plan as text
(:mod:`rocmfleet.plan.render`) or JSON (:func:`rocmfleet.plan.model.to_json`).
"""

from __future__ import annotations

import sys
from typing import TextIO

from rocmfleet.config.groupvars import secrets_by_name
from rocmfleet.config.validate import EXIT_INVALID, InventoryError, placeholder_warning, report, validate_inventory
from rocmfleet.fleet.inventory import FleetError, select_hosts
from rocmfleet.plan import render, sources
from rocmfleet.plan.build import plan_fleet
from rocmfleet.plan.model import to_json


def run(
    inventory: str,
    limit: list[str] | None = None,
    exclude: list[str] | None = None,
    topology: str | None = None,
    as_json: bool = False,
    files: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the plan of ``inventory``'s hosts; return the exit status.

    Args:
        inventory: a pyinfra inventory file (``inventories/prod.py``).
        limit, exclude: host names, globs or groups (``--limit``, ``--exclude``).
        topology: ``--topology``: a name or file (:func:`rocmfleet.plan.sources.load`); ``None``: the default part.
        as_json: print the :class:`~rocmfleet.plan.model.FleetPlan`'s JSON instead of the text.
        files: with the text, print every file whole (:mod:`rocmfleet.plan.render`).
        out, err: where the plan and the summary go (standard output and error by default).

    Returns:
        0 planned; 1 a host's instances cannot be placed or its OS is not supported (the others are
        planned; the summary names it); 2 the inventory, its data or an option is bad (the message
        ``rocmfleet validate`` prints, or what ``--topology`` needs).
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        facts = sources.load(topology)
        with secrets_by_name():  # shown by name only: no vault password needed
            configs, problems, hosts = validate_inventory(inventory, with_hosts=True)
        if problems:
            raise FleetError(report(problems))
        chosen = select_hosts(hosts, inventory, limit, "--limit", exclude)
    except (InventoryError, FleetError, sources.SourceError) as exc:
        print(f"rocmfleet: {exc}", file=err)
        print("rocmfleet plan: nothing planned (exit 2)", file=err)
        return EXIT_INVALID
    plan = plan_fleet([(h.name, configs[h.name], list(h.groups)) for h in chosen], facts)
    out.write(to_json(plan) if as_json else render.plan_text(plan, files))
    out.flush()
    if warning := placeholder_warning({h.name: configs[h.name] for h in chosen}):  # as `rocmfleet validate` warns
        print(f"rocmfleet: warning: {warning}", file=err)
    print(render.summary(plan), file=err)
    return 1 if any(h.problem for h in plan.hosts) else 0
