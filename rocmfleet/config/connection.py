"""pyinfra's SSH keys of a host's data that rocmfleet checks before any connection (:class:`ConnectionSettings`)."""

from __future__ import annotations

import difflib
import re
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
