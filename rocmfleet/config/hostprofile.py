"""Which profile a host's data names (an operator's ``group_vars/profiles/<name>.yml`` or a shipped one), and its
image after the host's ``vllm_image_*`` overrides."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)

from rocmfleet.config import groupvars
from rocmfleet.config.errors import Problem, shown
from rocmfleet.config.profiles import (
    PROFILES_DIR,
    Image,
    Profile,
    ProfileError,
    load_profile,
)


def _profile_names(directory: Path) -> set[str]:
    """Names of the profile files in ``directory`` (``.yml`` or ``.yaml``)."""
    return {p.stem for p in (*directory.glob("*.yml"), *directory.glob("*.yaml"))}


def known_profiles(directory: Path) -> list[str]:
    """Names of the profiles an inventory can name: those in ``directory`` and the shipped ones."""
    return sorted(_profile_names(directory) | _profile_names(PROFILES_DIR))


def _known_text(directory: Path) -> str:
    """``yours (DIR): a, b; shipped: c, d`` for a message."""
    own = sorted(_profile_names(directory))
    shipped = sorted(_profile_names(PROFILES_DIR) - set(own))
    mine = f"yours ({groupvars.display(directory)}): {', '.join(own) or 'none'}"
    return f"{mine}; shipped: {', '.join(shipped) or 'none'}"


def profile_path(name: str, directory: Path) -> Path:
    """Where profile ``name`` is read from: ``directory`` (the operator's ``group_vars/profiles``)
    when it has ``<name>.yml``, else the shipped profile of that name (``rocmfleet/profiles``).

    An operator's file of a shipped name replaces the shipped one (copy it, then change it). The
    path returned may not exist (then ``<directory>/<name>.yml``, for the message)."""
    own = directory / f"{name}.yml"
    try:
        for candidate in (own, own.with_suffix(".yaml")):
            if candidate.exists() or candidate.is_symlink():  # a dangling link is theirs, and an error
                return candidate
    except OSError:  # the directory cannot be searched: its reading says so
        return own
    shipped = PROFILES_DIR / f"{name}.yml"
    return shipped if shipped.exists() else own


def profile_of(name: str, directory: Path, problems: list[Problem]) -> Profile | None:
    """The profile ``name`` (``vllm_profile``) names, loaded; None with its problems added to ``problems``."""
    path = profile_path(name, directory)
    try:
        found = path.exists()
    except OSError as exc:
        problems.append(
            Problem(
                "vllm_profile",
                f"cannot search {groupvars.display(directory)}: {exc.strerror or exc}",
                repr(name),
            )  # fmt: skip
        )
        return None
    if not found:
        known = known_profiles(directory)
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        problems.append(
            Problem(
                "vllm_profile",
                f"no profile {groupvars.display(path)}; {hint}known profiles: {_known_text(directory)}",
                repr(name),
            )
        )
        return None
    try:
        return load_profile(path)
    except ProfileError as exc:
        problems += [Problem(key, message, value, file=groupvars.display(path)) for key, message, value in exc.problems]
        return None


def image_of(
    overrides: dict[str, str | None],
    profile: Profile | None,
    directory: Path,
    data: dict[str, Any],
    problems: list[Problem],
) -> Image | None:
    """The profile's image after the host's ``vllm_image_*`` ``overrides`` (``repository``, ``tag``, ``digest``),
    validated; None with its problems added to ``problems`` (a tag without its digest in ``data`` is one)."""
    if data.get("vllm_image_tag") and not data.get("vllm_image_digest"):
        problems.append(
            Problem(
                "vllm_image_tag",
                "a tag needs its digest (vllm_image_digest): a tag alone is never deployed",
                repr(data["vllm_image_tag"]),
            )
        )
    if profile is None:
        return None
    merged = {**profile.image.model_dump(), **{k: v for k, v in overrides.items() if v}}
    try:
        return Image.model_validate(merged)  # after the overrides: model_copy(update=...) would not validate
    except ValidationError as exc:
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "repository"
            key = f"vllm_image_{field}" if overrides.get(field) else f"image.{field}"
            file = "" if overrides.get(field) else groupvars.display(profile_path(profile.name, directory))
            problems.append(Problem(key, err["msg"].removeprefix("Value error, "), shown(err.get("input")), file))
        return None
