"""Where the scrape targets go: the address a host is scraped at and the file written whole
(``rocmfleet metrics targets -o`` and the deploy's rewrite, :mod:`rocmfleet.plan.targetsdeploy`).

* :func:`scrape_address`: the address rocmfleet's SSH reaches the host at (``ssh_hostname``, else
  the inventory name, each mapped by ``~/.ssh/config``'s ``HostName`` as pyinfra maps it).
* :func:`write_atomic`: a temporary file in the target's directory, then ``rename``: Prometheus's
  file_sd watcher never reads half a file (its ``*.json`` glob does not match the temporary name).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from rocmfleet.config.connection import SshSettings
from rocmfleet.plan import metricstargets as targets

#: The file's mode: Prometheus (often its own user) reads it; nothing secret is in it.
FILE_MODE = 0o644


def scrape_address(ssh: SshSettings) -> str:
    """The address Prometheus should scrape host ``ssh`` at: the one rocmfleet's SSH connects to.

    ``ssh.hostname`` (``ssh_hostname``, else the inventory name), mapped through the SSH config's
    ``HostName`` as pyinfra maps it (``ssh_config_file``, else ``~/.ssh/config``; pyinfra's
    ``sshuserclient.client.get_ssh_config`` and paramiko's ``SSHConfig.lookup``). A host reached
    through ``ProxyJump`` or ``ProxyCommand`` gets its own ``HostName`` all the same, which only a
    Prometheus inside that network can reach (``docs/metrics.md``).
    """
    from pyinfra.connectors.sshuserclient.client import get_ssh_config

    try:
        config = get_ssh_config(ssh.options.get("ssh_config_file"))
        found = config.lookup(ssh.hostname).get("hostname") if config is not None else None
    except Exception:  # noqa: BLE001 - an SSH config paramiko cannot read: the connection says so, not the targets
        found = None
    return str(found or ssh.hostname)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file beside it, flushed, mode :data:`FILE_MODE`,
    then renamed over ``path`` (``rename(2)`` is atomic in one file system).

    Raises:
        OSError: the directory does not exist or cannot be written (the temporary file is removed).
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, FILE_MODE)  # mkstemp's is 0600
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_file(path: str, hosts: list[targets.FleetHost]) -> list[dict[str, Any]]:
    """Write ``hosts``' targets (:func:`rocmfleet.plan.metricstargets.file_sd`) to ``path`` whole.

    Raises:
        OSError: as :func:`write_atomic`.
    """
    groups = targets.file_sd(hosts)
    write_atomic(Path(path).expanduser(), targets.render(groups))
    return groups
