"""Operations that take the host plan's items (:mod:`rocmfleet.plan.model`): what a role calls for an
item that drifted (:func:`rocmfleet.plan.drift.drifted`).

Each one applies one kind of item with pyinfra's own operation, which reads the host again and
decides (an item the deploy's read could not see counts as drifted, and a no-op here is then
still a no-op): a file of rendered content (``files.put``), a path kept absent (``files.file``),
packages (``apt.packages``, or :func:`rocmfleet.operations.packages.held_at` for a version held),
a unit's state (``systemd.service``).

Example::

    for f in items.files:
        if f.path in drifted:
            planitems.file(name=f"Render {f.path}", item=f)
"""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO

from pyinfra.api.operation import operation
from pyinfra.operations import apt, files, systemd

from rocmfleet.operations import Commands
from rocmfleet.operations import packages as package_ops
from rocmfleet.plan.model import DirectoryPlan, FilePlan, PackagePlan, Removal, UnitPlan

#: ``apt.packages``' ``cache_time`` (seconds): the lists are updated before an install unless updated
#: within the hour (what the base and docker roles always used).
APT_CACHE_TIME_S = 3600


@operation()
def file(item: FilePlan) -> Commands:
    """
    Write a plan's file: its content, mode and owner (``None``: left alone), as ``files.put``.

    + item: a :class:`rocmfleet.plan.model.FilePlan` whose ``content`` is known (rendered)

    A file the plan knows only by source (fetched, secret) is not this operation's: that raises
    ``ValueError`` naming the path and its source.

    **Example:**

    .. code:: python

        planitems.file(name="Configure apt proxy", item=plan.files[1])
    """
    if item.content is None:
        raise ValueError(f"{item.path}: the plan holds no content for it ({item.source}); its role writes it")
    yield from files.put._inner(
        src=StringIO(item.content), dest=item.path, mode=item.mode, user=item.user, group=item.group
    )


@operation()
def directory(item: DirectoryPlan) -> Commands:
    """
    Create a plan's directory with its mode and owner (``None``: left alone), as ``files.directory``.

    + item: a :class:`rocmfleet.plan.model.DirectoryPlan`

    **Example:**

    .. code:: python

        planitems.directory(name="Create /etc/apt/keyrings", item=plan.directories[0])
    """
    yield from files.directory._inner(path=item.path, mode=item.mode, user=item.user, group=item.group)


@operation()
def absent(item: Removal) -> Commands:
    """
    Keep a plan's removal absent (``files.file(present=False)``).

    + item: a :class:`rocmfleet.plan.model.Removal`

    **Example:**

    .. code:: python

        planitems.absent(name="Remove apt proxy", item=Removal(APT_PROXY_FILE, "base", "no apt_proxy"))
    """
    yield from files.file._inner(path=item.path, present=False)


@operation()
def packages(items: Sequence[PackagePlan], update: bool = True) -> Commands:
    """
    Install a plan's packages: those of any version (``*``) and not held with one ``apt.packages``
    (no recommends; ``update``: the lists refreshed when older than :data:`APT_CACHE_TIME_S`), then
    each group of held ones of one version with :func:`rocmfleet.operations.packages.held_at`.

    + items: :class:`rocmfleet.plan.model.PackagePlan` s; a version ``the version of URL`` (the
      rocm and exporter roles install those from their repositories) raises ``ValueError`` naming it
    + update: refresh apt's lists first (``cache_time`` :data:`APT_CACHE_TIME_S`)

    **Example:**

    .. code:: python

        planitems.packages(name="Install base packages", items=[PackagePlan("curl", "base", "*")])
    """
    odd = [f"{p.name} ({p.version})" for p in items if p.version.startswith("the version of ")]
    if odd:
        raise ValueError(f"packages whose version only their repository knows: {', '.join(odd)}")
    plain = [p.name for p in items if p.version == "*" and not p.held]
    if plain:
        yield from apt.packages._inner(
            packages=plain,
            update=update,
            cache_time=APT_CACHE_TIME_S if update else None,
            no_recommends=True,
        )
    versions: dict[str, list[str]] = {}
    for p in items:
        if p.name not in plain:
            versions.setdefault(p.version, []).append(p.name)
    for version, names in versions.items():
        yield from package_ops.held_at._inner(packages=names, version=version)


@operation()
def unit(item: UnitPlan) -> Commands:
    """
    Leave a plan's unit enabled (``enabled``) and running (``running``; ``None``: left alone), as
    ``systemd.service``.

    + item: a :class:`rocmfleet.plan.model.UnitPlan`

    **Example:**

    .. code:: python

        planitems.unit(name="Enable and start Docker", item=UnitPlan("docker.service", "docker", True, True))
    """
    yield from systemd.service._inner(service=item.unit, running=item.running, enabled=item.enabled)
