"""Docker role: engine from Docker's repository (or Debian's), ``daemon.json``, service."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt, files, systemd

from rocmfleet import docker
from rocmfleet.operations import packages as package_ops
from rocmfleet.settings import HostSettings as DeploySettings


@deploy("docker")
def apply(settings: DeploySettings) -> None:
    """Install Docker per ``docker_source``, render ``daemon.json``, keep ``docker`` running."""
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
    daemon = files.template(
        name="Render /etc/docker/daemon.json",
        src="templates/docker/daemon.json.j2",
        dest="/etc/docker/daemon.json",
        mode="644",
        daemon_json=docker.daemon_json(settings).rstrip("\n"),
    )
    systemd.service(name="Enable and start Docker", service="docker.service", running=True, enabled=True)
    systemd.service(
        name="Restart Docker for the new daemon.json",
        service="docker.service",
        restarted=True,
        _if=daemon.did_change,
    )
