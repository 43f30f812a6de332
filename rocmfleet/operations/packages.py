"""Debian packages held at a pinned version (what ``apt.packages`` does not do: version patterns, holds)."""

from __future__ import annotations

from fnmatch import fnmatchcase

from pyinfra.api.command import StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.apt import noninteractive_apt

from rocmfleet.facts.packages import HeldPackages
from rocmfleet.facts.rocm import AptRepoVersions, InstalledVersions
from rocmfleet.operations import Commands
from rocmfleet.operations.fail import host_failure


def holds_after(packages: list[str], held: list[str], installed: bool) -> list[StringCommand]:
    """The ``apt-mark hold`` that leaves every one of ``packages`` held: all of them after an install
    or reinstall touched them (``apt-get install`` of a held package leaves it unheld, seen on
    Debian 12's apt 2.6: the hold read before the run no longer stands), else those ``held`` (read
    before the run) lacks; none when nothing is to hold."""
    unheld = sorted(packages) if installed else sorted(set(packages) - set(held))
    return [StringCommand("apt-mark", "hold", *unheld)] if unheld else []


def newest_matching(offered: list[str], pattern: str) -> str | None:
    """The first of ``offered`` (``apt-cache madison`` order: newest first) matching the glob ``pattern``."""
    return next((version for version in offered if fnmatchcase(version, pattern)), None)


@operation()
def held_at(packages: list[str], version: str) -> Commands:
    """
    Install ``packages`` at the newest version apt offers that matches ``version``, and hold them.

    + packages: package names released together (``docker-ce``, ``docker-ce-cli``)
    + version: an apt version or glob (``5:27.5.1-1~debian.12~bookworm``, ``20.10.24+dfsg1-*``)

    A package installed at a version that does not match is moved (up or down) to the newest
    matching one; every package ends held (``apt-mark hold``), so unattended-upgrades and a
    careless ``apt-get upgrade`` leave it alone. A no-op when all match and are held. A version
    apt does not offer fails the host, naming what it offers.

    **Example:**

    .. code:: python

        packages.held_at(name="Docker at its pinned version, held", packages=["docker.io"], version="20.10.24+dfsg1-*")
    """
    installed = host.get_fact(InstalledVersions, packages=packages)
    off = [p for p in packages if not fnmatchcase(installed.get(p, ""), version)]
    if off:
        offered = host.get_fact(AptRepoVersions, packages=off)
        if any(p not in offered for p in off):
            yield noninteractive_apt("update")
            offered = host.get_fact(AptRepoVersions, packages=off)
        wanted = {p: newest_matching([v for v, _ in offered.get(p, [])], version) for p in off}
        missing = {p: [v for v, _ in offered.get(p, [])] for p, v in wanted.items() if v is None}
        if missing:
            yield host_failure(f"rocmfleet: no version matching {version!r} offered for {missing} (name: offered)")
            return
        pins = " ".join(f"{p}={v}" for p, v in wanted.items())
        yield noninteractive_apt(
            f"install --no-install-recommends --allow-downgrades --allow-change-held-packages {pins}"
        )
    held: list[str] = host.get_fact(HeldPackages, packages=packages)
    holds = holds_after(packages, held, installed=bool(off))
    yield from holds
    if not off and not holds:
        host.noop(f"{', '.join(packages)} at {version}, held")
