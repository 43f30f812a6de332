"""Docker role: engine from Docker's repository (or Debian's), ``daemon.json``, service."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt, systemd

from rocmfleet import docker
from rocmfleet.operations import docker as docker_ops
from rocmfleet.operations import packages as package_ops
from rocmfleet.settings import HostSettings as DeploySettings


@deploy("docker")
def apply(settings: DeploySettings, instances: Sequence[tuple[str, int]] = ()) -> None:
    """Install Docker per ``docker_source``, write ``daemon.json``, keep ``docker`` running, and restart
    it when ``daemon.json`` changed, rolling through the fleet (:mod:`rocmfleet.operations.docker`).

    Args:
        settings: the host's settings.
        instances: ``(container, port)`` of the host's vLLM instances, whose answers each restart
            waits for.
    """
    if settings.docker_source == "docker":
        codename = host.get_fact(LinuxDistribution)["release_meta"].get("VERSION_CODENAME", "bookworm")
        apt.key(name="Add Docker's apt key", src=settings.docker_key_url, dest="docker.gpg")
        apt.sources_file(
            name="Add Docker's apt repository",
            filename="docker",
            uris=[settings.docker_repo_url],
            suites=[codename],
            components=["stable"],
            architectures=["amd64"],
            signed_by="/etc/apt/keyrings/docker.gpg",
        )
    packages = docker.PACKAGES[settings.docker_source]
    if settings.docker_version:
        engine = docker.ENGINE_PACKAGES[settings.docker_source]
        package_ops.held_at(
            name=f"Install Docker {settings.docker_version} and hold it",
            packages=engine,
            version=settings.docker_version,
        )
        packages = [p for p in packages if p not in engine]
    if packages:
        apt.packages(name="Install Docker", packages=packages, update=True, cache_time=3600, no_recommends=True)
    docker_ops.daemon_json(
        name="Write /etc/docker/daemon.json (validated by dockerd)", content=docker.daemon_json(settings)
    )
    systemd.service(name="Enable and start Docker", service="docker.service", running=True, enabled=True)
    # Rolls through the fleet: docker_restart_parallel hosts at a time, each until its vLLM containers
    # answer again (with live-restore they keep serving throughout); a failed restart stops the roll.
    docker_ops.restart(
        name="Restart Docker for the new daemon.json, a few hosts at a time",
        instances=instances,
        timeout_s=settings.docker_restart_timeout_s,
        _parallel=settings.docker_restart_parallel,
    )
