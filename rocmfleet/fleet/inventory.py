"""The hosts of an inventory, with their validated configuration and SSH settings.

Fleet commands (``rocmfleet check``, ``rocmfleet bench``) read the same pyinfra inventory and
group data as the deploy, so there is no second inventory to keep: :func:`load_fleet` validates
it exactly as ``rocmfleet validate`` does, once per run, and returns one
:class:`rocmfleet.fleet.target.Target` per host, carrying its
:class:`rocmfleet.config.connection.SshSettings`: its ``ssh_*`` data, every key pyinfra's SSH
connector knows, and ``_sudo``/``_sudo_user``; what the data leaves unset is left to pyinfra and
the SSH config (``~/.ssh/config`` or ``ssh_config_file``), as in the deploy.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from pyinfra.api.host import Host

from rocmfleet.config.connection import SshSettings
from rocmfleet.config.settings import HostConfig
from rocmfleet.config.validate import InventoryError, report, validate_inventory
from rocmfleet.fleet.target import Target


class FleetError(ValueError):
    """The fleet cannot be loaded: invalid inventory or group data, or a ``--limit`` matching no host."""


def _matches(name: str, groups: list[str], patterns: list[str]) -> bool:
    """Whether host ``name`` (in ``groups``) matches a name, glob or group of ``patterns``; ``all`` is
    every host, as in pyinfra's inventory and Ansible's patterns."""
    return any(fnmatch.fnmatch(name, p) or p in groups or p == "all" for p in patterns)


def load_fleet(
    inventory: str,
    limit: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    option: str = "--limit",
    exclude: list[str] | None = None,
) -> list[Target[HostConfig]]:
    """Validate ``inventory`` and return its hosts, optionally limited (pyinfra's ``--limit`` rules).

    Args:
        inventory: path of a pyinfra inventory file, e.g. ``inventories/prod.py``.
        limit: host names, glob patterns (``gpu-*``) or group names; ``None`` for every host.
        overrides: data that wins over the inventory's and group data, as pyinfra's ``--data``.
        option: the command-line option ``limit`` came from, named when it matches no host.
        exclude: host names, globs or groups left out after ``limit`` (``--exclude``, as Ansible's
            ``--limit '!pattern'`` and pyinfra's inventory filters do).

    Raises:
        FleetError: the inventory cannot be loaded or is invalid (the message is the same report
            ``rocmfleet validate`` prints), an item of ``limit`` or ``exclude`` matches no host
            (a typo beside a good name would silently widen or narrow the run), or nothing is left.
    """
    try:
        configs, problems, hosts = validate_inventory(inventory, with_hosts=True, overrides=overrides)
    except InventoryError as exc:
        raise FleetError(str(exc)) from None
    if problems:
        raise FleetError(report(problems))
    chosen = select_hosts(hosts, inventory, limit, option, exclude)
    return [
        Target(h.name, SshSettings.from_host_data(h.name, h.data.dict()), configs[h.name], tuple(h.groups))
        for h in chosen
    ]


#: A host as ``rocmfleet plan`` takes it: ``(name, validated configuration, inventory groups)``.
PlannedHost = tuple[str, HostConfig, tuple[str, ...]]


def load_configs(
    inventory: str, limit: list[str] | None = None, exclude: list[str] | None = None
) -> tuple[list[PlannedHost], int]:
    """The validated configuration and groups of the hosts ``limit`` and ``exclude`` leave (as
    :func:`load_fleet`), in inventory order, and how many hosts the inventory has: what
    ``rocmfleet plan`` plans (nothing connects, so no SSH settings).

    Raises:
        FleetError: as :func:`load_fleet` (the inventory cannot be loaded or is invalid, a pattern
            matches no host, or nothing is left).
    """
    try:
        configs, problems, hosts = validate_inventory(inventory, with_hosts=True)
    except InventoryError as exc:
        raise FleetError(str(exc)) from None
    if problems:
        raise FleetError(report(problems))
    chosen = select_hosts(hosts, inventory, limit, "--limit", exclude)
    return [(h.name, configs[h.name], tuple(h.groups)) for h in chosen], len(hosts)


def select_hosts(
    hosts: list[Host],
    inventory: str,
    limit: list[str] | None,
    option: str = "--limit",
    exclude: list[str] | None = None,
) -> list[Host]:
    """The hosts of ``hosts`` (pyinfra's, in inventory order) that ``limit`` and ``exclude`` leave
    (names, globs or groups; pyinfra's ``--limit`` rules; ``None``: every host).

    Raises:
        FleetError: an item of ``limit`` or ``exclude`` matches no host (a typo beside a good name
            would silently widen or narrow the run), or nothing is left.
    """
    chosen = [h for h in hosts if not limit or _matches(h.name, list(h.groups), limit)]
    if not chosen:
        raise FleetError(f"{option} {','.join(limit or [])} matches no host of {inventory}")
    unmatched = [p for p in limit or [] if not any(_matches(h.name, list(h.groups), [p]) for h in hosts)]
    if unmatched:  # a typo beside a good name would drop a host silently
        raise FleetError(
            f"{option} {', '.join(unmatched)}: matches no host, group or glob of {inventory} "
            f"(the rest of {option} matches {', '.join(h.name for h in chosen)}); fix or drop it"
        )
    if exclude:
        unknown = [p for p in exclude if not any(_matches(h.name, list(h.groups), [p]) for h in hosts)]
        if unknown:
            raise FleetError(f"--exclude {', '.join(unknown)}: matches no host, group or glob of {inventory}")
        chosen = [h for h in chosen if not _matches(h.name, list(h.groups), exclude)]
        if not chosen:
            raise FleetError(f"--exclude {','.join(exclude)} leaves no host of {inventory}")
    return chosen


def load_targets(
    inventory: str,
    limit: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    exclude: list[str] | None = None,
) -> dict[str, Target[HostConfig]]:
    """:func:`load_fleet`'s hosts by name, in inventory order (what ``rocmfleet rollout``, ``restart``
    and ``status`` work on).

    Raises:
        FleetError: as :func:`load_fleet` (a ``ValueError``: the commands exit 2 with its message).
    """
    return {t.name: t for t in load_fleet(inventory, limit, overrides, exclude=exclude)}
