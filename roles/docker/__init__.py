"""Docker role: engine from Docker's repository (or Debian's), ``daemon.json``, service."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.context import host
from pyinfra.operations import apt, systemd

from rocmfleet.config.hostsettings import HostSettings as DeploySettings
from rocmfleet.domain import docker
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations import docker as docker_ops
from rocmfleet.operations import packages as package_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import hoststate

DAEMON_JSON = "/etc/docker/daemon.json"
UNIT = "docker.service"


def query(settings: DeploySettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments): its packages, ``daemon.json``, the pending
    restart mark, the service and the OS (for Docker's repository)."""
    return {
        "paths": [DAEMON_JSON, docker_ops.PENDING],
        "packages": list(docker.PACKAGES[settings.docker_source]),
        "units": [UNIT],
        "os": settings.docker_source == "docker",
    }


@deploy("docker")
def apply(settings: DeploySettings, instances: Sequence[tuple[str, int]] = (), got: Gathered | None = None) -> None:
    """Install Docker per ``docker_source``, write ``daemon.json``, keep ``docker`` running, and restart
    it when ``daemon.json`` changed, rolling through the fleet (:mod:`rocmfleet.operations.docker`).

    Args:
        settings: the host's settings.
        instances: ``(container, port)`` of the host's vLLM instances, whose answers each restart
            waits for.
        got: the host's ``HostState`` read with (at least) :func:`query`'s items; read here when
            not given. Each operation runs only where that state differs from what is wanted.
    """
    got = got if got is not None else host.get_fact(HostState, **query(settings))
    if settings.docker_source == "docker":
        codename = (got.os.codename if got.os else "") or "bookworm"
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
        if not hoststate.packages_held_at(got, engine, settings.docker_version):
            package_ops.held_at(
                name=f"Install Docker {settings.docker_version} and hold it",
                packages=engine,
                version=settings.docker_version,
            )
        packages = [p for p in packages if p not in engine]
    if packages and not hoststate.packages_installed(got, packages):
        apt.packages(name="Install Docker", packages=packages, update=True, cache_time=3600, no_recommends=True)
    content = docker.daemon_json(settings)
    written = not hoststate.sha256_is(got, DAEMON_JSON, content.encode())
    if written:
        docker_ops.daemon_json(name="Write /etc/docker/daemon.json (validated by dockerd)", content=content)
    if not hoststate.unit_running_enabled(got, UNIT):
        systemd.service(name="Enable and start Docker", service=UNIT, running=True, enabled=True)
    if not written and hoststate.absent(got, docker_ops.PENDING):
        return  # no new daemon.json and no restart owed by an earlier run
    # Rolls through the fleet: docker_restart_parallel hosts at a time, each until its vLLM containers
    # answer again (with live-restore they keep serving throughout); a failed restart stops the roll.
    docker_ops.restart(
        name="Restart Docker for the new daemon.json, a few hosts at a time",
        instances=instances,
        timeout_s=settings.docker_restart_timeout_s,
        _parallel=settings.docker_restart_parallel,
    )
