"""Changes that do not drop traffic (issue 11): Docker restarts, daemon.json, stops and crashes of vLLM.

Runs on the converged lab (after tests/e2e/test_deploy.py). Each test samples ``/health`` of every
vLLM instance of the lab once a second from this machine while it acts. Needs root and the lab;
run only these with ``pytest -m lab tests/e2e/test_docker_restart.py``.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest

from rocmfleet.config.hostsettings import HostSettings
from tests.conftest import lab_inventory, lab_ssh, pyinfra_json

pytestmark = pytest.mark.lab

#: inventories/lab.py: the first host (sorted) runs two instances, the others one.
FIRST_HOST = {"tiny-llama-a": 8000, "tiny-llama-b": 8001}
OTHER_HOST = {"lab-tiny-llama-0": 8000}
GRACE_S = HostSettings.model_fields["vllm_stop_grace_s"].default
RESTART_S = 20  # RestartSec of the unit (rocmfleet.domain.vllmfiles.UnitTimings)


def instances(lab, name: str) -> dict[str, int]:
    return FIRST_HOST if name == sorted(lab.hosts)[0] else OTHER_HOST


def healthy(address: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def probing(lab, skip: frozenset[tuple[str, int]] = frozenset()):
    """Sample ``/health`` of every instance (but ``skip``: (host, port)) once a second; yields
    ``{(host, port): [failed probes]}``, filled until the block ends."""
    failures: dict[tuple[str, int], list[float]] = {
        (name, port): [] for name in lab.hosts for port in instances(lab, name).values() if (name, port) not in skip
    }
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            started = time.monotonic()
            for name, port in failures:
                if not healthy(lab.hosts[name], port):
                    failures[(name, port)].append(time.time())
            stop.wait(max(0.0, 1 - (time.monotonic() - started)))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield failures
    finally:
        stop.set()
        thread.join(timeout=30)


def container_state(lab, name: str, instance: str) -> str:
    """``<id> <started at> <running>`` of ``vllm-<instance>`` on host ``name``."""
    proc = lab_ssh(
        lab,
        name,
        f"docker inspect --format '{{{{.Id}}}} {{{{.State.StartedAt}}}} {{{{.State.Running}}}}' vllm-{instance}",
    )
    return proc.stdout.strip()


def unit_property(lab, name: str, unit: str, prop: str) -> str:
    return lab_ssh(lab, name, f"systemctl show -p {prop} --value {unit}").stdout.strip()


def wait_until(check, timeout_s: float, what: str, interval_s: float = 1) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(interval_s)


def all_answer(lab) -> None:
    for name in lab.hosts:
        for port in instances(lab, name).values():
            wait_until(lambda n=name, p=port: healthy(lab.hosts[n], p), 900, f"{name}:{port} answers /health")


def test_a_docker_restart_leaves_every_container_running_and_answering(lab):
    all_answer(lab)
    name = sorted(lab.hosts)[0]
    before = {i: container_state(lab, name, i) for i in instances(lab, name)}
    with probing(lab) as failures:
        time.sleep(3)
        assert lab_ssh(lab, name, "systemctl restart docker.service").returncode == 0
        wait_until(lambda: lab_ssh(lab, name, "docker info >/dev/null").returncode == 0, 120, "dockerd answers")
        time.sleep(20)
    assert {i: container_state(lab, name, i) for i in instances(lab, name)} == before  # same ID and start time
    assert all(state.endswith(" true") for state in before.values())
    assert {k: v for k, v in failures.items() if v} == {}, "failed /health probes"
    for instance in instances(lab, name):
        assert unit_property(lab, name, f"vllm-{instance}.service", "ActiveState") == "active"


def docker_restart_window(lab, name: str) -> tuple[float, float]:
    """When docker.service last stopped and was active again on host ``name`` (unix seconds; the lab
    hosts share this machine's clock)."""
    out = lab_ssh(
        lab, name, "systemctl show --timestamp=unix -p ActiveExitTimestamp -p ActiveEnterTimestamp docker.service"
    ).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return float(values["ActiveExitTimestamp"].lstrip("@")), float(values["ActiveEnterTimestamp"].lstrip("@"))


def test_a_daemon_json_change_restarts_docker_one_host_at_a_time_without_dropping_requests(lab, tmp_path):
    all_answer(lab)
    # log-opts: a key dockerd does not reload, so the change needs a restart
    changed = lab_inventory(
        tmp_path, {name: {"docker_daemon": {"log-opts": {"max-size": "50m"}}} for name in lab.hosts}
    )
    try:
        with probing(lab) as failures:
            rc, report, stderr = pyinfra_json("deploy.py", "-y", inventory=changed, timeout_s=2400)
        assert rc == 0, stderr[-4000:]
        assert {k: v for k, v in failures.items() if v} == {}, "failed /health probes during the deploy"
        windows = sorted(docker_restart_window(lab, name) for name in lab.hosts)
        assert all(start > 0 for start, _ in windows)
        for (_, previous_end), (start, _) in zip(windows, windows[1:], strict=False):
            assert start >= previous_end, f"Docker restarts overlap: {windows}"  # one host at a time
        for name in lab.hosts:
            assert '"max-size": "50m"' in lab_ssh(lab, name, "cat /etc/docker/daemon.json").stdout
        # the second run changes nothing
        rc, report, stderr = pyinfra_json("deploy.py", "-y", inventory=changed, timeout_s=2400)
        assert rc == 0, stderr[-4000:]
        changes = {
            op["name"]: op["success"]
            for op in report["results"]["operations"]
            if op["success"] and op["name"].startswith(("docker |", "vllm | Restart", "vllm | Enable"))
        }
        assert changes == {}, changes
    finally:
        rc, _, stderr = pyinfra_json("deploy.py", "-y", timeout_s=2400)  # back to the lab's daemon.json
        assert rc == 0, stderr[-4000:]


def test_a_registry_mirror_added_reloads_docker_without_a_restart(lab, tmp_path):
    all_answer(lab)
    pids = {name: unit_property(lab, name, "docker.service", "MainPID") for name in lab.hosts}
    mirror = {"docker_daemon": {"registry-mirrors": ["https://mirror.example.com"]}}
    try:
        with probing(lab) as failures:
            rc, _, stderr = pyinfra_json(
                "deploy.py", "-y", inventory=lab_inventory(tmp_path, dict.fromkeys(lab.hosts, mirror))
            )
        assert rc == 0, stderr[-4000:]
        assert {k: v for k, v in failures.items() if v} == {}, "failed /health probes during the deploy"
        assert {name: unit_property(lab, name, "docker.service", "MainPID") for name in lab.hosts} == pids
        for name in lab.hosts:
            mirrors = lab_ssh(lab, name, "docker info --format '{{json .RegistryConfig.Mirrors}}'").stdout
            assert "mirror.example.com" in mirrors  # the running dockerd has it: reloaded
    finally:
        rc, _, stderr = pyinfra_json("deploy.py", "-y", timeout_s=2400)
        assert rc == 0, stderr[-4000:]


def other_host(lab) -> tuple[str, str, int]:
    name = sorted(lab.hosts)[1]
    ((instance, port),) = instances(lab, name).items()
    return name, instance, port


def port_closed(lab, name: str, port: int) -> bool:
    return lab_ssh(lab, name, f"ss -Hltn 'sport = :{port}'").stdout.strip() == ""


def test_a_unit_stopped_killed_and_crashing_three_times_then_deployed(lab):
    """One instance through the unit's life (each full start of vLLM is the lab's dearest step, so the
    container is killed while it starts rather than after it serves):

    - ``systemctl stop`` stops the container within the grace period and closes the port; the unit
      stays stopped;
    - a killed container is replaced by the unit after its back-off (``RestartSec``), once;
    - three quick crashes leave the unit failed at its start limit, not restarting in a loop;
    - a deploy (its files unchanged) brings the failed unit back: it resets the start limit first.
    """
    name, instance, port = other_host(lab)
    unit = f"vllm-{instance}.service"
    all_answer(lab)
    try:
        started = time.monotonic()
        assert lab_ssh(lab, name, f"systemctl stop {unit}").returncode == 0
        took = time.monotonic() - started
        assert took < GRACE_S + 30, f"systemctl stop took {took:.0f} s"
        assert container_state(lab, name, instance).endswith(" false")
        assert port_closed(lab, name, port)
        assert unit_property(lab, name, unit, "ActiveState") == "inactive"  # stopped, not restarted

        lab_ssh(lab, name, f"systemctl reset-failed {unit}; systemctl start {unit}")
        wait_until(lambda: container_state(lab, name, instance).endswith(" true"), 300, "the container runs")
        before = container_state(lab, name, instance)
        restarts = int(unit_property(lab, name, unit, "NRestarts") or 0)
        killed = time.monotonic()
        assert lab_ssh(lab, name, f"docker kill vllm-{instance}").returncode == 0
        wait_until(lambda: container_state(lab, name, instance).endswith(" true")
                   and container_state(lab, name, instance) != before, 300, "a new container runs")  # fmt: skip
        assert time.monotonic() - killed >= RESTART_S - 2, "restarted without the back-off"
        assert int(unit_property(lab, name, unit, "NRestarts")) == restarts + 1

        lab_ssh(lab, name, f"systemctl reset-failed {unit}; systemctl restart {unit}")
        for crash in range(3):
            wait_until(lambda: container_state(lab, name, instance).endswith(" true"), 300, f"start {crash + 1}")
            assert lab_ssh(lab, name, f"docker kill vllm-{instance}").returncode == 0
            time.sleep(2)
        wait_until(lambda: unit_property(lab, name, unit, "ActiveState") == "failed", 120, "the unit fails")
        # systemd keeps the first failure as Result (here exit-code: the container was killed) and
        # says why it gave up in the journal; `systemctl status` shows both.
        assert unit_property(lab, name, unit, "Result") in ("exit-code", "start-limit-hit")
        time.sleep(RESTART_S + 5)  # no further attempt: not a loop
        assert unit_property(lab, name, unit, "ActiveState") == "failed"
        assert container_state(lab, name, instance).endswith(" false")
        status = lab_ssh(lab, name, f"systemctl status {unit} --no-pager --lines 20").stdout
        assert "Start request repeated too quickly" in status, status

        rc, _, stderr = pyinfra_json("deploy.py", "-y", "--limit", name, timeout_s=1200)
        assert rc == 0, stderr[-3000:]
        assert unit_property(lab, name, unit, "ActiveState") == "active"
        assert healthy(lab.hosts[name], port)
    finally:
        lab_ssh(lab, name, f"systemctl reset-failed {unit}; systemctl start {unit}")
        wait_until(lambda: healthy(lab.hosts[name], port), 900, f"{unit} answers again")
