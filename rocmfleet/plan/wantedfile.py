"""A file as an operation would leave it (pure data, no import of the project): the plan's rule
(:mod:`rocmfleet.plan.drift`) and the renderers (:mod:`rocmfleet.plan.hoststate`) share it, and
a module low in the plan (``rocmplan``) can compare through the rule without the import chain
growing (``docs/layout.md``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class WantedFile:
    """A regular file as an operation would leave it.

    Attributes:
        path: absolute path on the host.
        content: its bytes.
        mode: octal digits (``"644"``), or ``None`` when the operation leaves the mode alone.
        user, group: owner names, or ``None`` when the operation leaves them alone.
    """

    path: str
    content: bytes
    mode: str | None = None
    user: str | None = None
    group: str | None = None

    @property
    def sha256(self) -> str:
        """The SHA-256 of ``content``, hex (what the ``HostState`` read reports of a file)."""
        return hashlib.sha256(self.content).hexdigest()
