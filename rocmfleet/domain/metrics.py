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

PREFIX = "metrics_"

#: AMD's exporter release that rocmfleet is written against (deb-package.rst, 2026: 1.5.4).
EXPORTER_VERSION = "1.5.4"
#: ``ServerPort``'s default in AMD's config.json (deb-package.rst, "Metrics Exporter Default Settings").
EXPORTER_PORT = 5000


#: The GPU agent (it opens the GPUs) and the exporter (it asks the agent over
#: ``/var/run/gpuagent.sock`` and serves ``/metrics``); deb-package.rst.
GPUAGENT_UNIT = "gpuagent.service"
EXPORTER_UNIT = "amd-metrics-exporter.service"
#: Start order (the agent first: the exporter reads from it); stop in reverse.
UNITS = (GPUAGENT_UNIT, EXPORTER_UNIT)


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


def stop_command() -> str:
    """Stop the exporter, then the GPU agent, so nothing holds the GPUs (AMD, "Stop Metrics Exporter")."""
    return "systemctl stop " + " ".join(reversed(UNITS))


def stopped_command() -> str:
    """:func:`stop_command` as a driver change runs it: it succeeds when a unit is not there to stop.

    ``systemctl stop`` of a unit with no unit file (removed by hand, or a release that names it
    otherwise) fails with ``Unit X not loaded.`` after stopping the others, which failed the driver
    change it guards. What AMD asks is that neither runs: a failed stop passes when
    ``systemctl is-active`` then finds none active (it exits 0 when at least one is, systemctl(1)).
    """
    return f"{stop_command()} || ! systemctl is-active --quiet {' '.join(reversed(UNITS))}"


def start_command() -> str:
    """Start the GPU agent, then the exporter (AMD, "Step 4": enable and start)."""
    return "systemctl start " + " ".join(UNITS)


#: Said with every partition change rocmfleet asks an operator to make (deb-package.rst, "Service
#: Management for Driver and Partition Operations").
PARTITION_NOTE = (
    f"where AMD's metrics exporter is installed, stop it first (`{stop_command()}`) and start it after "
    f"(`{start_command()}`)"
)


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
    from urllib.parse import urlsplit

    allowed = "allowed: http(s)://host[:port][/path], e.g. http://prometheus:9090"
    if any(c.isspace() or not c.isprintable() for c in value):
        return f"must not hold white space or control characters; {allowed}"
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError when out of 0-65535 or not a number
    except ValueError as err:
        return f"not a URL ({err}); {allowed}"
    if parts.scheme not in ("http", "https"):
        return f"scheme {parts.scheme or '(none)'!r} is not http or https; {allowed}"
    if "@" in parts.netloc:
        return (
            f"holds credentials (user:password@): this setting is plain text and said in the soak's report; {allowed}"
        )
    if not parts.hostname:
        return f"names no host; {allowed}"
    if port == 0:
        return f"port 0 is no port; {allowed}"
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        return f"must not hold a query or fragment (/api/v1/query is appended to it); {allowed}"
    return None


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
