"""Facts about Docker's daemon on a host."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class PathExists(FactBase[bool]):
    """
    Whether ``path`` exists (e.g. the Docker restart owed since a daemon.json change,
    ``rocmfleet.operations.docker.PENDING``).

    .. code:: python

        host.get_fact(PathExists, path="/run/rocmfleet/docker-restart-pending")  # True
    """

    default = bool

    def command(self, path: str) -> str:
        return f"if [ -e {shlex.quote(path)} ]; then echo exists; fi"

    def process(self, output: list[str]) -> bool:
        return output == ["exists"]
