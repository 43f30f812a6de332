"""Metrics: each vLLM instance's ``/metrics`` and AMD's exporter's answer, with the families rocmfleet
expects (:mod:`rocmfleet.domain.metricfamilies`); what Prometheus, the dashboard and
``rollout --soak`` read.

One ``metrics-read.sh`` run per host reads every instance's API port and the exporter's port at
once (:func:`rocmfleet.fleet.metrics.read.command`); the pages are parsed with prometheus_client's
parser (:func:`rocmfleet.fleet.metrics.read.families`).
"""

from __future__ import annotations

from typing import Any

import pytest

from rocmfleet.domain import metricfamilies
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import expect
from rocmfleet.fleet.metrics import read
from rocmfleet.plan.checkmodel import CheckInstance, CheckValues


def _ports(checks: CheckValues) -> list[int]:
    """The ports read: every instance's API port, then the exporter's when ``metrics_exporter``."""
    ports = [i.port for i in checks.instances]
    metrics = MetricsSettings.model_validate(checks.metrics)
    if metrics.metrics_exporter:
        ports.append(metrics.metrics_exporter_port)
    return ports


def _read(host: Any, ports: list[int]) -> dict[int, read.Page]:
    result = host.run(read.command(ports))
    if result.rc not in (0, 1):  # 1: a port did not answer (its page says why); other: no read at all
        raise CannotCheck(f"metrics-read.sh exited {result.rc}: {result.stderr.strip()[-300:] or 'no message'}")
    pages = read.split(result.stdout)
    unread = [port for port in ports if port not in pages]
    if unread:
        raise CannotCheck(f"metrics-read.sh gave nothing for port(s) {', '.join(map(str, unread))}")
    return pages


@pytest.fixture
def pages(host: Any, checks: CheckValues) -> dict[int, read.Page]:
    """Every port's ``/metrics`` (:func:`_ports`), read once per host and process."""
    found: dict[int, read.Page] = expect.once(host, "metrics pages", lambda: _read(host, _ports(checks)))
    return found


def _served(page: read.Page, what: str) -> set[str]:
    """The families of ``page``; a port that did not answer, or a page that is not the text format, fails."""
    assert page.error is None, f"{what}: /metrics does not answer: {page.error}"
    try:
        return read.families(page.text)
    except ValueError as exc:
        raise AssertionError(f"{what}: /metrics is not the Prometheus text format: {exc}") from None


def test_vllm_families(host: Any, checks: CheckValues, instance: CheckInstance, pages: dict[int, read.Page]) -> None:
    """The instance's API port answers ``/metrics`` with every family of its profile's vLLM version (queue,
    KV-cache use, request and token counters, TTFT/TPOT/ITL/latency histograms, ``http_requests_total``);
    skipped when its unit is not active."""
    unit = instance.unit
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by vllm::unit_enabled_and_active)")
    version = checks.vllm_version
    what = f"port {instance.port} (instance {instance.name}, vLLM {version})"
    missing = metricfamilies.missing(metricfamilies.vllm_families(version), _served(pages[instance.port], what))
    assert not missing, f"{what}: /metrics lacks {', '.join(missing)}"


def test_exporter_families(checks: CheckValues, pages: dict[int, read.Page]) -> None:
    """AMD's device-metrics-exporter answers ``/metrics`` on ``metrics_exporter_port`` with GPU activity, VRAM,
    power, temperatures and ECC counts; skipped when ``metrics_exporter`` is false."""
    metrics = MetricsSettings.model_validate(checks.metrics)
    if not metrics.metrics_exporter:
        pytest.skip("metrics_exporter is false: no exporter is deployed on this host")
    port = metrics.metrics_exporter_port
    what = f"port {port} (AMD device-metrics-exporter)"
    missing = metricfamilies.missing(metricfamilies.EXPORTER, _served(pages[port], what))
    assert not missing, f"{what}: /metrics lacks {', '.join(missing)}"
