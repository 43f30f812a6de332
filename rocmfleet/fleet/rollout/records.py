"""Records a rollout's state file holds beside its hosts' steps: an image as the rollout pins it
(:class:`ImageRef`), one benchmark case's numbers before and after a switch (:class:`CaseNumbers`),
the soak asked for (:class:`SoakPlan`) and one soak's outcome (:class:`SoakResult`). Pure data;
:mod:`rocmfleet.fleet.rollout.state` re-exports them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rocmfleet.fleet.metrics.figures import Figures

_DIGEST = re.compile(r"^(?P<repository>[^@]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?@(?P<digest>sha256:[0-9a-f]{64})$")


class ImageRef(BaseModel):
    """An image as a rollout pins it: repository, tag and manifest digest."""

    repository: str
    tag: str
    digest: str

    @property
    def reference(self) -> str:
        """``repository:tag@digest``, as the units run it."""
        return f"{self.repository}:{self.tag}@{self.digest}"

    def data(self) -> dict[str, str]:
        """The ``--data`` overrides that make a deploy run this image."""
        return {"vllm_image_repository": self.repository, "vllm_image_tag": self.tag, "vllm_image_digest": self.digest}

    @classmethod
    def parse(cls, reference: str) -> ImageRef | None:
        """``repo:tag@sha256:...`` (what ``docker inspect`` shows as ``Config.Image`` for our units),
        or ``None`` when the reference has no digest or no tag."""
        match = _DIGEST.match(reference.strip())
        if not match or not match["tag"]:
            return None
        return cls(repository=match["repository"], tag=match["tag"], digest=match["digest"])


class CaseNumbers(BaseModel):
    """One benchmark case before and after a switch, for the report (metric key -> value)."""

    before: dict[str, float] = Field(default_factory=dict)
    after: dict[str, float] = Field(default_factory=dict)
    #: The benchmark client of each run and its sampling (``ClientInfo.describe``), ``None``: no run.
    client_before: str | None = None
    client_after: str | None = None
    #: Why the two runs were not compared, or what to know about comparing them (``judge``'s notes).
    notes: list[str] = Field(default_factory=list)


class SoakPlan(BaseModel):
    """``rollout --soak DURATION [--soak-batches]``: how long the soaked hosts stay in service
    before they are judged, and whether every batch is soaked or only the canary."""

    model_config = ConfigDict(extra="forbid")

    duration_s: int = Field(ge=1)
    every_batch: bool = False


class SoakResult(BaseModel):
    """One soak's outcome (:mod:`rocmfleet.fleet.rollout.soak`), for the report and ``status --json``.

    Attributes:
        verdict: ``pass``, ``fail`` or ``inconclusive`` (the gate verdicts of the runner).
        reasons: why it failed or could not judge, with the numbers (empty for a pass).
        hosts: the soaked hosts (new image); compared: the hosts not yet switched (old image),
            empty when none was left (judged on the error rate alone).
        soaked, others: the figures of each side over the window (``others`` ``None``: none left).
        started, ended: the window (ISO 8601, UTC); window_s: its length in seconds.
        source: ``direct`` (the instances' ``/metrics``, read at the start and the end) or the
            Prometheus URL.
        thresholds: the profile's ``soak`` thresholds applied.
        notes: what else to know (latency not compared, instances left out).
    """

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["pass", "fail", "inconclusive"]
    reasons: list[str] = Field(default_factory=list)
    hosts: list[str]
    compared: list[str] = Field(default_factory=list)
    soaked: Figures
    others: Figures | None = None
    started: str
    ended: str
    window_s: float
    source: str
    thresholds: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
