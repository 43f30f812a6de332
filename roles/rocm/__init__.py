"""ROCm role: AMD's apt repositories, the amdgpu kernel driver (DKMS), device access, reboots.

Every driver change (its install or version move, its DKMS rebuild for Secure Boot, the other
stream's removal) first stops AMD's metrics exporter where it is installed, as AMD requires; the
reboot that follows starts it again (:func:`rocmfleet.operations.rocm.exporter_stopped`).

Follows AMD's install pages as ``../shared/reference/mi300x.md`` §2 records them; the logic
(files, versions, support matrix) is :mod:`rocmfleet.domain.rocm`. Three entry points, in deploy order:
:func:`preflight` (before anything changes), :func:`apply`, and :func:`reboot` (after the
tuning role, so one reboot covers the driver and the kernel command line).
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api.operation import OperationMeta
from pyinfra.context import host, state
from pyinfra.facts.files import FileContents
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt, files, server
from pyinfra.operations.util import any_changed

from rocmfleet.domain import rocm, rocmhost
from rocmfleet.facts.rocm import InstalledVersions, RocmOnHost
from rocmfleet.facts.state import Gathered
from rocmfleet.operations import planitems
from rocmfleet.operations import reboot as reboot_ops
from rocmfleet.operations import rocm as rocm_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import drift, rocmplan
from rocmfleet.plan.model import HostPlan


def _target(got: Gathered | None = None) -> rocm.OsTarget | None:
    if got is not None and got.os is not None:
        distro, version = got.os.id, got.os.version_id
    else:
        meta = host.get_fact(LinuxDistribution).get("release_meta", {})
        distro, version = meta.get("ID", ""), str(meta.get("VERSION_ID", ""))
    try:
        return rocm.os_target(distro, version)
    except rocm.UnsupportedHost:
        return None  # preflight fails this host before anything runs


def query(settings: rocm.RocmSettings) -> dict[str, object]:
    """What the role reads (``HostState`` arguments) besides its plan items: its facts as runs and
    the kernel headers by pattern (:func:`rocmfleet.plan.rocmplan.query`)."""
    return rocmplan.query(settings)


#: The role's packages whose version only their repository knows (the driver's, the userspace's):
#: :func:`rocmfleet.plan.rocmplan.live_reasons` says theirs, against what apt offers.
def _by_repository(item: str, items: HostPlan) -> bool:
    return any(p.name == item and p.version.startswith("the version of ") for p in items.packages)


def reasons(settings: rocm.RocmSettings, items: HostPlan, got: Gathered) -> list[str]:
    """Why the role acts on this host (empty: none of its operations, its reboot or its driver
    checks is called): :func:`rocmfleet.plan.rocmplan.live_reasons` (what only the host can tell),
    then the drift of ``items`` (its files, keyring directory, removals and kernel headers;
    :func:`rocmfleet.plan.drift.drift`), one reason each.

    Args:
        settings: the host's ROCm settings.
        items: the rocm role's items of the host's plan (``hostdrift.role_items(plan, "rocm")``).
        got: the host's ``HostState`` read with ``drift.query(items)`` and :func:`query`.
    """
    found = drift.drift(drift.plan_wanted(items), got)
    return rocmplan.live_reasons(settings, got) + [str(d) for d in found if not _by_repository(d.item, items)]


def found_on(got: Gathered | None) -> rocmhost.HostRocm:
    """What the host has of the two ROCm streams: from the ``HostState`` read, else the
    ``RocmOnHost`` fact (read here)."""
    return (rocmplan.streams(got) if got is not None else None) or host.get_fact(RocmOnHost)


def idle(settings: rocm.RocmSettings, todo: list[str]) -> bool:
    """:func:`preflight` and :func:`apply` would call no operation: :func:`reasons` found nothing
    (``todo`` empty) and device access is by udev rule (the groups' way asserts pyinfra's own
    group, user and line operations every run). The deploy then enters neither."""
    return not todo and settings.rocm_device_access == "udev"


@deploy("rocm preflight")
def preflight(
    settings: rocm.RocmSettings, got: Gathered | None = None, todo: list[str] | None = None
) -> rocmhost.HostRocm:
    """Stop a host before any role changes it: OS or kernel not supported, Secure Boot without
    an enrolled signing key, or a downgrade within the stream that the data does not allow.

    ``got``: the host's ``HostState`` read, whose OS, running kernel and ROCm streams the check
    takes. ``todo``: :func:`reasons` of that read; empty (nothing differs,
    so none of these problems either) calls no operation. Returns what the host has of the two
    ROCm streams (``RocmOnHost``, from the read or read here, for :func:`apply` and :func:`reboot`)."""
    release = (got.os.id, got.os.version_id, got.os.kernel) if got is not None and got.os is not None else None
    found = found_on(got)
    if todo == []:
        return found
    rocm_ops.preflight(
        name="Check ROCm can be deployed here (OS, kernel, Secure Boot, no downgrade)",
        settings=settings,
        release=release,
        found=found,
    )
    return found


@deploy("rocm")
def apply(
    settings: rocm.RocmSettings,
    items: HostPlan,
    got: Gathered,
    found: rocmhost.HostRocm | None = None,
    todo: list[str] | None = None,
) -> rocmhost.HostRocm:
    """Repositories, kernel headers, ``amdgpu-dkms`` (checked with DKMS), optional userspace, device access.

    ``items``: the rocm role's items of the host's plan (``hostdrift.role_items(plan, "rocm")``);
    ``got``: the host's ``HostState`` read with ``drift.query(items)`` and :func:`query`. The file
    operations run only for the items that drifted. ``todo``: :func:`reasons` of that read (computed
    here when not given); empty, the role calls no operation but those of ``rocm_device_access:
    groups`` (pyinfra's own, each a no-op on a converged host).

    ``found``: the ``RocmOnHost`` fact as :func:`preflight` returned it (read here when not given).
    Returns it (:func:`reboot` takes it back).
    """
    todo = todo if todo is not None else reasons(settings, items, got)
    # Said as the vllm role says its own (while pyinfra prepares with change detection: --dry).
    if todo and not state.is_executing and state.check_for_changes:
        logger.warning(f"{host.print_prefix}would change rocm: {'; '.join(todo)}")
    if not todo:  # then no item drifted either (reasons says every drift)
        _device_access(settings, items, set())
        return found if found is not None else (rocmplan.streams(got) or host.get_fact(RocmOnHost))
    drifted = drift.drifted(items, got)
    target = _target(got) or rocm.OS_TARGETS[("debian", "12")]
    files = {f.path: f for f in items.files}
    removals = {r.path: r for r in items.removals}

    found = found if found is not None else host.get_fact(RocmOnHost)
    changed = []
    if rocmhost.stream_removal(settings, found) is not None:
        changed.append(
            rocm_ops.remove_other_stream(
                name="Remove the other ROCm stream first (AMD: uninstall it before installing this one)",
                settings=settings,
            )
        )
    if rocmhost.userspace_removal(settings, found) is not None:
        rocm_ops.remove_userspace(name="Remove the ROCm userspace unless rocm_userspace is on", settings=settings)
    for d in items.directories:
        if d.path in drifted:
            planitems.directory(name=f"Create {d.path}", item=d)
    # The keyrings are fetched (no plan item holds their content): the operation compares them with AMD's keys.
    changed.append(
        rocm_ops.keyring(name="AMD's repo.radeon.com key", src=settings.rocm_key_url, dest=rocm.LEGACY_KEYRING)
    )
    if rocm.CURRENT_KEYRING in files:
        changed.append(
            rocm_ops.keyring(
                name="AMD's stable.repo.amd.com key", src=settings.rocm_current_key_url, dest=rocm.CURRENT_KEYRING
            )
        )
    elif rocm.CURRENT_KEYRING in drifted:
        changed.append(planitems.absent(name=f"Remove {rocm.CURRENT_KEYRING}", item=removals[rocm.CURRENT_KEYRING]))
    for path in rocmplan.repo_file_texts(settings, target):
        if path not in drifted:
            continue
        if path in removals:
            changed.append(planitems.absent(name=f"Remove {path}", item=removals[path]))
        elif path in files:
            changed.append(planitems.file(name=f"Render {path}", item=files[path]))
    apt.update(name="Update apt lists for AMD's repositories", _if=any_changed(*changed))

    headers = [p for p in items.packages if p.name in drifted and not _by_repository(p.name, items)]
    if headers:
        planitems.packages(name="Install kernel headers for the running kernel", items=headers, update=False)
    _module_signing(settings, items, drifted)
    rocm_ops.packages_from_repo(
        name=f"Install the amdgpu driver from amdgpu/{settings.amdgpu_version} and hold it",
        packages=settings.rocm_driver_packages,
        repo=settings.driver_repo,
        reboot_reason=f"amdgpu driver {settings.amdgpu_version} installed",
        hold=True,
        stop_exporter=True,
    )
    rocm_ops.dkms_installed(name="Check DKMS built amdgpu for the running and newest kernels", module="amdgpu")

    if settings.rocm_userspace:
        rocm_ops.packages_from_repo(
            name=f"Install the ROCm {settings.rocm_version} userspace",
            packages=settings.userspace_packages,
            repo=rocm.userspace_repo(settings, target),
        )

    _device_access(settings, items, drifted)
    return found


def _module_signing(settings: rocm.RocmSettings, items: HostPlan, drifted: set[str]) -> None:
    """Point DKMS at the configured MOK pair (Secure Boot); a change rebuilds an installed driver."""
    if rocm.DKMS_SIGNING_CONF not in drifted:
        return  # DKMS already signs with this pair (or none is configured and no file is there): no rebuild
    for r in items.removals:
        if r.path == rocm.DKMS_SIGNING_CONF:
            planitems.absent(name=f"Remove {rocm.DKMS_SIGNING_CONF}", item=r)
    for f in items.files:
        if f.path == rocm.DKMS_SIGNING_CONF:
            conf = planitems.file(name=f"Render {rocm.DKMS_SIGNING_CONF}", item=f)
            rocm_ops.reinstall_if_installed(
                name="Rebuild the installed amdgpu driver so DKMS signs it",
                packages=settings.rocm_driver_packages[:1],
                reboot_reason="amdgpu rebuilt and signed with the MOK key",
                hold=True,
                stop_exporter=True,
                _if=conf.did_change,
            )


def _device_access(settings: rocm.RocmSettings, items: HostPlan, drifted: set[str]) -> None:
    if settings.rocm_device_access == "udev":
        for f in items.files:
            if f.path == rocm.UDEV_RULE and f.path in drifted:
                rule = planitems.file(name=f"Render {rocm.UDEV_RULE}", item=f)
                server.shell(
                    name="Reload udev rules",
                    commands=[
                        "if [ -S /run/udev/control ]; then udevadm control --reload-rules && udevadm trigger; "
                        "else echo 'udev is not running here: the rule applies at the next boot'; fi"
                    ],
                    _if=rule.did_change,
                )
        return
    for r in items.removals:
        if r.path == rocm.UDEV_RULE and r.path in drifted:
            planitems.absent(name=f"Remove {rocm.UDEV_RULE}", item=r)
    for group in ("video", "render"):
        server.group(name=f"Ensure group {group}", group=group, system=True)
    for user in host.loop(settings.rocm_device_users):
        server.user(name=f"Add {user} to video and render", user=user, groups=["video", "render"], append=True)
    files.line(
        name="adduser: extra groups on",
        path=rocm.ADDUSER_CONF,
        line=r"^#?\s*ADD_EXTRA_GROUPS=.*",
        replace="ADD_EXTRA_GROUPS=1",
    )
    files.line(
        name="adduser: video and render for new users",
        path=rocm.ADDUSER_CONF,
        line=r"^#?\s*EXTRA_GROUPS=.*",
        replace='EXTRA_GROUPS="video render"',
    )


def predicted_reboot(
    settings: rocm.RocmSettings,
    got: Gathered | None = None,
    found: rocmhost.HostRocm | None = None,
    drifted: set[str] | None = None,
) -> list[str]:
    """Why the deploy expects to reboot (said by ``--dry``): the driver is missing or changes
    version, or the other ROCm stream is removed.

    Prepare-time guess from the facts as they are now; the reboot itself is decided at execution
    by what the operations recorded. ``got`` (the ``HostState`` read, with :func:`query`'s items
    and the driver packages) and ``found`` (``RocmOnHost``, as :func:`apply` returned it) spare
    their reads; ``drifted`` (the role's items that drifted on ``got``, :func:`rocmfleet.plan.drift.drifted`)
    spares reading ``amdgpu.list`` when it is not among them.
    """
    removal = rocmhost.stream_removal(settings, found if found is not None else host.get_fact(RocmOnHost))
    stream = [f"ROCm {removal.stream} stream removed ({settings.rocm_stream} installed)"] if removal else []
    if "amdgpu-dkms" in settings.rocm_driver_packages:
        if got is not None and (dkms := got.packages.get("amdgpu-dkms")) is not None:
            missing = dkms.status[1:2] != "i"  # dpkg status ii or hi: installed
        else:
            missing = "amdgpu-dkms" not in host.get_fact(InstalledVersions, packages=settings.rocm_driver_packages)
        if missing:
            return [f"amdgpu driver {settings.amdgpu_version} will be installed", *stream]
    target = _target(got)
    if target is None:
        return stream
    wanted = rocm.amdgpu_list(settings, target)
    if drifted is not None and rocm.AMDGPU_LIST not in drifted:
        return stream  # the list names this driver version already
    lines = host.get_fact(FileContents, path=rocm.AMDGPU_LIST) or []
    if wanted.strip() not in lines:
        return [f"amdgpu driver moves to {settings.amdgpu_version}", *stream]
    return stream


@deploy("rocm reboot")
def reboot(
    settings: rocm.RocmSettings,
    predicted: list[str] | None = None,
    got: Gathered | None = None,
    found: rocmhost.HostRocm | None = None,
    drifted: set[str] | None = None,
) -> OperationMeta:
    """One reboot, only when the driver, the stream or the kernel command line changed; then check
    the driver. Secure Boot is checked by :func:`preflight`, before any package changes.

    The deploy does not enter it where its read showed nothing for the rocm role to do
    (:func:`reasons` empty: no reboot owed, DKMS and the driver up) and nothing else of the run can
    ask for a reboot (the kernel command line is as wanted). ``drifted``: as for
    :func:`predicted_reboot`.

    Returns the reboot operation (its ``did_change`` says the host rebooted)."""
    rebooted = reboot_ops.if_required(
        name="Reboot if the driver, its signing, the ROCm stream or the kernel command line changed",
        predicted=predicted_reboot(settings, got, found, drifted) + (predicted or []),
        timeout_s=settings.rocm_reboot_timeout_s,
        _parallel=settings.rocm_reboot_parallel,
    )
    rocm_ops.dkms_installed(name="Check amdgpu is installed for the booted kernel", module="amdgpu")
    rocm_ops.driver_ready(
        name="Check the amdgpu driver is loaded",
        check_module=settings.rocm_check_module,
        signed=settings.rocm_mok_signing_key is not None,
    )
    return rebooted
