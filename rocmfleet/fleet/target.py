"""One host of a fleet as the fleet commands take it: its inventory name, SSH settings and validated
configuration (:class:`Target`).

:func:`rocmfleet.fleet.inventory.load_fleet` makes them from an inventory; the commands that talk
to hosts (check, bench, rollout, cache bake) take them, so they need not load an inventory.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmfleet.config.settings import HostConfig
from rocmfleet.fleet.connect import SshSettings


@dataclass(frozen=True)
class Target:
    """One host of the fleet: its inventory name, SSH settings, validated configuration and the
    inventory groups it is in (``("all", "gpu_nodes")``; empty where it was made without an inventory)."""

    name: str
    ssh: SshSettings
    config: HostConfig
    groups: tuple[str, ...] = ()
