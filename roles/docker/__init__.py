"""Docker role: engine from Docker's repository (or Debian's), ``daemon.json``, service."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.operations import apt

from rocmfleet.config.hostsettings import HostSettings as DeploySettings
from rocmfleet.facts.state import Gathered
from rocmfleet.operations import docker as docker_ops
from rocmfleet.operations import planitems
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import drift
from rocmfleet.plan.model import HostPlan
from rocmfleet.plan.roleitems import DAEMON_JSON

#: Drift of ``daemon.json`` that rewrites it (through dockerd's validation, then a restart or reload);
#: a mode or owner drift alone is mended in place.
CONTENT_FIELDS = ("not read", "type", "content")


def query(settings: DeploySettings) -> dict[str, object]:
    """What the role reads besides its plan items (``HostState`` arguments): the pending restart
    mark and, for Docker's repository, the OS."""
    return {"paths": [docker_ops.PENDING], "os": settings.docker_source == "docker"}


@deploy("docker")
def apply(settings: DeploySettings, items: HostPlan, got: Gathered, instances: Sequence[tuple[str, int]] = ()) -> None:
    """Install Docker per ``docker_source``, write ``daemon.json``, keep ``docker`` running, and restart
    it when ``daemon.json`` changed, rolling through the fleet (:mod:`rocmfleet.operations.docker`):
    an operation per item of ``items`` that drifted on ``got``.

    Args:
        settings: the host's settings (Docker's repository, the restart's timeout and parallelism).
        items: the docker role's items of the host's plan (``hostdrift.role_items(plan, "docker")``).
        got: the host's ``HostState`` read with ``drift.query(items)`` and :func:`query`.
        instances: ``(container, port)`` of the host's vLLM instances, whose answers each restart
            waits for.
    """
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
    found = drift.drift(drift.plan_wanted(items), got)
    drifted = {d.item for d in found}
    held = [p for p in items.packages if p.held]  # the engine's packages, released together: all or none
    if any(p.name in drifted for p in held):
        planitems.packages(name=f"Install Docker {held[0].version} and hold it", items=held)
    plain = [p for p in items.packages if not p.held and p.name in drifted]
    if plain:
        planitems.packages(name="Install Docker", items=plain)
    written = False
    for f in items.files:
        fields = {d.field for d in found if d.item == f.path}
        if f.path == DAEMON_JSON and fields & set(CONTENT_FIELDS) and f.content is not None:
            docker_ops.daemon_json(name="Write /etc/docker/daemon.json (validated by dockerd)", content=f.content)
            written = True
        elif fields:
            planitems.file(name=f"Set the mode and owner of {f.path}", item=f)
    for u in items.units:
        if u.unit in drifted:
            planitems.unit(name="Enable and start Docker", item=u)
    pending = got.paths.get(docker_ops.PENDING)
    if not written and pending is not None and pending.type == "missing":
        return  # no new daemon.json and no restart owed by an earlier run
    # Rolls through the fleet: docker_restart_parallel hosts at a time, each until its vLLM containers
    # answer again (with live-restore they keep serving throughout); a failed restart stops the roll.
    docker_ops.restart(
        name="Restart Docker for the new daemon.json, a few hosts at a time",
        instances=instances,
        timeout_s=settings.docker_restart_timeout_s,
        _parallel=settings.docker_restart_parallel,
    )
