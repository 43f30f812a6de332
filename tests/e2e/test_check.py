"""``rocmfleet check`` against the deployed lab: all pass, then one thing broken at a time (issue 6).

Runs after test_deploy.py (pyproject.toml's testpaths), on the converged lab. Each case breaks
one thing on each of one or more hosts, runs the check over the whole fleet and asserts that the
failures are exactly those hosts and checks; then it repairs the hosts and waits until vLLM is
ready again. (A container running another digest than the data wants: test_deploy.py, while it
runs lab-3 on the second image tag.)
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from rocmfleet.domain import exporter, readiness, rocm, tuning
from tests.conftest import ROOT, lab_command, lab_ssh, pyinfra_json, rocmfleet_cli

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
    assert "lab-1  PASS  drift::role_as_wanted[docker]" in output  # one line per host and check
    # every role of every host as its plan wants it (rocmfleet.plan.hostdrift): no false drift
    roles = ("base", "rocm", "tuning", "exporter", "docker", "vllm")
    assert {(h, f"drift::role_as_wanted[{r}]") for h in lab.hosts for r in roles} <= checks
    suites = {s.get("name"): s for s in ET.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == set(lab.hosts) and all(s.get("failures") == "0" for s in suites.values())


def test_a_reverted_sysctl_and_a_render_node_of_another_group_fail_their_checks_alone(lab, tmp_path):
    """Two faults that need no restart, on two hosts, in one run: each host fails exactly its check."""
    revert = "sed -i 's/^kernel.numa_balancing = {}$/kernel.numa_balancing = {}/' " + tuning.SYSCTL_FILE
    try:
        ssh_ok(lab, "lab-2", revert.format(0, 1))
        ssh_ok(lab, "lab-3", "chgrp nogroup /dev/dri/renderD129")
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {
            ("lab-2", "tuning::numa_balancing_persisted"),
            ("lab-3", "rocm::device_nodes_owned_by_render"),
        }
        assert "/dev/dri/renderD129 nogroup" in output
        assert report["hosts"]["lab-1"] == "passed"
    finally:  # every repair runs, whichever step failed
        lab_ssh(lab, "lab-2", revert.format(1, 0))
        lab_ssh(lab, "lab-3", "chgrp render /dev/dri/renderD129")


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


def test_a_stopped_unit_a_stopped_docker_and_a_powered_off_host_each_fail_their_host_alone(lab, tmp_path):
    """One fault per host, in one run (each needs vLLM started again afterwards: the lab's dearest
    step, so the three restarts overlap): lab-1's first instance stopped, Docker stopped on lab-2,
    lab-3 powered off. Each host fails exactly its check; what cannot be judged without Docker is
    skipped with the reason; a host that does not answer has no other result. Powered on again
    (``lab restart``: no deploy), lab-3's instance comes back by itself."""
    from tests.lab import hosts

    unit_host, unit_container, unit_port = LAB_1_A
    docker_host, docker_container, docker_port = LAB_2
    off_host, off_container, off_port = LAB_3
    try:
        ssh_ok(lab, unit_host, f"systemctl stop {unit_container}.service")
        ssh_ok(lab, docker_host, "systemctl stop docker.socket docker.service")
        hosts.stop(off_host)  # an orderly poweroff, as `systemctl poweroff` inside it, waited for
        rc, report, output = check(tmp_path)
        assert rc == 1, output[-4000:]
        assert failures(report) == {
            (unit_host, f"vllm::unit_enabled_and_active[{unit_container.removeprefix('vllm-')}]"),
            (docker_host, "docker::docker_running"),
            (off_host, "host::reachable"),
        }
        skipped = f"{docker_host}  SKIP  vllm::ready[{docker_container.removeprefix('vllm-')}]  Docker is not running"
        assert skipped in output
        assert [r["check"] for r in report["results"] if r["host"] == off_host] == ["host::reachable"]
    finally:  # every repair runs, whichever step failed
        lab_ssh(lab, unit_host, f"systemctl start {unit_container}.service")
        lab_ssh(lab, docker_host, f"systemctl start docker.service {docker_container}.service")
        lab_command("restart", off_host)
        wait_ready(lab, unit_host, unit_container, unit_port)
        wait_ready(lab, docker_host, docker_container, docker_port)
        wait_ready(lab, off_host, off_container, off_port)
    assert ssh_ok(lab, off_host, f"systemctl is-active {off_container}.service").strip() == "active"


def changed_operations(report: dict) -> dict[str, list]:
    """``{operation name: hosts it changed}`` of a ``pyinfra --json`` report, for those that changed
    any; the name without its role's prefix (``docker | Write ...``: ``Write ...``)."""
    return {op["name"].split(" | ", 1)[-1]: op["success"] for op in report["results"]["operations"] if op["success"]}


def test_one_file_of_each_role_edited_by_hand_is_its_roles_drift_everywhere_and_one_converge_mends_it(lab, tmp_path):
    """Issue 43: one file of each role edited by hand on one host shows as that role's drift in
    ``rocmfleet status``, in ``pyinfra ... --dry`` and as a FAIL of ``rocmfleet check``; the next
    converge changes exactly those (and what each change brings: apt's, udev's, Docker's, the
    exporter's and the instance's reloads and restarts), and a second one changes nothing. One host,
    ``--limit``: every edit is one a running host takes (comments, JSON whitespace dockerd accepts)."""
    from rocmfleet.domain import vllmfiles
    from rocmfleet.plan.baseplan import APT_LOCK_FILE

    host, container, port = LAB_3
    instance = container.removeprefix("vllm-")
    unit, env_file = vllmfiles.layout(instance).unit, vllmfiles.layout(instance).env_file
    edited = {
        "base": (APT_LOCK_FILE, "echo '// edited by hand' >> {}"),
        "rocm": (rocm.UDEV_RULE, "echo '# edited by hand' >> {}"),
        "tuning": (tuning.SYSCTL_FILE, "echo '# edited by hand' >> {}"),
        "exporter": (exporter.CONFIG_FILE, "sed -i '1s/^/ /' {}"),  # JSON with a leading space
        "docker": ("/etc/docker/daemon.json", "sed -i '1s/^{{/{{ /' {}"),  # the same keys: dockerd reloads
        "vllm": (env_file, "echo '# edited by hand' >> {}"),
    }
    limit = ("--limit", host)
    mended = False
    try:
        for path, edit in edited.values():
            ssh_ok(lab, host, edit.format(path))
        # status: each role's drift names its file
        proc = rocmfleet_cli("status", "inventories/lab.py", *limit, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        drift = json.loads(proc.stdout)["hosts"][host]["drift"]
        for role, (path, _) in edited.items():
            assert any(line.startswith(f"{path}: content ") for line in drift[role]), (role, drift)
        assert sum(len(lines) for lines in drift.values()) == len(edited), drift
        # --dry: each role's drift, one line each, nothing changed
        rc, _report, output = pyinfra_json("deploy.py", "--dry", *limit)
        assert rc == 0, output[-4000:]
        for role, (path, _) in edited.items():  # pyinfra pads "[HOST]" to the longest name's width
            assert re.search(rf"\[{host}\] +drift {role}: {re.escape(path)}: content ", output), (role, output[-4000:])
        # check: one FAIL per role (the sysctl file and the env file are their own checks')
        rc, report, output = check(tmp_path, *limit)
        assert rc == 1, output[-4000:]
        assert failures(report) == {
            (host, "drift::role_as_wanted[base]"),
            (host, "drift::role_as_wanted[rocm]"),
            (host, "tuning::numa_balancing_persisted"),
            (host, "drift::role_as_wanted[exporter]"),
            (host, "drift::role_as_wanted[docker]"),
            (host, f"vllm::instance_files_as_wanted[{instance}]"),
        }, output[-4000:]
        # one converge mends exactly those
        rc, report, output = pyinfra_json("deploy.py", "-y", *limit)
        assert rc == 0, output[-4000:]
        mended = True
        changed = changed_operations(report)
        writes = {
            "Make apt wait for a held dpkg lock",
            f"Render {rocm.UDEV_RULE}",
            f"Render {tuning.SYSCTL_FILE}",
            f"Render {exporter.CONFIG_FILE}",
            "Write /etc/docker/daemon.json (validated by dockerd)",
            f"Render {env_file} and {unit}",
        }
        # and what each brings (a check that runs a command reports a change: ``Check ...``)
        brought = {
            "Pull the vLLM image by digest",
            "Reload udev rules",
            "Apply kernel.numa_balancing=0 live",
            f"Restart {exporter.EXPORTER_UNIT} for its new configuration",
            "Restart Docker for the new daemon.json, a few hosts at a time",
            "Reload systemd units",
            f"Clear the start limit of {unit}",
            f"Restart {unit} for its new image, unit or environment",
            "Wait until every vLLM instance is ready; roll back each one that is not",
            f"Keep the files of {unit} as its last good version",
        }
        unexpected = {name for name in changed if name not in writes | brought and not name.startswith("Check ")}
        assert writes <= set(changed) and not unexpected, changed
        rc, report, output = pyinfra_json("deploy.py", "-y", *limit)
        assert rc == 0, output[-4000:]
        assert changed_operations(report) == {}, "a second converge changed something"
        proc = rocmfleet_cli("status", "inventories/lab.py", *limit, "--json")
        assert json.loads(proc.stdout)["hosts"][host]["drift"] == {role: [] for role in edited}
    finally:  # a converge mends every edit, whichever step failed
        if not mended:
            pyinfra_json("deploy.py", "-y", *limit)
        wait_ready(lab, host, container, port)


def test_a_bad_inventory_is_exit_2_before_any_connection(tmp_path):
    bad = tmp_path / "inventory.py"
    bad.write_text('gpu_nodes = (["10.213.0.99"], {"vllm_profile": "lab-tiny-lama"})\n')
    proc = rocmfleet_cli("check", str(bad), timeout_s=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "did you mean 'lab-tiny-llama'" in proc.stderr and "reachable" not in proc.stdout
