"""AMD's device-metrics-exporter on a GPU host: its apt source, package, config, units (pure).

Everything here follows AMD's "Standalone Debian Package Install" page (ROCm/device-metrics-exporter
``docs/installation/deb-package.rst``, release 1.5.4):

- the source line ``deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg]
  https://repo.radeon.com/device-metrics-exporter/apt/<version> <suite> main`` ("Step 3"; ``jammy``
  for Ubuntu 22.04, ``noble`` for 24.04; Debian 12 takes ``jammy`` as for the driver,
  :data:`rocmfleet.domain.rocm.OS_TARGETS`), signed with repo.radeon.com's key, the keyring the
  rocm role keeps (:data:`rocmfleet.domain.rocm.LEGACY_KEYRING`);
- the package ``amdgpu-exporter`` ("Step 4"), bringing ``gpuagent.service`` and
  ``amd-metrics-exporter.service`` (``/lib/systemd/system``; ``ExecStart=/usr/local/bin/gpuagent``
  and ``/usr/local/bin/amd-metrics-exporter``);
- the configuration ``/etc/metrics/config.json``, whose ``ServerPort`` (default 5000) is where
  ``/metrics`` answers, read when the exporter is started with ``-amd-metrics-config FILE``
  ("Changing configuration config.json": AMD edits the unit's ``ExecStart``; rocmfleet writes a
  systemd drop-in instead, so the packaged unit stays as AMD ships it and an upgrade keeps ours);
- "The GPU Metrics Exporter and GPU Agent services must be stopped before: GPU driver unload or
  upgrade; GPU partition configuration changes" ("Service Management for Driver and Partition
  Operations"): :func:`stop_command` and :func:`start_command`.

The rendered ``config.json`` holds ``ServerPort`` alone: every other key keeps the exporter's
default, which is what AMD documents for a standalone host ("An empty ``Fields`` (the default)
exports everything", ``MetricsFieldPrefix`` empty: metric names are AMD's field names lowercased,
``docs/configuration/configmap.md``). AMD's ``example/config.json`` is a Kubernetes example (its
``CustomLabels`` names a cluster, its prefix ``amd_`` renames every metric), not a default.
"""

from __future__ import annotations

import json

from rocmfleet.domain import rocm
from rocmfleet.domain.exporterunits import EXPORTER_UNIT as EXPORTER_UNIT
from rocmfleet.domain.exporterunits import GPUAGENT_UNIT as GPUAGENT_UNIT
from rocmfleet.domain.exporterunits import PARTITION_NOTE as PARTITION_NOTE
from rocmfleet.domain.exporterunits import UNITS as UNITS
from rocmfleet.domain.exporterunits import start_command as start_command
from rocmfleet.domain.exporterunits import stop_command as stop_command
from rocmfleet.domain.exporterunits import stopped_command as stopped_command
from rocmfleet.domain.metrics import MetricsSettings

#: The Debian package (deb-package.rst, "Step 4").
PACKAGE = "amdgpu-exporter"
#: The exporter's binary as AMD's unit starts it (deb-package.rst, "Changing configuration config.json").
EXPORTER_BINARY = "/usr/local/bin/amd-metrics-exporter"
#: Where rocmfleet writes the repository line (AMD names no file: "Edit the sources list").
SOURCE_FILE = "/etc/apt/sources.list.d/amdgpu-exporter.list"
#: The configuration AMD documents (deb-package.rst, "Metrics Exporter Default Settings").
CONFIG_DIR = "/etc/metrics"
CONFIG_FILE = f"{CONFIG_DIR}/config.json"
#: The drop-in that gives the exporter ``-amd-metrics-config CONFIG_FILE`` (systemd.unit(5), "drop-in").
DROPIN_DIR = f"/etc/systemd/system/{EXPORTER_UNIT}.d"
DROPIN_FILE = f"{DROPIN_DIR}/rocmfleet.conf"


def repo_url(settings: MetricsSettings) -> str:
    """The release's repository, as ``apt-cache madison`` names it
    (``https://repo.radeon.com/device-metrics-exporter/apt/1.5.4``)."""
    return f"{settings.metrics_exporter_repo_url.rstrip('/')}/{settings.metrics_exporter_version}"


def apt_source(settings: MetricsSettings, target: rocm.OsTarget) -> str:
    """:data:`SOURCE_FILE`'s line for the host's OS (deb-package.rst "Step 3"; the suite is the
    driver repository's, :attr:`rocmfleet.domain.rocm.OsTarget.suite`)."""
    return f"deb [arch=amd64 signed-by={rocm.LEGACY_KEYRING}] {repo_url(settings)} {target.suite} main\n"


def config_json(settings: MetricsSettings) -> str:
    """:data:`CONFIG_FILE` as rocmfleet writes it: ``{"ServerPort": <metrics_exporter_port>}``
    (the other keys at the exporter's defaults: module docstring)."""
    return json.dumps({"ServerPort": settings.metrics_exporter_port}, indent=2) + "\n"


def dropin() -> str:
    """:data:`DROPIN_FILE`: AMD's ``ExecStart`` with ``-amd-metrics-config`` (an empty ``ExecStart=``
    first clears the packaged one, systemd.service(5) "ExecStart=")."""
    return (
        "# rocmfleet: the exporter reads its ServerPort from the rendered config (AMD's deb-package.rst,\n"
        '# "Changing configuration config.json", as a drop-in instead of an edited unit)\n'
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={EXPORTER_BINARY} -amd-metrics-config {CONFIG_FILE}\n"
    )
