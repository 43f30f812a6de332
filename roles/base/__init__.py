"""Base role: apt proxy and base packages."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, files

from rocmfleet.settings import HostSettings as DeploySettings

APT_PROXY_FILE = "/etc/apt/apt.conf.d/80rocmfleet-proxy"
APT_LOCK_FILE = "/etc/apt/apt.conf.d/80rocmfleet-lock-timeout"


@deploy("base")
def apply(settings: DeploySettings) -> None:
    """Make apt wait for a held dpkg lock, point apt at ``apt_proxy`` (or remove our proxy file) and
    install ``base_packages``.

    A first boot often finds unattended-upgrades or apt-daily holding the dpkg lock; pyinfra's apt
    operations fail at once then. ``DPkg::Lock::Timeout`` (apt >= 1.9.11, ``apt.conf(5)``) makes
    every apt-get of the deploy wait up to ``apt_lock_timeout_s``; past it apt fails the host
    with ``Could not get lock ... It is held by process PID (NAME)``.
    """
    files.template(
        name="Make apt wait for a held dpkg lock",
        src="templates/base/apt-lock.conf.j2",
        dest=APT_LOCK_FILE,
        mode="644",
        timeout_s=settings.apt_lock_timeout_s,
    )
    if settings.apt_proxy:
        files.template(
            name="Configure apt proxy",
            src="templates/base/apt-proxy.conf.j2",
            dest=APT_PROXY_FILE,
            mode="644",
            proxy=settings.apt_proxy,
        )
    else:
        files.file(name="Remove apt proxy", path=APT_PROXY_FILE, present=False)
    apt.packages(
        name="Install base packages",
        packages=settings.base_packages,
        update=True,
        cache_time=3600,
        no_recommends=True,
    )
