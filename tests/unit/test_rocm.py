"""ROCm role logic: repository files line by line against AMD's documented lines, support, DKMS."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import host_config
from rocmfleet.domain import rocm, rocmtools

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "mi300x.md"
OSES = sorted(rocm.OS_TARGETS.values(), key=lambda t: t.key)


@pytest.fixture(scope="module")
def reference() -> str:
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} not found (the shared reference lives beside the repository)")
    return REFERENCE.read_text()


def _block_after(text: str, marker: str) -> list[str]:
    """Lines of the first fenced code block after ``marker`` in the reference."""
    rest = text[text.index(marker) :]
    block = re.search(r"```[a-z]*\n(.*?)```", rest, re.S)
    assert block, marker
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def _settings(**data) -> rocm.RocmSettings:
    return host_config({"vllm_profile": "llama-4-scout", **data}).rocm


@pytest.mark.parametrize("target", OSES, ids=lambda t: t.key)
def test_amdgpu_list_is_amds_line(reference, target):
    (line,) = _block_after(reference, "Kernel driver list file")
    line = line.replace("<amdgpu_url_version>", "30.30").replace("<noble|jammy>", target.suite)
    if target.debian:  # "The Debian page uses arch=amd64 and the jammy suite" (reference §2.2)
        line = line.replace("arch=amd64,i386", "arch=amd64")
    settings = _settings(rocm_stream="legacy", rocm_version="7.2")
    assert rocm.amdgpu_list(settings, target).splitlines() == [line]


@pytest.mark.parametrize("target", OSES, ids=lambda t: t.key)
def test_rocm_list_is_amds_lines(reference, target):
    lines = _block_after(reference, "ROCm list file")
    expected = [line.replace("<rocm_version>", "7.2.1").replace("<noble|jammy>", target.suite) for line in lines]
    settings = _settings(rocm_stream="legacy", rocm_version="7.2.1", rocm_userspace=True)
    assert rocm.rocm_list(settings, target).splitlines() == expected


def test_pin_is_amds(reference):
    assert rocm.PIN.splitlines() == _block_after(reference, "Pin file")


@pytest.mark.parametrize("target", OSES, ids=lambda t: t.key)
def test_current_sources_is_amds_deb822(reference, target):
    lines = _block_after(reference, "deb822 file")
    expected = [line.replace("<ubuntu2404|ubuntu2204|debian12>", target.key) for line in lines]
    settings = _settings(rocm_stream="current", rocm_version="10.0", rocm_userspace=True)
    assert rocm.current_sources(settings, target).splitlines() == expected


def test_udev_rule_is_amds(reference):
    rest = reference[reference.index("70-amdgpu.rules") :]
    assert list(rocm.UDEV_RULE_LINES) == [line.strip() for line in rest.splitlines()[2:4]]


@pytest.mark.parametrize(
    ("stream", "userspace", "present"),
    [
        ("legacy", False, {rocm.AMDGPU_LIST, rocm.PIN_FILE}),
        ("legacy", True, {rocm.AMDGPU_LIST, rocm.PIN_FILE, rocm.ROCM_LIST}),
        ("current", False, {rocm.AMDGPU_LIST}),
        ("current", True, {rocm.AMDGPU_LIST, rocm.CURRENT_SOURCES}),
    ],
)
def test_repo_files_leave_no_other_stream_file(stream, userspace, present):
    version = "7.2" if stream == "legacy" else "10.0"
    files = rocm.repo_files(_settings(rocm_stream=stream, rocm_version=version, rocm_userspace=userspace), OSES[0])
    assert {path for path, body in files.items() if body is not None} == present
    assert set(files) == {rocm.AMDGPU_LIST, rocm.PIN_FILE, rocm.ROCM_LIST, rocm.CURRENT_SOURCES}


def test_defaults_are_amds_current_stream_driver_only():
    settings = _settings()
    assert (settings.rocm_stream, settings.rocm_version, settings.rocm_userspace) == ("current", "10.0", False)
    assert settings.amdgpu_version == "31.50"
    assert settings.userspace_packages == ["amdrocm10.0-gfx942"]
    assert settings.driver_repo == "https://repo.radeon.com/amdgpu/31.50/ubuntu"


@pytest.mark.parametrize(
    ("version", "driver"), [("7.0", "30.10"), ("7.0.1", "30.10.1"), ("7.1", "30.20"), ("7.2.4", "30.30")]
)
def test_driver_pairing(version, driver):
    assert _settings(rocm_stream="legacy", rocm_version=version).amdgpu_version == driver


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"rocm_stream": "legacy", "rocm_version": "10.0"}, "rocm_version"),
        ({"rocm_stream": "legacy", "rocm_version": "7.2.5"}, "rocm_version"),
        ({"rocm_stream": "current", "rocm_version": "7.2"}, "rocm_version"),
        ({"rocm_stream": "nightly"}, "rocm_stream"),
        ({"rocm_device_access": "acl"}, "rocm_device_access"),
        ({"rocm_reboot_parallel": 0}, "rocm_reboot_parallel"),
        ({"rocm_supported_kernels": {"fedora40": ["*"]}}, "rocm_supported_kernels"),
        ({"rocm_typo": 1}, "rocm_typo"),
    ],
)
def test_bad_data_names_host_key_and_value(data, key):
    with pytest.raises(ConfigError) as exc:
        host_config({"vllm_profile": "llama-4-scout", **data})
    (problem,) = exc.value.problems
    assert problem.key == key, problem


def test_version_given_as_number_is_refused_with_quote_it():
    assert _settings(rocm_stream="legacy", rocm_version="7.2").rocm_version == "7.2"
    for key, number in (("rocm_version", 7.2), ("rocm_amdgpu_version", 30.30)):
        with pytest.raises(ConfigError) as err:
            _settings(**{"rocm_stream": "legacy", "rocm_version": "7.2", key: number})
        assert [str(p) for p in err.value.problems] == [
            f"{key}: Input should be a valid string; quote it: unquoted, YAML reads it as a number "
            f"(30.30 becomes 30.3) (got {number!r})"
        ]


def test_unsupported_os_and_kernel_say_what_is_supported():
    with pytest.raises(rocm.UnsupportedHost, match="Ubuntu 24.04, Ubuntu 22.04, Debian 12"):
        rocm.os_target("debian", "11")
    target = rocm.os_target("ubuntu", "24.04")
    rocm.check_kernel(_settings(), target, "6.8.0-45-generic")
    with pytest.raises(rocm.UnsupportedHost, match=r"6\.8\.\*, 6\.14\.\*"):
        rocm.check_kernel(_settings(), target, "6.5.0-15-generic")


def test_headers_ubuntu_adds_modules_extra_debian_does_not():
    assert rocm.header_packages(rocm.os_target("ubuntu", "22.04"), "6.8.0-1-generic") == [
        "linux-headers-6.8.0-1-generic",
        "linux-modules-extra-6.8.0-1-generic",
    ]
    assert rocm.header_packages(rocm.os_target("debian", "12"), "6.1.0-28-amd64") == ["linux-headers-6.1.0-28-amd64"]


DKMS = """amdgpu/6.14.14-2204008.24.04, 6.14.0-29-generic, x86_64: installed
amdgpu/6.14.14-2204008.24.04, 6.14.0-33-generic, x86_64: built
amdgpu, 6.2.4, 5.15.0-91-generic, x86_64: installed (original_module exists)
other/1.0: added
"""


def test_parse_dkms_status_both_formats():
    entries = rocmtools.parse_dkms_status(DKMS)
    assert [(e.module, e.version, e.kernel, e.state) for e in entries] == [
        ("amdgpu", "6.14.14-2204008.24.04", "6.14.0-29-generic", "installed"),
        ("amdgpu", "6.14.14-2204008.24.04", "6.14.0-33-generic", "built"),
        ("amdgpu", "6.2.4", "5.15.0-91-generic", "installed (original_module exists)"),
    ]


def test_dkms_problems_for_running_and_newest_kernel():
    entries = rocmtools.parse_dkms_status(DKMS)
    kernels = ["6.14.0-29-generic", "6.14.0-33-generic", "6.14.0-100-generic"]
    assert rocmtools.newest_kernel(kernels) == "6.14.0-100-generic"
    assert rocmtools.dkms_problems(entries, "amdgpu", ["6.14.0-29-generic", "6.14.0-29-generic"]) == []
    problems = rocmtools.dkms_problems(entries, "amdgpu", ["6.14.0-29-generic", "6.14.0-33-generic"])
    assert problems == ["amdgpu is not installed for kernel 6.14.0-33-generic (dkms status: built)"]
