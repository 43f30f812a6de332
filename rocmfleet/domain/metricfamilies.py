"""The Prometheus metric families rocmfleet expects on a vLLM instance's and on AMD's exporter's ``/metrics``.

``rocmfleet check --select metrics`` asserts them (``rocmfleet/fleet/check/test_metrics.py``), the
dashboard queries them (``rocmfleet/dashboards/fleet.json``, tested against recorded pages) and
``rollout --soak`` reads them. Names are as the text format writes them: a counter with its
``_total`` suffix, a histogram by its family name (its ``_bucket``, ``_sum`` and ``_count`` series
follow). Pure data and lookups; nothing here reads a host.

Sources:

* vLLM >= 0.32: read in vLLM 0.32.0's own source, ``vllm/v1/metrics/loggers.py``
  (``PrometheusStatLogger.__init__``: the ``name="vllm:..."`` of each gauge, counter and
  histogram), which is what the lab's image runs (``tests/fixtures/metrics/vllm-0.32.0-cpu.txt`` is
  its recorded page); the same names in 0.33 (``shared/reference/mi300x.md``, "Key metrics in 0.33",
  [V-metrics] vllm-0.33.0 ``vllm/v1/metrics/loggers.py``).
* vLLM 0.9.x: the reference's "0.9.2 used ``vllm:gpu_cache_usage_perc``,
  ``vllm:time_per_output_token_seconds`` ... instead" ([V-metrics] vllm-0.9.2
  ``vllm/engine/metrics.py``), and no ``vllm:inter_token_latency_seconds``.
* Between 0.10 and 0.31 rocmfleet has read neither source: only the families both eras share are
  expected there (:data:`VLLM_COMMON`), so a check never fails on a rename it cannot date.
* ``http_requests_total``: prometheus_fastapi_instrumentator's default metric (labels ``handler``,
  ``method``, ``status`` grouped as ``2xx``/``4xx``/``5xx``), which vLLM attaches to its API server with
  ``Instrumentator(...).add().instrument(app)`` in ``vllm/entrypoints/serve/instrumentator/metrics.py``
  (vLLM 0.32.0; ``vllm/entrypoints/openai/api_server.py`` in 0.9.x). A labelled counter with no
  request served yet is declared (``# HELP``/``# TYPE``) without samples: the family is there.
* AMD's device-metrics-exporter: AMD's field names lowercased (``GPU_GFX_ACTIVITY`` is served as
  ``gpu_gfx_activity``), labelled ``gpu_id``, ``serial_number``, ``card_model``, ``hostname``...;
  ROCm/device-metrics-exporter ``docs/configuration/metricslist.md`` (MI3xx rows, bare metal).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Family:
    """One expected family: its name as served, and where rocmfleet read that it is served."""

    name: str
    source: str


_V032 = "vLLM 0.32.0 vllm/v1/metrics/loggers.py (PrometheusStatLogger)"
_V092 = "vLLM 0.9.2 vllm/engine/metrics.py (shared/reference/mi300x.md, 'Key metrics in 0.33')"
_HTTP = (
    "prometheus_fastapi_instrumentator's default http_requests_total, attached by vLLM in "
    "vllm/entrypoints/serve/instrumentator/metrics.py (attach_router)"
)
_AMD = "ROCm/device-metrics-exporter docs/configuration/metricslist.md"

#: Families every vLLM version rocmfleet knows serves (0.9 through 0.33), names unchanged.
VLLM_COMMON: tuple[Family, ...] = (
    Family("vllm:num_requests_running", _V032),
    Family("vllm:num_requests_waiting", _V032),
    Family("vllm:request_success_total", _V032),
    Family("vllm:prompt_tokens_total", _V032),
    Family("vllm:generation_tokens_total", _V032),
    Family("vllm:time_to_first_token_seconds", _V032),
    Family("vllm:e2e_request_latency_seconds", _V032),
    Family("http_requests_total", _HTTP),
)

#: vLLM from 0.32 (read in 0.32.0's source; 0.33's per the reference): KV-cache use and the
#: per-token latencies under their current names.
VLLM_032: tuple[Family, ...] = (
    *VLLM_COMMON,
    Family("vllm:kv_cache_usage_perc", _V032),
    Family("vllm:inter_token_latency_seconds", _V032),
    Family("vllm:request_time_per_output_token_seconds", _V032),
)

#: vLLM 0.9.x: the same figures under the names it used.
VLLM_09: tuple[Family, ...] = (
    *VLLM_COMMON,
    Family("vllm:gpu_cache_usage_perc", _V092),
    Family("vllm:time_per_output_token_seconds", _V092),
)

#: The first version of :data:`VLLM_032`'s names that rocmfleet has read; below 0.10, :data:`VLLM_09`.
CURRENT_FROM = Version("0.32.0.dev0")
OLD_BELOW = Version("0.10.0.dev0")

#: AMD's exporter, per GPU (MI3xx on bare metal): what the dashboard and the check read.
EXPORTER: tuple[Family, ...] = (
    Family("gpu_gfx_activity", _AMD + " (GPU_GFX_ACTIVITY: graphics engine use, 0-100)"),
    Family("gpu_umc_activity", _AMD + " (GPU_UMC_ACTIVITY: memory engine use, 0-100)"),
    Family("gpu_used_vram", _AMD + " (GPU_USED_VRAM, MB)"),
    Family("gpu_total_vram", _AMD + " (GPU_TOTAL_VRAM, MB)"),
    Family("gpu_package_power", _AMD + " (GPU_PACKAGE_POWER: socket power, W; MI3xx)"),
    Family("gpu_junction_temperature", _AMD + " (GPU_JUNCTION_TEMPERATURE, Celsius; MI3xx)"),
    Family("gpu_memory_temperature", _AMD + " (GPU_MEMORY_TEMPERATURE, Celsius)"),
    Family("gpu_ecc_correct_total", _AMD + " (GPU_ECC_CORRECT_TOTAL)"),
    Family("gpu_ecc_uncorrect_total", _AMD + " (GPU_ECC_UNCORRECT_TOTAL)"),
)


def vllm_families(vllm_version: str) -> tuple[Family, ...]:
    """The families an instance running vLLM ``vllm_version`` (a profile's ``vllm_version``, e.g.
    ``"0.32.0"``) serves on ``/metrics``: :data:`VLLM_032` from 0.32, :data:`VLLM_09` below 0.10,
    :data:`VLLM_COMMON` between (versions whose source rocmfleet has not read).

    Raises:
        ValueError: ``vllm_version`` is not a version (profiles are validated, so never for a host's).
    """
    try:
        version = Version(vllm_version)
    except InvalidVersion:
        raise ValueError(f"vLLM version {vllm_version!r}: not a version (e.g. 0.32.0)") from None
    if version >= CURRENT_FROM:
        return VLLM_032
    if version < OLD_BELOW:
        return VLLM_09
    return VLLM_COMMON


def missing(expected: tuple[Family, ...], served: set[str]) -> list[str]:
    """The names of ``expected`` absent from ``served`` (:func:`rocmfleet.fleet.metrics.read.families`
    of a page), in ``expected``'s order."""
    return [family.name for family in expected if family.name not in served]
