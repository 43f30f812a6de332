"""ROCm stream changes, downgrades and Secure Boot: the pure logic, the host-side scripts and
the operations' commands for given facts (pyinfra's host replaced by a stand-in)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.facts.apt import noninteractive_apt

from rocmfleet import scripts
from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import host_config
from rocmfleet.domain import rocm
from rocmfleet.facts.rocm import RocmOnHost, SecureBoot

STANDIN = Path(__file__).resolve().parents[1] / "lab" / "standin"

LEGACY_LINE = (
    "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/amdgpu/30.30/ubuntu jammy main"
)
CURRENT_DRIVER_LINE = LEGACY_LINE.replace("30.30", "31.50")
ROCM_LINE = "deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/7.2 jammy main"


def settings(**data) -> rocm.RocmSettings:
    return host_config({"vllm_profile": "llama-4-scout", **data}).rocm


LEGACY = settings(rocm_stream="legacy", rocm_version="7.2", rocm_userspace=True)
CURRENT = settings(rocm_userspace=True)

#: A host converged on legacy 7.2 with the userspace, as rocm-state.sh prints it.
LEGACY_HOST = [
    f"file {rocm.AMDGPU_LIST}",
    f"file {rocm.LEGACY_KEYRING}",
    f"file {rocm.ROCM_LIST}",
    f"file {rocm.PIN_FILE}",
    f"amdgpu {LEGACY_LINE}",
    f"rocm {ROCM_LINE}",
    "rocm deb [arch=amd64 signed-by=/etc/apt/keyrings/rocm.gpg] https://repo.radeon.com/graphics/7.2/ubuntu jammy main",
    "pkg amdgpu-dkms ii 1:6.14.14.303000-2278356.22.04",
    "pkg amdgpu-dkms-firmware ii 1:6.14.14.303000-2278356.22.04",
    "pkg amd-smi-lib ii 7.2.0.70200000-1~22.04",
    "pkg rocm ii 7.2.0.70200000-1~22.04",
    "pkg rocm-core ii 7.2.0.70200000-1~22.04",
    "pkg rocminfo rc 7.1.0",  # removed, config files left: not installed
]
#: A host converged on current 10.0 with the userspace.
CURRENT_HOST = [
    f"file {rocm.AMDGPU_LIST}",
    f"file {rocm.LEGACY_KEYRING}",
    f"file {rocm.CURRENT_SOURCES}",
    f"file {rocm.CURRENT_KEYRING}",
    f"amdgpu {CURRENT_DRIVER_LINE}",
    "pkg amdgpu-dkms ii 1:6.14.14.315000-2278356.22.04",
    "pkg amdgpu-dkms-firmware ii 1:6.14.14.315000-2278356.22.04",
    "pkg amdrocm10.0-gfx942 ii 10.0.0-4",
    "pkg amdrocm-core-dev10.0-gfx942 ii 10.0.0-4",
]


# --- what a host has -------------------------------------------------------------------------


def test_parse_host_state():
    found = rocm.parse_host_rocm(LEGACY_HOST)
    assert found.driver_dir == "30.30" and found.legacy_version == "7.2"
    assert rocm.PIN_FILE in found.files and rocm.CURRENT_SOURCES not in found.files
    assert "rocminfo" not in found.installed and found.installed["rocm-core"] == "7.2.0.70200000-1~22.04"


@pytest.mark.parametrize(
    ("lines", "streams"),
    [
        (LEGACY_HOST, {"legacy"}),
        (CURRENT_HOST, {"current"}),
        # driver only: the legacy stream's pin says legacy; the current stream writes no pin
        ([f"file {rocm.AMDGPU_LIST}", f"file {rocm.PIN_FILE}", f"amdgpu {LEGACY_LINE}"], {"legacy"}),
        ([f"file {rocm.AMDGPU_LIST}", f"amdgpu {CURRENT_DRIVER_LINE}"], {"current"}),
        ([], set()),
        (LEGACY_HOST + ["pkg amdrocm10.0-gfx942 ii 10.0.0-4"], {"legacy", "current"}),  # half switched
    ],
)
def test_streams_on_host(lines, streams):
    assert rocm.streams_on_host(rocm.parse_host_rocm(lines)) == streams


def test_legacy_to_current_removes_meta_package_then_rocm_core_then_files():
    removal = rocm.stream_removal(CURRENT, rocm.parse_host_rocm(LEGACY_HOST))
    assert removal.stream == "legacy"
    # AMD's order: `apt autoremove rocm`, then `apt autoremove rocm-core` (amd-smi-lib goes with it)
    assert removal.package_steps == (("rocm",), ("rocm-core",))
    assert removal.files == (rocm.ROCM_LIST, rocm.PIN_FILE)
    assert removal.describe() == (
        f"the ROCm legacy stream: packages rocm, rocm-core; files {rocm.ROCM_LIST}, {rocm.PIN_FILE}"
    )


def test_current_to_legacy_removes_amdrocm_packages_source_and_key_not_the_driver():
    removal = rocm.stream_removal(LEGACY, rocm.parse_host_rocm(CURRENT_HOST))
    assert removal.stream == "current"
    assert removal.package_steps == (("amdrocm-core-dev10.0-gfx942", "amdrocm10.0-gfx942"),)
    assert removal.files == (rocm.CURRENT_SOURCES, rocm.CURRENT_KEYRING)


def test_versioned_legacy_meta_packages_are_removed_too():
    found = rocm.parse_host_rocm(["pkg rocm7.2.0 ii 7.2.0", "pkg rocm-core7.2.0 ii 7.2.0", "pkg rocm-smi-lib ii 7"])
    assert rocm.stream_packages("legacy", found.installed) == [["rocm7.2.0"], ["rocm-core7.2.0"]]


def test_nothing_to_remove_on_the_same_stream_or_a_bare_host():
    assert rocm.stream_removal(LEGACY, rocm.parse_host_rocm(LEGACY_HOST)) is None
    assert rocm.stream_removal(CURRENT, rocm.parse_host_rocm(CURRENT_HOST)) is None
    assert rocm.stream_removal(CURRENT, rocm.parse_host_rocm([])) is None


# --- downgrades ------------------------------------------------------------------------------


def test_downgrade_within_legacy_is_refused_with_both_versions():
    wanted = settings(rocm_stream="legacy", rocm_version="7.1", rocm_userspace=True)
    message = rocm.downgrade_problem(wanted, rocm.parse_host_rocm(LEGACY_HOST))
    assert message == (
        "rocmfleet: amdgpu driver 30.20 is older than the installed 30.30; ROCm 7.1 is older than the installed "
        "7.2 (legacy stream): refusing a downgrade. Set rocm_allow_downgrade: true for this host to go back; "
        "nothing was changed on this host"
    )
    allowed = settings(rocm_stream="legacy", rocm_version="7.1", rocm_allow_downgrade=True)
    assert rocm.downgrade_problem(allowed, rocm.parse_host_rocm(LEGACY_HOST)) is None


def test_downgrade_within_current_is_refused_driver_and_release():
    older_driver = settings(rocm_amdgpu_version="30.30")
    assert rocm.downgrades(older_driver, rocm.parse_host_rocm(CURRENT_HOST)) == [
        "amdgpu driver 30.30 is older than the installed 31.50"
    ]
    newer_on_host = rocm.parse_host_rocm([*CURRENT_HOST, "pkg amdrocm10.1-gfx942 ii 10.1.0-1"])
    assert rocm.downgrades(CURRENT, newer_on_host) == ["ROCm 10.0 is older than the installed 10.1"]


def test_upgrades_same_versions_and_stream_changes_are_not_downgrades():
    found = rocm.parse_host_rocm(LEGACY_HOST)
    assert rocm.downgrades(LEGACY, found) == []
    assert rocm.downgrades(settings(rocm_stream="legacy", rocm_version="7.2.4"), found) == []
    # current -> legacy: 31.50 -> 30.30 is a stream change, not a downgrade
    assert rocm.downgrades(LEGACY, rocm.parse_host_rocm(CURRENT_HOST)) == []
    driver_only = rocm.parse_host_rocm([f"file {rocm.AMDGPU_LIST}", f"amdgpu {CURRENT_DRIVER_LINE}"])
    assert rocm.downgrades(settings(rocm_stream="legacy", rocm_version="7.2"), driver_only) == []
    # a first install has nothing to compare with
    assert rocm.downgrades(settings(rocm_amdgpu_version="30.30"), rocm.parse_host_rocm([])) == []


# --- Secure Boot -----------------------------------------------------------------------------

SIGNED = settings(rocm_mok_signing_key="/var/lib/dkms/mok.key", rocm_mok_certificate="/var/lib/dkms/mok.pub")


def test_secure_boot_on_without_a_key_names_both_ways_out():
    message = rocm.secure_boot_problem(CURRENT, {"enabled": True})
    assert message.startswith("rocmfleet: Secure Boot is enabled and no module signing key is configured")
    assert "disable Secure Boot in the firmware setup" in message
    assert "rocm_mok_signing_key and rocm_mok_certificate" in message and "mokutil --import" in message
    assert message.endswith("Nothing was changed on this host")


@pytest.mark.parametrize("enabled", [False, None])
def test_secure_boot_off_or_unknown_needs_nothing(enabled):
    assert rocm.secure_boot_problem(CURRENT, {"enabled": enabled}) is None


def test_secure_boot_with_a_configured_pair_needs_it_present_and_enrolled():
    ok = {"enabled": True, "key": True, "certificate": True, "enrolled": True}
    assert rocm.secure_boot_problem(SIGNED, ok) is None
    missing = rocm.secure_boot_problem(SIGNED, {**ok, "key": False})
    assert "rocm_mok_signing_key /var/lib/dkms/mok.key does not exist" in missing
    unenrolled = rocm.secure_boot_problem(SIGNED, {**ok, "enrolled": False, "detail": "sb: SecureBoot enabled"})
    assert "the certificate /var/lib/dkms/mok.pub is not enrolled" in unenrolled
    assert "mokutil --import /var/lib/dkms/mok.pub" in unenrolled


def test_dkms_signing_conf_names_the_pair():
    assert rocm.dkms_signing_conf(CURRENT) is None
    assert (
        rocm.dkms_signing_conf(SIGNED)
        == "mok_signing_key=/var/lib/dkms/mok.key\nmok_certificate=/var/lib/dkms/mok.pub\n"
    )


def test_signing_key_without_certificate_is_bad_data():
    with pytest.raises(ConfigError) as err:
        host_config({"vllm_profile": "llama-4-scout", "rocm_mok_signing_key": "/var/lib/dkms/mok.key"})
    assert "rocm_mok_signing_key and rocm_mok_certificate go together" in str(err.value)
    with pytest.raises(ConfigError) as err:
        host_config({"vllm_profile": "llama-4-scout", "rocm_mok_signing_key": "mok.key", "rocm_mok_certificate": "/c"})
    assert "rocm_mok_signing_key" in str(err.value)


# --- the host-side scripts, run here ------------------------------------------------------------


def _run_script(name: str, *args: str, path: str | None = None) -> list[str]:
    env = {"PATH": f"{path}:/usr/bin:/bin" if path else "/usr/bin:/bin"}
    out = subprocess.run(["sh", "-c", scripts.text(name), name, *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_rocm_state_script_reports_files_and_deb_lines(tmp_path):
    amdgpu, rocm_list, pin, absent = (tmp_path / n for n in ("amdgpu.list", "rocm.list", "pin", "absent"))
    amdgpu.write_text(f"# Managed by rocmfleet\n{LEGACY_LINE}\n")
    rocm_list.write_text(f"{ROCM_LINE}\n")
    pin.write_text(rocm.PIN)
    lines = _run_script("rocm-state.sh", str(amdgpu), str(rocm_list), str(amdgpu), str(pin), str(absent))
    found = RocmOnHost().process(lines)
    assert found.files == {str(amdgpu), str(rocm_list), str(pin)}
    assert found.driver_dir == "30.30" and found.legacy_version == "7.2"


def test_secure_boot_script_with_the_lab_standin_mokutil(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mokutil").write_text((STANDIN / "mokutil").read_text().replace("/etc/rocmfleet-lab", str(tmp_path)))
    (bindir / "mokutil").chmod(0o755)
    key, cert = tmp_path / "mok.key", tmp_path / "mok.pub"
    key.write_text("stand-in key\n")
    cert.write_text("stand-in certificate\n")
    fact = SecureBoot()
    info = fact.process(_run_script("secure-boot.sh", str(key), str(cert), path=str(bindir)))
    assert (info["enabled"], info["key"], info["certificate"], info["enrolled"]) == (True, True, True, False)
    subprocess.run([str(bindir / "mokutil"), "--import", str(cert)], check=True, capture_output=True)
    info = fact.process(_run_script("secure-boot.sh", str(key), str(cert), path=str(bindir)))
    assert info["enrolled"] is True
    assert fact.process(_run_script("secure-boot.sh"))["enabled"] is None  # no mokutil: unknown
    no_pair = fact.process(_run_script("secure-boot.sh", path=str(bindir)))
    assert no_pair["enabled"] is True and no_pair["enrolled"] is None


def test_secure_boot_fact_reads_real_mokutil_lines():
    fact = SecureBoot()
    info = fact.process(["sb: SecureBoot enabled", "key: present", "certificate: present",
                         "enrolled: /var/lib/dkms/mok.pub is already enrolled"])  # fmt: skip
    assert (info["enabled"], info["enrolled"]) == (True, True)
    info = fact.process(["sb: SecureBoot disabled", "key: missing", "certificate: present",
                         "enrolled: /var/lib/dkms/mok.pub is not enrolled"])  # fmt: skip
    assert (info["enabled"], info["key"], info["enrolled"]) == (False, False, False)
    assert fact.process(["sb: EFI variables are not supported on this system"])["enabled"] is False


# --- the operations' commands for given facts -------------------------------------------------


class FakeHost:
    name = "gpu-1"
    print_prefix = "[gpu-1] "

    def __init__(self, **facts) -> None:
        self.facts = {
            "LinuxDistribution": {"release_meta": {"ID": "debian", "VERSION_ID": "12"}},
            "Kernels": {"running": "6.1.0-28-amd64", "installed": ["6.1.0-28-amd64"]},
            "SecureBoot": {"enabled": False},
            "RocmOnHost": rocm.parse_host_rocm([]),
            "InstalledVersions": {},
            **facts,
        }
        self.noops: list[str] = []
        self.asked: list[tuple[str, dict]] = []

    def get_fact(self, fact, **kwargs):
        self.asked.append((fact.__name__, kwargs))
        return self.facts[fact.__name__]

    def noop(self, message: str) -> None:
        self.noops.append(message)


@pytest.fixture
def ops(monkeypatch):
    from rocmfleet.operations import rocm as rocm_ops

    def use(fake: FakeHost, executing: bool = True):
        monkeypatch.setattr(rocm_ops, "host", fake)
        monkeypatch.setattr(rocm_ops, "state", type("State", (), {"is_executing": executing})())
        return rocm_ops

    return use


def commands(generator) -> list[str]:
    return [str(c) for c in generator]


def failure(generated: list) -> str:
    (command,) = generated
    assert isinstance(command, FunctionCommand)
    return command.args[0]


def test_preflight_fails_a_secure_boot_host_without_a_key(ops):
    fake = FakeHost(SecureBoot={"enabled": True})
    message = failure(list(ops(fake).preflight._inner(CURRENT)))
    assert message == rocm.secure_boot_problem(CURRENT, {"enabled": True})
    assert ("SecureBoot", {"key": None, "certificate": None}) in fake.asked


def test_preflight_asks_about_the_configured_pair_and_passes_when_enrolled(ops):
    ok = {"enabled": True, "key": True, "certificate": True, "enrolled": True}
    fake = FakeHost(SecureBoot=ok)
    assert list(ops(fake).preflight._inner(SIGNED)) == []
    assert ("SecureBoot", {"key": "/var/lib/dkms/mok.key", "certificate": "/var/lib/dkms/mok.pub"}) in fake.asked
    assert fake.noops == ["Debian 12, kernel 6.1.0-28-amd64: supported for ROCm 10.0 (current)"]


def test_preflight_refuses_a_downgrade_unless_allowed(ops):
    fake = FakeHost(RocmOnHost=rocm.parse_host_rocm(LEGACY_HOST))
    older = settings(rocm_stream="legacy", rocm_version="7.1")
    assert "refusing a downgrade" in failure(list(ops(fake).preflight._inner(older)))
    allowed = settings(rocm_stream="legacy", rocm_version="7.1", rocm_allow_downgrade=True)
    assert list(ops(fake).preflight._inner(allowed)) == []


def test_preflight_says_it_would_fail_under_dry(ops, caplog):
    fake = FakeHost(SecureBoot={"enabled": True})
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        failure(list(ops(fake, executing=False).preflight._inner(CURRENT)))
    assert "[gpu-1] would fail: rocmfleet: Secure Boot is enabled" in caplog.text


def test_legacy_to_current_commands_in_amds_order(ops):
    fake = FakeHost(RocmOnHost=rocm.parse_host_rocm(LEGACY_HOST))
    got = commands(ops(fake).remove_other_stream._inner(CURRENT))
    apt = noninteractive_apt("").strip()
    assert got == [
        f"{apt} purge --auto-remove rocm",
        f"{apt} purge --auto-remove rocm-core",
        f"rm -f {rocm.ROCM_LIST} {rocm.PIN_FILE}",
        f"{apt} clean",
        "mkdir -p /run/rocmfleet/reboot-required.d && printf '%s\\n' 'ROCm legacy stream removed (current installed)'"
        " > /run/rocmfleet/reboot-required.d/stream",
    ]


def test_current_to_legacy_removes_the_current_source_and_key(ops):
    fake = FakeHost(RocmOnHost=rocm.parse_host_rocm(CURRENT_HOST))
    got = commands(ops(fake).remove_other_stream._inner(LEGACY))
    assert got[0].endswith("purge --auto-remove amdrocm-core-dev10.0-gfx942 amdrocm10.0-gfx942")
    assert got[1] == f"rm -f {rocm.CURRENT_SOURCES} {rocm.CURRENT_KEYRING}"
    assert "amdgpu-dkms" not in " ".join(got)  # the driver is replaced in place by the legacy one


def test_stream_removal_under_dry_says_what_would_go(ops, caplog):
    fake = FakeHost(RocmOnHost=rocm.parse_host_rocm(LEGACY_HOST))
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        commands(ops(fake, executing=False).remove_other_stream._inner(CURRENT))
    assert (
        f"[gpu-1] would remove the ROCm legacy stream: packages rocm, rocm-core; files {rocm.ROCM_LIST}" in caplog.text
    )


def test_same_stream_is_a_noop(ops):
    fake = FakeHost(RocmOnHost=rocm.parse_host_rocm(CURRENT_HOST))
    assert commands(ops(fake).remove_other_stream._inner(CURRENT)) == []
    assert fake.noops == ["nothing of the other ROCm stream on this host (current wanted)"]


def test_userspace_off_purges_this_streams_userspace_without_reboot(ops):
    fake = FakeHost(RocmOnHost=rocm.parse_host_rocm(CURRENT_HOST))
    got = commands(ops(fake).remove_userspace._inner(settings()))
    assert len(got) == 1 and got[0].endswith("purge --auto-remove amdrocm-core-dev10.0-gfx942 amdrocm10.0-gfx942")
    legacy = FakeHost(RocmOnHost=rocm.parse_host_rocm(LEGACY_HOST))
    got = commands(ops(legacy).remove_userspace._inner(settings(rocm_stream="legacy", rocm_version="7.2")))
    assert [c.rsplit(" ", 2)[-2:] for c in got] == [["--auto-remove", "rocm"], ["--auto-remove", "rocm-core"]]
    assert commands(ops(fake).remove_userspace._inner(CURRENT)) == []  # wanted
    assert fake.noops == ["the ROCm userspace is wanted"]


def test_signing_change_rebuilds_an_installed_driver_only(ops):
    fake = FakeHost(InstalledVersions={"amdgpu-dkms": "1:6.14.14.315000"})
    got = commands(ops(fake).reinstall_if_installed._inner(["amdgpu-dkms"], "amdgpu rebuilt and signed"))
    assert got[0].endswith("install --reinstall --no-install-recommends amdgpu-dkms")
    assert got[1].endswith("> /run/rocmfleet/reboot-required.d/signing")
    fresh = FakeHost()
    assert commands(ops(fresh).reinstall_if_installed._inner(["amdgpu-dkms"], "x")) == []


def test_driver_failure_under_secure_boot_says_where_to_look(ops):
    fake = FakeHost(AmdgpuLoaded={"module": False, "kfd": False})
    message = failure(list(ops(fake).driver_ready._inner(check_module=True, signed=True)))
    assert "modinfo -F signer amdgpu" in message and "mokutil --list-enrolled" in message
    assert "signer" not in failure(list(ops(fake).driver_ready._inner(check_module=True)))


def test_dkms_failure_fails_the_host_with_dkms_status_and_make_log(ops):
    fake = FakeHost(
        Kernels={"running": "6.1.0-28-amd64", "installed": ["6.1.0-28-amd64", "9.0.0-broken"]},
        DkmsStatus="amdgpu/6.14.14-3150, 6.1.0-28-amd64, x86_64: installed",
        DkmsMakeLogs="--- /var/lib/dkms/amdgpu/6.14.14-3150/build/make.log (last 30 lines) ---\nerror: drm_legacy_init",
    )
    message = failure(list(ops(fake).dkms_installed._inner("amdgpu")))
    assert message.startswith("rocmfleet: amdgpu is not installed for kernel 9.0.0-broken (dkms status: no entry)")
    assert "--- dkms status ---\namdgpu/6.14.14-3150, 6.1.0-28-amd64, x86_64: installed" in message
    assert message.endswith("make.log (last 30 lines) ---\nerror: drm_legacy_init")
    assert ("DkmsMakeLogs", {"module": "amdgpu"}) in fake.asked


def test_preflight_given_the_release_reads_neither_the_os_nor_the_kernels(ops):
    fake = FakeHost(SecureBoot={"enabled": False})
    assert list(ops(fake).preflight._inner(CURRENT, release=("debian", "12", "6.1.0-28-amd64"))) == []
    asked = [name for name, _ in fake.asked]
    assert "LinuxDistribution" not in asked and "Kernels" not in asked
    assert fake.noops == ["Debian 12, kernel 6.1.0-28-amd64: supported for ROCm 10.0 (current)"]


def test_preflight_given_an_unsupported_release_fails(ops):
    fake = FakeHost()
    message = failure(list(ops(fake).preflight._inner(CURRENT, release=("debian", "11", "5.10.0-30-amd64"))))
    assert "nothing was changed on this host" in message
