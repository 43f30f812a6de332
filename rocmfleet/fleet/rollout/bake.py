"""``rocmfleet rollout --bake``: bake the compile caches on the canary, push, roll the baked image out.

The two existing commands, one after the other, nothing new in between:

1. the **base image** is ``--image REPO:TAG`` (its digest resolved once from the registry,
   :func:`rocmfleet.fleet.rollout.targetimage.resolve`) or, without it, what the group data pins now; a base
   that is itself baked (its tag ends in ``-rfcache-<key>``) is refused: a bake starts from the
   image without caches;
2. ``rocmfleet cache bake`` (:func:`rocmfleet.fleet.cache.cachebake.bake`) on the **canary**: the
   first host of ``--canary-group``, else of ``--group``, else of the hosts (``--limit``) in
   inventory order (the default canary's first host on a fleet of one service), with that base image;
3. ``rocmfleet rollout --image <baked repository:tag>`` (:func:`rocmfleet.fleet.rollout.command.run_rollout`):
   the canary first, then the remaining batches, gated and rolled back as any rollout. The digest
   the registry gives for the baked tag must be the one the bake pushed (checked before the
   rollout starts; the rollout resolves it once more and pins that digest on every host).

Kept apart from :mod:`rocmfleet.fleet.rollout.command` (one function, its steps injectable for the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import cachedirs
from rocmfleet.fleet.cache.cachebake import Baked, BakeError
from rocmfleet.fleet.connect import CommandTimeout, ConnectError
from rocmfleet.fleet.rollout.batches import parse_max_unavailable
from rocmfleet.fleet.rollout.fleetimage import CommandError, group_hosts
from rocmfleet.fleet.rollout.progress import Emit, to_stderr
from rocmfleet.fleet.rollout.rolloutplan import Groups
from rocmfleet.fleet.rollout.state import ImageRef, deploy_refusal
from rocmfleet.fleet.target import Target


@dataclass(frozen=True)
class BakeSteps:
    """What :func:`bake_and_roll` calls; the defaults are the real ones (tests pass stand-ins).

    ``load(inventory, limit) -> {name: Target}`` in inventory order; ``resolve(reference, targets)
    -> ImageRef``; ``with_image(target, ImageRef) -> Target``; ``bake(target, emit) -> Baked``;
    ``rollout(inventory, image=..., **options) -> exit status``.
    """

    load: Callable[[str, list[str] | None], Mapping[str, Target[HostConfig]]]
    resolve: Callable[[str, Mapping[str, Target[HostConfig]]], ImageRef]
    with_image: Callable[[Target[HostConfig], ImageRef], Target[HostConfig]]
    bake: Callable[[Target[HostConfig], Emit], Baked]
    #: ``run_rollout``'s keyword arguments: its options are passed through as given.
    rollout: Callable[..., int]


def bake_and_roll(
    inventory: str,
    image: str | None = None,
    canary: int | None = None,
    limit: list[str] | None = None,
    emit: Emit = print,
    *,
    steps: BakeSteps,
    groups: Groups = Groups(),  # noqa: B008 - frozen, never mutated
    error: Emit | None = None,
    **rollout_options: Any,
) -> int:
    """Bake on the canary, then roll the baked image out (module docstring).

    Args:
        inventory: the pyinfra inventory file.
        image: the base image ``REPO:TAG``; ``None``: the one the group data pins.
        canary: ``--canary``: replicas of each service in the canary (default 1); at least 1 (the
            bake runs on the canary's first host).
        groups: ``--canary-group`` and ``--group``: the bake runs on the first host of the canary
            group, else of the group whose pin is rolled, else of the hosts; passed to the rollout.
        limit: ``--limit`` patterns, as for the rollout.
        emit: where progress goes (stdout); error: where errors go (default stderr).
        steps: the steps it calls (:func:`rocmfleet.cli` passes the real ones, tests stand-ins).
        rollout_options: passed to :func:`rocmfleet.fleet.rollout.command.run_rollout` (``max_unavailable``,
            ``force``, ``results_dir``, ``progress_factory``).

    Returns:
        The rollout's exit status; 1 when the bake failed (nothing rolled); 2 when nothing started
        (bad options, a baked base image, an unreadable registry).
    """
    say_error: Emit = error or to_stderr
    try:
        # a recorded rollout refuses this one: say so before the bake stops the canary's instance
        if refusal := deploy_refusal(inventory, rollout_options.get("results_dir")):
            raise CommandError(refusal)
        if canary is not None and canary < 1:
            raise CommandError(f"--bake --canary {canary}: the bake runs on the canary; give --canary 1 or more")
        targets = steps.load(inventory, limit)
        if not targets:
            raise CommandError(f"no hosts in {inventory}" + (f" for --limit {','.join(limit)}" if limit else ""))
        if rollout_options.get("max_unavailable") is not None:  # the rollout's own check, before the bake
            parse_max_unavailable(rollout_options["max_unavailable"], 1)
        group = groups.canary or groups.pin
        option = "--canary-group" if groups.canary else "--group"
        host = (
            group_hosts(group, {n: t.groups for n, t in targets.items()}, option, inventory)[0]
            if group
            else next(iter(targets))
        )
        target = targets[host]
        if image is not None:
            base = steps.resolve(image, targets)
            target = steps.with_image(target, base)
            emit(f"{image} is {base.digest}: the base of the bake")
        if cachedirs.is_baked(target.config):
            raise CommandError(
                f"{host} would bake from {target.config.image.reference}, itself a baked image; "
                "give the base image with --image REPO:TAG"
            )
    except (CommandError, ValueError) as exc:
        say_error(f"rocmfleet: {exc}")
        return 2
    emit(f"bake on the canary {host} from {target.config.image.reference}")
    try:
        baked = steps.bake(target, emit)
    except (BakeError, ConnectError, CommandTimeout) as exc:
        say_error(f"rocmfleet: the bake on {host} failed, nothing rolled out: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - anything else on the canary fails the bake, not the command
        say_error(f"rocmfleet: the bake on {host} failed, nothing rolled out: {type(exc).__name__}: {exc}")
        return 1
    pushed = f"{baked.repository}:{baked.tag}"
    try:
        found = steps.resolve(pushed, targets)
    except CommandError as exc:
        say_error(f"rocmfleet: {exc}")
        return 2
    if found.digest != baked.digest:
        say_error(
            f"rocmfleet: the registry has {pushed} as {found.digest}, the bake pushed {baked.digest}; not rolled out"
        )
        return 2
    emit(f"baked {baked.reference} (key {baked.key.short}, {baked.manifest.files} files); rolling it out")
    return steps.rollout(
        inventory,
        kind="rollout",
        image=pushed,
        canary=canary,
        limit=limit,
        emit=emit,
        error=say_error,
        groups=groups,
        **rollout_options,
    )
