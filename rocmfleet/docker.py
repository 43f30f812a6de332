"""What the ``docker`` role writes: ``daemon.json`` and the apt source for Docker's packages."""

from __future__ import annotations

import json
from typing import Any

from rocmfleet.settings import HostSettings as DeploySettings

#: Defaults for a GPU inference host. ``live-restore`` keeps containers serving while dockerd
#: restarts (docs.docker.com/engine/daemon/live-restore/); bounded json-file logs keep a chatty
#: vLLM from filling the disk (docs.docker.com/engine/logging/drivers/json-file/).
DAEMON_DEFAULTS: dict[str, Any] = {
    "live-restore": True,
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m", "max-file": "3"},
}

#: Packages per ``docker_source``; docker-ce's list is Docker's install guide for Debian.
PACKAGES = {
    "docker": ["docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin"],
    "debian": ["docker.io"],
}
#: The engine packages ``docker_version`` pins (Docker releases docker-ce and its CLI with one version;
#: containerd.io and the buildx plugin have their own).
ENGINE_PACKAGES = {"docker": ["docker-ce", "docker-ce-cli"], "debian": ["docker.io"]}


def server_version_pattern(apt_version: str) -> str:
    """The ``docker version --format {{.Server.Version}}`` a package version (or glob) gives.

    The upstream part of a Debian version: no epoch, no Debian revision
    (``5:27.5.1-1~debian.12~bookworm`` -> ``27.5.1``; ``20.10.24+dfsg1-*`` -> ``20.10.24+dfsg1``).
    """
    upstream = apt_version.split(":", 1)[-1]
    return upstream.rsplit("-", 1)[0] if "-" in upstream else upstream


def daemon_json(settings: DeploySettings) -> str:
    """Render ``/etc/docker/daemon.json``: defaults, then ``docker_daemon``, then registries.

    Returns:
        Pretty JSON with sorted keys and a final newline, so equal data gives equal bytes
        (and a second converge changes nothing).
    """
    daemon = {**DAEMON_DEFAULTS, **settings.docker_daemon}
    if settings.docker_insecure_registries:
        daemon["insecure-registries"] = sorted(set(settings.docker_insecure_registries))
    return json.dumps(daemon, indent=2, sort_keys=True) + "\n"
