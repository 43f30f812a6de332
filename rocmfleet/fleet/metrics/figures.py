"""One side of a soak's comparison over its window, as figures (pure data), and how they are said.

Kept apart from :mod:`rocmfleet.fleet.metrics.window` (which reads and differences pages) so that
the rollout's state and report hold figures without importing the page parser.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, computed_field


class Figures(BaseModel):
    """One side of a soak over its window: what the report shows and the verdict reads.

    Attributes:
        hosts: the hosts of the side.
        instances: instances whose window counted (``host/instance``, or ``host`` from Prometheus).
        left_out: instances not counted, and why (unreadable, restarted in the window).
        requests, errors: ``/v1/`` requests and HTTP 5xx among them over the window.
        latency_s: :data:`LATENCIES` keys -> seconds; a key is absent when its histogram had no
            observation (or, for TPOT, no histogram both sides have).
        tpot_metric: the TPOT histogram used.
    """

    hosts: list[str] = Field(default_factory=list)
    instances: list[str] = Field(default_factory=list)
    left_out: list[str] = Field(default_factory=list)
    requests: float = 0.0
    errors: float = 0.0
    latency_s: dict[str, float] = Field(default_factory=dict)
    tpot_metric: str | None = None

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented use on a property
    @property
    def error_rate(self) -> float | None:
        """Errors per request (``None`` with no request)."""
        return self.errors / self.requests if self.requests > 0 else None


def count(value: float) -> str:
    """A count: whole when it is (Prometheus's ``increase`` extrapolates: ``159.7``)."""
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def rate(side: Figures, unit: str = "") -> str:
    """``31.2% (50 of 160)``: a side's error rate and its counts (``unit`` after the count)."""
    return f"{(side.error_rate or 0.0):.1%} ({count(side.errors)} of {count(side.requests)}{unit})"
