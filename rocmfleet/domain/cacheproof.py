"""Proof that a baked image's compile cache was used: strict load mode, and what compiled since the start.

A baked image (:func:`rocmfleet.domain.cachedirs.baked_key_of`) carries its caches in an image
layer; a cache key field that changes per run, or an artefact the image's vLLM cannot load, would
otherwise recompile quietly. Two proofs, the first where the image's vLLM has it:

**Strict load mode** (:data:`STRICT_LOAD`, :func:`strict_env`): ``VLLM_FORCE_AOT_LOAD=1``. vLLM
then re-raises when it cannot load its AOT-compiled model from
``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_<r>_<dp>/model`` (missing,
corrupt, or traced source changed) instead of compiling again: the engine fails at its first
forward pass, so the container never becomes ready and the deploy rolls it back. Sources
(vllm-0.32.0): ``vllm/envs.py`` L796-799 ("Force vllm to always load AOT compiled models from
disk. Failure to load will result in a hard error when this is enabled. Will be ignored when
VLLM_USE_AOT_COMPILE is disabled."), ``vllm/compilation/decorators.py`` L285-343
(``_try_load_aot_compiled_fn``: ``if envs.VLLM_FORCE_AOT_LOAD: raise e``, L339-340) and L547-587
(only with ``VLLM_USE_AOT_COMPILE``, and not with ``VLLM_DISABLE_COMPILE_CACHE``); vLLM leaves
the variable out of its own compile hash (``vllm/envs.py`` L2383, vllm-project/vllm PR #30809,
merged 2025-12-16), so the baked artefact's path is the same with it set. It covers vLLM's AOT
artefact only: Triton kernels and AITER modules missing from the layer are still built quietly,
which the second proof sees.

**Compiled since the start** (:func:`parse`, :func:`compiled`, :func:`miss_line`), any vLLM:
``rocmfleet/scripts/cache-proof.sh`` lists, inside the container, the files under the
:data:`~rocmfleet.domain.cachedirs.LAYOUT` paths newer than the container's start (the baked
layer's files keep their bake-time modification times, ``cache-bake.sh pack``), and vLLM's log
lines that say it compiled (:data:`COMPILE_LOG`). Read after the readiness wait and warm-up (the
deploy) or any time later (``rocmfleet check --select cache``), a hit shows neither.

Pure functions only; the deploy (``rocmfleet.operations.vllm.cache_proof``) and the check
(``rocmfleet/fleet/check/test_cache.py``) run the script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from packaging.version import Version

from rocmfleet import scripts
from rocmfleet.domain import cachedirs

#: vLLM's strict AOT load switch and the first release rocmfleet sets it for. The variable is read
#: in vllm-0.32.0 (``vllm/envs.py`` L799) and existed before vllm-project/vllm PR #30809 (merged to
#: main 2025-12-16, ahead of the 0.14.0 branch), which changed how it is hashed; earlier releases
#: were not checked, so they get the second proof only.
STRICT_LOAD = ("VLLM_FORCE_AOT_LOAD", "0.14.0")
#: Switches under which vLLM ignores :data:`STRICT_LOAD` (module docstring): AOT compile off
#: (``VLLM_USE_AOT_COMPILE``, vllm-0.32.0 ``vllm/envs.py`` L377-386) or the compile cache off
#: (``VLLM_DISABLE_COMPILE_CACHE``, L373-374, decorators.py L586).
AOT_OFF = ("VLLM_USE_AOT_COMPILE", "0")
CACHE_OFF = ("VLLM_DISABLE_COMPILE_CACHE", "1")

#: vLLM log lines that say it compiled rather than loaded (a regular expression each, with source):
COMPILE_LOG: tuple[tuple[str, str], ...] = (
    # a piecewise graph compiled (older releases: "for dynamic shape", "for general shape")
    (r"Compiling a graph for", "vllm-0.32.0 vllm/compilation/backends.py L398-400"),
    # the AOT artefact was there but did not load; vLLM compiles again (without strict mode)
    (
        r"Compiling model again due to a load failure from",
        "vllm-0.32.0 vllm/compilation/decorators.py L333-338",
    ),
    (
        r"Cannot load aot compilation from path",
        "vllm/compilation/decorators.py before vllm-project/vllm PR #36358 (merged 2026-03-07)",
    ),
)
#: The same, as one expression for ``grep -E`` in ``cache-proof.sh`` (its third argument).
COMPILE_LOG_GREP = "|".join(pattern for pattern, _ in COMPILE_LOG)
#: Writers (:func:`rocmfleet.domain.cachedirs.writer_of`) whose files are no compiled code: vLLM's
#: model-info cache and other files outside ``torch_compile_cache``.
NOT_COMPILED = frozenset({"vLLM (other)"})
#: How many paths of each writer, and log lines, a miss line quotes.
QUOTED = 3


def strict_env(vllm_version: str, env: Mapping[str, str]) -> dict[str, str]:
    """``{"VLLM_FORCE_AOT_LOAD": "1"}`` for a baked image's container, where it takes effect; else ``{}``.

    Args:
        vllm_version: the image's vLLM version (the profile's ``vllm_version``, e.g. ``0.33.0``).
        env: the container environment without it (profile, ``vllm_env``...): a value of
            :data:`STRICT_LOAD` there is the operator's and is kept (``{}``); with AOT compile or the
            compile cache turned off there (:data:`AOT_OFF`, :data:`CACHE_OFF`) vLLM ignores it
            (``{}``).

    Call it for baked images only: an unbaked image's first start must compile.
    """
    name, since = STRICT_LOAD
    if name in env or Version(vllm_version) < Version(since):
        return {}
    if env.get(AOT_OFF[0]) == AOT_OFF[1] or env.get(CACHE_OFF[0]) == CACHE_OFF[1]:
        return {}
    return {name: "1"}


def command(container: str) -> str:
    """Shell that reads the proof of ``container`` (``rocmfleet/scripts/cache-proof.sh`` over every
    :data:`~rocmfleet.domain.cachedirs.LAYOUT` path, with :data:`COMPILE_LOG_GREP`); :func:`parse`
    reads its output."""
    return scripts.command("cache-proof.sh", container, COMPILE_LOG_GREP, *(d.path for d in cachedirs.LAYOUT))


@dataclass(frozen=True)
class Proof:
    """What ``cache-proof.sh`` found in one container.

    Attributes:
        started: the container's ``State.StartedAt`` (RFC 3339); empty when it is not running.
        files: container paths of files under the cache paths newer than ``started``.
        logs: vLLM's log lines since ``started`` that say it compiled (:data:`COMPILE_LOG`).
        problem: why the proof could not be read (no container, ``find`` failed); empty otherwise.
    """

    started: str = ""
    files: tuple[str, ...] = ()
    logs: tuple[str, ...] = ()
    problem: str = ""


def parse(output: str) -> Proof:
    """The :class:`Proof` of ``cache-proof.sh`` output.

    Args:
        output: tab-separated lines ``started\\t<RFC 3339>``, ``file\\t<path>``, ``log\\t<line>``,
            ``problem\\t<text>``, and a last line ``end``.

    Raises:
        ValueError: an unknown line, or no ``end`` line (output cut short).
    """
    started, problem = "", ""
    found: dict[str, list[str]] = {"file": [], "log": []}
    lines = output.splitlines()
    if not lines or lines[-1] != "end":
        raise ValueError(f"cache-proof.sh output has no 'end' line (cut short): {output[-300:]!r}")
    for number, line in enumerate(lines[:-1], 1):
        kind, sep, value = line.partition("\t")
        if not sep:
            raise ValueError(f"cache-proof.sh output line {number}: expected '<kind>\\t<value>', got {line!r}")
        if kind == "started":
            started = value
        elif kind == "problem":
            problem = "; ".join(p for p in (problem, value) if p)
        elif kind in found:
            found[kind].append(value)
        else:
            raise ValueError(f"cache-proof.sh output line {number}: unknown kind {kind!r}")
    return Proof(started, tuple(found["file"]), tuple(found["log"]), problem)


def _is_lock(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatchcase(name, pattern) for pattern in cachedirs.LOCK_NAMES)


def compiled(proof: Proof) -> dict[str, list[str]]:
    """``{writer: [container path, ...]}`` of the compiled files in ``proof``, writers sorted.

    A file's writer is :func:`rocmfleet.domain.cachedirs.writer_of` of its layout path; lock files
    (:data:`~rocmfleet.domain.cachedirs.LOCK_NAMES`) and :data:`NOT_COMPILED` writers are left out.
    """
    by_writer: dict[str, list[str]] = {}
    for path in proof.files:
        relative = cachedirs.layout_relative(path)
        writer = cachedirs.writer_of(relative) if relative else f"unknown ({path})"
        if writer in NOT_COMPILED or _is_lock(path):
            continue
        by_writer.setdefault(writer, []).append(path)
    return dict(sorted(by_writer.items()))


def miss_line(instance: str, proof: Proof) -> str | None:
    """One line naming what compiled in ``instance``'s baked container, or ``None`` on a hit.

    Example: ``lab-tiny-llama-0: 3 files compiled since the start of the baked container
    (2026-12-04T20:25:04Z): Triton: 2 (/root/.triton/cache/ab/k.hsaco, ...), TorchInductor: 1
    (...); vLLM logged: 'Compiling a graph for compile range (1, 8192) takes 2.10 s'``.

    Raises:
        ValueError: ``proof.problem`` is set (nothing was proven either way).
    """
    if proof.problem:
        raise ValueError(f"{instance}: {proof.problem}")
    files = compiled(proof)
    if not files and not proof.logs:
        return None
    count = sum(len(paths) for paths in files.values())
    parts = [
        f"{writer}: {len(paths)} ({', '.join(paths[:QUOTED])}{', ...' if len(paths) > QUOTED else ''})"
        for writer, paths in files.items()
    ]
    line = f"{instance}: {count} file(s) compiled since the start of the baked container ({proof.started})"
    if parts:
        line += ": " + ", ".join(parts)
    if proof.logs:
        quoted = ", ".join(repr(_message(log)) for log in proof.logs[:QUOTED])
        more = f" and {len(proof.logs) - QUOTED} more" if len(proof.logs) > QUOTED else ""
        line += f"; vLLM logged: {quoted}{more}"
    return line


def _message(log: str) -> str:
    """A log line from its first :data:`COMPILE_LOG` match on (vLLM's prefix of level, time and file dropped)."""
    for pattern, _ in COMPILE_LOG:
        match = re.search(pattern, log)
        if match:
            return log[match.start() :][:200]
    return log[:200]
