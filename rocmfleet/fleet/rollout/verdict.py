"""A host's gate outcome: pass, fail or inconclusive (issue 26's verdicts).

Apart from :mod:`rocmfleet.fleet.rollout.gate` (which judges the smoke benchmark, and so imports the
benchmark's modules) so that the soak's verdicts (:mod:`rocmfleet.fleet.rollout.soak`) need only this.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class GateOutcome(BaseModel):
    """A host's gate: ``passed``, else which gate failed (``readiness``, ``check``, ``benchmark``)
    and its reasons with their numbers; ``inconclusive`` when the gate could not judge the image
    (:attr:`verdict`)."""

    passed: bool
    gate: str | None = None
    reasons: list[str] = Field(default_factory=list)
    #: The step could not run (the registry, SSH, a hook, the benchmark client): not the image's
    #: fault, so retried and then paused, never rolled back (rocmfleet.fleet.rollout.runner).
    inconclusive: bool = False
    #: The benchmark gate failed on regressions alone (every request answered): a run that is
    #: slower than the host's baseline, which a second run confirms or not (:func:`gate_decision`).
    regression_only: bool = False

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` or ``inconclusive``."""
        return "pass" if self.passed else "inconclusive" if self.inconclusive else "fail"
