"""ROCm stream changes and Secure Boot on running lab hosts, with the unmodified ``deploy.py``
(issue 17). Runs after test_rocm_tuning.py (pyproject.toml's testpaths), on hosts converged
with the shipped defaults: the current stream, ROCm 10.0, amdgpu 31.50, no userspace.

One host (lab-2) gets the lab's stand-in ``mokutil`` (Secure Boot enabled). The order:

- the current stream's userspace for the fleet: the Secure Boot host, without a signing key, fails
  alone before any package changes; the others get the userspace from the stand-in
  stable.repo.amd.com without a reboot; lab-1 goes back to the defaults;
- side by side (two ``--limit`` deploys at once, as a rollout runs its hosts): lab-3 moves current
  -> legacy 7.2, and the Secure Boot host, with a MOK pair configured and enrolled, has DKMS sign
  amdgpu, the driver coming up after its reboot; each reboots its own host once;
- lab-3 back to the defaults, one reboot and nothing of the legacy stream left.

After each move nothing of the other stream is left (``dpkg``, ``/etc/apt/sources.list.d``,
``/etc/apt/keyrings``) and the compliance checks pass; ``--limit`` keeps the other hosts
untouched. The module ends with every host back on the defaults.
"""

from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import lab_ssh, rocmfleet_cli
from tests.e2e.test_rocm_tuning import changed, run

pytestmark = pytest.mark.lab

STANDIN = Path(__file__).resolve().parents[1] / "lab" / "standin"
LEGACY = ["--data", "rocm_stream=legacy", "--data", 'rocm_version="7.2"', "--data", "rocm_userspace=true"]
CURRENT_USERSPACE = ["--data", "rocm_userspace=true"]
MOK = ["--data", "rocm_mok_signing_key=/var/lib/dkms/mok.key", "--data", "rocm_mok_certificate=/var/lib/dkms/mok.pub"]


@pytest.fixture(scope="module")
def deploy_file() -> Path:
    return Path("deploy.py")  # the real one, unmodified


@pytest.fixture(scope="module")
def switcher(lab) -> str:
    return sorted(lab.hosts)[2]  # one vLLM instance: each of its reboots restarts one


@pytest.fixture(scope="module")
def secure(lab) -> str:
    return sorted(lab.hosts)[1]


def snapshot(lab, name: str) -> dict[str, str]:
    """What of AMD's streams a host has: packages with versions, apt sources, keyrings, pins."""
    commands = {
        # installed (ii) and installed-and-held (hi: the driver and Docker, as the deploy leaves them)
        "packages": "dpkg-query -W -f '${Package} ${db:Status-Abbrev} ${Version}\\n' | awk '$2 ~ /^[ih]i/' | sort",
        "sources": "ls /etc/apt/sources.list.d",
        "keyrings": "ls /etc/apt/keyrings",
        "pins": "ls /etc/apt/preferences.d",
    }
    return {key: lab_ssh(lab, name, command).stdout for key, command in commands.items()}


def installed(snap: dict[str, str]) -> set[str]:
    return {line.split()[0] for line in snap["packages"].splitlines()}


def amd(snap: dict[str, str]) -> dict[str, str]:
    """The snapshot with AMD's packages only (``apt-get purge --auto-remove``, as AMD's ``apt
    autoremove``, may also take packages of the distribution nothing needs any more)."""
    lines = [
        line for line in snap["packages"].splitlines() if line.startswith(("amdgpu", "rocm", "amdrocm", "amd-smi"))
    ]
    return {**snap, "packages": "\n".join(lines)}


DRIVER_CHANGES = "/var/log/rocmfleet-lab/driver-changes.log"  # the stand-in driver's (tests/lab/amdrepo.py)
EXPORTER_UNITS = "gpuagent.service amd-metrics-exporter.service"


def driver_changes(lab, name: str) -> list[str]:
    """The lines of the stand-in driver's change log: time, script and arguments, both exporter
    units' states, ``ok`` or ``refused`` (``standin/driver-change.sh``)."""
    return lab_ssh(lab, name, f"cat {DRIVER_CHANGES} 2>/dev/null || true").stdout.splitlines()


def exporter_stopped_around(lab, name: str, before: list[str]) -> None:
    """Every driver change since ``before`` found AMD's exporter and its GPU agent stopped (none
    was refused), and both run again now."""
    new = driver_changes(lab, name)[len(before) :]
    assert new, f"{name}: no driver change logged"
    for line in new:
        assert "gpuagent=inactive amd-metrics-exporter=inactive ok" in line, new
    active = lab_ssh(lab, name, f"systemctl is-active {EXPORTER_UNITS}").stdout.split()
    assert active == ["active", "active"], active


def check(lab, name: str, *data: str) -> None:
    proc = rocmfleet_cli("check", "inventories/lab.py", "--select", "rocm", "--limit", name, *data)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def others_untouched(
    lab, name: str, before: dict[str, dict[str, str]], rebooted: dict[str, int], busy: str = ""
) -> None:
    """No host but ``name`` (and ``busy``, moved by another run meanwhile) rebooted or changed."""
    for other in lab.hosts:
        if other not in (name, busy):
            assert rebooted[other] == 0 and snapshot(lab, other) == before[other], other


@pytest.fixture(scope="module")
def at_start(lab) -> dict[str, dict[str, str]]:
    return {name: snapshot(lab, name) for name in lab.hosts}


@pytest.fixture(scope="module")
def secure_boot(lab, secure):
    """The stand-in mokutil on one host: its firmware now reports Secure Boot enabled."""
    text = (STANDIN / "mokutil").read_text()
    result = lab_ssh(
        lab, secure, f"printf '%s' {shlex.quote(text)} > /usr/local/sbin/mokutil && chmod 755 /usr/local/sbin/mokutil"
    )
    assert result.returncode == 0, result.stderr
    yield secure
    lab_ssh(lab, secure, "rm -f /usr/local/sbin/mokutil")


def test_the_current_userspace_for_the_fleet_fails_the_secure_boot_host_alone_before_any_package_change(
    lab, deploy_file, switcher, secure_boot, at_start
):
    """Secure Boot without a signing key fails that host alone; the others get the current stream's
    userspace from its own repository without a reboot; lab-1 goes back to the defaults."""
    rc, report, output, rebooted = run(lab, deploy_file, *CURRENT_USERSPACE)  # a package change for every host
    assert rc != 0
    assert report["results"]["failed_hosts"] == [secure_boot]
    assert f"[{secure_boot}] rocmfleet: Secure Boot is enabled and no module signing key is configured" in output
    assert "disable Secure Boot in the firmware setup" in output and "rocm_mok_signing_key" in output
    assert snapshot(lab, secure_boot) == at_start[secure_boot] and rebooted[secure_boot] == 0
    assert set(rebooted.values()) == {0}  # same driver: nothing to reboot for
    for other in lab.hosts:
        if other != secure_boot:
            snap = snapshot(lab, other)
            assert "amdrocm10.0-gfx942" in installed(snap), other
            assert "amdrocm-stable.sources" in snap["sources"] and "amdrocm.gpg" in snap["keyrings"], other
    check(lab, switcher, *CURRENT_USERSPACE)
    rest = ",".join(n for n in lab.hosts if n not in (secure_boot, switcher))
    rc, report, output, rebooted = run(lab, deploy_file, "--limit", rest)
    assert rc == 0, output[-4000:]  # back to the defaults: the userspace goes again


def test_dry_run_says_what_the_move_to_legacy_would_remove(lab, deploy_file, switcher):
    rc, _report, output, rebooted = run(lab, deploy_file, "--dry", "--limit", switcher, *LEGACY)
    assert rc == 0, output[-4000:]
    assert (
        f"[{switcher}] would remove the ROCm current stream: packages amdrocm10.0-gfx942; files "
        "/etc/apt/sources.list.d/amdrocm-stable.sources, /etc/apt/keyrings/amdrocm.gpg"
    ) in output
    assert f"[{switcher}] would reboot: amdgpu driver moves to 30.30; ROCm current stream removed" in output
    assert set(rebooted.values()) == {0}


def test_current_to_legacy_beside_secure_boot_with_an_enrolled_key(lab, deploy_file, switcher, secure_boot):
    """Two ``--limit`` deploys at once: lab-3 to the legacy stream, the Secure Boot host with its MOK pair."""
    before = {name: snapshot(lab, name) for name in lab.hosts}
    with ThreadPoolExecutor(2) as pool:
        legacy = pool.submit(current_to_legacy, lab, deploy_file, switcher, before, secure_boot)
        signed = pool.submit(secure_boot_with_an_enrolled_key, lab, deploy_file, secure_boot)
        signed.result()
        legacy.result()


def current_to_legacy(lab, deploy_file, switcher: str, before: dict[str, dict[str, str]], busy: str) -> None:
    """Current -> legacy 7.2 reboots once and leaves nothing of the current stream; the driver
    packages, held by the deploy at 31.50, move with their hold (apt refuses to change a held
    package under -y without --allow-change-held-packages)."""
    for package in ("amdgpu-dkms", "amdgpu-dkms-firmware"):
        assert f"{package} hi  1:6.14.14.315000" in before[switcher]["packages"], before[switcher]["packages"]
    logged = driver_changes(lab, switcher)
    rc, _report, output, rebooted = run(lab, deploy_file, "--limit", switcher, *LEGACY)
    assert rc == 0, output[-4000:]
    assert rebooted[switcher] == 1
    exporter_stopped_around(lab, switcher, logged)  # issue 29: AMD's exporter stops before a driver change
    snap = snapshot(lab, switcher)
    for package in ("amdgpu-dkms", "amdgpu-dkms-firmware"):
        assert f"{package} hi  1:6.14.14.303000" in snap["packages"], snap["packages"]  # held at the new version
    assert not {p for p in installed(snap) if p.startswith("amdrocm")}
    assert {"rocm", "rocm-core", "amd-smi-lib", "amdgpu-dkms"} <= installed(snap)
    assert "1:6.14.14.303000" in snap["packages"]  # the legacy 7.2 driver, amdgpu 30.30
    sources, keyrings = set(snap["sources"].split()), set(snap["keyrings"].split())
    assert {"amdgpu.list", "rocm.list"} <= sources and "amdrocm-stable.sources" not in sources
    assert "rocm.gpg" in keyrings and "amdrocm.gpg" not in keyrings
    assert "rocm-pin-600" in snap["pins"].split()
    others_untouched(lab, switcher, before, rebooted, busy)
    check(lab, switcher, *LEGACY)


def secure_boot_with_an_enrolled_key(lab, deploy_file, secure_boot: str) -> None:
    """With a MOK pair configured and enrolled, DKMS signs amdgpu and the driver loads after one
    reboot; a second run changes nothing."""
    made = lab_ssh(
        lab,
        secure_boot,
        "mkdir -p /var/lib/dkms && head -c 64 /dev/urandom > /var/lib/dkms/mok.key && "
        "head -c 64 /dev/urandom > /var/lib/dkms/mok.pub && mokutil --import /var/lib/dkms/mok.pub",
    )
    assert made.returncode == 0, made.stderr
    logged = driver_changes(lab, secure_boot)
    rc, report, output, rebooted = run(lab, deploy_file, "--limit", secure_boot, *MOK)
    assert rc == 0, output[-4000:]
    assert rebooted[secure_boot] == 1  # the driver was rebuilt, signed, and needs the reboot to load
    exporter_stopped_around(lab, secure_boot, logged)  # the DKMS re-sign reinstalls the driver
    module = lab_ssh(lab, secure_boot, 'cat "/lib/modules/$(uname -r)/updates/dkms/amdgpu.ko"').stdout
    assert "~Module signature appended~" in module
    assert lab_ssh(lab, secure_boot, "test -e /dev/kfd").returncode == 0
    check(lab, secure_boot, *MOK)
    rc, report, output, rebooted = run(lab, deploy_file, "--limit", secure_boot, *MOK)
    assert rc == 0 and changed(report) == {} and rebooted[secure_boot] == 0


def test_legacy_to_current_reboots_once_and_leaves_nothing_of_legacy(lab, deploy_file, switcher, at_start):
    before = {name: snapshot(lab, name) for name in lab.hosts}
    rc, _report, output, rebooted = run(lab, deploy_file, "--dry", "--limit", switcher)
    assert f"[{switcher}] would remove the ROCm legacy stream: packages rocm, rocm-core; files " in output
    logged = driver_changes(lab, switcher)
    rc, _report, output, rebooted = run(lab, deploy_file, "--limit", switcher)  # back to the shipped defaults
    assert rc == 0, output[-4000:]
    assert rebooted[switcher] == 1
    exporter_stopped_around(lab, switcher, logged)
    snap = snapshot(lab, switcher)
    assert not {p for p in installed(snap) if p.startswith(("rocm", "amd-smi", "amdrocm"))}, snap["packages"]
    assert "1:6.14.14.315000" in snap["packages"]  # amdgpu 31.50, the current stream's driver
    sources, keyrings = set(snap["sources"].split()), set(snap["keyrings"].split())
    assert "amdgpu.list" in sources and not sources & {"rocm.list", "amdrocm-stable.sources"}
    assert "rocm.gpg" in keyrings and "amdrocm.gpg" not in keyrings  # rocm.gpg signs the driver's repository
    assert "rocm-pin-600" not in snap["pins"].split()
    others_untouched(lab, switcher, before, rebooted)
    check(lab, switcher)
    assert amd(snapshot(lab, switcher)) == amd(at_start[switcher])  # back where it started


def test_every_host_is_back_on_the_defaults(lab, deploy_file, secure_boot):
    lab_ssh(lab, secure_boot, "rm -f /usr/local/sbin/mokutil")
    rc, report, output, rebooted = run(lab, deploy_file)
    assert rc == 0, output[-4000:]
    assert set(rebooted.values()) == {0}
