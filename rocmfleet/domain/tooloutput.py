"""What a parser of a tool's output raises when it cannot understand it (:class:`ToolOutputError`), and how the
output is quoted in that message (:func:`quoted`). Shared by the domain's parsers, the facts and the checks."""

from __future__ import annotations


class CannotCheck(RuntimeError):
    """A check could not be made: what it reads is empty, unreadable or in a format it does not know.

    ``rocmfleet check`` reports such a check as ``error``, never as passed (issue 16: a kernel
    log read without the right to read it printed ``-- No entries --`` and the check passed).
    """


class ToolOutputError(CannotCheck, ValueError):
    """A tool's output (or a file) that a parser does not understand: empty, truncated or of an
    unknown format. The message quotes what was read. A check raising it is an error, not a pass."""


def quoted(text: str, limit: int = 200) -> str:
    """``text`` for an error message: ``'empty output'`` or its first ``limit`` characters, repr'd."""
    return "empty output" if not text.strip() else repr(text[:limit])
