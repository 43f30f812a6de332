"""pyinfra's SSH keys of a host's data that rocmfleet checks before any connection (:class:`ConnectionSettings`)."""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
)

from rocmfleet.config.errors import Problem
from rocmfleet.config.sshkeys import pyinfra_ssh_keys


def address_problem(value: str) -> str | None:
    """Why ``value`` is not something SSH can connect to (a host name or an IP address), or None.

    Host names follow RFC 1123 (letters, digits, '-', dot-separated labels of at most 63);
    IPv6 addresses are checked by :mod:`ipaddress`.
    """
    import ipaddress

    if any(c.isspace() for c in value) or not value:
        return "must be a host name or IP address: it holds white space"
    try:
        ipaddress.ip_address(value.strip("[]"))
        return None
    except ValueError:
        pass
    label = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
    if len(value) > 253 or not re.fullmatch(rf"{label}(?:\.{label})*\.?", value):
        return "must be a host name (letters, digits, '-', '.') or an IP address"
    if value.rstrip(".").rsplit(".", 1)[-1].isdigit():  # RFC 3696 §2: a top-level label is never all digits
        return "is neither an IP address (four parts of 0-255, or IPv6) nor a host name (its last part is all digits)"
    return None


class ConnectionSettings(BaseModel):
    """pyinfra's SSH keys that rocmfleet checks early (pyinfra would only fail at connect time).

    An ``ssh_*`` key pyinfra's SSH connector does not know is refused (:meth:`unknown_keys`):
    pyinfra ignores it, so a misspelt ``ssh_config_file`` or ``ssh_known_hosts_file`` would
    silently connect some other way.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    ssh_port: int = Field(default=22, ge=1, le=65535, description="SSH port (an integer, not a string).")
    ssh_user: str | None = Field(default=None, description="SSH user (pyinfra's; default: the local user).")
    ssh_hostname: str | None = Field(default=None, description="Address to connect to (default: the host's name).")

    @field_validator("ssh_hostname")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        problem = None if value is None else address_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    ssh_key: str | None = Field(default=None, description="Private key file on the control machine (`~` expanded).")
    ssh_config_file: str | None = Field(
        default=None, description="OpenSSH client config to read instead of `~/.ssh/config` (an existing file)."
    )

    @field_validator("ssh_key")
    @classmethod
    def _key_file(cls, value: str | None) -> str | None:
        # pyinfra tries the path with ``~`` expanded, from the working directory
        # (pyinfra/connectors/ssh_util.py, _resolve_key_paths), and fails at connect time only.
        if value is not None and not Path(value).expanduser().is_file():
            resolved = str(Path(value).expanduser().absolute())
            raise ValueError("no such file on this machine" + (f" ({resolved})" if resolved != value else ""))
        return value

    @field_validator("ssh_config_file")
    @classmethod
    def _config_file(cls, value: str | None) -> str | None:
        # pyinfra reads the file only when ``Path(value).exists()``, without expanding ``~``, and
        # otherwise connects without it, silently (pyinfra/connectors/sshuserclient/client.py,
        # get_ssh_config): its ProxyJump and HostName would not apply.
        if value is not None and not Path(value).is_file():
            if value.startswith("~"):
                raise ValueError("no such file on this machine: pyinfra does not expand ~ here; give the full path")
            resolved = str(Path(value).absolute())
            raise ValueError("no such file on this machine" + (f" ({resolved})" if resolved != value else ""))
        return value

    ssh_strict_host_key_checking: Literal["yes", "no", "ask", "accept-new", "off"] | None = Field(
        default=None,
        description="OpenSSH's StrictHostKeyChecking, as pyinfra reads it; `rocmfleet check`/`bench` never ask.",
    )

    @staticmethod
    def unknown_keys(data: dict[str, Any]) -> list[Problem]:
        """One problem per ``ssh_*`` key of ``data`` that pyinfra does not know, with a "did you mean"."""
        known = pyinfra_ssh_keys()
        problems = []
        for key in sorted(k for k in data if k.startswith("ssh_") and k not in known):
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; pyinfra's are {', '.join(known)}"
            problems.append(Problem(key, "not an SSH key pyinfra knows (it would ignore it)" + hint))
        return problems


#: Seconds for the TCP connection, the SSH banner and authentication each (OpenSSH's
#: ``ConnectTimeout`` as ``rocmfleet check`` used it before).
CONNECT_TIMEOUT_S = 10.0
#: pyinfra's ``ssh_strict_host_key_checking`` values (OpenSSH's ``StrictHostKeyChecking``).
STRICT_VALUES = ("yes", "ask", "accept-new", "no", "off")
#: The :class:`SshSettings` fields that are pyinfra host data keys, and their keys.
_FIELD_KEYS = {
    "hostname": "ssh_hostname",
    "port": "ssh_port",
    "user": "ssh_user",
    "key": "ssh_key",
    "known_hosts_file": "ssh_known_hosts_file",
    "strict_host_key_checking": "ssh_strict_host_key_checking",
}


@dataclass(frozen=True)
class SshSettings:
    """How to reach one host and run commands there, from pyinfra's inventory data.

    Attributes:
        hostname: ``ssh_hostname``, default the inventory name; an ``~/.ssh/config`` ``Host``
            alias is looked up there by pyinfra (``HostName``, ``Port``, ``User``, ``ProxyJump``).
        port: ``ssh_port``; ``None`` leaves it to the SSH config's ``Port``, else 22.
        user: ``ssh_user``; ``None`` leaves it to the SSH config's ``User``, else the local user.
        key: ``ssh_key``; ``None``: the SSH config's ``IdentityFile``, the agent, ``~/.ssh/id_*``.
        known_hosts_file: ``ssh_known_hosts_file``; ``None``: ``UserKnownHostsFile``, else
            ``~/.ssh/known_hosts``.
        strict_host_key_checking: ``ssh_strict_host_key_checking`` (:data:`STRICT_VALUES` or
            ``None``: pyinfra's default, ``accept-new``).
        sudo: pyinfra's ``_sudo``: run every command through ``sudo -n``.
        sudo_user: pyinfra's ``_sudo_user`` (``None`` is root).
        connect_timeout_s: seconds for TCP, banner and authentication each.
        options: the host's other ``ssh_*`` keys pyinfra knows (``ssh_config_file``,
            ``ssh_connect_retries``, ``ssh_allow_agent``, ``ssh_paramiko_connect_kwargs``, ...), as
            the inventory gives them; handed to pyinfra unchanged.
    """

    hostname: str
    port: int | None = None
    user: str | None = None
    key: str | None = None
    known_hosts_file: str | None = None
    strict_host_key_checking: str | None = None
    sudo: bool = False
    sudo_user: str | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_host_data(cls, name: str, data: dict[str, Any]) -> SshSettings:
        """The settings of inventory host ``name`` from its merged pyinfra data (``host.data.dict()``).

        Raises:
            ValueError: ``ssh_strict_host_key_checking`` is not one of :data:`STRICT_VALUES`
                (``rocmfleet validate`` refuses it earlier, with the file it came from).
        """
        strict = data.get("ssh_strict_host_key_checking")
        if strict is not None and strict not in STRICT_VALUES:
            raise ValueError(f"ssh_strict_host_key_checking {strict!r}: expected one of {', '.join(STRICT_VALUES)}")
        fields = set(_FIELD_KEYS.values())
        return cls(
            hostname=str(data.get("ssh_hostname") or name),
            port=int(data["ssh_port"]) if data.get("ssh_port") else None,
            user=data.get("ssh_user") or None,
            key=data.get("ssh_key") or None,
            known_hosts_file=data.get("ssh_known_hosts_file") or None,
            strict_host_key_checking=strict,
            sudo=bool(data.get("_sudo")),
            sudo_user=data.get("_sudo_user") or None,
            options={k: data[k] for k in pyinfra_ssh_keys() if k in data and k not in fields and data[k] is not None},
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields: key files are file names, never key material (``ssh_password`` and
        ``ssh_key_password`` are in ``options`` only when the inventory sets them)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SshSettings:
        """The inverse of :meth:`to_dict`."""
        return cls(**data)

    @property
    def where(self) -> str:
        """``user@address:port`` (without the user or port the inventory does not set), for messages."""
        return f"{self.user + '@' if self.user else ''}{self.hostname}{f':{self.port}' if self.port else ''}"

    def connector_data(self) -> dict[str, Any]:
        """The pyinfra host data pyinfra's SSH connector reads for this host (only keys that are set).

        ``ask`` becomes ``yes`` (nobody can answer a fleet command); paramiko's banner and
        authentication timeouts are :attr:`connect_timeout_s` unless ``ssh_paramiko_connect_kwargs``
        says otherwise.
        """
        data = dict(self.options)
        for attribute, key in _FIELD_KEYS.items():
            value = getattr(self, attribute)
            if value is not None:
                data[key] = value
        if data.get("ssh_strict_host_key_checking") == "ask":
            data["ssh_strict_host_key_checking"] = "yes"
        timeouts = {"banner_timeout": self.connect_timeout_s, "auth_timeout": self.connect_timeout_s}
        data["ssh_paramiko_connect_kwargs"] = {**timeouts, **(self.options.get("ssh_paramiko_connect_kwargs") or {})}
        return data
