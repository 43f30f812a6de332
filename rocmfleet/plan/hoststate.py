"""Wanted state against gathered state (:class:`rocmfleet.facts.state.HostState`): pure functions.

:class:`WantedFile` (:mod:`rocmfleet.plan.wantedfile`) and :func:`render` (file contents rendered
locally, as ``files.template`` renders them) for the plan's items, :func:`gids` (the device nodes'
group ids) and :func:`merge_queries` for the one read. Every role compares through the plan's one
rule (:func:`rocmfleet.plan.drift.drift`); the yes/no predicates left here (:func:`file_ok`,
:func:`packages_installed`, :func:`unit_enabled`) serve ``rocmfleet check`` until it reads the plan.
An item the fact could not read counts as differing: the operation then reads it itself and
decides, so a skipped operation is one that would have changed nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyinfra.api.util import get_template

from rocmfleet import project
from rocmfleet.facts.state import Gathered
from rocmfleet.plan.wantedfile import WantedFile as WantedFile

ROOT = project.PACKAGE


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
