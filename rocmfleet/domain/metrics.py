"""Metrics settings: AMD's device-metrics-exporter on each GPU host, and where fleet metrics are read.

Keys prefixed ``metrics_`` (a domain that owns its keys, like :class:`rocmfleet.domain.rocm.RocmSettings`).

AMD's Debian package (``amdgpu-exporter``) comes from
``https://repo.radeon.com/device-metrics-exporter/apt/<version> jammy main`` signed with
``rocm.gpg``, brings the units ``gpuagent.service`` and ``amd-metrics-exporter.service``, reads
``/etc/metrics/config.json`` (``ServerPort``, default 5000) and serves ``/metrics`` there
(ROCm/device-metrics-exporter ``docs/installation/deb-package.rst``, "Step 3", "Metrics Exporter
Default Settings"). Both units must be stopped before a driver unload or upgrade and before a
partition change ("Service Management for Driver and Partition Operations").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rocmfleet.domain.baseurl import problem as base_url_problem

PREFIX = "metrics_"

#: AMD's exporter release that rocmfleet is written against (deb-package.rst, 2026: 1.5.4).
EXPORTER_VERSION = "1.5.4"
#: ``ServerPort``'s default in AMD's config.json (deb-package.rst, "Metrics Exporter Default Settings").
EXPORTER_PORT = 5000


#: What Prometheus's file_sd reads: a file ending in .json, .yml or .yaml (or the same in upper
#: case). Prometheus docs, configuration.md, ``<file_sd_config>``: "files: Patterns for files from
#: which target groups are extracted", each "a path ending in .json, .yml or .yaml"; the check
#: itself is ``patFileSDName`` in prometheus ``discovery/file/file.go``.
FILE_SD_SUFFIXES = (".json", ".yml", ".yaml", ".JSON", ".YML", ".YAML")
#: What rocmfleet writes: JSON (YAML 1.2 reads JSON too, so a .yml/.yaml name holds it as well).
FILE_SD_READS = "Prometheus's file_sd reads only files ending in .json, .yml or .yaml"


def file_sd_name_problem(path: str) -> str | None:
    """Why Prometheus's file_sd would never read ``path`` (a file name, ``~`` not yet expanded),
    or ``None`` when its name ends in one of :data:`FILE_SD_SUFFIXES`."""
    if path.endswith(FILE_SD_SUFFIXES):
        return None
    return f"{FILE_SD_READS}; name such a file"


def targets_file_problem(path: str) -> str | None:
    """Why ``metrics_targets_file`` ``path`` is refused, or ``None``: it must end in ``.json`` (the
    deploy writes JSON; :data:`FILE_SD_READS`) and be absolute or under ``~/`` (expanded when written):
    a relative path would be taken from whatever directory pyinfra happens to run in."""
    if not path.endswith((".json", ".JSON")):
        return f"must end in .json: the deploy writes JSON, and {FILE_SD_READS}"
    if not path.startswith(("/", "~/")):
        return (
            "must be an absolute path (or start with ~/): a relative one would be written wherever pyinfra runs, "
            "not where Prometheus reads"
        )
    return None


def prometheus_url_problem(value: str) -> str | None:
    """Why ``value`` is not a Prometheus base URL the soak can ask (``metrics_prometheus_url``), or ``None``.

    ``http(s)://host[:port][/path]``: ``rocmfleet.fleet.metrics.promapi`` appends
    ``/api/v1/query?...`` to it (Prometheus docs, "HTTP API"; a path prefix is a Prometheus behind
    ``--web.route-prefix`` or a proxy), so a query or fragment would end up before that path. No
    credentials (``user:password@``): the setting is plain text and is said in the soak's lines
    and report (and ``urllib.request.urlopen`` does not log in with it: it takes ``u:p@host`` for
    the host name). A port out of range or no host fails
    here, not after the canary has soaked.
    """
    return base_url_problem(
        value,
        "http://prometheus:9090",
        "this setting is plain text and said in the soak's report",
        "/api/v1/query is appended to it",
    )


class MetricsSettings(BaseModel):
    """Everything the metrics parts read for one host (keys prefixed ``metrics_``)."""

    model_config = ConfigDict(extra="forbid")

    metrics_exporter: bool = Field(
        default=True,
        description="Install AMD's device-metrics-exporter (`amdgpu-exporter`, units `gpuagent` and "
        "`amd-metrics-exporter`), pinned and held; `false` leaves it alone.",
    )
    metrics_exporter_version: str = Field(
        default=EXPORTER_VERSION,
        pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?$",
        description="Release directory under `metrics_exporter_repo_url` (AMD's apt repository "
        "`device-metrics-exporter/apt/<version>`), e.g. `1.5.4`.",
    )
    metrics_exporter_repo_url: str = Field(
        default="https://repo.radeon.com/device-metrics-exporter/apt",
        pattern=r"^https?://[^\s]+[^/\s]$",
        description="Base of AMD's exporter repository (signed with repo.radeon.com's key); change for a mirror.",
    )
    metrics_exporter_port: int = Field(
        default=EXPORTER_PORT,
        ge=1024,
        le=65535,
        description="The exporter's `ServerPort` (`/etc/metrics/config.json`): where `/metrics` answers.",
    )
    metrics_targets_file: str | None = Field(
        default=None,
        description="On the control machine: a Prometheus `file_sd` JSON file the deploy rewrites with "
        "every vLLM instance and exporter of the inventory (`rocmfleet metrics targets`); an absolute path "
        "(or `~/...`) ending in `.json`, e.g. `/etc/prometheus/file_sd/rocmfleet.json`.",
    )
    metrics_prometheus_url: str | None = Field(
        default=None,
        description="A Prometheus server that scrapes the fleet (e.g. `http://prometheus:9090`); "
        "`rollout --soak` reads the window from it instead of the instances' `/metrics`.",
    )

    @field_validator("metrics_prometheus_url")
    @classmethod
    def _prometheus(cls, value: str | None) -> str | None:
        problem = prometheus_url_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("metrics_targets_file")
    @classmethod
    def _json_file(cls, value: str | None) -> str | None:
        if value is not None and (problem := targets_file_problem(value)):
            raise ValueError(problem)
        return value
