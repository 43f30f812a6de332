"""Compliance of the ROCm role: repositories, keyrings, pin, driver packages, DKMS, device access."""

from __future__ import annotations

import pytest

from rocmfleet import rocm, scripts
from rocmfleet.checks.expect import file_stat, in_container, rocm_settings
from rocmfleet.errors import CannotCheck
from rocmfleet.facts.rocm import REBOOT_DIR


@pytest.fixture(scope="module")
def settings(host):
    return rocm_settings(host)


@pytest.fixture(scope="module")
def target(host):
    """The host's :class:`rocmfleet.rocm.OsTarget` from ``/etc/os-release`` ``ID`` and ``VERSION_ID``
    (one read; testinfra's ``system_info`` would run three more commands)."""
    release = host.file("/etc/os-release").content_string
    fields = dict(line.split("=", 1) for line in release.splitlines() if "=" in line)
    return rocm.os_target(*(fields.get(key, "").strip().strip("\"'") for key in ("ID", "VERSION_ID")))


def _body(host, path: str) -> list[str]:
    return [line for line in host.file(path).content_string.splitlines() if line and not line.startswith("#")]


def test_legacy_keyring_present(host):
    key = file_stat(host, rocm.LEGACY_KEYRING)
    assert key is not None, f"{rocm.LEGACY_KEYRING} is missing"
    kind, mode, size = key
    assert (kind, mode) == ("regular file", 0o644) and size > 0, (
        f"{rocm.LEGACY_KEYRING}: {kind}, mode {mode:o}, {size} bytes; want a non-empty regular file, mode 644"
    )


def test_current_keyring_only_with_current_userspace(host, settings):
    wanted = settings.rocm_stream == "current" and settings.rocm_userspace
    assert host.file(rocm.CURRENT_KEYRING).exists == wanted


def test_repository_files_as_amd_documents(host, settings, target):
    for path, body in rocm.repo_files(settings, target).items():
        if body is None:
            assert not host.file(path).exists, f"{path} must not exist ({settings.rocm_stream} stream)"
        else:
            assert _body(host, path) == body.splitlines(), path


def test_pin_file_present_for_legacy(host, settings):
    pin = host.file(rocm.PIN_FILE)
    if settings.rocm_stream != "legacy":
        assert not pin.exists
        return
    assert _body(host, rocm.PIN_FILE) == rocm.PIN.splitlines()
    policy = host.check_output("apt-cache policy")
    assert "600" in policy and "o=repo.radeon.com" in policy


def test_nothing_of_the_other_stream_left(host, settings):
    """No package, source, pin or keyring of the other stream; no userspace unless asked (AMD:
    uninstall one stream before installing the other, reference §2.1 [R6])."""
    found = rocm.parse_host_rocm(host.check_output(scripts.command("rocm-state.sh", *rocm.WATCHED_FILES)).splitlines())
    for removal in (rocm.stream_removal(settings, found), rocm.userspace_removal(settings, found)):
        assert removal is None, f"left on the host: {removal.describe()}"


def test_kernel_headers_for_running_kernel(host, target):
    kernel = host.check_output("uname -r")
    for package in rocm.header_packages(target, kernel):
        assert host.package(package).is_installed, package


def test_driver_packages_at_repository_version(host, settings):
    packages = settings.rocm_driver_packages
    installed = _installed(host, packages)
    listed = host.check_output("apt-cache madison " + " ".join(["%s"] * len(packages)), *packages)
    madison = rocm.parse_madison_packages(listed, packages)
    for package in packages:
        assert package in installed, f"{package} is not installed"
        versions = [version for version, url in madison[package] if url == settings.driver_repo]
        version = installed[package]
        assert version in versions, f"{package} {version} is not the version of {settings.driver_repo}"


def _installed(host, packages: list[str]) -> dict[str, str]:
    """``{package: version}`` of those of ``packages`` dpkg has installed, in one ``dpkg-query``."""
    quoted = " ".join(["%s"] * len(packages))
    result = host.run(f"dpkg-query -W -f '${{Package}}|${{db:Status-Abbrev}}|${{Version}}\\n' {quoted}", *packages)
    installed = {}
    for line in result.stdout.splitlines():
        fields = line.split("|")
        if len(fields) != 3:
            raise CannotCheck(f"dpkg-query printed {line[:200]!r}, not package|status|version")
        if fields[1][1:2] == "i":  # db:Status-Abbrev: desired (i install, h hold...), then status
            installed[fields[0]] = fields[2]
    if result.rc not in (0, 1) or (result.rc == 1 and not result.stderr.strip()):
        raise CannotCheck(f"dpkg-query exited {result.rc}: {result.stderr.strip()[-300:]}")
    return installed


def test_userspace_only_when_asked(host, settings):
    for package in settings.userspace_packages:
        assert host.package(package).is_installed == settings.rocm_userspace, package


def test_dkms_installed_for_running_and_newest_kernel(host):
    kernels = host.check_output("uname -r; ls /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' || true")
    names = kernels.split()
    wanted = [names[0], rocm.newest_kernel(names)]
    status = host.check_output("dkms status")
    assert rocm.dkms_problems(rocm.parse_dkms_status(status, strict=True), "amdgpu", wanted) == [], status


def test_amdgpu_module_loaded(host):
    if in_container(host):
        pytest.skip("container host: the kernel, and its modules, belong to the machine it runs on")
    assert host.file("/sys/module/amdgpu").is_directory
    assert host.file("/dev/kfd").exists


def test_device_access_persisted(host, settings):
    rule = host.file(rocm.UDEV_RULE)
    if settings.rocm_device_access == "udev":
        assert _body(host, rocm.UDEV_RULE) == list(rocm.UDEV_RULE_LINES)
    else:
        assert not rule.exists
        for user in settings.rocm_device_users:
            assert {"video", "render"} <= set(host.user(user).groups), user


def test_device_nodes_owned_by_render(host):
    """/dev/kfd and every render node belong to group ``render`` (one ``stat`` for all of them)."""
    assert host.file("/dev/kfd").exists, "/dev/kfd is missing"
    groups = rocm.parse_device_groups(host.run(rocm.DEVICE_GROUPS_COMMAND).stdout)
    if "/dev/kfd" not in groups:
        raise CannotCheck(f"stat of the GPU device nodes did not list /dev/kfd: {', '.join(groups)}")
    wrong = [f"{path} {group}" for path, group in groups.items() if group != "render"]
    assert not wrong, "not group render: " + ", ".join(wrong)


def test_device_access_live(host, settings):
    if settings.rocm_device_access != "udev":
        pytest.skip("group access: membership is checked in test_device_access_persisted")
    if not host.file("/run/udev/control").exists:
        pytest.skip("udev is not running on this host (container): device modes come from whoever made the nodes")
    for path in ["/dev/kfd", *host.check_output("ls /dev/dri/renderD* 2>/dev/null || true").split()]:
        assert host.file(path).mode == 0o666, path


def test_no_reboot_owed(host):
    result = host.run(scripts.command("reboot-owed.sh", REBOOT_DIR))
    owed = rocm.reboot_reasons(result.rc, result.stdout, result.stderr)
    assert not owed, f"a reboot is owed: {'; '.join(owed)}"
