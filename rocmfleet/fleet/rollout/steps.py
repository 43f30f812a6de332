"""What the rollout's runner asks of one host (:class:`Steps`: pull, drain, switch, check, benchmark, undrain,
rollback), how a step fails (:class:`StepError`, inconclusive or not) and how often it is retried."""

from __future__ import annotations

from typing import Protocol

from rocmfleet.fleet.bench.bench import BenchResult, Thresholds
from rocmfleet.fleet.rollout.state import ImageRef

#: Retries of an inconclusive step before the rollout pauses (``rocmfleet rollout --retries``).
RETRIES = 2
#: Seconds before the first retry; each further retry waits twice as long (10, 20, ...).
BACKOFF_S = 10.0
#: Exit status of a paused rollout or restart (1 is a failure, 2 nothing started).
PAUSED_EXIT = 3


class StepError(RuntimeError):
    """A step failed on a host; ``gate`` names it (``pull``, ``drain``, ``switch``, ``readiness``,
    ``check``, ``benchmark``, ``undrain``, ``rollback``) and the message says why, with numbers.
    ``inconclusive``: the failure cannot be the image's (the registry, SSH, a hook, the
    benchmark client): retried, then paused, never rolled back."""

    def __init__(self, gate: str, message: str, inconclusive: bool = False) -> None:
        super().__init__(message)
        self.gate = gate
        self.inconclusive = inconclusive


def step_failure(exc: Exception) -> str:
    """One line for a step that raised: a :class:`StepError`'s message, or any other exception's
    type and message (a step's failure belongs to its host: reported, never raised out)."""
    return str(exc) if isinstance(exc, StepError) else f"{type(exc).__name__}: {exc}"


class Steps(Protocol):
    """What the runner does on one host; each raises :class:`StepError` when it fails."""

    def pull(self, host: str, image: ImageRef) -> None: ...
    def drain(self, host: str) -> None: ...
    def undrain(self, host: str) -> None: ...
    def bench(self, host: str, label: str) -> tuple[dict[str, BenchResult], list[str]]: ...
    def switch(self, host: str, image: ImageRef | None) -> dict[str, float]: ...
    def check(self, host: str) -> list[str]: ...
    def rollback(self, host: str, image: ImageRef) -> None: ...
    def thresholds(self, host: str) -> Thresholds: ...
