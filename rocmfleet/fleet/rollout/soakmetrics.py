"""The soak on real hosts (:class:`MetricsSoak`): wait, read both sides' figures over the window, judge them.

Two sources (:mod:`rocmfleet.fleet.rollout.soak` says what is compared and how it is judged):

* **direct** (default): each instance's ``/metrics`` at the window's start and at its end,
  ``metrics-read.sh`` over the rollout's SSH to each host (one command per host per read, every
  host of both sides at once), differenced per series
  (:func:`rocmfleet.fleet.metrics.window.difference`); an instance that restarted in the window,
  or could not be read, is left out and named;
* **Prometheus** (``metrics_prometheus_url``): after the window, ``increase(...[<window>s])``
  at its end, by the ``host`` label (:mod:`rocmfleet.fleet.metrics.promapi`); an unreachable
  server, or no series, is inconclusive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from rocmfleet.config.settings import HostConfig
from rocmfleet.fleet.connect import Result
from rocmfleet.fleet.metrics import promapi, read
from rocmfleet.fleet.metrics.window import Counts, SeriesKey, difference, figures, snapshot, tpot_metric
from rocmfleet.fleet.rollout.fleetimage import CommandError
from rocmfleet.fleet.rollout.soak import DIRECT, OTHERS, SOAKED, judge
from rocmfleet.fleet.rollout.state import SoakResult
from rocmfleet.fleet.rollout.steps import step_failure
from rocmfleet.fleet.rollout.verdict import GateOutcome
from rocmfleet.fleet.target import Target, parallel

#: Seconds one host's ``metrics-read.sh`` may take (each port's curl has 10 s: ``-m 10``).
READ_TIMEOUT_S = 120

#: An instance's read (``host/instance`` ->): its series, or why it could not be read.
Read = dict[str, dict[SeriesKey, float] | str]


class HostRunner(Protocol):
    """What :class:`MetricsSoak` needs of :class:`~rocmfleet.fleet.rollout.hoststeps.HostSteps`."""

    @property
    def targets(self) -> dict[str, Target[HostConfig]]: ...

    def run(self, host: str, command: str, timeout_s: float, gate: str) -> Result: ...


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _owner(key: str) -> str:
    """The host of a counted key: ``host/instance`` (direct) or ``host`` (Prometheus)."""
    return key.split("/", 1)[0]


class MetricsSoak:
    """:data:`rocmfleet.fleet.rollout.soak.SoakStep` on real hosts.

    Args:
        steps: the rollout's host steps (their targets, and ``run`` over SSH).
        prometheus_url: ``metrics_prometheus_url``: read the window from that Prometheus;
            ``None``: read each instance's ``/metrics`` at the start and the end.
        sleep, clock: how to wait and what time it is (seconds since the epoch); tests pass stand-ins.
    """

    def __init__(
        self,
        steps: HostRunner,
        prometheus_url: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.steps, self.prometheus_url, self.sleep, self.clock = steps, prometheus_url, sleep, clock

    def _read(self, host: str) -> Read:
        """Each instance of ``host`` (``host/name``): its series now, or why not."""
        names = {i.port: f"{host}/{i.name}" for i in self.steps.targets[host].config.instances()}
        try:
            result = self.steps.run(host, read.command(list(names)), READ_TIMEOUT_S, "soak")
        except Exception as exc:  # noqa: BLE001 - a host that cannot be read is left out, not raised
            return dict.fromkeys(names.values(), f"not read: {step_failure(exc)}")
        pages = read.split(result.stdout)
        out: Read = {}
        for port, name in names.items():
            page = pages.get(port)
            if page is None or page.error is not None:
                out[name] = f"/metrics not read: {page.error if page else 'no answer'}"
                continue
            try:
                out[name] = snapshot(page.text)
            except ValueError as exc:
                out[name] = f"/metrics not in the Prometheus text format: {exc}"
        return out

    def _read_all(self, hosts: Sequence[str]) -> Read:
        out: Read = {}
        for one in parallel(self._read, list(hosts)):
            out.update(one)
        return out

    def _direct(self, hosts: Sequence[str], duration_s: int) -> tuple[dict[str, Counts], dict[str, str], float]:
        """Read, wait, read: the counted instances' windows, the others' reasons, the start time."""
        start = self._read_all(hosts)
        began = self.clock()
        self.sleep(duration_s)
        end = self._read_all(hosts)
        counted: dict[str, Counts] = {}
        left: dict[str, str] = {}
        for name, first in start.items():
            last = end.get(name, "not read")
            if isinstance(first, str):
                left[name] = f"{first} (at the start)"
            elif isinstance(last, str):
                left[name] = f"{last} (at the end)"
            else:
                window = difference(first, last)
                if isinstance(window, str):
                    left[name] = window
                else:
                    counted[name] = window
        return counted, left, began

    def _prometheus(
        self, url: str, hosts: Sequence[str], duration_s: int
    ) -> tuple[dict[str, Counts], dict[str, str], float, str | None]:
        """Wait, then ask: the hosts' windows, the others' reasons, the start time, a failure."""
        began = self.clock()
        self.sleep(duration_s)
        try:
            counted = promapi.window_counts(url, hosts, duration_s, self.clock())
        except promapi.PrometheusError as exc:
            return {}, {}, began, f"Prometheus not read: {exc}"
        left = {h: f"no series with host={h!r} in {url}" for h in hosts if h not in counted}
        return counted, left, began, None

    def __call__(self, hosts: Sequence[str], compared: Sequence[str], duration_s: int) -> SoakResult:
        """Soak ``hosts`` for ``duration_s`` seconds against ``compared`` (may be empty) and judge them."""
        everyone = [*hosts, *compared]
        thresholds = self.steps.targets[hosts[0]].config.profile.soak
        problem = None
        if self.prometheus_url:
            counted, left, began, problem = self._prometheus(self.prometheus_url, everyone, duration_s)
            source = self.prometheus_url
        else:
            counted, left, began = self._direct(everyone, duration_s)
            source = DIRECT
        ended = self.clock()
        split = []
        for names in (set(hosts), set(compared)):
            split.append(
                (
                    {k: v for k, v in counted.items() if _owner(k) in names},
                    {k: v for k, v in left.items() if _owner(k) in names},
                )
            )
        totals = []
        for side_counts, _left in split:
            total = Counts()
            for counts in side_counts.values():
                total.add(counts)
            totals.append(total)
        tpot = tpot_metric(*(totals if compared else totals[:1]))
        soaked = figures(hosts, split[0][0], split[0][1], tpot)
        others = figures(compared, split[1][0], split[1][1], tpot) if compared else None
        outcome, notes = judge(soaked, others, thresholds)
        empty = [(name, side) for name, side in ((SOAKED, soaked), (OTHERS, others)) if side and not side.instances]
        if problem:
            outcome = GateOutcome(passed=False, gate="soak", reasons=[problem], inconclusive=True)
        elif empty:
            reasons = [f"no metrics from {name}: " + "; ".join(side.left_out) for name, side in empty]
            outcome = GateOutcome(passed=False, gate="soak", reasons=reasons, inconclusive=True)
        if compared and tpot is None:
            notes.append(
                "TPOT not compared: no histogram both sides have (vllm:request_time_per_output_token_seconds "
                "or vllm:time_per_output_token_seconds)"
            )
        return SoakResult(
            verdict="pass" if outcome.passed else "inconclusive" if outcome.inconclusive else "fail",
            reasons=outcome.reasons,
            hosts=list(hosts),
            compared=list(compared),
            soaked=soaked,
            others=others,
            started=_iso(began),
            ended=_iso(ended),
            window_s=round(ended - began, 1),
            source=source,
            thresholds={k: float(v) for k, v in thresholds.model_dump().items()},
            notes=list(dict.fromkeys(notes)),
        )


def prometheus_url(targets: Mapping[str, Target[HostConfig]]) -> str | None:
    """The ``metrics_prometheus_url`` the soak reads: one value for every host of the rollout.

    Raises:
        CommandError: the hosts name different ones (or some none): which hosts have which.
    """
    urls: dict[str | None, list[str]] = {}
    for name, target in targets.items():
        urls.setdefault(target.config.metrics.metrics_prometheus_url, []).append(name)
    if len(urls) > 1:
        said = "; ".join(f"{url or 'unset'} for {', '.join(names)}" for url, names in urls.items())
        raise CommandError(
            f"--soak: the hosts name different metrics_prometheus_url values: {said}; one soak compares "
            "hosts over one source: set one value for all of them, or unset it on all to read their /metrics directly"
        )
    return next(iter(urls), None)
