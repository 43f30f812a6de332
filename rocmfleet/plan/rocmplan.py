"""Whether the rocm role has anything to do on a host, from the deploy's one ``HostState`` read (pure).

The role's facts (what the host has of both ROCm streams, Secure Boot, the keyrings against the
keys AMD publishes, the versions apt offers, ``dkms status``, the kernels, the reboot owed, the
driver loaded) run inside that one read as ``runs`` (:func:`query`), each the same command as its
pyinfra fact in :mod:`rocmfleet.facts.rocm`, parsed by the same fact's ``process``. :func:`differs`
then says why the role would act. An empty answer means every operation of the role, and its
reboot and driver checks, would be a no-op: the role calls none of them, and a converged host
costs the deploy no command beyond the read (issue 24, "Cost per host"). Anything the read could
not tell (a run that failed or timed out, output a parser refuses) counts as a difference: the
operations then read and decide at execution as before.

The deploy takes :func:`live_reasons` (what only the host can tell) and the drift of the role's
items of the host plan (files, keyring directory, kernel headers: :func:`rocmfleet.plan.drift.drift`);
``rocmfleet check`` takes :func:`differs`, both in one.

Example::

    got = host.get_fact(HostState, **rocmplan.query(settings))
    if not rocmplan.differs(settings, got):
        ...  # the host is as the role would leave it
"""

from __future__ import annotations

from rocmfleet.domain import rocm, rocmhost, rocmtools
from rocmfleet.facts import rocm as facts
from rocmfleet.facts.state import APT_VERSIONS, Gathered, ran
from rocmfleet.plan import hoststate
from rocmfleet.plan.drift import Wanted, WantedAbsent, WantedDir, WantedPackage, drift
from rocmfleet.plan.wantedfile import WantedFile

#: Names of the role's runs in the ``HostState`` read.
RUN_STREAMS = "rocm-streams"
RUN_SECURE_BOOT = "rocm-secure-boot"
#: What apt offers of the role's packages: the read's one ``apt-cache madison`` of every role's.
RUN_VERSIONS = APT_VERSIONS
RUN_KERNELS = "rocm-kernels"
RUN_DKMS = "rocm-dkms-status"
RUN_REBOOT = "rocm-reboot-owed"
RUN_DRIVER = "rocm-driver-loaded"
#: Prefix of a keyring's run (``rocm-keyring:/etc/apt/keyrings/rocm.gpg``).
RUN_KEYRING = "rocm-keyring:"


def what(settings: rocm.RocmSettings, target: rocm.OsTarget) -> str:
    """The comment line of the role's apt files (``ROCm 10.0 (current stream), Debian 12``)."""
    return f"ROCm {settings.rocm_version} ({settings.rocm_stream} stream), {target.name}"


def repo_file_texts(settings: rocm.RocmSettings, target: rocm.OsTarget) -> dict[str, str | None]:
    """``{path: text}`` of AMD's apt files as the role renders them (``templates/rocm/apt-file.j2``),
    ``None`` for a file of the other stream that must not exist."""
    return {
        path: None
        if body is None
        else hoststate.render("templates/rocm/apt-file.j2", what=what(settings, target), body=body.rstrip("\n"))
        for path, body in rocm.repo_files(settings, target).items()
    }


def signing_text(settings: rocm.RocmSettings) -> str | None:
    """DKMS's MOK signing configuration as the role renders it; ``None``: no signing, no file."""
    body = rocmtools.dkms_signing_conf(settings)
    return None if body is None else hoststate.render("templates/rocm/dkms-signing.conf.j2", body=body.rstrip("\n"))


def udev_text() -> str:
    """AMD's device access rule as the role renders it (``rocm_device_access: udev``)."""
    return hoststate.render("templates/rocm/70-amdgpu.rules.j2", body=rocmtools.udev_rule().rstrip("\n"))


def _keyrings(settings: rocm.RocmSettings) -> dict[str, str]:
    """``{keyring path: key URL}`` the role keeps equal to AMD's published keys."""
    keys = {rocm.LEGACY_KEYRING: settings.rocm_key_url}
    if settings.rocm_stream == "current" and settings.rocm_userspace:
        keys[rocm.CURRENT_KEYRING] = settings.rocm_current_key_url
    return keys


def _apt_packages(settings: rocm.RocmSettings) -> list[str]:
    return [*settings.rocm_driver_packages, *(settings.userspace_packages if settings.rocm_userspace else [])]


def query(settings: rocm.RocmSettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments): its keyrings, apt and DKMS files, the udev
    rule, the kernel headers (by pattern), the driver and userspace packages, the OS, and its
    facts as runs."""
    secure_boot = (
        (settings.rocm_mok_signing_key, settings.rocm_mok_certificate)
        if settings.rocm_mok_signing_key and settings.rocm_mok_certificate
        else (None, None)
    )
    runs = [
        (RUN_STREAMS, facts.RocmOnHost().command()),
        (RUN_SECURE_BOOT, facts.SecureBoot().command(*secure_boot)),
        (RUN_KERNELS, facts.Kernels().command()),
        (RUN_DKMS, facts.DkmsStatus().command()),
        (RUN_REBOOT, facts.RebootReasons().command()),
        (RUN_DRIVER, facts.AmdgpuLoaded().command()),
    ]
    runs += [
        (RUN_KEYRING + dest, facts.KeyringMatches().command(facts.keyring_fetch(src), dest))
        for dest, src in _keyrings(settings).items()
    ]
    return {
        "paths": [
            rocm.KEYRING_DIR,
            rocm.CURRENT_KEYRING,
            rocm.AMDGPU_LIST,
            rocm.ROCM_LIST,
            rocm.PIN_FILE,
            rocm.CURRENT_SOURCES,
            rocm.DKMS_SIGNING_CONF,
            rocm.UDEV_RULE,
        ],
        "packages": ["linux-headers-*", "linux-modules-extra-*", *_apt_packages(settings)],
        "os": True,
        "runs": runs,
        "apt_versions": _apt_packages(settings),
    }


def streams(got: Gathered) -> rocmhost.HostRocm | None:
    """What the host has of the two ROCm streams (the ``RocmOnHost`` fact), from the read."""
    return ran(got, RUN_STREAMS, facts.RocmOnHost().process)


def differs(settings: rocm.RocmSettings, got: Gathered) -> list[str]:
    """Why the rocm role would act on this host: empty when every one of its operations, its
    reboot and its driver checks would be a no-op (``rocmfleet check``'s rule: the deploy takes
    :func:`live_reasons` and its plan items' drift instead).

    Args:
        settings: the host's ROCm settings.
        got: a ``HostState`` read with :func:`query`'s items.

    Returns:
        one short reason per difference (the first problems only where one hides the others: an
        unsupported host, or a fact the read could not tell).
    """
    return _reasons(settings, got, files=True)


def live_reasons(settings: rocm.RocmSettings, got: Gathered) -> list[str]:
    """:func:`differs` but for the role's files, keyring directory and kernel headers, which are
    items of the host's plan (the deploy takes their drift, :func:`rocmfleet.plan.drift.drift`):
    what only the host can tell (Secure Boot, the streams, the keyrings against AMD's published
    keys, the versions apt offers, DKMS, a reboot owed, the driver loaded).

    Args:
        settings: the host's ROCm settings.
        got: a ``HostState`` read with :func:`query`'s items.
    """
    return _reasons(settings, got, files=False)


def _reasons(settings: rocm.RocmSettings, got: Gathered, files: bool) -> list[str]:
    if got.os is None:
        return ["OS not read"]
    try:
        target = rocm.os_target(got.os.id, got.os.version_id)
        rocm.check_kernel(settings, target, got.os.kernel)
    except rocm.UnsupportedHost as exc:
        return [str(exc)]
    found = streams(got)
    secure_boot = ran(got, RUN_SECURE_BOOT, facts.SecureBoot().process)
    versions = ran(got, RUN_VERSIONS, facts.AptRepoVersions().process)
    kernels = ran(got, RUN_KERNELS, facts.Kernels().process)
    dkms = ran(got, RUN_DKMS, facts.DkmsStatus().process)
    owed = ran(got, RUN_REBOOT, facts.RebootReasons().process)
    driver = ran(got, RUN_DRIVER, facts.AmdgpuLoaded().process)
    unread = [
        name
        for name, value in (
            (RUN_STREAMS, found),
            (RUN_SECURE_BOOT, secure_boot),
            (RUN_VERSIONS, versions),
            (RUN_KERNELS, kernels or None),
            (RUN_DKMS, dkms),
            (RUN_REBOOT, owed),
            (RUN_DRIVER, driver),
        )
        if value is None
    ]
    if unread or found is None or secure_boot is None or versions is None or not kernels:
        return [f"not read: {', '.join(unread)}"]
    reasons: list[str] = []
    problem = rocmtools.secure_boot_problem(settings, secure_boot) or rocmhost.downgrade_problem(settings, found)
    if problem:
        reasons.append(problem)
    if rocmhost.stream_removal(settings, found) is not None:
        reasons.append("the other ROCm stream is installed")
    if rocmhost.userspace_removal(settings, found) is not None:
        reasons.append("the ROCm userspace is installed and not wanted")
    if files:
        reasons += _files(settings, target, got)
    for dest in _keyrings(settings):
        found_key = ran(got, RUN_KEYRING + dest, lambda lines: lines[-1].strip())
        if found_key is None:  # the download failed or timed out: the keyring could not be compared
            reasons.insert(0, f"not read: {RUN_KEYRING}{dest} (the key could not be downloaded)")
        elif found_key != "same":
            reasons.append(f"{dest} differs from the published key, or is not mode 644")
    headers = [WantedPackage(p) for p in rocm.header_packages(target, got.os.kernel)]
    if files and drift(headers, got):
        reasons.append("kernel headers missing")
    wanted = {p: settings.driver_repo for p in settings.rocm_driver_packages}
    if settings.rocm_userspace:
        wanted |= {p: rocm.userspace_repo(settings, target) for p in settings.userspace_packages}
    for package, repo in wanted.items():
        version = facts.version_from_repo(versions, package, repo)
        item = got.packages.get(package)
        if version is None or item is None or item.status[:2] not in ("ii", "hi") or item.version != version:
            reasons.append(f"{package} not at the version of {repo}")
        elif package in settings.rocm_driver_packages and item.status[:1] != "h":
            reasons.append(f"{package} not held (apt-mark hold)")
    running, newest = kernels["running"], rocmtools.newest_kernel(kernels["installed"])
    reasons += rocmtools.dkms_problems(rocmtools.parse_dkms_status(dkms or ""), "amdgpu", [running, newest])
    if owed:
        reasons.append(f"a reboot is owed: {'; '.join(owed)}")
    if not ((driver or {}).get("module") or not settings.rocm_check_module) or not (driver or {}).get("kfd"):
        reasons.append("the amdgpu driver is not up")
    return reasons


def _files(settings: rocm.RocmSettings, target: rocm.OsTarget, got: Gathered) -> list[str]:
    """The role's files that differ: the keyring directory, AMD's apt files, the DKMS signing
    configuration, the udev rule (``udev`` access) or its absence (``groups``), by the plan's rule
    (:func:`rocmfleet.plan.drift.drift`)."""
    texts = repo_file_texts(settings, target)
    texts[rocm.DKMS_SIGNING_CONF] = signing_text(settings)
    texts[rocm.UDEV_RULE] = udev_text() if settings.rocm_device_access == "udev" else None
    if not (settings.rocm_stream == "current" and settings.rocm_userspace):
        texts[rocm.CURRENT_KEYRING] = None
    wanted: list[Wanted] = [WantedDir(rocm.KEYRING_DIR, "755")]
    for path, text in texts.items():
        wanted.append(WantedAbsent(path) if text is None else WantedFile(path, text.encode(), "644"))
    differ = list(dict.fromkeys(d.item for d in drift(wanted, got)))
    return [f"{path} differs" for path in differ]
