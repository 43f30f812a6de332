"""Base role: apt proxy and base packages."""

from __future__ import annotations

from pyinfra.context import host
from pyinfra.operations import apt, files

from rocmfleet.config.hostsettings import HostSettings as DeploySettings
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import baseplan, hoststate
from rocmfleet.plan.baseplan import APT_LOCK_FILE, APT_PROXY_FILE


def query(settings: DeploySettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments): its two apt files and the base packages."""
    return {"paths": [APT_LOCK_FILE, APT_PROXY_FILE], "packages": list(settings.base_packages)}


@deploy("base")
def apply(settings: DeploySettings, got: Gathered | None = None) -> None:
    """Make apt wait for a held dpkg lock, point apt at ``apt_proxy`` (or remove our proxy file) and
    install ``base_packages``.

    A first boot often finds unattended-upgrades or apt-daily holding the dpkg lock; pyinfra's apt
    operations fail at once then. ``DPkg::Lock::Timeout`` (apt >= 1.9.11, ``apt.conf(5)``) makes
    every apt-get of the deploy wait up to ``apt_lock_timeout_s``; past it apt fails the host
    with ``Could not get lock ... It is held by process PID (NAME)``.

    ``got``: the host's ``HostState`` read with (at least) :func:`query`'s items; read here when
    not given. Each operation runs only where that state differs from what is wanted.
    """
    got = got if got is not None else host.get_fact(HostState, **query(settings))
    if not hoststate.file_ok(got, baseplan.lock_file(settings)):
        files.template(
            name="Make apt wait for a held dpkg lock",
            src=hoststate.template_path(baseplan.LOCK_TEMPLATE),
            dest=APT_LOCK_FILE,
            mode="644",
            timeout_s=settings.apt_lock_timeout_s,
        )
    proxy = baseplan.proxy_file(settings)
    if proxy is not None:
        if not hoststate.file_ok(got, proxy):
            files.template(
                name="Configure apt proxy",
                src=hoststate.template_path(baseplan.PROXY_TEMPLATE),
                dest=APT_PROXY_FILE,
                mode="644",
                proxy=settings.apt_proxy,
            )
    elif not hoststate.absent(got, APT_PROXY_FILE):
        files.file(name="Remove apt proxy", path=APT_PROXY_FILE, present=False)
    if not hoststate.packages_installed(got, settings.base_packages):
        apt.packages(
            name="Install base packages",
            packages=settings.base_packages,
            update=True,
            cache_time=3600,
            no_recommends=True,
        )
