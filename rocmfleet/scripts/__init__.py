"""Shell that runs on hosts, kept as real files (shellcheck-clean) beside this module.

pyinfra runs a command string, so a script is sent as ``sh -c '<its text>' <name> ARGS...``
(:func:`command`): the file is the program, the arguments are data, nothing is generated.
"""

from __future__ import annotations

import shlex
from functools import cache
from pathlib import Path

DIR = Path(__file__).resolve().parent


@cache
def text(name: str) -> str:
    """The text of ``rocmfleet/scripts/<name>`` (e.g. ``vllm-probe.sh``)."""
    return (DIR / name).read_text()


def command(name: str, *args: object) -> str:
    """``sh -c '<text of name>' name ARGS...``: run the script on a host with ``args`` as ``$1``...

    Example: ``command("vllm-probe.sh", "owner", 8000, "vllm-a")``.
    """
    return shlex.join(["sh", "-c", text(name), name, *(str(a) for a in args)])
