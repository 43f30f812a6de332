"""What the checks expect of the host under check: its configuration from the inventory.

``rocmfleet check`` runs the suite once per host with ``ROCMFLEET_CHECK_INVENTORY`` (the pyinfra
inventory file), ``ROCMFLEET_CHECK_HOST`` (the host's inventory name) and, optionally,
``ROCMFLEET_CHECK_DATA`` (a JSON object of overrides, as pyinfra's ``--data``). The host's
data is validated exactly as the deploy validates it, so checks and deploy cannot disagree on
what a host should be. Without ``ROCMFLEET_CHECK_INVENTORY`` (testinfra run by hand) the checks
expect a default deploy: AMD's defaults for the ROCm and tuning keys, and no vLLM instances.
"""

from __future__ import annotations

import functools
import json
import os

from rocmfleet.rocm import RocmSettings
from rocmfleet.settings import HostConfig
from rocmfleet.tuning import TuningSettings

INVENTORY_ENV = "ROCMFLEET_CHECK_INVENTORY"
HOST_ENV = "ROCMFLEET_CHECK_HOST"
DATA_ENV = "ROCMFLEET_CHECK_DATA"


class ExpectationError(RuntimeError):
    """The inventory named in the environment does not give a valid configuration for the host."""


def overrides() -> dict:
    """``ROCMFLEET_CHECK_DATA`` as a dict (pyinfra ``--data`` style overrides); empty when unset."""
    return json.loads(os.environ.get(DATA_ENV) or "{}")


@functools.cache
def host_config() -> HostConfig | None:
    """The validated configuration of the host under check; ``None`` without an inventory.

    Raises:
        ExpectationError: the inventory is invalid or does not contain ``ROCMFLEET_CHECK_HOST``.
    """
    inventory = os.environ.get(INVENTORY_ENV)
    if not inventory:
        return None
    from rocmfleet.fleet import FleetError, load_fleet

    name = os.environ.get(HOST_ENV, "")
    try:
        targets = load_fleet(inventory, [name], overrides())
    except FleetError as exc:
        raise ExpectationError(str(exc)) from None
    return next(t.config for t in targets if t.name == name)


def rocm_settings() -> RocmSettings:
    """The host's ``rocm_*`` settings (AMD's defaults without an inventory)."""
    config = host_config()
    return config.rocm if config else RocmSettings()


def tuning_settings() -> TuningSettings:
    """The host's ``tuning_*`` settings (AMD's defaults without an inventory)."""
    config = host_config()
    return config.tuning if config else TuningSettings()


def in_container(host) -> bool:
    """True on a container host: it shares another machine's kernel, CPUs and boot."""
    return host.run("systemd-detect-virt --container").rc == 0
