"""Facts about kernel tunables."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api.facts import FactBase


class SysctlLive(FactBase[dict[str, Any]]):
    """
    Live value of a sysctl and whether it can be written here:
    ``{"value": "1", "writable": False}``; ``value`` is None when the kernel lacks the key.
    ``/proc/sys`` is read-only inside a container, so ``writable`` is False there.
    """

    default = dict

    def command(self, key: str) -> str:
        path = shlex.quote("/proc/sys/" + key.replace(".", "/"))
        return (
            f'if [ -e {path} ]; then echo "value $(cat {path})"; '
            f"if [ -w {path} ]; then echo writable; fi; else echo absent; fi"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        info: dict[str, Any] = {"value": None, "writable": False}
        for line in output:
            if line.startswith("value "):
                info["value"] = line[6:].strip()
            elif line.strip() == "writable":
                info["writable"] = True
        return info
