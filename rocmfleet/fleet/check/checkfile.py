"""The input file of one ``rocmfleet check`` pytest process: which hosts, their SSH settings and plans.

The parent writes it (:func:`check_input`, from :mod:`rocmfleet.fleet.check.compliance`); the check
process reads it (:func:`load`). This module imports nothing of the configuration, so the testinfra
backend (:mod:`rocmfleet.fleet.check.backend`) finds a host's SSH settings without the config layer.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any

from rocmfleet.config.connection import SshSettings
from rocmfleet.plan.model import HostPlan, to_dict

#: The environment variable naming the input file.
FILE_ENV = "ROCMFLEET_CHECK_FILE"
#: How a plan made without the host's facts says so (``HostPlan.topology_source`` starts with it):
#: the checks that need the placement or the read's facts are then errors, never passes.
UNREAD = "not read from the host"


class ExpectationError(RuntimeError):
    """The input file is missing, unreadable or not what :func:`check_input` writes."""


def check_input(hosts: Mapping[str, tuple[SshSettings, HostPlan]]) -> str:
    """The input file of one check process: ``{"hosts": {NAME: {"ssh": ..., "plan": ...}}}``, the
    hosts that process checks and only those, in inventory order (``plan``: ``to_dict`` of the host's
    plan; its secrets by name only).

    Args:
        hosts: inventory name -> (SSH settings, the host's plan).
    """
    return json.dumps(
        {"hosts": {name: {"ssh": ssh.to_dict(), "plan": to_dict(plan)} for name, (ssh, plan) in hosts.items()}}
    )


@functools.cache
def load() -> dict[str, Any] | None:
    path = os.environ.get(FILE_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError) as exc:
        raise ExpectationError(f"{FILE_ENV}={path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict):
        raise ExpectationError(f"{path}: not a rocmfleet check file (no hosts mapping)")
    hosts: dict[str, Any] = data["hosts"]
    return hosts


def host_name(host: Any) -> str:
    """The inventory name of ``host``: a testinfra ``Host`` (its backend's host name) or a name."""
    return host if isinstance(host, str) else host.backend.hostname


def host_names() -> list[str]:
    """The hosts of the input file, in its order (empty without one)."""
    return list(load() or {})


def entry(name: str) -> dict[str, Any] | None:
    hosts = load()
    if hosts is None:
        return None
    if name not in hosts:
        raise ExpectationError(f"{os.environ.get(FILE_ENV)}: no plan for host {name!r}")
    entry: dict[str, Any] = hosts[name]
    return entry


def ssh_settings(host: Any) -> SshSettings | None:
    """The SSH settings of ``host`` (a name or testinfra ``Host``); ``None`` without a file.

    Raises:
        ExpectationError: the file does not name this host.
    """
    found = entry(host_name(host))
    return SshSettings.from_dict(found["ssh"]) if found else None
