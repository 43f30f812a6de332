"""The one rule of "as wanted": what differs between wanted items and a ``HostState`` read (pure).

The deploy applies the drift (``roles/vllm`` calls operations only for items that drifted) and
``rocmfleet check`` asserts there is none (``fleet/check/test_vllm.py``). An item the read did not
report drifts (``not read``): the operation then reads and decides itself, and a check fails
rather than pass on what it could not see.

The same rule covers every item of a :class:`rocmfleet.plan.model.HostPlan` (files, directories,
packages, units, paths kept absent): :func:`plan_wanted` turns a host's plan into wanted items,
and :mod:`rocmfleet.plan.hostdrift` gives ``status``, ``--dry`` and ``check`` every role's drift
from the one plan.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from rocmfleet.facts.state import Gathered
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.plan.model import HostPlan


@dataclass(frozen=True)
class WantedUnit:
    """A systemd unit as ``systemd.service(running=True, enabled=True)`` leaves it.

    Attributes:
        unit: ``vllm-<name>.service``.
        running: ``ActiveState`` is ``active``.
        enabled: ``UnitFileState`` is ``enabled`` (never ``static`` or ``indirect``).
    """

    unit: str
    running: bool | None = True
    enabled: bool = True


@dataclass(frozen=True)
class WantedMode:
    """A file that must exist with a mode and owner, its content unknown here (a secrets file in
    ``rocmfleet check``, which never holds the secret values).

    Attributes:
        path: absolute path on the host.
        mode, user, group: as for :class:`rocmfleet.plan.hoststate.WantedFile`.
    """

    path: str
    mode: str | None = None
    user: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class WantedDir:
    """A directory as ``files.directory`` leaves it: mode and owner (``None``: left alone)."""

    path: str
    mode: str | None = None
    user: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class WantedAbsent:
    """A path that must not exist (``files.file(present=False)``)."""

    path: str


@dataclass(frozen=True)
class WantedPackage:
    """A package as the deploy leaves it: installed (dpkg status ``ii``/``hi``), at a version
    matching ``version`` (a glob; ``None``: any, or one known only on the host), held (``hi``) when ``held``."""

    name: str
    version: str | None = None
    held: bool = False


Wanted = WantedFile | WantedUnit | WantedMode | WantedDir | WantedAbsent | WantedPackage
Field = Literal["not read", "type", "content", "mode", "owner", "active", "enabled", "installed", "version", "held"]


@dataclass(frozen=True)
class Drift:
    """One way an item differs from what is wanted.

    Attributes:
        item: the file's path or the unit's name.
        field: what differs (``not read``, ``type``, ``content``, ``mode``, ``owner``, ``active``, ``enabled``).
        found: what the read found (``"file"``, ``"644"``, ``"root:root"``, ``"failed"``, a SHA-256).
        want: what is wanted, in the same terms.
    """

    item: str
    field: Field
    found: str = ""
    want: str = ""

    def __str__(self) -> str:
        if self.field == "not read":
            return f"{self.item}: not reported by the read"
        return f"{self.item}: {self.field} {self.found or '(none)'}, want {self.want}"


def _same_mode(found: str | None, want: str) -> bool:
    try:
        return found is not None and int(found, 8) == int(want, 8)
    except ValueError:
        return False


def _file_drift(want: WantedFile | WantedMode, observed: Gathered) -> list[Drift]:
    item = observed.paths.get(want.path)
    if item is None:
        return [Drift(want.path, "not read")]
    if item.type != "file":
        return [Drift(want.path, "type", item.type, "file")]
    found: list[Drift] = []
    if isinstance(want, WantedFile) and item.sha256 != want.sha256:
        found.append(Drift(want.path, "content", item.sha256 or "", want.sha256))
    if want.mode is not None and not _same_mode(item.mode, want.mode):
        found.append(Drift(want.path, "mode", item.mode or "", want.mode))
    if (want.user is not None and item.user != want.user) or (want.group is not None and item.group != want.group):
        found.append(
            Drift(
                want.path, "owner", f"{item.user}:{item.group}", f"{want.user or item.user}:{want.group or item.group}"
            )
        )
    return found


def _owner_mode_drift(
    path: str, want: WantedDir, item_mode: str | None, user: str | None, group: str | None
) -> list[Drift]:
    found: list[Drift] = []
    if want.mode is not None and not _same_mode(item_mode, want.mode):
        found.append(Drift(path, "mode", item_mode or "", want.mode))
    if (want.user is not None and user != want.user) or (want.group is not None and group != want.group):
        found.append(Drift(path, "owner", f"{user}:{group}", f"{want.user or user}:{want.group or group}"))
    return found


def _dir_drift(want: WantedDir, observed: Gathered) -> list[Drift]:
    item = observed.paths.get(want.path)
    if item is None:
        return [Drift(want.path, "not read")]
    if item.type != "dir":
        return [Drift(want.path, "type", item.type, "dir")]
    return _owner_mode_drift(want.path, want, item.mode, item.user, item.group)


def _absent_drift(want: WantedAbsent, observed: Gathered) -> list[Drift]:
    item = observed.paths.get(want.path)
    if item is None:
        return [Drift(want.path, "not read")]
    return [] if item.type == "missing" else [Drift(want.path, "type", item.type, "missing")]


def _package_drift(want: WantedPackage, observed: Gathered) -> list[Drift]:
    item = observed.packages.get(want.name)
    if item is None or item.status[1:2] != "i":
        return [Drift(want.name, "installed", item.status.strip() if item else "not installed", "installed")]
    found: list[Drift] = []
    if want.version is not None and not fnmatchcase(item.version, want.version):
        found.append(Drift(want.name, "version", item.version, want.version))
    if want.held and item.status[:1] != "h":
        found.append(Drift(want.name, "held", "not held", "held"))
    return found


def _unit_drift(want: WantedUnit, observed: Gathered) -> list[Drift]:
    item = observed.units.get(want.unit)
    if item is None:
        return [Drift(want.unit, "not read")]
    found: list[Drift] = []
    if want.enabled and item.enabled != "enabled":
        found.append(Drift(want.unit, "enabled", item.enabled, "enabled"))
    if want.running and item.active != "active":
        found.append(Drift(want.unit, "active", item.active, "active"))
    return found


def drift(wanted: Iterable[Wanted], observed: Gathered) -> list[Drift]:
    """Every way ``observed`` differs from ``wanted``, in ``wanted``'s order (empty: as wanted).

    Args:
        wanted: files (content, mode, owner), files known by mode and owner only, and units.
        observed: a ``HostState`` read (``rocmfleet.facts.state.parse_state``) that asked for
            every item of ``wanted`` (an item it lacks drifts as ``not read``).
    """
    found: list[Drift] = []
    for want in wanted:
        if isinstance(want, WantedUnit):
            found += _unit_drift(want, observed)
        elif isinstance(want, WantedDir):
            found += _dir_drift(want, observed)
        elif isinstance(want, WantedAbsent):
            found += _absent_drift(want, observed)
        elif isinstance(want, WantedPackage):
            found += _package_drift(want, observed)
        else:
            found += _file_drift(want, observed)
    return found


def plan_wanted(host: HostPlan) -> list[Wanted]:
    """Every item of ``host`` as :func:`drift` takes it, in the plan's order: files (a rendered
    one by content, mode and owner; a secret or fetched one by mode and owner only), directories,
    packages (a version ``*`` or ``the version of URL`` is not compared offline), units (a unit
    whose state is left alone only enabled), then the paths kept absent.

    Example::

        problems = drift(plan_wanted(fleet_plan.hosts[0]), got)   # got: a HostState read of them
    """
    wanted: list[Wanted] = []
    for f in host.files:
        if f.content is None:
            wanted.append(WantedMode(f.path, f.mode, f.user, f.group))
        else:
            wanted.append(WantedFile(f.path, f.content.encode(), f.mode, f.user, f.group))
    wanted += [WantedDir(d.path, d.mode, d.user, d.group) for d in host.directories]
    for p in host.packages:
        version = None if p.version == "*" or p.version.startswith("the version of ") else p.version
        wanted.append(WantedPackage(p.name, version, p.held))
    wanted += [WantedUnit(u.unit, u.running, u.enabled) for u in host.units]
    wanted += [WantedAbsent(r.path) for r in host.removals]
    return wanted


def query(host: HostPlan) -> dict[str, list[str]]:
    """``HostState`` arguments that read every item :func:`plan_wanted` gives for ``host``."""
    wanted = plan_wanted(host)
    paths = [w.path for w in wanted if not isinstance(w, (WantedUnit, WantedPackage))]
    return {
        "paths": paths,
        "packages": [w.name for w in wanted if isinstance(w, WantedPackage)],
        "units": [w.unit for w in wanted if isinstance(w, WantedUnit)],
    }


def drifted(host: HostPlan, observed: Gathered) -> set[str]:
    """The items of ``host`` that drift on ``observed`` (:func:`drift` of :func:`plan_wanted`), by
    what names them: a file's, directory's or removal's path, a package's or unit's name. A role
    calls its item's operation for each (``roles/*``); empty: the role calls none.

    Args:
        host: a plan, usually one role's items (:func:`rocmfleet.plan.hostdrift.role_items`).
        observed: a ``HostState`` read that asked for :func:`query` of ``host``.
    """
    return {d.item for d in drift(plan_wanted(host), observed)}
