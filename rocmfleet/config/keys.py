"""Which keys a settings model has at a nested location, and the nearest one to a misspelt key.

Example::

    >>> from rocmfleet.domain.benchshape import BenchSettings
    >>> near_key("concurency", model_keys(BenchSettings, ()))
    'concurrencies'
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside ``annotation`` (``X | None``, ``list[X]``, ``dict[str, X]``,
    ``Annotated[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return []
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        args = args[:1]
    elif origin is dict:
        args = args[1:]
    return [m for arg in args for m in _models(arg)]


def _has_dict(annotation: Any) -> bool:
    """``dict[...]`` or ``dict[...] | None``: the next part of a location is a key of data."""
    if typing.get_origin(annotation) is dict:
        return True
    return isinstance(annotation, types.UnionType) and any(_has_dict(a) for a in typing.get_args(annotation))


def model_keys(root: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys of the model found under ``loc`` of ``root`` (list indices and the keys of dicts
    of models walked through), or [] when ``loc`` leads to no model.

    Args:
        root: the top model, e.g. :class:`rocmfleet.config.profiles.Profile`.
        loc: a pydantic error's ``loc`` less its last part, e.g. ``("vllm_instances", 0)``.
    """
    models: list[type[BaseModel]] = [root]
    data_key = False
    for part in loc:
        if isinstance(part, int) or data_key:
            data_key = False
            continue
        fields = [m.model_fields[str(part)] for m in models if str(part) in m.model_fields]
        models = [inner for f in fields for inner in _models(f.annotation)]
        if not models:
            return []
        data_key = any(_has_dict(f.annotation) for f in fields)
    return sorted({k for m in models for k in m.model_fields})


def near_key(key: str, known: Sequence[str]) -> str | None:
    """The known key ``key`` was most likely meant to be, or None.

    difflib's closest matches (ratio >= 0.6), those sharing the first four characters first:
    ``concurency`` is nearer ``concurrencies`` than ``max_concurrency``, which difflib alone ranks
    higher.
    """
    close = difflib.get_close_matches(key, list(known), n=3)
    if not close:
        return None
    same_start = [c for c in close if c[:4].lower() == key[:4].lower()]
    return (same_start or close)[0]


def did_you_mean(key: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` or ``""``."""
    near = near_key(key, known)
    return f"; did you mean {near!r}?" if near else ""
