"""Configuration errors shared by every settings model."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: A URL's ``user:password@`` (``https://user:token@mirror``): never shown in an error.
_USERINFO = re.compile(r"(://)[^/@\s'\"]*@")


@dataclass
class Problem:
    """One thing wrong with one key: where it came from, for which hosts, and what is allowed."""

    key: str
    message: str
    value: str = ""
    file: str = ""
    hosts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.value = _USERINFO.sub(r"\1*MASKED*@", self.value)  # credentials in a URL, whatever the key

    def __str__(self) -> str:
        got = f" (got {self.value})" if self.value else ""
        where = f"{self.file}: " if self.file else ""
        hosts = f" [hosts: {', '.join(self.hosts)}]" if self.hosts else ""
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}{got}{hosts}"


class ConfigError(ValueError):
    """Host data that cannot be deployed; ``problems`` holds every :class:`Problem` at once.

    Built from a list of problems, or from a message (one problem keyed ``(config)``).
    """

    def __init__(self, problems: list[Problem] | str) -> None:
        if isinstance(problems, str):
            self.problems = [Problem("(config)", problems)]
            super().__init__(problems)
            return
        self.problems = problems
        super().__init__("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))


def shown(value: object) -> str:
    """A value from a YAML file as YAML writes it, for "(got ...)": ``true``, ``null``, ``.inf``,
    ``2026-12-04`` (a date YAML read from an unquoted ``2026-12-04``), ``'text'``, ``[1, 'a']``.

    Python's ``repr`` would print ``True``, ``None``, ``inf`` and ``datetime.date(2026, 12, 4)``,
    which are not what the operator wrote.
    """
    import datetime
    import math

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        text = getattr(value, "text", "")  # rocmfleet.config.yamlfile.WrittenFloat: as written
        if text and text.lstrip("+-").lower() not in (".inf", ".nan"):
            meant = ".nan" if math.isnan(value) else "infinity" if value > 0 else "minus infinity"
            return f"{text} (YAML reads it as {meant})"
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, datetime.date):
        return f"{value.isoformat()} (YAML reads an unquoted date as a date; quote it for text)"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return repr(str(value)) if isinstance(value, str) else f"a {type(value).__name__}"
