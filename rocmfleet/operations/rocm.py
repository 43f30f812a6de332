"""Operations for the ROCm kernel driver and AMD's apt repositories."""

from __future__ import annotations

import shlex

from pyinfra import logger
from pyinfra.api.command import FunctionCommand, StringCommand
from pyinfra.api.operation import operation
from pyinfra.context import host, state
from pyinfra.facts.apt import noninteractive_apt
from pyinfra.facts.server import LinuxDistribution

from rocmfleet.domain import exporter, rocm, rocmhost, rocmtools
from rocmfleet.facts.packages import HeldPackages
from rocmfleet.facts.rocm import (
    REBOOT_DIR,
    AmdgpuLoaded,
    AptRepoVersions,
    DkmsMakeLogs,
    DkmsStatus,
    InstalledVersions,
    Kernels,
    KeyringMatches,
    RocmOnHost,
    SecureBoot,
    keyring_fetch,
    version_from_repo,
)
from rocmfleet.operations import Commands
from rocmfleet.operations.fail import host_failure
from rocmfleet.operations.packages import holds_after


def fail(message: str) -> FunctionCommand:
    """A command that fails the host with ``message`` (:func:`rocmfleet.operations.fail.host_failure`)."""
    return host_failure(message)


def mark_reboot(reason_key: str, reason: str) -> StringCommand:
    """A command that records why the host owes a reboot (see :data:`REBOOT_DIR`)."""
    return StringCommand(
        f"mkdir -p {REBOOT_DIR} && printf '%s\\n' {shlex.quote(reason)} > {REBOOT_DIR}/{shlex.quote(reason_key)}"
    )


def exporter_stopped(installed: bool) -> list[StringCommand]:
    """Stop AMD's metrics exporter and its GPU agent before a driver change, when the exporter is
    ``installed``: "The GPU Metrics Exporter and GPU Agent services must be stopped before: GPU
    driver unload or upgrade" (:mod:`rocmfleet.domain.exporter`). The units stay enabled: the
    reboot that follows every driver change starts them again; where none follows, the caller
    starts them (:func:`exporter_started`). A unit that is not there is no failure
    (:func:`rocmfleet.domain.metrics.stopped_command`)."""
    return [StringCommand(exporter.stopped_command())] if installed else []


def exporter_started(installed: bool) -> list[StringCommand]:
    """Start the GPU agent and the exporter again after a change that no reboot follows."""
    return [StringCommand(exporter.start_command())] if installed else []


def _would_fail(message: str) -> FunctionCommand:
    """Fail the host with ``message``; while preparing (``--dry``), also say that it would."""
    if not state.is_executing:
        logger.warning(f"{host.print_prefix}would fail: {message}")
    return fail(message)


@operation()
def preflight(
    settings: rocm.RocmSettings, release: tuple[str, str, str] | None = None, found: rocmhost.HostRocm | None = None
) -> Commands:
    """
    Stop this host before anything changes when ROCm cannot be deployed on it as configured.

    + settings: the host's :class:`rocmfleet.domain.rocm.RocmSettings`
    + release: ``(ID, VERSION_ID, running kernel)`` of the host when the deploy read them already
      (``rocmfleet.facts.state.HostState``; this is the deploy's first operation, so they have
      not changed since); read here otherwise
    + found: the host's ROCm streams (``RocmOnHost``) when the deploy read them already; read
      here otherwise

    In order, the first problem fails the host:

    - its OS or kernel is not supported: Ubuntu 24.04, Ubuntu 22.04 and Debian 12 (reference
      §2.2, §2.3), with a kernel matching ``rocm_supported_kernels``;
    - Secure Boot is on and DKMS has no enrolled key to sign amdgpu with
      (:func:`rocmfleet.domain.rocmtools.secure_boot_problem`): the module would not load after the reboot;
    - the data moves the host to an older release within its stream and
      ``rocm_allow_downgrade`` is off (:func:`rocmfleet.domain.rocmhost.downgrade_problem`).

    A host with none of these is a no-op.
    """
    if release is not None:
        distro_id, version_id, kernel = release
    else:
        meta = host.get_fact(LinuxDistribution).get("release_meta", {})
        distro_id, version_id = meta.get("ID", "") or "", str(meta.get("VERSION_ID", ""))
        kernel = host.get_fact(Kernels).get("running", "")
    try:
        target = rocm.os_target(distro_id, version_id)
        rocm.check_kernel(settings, target, kernel)
    except rocm.UnsupportedHost as exc:
        yield _would_fail(f"rocmfleet: {exc}; nothing was changed on this host")
        return
    secure_boot = host.get_fact(
        SecureBoot, key=settings.rocm_mok_signing_key, certificate=settings.rocm_mok_certificate
    )
    problem = rocmtools.secure_boot_problem(settings, secure_boot)
    problem = problem or rocmhost.downgrade_problem(settings, found if found is not None else host.get_fact(RocmOnHost))
    if problem:
        yield _would_fail(problem)
        return
    host.noop(f"{target.name}, kernel {kernel}: supported for ROCm {settings.rocm_version} ({settings.rocm_stream})")


@operation()
def packages_from_repo(
    packages: list[str],
    repo: str,
    reboot_reason: str | None = None,
    hold: bool = False,
    stop_exporter: bool = False,
) -> Commands:
    """
    Install ``packages`` at exactly the version the apt repository ``repo`` offers.

    + packages: package names
    + repo: repository URL as in the source file (``https://repo.radeon.com/amdgpu/30.30/ubuntu``)
    + reboot_reason: when set, a change records this reason for :func:`rocmfleet.operations.reboot.if_required`
    + hold: the packages end held (``apt-mark hold``), and a version change moves the hold with
      it: apt is told ``--allow-change-held-packages``, without which it refuses to change a held
      package under ``-y`` (``E: Held packages were changed and -y was used without
      --allow-change-held-packages``, apt's ``apt-private/private-install.cc``). A downgrade is
      still refused earlier unless ``rocm_allow_downgrade`` (:func:`preflight`).
    + stop_exporter: the packages are the GPU driver: where AMD's metrics exporter
      (``amdgpu-exporter``) is installed, an install or version change stops it and its GPU agent
      first (:func:`exporter_stopped`), and starts them after unless ``reboot_reason`` says a
      reboot follows (the enabled units start at boot)

    Installed packages at another version are upgraded (or downgraded) to the repository's, so
    changing the ROCm version in group data moves the host cleanly; packages already at that
    version (and held, with ``hold``) are a no-op. When apt does not know the repository yet
    (its lists predate the source file) the lists are updated first.

    **Example:**

    .. code:: python

        rocm.packages_from_repo(
            name="amdgpu driver",
            packages=["amdgpu-dkms"],
            repo="https://repo.radeon.com/amdgpu/30.30/ubuntu",
            hold=True,
        )
    """
    versions = host.get_fact(AptRepoVersions, packages=packages)
    wanted = {p: version_from_repo(versions, p, repo) for p in packages}
    if None in wanted.values():
        yield noninteractive_apt("update")
        versions = host.get_fact(AptRepoVersions, packages=packages)
        wanted = {p: version_from_repo(versions, p, repo) for p in packages}
        missing = [p for p, v in wanted.items() if v is None]
        if missing:
            known = {p: versions.get(p, []) for p in missing}
            yield fail(f"rocmfleet: {', '.join(missing)} not offered by {repo}; apt knows: {known}")
            return
    asked = [*packages, exporter.PACKAGE] if stop_exporter and exporter.PACKAGE not in packages else packages
    installed = host.get_fact(InstalledVersions, packages=asked)
    todo = [f"{p}={v}" for p, v in wanted.items() if installed.get(p) != v]
    held: list[str] = host.get_fact(HeldPackages, packages=packages) if hold else []
    unheld = sorted(set(packages) - set(held)) if hold else []
    if not todo and not unheld:
        host.noop(f"{', '.join(packages)} at the version of {repo}{', held' if hold else ''}")
        return
    holder = stop_exporter and bool(todo) and exporter.PACKAGE in installed
    yield from exporter_stopped(holder)
    if todo:
        allow = " --allow-change-held-packages" if hold else ""
        yield noninteractive_apt(f"install --no-install-recommends --allow-downgrades{allow} " + " ".join(todo))
    if hold:
        yield from holds_after(packages, held, installed=bool(todo))
    if todo and reboot_reason:
        yield mark_reboot("driver", reboot_reason + ": " + ", ".join(todo))
    else:
        yield from exporter_started(holder)


@operation()
def remove_other_stream(settings: rocm.RocmSettings) -> Commands:
    """
    Remove what the host has of the other ROCm stream, in the order AMD documents, before the
    configured stream is installed.

    + settings: the host's :class:`rocmfleet.domain.rocm.RocmSettings`

    AMD: "If you have ROCm 7.2.4 or older installed, please uninstall it before proceeding"
    (reference §2.1 [R6]); the uninstall is the meta package, then ``rocm-core`` (each with
    ``apt autoremove``), then the repository files, then a cleared apt cache and a restart
    [R1 "Uninstalling"]. Here: one ``apt-get purge --auto-remove`` per step of
    :data:`rocmfleet.domain.rocmhost.STREAM_PACKAGES`, then the stream's source, pin and keyring
    (:data:`rocmfleet.domain.rocmhost.STREAM_FILES`), then ``apt-get clean``, and a recorded reboot reason
    (the one reboot of the run). The driver packages have the same names in both streams and
    are replaced in place by the new stream's (:func:`packages_from_repo`). AMD's metrics exporter,
    where installed, is stopped first (:func:`exporter_stopped`; the reboot starts it). ``--dry`` says what
    would be removed. A host with nothing of the other stream is a no-op.
    """
    removal_found = host.get_fact(RocmOnHost)
    removal = rocmhost.stream_removal(settings, removal_found)
    if removal is None:
        host.noop(f"nothing of the other ROCm stream on this host ({settings.rocm_stream} wanted)")
        return
    if not state.is_executing:
        logger.warning(f"{host.print_prefix}would remove {removal.describe()}")
    # The driver moves to the other stream's next (the same run, then its reboot): nothing may hold
    # the GPUs from here on (AMD's exporter, where installed; RocmOnHost lists amdgpu* packages).
    yield from exporter_stopped(exporter.PACKAGE in removal_found.installed)
    for step in removal.package_steps:
        yield noninteractive_apt("purge --auto-remove " + " ".join(shlex.quote(n) for n in step))
    if removal.files:
        yield StringCommand("rm -f " + " ".join(shlex.quote(f) for f in removal.files))
    yield noninteractive_apt("clean")
    yield mark_reboot("stream", f"ROCm {removal.stream} stream removed ({settings.rocm_stream} installed)")


@operation()
def remove_userspace(settings: rocm.RocmSettings) -> Commands:
    """
    Purge the configured stream's userspace when ``rocm_userspace`` is off (containers bring
    their own), in AMD's uninstall order (:data:`rocmfleet.domain.rocmhost.STREAM_PACKAGES`).

    + settings: the host's :class:`rocmfleet.domain.rocm.RocmSettings`

    Its source file and keyring go with the role's other files. No reboot: the kernel driver
    stays. A no-op when the userspace is wanted or absent.
    """
    removal = rocmhost.userspace_removal(settings, host.get_fact(RocmOnHost))
    if removal is None:
        host.noop("no ROCm userspace to remove" if not settings.rocm_userspace else "the ROCm userspace is wanted")
        return
    if not state.is_executing:
        logger.warning(f"{host.print_prefix}would remove {removal.describe()} (rocm_userspace is off)")
    for step in removal.package_steps:
        yield noninteractive_apt("purge --auto-remove " + " ".join(shlex.quote(n) for n in step))


@operation()
def reinstall_if_installed(
    packages: list[str], reboot_reason: str, hold: bool = False, stop_exporter: bool = False
) -> Commands:
    """
    Reinstall ``packages`` that are installed, so that their maintainer scripts run again.

    + packages: package names (``amdgpu-dkms``)
    + reboot_reason: recorded for :func:`rocmfleet.operations.reboot.if_required` when reinstalled
    + hold: the packages are held (the driver, :func:`packages_from_repo`): the reinstall may change
      them (``--allow-change-held-packages``) and they are held again after it
    + stop_exporter: the packages are the GPU driver: AMD's metrics exporter, where installed, is
      stopped before the reinstall (:func:`exporter_stopped`; the reboot recorded starts it)

    Used when DKMS's module signing changes: the postinst of ``amdgpu-dkms`` has DKMS build (and
    now sign) the module again. Packages not installed are left to the install that follows.
    """
    asked = [*packages, exporter.PACKAGE] if stop_exporter and exporter.PACKAGE not in packages else packages
    found = host.get_fact(InstalledVersions, packages=asked)
    installed = [p for p in packages if p in found]
    if not installed:
        host.noop(f"{', '.join(packages)} not installed yet; the install builds with the new signing")
        return
    yield from exporter_stopped(stop_exporter and exporter.PACKAGE in found)
    allow = " --allow-change-held-packages" if hold else ""
    yield noninteractive_apt(f"install --reinstall --no-install-recommends{allow} " + " ".join(installed))
    if hold:
        yield from holds_after(installed, installed, installed=True)
    yield mark_reboot("signing", reboot_reason)


@operation()
def keyring(src: str, dest: str) -> Commands:
    """
    Keep the dearmored keyring ``dest`` equal to the key published at ``src``.

    + src: key URL (armored or binary)
    + dest: keyring path (``/etc/apt/keyrings/rocm.gpg``)

    AMD: "The GPG key may change; ensure it is updated when installing a new release" [R1], so
    the key is fetched every run (through apt's proxy, like the packages) and replaced only when
    it differs. The download goes to a temporary file; a failed download changes nothing.

    Why not pyinfra's ``apt.key`` (``gpg.key`` in 3.10): it downloads the key once, when the
    keyring is missing, so a rotated key is never picked up, and its download ignores apt's
    proxy, the only way out of a host that reaches packages through one.
    """
    fetch = keyring_fetch(src)
    probe = host.get_fact(KeyringMatches, src_fetch=fetch, dest=dest)
    if probe == "same":
        host.noop(f"{dest} matches {src}")
        return
    yield StringCommand(f'set -e; {fetch}; install -D -m 0644 "$tmp" {shlex.quote(dest)}; rm -f "$tmp" "$tmp.key"')


@operation()
def dkms_installed(module: str = "amdgpu") -> Commands:
    """
    Fail the host, with DKMS's output, unless ``dkms status`` shows ``module`` ``installed`` for
    the running kernel and for the newest installed kernel (reference §2.5 [R2-post]).

    + module: DKMS module name

    A check: it changes nothing and is a no-op when the module is installed.
    """
    if not state.is_executing:
        host.noop(f"dkms status for {module} is checked after the install")
        return
    kernels = host.get_fact(Kernels)
    wanted = [kernels["running"], rocmtools.newest_kernel(kernels["installed"])]
    status = host.get_fact(DkmsStatus)
    problems = rocmtools.dkms_problems(rocmtools.parse_dkms_status(status), module, wanted)
    if problems:
        logs = host.get_fact(DkmsMakeLogs, module=module)
        yield fail(
            "rocmfleet: "
            + "; ".join(problems)
            + f"\n--- dkms status ---\n{status or '(no output)'}"
            + (f"\n{logs}" if logs else "")
        )
        return
    host.noop(f"{module} installed for {', '.join(dict.fromkeys(wanted))}")


@operation()
def driver_ready(check_module: bool = True, signed: bool = False) -> Commands:
    """
    After the reboot: the ``amdgpu`` module is loaded and ``/dev/kfd`` exists.

    + check_module: False skips the module check (hosts without their own kernel, such as the
      lab's); ``/dev/kfd`` is checked either way
    + signed: DKMS signs the module (Secure Boot with a MOK pair configured): a failure says
      where to look for a signature the firmware refused

    A check: a no-op when the driver is up. A host whose driver did not come up fails here,
    before Docker or vLLM are touched, with what is missing.
    """
    if not state.is_executing:
        host.noop("the driver is checked after the reboot")
        return
    loaded = host.get_fact(AmdgpuLoaded)
    module_ok = loaded.get("module") or not check_module
    if module_ok and loaded.get("kfd"):
        host.noop("amdgpu loaded, /dev/kfd present" if check_module else "/dev/kfd present (module check off)")
        return
    module = ("loaded" if loaded.get("module") else "not loaded") if check_module else "not checked"
    kfd = "present" if loaded.get("kfd") else "missing"
    yield fail(
        f"rocmfleet: after the reboot amdgpu is {module} and /dev/kfd is {kfd}"
        "; the driver did not come up (see `dmesg | grep -i amdgpu` and `dkms status`)"
        + (
            "; Secure Boot is on: check the module's signer (`modinfo -F signer amdgpu`) is an enrolled key "
            "(`mokutil --list-enrolled`)"
            if signed
            else ""
        )
    )
