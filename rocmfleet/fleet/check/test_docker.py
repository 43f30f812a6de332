"""Compliance of the Docker role: the engine running, enabled, answering, at its pinned version, live-restore on
(its packages and ``daemon.json``: ``drift::role_as_wanted[docker]``)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain import docker
from rocmfleet.fleet.check import expect

if TYPE_CHECKING:
    from testinfra.host import Host

    from rocmfleet.plan.checkmodel import CheckValues


def test_docker_running(host: Host) -> None:
    """docker.service is active and enabled, and ``docker info`` answers."""
    service = expect.unit_state(host, expect.DOCKER_UNIT)
    # `reloading` is not yet as wanted: systemd has not seen the reload end (the other checks still
    # run then: dockerd serves through a reload, expect.RUNNING)
    assert service.active == "active", f"docker.service is {service.active}, not active"
    assert service.enabled == "enabled", f"docker.service is {service.enabled}, not enabled"
    info = expect.docker_info(host)
    assert info.rc == 0, f"docker info failed: {info.stderr.strip()}"


def test_docker_version_pinned_and_held(host: Host, checks: CheckValues) -> None:
    """The running server is the version group data pins (``docker_version``); the engine's packages
    at that version and held (dpkg's ``hi``, the deploy's rule) are ``drift::role_as_wanted[docker]``'s,
    as is ``daemon.json`` (content, mode, owner)."""
    version = checks.docker_version
    if not version:
        pytest.skip("docker_version is not set: Docker is not pinned")
    server, wanted = expect.docker_server(host)[0], docker.server_version_pattern(version)
    assert fnmatchcase(server, wanted), f"Docker server {server} running, docker_version pins {version} ({wanted})"


def test_live_restore_active(host: Host, docker_running: None) -> None:
    """The running dockerd has live-restore on (not only daemon.json): the vLLM units rely on it so
    that a Docker restart or upgrade leaves the containers serving (docs/host.md: the unit and the container)."""
    info = expect.docker_info(host)
    assert info.rc == 0, f"docker info failed: {info.stderr.strip()}"
    assert expect.docker_server(host)[1], (
        "dockerd runs without live-restore: a restart of docker.service would stop every vLLM container; "
        "deploy (daemon.json sets it) or `systemctl reload docker` once daemon.json has it"
    )
