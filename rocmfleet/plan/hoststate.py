"""Wanted state against gathered state (:class:`rocmfleet.facts.state.HostState`): pure functions.

:class:`WantedFile` and :func:`render` (file contents rendered locally, as ``files.template``
renders them) for the plan's items, and :func:`merge_queries` for the one read. The roles compare
through the plan's one rule (:func:`rocmfleet.plan.drift.drift`); the yes/no predicates left here
serve the vllm role's own plan (:mod:`rocmfleet.plan.vllmplan`) and ``rocmfleet check``
(:func:`rocmfleet.plan.rocmplan.differs`). An item
the fact could not read counts as differing: the operation then reads it itself and decides, so a
skipped operation is one that would have changed nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyinfra.api.util import get_template

from rocmfleet import project
from rocmfleet.facts.state import Gathered

ROOT = project.PACKAGE


@dataclass(frozen=True)
class WantedFile:
    """A regular file as an operation would leave it.

    Attributes:
        path: absolute path on the host.
        content: its bytes.
        mode: octal digits (``"644"``), or ``None`` when the operation leaves the mode alone.
        user, group: owner names, or ``None`` when the operation leaves them alone.
    """

    path: str
    content: bytes
    mode: str | None = None
    user: str | None = None
    group: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


def render(src: str, **data: object) -> str:
    """``src`` (a template path relative to the package, e.g. ``templates/base/apt-lock.conf.j2``)
    rendered as ``files.template`` renders it (pyinfra's ``get_template``: strict undefined, trailing
    newline kept), locally. Our templates use only the variables passed."""
    return get_template(str(ROOT / src)).render(data)


def _same_mode(got: str | None, want: str | None) -> bool:
    if want is None:
        return True
    try:
        return got is not None and int(got, 8) == int(str(want), 8)
    except ValueError:
        return False


def _same_owner(got_user: str | None, got_group: str | None, user: str | None, group: str | None) -> bool:
    return (user is None or got_user == user) and (group is None or got_group == group)


def file_ok(got: Gathered, want: WantedFile) -> bool:
    """The file exists with ``want``'s content, mode and owner (what ``files.put`` would leave)."""
    item = got.paths.get(want.path)
    return (
        item is not None
        and item.type == "file"
        and item.sha256 == want.sha256
        and _same_mode(item.mode, want.mode)
        and _same_owner(item.user, item.group, want.user, want.group)
    )


def dir_ok(
    got: Gathered, path: str, mode: str | None = None, user: str | None = None, group: str | None = None
) -> bool:
    """``path`` is a directory with this mode and owner (what ``files.directory`` would leave)."""
    item = got.paths.get(path)
    return (
        item is not None
        and item.type == "dir"
        and _same_mode(item.mode, mode)
        and _same_owner(item.user, item.group, user, group)
    )


def absent(got: Gathered, path: str) -> bool:
    """``path`` does not exist (``files.file(present=False)`` would do nothing)."""
    item = got.paths.get(path)
    return item is not None and item.type == "missing"


def same_content(got: Gathered, a: str, b: str) -> bool:
    """Both paths are regular files with the same SHA-256."""
    x, y = got.paths.get(a), got.paths.get(b)
    return x is not None and y is not None and x.type == y.type == "file" and bool(x.sha256) and x.sha256 == y.sha256


def sha256_is(got: Gathered, path: str, content: bytes) -> bool:
    """``path`` is a regular file holding exactly ``content``."""
    item = got.paths.get(path)
    return item is not None and item.type == "file" and item.sha256 == hashlib.sha256(content).hexdigest()


def unit_enabled(got: Gathered, unit: str) -> bool:
    """``unit`` is enabled (``systemd.service(running=None, enabled=True)`` would do nothing)."""
    item = got.units.get(unit)
    return item is not None and item.enabled == "enabled"


def gids(got: Gathered, paths: list[str]) -> list[int]:
    """Numeric group ids of those of ``paths`` that exist, sorted and unique (``DeviceGroupIds``)."""
    found = (got.paths.get(p) for p in paths)
    return sorted({int(i.gid) for i in found if i is not None and i.gid and i.gid.isdigit()})


def packages_installed(got: Gathered, names: Sequence[str]) -> bool:
    """Every package of ``names`` is installed (dpkg status ``ii`` or ``hi``): ``apt.packages``
    would install nothing."""
    return all((p := got.packages.get(n)) is not None and p.status[1:2] == "i" for n in names)


def merge_queries(*queries: Mapping[str, object]) -> dict[str, object]:
    """One ``HostState`` query from several roles' (lists joined without repeats; ``marked``,
    ``ready`` from the one role that asks; ``os`` if any asks)."""
    merged: dict[str, object] = {}
    for query in queries:
        for key, value in query.items():
            if key == "os":
                merged[key] = bool(merged.get(key)) or bool(value)
            elif key in ("marked",):
                merged[key] = value
            else:
                old = list(merged.get(key, []))  # type: ignore[call-overload]
                merged[key] = old + [v for v in value if v not in old]  # type: ignore[attr-defined]
    return merged
