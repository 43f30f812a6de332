"""Compliance of the Docker role: the engine running, enabled, and configured as rendered."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain import docker
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import expect
from rocmfleet.plan import hoststate

if TYPE_CHECKING:
    from testinfra.host import Host

    from rocmfleet.config.settings import HostConfig


def test_docker_running(host: Host) -> None:
    """docker.service is active and enabled, and ``docker info`` answers."""
    service = expect.unit_state(host, expect.DOCKER_UNIT)
    assert service.active in expect.RUNNING, f"docker.service is {service.active}, not active"
    assert service.enabled == "enabled", f"docker.service is {service.enabled}, not enabled"
    info = expect.docker_info(host)
    assert info.rc == 0, f"docker info failed: {info.stderr.strip()}"


def test_docker_version_pinned_and_held(host: Host, config: HostConfig) -> None:
    """The running server is the version group data pins (``docker_version``), and apt holds it."""
    version = config.settings.docker_version
    if not version:
        pytest.skip("docker_version is not set: Docker is not pinned")
    server, wanted = expect.docker_server(host)[0], docker.server_version_pattern(version)
    assert fnmatchcase(server, wanted), f"Docker server {server} running, docker_version pins {version} ({wanted})"
    engine = docker.ENGINE_PACKAGES[config.settings.docker_source]
    held = host.run("apt-mark showhold " + " ".join(engine))
    if held.rc != 0:
        raise CannotCheck(f"apt-mark showhold failed: {held.stderr.strip()[-300:]}")
    unheld = sorted(set(engine) - set(held.stdout.split()))
    assert not unheld, f"not held by apt: {', '.join(unheld)} (apt-mark hold keeps upgrades from moving Docker)"


def test_daemon_json_as_rendered(host: Host, config: HostConfig) -> None:
    """``daemon.json`` holds exactly what the deploy writes (its rule: the file's SHA-256), each
    differing key named when the file parses."""
    kind = expect.path_state(host, expect.DAEMON_JSON).type
    assert kind == "file", f"{expect.DAEMON_JSON} is {kind}, not a regular file"
    content = docker.daemon_json(config.settings)
    if hoststate.sha256_is(expect.gathered(host), expect.DAEMON_JSON, content.encode()):
        return
    live = docker.parse_daemon_json(expect.text(host, expect.DAEMON_JSON) or "")  # None: unreadable, refused
    wanted = json.loads(content)
    differ = sorted(k for k in wanted.keys() | live.keys() if wanted.get(k) != live.get(k))
    raise AssertionError(
        "daemon.json differs from what the deploy writes"
        + (
            " in " + ", ".join(f"{k}: {live.get(k)!r}, want {wanted.get(k)!r}" for k in differ)
            if differ
            else " in its bytes (the same keys and values, written otherwise)"
        )
    )


def test_live_restore_active(host: Host, docker_running: None) -> None:
    """The running dockerd has live-restore on (not only daemon.json): the vLLM units rely on it so
    that a Docker restart or upgrade leaves the containers serving (docs/host.md: the unit and the container)."""
    info = expect.docker_info(host)
    assert info.rc == 0, f"docker info failed: {info.stderr.strip()}"
    assert expect.docker_server(host)[1], (
        "dockerd runs without live-restore: a restart of docker.service would stop every vLLM container; "
        "deploy (daemon.json sets it) or `systemctl reload docker` once daemon.json has it"
    )
