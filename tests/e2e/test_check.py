"""``rocmfleet check`` against the deployed lab: all pass, then one thing broken at a time (issue 6).

Runs after test_deploy.py (pyproject.toml's testpaths), on the converged lab. Each case breaks
one thing on one host, runs the check over the whole fleet and asserts that the failures are
exactly that host and that check; then it repairs the host and waits until vLLM is ready again.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from rocmfleet.domain import readiness, tuning
from tests.conftest import ROOT, lab_command, lab_ssh, rocmfleet_cli

pytestmark = pytest.mark.lab

MODEL = "tiny-llama"
#: (host, unit/container, port) of one instance per lab host, as inventories/lab.py deploys them.
LAB_1_A = ("lab-1", "vllm-tiny-llama-a", 8000)
LAB_2 = ("lab-2", "vllm-lab-tiny-llama-0", 8000)
LAB_3 = ("lab-3", "vllm-lab-tiny-llama-0", 8000)


def check(tmp_path, *extra: str) -> tuple[int, dict, str]:
    """The whole fleet: exit status, the JSON report, and what people read."""
    report = tmp_path / "check.json"
    proc = rocmfleet_cli("check", "inventories/lab.py", "--json", str(report), *extra)
    return proc.returncode, json.loads(report.read_text()) if report.exists() else {}, proc.stdout + proc.stderr


def failures(report: dict) -> set[tuple[str, str]]:
    return {(r["host"], r["check"]) for r in report["results"] if r["outcome"] == "failed"}


def ssh_ok(lab, host: str, command: str, timeout_s: float = 600) -> str:
    proc = lab_ssh(lab, host, command, timeout_s)
    assert proc.returncode == 0, f"{host}: {command}: {proc.stderr[-2000:]}"
    return proc.stdout


def wait_ready(lab, host: str, container: str, port: int) -> None:
    ssh_ok(lab, host, readiness.wait_script(port, MODEL, 600, container))


def test_every_lab_host_passes(lab, tmp_path):
    junit = tmp_path / "check.xml"
    rc, report, output = check(tmp_path, "--junit-xml", str(junit))
    assert rc == 0, output[-6000:]
    assert report["hosts"] == {name: "passed" for name in lab.hosts}
    checks = {(r["host"], r["check"]) for r in report["results"] if r["outcome"] == "passed"}
    for host, container, _ in (LAB_1_A, LAB_2, LAB_3):
        instance = container.removeprefix("vllm-")
        for name in ("container_image_digest", "container_arguments", "container_environment", "ready"):
            assert (host, f"vllm::{name}[{instance}]") in checks
    assert ("lab-1", "vllm::ready[tiny-llama-b]") in checks
    assert "lab-1  PASS  docker::daemon_json_as_rendered" in output  # one line per host and check
    suites = {s.get("name"): s for s in ET.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == set(lab.hosts) and all(s.get("failures") == "0" for s in suites.values())


def test_sysctl_reverted(lab, tmp_path):
    revert = "sed -i 's/^kernel.numa_balancing = {}$/kernel.numa_balancing = {}/' " + tuning.SYSCTL_FILE
    ssh_ok(lab, "lab-2", revert.format(0, 1))
    try:
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {("lab-2", "tuning::numa_balancing_persisted")}
    finally:
        ssh_ok(lab, "lab-2", revert.format(1, 0))


def test_unit_stopped(lab, tmp_path):
    host, container, port = LAB_3
    ssh_ok(lab, host, f"systemctl stop {container}.service")
    try:
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {(host, f"vllm::unit_enabled_and_active[{container.removeprefix('vllm-')}]")}
    finally:
        ssh_ok(lab, host, f"systemctl start {container}.service")
        wait_ready(lab, host, container, port)


def test_container_replaced_with_another_digest(lab, tmp_path):
    host, container, port = LAB_2
    repo = f"{lab.registry}/rocmfleet-lab/vllm-cpu"
    deployed, other = lab.images[f"{repo}:0.32.0-lab.1"], lab.images[f"{repo}:0.32.0-lab.2"]
    unit = f"/etc/systemd/system/{container}.service"
    swap = "sed -i 's/{}/{}/' " + unit + " && systemctl daemon-reload && systemctl restart " + container
    ssh_ok(lab, host, swap.format(deployed, other))
    try:
        wait_ready(lab, host, container, port)
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {(host, f"vllm::container_image_digest[{container.removeprefix('vllm-')}]")}
        assert f"group data wants {repo}@{deployed}" in output
    finally:
        ssh_ok(lab, host, swap.format(other, deployed))
        wait_ready(lab, host, container, port)


def test_device_node_group_changed(lab, tmp_path):
    ssh_ok(lab, "lab-3", "chgrp nogroup /dev/dri/renderD129")
    try:
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {("lab-3", "rocm::device_nodes_owned_by_render")}
        assert "/dev/dri/renderD129 nogroup" in output
    finally:
        ssh_ok(lab, "lab-3", "chgrp render /dev/dri/renderD129")


def test_a_known_answer_the_model_does_not_give_fails_readiness(lab, tmp_path):
    """The check judges the known-answer replies itself (``vllm-probe.sh answers``, then
    ``readiness.judge``): with an ``expect_regex`` the lab's model does not answer, every
    instance's readiness fails with the answer it gave, and nothing else does. Only group data
    changes (the check reads it); no host is touched."""
    profile = ROOT / "group_vars" / "profiles" / "lab-tiny-llama.yml"
    text = profile.read_text()
    wrong = text.replace('expect_regex: "^ pole pole pole pole"', 'expect_regex: "^ Paris"')
    assert wrong != text, "the lab profile's expect_regex moved: update this test"
    profile.write_text(wrong)
    try:
        rc, report, output = check(tmp_path, "--select", "vllm")
        assert rc == 1, output[-4000:]
        instances = [("lab-1", "tiny-llama-a"), ("lab-1", "tiny-llama-b"), ("lab-2", "lab-tiny-llama-0")]
        instances.append(("lab-3", "lab-tiny-llama-0"))
        assert failures(report) == {(host, f"vllm::ready[{name}]") for host, name in instances}
        said = [r["message"] + r["detail"] for r in report["results"] if r["outcome"] == "failed"]
        assert all('completion answered " pole pole pole pole' in text for text in said), said
        assert all('which does not match "^ Paris"' in text for text in said), said
    finally:
        profile.write_text(text)


def test_docker_stopped(lab, tmp_path):
    host, container, port = LAB_2
    ssh_ok(lab, host, "systemctl stop docker.socket docker.service")
    try:
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {(host, "docker::docker_running")}
        assert f"{host}  SKIP  vllm::ready[{container.removeprefix('vllm-')}]  Docker is not running" in output
    finally:
        ssh_ok(lab, host, f"systemctl start docker.service {container}.service")
        wait_ready(lab, host, container, port)


def test_host_powered_off(lab, tmp_path):
    host, container, port = LAB_3
    from tests.lab import hosts

    hosts.stop(host)  # an orderly poweroff, as `systemctl poweroff` inside it, waited for
    try:
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {(host, "host::reachable")}
        assert [r["check"] for r in report["results"] if r["host"] == host] == ["host::reachable"]
    finally:
        lab_command("restart", host)
        wait_ready(lab, host, container, port)


def test_a_bad_inventory_is_exit_2_before_any_connection(tmp_path):
    bad = tmp_path / "inventory.py"
    bad.write_text('gpu_nodes = (["10.213.0.99"], {"vllm_profile": "lab-tiny-lama"})\n')
    proc = rocmfleet_cli("check", str(bad), timeout_s=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "did you mean 'lab-tiny-llama'" in proc.stderr and "reachable" not in proc.stdout
