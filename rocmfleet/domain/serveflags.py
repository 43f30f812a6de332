"""Which ``vllm serve`` flags a vLLM release has, from ``vllm_serve_flags.json`` beside this module.

The table is read from every release's source distribution on PyPI by
``tools/vllm_serve_flags.py`` (0.9.0 to 0.33.x; 0.15.0 and 0.15.1 have no source distribution). It
errs wide: a name there may be no flag of that release, but every flag of it is there, so
:func:`unknown_flag_problem` refuses only what the release's parser would refuse.

A version between two sampled releases takes the flags of both (a flag added or removed between
them is accepted either way).
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path

from packaging.version import Version

TABLE = Path(__file__).with_name("vllm_serve_flags.json")


@cache
def _table() -> tuple[list[str], dict[str, list[list[str]]]]:
    data = json.loads(TABLE.read_text())
    return data["releases"], data["flags"]


def _has(runs: list[list[str]], version: Version) -> bool:
    return any(Version(first) <= version <= Version(last) for first, last in runs)


@cache
def serve_flags(vllm_version: str) -> frozenset[str]:
    """Every ``vllm serve`` flag of ``vllm_version`` (long and short forms, e.g. ``--max-model-len``,
    ``-tp``): the sampled release's, or the union of the sampled releases on each side of it.

    Args:
        vllm_version: a release such as ``0.33.0`` (PEP 440).
    """
    releases, flags = _table()
    v = Version(vllm_version)
    below = [r for r in releases if Version(r) <= v][-1:]
    above = [r for r in releases if Version(r) >= v][:1]
    near = [Version(r) for r in {*below, *above}]
    return frozenset(name for name, runs in flags.items() if any(_has(runs, n) for n in near))


def unknown_flag_problem(name: str, given: str, vllm_version: str) -> str | None:
    """Why ``vllm serve`` of ``vllm_version`` would refuse the flag ``name`` (as written: ``given``),
    or None: it is none of its flags and the start of none (argparse takes a prefix of a flag for
    that flag; a prefix of several it refuses as ambiguous, which is left to vLLM: the table holds
    more names than ``vllm serve`` has, so an ambiguity seen here may be none there).

    Args:
        name: the flag as vLLM's parser reads it (``_`` as ``-``, ``--no-`` and a dotted key removed).
        given: the flag as the profile wrote it, for the message.
        vllm_version: the image's vLLM version (the profile's ``vllm_version``).
    """
    if name.strip("-") == "" or name.endswith("-"):
        return f"extra_args {given}: not a flag (vllm serve would take it for a broken option and refuse to start)"
    known = serve_flags(vllm_version)
    if name in known or (name.startswith("--") and any(f.startswith(name) for f in known)):
        return None
    releases, flags = _table()
    if runs := flags.get(name):
        spans = [f"{first} and later" if last == releases[-1] else f"{first} to {last}" for first, last in runs]
        hint = f"; vLLM {', '.join(spans)} have it: use such an image, or drop it"
    else:
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
    return f"extra_args {given}: vLLM {vllm_version} has no such flag (vllm serve would refuse to start){hint}"
