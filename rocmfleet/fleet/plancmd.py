"""``rocmfleet plan INVENTORY``: the fleet plan, offline (no host, no registry is contacted).

The command (``cli/plan.py``) gives the inventory's loading and the planning (:class:`Planning`):
the inventory is validated as ``rocmfleet validate`` does (pyinfra's inventory loading only: nothing
connects), the hosts ``--limit``/``--exclude`` leave kept
(:func:`rocmfleet.fleet.inventory.load_configs`), every host planned on the facts ``--topology``
names (:func:`rocmfleet.plan.sources.load`; :func:`rocmfleet.plan.build.plan_fleet`) and the plan
printed as text (:mod:`rocmfleet.plan.render`) or JSON (:func:`rocmfleet.plan.model.to_json`).

With ``--image`` it adds the rollout's batches (:func:`plan_rollout`): the options checked and the
batches cut by the functions ``rocmfleet rollout`` uses (:func:`rocmfleet.fleet.rollout.rolloutplan.scope`,
:func:`~rocmfleet.fleet.rollout.rolloutplan.plan`), on the plan's own services and replicas. Offline,
what a host runs is unknown, so every host of the rollout is planned as switching, as ``rollout --dry``
does when it cannot reach the hosts; the image's digest is not resolved.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rocmfleet.config.groupvars import secrets_by_name
from rocmfleet.config.profiles import Image
from rocmfleet.config.settings import HostConfig
from rocmfleet.config.validate import EXIT_INVALID, placeholder_warning
from rocmfleet.fleet.rollout import fleetimage, rolloutplan
from rocmfleet.fleet.rollout.batches import PlanError
from rocmfleet.fleet.rollout.rolloutplan import Groups as Groups
from rocmfleet.plan import render, services, sources
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
class Planning:
    """What the command (``cli/plan.py``) gives :func:`run`: only the commands load an inventory, and
    the planning sits deep in the import graph (``docs/layout.md``'s chain of at most 8).

    Attributes:
        load: ``load(inventory, limit, exclude) -> ([(name, config, groups)], hosts in the inventory)``
            (:func:`rocmfleet.fleet.inventory.load_configs`; a ``ValueError`` saying why it cannot).
        plan: ``plan(hosts, facts) -> FleetPlan`` (:func:`rocmfleet.plan.build.plan_fleet`).
    """

    load: Callable[
        [str, list[str] | None, list[str] | None], tuple[Sequence[tuple[str, HostConfig, tuple[str, ...]]], int]
    ]
    plan: Callable[[Sequence[tuple[str, HostConfig, Sequence[str]]], sources.HostFacts], FleetPlan]


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
    *,
    planning: Planning,
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
        planning: the inventory's loading and the planning (:class:`Planning`).

    Returns:
        0 planned; 1 a host's instances cannot be placed or its OS is not supported (the others are
        planned; the summary names it); 2 the inventory, its data or an option is bad (the message
        ``rocmfleet validate`` prints, what ``--topology`` needs, or ``rollout``'s refusal of an option).
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        facts = sources.load(topology)
        with secrets_by_name():  # shown by name only: no vault password needed
            chosen, total = planning.load(inventory, limit, exclude)
    except ValueError as exc:  # FleetError, SourceError
        print(f"rocmfleet: {exc}", file=err)
        print("rocmfleet plan: nothing planned (exit 2)", file=err)
        return EXIT_INVALID
    plan = planning.plan(chosen, facts)
    configs = {name: config for name, config, _ in chosen}
    if rollout is not None:
        try:
            groups_of = {name: groups for name, _, groups in chosen}
            planned = plan_rollout(plan, groups_of, {n: configs[n].image for n in groups_of}, inventory, rollout)
        except (PlanError, fleetimage.CommandError) as exc:
            print(f"rocmfleet: {exc}", file=err)
            print("rocmfleet plan: nothing planned (exit 2)", file=err)
            return EXIT_INVALID
        plan = dataclasses.replace(plan, rollout=planned)
    out.write(to_json(plan) if as_json else render.plan_text(plan, files))
    out.flush()
    if warning := placeholder_warning(configs):  # as `rocmfleet validate` warns
        print(f"rocmfleet: warning: {warning}", file=err)
    print(render.summary(plan, total), file=err)
    return 1 if any(h.problem for h in plan.hosts) else 0
