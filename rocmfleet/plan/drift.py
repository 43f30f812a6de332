"""The one rule of "as wanted": what differs between wanted items and a ``HostState`` read (pure).

The deploy applies the drift (``roles/vllm`` calls operations only for items that drifted) and
``rocmfleet check`` asserts there is none (``fleet/check/test_vllm.py``). An item the read did not
report drifts (``not read``): the operation then reads and decides itself, and a check fails
rather than pass on what it could not see.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from rocmfleet.facts.state import Gathered
from rocmfleet.plan.hoststate import WantedFile


@dataclass(frozen=True)
class WantedUnit:
    """A systemd unit as ``systemd.service(running=True, enabled=True)`` leaves it.

    Attributes:
        unit: ``vllm-<name>.service``.
        running: ``ActiveState`` is ``active``.
        enabled: ``UnitFileState`` is ``enabled`` (never ``static`` or ``indirect``).
    """

    unit: str
    running: bool = True
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


Wanted = WantedFile | WantedUnit | WantedMode
Field = Literal["not read", "type", "content", "mode", "owner", "active", "enabled"]


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
        found += _unit_drift(want, observed) if isinstance(want, WantedUnit) else _file_drift(want, observed)
    return found
