"""Operations for Docker's daemon: a validated ``daemon.json`` and restarts that roll through the fleet.

A Docker restart no longer stops a vLLM container (``live-restore``; the unit follows the
container, ``templates/vllm/vllm.service.j2``), but it is still gated: :func:`restart` runs on at
most ``docker_restart_parallel`` hosts at a time (pyinfra's ``_parallel``), each waits until its
vLLM containers answer again, and once a restart failed in this run no further host restarts.
pyinfra marks the hosts of a failed ``_parallel`` batch failed only after *all* batches ran
(``pyinfra/api/operations.py`` ``_run_single_op``), so the gate is kept here, per run. A change
of keys dockerd reloads (``rocmfleet.domain.docker.RELOADABLE``) is applied with a reload instead.
"""

from __future__ import annotations

import hashlib
import io
import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyinfra.api.command import FunctionCommand, StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host, state
from pyinfra.facts.files import FileContents, Sha256File
from pyinfra.operations import files as file_ops

from rocmfleet import scripts
from rocmfleet.domain import docker
from rocmfleet.facts.docker import PathExists
from rocmfleet.operations import Commands, this_run

if TYPE_CHECKING:
    from pyinfra.api.arguments import ConnectorArguments
    from pyinfra.api.host import Host
    from pyinfra.api.state import State
    from pyinfra.connectors.util import CommandOutput

logger = logging.getLogger("pyinfra")

#: Written with a new daemon.json, removed by the restart (or reload) that applies it: a restart the
#: gate skipped or that failed is still owed at the next deploy. Under /run (tmpfs): a reboot applies
#: the file and clears the mark.
PENDING = "/run/rocmfleet/docker-restart-pending"

#: Docker restarts of this run (pyinfra's ``State``): ``{host name: succeeded}``.
_RESTARTS: weakref.WeakKeyDictionary[object, dict[str, bool]] = weakref.WeakKeyDictionary()
#: Per run and host: whether the daemon.json change written needs a restart (else a reload will do).
_PLANNED: weakref.WeakKeyDictionary[object, dict[str, bool]] = weakref.WeakKeyDictionary()


@operation()
def daemon_json(content: str, path: str = "/etc/docker/daemon.json") -> Commands:
    """
    Write ``daemon.json``, validated by the host's own ``dockerd`` before it replaces the old one.

    + content: the file's text (``rocmfleet.domain.docker.daemon_json``)
    + path: where dockerd reads it

    A no-op when the file already has this content (SHA-256). Otherwise the text goes to
    ``<path>.rocmfleet-new`` (0644, root), ``dockerd --validate --config-file`` checks it where
    dockerd has that option (Docker 23.0 and later), and a rename puts it in place
    (``rocmfleet/scripts/docker-daemon-json.sh``). A file dockerd rejects fails the host and the
    old file stays, so no restart is attempted with it.
    """
    wanted = hashlib.sha256(content.encode()).hexdigest()
    if host.get_fact(Sha256File, path=path) == wanted:
        host.noop(f"{path} is up to date")
        return
    old = host.get_fact(FileContents, path=path)
    _PLANNED.setdefault(this_run(state), {})[host.name] = docker.restart_needed(
        "\n".join(old) if old is not None else None, content
    )
    staged = f"{path}.rocmfleet-new"
    yield from file_ops.put._inner(src=io.StringIO(content), dest=staged, user="root", group="root", mode="644")
    yield StringCommand(scripts.command("docker-daemon-json.sh", staged, path))
    yield StringCommand(f"mkdir -p {PENDING.rsplit('/', 1)[0]} && touch {PENDING}")


def _gate(state: State, host: Host) -> bool:  # noqa: ARG001 - pyinfra passes state and host by name
    failed = sorted(name for name, ok in _RESTARTS.get(state, {}).items() if not ok)
    if failed:
        host.log_styled(
            f"rocmfleet: Docker not restarted here: its restart failed on {', '.join(failed)} in this run; "
            "fix that host and deploy again (the new daemon.json is in place; the next deploy restarts Docker)",
            fg="red",
            log_func=logger.error,
        )
        return False
    return True


class _RecordedCommand(StringCommand):
    """A shell command whose success is kept in this run's record of Docker restarts."""

    def execute(self, state: State, host: Host, connector_arguments: ConnectorArguments) -> tuple[bool, CommandOutput]:
        status, output = super().execute(state, host, connector_arguments)
        _RESTARTS.setdefault(state, {})[host.name] = bool(status)
        return status, output


@operation()
def restart(instances: Sequence[tuple[str, int]], timeout_s: int = 300) -> Commands:
    """
    Restart Docker, then wait until dockerd and the host's vLLM containers answer again; or only
    reload it when :func:`daemon_json` found that every key it changed is one dockerd reloads
    (``rocmfleet.domain.docker.RELOADABLE``: registries, mirrors, download limits...).

    + instances: ``(container, port)`` of the host's vLLM instances (those not running are skipped)
    + timeout_s: seconds for dockerd and every container that ran before to answer again

    Call it with ``_parallel=docker_restart_parallel`` and ``_if`` the change of ``daemon.json``:
    pyinfra then restarts that many hosts at a time, and a batch starts only when the previous
    one is done, i.e. its containers answer again. Once a restart failed in this run, every later
    host fails here without restarting (:func:`_gate`), saying which host failed. It acts only
    while :data:`PENDING` is there (written with a new ``daemon.json``, removed once it is applied),
    so a restart skipped or failed in one run is made by the next.

    **Example:**

    .. code:: python

        docker.restart(name="Restart Docker", instances=[("vllm-a", 8000)], _parallel=1)
    """
    if not state.is_executing:
        host.noop("Docker restarts when daemon.json changed (or a restart is still owed)")
        return
    if not host.get_fact(PathExists, path=PENDING):
        host.noop("no daemon.json change waits for Docker")
        return
    if not _PLANNED.get(this_run(state), {}).get(host.name, True):
        # Only keys dockerd reloads changed (a registry, a mirror...): no restart at all.
        yield StringCommand("systemctl", "reload", "docker.service")
        yield StringCommand("rm", "-f", PENDING)
        return
    pairs = [f"{container}:{port}" for container, port in instances]
    yield FunctionCommand(_gate, (), {})
    yield _RecordedCommand(scripts.command("docker-restart.sh", timeout_s, *pairs))
    yield StringCommand("rm", "-f", PENDING)
