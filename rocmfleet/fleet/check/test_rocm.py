"""Compliance of the ROCm role: repositories, keyrings, pin, driver packages, DKMS, device access."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rocmfleet import scripts
from rocmfleet.config.errors import CannotCheck
from rocmfleet.domain import rocm
from rocmfleet.facts.rocm import REBOOT_DIR
from rocmfleet.fleet.check.expect import (
    EMPTY_SHA256,
    device_nodes,
    exists,
    gathered,
    in_container,
    installed,
    path_state,
    rocm_settings,
    text,
)
from rocmfleet.plan import hoststate

if TYPE_CHECKING:
    from testinfra.host import Host


@pytest.fixture(scope="module")
def settings(host: Host) -> rocm.RocmSettings:
    return rocm_settings(host)


@pytest.fixture(scope="module")
def target(host: Host) -> rocm.OsTarget:
    """The host's :class:`rocmfleet.domain.rocm.OsTarget` from ``/etc/os-release`` ``ID`` and ``VERSION_ID``
    (``state.sh``'s ``os`` item, in the one read: :func:`rocmfleet.fleet.check.expect.gathered`)."""
    found = gathered(host).os
    if found is None:
        raise CannotCheck("state.sh did not report /etc/os-release")
    return rocm.os_target(found.id, found.version_id)


def _body(host: Host, path: str) -> list[str]:
    return [line for line in (text(host, path) or "").splitlines() if line and not line.startswith("#")]


def test_legacy_keyring_present(host: Host) -> None:
    key = path_state(host, rocm.LEGACY_KEYRING)
    assert key.type != "missing", f"{rocm.LEGACY_KEYRING} is missing"
    assert (key.type, key.mode) == ("file", "644") and key.sha256 != EMPTY_SHA256, (
        f"{rocm.LEGACY_KEYRING}: {key.type}, mode {key.mode}"
        f"{', empty' if key.sha256 == EMPTY_SHA256 else ''}; want a non-empty regular file, mode 644"
    )


def test_current_keyring_only_with_current_userspace(host: Host, settings: rocm.RocmSettings) -> None:
    wanted = settings.rocm_stream == "current" and settings.rocm_userspace
    assert exists(host, rocm.CURRENT_KEYRING) == wanted


def test_repository_files_as_amd_documents(host: Host, settings: rocm.RocmSettings, target: rocm.OsTarget) -> None:
    for path, body in rocm.repo_files(settings, target).items():
        if body is None:
            assert not exists(host, path), f"{path} must not exist ({settings.rocm_stream} stream)"
        else:
            assert _body(host, path) == body.splitlines(), path


def test_pin_file_present_for_legacy(host: Host, settings: rocm.RocmSettings) -> None:
    if settings.rocm_stream != "legacy":
        assert not exists(host, rocm.PIN_FILE)
        return
    assert _body(host, rocm.PIN_FILE) == rocm.PIN.splitlines()
    policy = host.check_output("apt-cache policy")
    assert "600" in policy and "o=repo.radeon.com" in policy


def test_nothing_of_the_other_stream_left(host: Host, settings: rocm.RocmSettings) -> None:
    """No package, source, pin or keyring of the other stream; no userspace unless asked (AMD:
    uninstall one stream before installing the other, reference §2.1 [R6])."""
    found = rocm.parse_host_rocm(host.check_output(scripts.command("rocm-state.sh", *rocm.WATCHED_FILES)).splitlines())
    for removal in (rocm.stream_removal(settings, found), rocm.userspace_removal(settings, found)):
        assert removal is None, f"left on the host: {removal.describe()}"


def test_kernel_headers_for_running_kernel(host: Host, target: rocm.OsTarget) -> None:
    found = gathered(host).os
    if found is None:  # the target fixture reports it
        raise CannotCheck("state.sh did not report /etc/os-release")
    kernel = found.kernel
    for package in rocm.header_packages(target, kernel):
        assert host.package(package).is_installed, package


def test_driver_packages_at_repository_version(host: Host, settings: rocm.RocmSettings) -> None:
    packages = settings.rocm_driver_packages
    got = gathered(host)
    have = {name: got.packages[name].version for name in packages if hoststate.packages_installed(got, [name])}
    listed = host.check_output("apt-cache madison " + " ".join(["%s"] * len(packages)), *packages)
    madison = rocm.parse_madison_packages(listed, packages)
    for package in packages:
        assert package in have, f"{package} is not installed"
        versions = [version for version, url in madison[package] if url == settings.driver_repo]
        version = have[package]
        assert version in versions, f"{package} {version} is not the version of {settings.driver_repo}"


def test_userspace_only_when_asked(host: Host, settings: rocm.RocmSettings) -> None:
    for package in settings.userspace_packages:
        assert installed(host, package) == settings.rocm_userspace, package


def test_dkms_installed_for_running_and_newest_kernel(host: Host) -> None:
    kernels = host.check_output("uname -r; ls /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' || true")
    names = kernels.split()
    wanted = [names[0], rocm.newest_kernel(names)]
    status = host.check_output("dkms status")
    assert rocm.dkms_problems(rocm.parse_dkms_status(status, strict=True), "amdgpu", wanted) == [], status


def test_amdgpu_module_loaded(host: Host) -> None:
    if in_container(host):
        pytest.skip("container host: the kernel, and its modules, belong to the machine it runs on")
    assert path_state(host, "/sys/module/amdgpu").type == "dir", "/sys/module/amdgpu: the module is not loaded"
    assert exists(host, "/dev/kfd"), "/dev/kfd is missing"


def test_device_access_persisted(host: Host, settings: rocm.RocmSettings) -> None:
    if settings.rocm_device_access == "udev":
        assert _body(host, rocm.UDEV_RULE) == list(rocm.UDEV_RULE_LINES)
    else:
        assert not exists(host, rocm.UDEV_RULE)
        for user in settings.rocm_device_users:
            assert {"video", "render"} <= set(host.user(user).groups), user


def test_device_nodes_owned_by_render(host: Host) -> None:
    """/dev/kfd and every render node belong to group ``render``."""
    assert exists(host, "/dev/kfd"), "/dev/kfd is missing"
    wrong = [f"{path} {node.group}" for path, node in device_nodes(host).items() if node.group != "render"]
    assert not wrong, "not group render: " + ", ".join(wrong)


def test_device_access_live(host: Host, settings: rocm.RocmSettings) -> None:
    if settings.rocm_device_access != "udev":
        pytest.skip("group access: membership is checked in test_device_access_persisted")
    if not exists(host, "/run/udev/control"):
        pytest.skip("udev is not running on this host (container): device modes come from whoever made the nodes")
    for path, node in device_nodes(host).items():
        assert node.mode == "666", f"{path}: mode {node.mode}, want 666"


def test_no_reboot_owed(host: Host) -> None:
    result = host.run(scripts.command("reboot-owed.sh", REBOOT_DIR))
    owed = rocm.reboot_reasons(result.rc, result.stdout, result.stderr)
    assert not owed, f"a reboot is owed: {'; '.join(owed)}"
