"""The soak of ``rocmfleet rollout --soak``: its duration and a profile's ``soak:`` thresholds. Pure.

A soak keeps the canary (or, with ``--soak-batches``, each batch) in service on the new image
for a while, then compares its live figures (error rate, TTFT and TPOT percentiles) with the
hosts not yet switched over the same window (:mod:`rocmfleet.fleet.rollout.soak`). This module
holds what the operator gives: :func:`parse_duration` for ``--soak`` and :class:`SoakThresholds`,
the ``soak:`` block of a profile (:mod:`rocmfleet.config.profiles`).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Shortest soak, seconds: below it a Prometheus scraping every 15 s (its documented default
#: ``scrape_interval`` is 1 m; 15 s is the example configuration's) has at most one point in the window.
MIN_SOAK_S = 10
#: Longest soak, seconds (24 h): the rollout holds every other batch meanwhile; a longer watch
#: is a monitoring job, not a rollout step.
MAX_SOAK_S = 24 * 3600

#: Largest ``soak.error_rate_margin``: 0.5 already passes a canary that fails every other request
#: while the old image fails none; a larger margin (up to 1, any error rate) would judge nothing.
MAX_ERROR_RATE_MARGIN = 0.5

_PART = re.compile(r"(\d+)([hms])")
_UNIT_S = {"h": 3600, "m": 60, "s": 1}


class DurationError(ValueError):
    """A ``--soak`` value that is not a duration in range; the message names it and what is allowed."""


def parse_duration(text: str, option: str = "--soak") -> int:
    """``--soak``'s value in seconds: ``90s``, ``5m``, ``1h``, ``1h30m``, or plain seconds (``90``).

    Args:
        text: what the operator gave.
        option: the option's name, for the message ("": the value alone, as argparse names the option).

    Returns:
        Whole seconds, from :data:`MIN_SOAK_S` to :data:`MAX_SOAK_S`.

    Raises:
        DurationError: not a duration (units ``h``, ``m``, ``s``, each at most once, in that
            order), or out of range.
    """
    value = text.strip().lower()
    given = f"{option} {text!r}" if option else repr(text)
    allowed = f"a duration like 90s, 5m, 1h or 1h30m, from {MIN_SOAK_S}s to {MAX_SOAK_S // 3600}h"
    if value.isdigit():
        seconds = int(value)
    else:
        parts = _PART.findall(value)
        units = [unit for _n, unit in parts]
        if not parts or "".join(n + u for n, u in parts) != value or units != sorted(set(units), key="hms".index):
            raise DurationError(f"{given}: expected {allowed}")
        seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
    if not MIN_SOAK_S <= seconds <= MAX_SOAK_S:
        raise DurationError(f"{given}: {seconds} s is out of range; expected {allowed}")
    return seconds


def format_duration(seconds: float) -> str:
    """``300`` -> ``5m``, ``90`` -> ``1m30s``, ``3600`` -> ``1h`` (what :func:`parse_duration` reads)."""
    left = round(seconds)
    out = ""
    for unit, size in _UNIT_S.items():
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"


class SoakThresholds(BaseModel):
    """A profile's ``soak:`` block: how ``rollout --soak`` judges the soaked hosts against the
    hosts not yet switched. The defaults suit a fleet with steady production traffic."""

    model_config = ConfigDict(extra="forbid", strict=True)

    error_rate_margin: float = Field(
        default=0.01,
        ge=0,
        description="most the soaked hosts' error rate (HTTP 5xx of POST requests on the inference handlers) may "
        "exceed the hosts not yet switched, as a fraction, 0 to 0.5: 0.01 allows +1 point (0.5% -> 1.5%); with no "
        "host left on the old image, the most the error rate may be",
    )
    latency_ratio: float = Field(
        default=1.5,
        ge=1,
        le=100,
        description="most the soaked hosts' TTFT and TPOT p50/p99 may be, as a multiple of the hosts not yet switched",
    )
    latency_floor_ms: float = Field(
        default=10.0,
        ge=0,
        le=60_000,
        description="an increase of at most this many milliseconds never fails, whatever latency_ratio says "
        "(histogram buckets and microsecond noise)",
    )
    min_requests: int = Field(
        default=20,
        ge=1,
        le=10_000_000,
        description="fewest requests (POST on an inference handler) each side must serve in the window to be "
        "judged; fewer is inconclusive (retried, then paused; never rolled back)",
    )

    @field_validator("error_rate_margin")
    @classmethod
    def _margin_judges_something(cls, value: float) -> float:
        """At most :data:`MAX_ERROR_RATE_MARGIN`: at 1 any error rate passes."""
        if value > MAX_ERROR_RATE_MARGIN:
            raise ValueError(
                f"at most {MAX_ERROR_RATE_MARGIN}: it is the points of error rate the soaked hosts may have above the "
                "hosts not yet switched, as a fraction (0.01 = 1 point); at 1 any error rate would pass"
            )
        return value
