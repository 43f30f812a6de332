"""A rollout's batches, computed from services and their replicas (pure).

A *service* is one served model and each vLLM instance one *replica* of it
(:mod:`rocmfleet.plan.services`); a host switches as a whole, so a batch holds all of its hosts'
replicas. ``--max-unavailable`` bounds **each service**, as Kubernetes' ``maxUnavailable`` bounds
each Deployment: no batch holds more than that many replicas of any one service, whatever the
inventory order (a host serving several services counts for each). A count applies to every
service; a percentage is of that service's replicas on the hosts the rollout covers, rounded
down, at least 1 (:func:`service_bounds`). A host that alone holds more replicas of a service
than the bound goes in a batch of its own: the fewest that can be out while it switches.

:func:`plan_batches`: the canary's hosts first, packed into as few bounded batches as the bound
allows (a canary larger than the bound is split), then every other host the same way
(:func:`pack`: each batch takes, in inventory order, every remaining host that still fits).
:func:`default_canary`: ``N`` replicas of each service (default 1) on the fewest hosts, found
greedily (the host adding the most replicas still wanted first, inventory order on a tie, so a
single-service fleet's canary is its first host, as before). A batch is out of service from its
drain to its undrain, and the next starts only when it is back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

#: ``{host: {service: replicas}}`` in inventory order: what a host takes out of service when it switches.
Replicas = Mapping[str, Mapping[str, int]]


class PlanError(ValueError):
    """Bad rollout options; the message names the option, the value and what is allowed."""


def parse_max_unavailable(text: str, replicas: int) -> int:
    """``--max-unavailable`` for one service: ``N`` replicas or ``P%`` of its ``replicas``
    (rounded down, at least 1).

    Kubernetes' ``maxUnavailable`` rounds a percentage down too (``intstr`` with
    ``roundUp=false`` in the Deployment controller).

    Raises:
        PlanError: not a positive count or a percentage in (0, 100].
    """
    value = text.strip()
    if value.endswith("%"):
        # ASCII digits only: float() also reads "1e1", "inf", "nan" and other scripts' digits
        percent = float(value[:-1]) if re.fullmatch(r"[0-9]+(\.[0-9]+)?", value[:-1]) else math.nan
        if not 0 < percent <= 100:
            raise PlanError(f"--max-unavailable {text}: a percentage must be in (0, 100], like 25%")
        return max(1, math.floor(replicas * percent / 100))
    if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:  # str.isdigit() holds for "²", which int() refuses
        raise PlanError(
            f"--max-unavailable {text}: expected a count of replicas per service >= 1 or a percentage like 25%"
        )
    return int(value)


def totals(hosts: Replicas) -> dict[str, int]:
    """Replicas per service over ``hosts``, services in order of first appearance."""
    found: dict[str, int] = {}
    for replicas in hosts.values():
        for service, count in replicas.items():
            found[service] = found.get(service, 0) + count
    return found


def service_bounds(text: str, hosts: Replicas) -> dict[str, int]:
    """``--max-unavailable`` per service of ``hosts`` (:func:`parse_max_unavailable` of each
    service's replicas there).

    Raises:
        PlanError: as :func:`parse_max_unavailable`.
    """
    parse_max_unavailable(text, 1)  # a bad value is refused even for a fleet without replicas
    return {service: parse_max_unavailable(text, count) for service, count in totals(hosts).items()}


def fits(load: Mapping[str, int], replicas: Mapping[str, int], bounds: Mapping[str, int]) -> bool:
    """Whether a batch holding ``load`` replicas per service can take a host holding ``replicas``."""
    return all(load.get(s, 0) + n <= bounds.get(s, n) for s, n in replicas.items())


def pack(order: Sequence[str], hosts: Replicas, bounds: Mapping[str, int]) -> list[list[str]]:
    """``order``'s hosts in batches within ``bounds``: each batch takes, in order, every remaining
    host that still fits; a host over a bound on its own (:func:`fits` of an empty batch fails)
    goes alone when it comes first. Deterministic; every host once."""
    left = list(order)
    batches: list[list[str]] = []
    while left:
        batch: list[str] = []
        load: dict[str, int] = {}
        for name in left:
            replicas = hosts.get(name, {})
            if batch and not fits(load, replicas, bounds):
                continue
            batch.append(name)
            for service, count in replicas.items():
                load[service] = load.get(service, 0) + count
            if not fits({}, replicas, bounds):  # over the bound alone: a batch of its own
                break
        batches.append(batch)
        taken = set(batch)
        left = [name for name in left if name not in taken]
    return batches


def default_canary(hosts: Replicas, per_service: int) -> list[str]:
    """The canary of ``--canary N``: at least ``per_service`` replicas of each service (all of a
    service that has fewer), on few hosts, in inventory order.

    Greedy set cover: the next host is the one adding the most replicas still wanted (inventory
    order on a tie). A host switches as a whole, so a canary host holding more replicas of its
    service than wanted brings them all.

    Raises:
        PlanError: ``per_service`` < 0.
    """
    if per_service < 0:
        raise PlanError(f"--canary {per_service}: must be >= 0")
    wanted = {service: min(per_service, count) for service, count in totals(hosts).items()}
    chosen: list[str] = []
    while any(wanted.values()):
        best, gain = "", 0
        for name, replicas in hosts.items():
            adds = sum(min(n, wanted.get(s, 0)) for s, n in replicas.items())
            if name not in chosen and adds > gain:
                best, gain = name, adds
        if not gain:
            break
        chosen.append(best)
        for service, count in hosts[best].items():
            wanted[service] = max(0, wanted.get(service, 0) - count)
    return [name for name in hosts if name in chosen]


def plan_batches(hosts: Replicas, bounds: Mapping[str, int], canary: Sequence[str] = ()) -> list[list[str]]:
    """Every host of ``hosts`` in batches: ``canary``'s hosts first (:func:`pack`), then the rest
    (:func:`pack`), inventory order kept within each part. ``canary`` names outside ``hosts`` are ignored."""
    head = [name for name in hosts if name in set(canary)]
    rest = [name for name in hosts if name not in set(canary)]
    return pack(head, hosts, bounds) + pack(rest, hosts, bounds)


def over_bound(batch: Sequence[str], hosts: Replicas, bounds: Mapping[str, int]) -> dict[str, int]:
    """The services a batch of more than one host holds more replicas of than ``bounds`` allow,
    with the count (empty: within the bounds). A one-host batch is never over: a host switches whole."""
    if len(batch) <= 1:
        return {}
    load = totals({name: hosts.get(name, {}) for name in batch})
    return {s: n for s, n in load.items() if n > bounds.get(s, n)}


def rollback_groups(
    order: Sequence[str], hosts: Replicas, bounds: Mapping[str, int], hosts_per_group: int
) -> list[list[str]]:
    """The groups a rollback returns ``order``'s hosts in, one group out of service at a time:
    :func:`pack` within ``bounds`` (per service), or, for a state file without services
    (``bounds`` empty), runs of ``hosts_per_group`` hosts."""
    if bounds:
        return pack(order, hosts, bounds)
    size = max(1, hosts_per_group)
    return [list(order[i : i + size]) for i in range(0, len(order), size)]


def eta_s(done_batches: int, total_batches: int, elapsed_s: float) -> float | None:
    """Seconds left, from the mean time of the batches done so far (``None`` before the first)."""
    if done_batches <= 0:
        return None
    return elapsed_s / done_batches * (total_batches - done_batches)
