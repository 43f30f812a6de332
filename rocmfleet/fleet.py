"""The hosts of an inventory, with their validated configuration and SSH settings.

Fleet commands (``rocmfleet check``, ``rocmfleet bench``) read the same pyinfra inventory and
group data as the deploy, so there is no second inventory to keep: :func:`load_fleet` validates
it exactly as ``rocmfleet validate`` does and returns one :class:`Target` per host, carrying
pyinfra's ``ssh_*`` connection keys (pyinfra's names and defaults: ``ssh_hostname`` falls back
to the host name, ``ssh_port`` to 22, ``ssh_user`` to the local user).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from rocmfleet.settings import HostConfig
from rocmfleet.validate import InventoryError, report, validate_inventory


class FleetError(ValueError):
    """The fleet cannot be loaded: invalid inventory or group data, or a ``--limit`` matching no host."""


@dataclass(frozen=True)
class Target:
    """One host of the fleet: its name, SSH settings (pyinfra's ``ssh_*`` data) and configuration."""

    name: str
    hostname: str
    config: HostConfig
    user: str | None = None
    port: int = 22
    key: str | None = None
    known_hosts: str | None = None
    strict_host_key_checking: str | None = None

    def ssh_options(self) -> list[str]:
        """``ssh -o`` options (OpenSSH spelling) for this host, e.g. ``["-o", "Port=22", ...]``.

        ``BatchMode`` is always on: a fleet command never stops to ask for a password.
        """
        options = {"BatchMode": "yes", "Port": str(self.port), "ConnectTimeout": "10"}
        if self.user:
            options["User"] = self.user
        if self.key:
            options["IdentityFile"] = self.key
            options["IdentitiesOnly"] = "yes"
        if self.known_hosts:
            options["UserKnownHostsFile"] = self.known_hosts
        if self.strict_host_key_checking:
            options["StrictHostKeyChecking"] = self.strict_host_key_checking
        return [word for name, value in options.items() for word in ("-o", f"{name}={value}")]

    def ssh_config(self) -> str:
        """An ``ssh_config(5)`` block for this host, matched by its address (for testinfra's ``--ssh-config``)."""
        lines = [f"Host {self.hostname}"]
        options = self.ssh_options()
        lines += [f"  {options[i + 1].replace('=', ' ', 1)}" for i in range(0, len(options), 2)]
        return "\n".join(lines) + "\n"


def _matches(name: str, groups: list[str], patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) or p in groups for p in patterns)


def load_fleet(inventory: str, limit: list[str] | None = None, overrides: dict | None = None) -> list[Target]:
    """Validate ``inventory`` and return its hosts, optionally limited (pyinfra's ``--limit`` rules).

    Args:
        inventory: path of a pyinfra inventory file, e.g. ``inventories/prod.py``.
        limit: host names, glob patterns (``gpu-*``) or group names; ``None`` for every host.
        overrides: data that wins over the inventory's and group data, as pyinfra's ``--data``.

    Raises:
        FleetError: the inventory cannot be loaded or is invalid (the message is the same report
            ``rocmfleet validate`` prints), or ``limit`` matches no host.
    """
    try:
        configs, problems, hosts = validate_inventory(inventory, with_hosts=True, overrides=overrides)
    except InventoryError as exc:
        raise FleetError(str(exc)) from None
    if problems:
        raise FleetError(report(problems))
    targets = []
    for host in hosts:
        if limit and not _matches(host.name, list(host.groups), limit):
            continue
        data = host.data.dict()
        targets.append(
            Target(
                name=host.name,
                hostname=str(data.get("ssh_hostname") or host.name),
                config=configs[host.name],
                user=data.get("ssh_user"),
                port=int(data.get("ssh_port") or 22),
                key=data.get("ssh_key"),
                known_hosts=data.get("ssh_known_hosts_file"),
                strict_host_key_checking=data.get("ssh_strict_host_key_checking"),
            )
        )
    if not targets:
        raise FleetError(f"--limit {','.join(limit or [])} matches no host of {inventory}")
    return targets
