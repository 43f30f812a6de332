"""One host of a fleet as the fleet commands take it: its inventory name, SSH settings and validated
configuration (:class:`Target`).

:func:`rocmfleet.fleet.inventory.load_fleet` makes them from an inventory; the commands that talk
to hosts (check, bench, rollout, cache bake) take them, so they need not load an inventory.

``Target`` is generic over its configuration, bound to :class:`FleetConfig`, the few fields of the
host's configuration the fleet modules read: ``HostConfig`` has each, so the inventory makes
``Target[HostConfig]`` and the code that hands the configuration on to code typed on ``HostConfig``
(the planner, the services' plan, the cache bake) says so, while the rest reads a
``Target[FleetConfig]`` and need not import ``config.settings``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from rocmfleet.config.connection import SshSettings
from rocmfleet.config.hostsettings import HostSettings
from rocmfleet.config.instances import Instance
from rocmfleet.config.profiles import Image, Profile
from rocmfleet.domain.metrics import MetricsSettings


class FleetConfig(Protocol):
    """What the fleet modules read of a host's validated configuration
    (:class:`rocmfleet.config.settings.HostConfig` has each)."""

    @property
    def settings(self) -> HostSettings: ...

    @property
    def profile(self) -> Profile: ...

    @property
    def image(self) -> Image: ...

    @property
    def metrics(self) -> MetricsSettings: ...

    def instances(self) -> list[Instance]:
        """The host's vLLM instances."""
        ...


C = TypeVar("C", bound=FleetConfig, covariant=True)


@dataclass(frozen=True)
class Target(Generic[C]):
    """One host of the fleet: its inventory name, SSH settings, validated configuration and the
    inventory groups it is in (``("all", "gpu_nodes")``; empty where it was made without an inventory)."""

    name: str
    ssh: SshSettings
    config: C
    groups: tuple[str, ...] = ()


_T = TypeVar("_T")


def parallel(fn: Callable[[str], _T], hosts: Sequence[str], workers: int = 16) -> list[_T]:
    """``fn`` of every host, at most ``workers`` at once, in order."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(hosts)))) as pool:
        return list(pool.map(fn, hosts))
