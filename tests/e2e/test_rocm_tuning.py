"""A bare fleet's first deploy with the unmodified ``deploy.py``: ROCm driver, MI300X tuning, one
reboot, then Docker and vLLM placed on the topology the driver brought up (issues 4 and 10).

Lab hosts start bare (no ``/dev/kfd``, render nodes, KFD tree or ``amd-smi`` until the stand-in
``amdgpu-dkms`` is installed and the host rebooted: ``tests/lab/amdrepo.py``). The lab's group
data is the project's defaults: the current stream, ROCm 10.0 with its amdgpu 31.50 driver.
Order matters and is the module's: a first install with the shipped defaults with one host whose
newest kernel DKMS cannot build for (that host fails alone, the others converge to serving); then,
side by side (two ``--limit`` deploys at once, as a rollout runs its hosts), that host's recovery
once its kernel is fixed and an allowed driver downgrade of another host (to amdgpu 30.30, the
previous driver AMD's repository has), each rebooting its host once; ``--dry`` over the fleet naming
only the downgraded host as owing a reboot; the upgrade back to the defaults' 31.50 over the fleet,
rebooting that host once and no other, then a run that changes and reboots nothing; the compliance
checks; and a driver downgrade refused on every host before anything changes. (Each reboot
restarts vLLM on the host, the lab's dearest step; the upgrade's reboot also shows vLLM coming
back with a rebooted host on its own.) test_deploy.py then checks the converged lab in detail
(pyproject.toml's testpaths give the order). Reboots are counted by the lab supervisor, which logs
every reboot of a host (nspawn exit status 133).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import lab_ssh, pyinfra_json, rocmfleet_cli

pytestmark = pytest.mark.lab

BROKEN = "linux-image-9.0.0-rocmfleet-lab-dkms-broken"


@pytest.fixture(scope="module")
def deploy_file() -> Path:
    return Path("deploy.py")  # the real one, unmodified


def reboots(name: str) -> int:
    from tests.lab import config

    log = config.RUN_DIR / name / "console.log"
    return log.read_text().count("exited with 133") if log.exists() else 0


def run(lab, deploy_file: Path, *extra: str) -> tuple[int, dict, str, dict[str, int]]:
    """pyinfra against the lab; returns rc, JSON, output, reboots per host."""
    before = {name: reboots(name) for name in lab.hosts}
    apply = [] if "--dry" in extra else ["-y"]  # -y skips the change detection --dry reports
    rc, report, stderr = pyinfra_json(str(deploy_file), *apply, *extra, timeout_s=2400)
    return rc, report, stderr, {name: reboots(name) - before[name] for name in lab.hosts}


def changed(report: dict) -> dict[str, int]:
    return {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}


def test_hosts_start_bare(lab):
    for name in lab.hosts:
        result = lab_ssh(lab, name, "ls /dev/kfd /dev/dri /sys/class/kfd; command -v amd-smi")
        assert result.returncode != 0 and not result.stdout.strip(), (name, result.stdout)


def test_dry_run_on_bare_hosts_says_what_it_would_do_without_failing(lab, deploy_file):
    rc, _report, output, rebooted = run(lab, deploy_file, "--dry", "-v")
    assert rc == 0, output[-4000:]
    for name in lab.hosts:
        assert f"[{name}] would reboot: amdgpu driver 31.50 will be installed" in output
        assert f"[{name}] noop: the GPU topology is read after the driver is installed and the host rebooted" in output
    assert "Traceback" not in output and set(rebooted.values()) == {0}


@pytest.fixture(scope="module")
def broken_host(lab) -> str:
    name = sorted(lab.hosts)[-1]
    apt = f"apt-get -qq -o Acquire::http::Proxy={lab.apt_proxy}"
    result = lab_ssh(lab, name, f"{apt} update && DEBIAN_FRONTEND=noninteractive {apt} install -y {BROKEN}")
    assert result.returncode == 0, result.stderr
    return name


@pytest.fixture(scope="module")
def first(lab, deploy_file, broken_host):
    return run(lab, deploy_file)  # the shipped defaults


def test_dkms_failure_fails_that_host_alone_with_dkms_message(lab, first, broken_host):
    rc, report, output, rebooted = first
    assert rc != 0
    assert report["results"]["failed_hosts"] == [broken_host]
    assert "Error! Bad return status for module build on kernel: 9.0.0-rocmfleet-lab-dkms-broken" in output
    assert rebooted[broken_host] == 0


def test_first_install_reboots_every_other_host_exactly_once(lab, first, broken_host):
    _rc, _report, output, rebooted = first
    assert {n: c for n, c in rebooted.items() if n != broken_host} == {n: 1 for n in lab.hosts if n != broken_host}
    assert "amdgpu driver 31.50 installed" in output and "kernel command line now iommu=pt pci=realloc=off" in output
    assert "Traceback" not in output


def test_first_install_brings_every_other_host_to_serving_in_the_same_run(lab, first, broken_host):
    from tests.e2e.test_deploy import complete, units

    for name, address in lab.hosts.items():
        if name == broken_host:
            continue
        for port in units(lab, name).values():
            assert complete(address, port)["choices"][0]["text"]


OLDER_DRIVER = 'rocm_amdgpu_version="30.30"'  # quoted: pyinfra's --data reads 30.30 as the number 30.3


def driver_versions(lab) -> dict[str, str]:
    query = "dpkg-query -W -f '${Version}' amdgpu-dkms"
    return {name: lab_ssh(lab, name, query).stdout for name in lab.hosts}


def downgraded(lab) -> str:
    """The host the allowed downgrade moves (one host: every reboot restarts its vLLM instances)."""
    return sorted(lab.hosts)[1]


def test_broken_host_recovers_while_another_host_downgrades(lab, deploy_file, first, broken_host):
    """Two ``--limit`` deploys at once: the broken host, its kernel fixed, with the defaults; another
    host with an allowed downgrade (amdgpu 30.30). Each reboots its own host once, no other."""
    name = downgraded(lab)
    assert name != broken_host
    lab_ssh(lab, broken_host, f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq {BROKEN}")
    allow = ["--data", OLDER_DRIVER, "--data", "rocm_allow_downgrade=true"]
    before = {host: reboots(host) for host in lab.hosts}
    with ThreadPoolExecutor(2) as pool:
        recovery = pool.submit(pyinfra_json, str(deploy_file), "-y", "--limit", broken_host, timeout_s=2400)
        downgrade = pool.submit(pyinfra_json, str(deploy_file), "-y", "--limit", name, *allow, timeout_s=2400)
        (rc, _report, output), (down_rc, _down_report, down_output) = recovery.result(), downgrade.result()
    assert rc == 0, output[-4000:]
    assert down_rc == 0, down_output[-4000:]
    assert {host: reboots(host) - before[host] for host in lab.hosts} == {
        host: int(host in (name, broken_host)) for host in lab.hosts
    }
    assert "amdgpu driver 30.30 installed" in down_output
    assert driver_versions(lab)[name].startswith("1:6.14.14.303000-")  # amdgpu 30.30


def test_dry_run_says_which_hosts_would_reboot_and_why(lab, deploy_file, first):
    name = downgraded(lab)
    rc, _report, output, rebooted = run(lab, deploy_file, "--dry")
    assert rc == 0, output[-4000:]
    assert f"[{name}] would reboot: amdgpu driver moves to 31.50" in output
    for other in lab.hosts:
        if other != name:  # already on the defaults' driver: nothing owed
            assert not [line for line in output.splitlines() if f"[{other}] would reboot" in line], output[-4000:]
    assert set(rebooted.values()) == {0}


def test_version_upgrade_reboots_only_the_host_that_needs_it_once_then_a_run_changes_nothing(lab, deploy_file, first):
    name = downgraded(lab)
    rc, report, output, rebooted = run(lab, deploy_file)
    assert rc == 0, output[-4000:]
    assert rebooted == {n: int(n == name) for n in lab.hosts}
    assert "amdgpu driver 31.50 installed" in output
    assert all(v.startswith("1:6.14.14.315000-") for v in driver_versions(lab).values())  # amdgpu 31.50
    # vLLM came back with the host on its own (its units are enabled; Docker starts nothing of
    # ours): the deploy started and restarted no instance there, it only waited for them after the
    # reboot, and they answer.
    ops = report["results"]["operations"]
    started = {
        h for op in ops if op["name"].startswith(("vllm | Restart", "vllm | Enable and start")) for h in op["success"]
    }
    waited = {
        h
        for op in ops
        if op["name"].startswith("vllm | Wait until every vLLM instance is ready")
        for h in op["success"]
    }
    assert name not in started and name in waited, ops
    from tests.e2e.test_deploy import complete, units

    for port in units(lab, name).values():
        assert complete(lab.hosts[name], port)["choices"][0]["text"]
    # A run over the converged fleet (one host installed from bare, one recovered, one upgraded)
    # changes and reboots nothing.
    rc, report, output, rebooted = run(lab, deploy_file)
    assert rc == 0, output[-4000:]
    assert changed(report) == {}
    assert set(rebooted.values()) == {0}


def test_hosts_pass_the_compliance_checks(lab, first):
    proc = rocmfleet_cli("check", "inventories/lab.py", "--select", "rocm,tuning")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "SKIP  tuning::kernel_cmdline_live  container host" in proc.stdout  # what needs the real kernel says why


def test_driver_downgrade_is_refused_before_anything_changes(lab, deploy_file, first):
    before = driver_versions(lab)
    rc, _report, output, rebooted = run(lab, deploy_file, "--data", OLDER_DRIVER)
    assert rc != 0  # every host fails (pyinfra: "No hosts remaining!"), so no JSON report to read
    refused = "amdgpu driver 30.30 is older than the installed 31.50 (current stream): refusing a downgrade"
    for name in lab.hosts:
        assert any(f"[{name}]" in line and refused in line for line in output.splitlines()), output[-4000:]
    assert "Set rocm_allow_downgrade: true" in output
    assert driver_versions(lab) == before and set(rebooted.values()) == {0}
