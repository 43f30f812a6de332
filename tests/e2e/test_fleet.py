"""A fleet that is less kind than a fresh lab, with the unmodified ``deploy.py`` (issue 10).

Each test breaks one thing on one host, runs the deploy over the whole lab, checks that the
broken host fails alone with one line saying why (no traceback) while the others converge, and
repairs the host. Runs on the converged lab (after test_deploy.py; pyproject.toml's testpaths).
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import lab_command, lab_inventory, lab_ssh, pyinfra_json
from tests.e2e.test_deploy import complete, units, wait_for_completion

pytestmark = pytest.mark.lab


def deploy(*flags: str, inventory: str = "inventories/lab.py") -> tuple[int, dict, str]:
    return pyinfra_json("deploy.py", "-y", *flags, inventory=inventory, timeout_s=2400)


def failed_alone(lab, result: tuple[int, dict, str], name: str, reason: str) -> None:
    """``name`` failed with one line holding ``reason``; every other host converged; no traceback."""
    rc, report, stderr = result
    assert rc != 0, stderr[-3000:]
    assert report["results"]["failed_hosts"] == [name], stderr[-3000:]
    lines = [line for line in stderr.splitlines() if reason in line]
    assert len(lines) == 1 and f"[{name}]" in lines[0], stderr[-3000:]
    assert "Traceback" not in stderr
    for other, address in lab.hosts.items():
        if other != name:
            for port in units(lab, other).values():
                assert complete(address, port)["choices"][0]["text"]


def running_units(lab, name: str) -> set[str]:
    out = lab_ssh(
        lab, name, "systemctl list-units --type=service --state=running --plain --no-legend 'vllm-*' | awk '{print $1}'"
    )
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def test_a_unit_rocmfleet_did_not_make_is_never_touched(lab):
    name = sorted(lab.hosts)[1]
    unit = "[Unit]\nDescription=not made by rocmfleet\n[Service]\nExecStart=/bin/sleep infinity\n"
    path = "/etc/systemd/system/vllm-theirs.service"
    lab_ssh(lab, name, f"printf '{unit}' > {path} && systemctl daemon-reload && systemctl start vllm-theirs")
    try:
        rc, _report, stderr = deploy("--limit", name)
        assert rc == 0, stderr[-4000:]
        assert "vllm-theirs.service" in running_units(lab, name)
    finally:
        lab_ssh(
            lab,
            name,
            "systemctl stop vllm-theirs; rm -f /etc/systemd/system/vllm-theirs.service; systemctl daemon-reload",
        )


def test_a_placement_that_does_not_fit_fails_that_host_before_any_change(lab, tmp_path):
    # Three instances on the lab's one NUMA node of 2 CPUs: placement refuses (fewer CPUs than instances).
    name = sorted(lab.hosts)[1]
    three = [{"name": f"t{i}", "port": 8100 + i, "gpus": [i]} for i in range(3)]
    inventory = lab_inventory(tmp_path, {name: {"vllm_instances": three}})
    failed_alone(lab, deploy(inventory=inventory), name, "rocmfleet: placement:")
    assert running_units(lab, name) == set(units(lab, name))  # nothing of it was touched


def test_a_stranger_on_an_instance_port_and_a_powered_off_host_each_fail_alone(lab):
    """Two hosts broken at once, one deploy: lab-2's instance port is held by a stranger (a
    container rocmfleet did not start), lab-3 is powered off. Each fails with its own reason, the
    first host converges; then each is repaired and deployed again."""
    names = sorted(lab.hosts)
    held, off = names[1], names[-1]
    image = f"{lab.registry}/rocmfleet-lab/vllm-cpu:0.32.0-lab.1"
    image = f"{image}@{lab.images[image]}"  # pulled already, by digest
    stranger = (
        "systemctl stop vllm-lab-tiny-llama-0 && docker run -d --rm --name stranger --network=host "
        f"--entrypoint python3 {image} -m http.server 8000"
    )
    assert lab_ssh(lab, held, stranger).returncode == 0
    lab_command("poweroff", off, timeout_s=300)
    try:
        rc, report, stderr = deploy()
        assert rc != 0 and sorted(report["results"]["failed_hosts"]) == [held, off], stderr[-3000:]
        reason = "port 8000 of vLLM instance lab-tiny-llama-0 is held by"
        lines = [line for line in stderr.splitlines() if reason in line]
        assert len(lines) == 1 and f"[{held}]" in lines[0], stderr[-3000:]
        assert "Traceback" not in stderr
        for port in units(lab, names[0]).values():
            assert complete(lab.hosts[names[0]], port)["choices"][0]["text"]
    finally:
        lab_ssh(lab, held, "docker rm -f stranger")
        lab_command("poweron", off, timeout_s=600)
    rc, _report, stderr = deploy("--limit", held)
    assert rc == 0, stderr[-4000:]
    wait_for_completion(lab.hosts[held])
    wait_for_completion(lab.hosts[off])


def hold_dpkg_lock(lab, name: str, seconds: int) -> None:
    """Hold the dpkg frontend lock on ``name`` for ``seconds`` (as unattended-upgrades would)."""
    script = (
        "import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w'); fcntl.lockf(f, fcntl.LOCK_EX); "
        f"time.sleep({seconds})"
    )
    lab_ssh(lab, name, f'nohup python3 -c "{script}" >/dev/null 2>&1 &')
    time.sleep(1)


def test_apt_waits_for_a_held_dpkg_lock(lab):
    name = sorted(lab.hosts)[1]
    packages = '["ca-certificates","curl","gnupg","iproute2","less"]'
    hold_dpkg_lock(lab, name, 20)
    started = time.monotonic()
    rc, _report, stderr = deploy("--limit", name, "--data", f"base_packages={packages}")
    assert rc == 0, stderr[-4000:]
    assert time.monotonic() - started > 15
    assert lab_ssh(lab, name, "dpkg -s less").returncode == 0
    lab_ssh(lab, name, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq less")


def test_a_dpkg_lock_held_past_the_limit_fails_the_host_naming_the_holder(lab):
    name = sorted(lab.hosts)[1]
    packages = '["ca-certificates","curl","gnupg","iproute2","less"]'
    hold_dpkg_lock(lab, name, 90)
    try:
        # every host: the others converge (a run whose only host fails prints no JSON report)
        rc, report, stderr = deploy("--data", f"base_packages={packages}", "--data", "apt_lock_timeout_s=10")
        assert rc != 0 and report["results"]["failed_hosts"] == [name], stderr[-3000:]
        assert "Could not get lock /var/lib/dpkg/lock-frontend. It is held by process" in stderr
        assert "(python3)" in stderr
    finally:
        lab_ssh(lab, name, "pkill -f lock-frontend; true")
    rc, _report, stderr = deploy()
    assert rc == 0, stderr[-4000:]
    for other in lab.hosts:  # the other hosts installed less meanwhile
        lab_ssh(lab, other, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq less")


def test_a_driver_that_never_comes_up_fails_that_host_alone(lab):
    name = sorted(lab.hosts)[-1]
    # The stand-in told to fail, and the driver gone: the deploy installs it, reboots, and no GPU comes up.
    # The deploy holds the driver packages: removing them takes --allow-change-held-packages, as for an
    # operator, who stops AMD's metrics exporter first (its GPU agent holds the GPUs: the stand-in
    # driver, like the real module, refuses to go while it runs).
    purge = (
        "systemctl stop amd-metrics-exporter.service gpuagent.service && "
        "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq --allow-change-held-packages "
        "amdgpu-dkms amdgpu-dkms-firmware"
    )
    fails = "mkdir -p /etc/rocmfleet-lab && touch /etc/rocmfleet-lab/amdgpu-fails"
    try:
        assert lab_ssh(lab, name, fails).returncode == 0
        purged = lab_ssh(lab, name, purge)
        assert purged.returncode == 0, purged.stderr
        failed_alone(lab, deploy(), name, "the driver did not come up")
    finally:
        lab_ssh(lab, name, "rm -f /etc/rocmfleet-lab/amdgpu-fails")
    lab_command("restart", name, timeout_s=600)
    rc, _report, stderr = deploy("--limit", name)
    assert rc == 0, stderr[-4000:]
    wait_for_completion(lab.hosts[name])


def test_the_fleet_is_converged_again(lab):
    rc, report, stderr = deploy()
    assert rc == 0, stderr[-4000:]
    changed = {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}
    assert changed == {}
