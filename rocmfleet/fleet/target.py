"""One host of a fleet as the fleet commands take it: its inventory name, SSH settings and validated
configuration (:class:`Target`).

:func:`rocmfleet.fleet.inventory.load_fleet` makes them from an inventory; the commands that talk
to hosts (check, bench, rollout, cache bake) take them, so they need not load an inventory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from rocmfleet.config.connection import SshSettings
from rocmfleet.config.settings import HostConfig


@dataclass(frozen=True)
class Target:
    """One host of the fleet: its inventory name, SSH settings, validated configuration and the
    inventory groups it is in (``("all", "gpu_nodes")``; empty where it was made without an inventory)."""

    name: str
    ssh: SshSettings
    config: HostConfig
    groups: tuple[str, ...] = ()


_T = TypeVar("_T")


def parallel(fn: Callable[[str], _T], hosts: Sequence[str], workers: int = 16) -> list[_T]:
    """``fn`` of every host, at most ``workers`` at once, in order."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return list(pool.map(fn, hosts))
