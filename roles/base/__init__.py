"""Base role: apt proxy and base packages, applied from the host's plan (``rocmfleet.plan.roleitems.base_items``)."""

from __future__ import annotations

from pyinfra.context import host

from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations import planitems
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import drift
from rocmfleet.plan.baseplan import APT_LOCK_FILE, APT_PROXY_FILE
from rocmfleet.plan.model import HostPlan

#: The operation name pyinfra prints for each of the role's files (operators and lab tests know these).
FILE_NAMES = {APT_LOCK_FILE: "Make apt wait for a held dpkg lock", APT_PROXY_FILE: "Configure apt proxy"}


@deploy("base")
def apply(items: HostPlan, got: Gathered | None = None) -> None:
    """Make apt wait for a held dpkg lock, point apt at ``apt_proxy`` (or remove our proxy file) and
    install ``base_packages``: an operation per item of ``items`` that drifted.

    A first boot often finds unattended-upgrades or apt-daily holding the dpkg lock; pyinfra's apt
    operations fail at once then. ``DPkg::Lock::Timeout`` (apt >= 1.9.11, ``apt.conf(5)``) makes
    every apt-get of the deploy wait up to ``apt_lock_timeout_s``; past it apt fails the host
    with ``Could not get lock ... It is held by process PID (NAME)``.

    Args:
        items: the base role's items of the host's plan (``hostdrift.role_items(plan, "base")``).
        got: the host's ``HostState`` read with (at least) ``drift.query(items)``; read here when
            not given. An item it could not see drifts: its operation reads and decides.
    """
    got = got if got is not None else host.get_fact(HostState, **drift.query(items))
    drifted = drift.drifted(items, got)
    for f in items.files:
        if f.path in drifted:
            planitems.file(name=FILE_NAMES.get(f.path, f"Render {f.path}"), item=f)
    for r in items.removals:
        if r.path in drifted:
            planitems.absent(name="Remove apt proxy" if r.path == APT_PROXY_FILE else f"Remove {r.path}", item=r)
    packages = [p for p in items.packages if p.name in drifted]
    if packages:
        planitems.packages(name="Install base packages", items=packages)
