"""What a rollout or restart will do, from its hosts' services: the options checked before any
connection and the hosts they cover (:func:`scope`, :func:`check_options`), the per-service
bounds, the canary and the batches (:func:`plan`), and the lines that show them (:func:`lines`).
Pure but for reading the group data files the inventory loaded; the rules are
:mod:`rocmfleet.fleet.rollout.batches`'. ``rocmfleet rollout``/``restart`` and ``rocmfleet plan
--image`` both plan through :func:`scope` and :func:`plan`, on the replicas of
:func:`rocmfleet.plan.services.replica_counts`: the same options give the same batches.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmfleet.config.profiles import Image
from rocmfleet.config.settings import HostConfig
from rocmfleet.fleet.rollout.batches import (
    PlanError,
    default_canary,
    pack,
    parse_max_unavailable,
    plan_batches,
    service_bounds,
    totals,
)
from rocmfleet.fleet.rollout.fleetimage import CommandError, group_hosts, pin_file, pinned_hosts
from rocmfleet.fleet.rollout.progress import Emit
from rocmfleet.fleet.target import Target
from rocmfleet.plan import services
from rocmfleet.plan.model import RolloutPlan, ServiceBound


@dataclass(frozen=True)
class Groups:
    """Inventory groups a new rollout names.

    Attributes:
        canary: ``--canary-group``: its hosts are the canary (instead of ``--canary N``).
        pin: ``--group`` (with ``--image``): the group whose file's image pin is rolled, on its
            hosts only (a site that pins the image per group); the bounds stay those of the
            whole fleet's replicas.
    """

    canary: str | None = None
    pin: str | None = None


def host_replicas(targets: Mapping[str, Target[HostConfig]]) -> dict[str, dict[str, int]]:
    """``{host: {service: replicas}}`` of ``targets``, in their order: the replicas of their services
    as the fleet plan holds them (:func:`rocmfleet.plan.services.plan_services`,
    :func:`~rocmfleet.plan.services.replica_counts`)."""
    planned = services.plan_services([(name, t.config, t.groups) for name, t in targets.items()])
    return services.replica_counts(planned, list(targets))


def check_options(
    replicas: Mapping[str, Mapping[str, int]], canary: int | None, canary_group: str | None, max_unavailable: str
) -> None:
    """Refuse, before any connection, counts that cannot be meant for these hosts' services.

    Args:
        replicas: every host the command covers (:func:`host_replicas`).
        canary, canary_group: ``--canary`` and ``--canary-group`` (``None``: not given).
        max_unavailable: ``--max-unavailable`` as given (``"1"`` by default).

    Raises:
        PlanError: both canary options; ``--canary`` < 0 or more than a service's replicas;
            a ``--max-unavailable`` count over the replicas of every service (a typo: 100% takes all).
    """
    if canary is not None and canary_group is not None:
        raise PlanError(f"--canary {canary} with --canary-group {canary_group}: give one of them")
    if canary is not None and canary < 0:
        raise PlanError(f"--canary {canary}: must be >= 0")
    counts = totals(replicas)
    short = {s: n for s, n in counts.items() if canary is not None and canary > n}
    if short:
        said = ", ".join(f"{s} has {n}" for s, n in short.items())
        raise PlanError(
            f"--canary {canary}: replicas of each service in the canary, more than a service has ({said}); "
            f"give at most {min(counts.values())}, or --canary-group NAME"
        )
    bound = parse_max_unavailable(max_unavailable, 1)
    if counts and not max_unavailable.strip().endswith("%") and bound > max(counts.values()):
        raise PlanError(
            f"--max-unavailable {max_unavailable}: replicas of each service out at once, more than any service has "
            f"(the most: {max(counts.values())}; 100% takes them all)"
        )


@dataclass(frozen=True)
class Scope:
    """What a new rollout or restart covers, once its options are checked (:func:`scope`).

    Attributes:
        hosts: the hosts it covers (``--group``'s with ``--image``, else all; with ``--image``, less
            those whose image is pinned elsewhere), in inventory order.
        canary_hosts: ``--canary-group``'s hosts (``None``: not given; ``--canary N`` then).
        count: ``--canary N`` (1 when not given).
        pin: with an image, the group data file that takes its pin and the file's text now.
    """

    hosts: list[str]
    canary_hosts: list[str] | None
    count: int
    pin: tuple[Path, str] | None


def scope(
    kind: str,
    inventory: str,
    replicas: Mapping[str, Mapping[str, int]],
    groups_of: Mapping[str, Collection[str]],
    image: str | None,
    canary: int | None,
    max_unavailable: str,
    groups: Groups,
    images: Mapping[str, Image],
    emit: Emit,
) -> Scope:
    """Check a new rollout's options against its hosts and return what it covers; nothing connects.

    Args:
        kind: ``rollout`` or ``restart`` (said in a refusal); ``inventory``: the inventory file (ditto).
        replicas: every host the command covers (:func:`host_replicas`), ``groups_of``: their
            inventory groups, both in inventory order.
        image: ``--image`` (``None``: the pinned image); canary, max_unavailable, groups: the options.
        images: each host's image as its data pins it: with ``image``, a host whose image is pinned
            elsewhere than the file that takes the pin is left out
            (:func:`rocmfleet.fleet.rollout.fleetimage.pinned_hosts`), ``emit`` told a line for each.

    Raises:
        PlanError: as :func:`check_options`.
        CommandError: an unknown ``--canary-group`` or ``--group``; ``--group`` without an image; a
            canary group outside the rolled group (or all of whose hosts are left out); every host
            pinned elsewhere; no group file (or several) to pin the image in
            (:func:`rocmfleet.fleet.rollout.fleetimage.pin_file`).
    """
    check_options(replicas, canary, groups.canary, max_unavailable)
    canary_hosts = None
    if groups.canary is not None:
        canary_hosts = group_hosts(groups.canary, groups_of, "--canary-group", inventory)
    if groups.pin is not None and image is None:
        raise CommandError(f"--group {groups.pin} names the group whose image pin --image rolls; give --image too")
    hosts = pinned_hosts(groups.pin, groups_of, images, inventory, emit) if image else list(groups_of)
    if canary_hosts is not None and not set(canary_hosts) & set(hosts):
        outside = f"group {groups.pin}" if groups.pin else "each is left out above"
        raise CommandError(
            f"--canary-group {groups.canary}: none of its hosts ({', '.join(canary_hosts)}) is in this {kind} "
            f"({outside}); name a canary group among its hosts"
        )
    pin = (
        pin_file(groups.pin, groups_of, images) if image else None
    )  # which file takes the pin, refused before any connection
    return Scope(hosts, canary_hosts, 1 if canary is None else canary, pin)


@dataclass(frozen=True)
class Planned:
    """A rollout's plan.

    Attributes:
        bounds: per service, the most replicas a batch holds (``--max-unavailable`` of it).
        totals: per service, its replicas on every host the command covers (the percentages' base).
        canary: the canary's hosts (in inventory order); batches: every host to switch, canary first.
        canary_batches: how many of the first batches are the canary.
        oversized: hosts that alone hold more replicas of a service than its bound (each in a batch of its own).
    """

    bounds: dict[str, int]
    totals: dict[str, int]
    canary: list[str]
    batches: list[list[str]]
    canary_batches: int
    oversized: dict[str, dict[str, int]]


def plan(
    hosts: Sequence[str],
    replicas: Mapping[str, Mapping[str, int]],
    max_unavailable: str,
    canary: int,
    canary_hosts: Sequence[str] | None = None,
) -> Planned:
    """The batches of ``hosts`` (those to switch, in inventory order).

    Args:
        replicas: every host the command covers (the percentages are of each service's replicas there).
        canary: ``--canary N``: N replicas of each service (:func:`~rocmfleet.fleet.rollout.batches.default_canary`).
        canary_hosts: ``--canary-group``'s hosts, which replace ``canary``; ``None``: not given.

    Raises:
        PlanError: a bad ``--max-unavailable`` or ``--canary``.
    """
    bounds = service_bounds(max_unavailable, replicas)
    switching = {h: dict(replicas.get(h, {})) for h in hosts}
    chosen = [h for h in hosts if h in set(canary_hosts)] if canary_hosts is not None else None
    head = chosen if chosen is not None else default_canary(switching, canary)
    oversized: dict[str, dict[str, int]] = {}
    for host, counts in switching.items():
        over = {s: n for s, n in counts.items() if n > bounds.get(s, n)}
        if over:
            oversized[host] = over
    return Planned(
        bounds=bounds,
        totals=totals(replicas),
        canary=head,
        batches=plan_batches(switching, bounds, head),
        canary_batches=len(pack(head, switching, bounds)),
        oversized=oversized,
    )


def lines(
    planned: Planned, replicas: Mapping[str, Mapping[str, int]], canary: int = 1, canary_group: str | None = None
) -> list[str]:
    """The plan as printed: the services and their bounds, hosts over a bound, the batches.

    ``services: A: 16 replica(s), at most 4 out of service at once; ...``, then
    ``plan: batch 1 (canary): h1, h9; batch 2: ...`` (one line; each host's services in brackets
    when the hosts serve more than one).
    """
    said = [
        "services: "
        + "; ".join(
            f"{s}: {planned.totals[s]} replica(s), at most {planned.bounds[s]} out of service at once"
            for s in planned.totals
        )
    ]
    if planned.canary or canary_group:
        said.append(canary_line(planned, replicas, canary, canary_group))
    for host, over in planned.oversized.items():
        what = ", ".join(f"{n} replicas of {s} (at most {planned.bounds[s]})" for s, n in over.items())
        said.append(f"{host} holds {what}: a host switches whole, so it goes in a batch of its own")
    several = len(planned.totals) > 1

    def named(host: str) -> str:
        if not several:
            return host
        served = ", ".join(f"{s}" if n == 1 else f"{s} x{n}" for s, n in replicas.get(host, {}).items())
        return f"{host} [{served or 'no instance'}]"

    batches = [
        f"batch {i + 1}{' (canary)' if i < planned.canary_batches else ''}: {', '.join(named(h) for h in batch)}"
        for i, batch in enumerate(planned.batches)
    ]
    if batches:
        said.append("plan: " + "; ".join(batches))
    return said


def canary_line(
    planned: Planned, replicas: Mapping[str, Mapping[str, int]], canary: int = 1, canary_group: str | None = None
) -> str:
    """The canary as printed: which replicas of which services, on which hosts, and why those.

    ``canary (batch 1): ra-01 (1 replica of qwen), ra-07 (1 replica of scout); why: --canary 1
    (the default): the fewest hosts, in inventory order, holding 1 replica of each service``;
    ``--canary-group canary`` says ``why: the hosts of group canary (--canary-group)``. A host
    switches whole, so it brings every replica it holds; a service with no replica there is named
    (``none of scout: its first replicas switch after the canary``).
    """
    if not planned.canary:
        return f"canary: group {canary_group}: no host of it to switch" if canary_group else "canary: none"
    batches = planned.canary_batches
    where = "batch 1" if batches == 1 else f"batches 1-{batches}"

    def held(host: str) -> str:
        counts = replicas.get(host, {})
        if not counts:
            return f"{host} (no instance)"
        return f"{host} ({', '.join(f'{n} replica{_plural(n)} of {s}' for s, n in counts.items())})"

    if canary_group:
        why = f"the hosts of group {canary_group} (--canary-group {canary_group}) that switch"
    else:
        default = " (the default)" if canary == 1 else ""
        why = (
            f"--canary {canary}{default}: the fewest hosts, in inventory order, holding {canary} "
            "replica(s) of each service (a host switches whole, with every replica it holds)"
        )
    covered = {s for h in planned.canary for s in replicas.get(h, {})}
    missing = [s for s in planned.totals if s not in covered]
    none = f"; none of {', '.join(missing)}: its replicas first switch after the canary" if missing else ""
    return f"canary ({where}): {', '.join(held(h) for h in planned.canary)}; why: {why}{none}"


def _plural(count: int) -> str:
    return "" if count == 1 else "s"


def counted(planned: Planned, hosts: int) -> str:
    """``24 host(s) in 8 batch(es), at most 4 of A, 2 of B out of service at once`` (one service:
    ``at most 1 replica(s) out of service at once``). Where a host alone holds more replicas of a
    service than its bound (``planned.oversized``: it switches whole), the figure is that host's,
    with the bound beside it: ``at most 8 replica(s) out of service at once (bound 1: a host holds 8)``."""
    peaks = dict(planned.bounds)
    for over in planned.oversized.values():
        for service, count in over.items():
            peaks[service] = max(peaks.get(service, 0), count)

    def most(service: str) -> str:
        bound = planned.bounds.get(service, peaks[service])
        held = f" (bound {bound}: a host holds {peaks[service]})" if peaks[service] > bound else ""
        return f"{peaks[service]}{held}"

    if len(peaks) == 1:
        figure, _, held = most(next(iter(peaks))).partition(" ")
        bound = f"at most {figure} replica(s) out of service at once" + (f" {held}" if held else "")
    else:
        bound = "at most " + ", ".join(f"{most(s)} of {s}" for s in peaks) + " out of service at once"
    return f"{hosts} host(s) in {len(planned.batches)} batch(es), {bound}"


def as_plan(
    planned: Planned,
    hosts: Sequence[str],
    image: tuple[str, str],
    groups: Groups,
    pin: str,
    canary: int,
    shown: Sequence[str],
) -> RolloutPlan:
    """``planned`` as the :class:`~rocmfleet.plan.model.RolloutPlan` that ``rocmfleet plan --image
    --json`` prints (``rollout --dry --json`` prints the same object).

    Args:
        hosts: the hosts that switch, inventory order; ``image``: (the reference rolled, its digest
            or why it is not known); ``pin``: the group data file that pins it (``""``: none edited).
        canary: ``--canary N`` (said when no ``--canary-group``); ``shown``: the plan's lines as printed.
    """
    return RolloutPlan(
        image=image[0],
        digest=image[1],
        group=groups.pin,
        pin_file=pin,
        hosts=tuple(hosts),
        canary=f"group {groups.canary}" if groups.canary else f"{canary} replica(s) of each service",
        canary_hosts=tuple(planned.canary),
        services=tuple(ServiceBound(s, planned.totals[s], n) for s, n in planned.bounds.items()),
        batches=tuple(tuple(batch) for batch in planned.batches),
        canary_batches=planned.canary_batches,
        lines=tuple(shown),
    )
