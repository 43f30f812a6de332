"""The base role's files as the deploy writes them (pure): one definition for the role, which
writes them where the ``HostState`` read differs, and ``rocmfleet plan``, which prints them.

Example::

    wanted = baseplan.lock_file(settings)   # /etc/apt/apt.conf.d/80rocmfleet-lock-timeout, 644
    drift.drift([wanted], got)   # [] when the host holds it (rocmfleet.plan.drift)
"""

from __future__ import annotations

from rocmfleet.config.hostsettings import HostSettings
from rocmfleet.plan import hoststate
from rocmfleet.plan.hoststate import WantedFile

APT_PROXY_FILE = "/etc/apt/apt.conf.d/80rocmfleet-proxy"
APT_LOCK_FILE = "/etc/apt/apt.conf.d/80rocmfleet-lock-timeout"
LOCK_TEMPLATE = "templates/base/apt-lock.conf.j2"
PROXY_TEMPLATE = "templates/base/apt-proxy.conf.j2"


def lock_file(settings: HostSettings) -> WantedFile:
    """``DPkg::Lock::Timeout`` of ``apt_lock_timeout_s`` seconds (``templates/base/apt-lock.conf.j2``),
    mode 644, owner left alone (``files.template`` without ``user``/``group``)."""
    text = hoststate.render(LOCK_TEMPLATE, timeout_s=settings.apt_lock_timeout_s)
    return WantedFile(APT_LOCK_FILE, text.encode(), "644")


def proxy_file(settings: HostSettings) -> WantedFile | None:
    """apt's proxy ``apt_proxy`` (``templates/base/apt-proxy.conf.j2``), mode 644; ``None``: no
    ``apt_proxy``, the file must not exist."""
    if not settings.apt_proxy:
        return None
    text = hoststate.render(PROXY_TEMPLATE, proxy=settings.apt_proxy)
    return WantedFile(APT_PROXY_FILE, text.encode(), "644")
