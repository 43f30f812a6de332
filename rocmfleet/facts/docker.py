"""Facts about Docker's daemon on a host."""

from __future__ import annotations

import json
import shlex

from pyinfra.api.facts import FactBase


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


class ImageLabels(FactBase[dict[str, str] | None]):
    """
    The labels of a pulled image (``docker image inspect``), ``None`` when it is not there.

    .. code:: python

        host.get_fact(ImageLabels, image="repo:tag@sha256:...")  # {"org.rocmfleet.cache-key": "..."}
    """

    def command(self, image: str) -> str:
        return f"docker image inspect --format '{{{{json .Config.Labels}}}}' {shlex.quote(image)} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str] | None:
        try:
            labels = json.loads(" ".join(output) or "null")
        except ValueError:
            return None
        return labels if isinstance(labels, dict) else {}
