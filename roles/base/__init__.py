"""Base role: apt proxy and base packages."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import apt, files

from rocmfleet.settings import HostSettings as DeploySettings

APT_PROXY_FILE = "/etc/apt/apt.conf.d/80rocmfleet-proxy"


@deploy("base")
def apply(settings: DeploySettings) -> None:
    """Point apt at ``apt_proxy`` (or remove our proxy file) and install ``base_packages``."""
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
