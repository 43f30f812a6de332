"""ROCm stream changes, downgrades and Secure Boot: the pure logic and the host-side scripts.

The operations' commands for given facts are JSON cases in ``tests/operations/rocm.*/``, the facts'
parsing of given output in ``tests/facts/rocm.*/`` (``tests/operations/README.md``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rocmfleet import scripts
from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import host_config
from rocmfleet.domain import rocm, rocmhost, rocmtools
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
    found = rocmhost.parse_host_rocm(LEGACY_HOST)
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
    assert rocmhost.streams_on_host(rocmhost.parse_host_rocm(lines)) == streams


def test_legacy_to_current_removes_meta_package_then_rocm_core_then_files():
    removal = rocmhost.stream_removal(CURRENT, rocmhost.parse_host_rocm(LEGACY_HOST))
    assert removal.stream == "legacy"
    # AMD's order: `apt autoremove rocm`, then `apt autoremove rocm-core` (amd-smi-lib goes with it)
    assert removal.package_steps == (("rocm",), ("rocm-core",))
    assert removal.files == (rocm.ROCM_LIST, rocm.PIN_FILE)
    assert removal.describe() == (
        f"the ROCm legacy stream: packages rocm, rocm-core; files {rocm.ROCM_LIST}, {rocm.PIN_FILE}"
    )


def test_current_to_legacy_removes_amdrocm_packages_source_and_key_not_the_driver():
    removal = rocmhost.stream_removal(LEGACY, rocmhost.parse_host_rocm(CURRENT_HOST))
    assert removal.stream == "current"
    assert removal.package_steps == (("amdrocm-core-dev10.0-gfx942", "amdrocm10.0-gfx942"),)
    assert removal.files == (rocm.CURRENT_SOURCES, rocm.CURRENT_KEYRING)


def test_versioned_legacy_meta_packages_are_removed_too():
    found = rocmhost.parse_host_rocm(["pkg rocm7.2.0 ii 7.2.0", "pkg rocm-core7.2.0 ii 7.2.0", "pkg rocm-smi-lib ii 7"])
    assert rocmhost.stream_packages("legacy", found.installed) == [["rocm7.2.0"], ["rocm-core7.2.0"]]


def test_nothing_to_remove_on_the_same_stream_or_a_bare_host():
    assert rocmhost.stream_removal(LEGACY, rocmhost.parse_host_rocm(LEGACY_HOST)) is None
    assert rocmhost.stream_removal(CURRENT, rocmhost.parse_host_rocm(CURRENT_HOST)) is None
    assert rocmhost.stream_removal(CURRENT, rocmhost.parse_host_rocm([])) is None


# --- downgrades ------------------------------------------------------------------------------


def test_downgrade_within_legacy_is_refused_with_both_versions():
    wanted = settings(rocm_stream="legacy", rocm_version="7.1", rocm_userspace=True)
    message = rocmhost.downgrade_problem(wanted, rocmhost.parse_host_rocm(LEGACY_HOST))
    assert message == (
        "rocmfleet: amdgpu driver 30.20 is older than the installed 30.30; ROCm 7.1 is older than the installed "
        "7.2 (legacy stream): refusing a downgrade. Set rocm_allow_downgrade: true for this host to go back; "
        "nothing was changed on this host"
    )
    allowed = settings(rocm_stream="legacy", rocm_version="7.1", rocm_allow_downgrade=True)
    assert rocmhost.downgrade_problem(allowed, rocmhost.parse_host_rocm(LEGACY_HOST)) is None


def test_downgrade_within_current_is_refused_driver_and_release():
    older_driver = settings(rocm_amdgpu_version="30.30")
    assert rocmhost.downgrades(older_driver, rocmhost.parse_host_rocm(CURRENT_HOST)) == [
        "amdgpu driver 30.30 is older than the installed 31.50"
    ]
    newer_on_host = rocmhost.parse_host_rocm([*CURRENT_HOST, "pkg amdrocm10.1-gfx942 ii 10.1.0-1"])
    assert rocmhost.downgrades(CURRENT, newer_on_host) == ["ROCm 10.0 is older than the installed 10.1"]


def test_upgrades_same_versions_and_stream_changes_are_not_downgrades():
    found = rocmhost.parse_host_rocm(LEGACY_HOST)
    assert rocmhost.downgrades(LEGACY, found) == []
    assert rocmhost.downgrades(settings(rocm_stream="legacy", rocm_version="7.2.4"), found) == []
    # current -> legacy: 31.50 -> 30.30 is a stream change, not a downgrade
    assert rocmhost.downgrades(LEGACY, rocmhost.parse_host_rocm(CURRENT_HOST)) == []
    driver_only = rocmhost.parse_host_rocm([f"file {rocm.AMDGPU_LIST}", f"amdgpu {CURRENT_DRIVER_LINE}"])
    assert rocmhost.downgrades(settings(rocm_stream="legacy", rocm_version="7.2"), driver_only) == []
    # a first install has nothing to compare with
    assert rocmhost.downgrades(settings(rocm_amdgpu_version="30.30"), rocmhost.parse_host_rocm([])) == []


# --- Secure Boot -----------------------------------------------------------------------------

SIGNED = settings(rocm_mok_signing_key="/var/lib/dkms/mok.key", rocm_mok_certificate="/var/lib/dkms/mok.pub")


def test_secure_boot_on_without_a_key_names_both_ways_out():
    message = rocmtools.secure_boot_problem(CURRENT, {"enabled": True})
    assert message.startswith("rocmfleet: Secure Boot is enabled and no module signing key is configured")
    assert "disable Secure Boot in the firmware setup" in message
    assert "rocm_mok_signing_key and rocm_mok_certificate" in message and "mokutil --import" in message
    assert message.endswith("Nothing was changed on this host")


@pytest.mark.parametrize("enabled", [False, None])
def test_secure_boot_off_or_unknown_needs_nothing(enabled):
    assert rocmtools.secure_boot_problem(CURRENT, {"enabled": enabled}) is None


def test_secure_boot_with_a_configured_pair_needs_it_present_and_enrolled():
    ok = {"enabled": True, "key": True, "certificate": True, "enrolled": True}
    assert rocmtools.secure_boot_problem(SIGNED, ok) is None
    missing = rocmtools.secure_boot_problem(SIGNED, {**ok, "key": False})
    assert "rocm_mok_signing_key /var/lib/dkms/mok.key does not exist" in missing
    unenrolled = rocmtools.secure_boot_problem(SIGNED, {**ok, "enrolled": False, "detail": "sb: SecureBoot enabled"})
    assert "the certificate /var/lib/dkms/mok.pub is not enrolled" in unenrolled
    assert "mokutil --import /var/lib/dkms/mok.pub" in unenrolled


def test_dkms_signing_conf_names_the_pair():
    assert rocmtools.dkms_signing_conf(CURRENT) is None
    assert (
        rocmtools.dkms_signing_conf(SIGNED)
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
