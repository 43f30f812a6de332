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
from pyinfra.facts.server import LinuxDistribution, OsVersion
from pyinfra.operations import apt, files, server
from pyinfra.operations.util import any_changed

from rocmfleet.domain import rocm, rocmhost, rocmtools
from rocmfleet.facts.rocm import InstalledVersions, RocmOnHost
from rocmfleet.facts.state import Gathered, HostState
from rocmfleet.operations import reboot as reboot_ops
from rocmfleet.operations import rocm as rocm_ops
from rocmfleet.operations.deploys import deploy
from rocmfleet.plan import hoststate, rocmplan
from rocmfleet.plan.hoststate import WantedFile


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
    """What the role reads (``HostState`` arguments): :func:`rocmfleet.plan.rocmplan.query`."""
    return rocmplan.query(settings)


@deploy("rocm preflight")
def preflight(
    settings: rocm.RocmSettings, got: Gathered | None = None, todo: list[str] | None = None
) -> rocmhost.HostRocm:
    """Stop a host before any role changes it: OS or kernel not supported, Secure Boot without
    an enrolled signing key, or a downgrade within the stream that the data does not allow.

    ``got``: the host's ``HostState`` read, whose OS, running kernel and ROCm streams the check
    takes. ``todo``: :func:`rocmfleet.plan.rocmplan.differs` of that read; empty (nothing differs,
    so none of these problems either) calls no operation. Returns what the host has of the two
    ROCm streams (``RocmOnHost``, from the read or read here, for :func:`apply` and :func:`reboot`)."""
    release = (got.os.id, got.os.version_id, got.os.kernel) if got is not None and got.os is not None else None
    found = (rocmplan.streams(got) if got is not None else None) or host.get_fact(RocmOnHost)
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
    got: Gathered | None = None,
    found: rocmhost.HostRocm | None = None,
    todo: list[str] | None = None,
) -> rocmhost.HostRocm:
    """Repositories, kernel headers, ``amdgpu-dkms`` (checked with DKMS), optional userspace, device access.

    ``got``: the host's ``HostState`` read with (at least) :func:`query`'s items; read here when
    not given. The file operations run only where that state differs from what is wanted.
    ``todo``: :func:`rocmfleet.plan.rocmplan.differs` of that read (computed here when not
    given); empty, the role calls no operation but those of ``rocm_device_access: groups``
    (pyinfra's own, each a no-op on a converged host).

    ``found``: the ``RocmOnHost`` fact as :func:`preflight` returned it (read here when not given).
    Returns it (:func:`reboot` takes it back).
    """
    got = got if got is not None else host.get_fact(HostState, **query(settings))
    todo = todo if todo is not None else rocmplan.differs(settings, got)
    # Said as the vllm role says its own (while pyinfra prepares with change detection: --dry).
    if todo and not state.is_executing and state.check_for_changes:
        logger.warning(f"{host.print_prefix}would change rocm: {'; '.join(todo)}")
    if not todo:
        _device_access(settings, got)
        return found if found is not None else (rocmplan.streams(got) or host.get_fact(RocmOnHost))
    target = _target(got) or rocm.OS_TARGETS[("debian", "12")]
    kernel = got.os.kernel if got.os is not None else host.get_fact(OsVersion)

    found = found if found is not None else host.get_fact(RocmOnHost)
    removals = []
    if rocmhost.stream_removal(settings, found) is not None:
        removals.append(
            rocm_ops.remove_other_stream(
                name="Remove the other ROCm stream first (AMD: uninstall it before installing this one)",
                settings=settings,
            )
        )
    if rocmhost.userspace_removal(settings, found) is not None:
        rocm_ops.remove_userspace(name="Remove the ROCm userspace unless rocm_userspace is on", settings=settings)
    if not hoststate.dir_ok(got, rocm.KEYRING_DIR, "755"):
        files.directory(name=f"Create {rocm.KEYRING_DIR}", path=rocm.KEYRING_DIR, mode="755")
    keys = [rocm_ops.keyring(name="AMD's repo.radeon.com key", src=settings.rocm_key_url, dest=rocm.LEGACY_KEYRING)]
    if settings.rocm_stream == "current" and settings.rocm_userspace:
        keys.append(
            rocm_ops.keyring(
                name="AMD's stable.repo.amd.com key", src=settings.rocm_current_key_url, dest=rocm.CURRENT_KEYRING
            )
        )
    elif not hoststate.absent(got, rocm.CURRENT_KEYRING):
        keys.append(files.file(name=f"Remove {rocm.CURRENT_KEYRING}", path=rocm.CURRENT_KEYRING, present=False))

    repo_ops = []
    texts = rocmplan.repo_file_texts(settings, target)
    for path, body in rocm.repo_files(settings, target).items():
        text = texts[path]
        if body is None or text is None:
            if not hoststate.absent(got, path):
                repo_ops.append(files.file(name=f"Remove {path}", path=path, present=False))
            continue
        if hoststate.file_ok(got, WantedFile(path, text.encode(), "644")):
            continue
        repo_ops.append(
            files.template(
                name=f"Render {path}",
                src=hoststate.template_path("templates/rocm/apt-file.j2"),
                dest=path,
                mode="644",
                what=rocmplan.what(settings, target),
                body=body.rstrip("\n"),
            )
        )
    apt.update(name="Update apt lists for AMD's repositories", _if=any_changed(*removals, *keys, *repo_ops))

    headers = rocm.header_packages(target, kernel)
    if not hoststate.packages_installed(got, headers):
        apt.packages(name="Install kernel headers for the running kernel", packages=headers, no_recommends=True)
    _module_signing(settings, got)
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

    _device_access(settings, got)
    return found


def _module_signing(settings: rocm.RocmSettings, got: Gathered) -> None:
    """Point DKMS at the configured MOK pair (Secure Boot); a change rebuilds an installed driver."""
    body = rocmtools.dkms_signing_conf(settings)
    if body is None:
        if not hoststate.absent(got, rocm.DKMS_SIGNING_CONF):
            files.file(name=f"Remove {rocm.DKMS_SIGNING_CONF}", path=rocm.DKMS_SIGNING_CONF, present=False)
        return
    text = rocmplan.signing_text(settings) or ""
    if hoststate.file_ok(got, WantedFile(rocm.DKMS_SIGNING_CONF, text.encode(), "644")):
        return  # DKMS already signs with this pair: no rebuild
    conf = files.template(
        name=f"Render {rocm.DKMS_SIGNING_CONF}",
        src=hoststate.template_path("templates/rocm/dkms-signing.conf.j2"),
        dest=rocm.DKMS_SIGNING_CONF,
        mode="644",
        body=body.rstrip("\n"),
    )
    rocm_ops.reinstall_if_installed(
        name="Rebuild the installed amdgpu driver so DKMS signs it",
        packages=settings.rocm_driver_packages[:1],
        reboot_reason="amdgpu rebuilt and signed with the MOK key",
        hold=True,
        stop_exporter=True,
        _if=conf.did_change,
    )


def _device_access(settings: rocm.RocmSettings, got: Gathered) -> None:
    if settings.rocm_device_access == "udev":
        if hoststate.file_ok(got, WantedFile(rocm.UDEV_RULE, rocmplan.udev_text().encode(), "644")):
            return
        rule = files.template(
            name=f"Render {rocm.UDEV_RULE}",
            src=hoststate.template_path("templates/rocm/70-amdgpu.rules.j2"),
            dest=rocm.UDEV_RULE,
            mode="644",
            body=rocmtools.udev_rule().rstrip("\n"),
        )
        server.shell(
            name="Reload udev rules",
            commands=[
                "if [ -S /run/udev/control ]; then udevadm control --reload-rules && udevadm trigger; "
                "else echo 'udev is not running here: the rule applies at the next boot'; fi"
            ],
            _if=rule.did_change,
        )
        return
    if not hoststate.absent(got, rocm.UDEV_RULE):
        files.file(name=f"Remove {rocm.UDEV_RULE}", path=rocm.UDEV_RULE, present=False)
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
    settings: rocm.RocmSettings, got: Gathered | None = None, found: rocmhost.HostRocm | None = None
) -> list[str]:
    """Why the deploy expects to reboot (said by ``--dry``): the driver is missing or changes
    version, or the other ROCm stream is removed.

    Prepare-time guess from the facts as they are now; the reboot itself is decided at execution
    by what the operations recorded. ``got`` (the ``HostState`` read, with :func:`query`'s items
    and the driver packages) and ``found`` (``RocmOnHost``, as :func:`apply` returned it) spare
    their reads.
    """
    removal = rocmhost.stream_removal(settings, found if found is not None else host.get_fact(RocmOnHost))
    stream = [f"ROCm {removal.stream} stream removed ({settings.rocm_stream} installed)"] if removal else []
    if "amdgpu-dkms" in settings.rocm_driver_packages:
        if got is not None and "amdgpu-dkms" in got.packages:
            missing = not hoststate.packages_installed(got, ["amdgpu-dkms"])
        else:
            missing = "amdgpu-dkms" not in host.get_fact(InstalledVersions, packages=settings.rocm_driver_packages)
        if missing:
            return [f"amdgpu driver {settings.amdgpu_version} will be installed", *stream]
    target = _target(got)
    if target is None:
        return stream
    wanted = rocm.amdgpu_list(settings, target)
    if got is not None:
        text = rocmplan.repo_file_texts(settings, target)[rocm.AMDGPU_LIST] or ""
        if hoststate.file_ok(got, WantedFile(rocm.AMDGPU_LIST, text.encode(), "644")):
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
    settled: bool = False,
) -> OperationMeta | None:
    """One reboot, only when the driver, the stream or the kernel command line changed; then check
    the driver. Secure Boot is checked by :func:`preflight`, before any package changes.

    ``settled``: the deploy's read showed nothing for the rocm role to do
    (:func:`rocmfleet.plan.rocmplan.differs` empty: no reboot owed, DKMS and the driver up) and
    nothing else of the run can ask for a reboot (the kernel command line is as wanted): no
    operation at all.

    Returns the reboot operation (its ``did_change`` says the host rebooted), or ``None`` when
    ``settled``."""
    if settled:
        return None
    rebooted = reboot_ops.if_required(
        name="Reboot if the driver, its signing, the ROCm stream or the kernel command line changed",
        predicted=predicted_reboot(settings, got, found) + (predicted or []),
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
