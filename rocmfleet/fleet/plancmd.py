"""``rocmfleet plan INVENTORY``: the fleet plan, offline (no host, no registry is contacted).

Loads and validates the inventory as ``rocmfleet validate`` does (pyinfra's inventory loading
only: nothing connects), keeps the hosts ``--limit``/``--exclude`` leave
(:func:`rocmfleet.fleet.inventory.select_hosts`), plans every host on the facts ``--topology``
names (:func:`rocmfleet.plan.sources.load`) and prints the plan as text
(:mod:`rocmfleet.plan.render`) or JSON (:func:`rocmfleet.plan.model.to_json`).

With ``--image`` it adds the rollout's batches (:func:`plan_rollout`): the options checked and the
batches cut by the functions ``rocmfleet rollout`` uses (:func:`rocmfleet.fleet.rollout.rolloutplan.scope`,
:func:`~rocmfleet.fleet.rollout.rolloutplan.plan`), on the plan's own services and replicas. Offline,
what a host runs is unknown, so every host of the rollout is planned as switching, as ``rollout --dry``
does when it cannot reach the hosts; the image's digest is not resolved.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rocmfleet.config.groupvars import secrets_by_name
from rocmfleet.config.profiles import Image
from rocmfleet.config.validate import EXIT_INVALID, InventoryError, placeholder_warning, report, validate_inventory
from rocmfleet.fleet.inventory import FleetError, select_hosts
from rocmfleet.fleet.rollout import fleetimage, rolloutplan
from rocmfleet.fleet.rollout.batches import PlanError
from rocmfleet.fleet.rollout.rolloutplan import Groups as Groups
from rocmfleet.plan import render, services, sources
from rocmfleet.plan.build import plan_fleet
from rocmfleet.plan.model import FleetPlan, RolloutPlan, to_json

#: What the rollout part says of the image's digest when ``--image`` gives none.
NOT_RESOLVED = "not resolved: rocmfleet plan does not connect"


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when under it (two checkouts' plans, each run
    from its root, then name the same file), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class RolloutOptions:
    """``rocmfleet plan --image``'s options: the image, ``--canary`` (``None``: not given),
    ``--max-unavailable`` (``"1"`` when not given) and ``--canary-group``/``--group``."""

    image: str
    canary: int | None
    max_unavailable: str
    groups: Groups


def plan_rollout(
    plan: FleetPlan,
    groups_of: Mapping[str, Collection[str]],
    images: Mapping[str, Image],
    inventory: str,
    options: RolloutOptions,
) -> RolloutPlan:
    """The rollout of ``options.image`` over ``plan``'s hosts, as ``rocmfleet rollout --dry`` plans it:
    a host whose image is pinned elsewhere than the file that takes the pin is left out, with the
    line ``rollout`` says of it first among the rollout's lines.

    Args:
        plan: the fleet plan (its services' replicas are what the batches are cut from).
        groups_of: each host's inventory groups, in the plan's host order.
        images: each host's image as its data pins it (``HostConfig.image``).
        inventory: the inventory file (named in refusals).

    Raises:
        PlanError, fleetimage.CommandError: what ``rollout`` refuses (exit 2): a bad ``--canary`` or
            ``--max-unavailable``, an unknown group, per-group pins without ``--group``, ...
    """
    replicas = services.replica_counts(plan.services, [h.name for h in plan.hosts])
    left_out: list[str] = []  # hosts pinned elsewhere, as rollout says them
    covered = rolloutplan.scope(
        "rollout",
        inventory,
        replicas,
        groups_of,
        options.image,
        options.canary,
        options.max_unavailable,
        options.groups,
        images,
        left_out.append,
    )
    ref = fleetimage.unconfirmed_ref(options.image)
    digest = ref.digest if "@" in options.image else NOT_RESOLVED
    planned = rolloutplan.plan(covered.hosts, replicas, options.max_unavailable, covered.count, covered.canary_hosts)
    lines = (
        *left_out,
        *rolloutplan.lines(planned, replicas, covered.count, options.groups.canary),
        f"rollout of {rolloutplan.counted(planned, len(covered.hosts))}",
    )
    pin = _shown(covered.pin[0]) if covered.pin else ""
    return rolloutplan.as_plan(
        planned, covered.hosts, (options.image, digest), options.groups, pin, covered.count, lines
    )


def run(
    inventory: str,
    limit: list[str] | None = None,
    exclude: list[str] | None = None,
    topology: str | None = None,
    as_json: bool = False,
    files: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    rollout: RolloutOptions | None = None,
) -> int:
    """Print the plan of ``inventory``'s hosts; return the exit status.

    Args:
        inventory: a pyinfra inventory file (``inventories/prod.py``).
        limit, exclude: host names, globs or groups (``--limit``, ``--exclude``).
        topology: ``--topology``: a name or file (:func:`rocmfleet.plan.sources.load`); ``None``: the default part.
        as_json: print the :class:`~rocmfleet.plan.model.FleetPlan`'s JSON instead of the text.
        files: with the text, print every file whole (:mod:`rocmfleet.plan.render`).
        out, err: where the plan and the summary go (standard output and error by default).
        rollout: ``--image`` and its options: add the rollout's batches (:func:`plan_rollout`).

    Returns:
        0 planned; 1 a host's instances cannot be placed or its OS is not supported (the others are
        planned; the summary names it); 2 the inventory, its data or an option is bad (the message
        ``rocmfleet validate`` prints, what ``--topology`` needs, or ``rollout``'s refusal of an option).
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
    if rollout is not None:
        try:
            groups_of = {h.name: tuple(h.groups) for h in chosen}
            planned = plan_rollout(plan, groups_of, {n: configs[n].image for n in groups_of}, inventory, rollout)
        except (PlanError, fleetimage.CommandError) as exc:
            print(f"rocmfleet: {exc}", file=err)
            print("rocmfleet plan: nothing planned (exit 2)", file=err)
            return EXIT_INVALID
        plan = dataclasses.replace(plan, rollout=planned)
    out.write(to_json(plan) if as_json else render.plan_text(plan, files))
    out.flush()
    if warning := placeholder_warning({h.name: configs[h.name] for h in chosen}):  # as `rocmfleet validate` warns
        print(f"rocmfleet: warning: {warning}", file=err)
    print(render.summary(plan, len(hosts)), file=err)
    return 1 if any(h.problem for h in plan.hosts) else 0
