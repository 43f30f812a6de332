"""The table of :mod:`rocmfleet.domain.flags` applied: :func:`render` turns version-neutral serving settings into
the environment and ``vllm serve`` arguments of one vLLM version, refusing (:class:`rocmfleet.domain.flags.FlagError`)
what that version cannot take; :func:`env_passthrough_problems` checks an environment the table does not render."""

from __future__ import annotations

import json
from typing import Any

from packaging.version import InvalidVersion, Version

from rocmfleet.domain.flags import (
    ARG_ALIASES,
    BEYOND_VERSION,
    FLAGS,
    LOWEST_VERSION,
    NEWEST_KNOWN,
    OLDEST_KNOWN,
    PARALLEL_SIZES,
    REFUSED_ARGS,
    REMOVED,
    SERVE_OWNED,
    Flag,
    FlagError,
    Rendered,
    ServingSettings,
    compact_json,
)
from rocmfleet.domain.serveflags import serve_flags, unknown_flag_problem


def parse_version(vllm_version: str) -> Version:
    """The vLLM version, or :class:`FlagError` if it is not one or lies outside the table."""
    try:
        version = Version(vllm_version)
    except InvalidVersion:
        raise FlagError([f"not a vLLM version: {vllm_version!r}"]) from None
    if version < LOWEST_VERSION:
        raise FlagError([f"vLLM {vllm_version} is older than the oldest version the flag table knows ({OLDEST_KNOWN})"])
    if version >= BEYOND_VERSION:
        raise FlagError(
            [
                f"vLLM {vllm_version} is newer than the newest version the flag table knows ({NEWEST_KNOWN}.x); "
                "check its flags and extend rocmfleet/domain/flags.py first"
            ]
        )
    return version


def _show(setting: str, value: Any) -> str:
    return f"{setting}={json.dumps(value) if isinstance(value, bool) else value}"


def _refusal(setting: str, value: Any, rows: list[Flag], vllm_version: str, version: Version) -> str:
    why = []
    for f in rows:
        what = f.describe(value) if f.kind != "default" else "it"
        if version < Version(f.since):
            why.append(f"{what} was added in vLLM {f.since}")
        else:
            why.append(f"{what} was removed in vLLM {f.until}")
        if f.note:
            why[-1] += f"; {f.note}"
    return f"{_show(setting, value)}: vLLM {vllm_version} does not know it: " + "; ".join(why or ["no rendering"])


def _managed() -> dict[str, str]:
    """Env var or flag name -> the setting that renders it."""
    names = {f.name: f.setting for f in FLAGS if f.kind in ("env", "arg") and f.name}
    names["--compilation-config"] = "cudagraph_mode"
    return names


def _given(token: str) -> str:
    """The flag of an ``extra_args`` item as written: ``-tp`` of ``-tp=2``, ``--a`` of ``"--a 1"``."""
    return (token.split("=", 1)[0].split(None, 1) or [""])[0]


def _flag_name(token: str) -> str:
    """The flag vLLM's parser takes ``token`` for: ``_`` read as ``-`` in a long flag
    (``FlexibleArgumentParser``, vllm-0.33.0 ``vllm/utils/argparse_utils.py``), ``--no-X`` as ``--X``,
    a dotted ``--a.b`` as ``--a``, aliases resolved, and an abbreviation taken for the flag it
    abbreviates (argparse's ``allow_abbrev``, on in vLLM's parser) when it abbreviates one this
    module knows."""
    name = _given(token)
    if name.startswith("-O"):
        return "-O"
    name = name.split(".", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    if name.startswith("--no-"):
        name = "--" + name[5:]
    name = ARG_ALIASES.get(name, name)
    if name.startswith("--") and len(name) > 3 and not name.endswith("-") and name not in _known_flags():
        longer = [f for f in _known_flags() if f.startswith(name)]
        name = longer[0] if len(longer) == 1 else name  # several: ambiguous (serveflags says so)
    return name


def _known_flags() -> set[str]:
    """Every long ``vllm serve`` flag this module names (rendered, owned, refused)."""
    rendered = {f.name for f in FLAGS if f.kind == "arg" and f.name}
    named = {*rendered, "--compilation-config", *SERVE_OWNED, *PARALLEL_SIZES, *REFUSED_ARGS, *ARG_ALIASES.values()}
    return {f for f in named if f.startswith("--")}


def env_passthrough_problems(names: list[str], vllm_version: str, where: str) -> list[str]:
    """The same rules as for ``extra_env`` (:func:`render`) for variables from another source, e.g.
    host data's ``vllm_env``: a variable ``vllm_version`` no longer has (with its replacement), or
    one the table renders (naming the setting that owns it). Lines start ``<where> <NAME>:``.

    Raises:
        FlagError: ``vllm_version`` is not a version the table knows.
    """
    version = parse_version(vllm_version)
    return _passthrough_problems(ServingSettings(extra_env=dict.fromkeys(names, "")), vllm_version, version, where)


def _passthrough_problems(
    settings: ServingSettings, vllm_version: str, version: Version, env_where: str = "extra_env"
) -> list[str]:
    managed, removed, problems = _managed(), {r.name: r for r in REMOVED}, []
    names = [(env_where, name, name) for name in settings.extra_env]
    names += [("extra_args", _given(t), _flag_name(t)) for t in settings.extra_args if t.startswith("-")]
    for token in settings.extra_args:
        flag, sep, _ = token.partition("=")
        if token[:1].isspace() or token[:1] in "\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d":
            problems.append(
                f"extra_args {token!r}: starts with {token[:1]!r}, not '-': vLLM would take it for the model "
                "argument and refuse to start"
            )
        elif token.startswith("-") and any(c.isspace() for c in flag):
            parts = token.split(None, 1)
            fix = f"give {parts!r} or '{parts[0]}={parts[1]}'" if len(parts) > 1 else f"give {parts[0]!r}"
            problems.append(
                f"extra_args {token!r}: white space inside a flag; vLLM gets each item as one argument "
                f"(no shell splits it): {fix}"
            )
    for where, given, name in names:
        gone = removed.get(name)
        if where == "extra_args" and name in SERVE_OWNED:
            owner = SERVE_OWNED[name]
            problems.append(f"extra_args {given}: rendered for every instance from {owner}; set that instead")
            continue
        if where == "extra_args" and name in REFUSED_ARGS:
            problems.append(f"extra_args {given}: {REFUSED_ARGS[name]}")
            continue
        if where == "extra_args" and name in PARALLEL_SIZES:
            problems.append(
                f"extra_args {given}: rocmfleet runs one rank per GPU of an instance (its world is "
                f"tensor_parallel_size); a {PARALLEL_SIZES[name]} parallel size would need more GPUs than it is "
                "given: set tensor_parallel_size and the instance's GPUs, or run more instances (instances_per_host)"
            )
            continue
        if gone and version >= Version(gone.gone) and not (where == "extra_args" and name in serve_flags(vllm_version)):
            use = gone.use if gone.use.startswith("no ") else f"use {gone.use}"
            problems.append(
                f"{where} {given}: vLLM {vllm_version} does not know it: {name} was removed {gone.when}; {use}"
            )
        elif name == "-O":
            problems.append(
                f"{where} {given}: -O meant --compilation-config up to vLLM 0.11.0 and means "
                "--optimization-level in 0.13+ (reference §4.4): write the long form (--optimization-level N), or "
                "set cudagraph_mode for CUDA graphs"
            )
        elif name in managed:
            problems.append(f"{where} {given}: rendered from setting {managed[name]}; set that instead")
        elif where == "extra_args" and (unknown := unknown_flag_problem(name, given, vllm_version)):
            problems.append(unknown)
    return problems


def render(settings: ServingSettings, vllm_version: str) -> Rendered:
    """Render ``settings`` for ``vllm_version`` from :data:`FLAGS`.

    Env values of bool settings are ``"1"``/``"0"``; arguments come in table order, then
    ``extra_args``; the ``--compilation-config`` JSON is one line with sorted keys.

    Raises:
        FlagError: the version is unknown, or (all listed at once) a setting this version does
            not know (with its replacement), a rendering whose prerequisite is unmet, or an
            ``extra_env``/``extra_args`` entry that the table renders or that vLLM removed.
    """
    version = parse_version(vllm_version)
    env: dict[str, str] = {}
    args: list[str] = []
    compilation: dict[str, Any] = {}
    compilation_at = 0
    problems: list[str] = []
    seen: set[str] = set()
    for f in FLAGS:
        value = getattr(settings, f.setting)
        if value is None or not f.matches(value) or not f.applies(version):
            continue
        seen.add(f.setting)
        if f.requires is not None and not f.requires(settings):
            problems.append(f"{_show(f.setting, value)} in vLLM {vllm_version} needs {f.needs}")
        out = f.rendered(value)
        if f.kind == "env":
            env[f.key] = str(out)
        elif f.kind == "arg":
            args += [f.key] if out is True else [f.key, str(out)]
        elif f.kind == "json":
            if not compilation:
                compilation_at = len(args)
            compilation[f.key] = out
    if compilation:
        args[compilation_at:compilation_at] = ["--compilation-config", compact_json(compilation)]
    for setting in ServingSettings.model_fields:
        value = getattr(settings, setting)
        if value is not None and setting not in seen and setting not in ("extra_env", "extra_args"):
            rows = [f for f in FLAGS if f.setting == setting and f.matches(value)]
            problems.append(_refusal(setting, value, rows, vllm_version, version))
    problems += _passthrough_problems(settings, vllm_version, version)
    if problems:
        raise FlagError(problems)
    return Rendered(env={**env, **settings.extra_env}, args=args + list(settings.extra_args))
