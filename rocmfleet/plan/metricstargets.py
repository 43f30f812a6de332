"""Prometheus scrape targets of a fleet: every vLLM instance and every AMD exporter, as ``file_sd`` JSON.

Pure: built from validated host configurations and the address each host is reached at
(:func:`rocmfleet.plan.targetsfile.scrape_address`). The format is Prometheus's
``file_sd_configs`` file (https://prometheus.io/docs/guides/file-sd/): a JSON list of
``{"targets": ["HOST:PORT"], "labels": {...}}`` groups. One group per target, so each carries its
own labels.

Labels (every value a string, as Prometheus wants):

* ``job``: ``vllm`` (an instance's API port, where vLLM serves ``/metrics``) or
  ``amd-device-metrics`` (``metrics_exporter_port``, only where ``metrics_exporter`` is true). A
  target's ``job`` label wins over the scrape config's ``job_name`` (Prometheus sets ``job`` from
  ``job_name`` only when the target has none), so one scrape job reading the file still
  tells the two apart, and two jobs can each keep theirs (``docs/metrics.md``).
* ``host``: the inventory name (what every rocmfleet command and report calls the host).
* vLLM targets also: ``rocmfleet_instance`` (the instance's name, unit ``vllm-<name>``; not
  ``instance``, which Prometheus sets to the target's ``HOST:PORT`` and every dashboard and alert
  expects to be that), ``model`` (the profile's Hugging Face id), ``served_model_name``,
  ``image_digest`` (the resolved image's ``sha256:...``: host data's override, else the profile's),
  ``gpus`` (host GPU indices, KFD order, comma-separated: ``"0,1"``) and ``vllm_version`` (the
  profile's).

``gpus`` are the configured indices (``vllm_instances``, ``instance_gpus``, or
``gpus_per_instance`` in order); in a partitioned mode with ``gpus_per_instance``, the deploy may
place an instance on others chosen from the topology (its unit file says which).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from rocmfleet.config.instances import Instance
from rocmfleet.config.profiles import Image, Profile
from rocmfleet.domain.metrics import MetricsSettings

#: ``job`` of a vLLM instance's target.
VLLM_JOB = "vllm"
#: ``job`` of an AMD device-metrics-exporter's target.
EXPORTER_JOB = "amd-device-metrics"
#: The label naming the rocmfleet instance (``instance`` is Prometheus's: the target address).
INSTANCE_LABEL = "rocmfleet_instance"


class ScrapedConfig(Protocol):
    """What the targets read of a host's configuration
    (:class:`rocmfleet.config.settings.HostConfig` has each)."""

    @property
    def profile(self) -> Profile: ...

    @property
    def image(self) -> Image: ...

    @property
    def metrics(self) -> MetricsSettings: ...

    def instances(self) -> list[Instance]:
        """The host's vLLM instances."""
        ...


@dataclass(frozen=True)
class FleetHost:
    """One host as the targets see it: inventory name, the address it is reached at, its config."""

    name: str
    address: str
    config: ScrapedConfig


def target(address: str, port: int) -> str:
    """``address:port`` as a Prometheus target; an IPv6 address in brackets (``[fd00::1]:8000``)."""
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"{address}:{port}"


def host_groups(host: FleetHost) -> list[dict[str, Any]]:
    """``host``'s target groups: one per vLLM instance, then its exporter's when ``metrics_exporter``."""
    config = host.config
    groups: list[dict[str, Any]] = []
    for instance in config.instances():
        labels = {
            "job": VLLM_JOB,
            "host": host.name,
            INSTANCE_LABEL: instance.name,
            "model": config.profile.model,
            "served_model_name": config.profile.served_model_name,
            "image_digest": config.image.digest,
            "gpus": ",".join(str(g) for g in instance.gpus),
            "vllm_version": config.profile.vllm_version,
        }
        groups.append({"targets": [target(host.address, instance.port)], "labels": labels})
    if config.metrics.metrics_exporter:
        groups.append(
            {
                "targets": [target(host.address, config.metrics.metrics_exporter_port)],
                "labels": {"job": EXPORTER_JOB, "host": host.name},
            }
        )
    return groups


def file_sd(hosts: Iterable[FleetHost]) -> list[dict[str, Any]]:
    """Every host's target groups (:func:`host_groups`), sorted by job, host name, then port.

    Args:
        hosts: the inventory's hosts (any order: the result does not depend on it).

    Returns:
        Prometheus ``file_sd`` groups, JSON-ready.
    """
    groups = [group for host in hosts for group in host_groups(host)]
    return sorted(groups, key=lambda g: (g["labels"]["job"], g["labels"]["host"], _port(g["targets"][0])))


def _port(address: str) -> int:
    """The port of a :func:`target` (``host:8000``, ``[fd00::1]:8000``)."""
    return int(address.rpartition(":")[2])


def render(groups: list[dict[str, Any]]) -> str:
    """The file's text: ``groups`` as indented JSON with sorted keys, ending in a newline."""
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


def summary(groups: list[dict[str, Any]]) -> str:
    """One line: ``N vLLM instance(s) and M exporter(s) on K host(s): a, b``."""
    jobs = [g["labels"]["job"] for g in groups]
    hosts = sorted({g["labels"]["host"] for g in groups})
    return (
        f"{jobs.count(VLLM_JOB)} vLLM instance(s) and {jobs.count(EXPORTER_JOB)} exporter(s) on "
        f"{len(hosts)} host(s): {', '.join(hosts)}"
    )
