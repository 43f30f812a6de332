"""One vLLM instance as ``vllm-status.sh`` reports it (:class:`InstanceStatus`: unit state, image, readiness,
uptime, drift), parsed (:func:`parse_status`), and the one image a host's instances run (:func:`running_image`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rocmfleet.fleet.rollout.records import ImageRef


@dataclass(frozen=True)
class InstanceStatus:
    """One vLLM instance now: its unit's state, image, readiness (``not_ready``: why not, one line)
    and uptime, and its drift: why the deploy would change it
    (``rocmfleet.plan.hostdrift.instance_drift``; empty: as wanted, ``None``: not read), and its
    host's: ``roles``, ``(role, reasons)`` per role of the deploy (``rocmfleet.plan.hostdrift``;
    ``None``: not read), and ``problem``, what the host's plan says it cannot do (``""``: none)."""

    host: str
    instance: str
    active: str
    sub: str
    image: str | None
    ready: bool | None = None
    uptime_s: float | None = None
    error: str | None = None
    drift: tuple[str, ...] | None = None
    not_ready: str | None = None
    roles: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    problem: str = ""

    def row(self) -> dict[str, object]:
        """JSON-ready fields."""
        return {
            "host": self.host,
            "instance": self.instance,
            "unit": f"{self.active}/{self.sub}",
            "image": self.image,
            "ready": self.ready,
            "not_ready": self.not_ready,
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s),
            "error": self.error,
            "drift": None if self.drift is None else list(self.drift),
        }


def _epoch(rfc3339: str) -> float | None:
    """Docker's ``State.StartedAt`` (``2026-01-02T03:04:05.123456789Z``) as seconds since the epoch."""
    text = rfc3339.strip()
    if not text or text == "-" or text.startswith("0001-"):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return base + (float("0." + frac[:6]) if frac.isdigit() else 0.0)


def parse_status(host: str, stdout: str) -> tuple[float | None, list[InstanceStatus], dict[str, float | None]]:
    """Parse ``vllm-status.sh``: the host's clock, the instances, and each container's start (epoch s)."""
    now: float | None = None
    instances: list[InstanceStatus] = []
    started: dict[str, float | None] = {}
    for line in stdout.splitlines():
        if line.startswith("now "):
            try:
                now = float(line.split()[1])
            except (IndexError, ValueError):
                now = None
            continue
        parts = line.split("\t")
        if len(parts) not in (5, 6):
            continue
        name, active, sub, image, start = parts[:5]
        started[name] = start_s = _epoch(start)
        uptime = None if now is None or start_s is None or active != "active" else now - start_s
        error = parts[5] if len(parts) == 6 else None  # the watchdog gave up on it: why
        instances.append(InstanceStatus(host, name, active, sub, None if image == "-" else image, None, uptime, error))
    return now, instances, started


def running_image(instances: Sequence[InstanceStatus]) -> tuple[ImageRef | None, str | None]:
    """The one image a host's instances run, or ``(None, why)`` when they run none or several."""
    refs = {i.image for i in instances}
    if not instances or refs == {None}:
        return None, "no vLLM container runs"
    if len(refs) > 1:
        return None, "its instances run different images: " + ", ".join(sorted(str(r) for r in refs))
    (ref,) = refs
    image = ImageRef.parse(str(ref))
    return (image, None) if image else (None, f"its containers run {ref}, not pinned as repository:tag@digest")
