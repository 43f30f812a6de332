"""pyinfra's ``@deploy`` with the signature of the function it wraps, for the type checker.

pyinfra types a deploy like an operation (``PyinfraOperation``): its ``__call__`` puts pyinfra's
global arguments (``_sudo``...) before the function's own, so a positional argument reads as
``_sudo``, and it returns ``OperationMeta``. At run time ``pyinfra.api.deploy._wrap_deploy`` calls
the function with the same arguments and returns what it returns (the roles return values the
deploy file uses), which is what :func:`deploy` says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar, cast

from pyinfra.api.deploy import deploy as pyinfra_deploy

P = ParamSpec("P")
R = TypeVar("R")


def deploy(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``pyinfra.api.deploy(name)``: the same wrapper, typed as the function it wraps."""

    def decorator(func: Callable[P, R]) -> Callable[P, R]:
        return cast(Callable[P, R], pyinfra_deploy(name)(func))

    return decorator
