"""A rollout's batches: the canary, then batches of at most ``--max-unavailable`` hosts.

:func:`plan_batches`: the canary (``--canary N`` hosts, default 1), then batches of at most
``--max-unavailable`` hosts (a count, or a percentage of the hosts rolled out,
:func:`parse_max_unavailable`). A batch is out of service from its drain to its undrain, and the
next batch starts only when the whole batch is back: never more than ``max_unavailable`` hosts
out of service at once. A canary larger than ``max_unavailable`` is split too. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


class PlanError(ValueError):
    """Bad rollout options; the message names the option, the value and what is allowed."""


def parse_max_unavailable(text: str, hosts: int) -> int:
    """``--max-unavailable``: ``N`` hosts or ``P%`` of ``hosts`` (rounded down, at least 1).

    Kubernetes' ``maxUnavailable`` rounds a percentage down too (``intstr`` with
    ``roundUp=false`` in the Deployment controller).

    Raises:
        PlanError: not a positive count or a percentage in (0, 100].
    """
    value = text.strip()
    if value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            percent = math.nan
        if not 0 < percent <= 100:
            raise PlanError(f"--max-unavailable {text}: a percentage must be in (0, 100]")
        return max(1, math.floor(hosts * percent / 100))
    if not value.isdigit() or int(value) < 1:
        raise PlanError(f"--max-unavailable {text}: expected a count of hosts >= 1 or a percentage like 25%")
    return int(value)


def plan_batches(hosts: Sequence[str], canary: int, max_unavailable: int) -> list[list[str]]:
    """The hosts in batches: the canary first (``canary`` hosts, split by ``max_unavailable``),
    then the rest in inventory order, at most ``max_unavailable`` per batch.

    Raises:
        PlanError: ``canary`` < 0 or ``max_unavailable`` < 1.
    """
    if canary < 0:
        raise PlanError(f"--canary {canary}: must be >= 0")
    if max_unavailable < 1:
        raise PlanError(f"--max-unavailable {max_unavailable}: must be >= 1")
    hosts = list(hosts)
    head, rest = hosts[:canary], hosts[canary:]
    chunks = [head[i : i + max_unavailable] for i in range(0, len(head), max_unavailable)]
    chunks += [rest[i : i + max_unavailable] for i in range(0, len(rest), max_unavailable)]
    return chunks


def eta_s(done_batches: int, total_batches: int, elapsed_s: float) -> float | None:
    """Seconds left, from the mean time of the batches done so far (``None`` before the first)."""
    if done_batches <= 0:
        return None
    return elapsed_s / done_batches * (total_batches - done_batches)
