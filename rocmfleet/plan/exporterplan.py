"""The exporter role's files and its package's live rule, over the deploy's one ``HostState`` read (pure).

The role (``roles/exporter``) keeps AMD's device-metrics-exporter as
:mod:`rocmfleet.domain.exporter` says: its apt source, ``amdgpu-exporter`` at the version its
release's repository offers and held, ``/etc/metrics/config.json``, the drop-in, both units
enabled and running. :func:`wanted_files` defines the files (the plan's items,
:func:`rocmfleet.plan.roleitems.exporter_items`, whose drift the role applies);
:func:`query` names what a read of the role must hold (the files, the package, the units, and
``apt-cache madison amdgpu-exporter`` as a run); :func:`package_problem` is the package's rule
against the version apt offers from the release's repository, which no offline plan knows.
``rocmfleet check`` asserts the package's version (``rocm::metrics_exporter_as_wanted``) and the
files, units and hold by the plan's rule (``drift::role_as_wanted[exporter]``).

With ``metrics_exporter: false`` the role leaves the exporter alone: nothing is read, nothing
differs, nothing is removed (an operator who turns it off may run it by hand).
"""

from __future__ import annotations

from rocmfleet.domain import exporter, rocm
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.facts import rocm as facts
from rocmfleet.facts.state import APT_VERSIONS, Gathered, ran
from rocmfleet.plan.hoststate import WantedFile

#: What apt offers of the package: the ``HostState`` read's one ``apt-cache madison`` of every role's.
RUN_VERSIONS = APT_VERSIONS


def query(settings: MetricsSettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments); nothing with ``metrics_exporter`` off."""
    if not settings.metrics_exporter:
        return {}
    return {
        "paths": [exporter.SOURCE_FILE, exporter.CONFIG_FILE, exporter.DROPIN_FILE],
        "packages": [exporter.PACKAGE],
        "units": list(exporter.UNITS),
        "os": True,
        "apt_versions": [exporter.PACKAGE],
    }


def wanted_files(settings: MetricsSettings, target: rocm.OsTarget) -> list[WantedFile]:
    """The role's files as it writes them (mode 644, root's): the apt source, the config, the drop-in."""
    return [
        WantedFile(exporter.SOURCE_FILE, exporter.apt_source(settings, target).encode(), "644", "root", "root"),
        WantedFile(exporter.CONFIG_FILE, exporter.config_json(settings).encode(), "644", "root", "root"),
        WantedFile(exporter.DROPIN_FILE, exporter.dropin().encode(), "644", "root", "root"),
    ]


def package_problem(settings: MetricsSettings, got: Gathered) -> str | None:
    """Why ``amdgpu-exporter`` is not as the role leaves it (at the version its release's
    repository offers, and held), or ``None``. apt offering none from there (its lists predate the
    source file, or the read failed) is a problem: the operation then reads and decides."""
    repo = exporter.repo_url(settings)
    versions = ran(got, RUN_VERSIONS, facts.AptRepoVersions().process)
    version = facts.version_from_repo(versions, exporter.PACKAGE, repo) if versions is not None else None
    item = got.packages.get(exporter.PACKAGE)
    if version is None or item is None or item.status[:2] not in ("ii", "hi") or item.version != version:
        return f"{exporter.PACKAGE} not at the version of {repo}"
    if item.status[:1] != "h":
        return f"{exporter.PACKAGE} not held (apt-mark hold)"
    return None
