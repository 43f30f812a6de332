"""The host data keys of pyinfra's SSH connector, read from pyinfra itself.

A leaf: :mod:`rocmfleet.config.settings` refuses an ``ssh_*`` key pyinfra does not know, and
:mod:`rocmfleet.fleet.connect` passes the known ones to pyinfra's connector; both read the list here.
"""

from __future__ import annotations

import functools


@functools.cache
def pyinfra_ssh_keys() -> list[str]:
    """Every host data key of pyinfra's SSH connector (``ssh_port``, ``ssh_config_file``, ...), sorted.

    Read from pyinfra's own connector data class (``SSHConnector.data_cls``, the ``ConnectorData``
    of ``pyinfra/connectors/ssh.py``), never restated here. Cached: read once per process (it is
    asked per host); callers must not change the list.
    """
    from pyinfra.connectors.ssh import SSHConnector

    return sorted(SSHConnector.data_cls.__annotations__)
