"""Compliance of the Docker role: the engine running, enabled, and configured as rendered."""

from __future__ import annotations

import json

from rocmfleet import docker


def test_docker_running(host):
    service = host.service("docker.service")
    assert service.is_running, "docker.service is not running"
    assert service.is_enabled, "docker.service is not enabled"
    info = host.run("docker info --format '{{.ServerVersion}}'")
    assert info.rc == 0, f"docker info failed: {info.stderr.strip()}"


def test_daemon_json_as_rendered(host, config):
    path = host.file("/etc/docker/daemon.json")
    assert path.is_file, "/etc/docker/daemon.json is missing"
    try:
        live = json.loads(path.content_string)
    except ValueError as exc:
        raise AssertionError(f"/etc/docker/daemon.json is not JSON ({exc}): {path.content_string[:400]!r}") from None
    wanted = json.loads(docker.daemon_json(config.settings))
    differ = sorted(k for k in wanted.keys() | live.keys() if wanted.get(k) != live.get(k))
    assert not differ, "daemon.json differs in " + ", ".join(
        f"{k}: {live.get(k)!r}, want {wanted.get(k)!r}" for k in differ
    )


def test_live_restore_active(host, docker_running):
    """The running dockerd has live-restore on (not only daemon.json): the vLLM units rely on it so
    that a Docker restart or upgrade leaves the containers serving (README: the unit and the container)."""
    info = host.run("docker info --format '{{.LiveRestoreEnabled}}'")
    assert info.rc == 0, f"docker info failed: {info.stderr.strip()}"
    assert info.stdout.strip() == "true", (
        "dockerd runs without live-restore: a restart of docker.service would stop every vLLM container; "
        "deploy (daemon.json sets it) or `systemctl reload docker` once daemon.json has it"
    )
