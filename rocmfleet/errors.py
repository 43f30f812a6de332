"""Configuration errors shared by every settings model."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Problem:
    """One thing wrong with one key: where it came from, for which hosts, and what is allowed."""

    key: str
    message: str
    value: str = ""
    file: str = ""
    hosts: list[str] = field(default_factory=list)

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
