"""Every parser a check relies on refuses empty, truncated and unknown output (issue 16):
the check is then an error (:class:`~rocmfleet.domain.tooloutput.CannotCheck`), never a pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from rocmfleet import scripts
from rocmfleet.domain import docker, rocmtools, tuning
from rocmfleet.domain.tooloutput import CannotCheck, ToolOutputError

DKMS = "amdgpu/6.14.14-2204008.24.04, 6.14.0-29-generic, x86_64: installed\n"
MADISON = "amdgpu-dkms | 1:6.14.14.30300000-2278356.22.04 | https://repo.radeon.com/amdgpu/6.3/ubuntu jammy/main\n"
GRUB = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="iommu=pt amd_iommu=on"\n'
GRUB_CFG = "menuentry 'Debian' {\n\tlinux /vmlinuz-6.1.0 root=/dev/sda1 ro iommu=pt amd_iommu=on\n}\n"
INSPECT = '[{"Id": "abc", "Config": {"Image": "x"}}]'


def test_the_good_outputs_parse():
    assert [e.kernel for e in rocmtools.parse_dkms_status(DKMS, strict=True)] == ["6.14.0-29-generic"]
    assert rocmtools.parse_madison(MADISON, "amdgpu-dkms") == [
        ("1:6.14.14.30300000-2278356.22.04", "https://repo.radeon.com/amdgpu/6.3/ubuntu")
    ]
    assert tuning.grub_cmdline(GRUB) == ["iommu=pt", "amd_iommu=on"]
    assert tuning.grub_cfg_linux_lines(GRUB_CFG)[0][-1] == "amd_iommu=on"
    assert docker.parse_daemon_json('{"live-restore": true}') == {"live-restore": True}
    assert docker.parse_inspect(INSPECT, "vllm-a")["Id"] == "abc"
    assert rocmtools.reboot_reasons(0, "state: none\n") == []
    assert rocmtools.reboot_reasons(0, "state: listed\namdgpu-dkms installed\n\n") == ["amdgpu-dkms installed"]


def test_dkms_added_lines_and_warnings_are_not_entries():
    text = "Warning: something\namdgpu/6.14.14: added\n" + DKMS
    assert len(rocmtools.parse_dkms_status(text, strict=True)) == 1


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (lambda t: rocmtools.parse_dkms_status(t, strict=True), ""),
        (lambda t: rocmtools.parse_dkms_status(t, strict=True), DKMS[:30]),  # truncated mid-line
        (lambda t: rocmtools.parse_dkms_status(t, strict=True), "amdgpu 6.14.14 is installed for 6.14.0\n"),
        (lambda t: rocmtools.parse_madison(t, "amdgpu-dkms"), ""),
        (lambda t: rocmtools.parse_madison(t, "amdgpu-dkms"), MADISON[:40]),
        (lambda t: rocmtools.parse_madison(t, "amdgpu-dkms"), "N: Unable to locate package amdgpu-dkms\n"),
        (lambda t: rocmtools.parse_madison(t, "amdgpu-dkms"), MADISON.replace("amdgpu-dkms", "rocm-core")),
        (tuning.grub_cmdline, ""),
        (tuning.grub_cmdline, GRUB[:60]),  # truncated before the GRUB_CMDLINE_LINUX line
        (tuning.grub_cmdline, GRUB[:-5]),  # truncated inside the quotes
        (tuning.grub_cmdline, "[grub]\ncmdline = iommu=pt\n"),
        (tuning.grub_cfg_linux_lines, ""),
        (tuning.grub_cfg_linux_lines, GRUB_CFG[:20]),
        (docker.parse_daemon_json, ""),
        (docker.parse_daemon_json, '{"live-restore": tr'),
        (docker.parse_daemon_json, '["live-restore"]'),
        (lambda t: docker.parse_inspect(t, "vllm-a"), ""),
        (lambda t: docker.parse_inspect(t, "vllm-a"), INSPECT[:15]),
        (lambda t: docker.parse_inspect(t, "vllm-a"), "[]"),
        (lambda t: docker.parse_inspect(t, "vllm-a"), '{"Id": "abc"}'),
        (lambda t: rocmtools.reboot_reasons(0, t), ""),
        (lambda t: rocmtools.reboot_reasons(0, t), "amdgpu-dkms installed\n"),
    ],
)
def test_empty_truncated_or_unknown_output_is_an_error(parse, text):
    with pytest.raises(ToolOutputError) as caught:
        parse(text)
    assert isinstance(caught.value, CannotCheck)


def _reboot_owed(directory: str) -> list[str]:
    """Run the script as this user; as root, as ``nobody`` (root reads a directory without permission)."""
    argv = ["sh", "-c", scripts.text("reboot-owed.sh"), "reboot-owed.sh", directory]
    if os.geteuid() == 0:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    done = subprocess.run(argv, capture_output=True, text=True)
    return rocmtools.reboot_reasons(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def open_dir():
    """A directory every user may enter (pytest's tmp_path is root's own when run as root)."""
    path = Path(tempfile.mkdtemp(prefix="rocmfleet-reboot-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_no_reboot_owed_reads_the_directory(open_dir):
    owed = open_dir / "reboot-required.d"
    assert _reboot_owed(str(owed)) == []
    owed.mkdir(mode=0o755)
    assert _reboot_owed(str(owed)) == []
    (owed / "amdgpu").write_text("amdgpu-dkms installed")
    (owed / "amdgpu").chmod(0o644)
    assert _reboot_owed(str(owed)) == ["amdgpu-dkms installed"]


def test_an_unreadable_reboot_directory_is_an_error_not_a_pass(open_dir):
    owed = open_dir / "reboot-required.d"
    owed.mkdir(mode=0o700)
    (owed / "amdgpu").write_text("amdgpu-dkms installed")
    with pytest.raises(CannotCheck, match="cannot read the directory"):
        _reboot_owed(str(owed))
    owed.chmod(0o755)
    (owed / "amdgpu").chmod(0o600)
    with pytest.raises(CannotCheck, match="exit 3"):
        _reboot_owed(str(owed))


class _Result:
    def __init__(self, rc: int, stdout: str | bytes, stderr: str = "") -> None:
        self.stdout_bytes = stdout if isinstance(stdout, bytes) else stdout.encode()
        self.rc, self.stdout, self.stderr = rc, self.stdout_bytes.decode("utf-8", "replace"), stderr


class _Host:
    """A check's ``host`` whose every command answers ``result`` (``runs``: how many it ran)."""

    def __init__(self, result: _Result) -> None:
        self.result = result
        self.runs = 0
        self.backend = type("Backend", (), {"hostname": "h"})()

    def run(self, command: str, *args: str) -> _Result:
        self.runs += 1
        return self.result


class _Sudoless:
    """A check's ``host`` that runs each command with ``sh`` on this machine (no SSH)."""

    backend = type("Backend", (), {"hostname": "local"})()

    def run(self, command: str, *args: str) -> _Result:
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
        return _Result(proc.returncode, proc.stdout, proc.stderr)


def test_the_checks_one_read_runs_and_parses_here():
    """state.sh with every item the checks ask for: it runs (shellcheck-clean sh), ends with its end
    line, and says for each path whether it exists; each unit, package and run is reported or
    absent (then a check that needs it is an error)."""
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _Sudoless()
    got = expect.gathered(host)
    assert set(got.paths) >= set(expect.PATHS)
    assert got.os is not None and got.os.kernel
    assert set(got.runs) == {"virt", "render"}
    assert expect.text(host, "/proc/cmdline") is not None  # every Linux has one
    assert (expect.text(host, "/etc/docker/daemon.json") is None) == (not Path("/etc/docker/daemon.json").exists())
    with pytest.raises(CannotCheck, match="did not report /etc/hostname"):
        expect.path_state(host, "/etc/hostname")  # not asked for: an error, never "missing"
    expect._memo.clear()


@pytest.mark.parametrize(
    "result",
    [_Result(0, ""), _Result(0, '{"kind":"os","id":"debian","version_id":"12","codename":"x","kernel":"6"}\n'),
     _Result(0, '{"kind":"path","path":"/k"}\n{"kind":"end"}\n'), _Result(0, 'garbage\n{"kind":"end"}\n'),
     _Result(1, "", "sudo: a password is required")],
    ids=["empty", "truncated", "unknown-format", "garbage", "failed"],
)  # fmt: skip
def test_the_checks_read_empty_truncated_unknown_or_failed_is_an_error(result):
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _Host(result)
    for _ in range(3):  # each check that needs it errors; the host is asked once
        with pytest.raises(CannotCheck):
            expect.gathered(host)
    assert host.runs == 1
    expect._memo.clear()


def test_a_stray_byte_in_one_file_is_that_files_text_not_every_checks_error():
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _Host(_Result(0, b'{"kind":"text","key":"/g","text":"# caf\xe9"}\n{"kind":"end"}\n'))
    assert expect.gathered(host).texts == {"/g": ["# caf\ufffd"]}
    expect._memo.clear()


def _read(*lines: str) -> _Host:
    return _Host(_Result(0, "\n".join([*lines, '{"kind":"end"}']) + "\n"))


def test_what_the_read_did_not_report_is_an_error_not_a_pass():
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _read('{"kind":"path","path":"/dev/kfd","type":"missing"}')
    assert expect.exists(host, "/dev/kfd") is False and expect.text(host, "/dev/kfd") is None
    for read in (
        lambda: expect.exists(host, expect.DAEMON_JSON),
        lambda: expect.unit_state(host, "docker.service"),  # no systemd: systemctl show said nothing
        lambda: expect.in_container(host),
        lambda: expect.render_gid(host),
    ):
        with pytest.raises(CannotCheck):
            read()
    expect._memo.clear()


def test_an_empty_file_is_empty_text_an_unreadable_one_an_error_and_lines_come_back_whole():
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _read(
        '{"kind":"path","path":"/e","type":"file","mode":"644","sha256":"' + expect.EMPTY_SHA256 + '"}',
        '{"kind":"path","path":"/g","type":"file","mode":"644","sha256":"x"}',
        '{"kind":"text","key":"/g","text":"GRUB_CMDLINE_LINUX=\\"a\\tb\\""}',
        '{"kind":"text","key":"/g","text":""}',
    )
    assert expect.text(host, "/e") == ""
    assert expect.text(host, "/g") == 'GRUB_CMDLINE_LINUX="a\tb"\n\n'
    expect._memo.clear()
    unreadable = _read('{"kind":"path","path":"/g","type":"file","mode":"600","sha256":""}')
    with pytest.raises(CannotCheck, match="/g could not be read"):
        expect.text(unreadable, "/g")  # not "": a "does not contain" check would pass on it
    expect._memo.clear()
    dangling = _read('{"kind":"path","path":"/g","type":"link","mode":"777"}')
    with pytest.raises(CannotCheck, match="/g could not be read"):
        expect.text(dangling, "/g")
    expect._memo.clear()
    directory = _read('{"kind":"path","path":"/g","type":"dir","mode":"755"}')
    with pytest.raises(CannotCheck, match="/g is not a file"):
        expect.text(directory, "/g")
    expect._memo.clear()


def test_render_gid_from_the_reads_getent():
    from rocmfleet.fleet.check import expect

    def ran(rc: int, *lines: str) -> _Host:
        out = [f'{{"kind":"run","key":"render","text":"{line}"}}' for line in lines]
        return _read(*out, f'{{"kind":"ran","key":"render","rc":{rc}}}')

    expect._memo.clear()
    assert expect.render_gid(ran(0, "render:x:992:")) == 992
    expect._memo.clear()
    assert expect.render_gid(ran(2)) is None
    expect._memo.clear()
    for host in (ran(0), ran(0, "render:x"), ran(0, "render:x:abc:"), ran(1, "boom"), ran(0, "a:x:1:", "b:x:2:")):
        with pytest.raises(CannotCheck):
            expect.render_gid(host)
        expect._memo.clear()


def test_one_madison_for_all_driver_packages():
    two = MADISON + MADISON.replace("amdgpu-dkms |", "amdgpu-dkms-firmware |")
    got = rocmtools.parse_madison_packages(two, ["amdgpu-dkms", "amdgpu-dkms-firmware"])
    assert got["amdgpu-dkms-firmware"] == [
        ("1:6.14.14.30300000-2278356.22.04", "https://repo.radeon.com/amdgpu/6.3/ubuntu")
    ]
    for text in ("", MADISON, two + "garbage\n", two[:40]):  # nothing, one package missing, unknown, cut short
        with pytest.raises(ToolOutputError):
            rocmtools.parse_madison_packages(text, ["amdgpu-dkms", "amdgpu-dkms-firmware"])


@pytest.mark.parametrize(
    "result",
    [
        _Result(0, ""),
        _Result(0, "27.3.1"),
        _Result(0, "27.3.1 yes"),
        _Result(1, "", "Cannot connect to the Docker daemon"),
    ],
    ids=["empty", "truncated", "unknown-format", "daemon-down"],
)
def test_docker_info_output_empty_truncated_unknown_or_failed_is_an_error(result):
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    with pytest.raises(CannotCheck):
        expect.docker_server(_Host(result))
    expect._memo.clear()
    assert expect.docker_server(_Host(_Result(0, "27.3.1 true\n"))) == ("27.3.1", True)
    expect._memo.clear()


def test_a_unit_being_reloaded_runs_and_only_enabled_is_enabled():
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _read(
        '{"kind":"unit","unit":"docker.service","load":"loaded","active":"reloading","enabled":"enabled"}',
        '{"kind":"unit","unit":"vllm-a.service","load":"loaded","active":"failed","enabled":"static"}',
    )
    assert expect.running(host, "docker.service") is True  # the Docker checks that need dockerd run
    from rocmfleet.fleet.check.test_docker import test_docker_running as docker_running_check

    with pytest.raises(AssertionError, match="docker.service is reloading, not active"):
        docker_running_check(host)  # but docker::docker_running is not as wanted until the reload ends
    assert expect.running(host, "vllm-a.service") is False
    assert expect.unit_state(host, "vllm-a.service").enabled != "enabled"  # static: not enabled by the deploy
    expect._memo.clear()


def test_installed_reads_bare_arch_qualified_and_pattern_names_and_nothing_reported_is_an_error():
    from rocmfleet.fleet.check import expect

    expect._memo.clear()
    host = _read(
        '{"kind":"pkg","package":"rocm-core","status":"ii ","version":"7.0"}',
        '{"kind":"pkg","package":"amdrocm-core","status":"rc ","version":"7.0"}',
        '{"kind":"pkg","package":"amdgpu-dkms","status":"hi ","version":"1:6.14"}',
    )
    assert expect.installed(host, "rocm-core") and expect.installed(host, "rocm-core:amd64")
    assert expect.installed(host, "amdgpu-dkms")  # held
    assert not expect.installed(host, "amdrocm*")  # removed, its configuration left: not installed
    assert expect.installed(host, "rocm*") and not expect.installed(host, "hip-runtime-amd")
    expect._memo.clear()
    with pytest.raises(CannotCheck, match="dpkg-query reported none"):
        expect.installed(_read(), "rocm-core")  # never "not installed" when dpkg said nothing
    expect._memo.clear()
