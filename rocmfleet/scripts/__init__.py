"""Shell that runs on hosts, kept as real files (shellcheck-clean) beside this module.

pyinfra runs a command string, so a script is sent as ``sh -c '<its text>' <name> ARGS...``
(:func:`command`): the file is the program, the arguments are data, nothing is generated.
"""

from __future__ import annotations

import shlex
from functools import cache
from importlib import resources
from pathlib import Path

#: The scripts' folder (package data, ``importlib.resources``; a plain folder for a wheel or a checkout).
DIR = Path(str(resources.files(__package__)))


@cache
def text(name: str) -> str:
    """The text of ``rocmfleet/scripts/<name>`` (e.g. ``vllm-probe.sh``)."""
    return resources.files(__package__).joinpath(name).read_text()


def command(name: str, *args: object) -> str:
    """``sh -c '<text of name>' name ARGS...``: run the script on a host with ``args`` as ``$1``...

    Example: ``command("vllm-probe.sh", "owner", 8000, "vllm-a")``.
    """
    return shlex.join(["sh", "-c", text(name), name, *(str(a) for a in args)])


def in_wait(name: str, *args: object) -> str:
    """``sh "$RF_SCRIPTS"/name ARGS...``: shell for ``vllm-wait.sh`` to run (a target's READY or
    BACK_READY), calling ``name`` (``vllm-probe.sh`` or ``vllm-warmup.sh``) from the directory
    where ``vllm-wait.sh`` wrote the texts it carries once, instead of a copy of the text per
    target (:func:`command`): the wait command stays small for any number of instances.

    Example: ``in_wait("vllm-probe.sh", "ready", 8000, "vllm-a", '"tiny-llama"', "{}")``.
    """
    return 'sh "$RF_SCRIPTS"/' + name + " " + shlex.join(str(a) for a in args)
