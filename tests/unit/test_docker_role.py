"""roles/docker against pyinfra ``@fake`` hosts: daemon.json validated before it is replaced, and
Docker restarts that roll through the fleet and stop at the first failure (issue 11)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rocmfleet.config.settings import host_config
from rocmfleet.domain.docker import daemon_json

ROOT = Path(__file__).resolve().parents[2]
DATA = {
    "docker_source": "debian",
    "vllm_profile": "lab-tiny-llama",
    "vllm_image_repository": "10.213.0.1:5000/rocmfleet-lab/vllm-cpu",
    "vllm_image_tag": "0.32.0-lab.1",
    "vllm_image_digest": "sha256:" + "ab" * 32,
    "vllm_instances": [{"name": "a", "port": 8000, "gpus": [0]}, {"name": "b", "port": 8001, "gpus": [1]}],
}
RESTART = "Restart Docker for the new daemon.json, a few hosts at a time"
WRITE = "Write /etc/docker/daemon.json (validated by dockerd)"


def run_role(
    tmp_path: Path, hosts: dict[str, dict], data: dict | None = None, delay: float = 0
) -> tuple[list[dict], str, int]:
    """Run ``roles.docker.apply`` (its plan items, the one read) on fake hosts ``{name: fake_responses}``;
    each command takes ``delay`` s."""
    data = {**DATA, **(data or {})}
    inventory, deploy = tmp_path / "inventory.py", tmp_path / "deploy.py"
    rows = [
        (f"@fake/{name}", {"fake_delay": delay, "fake_delay_jitter": 0, "fake_responses": answers})
        for name, answers in hosts.items()
    ]
    inventory.write_text(f"hosts = {rows!r}\n")
    deploy.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            import rocmfleet.roles.docker
            from pyinfra.context import host
            from rocmfleet import roles
            from rocmfleet.config.settings import host_config
            from rocmfleet.facts.state import HostState
            from rocmfleet.plan import drift, hostdrift, hoststate
            from rocmfleet.plan.build import plan_host
            config = host_config({data!r})
            items = hostdrift.role_items(plan_host("", config), "docker")
            query = hoststate.merge_queries(drift.query(items), roles.docker.query(config.settings))
            got = host.get_fact(HostState, **query)
            instances = [(f"vllm-{{i.name}}", i.port) for i in config.instances()]
            roles.docker.apply(config.settings, items, got, instances=instances)
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", "-vv", "--json", str(inventory), str(deploy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )
    # when every host failed pyinfra ends with "No hosts remaining" and prints no JSON
    operations = json.loads(proc.stdout)["results"]["operations"] if proc.stdout.strip() else []
    return operations, proc.stderr, proc.returncode


#: The fake answer once daemon.json was written: a restart is owed (rocmfleet.operations.docker.PENDING).
OWED = {"if [ -e /run/rocmfleet/docker-restart-pending ]": ["exists"]}


def op(operations: list[dict], name: str) -> dict:
    return next(o for o in operations if o["name"].removeprefix("docker | ") == name)


def current(data: dict | None = None) -> dict[str, list[str]]:
    """A fake answer saying daemon.json already holds what the role renders."""
    text = daemon_json(host_config({**DATA, **(data or {})}).settings)
    return {
        "sha256sum /etc/docker/daemon.json": [f"{hashlib.sha256(text.encode()).hexdigest()}  /etc/docker/daemon.json"]
    }


def test_a_converged_host_neither_writes_nor_restarts(tmp_path):
    operations, stderr, rc = run_role(tmp_path, {"gpu-1": current()})
    assert rc == 0, stderr[-3000:]
    assert op(operations, WRITE)["no_change"] == ["@fake/gpu-1"]
    assert op(operations, RESTART)["success"] == []


def test_a_changed_daemon_json_restarts_every_host_that_changed(tmp_path):
    operations, stderr, rc = run_role(tmp_path, {"gpu-1": OWED, "gpu-2": OWED, "gpu-3": current()})
    assert rc == 0, stderr[-3000:]
    assert sorted(op(operations, WRITE)["success"]) == ["@fake/gpu-1", "@fake/gpu-2"]
    assert sorted(op(operations, RESTART)["success"]) == ["@fake/gpu-1", "@fake/gpu-2"]  # gpu-3 unchanged


def gated_and_ran(stderr: str) -> tuple[list[str], list[str]]:
    """Hosts the gate stopped, and hosts whose restart command ran (and failed)."""
    gated = [line.split("]")[0].strip(" [") for line in stderr.splitlines() if "Docker not restarted here" in line]
    ran = [line.split("]")[0].strip(" [") for line in stderr.splitlines() if "Error: executed 1 commands" in line]
    return gated, ran


FAILING = {
    "docker-restart.sh": {"success": False, "stderr": "rocmfleet: vllm-a does not answer on port 8000"},
    **OWED,
}


def test_a_failed_restart_stops_the_roll(tmp_path):
    # every restart would fail: one host at a time, so only the first one tries
    _, stderr, rc = run_role(tmp_path, {"gpu-1": FAILING, "gpu-2": FAILING, "gpu-3": FAILING})
    assert rc != 0
    gated, ran = gated_and_ran(stderr)
    assert len(ran) == 1 and len(gated) == 2
    assert all(
        f"its restart failed on {ran[0]} in this run" in line for line in stderr.splitlines() if "Docker not" in line
    )


def test_restart_parallel_is_the_batch_size(tmp_path):
    _, stderr, rc = run_role(
        tmp_path,
        {"gpu-1": FAILING, "gpu-2": FAILING, "gpu-3": FAILING},
        data={"docker_restart_parallel": 2},
        delay=0.3,  # the two of a batch start together, as on real hosts
    )
    assert rc != 0
    gated, ran = gated_and_ran(stderr)
    assert len(ran) == 2 and len(gated) == 1  # the first batch of two tried; the next was stopped


def old_file(**changes) -> dict[str, list[str]]:
    """A fake answer: the live daemon.json is the rendered one with ``changes`` (key: value) applied."""
    data = json.loads(daemon_json(host_config(DATA).settings))
    data.update({key.replace("_", "-"): value for key, value in changes.items()})
    # the new file is written, so a restart is owed (rocmfleet.operations.docker.PENDING)
    return {
        "cat /etc/docker/daemon.json": json.dumps(data, indent=2).splitlines(),
        "if [ -e /run/rocmfleet/docker-restart-pending ]": ["exists"],
    }


def test_a_change_dockerd_reloads_is_a_reload_not_a_restart(tmp_path):
    # the live file lacks a registry mirror the data now has... as if one was added
    _, stderr, rc = run_role(tmp_path, {"gpu-1": old_file(registry_mirrors=["https://old.example.com"])})
    assert rc == 0, stderr[-3000:]
    assert "systemctl reload docker.service" in stderr
    assert "docker-restart.sh" not in stderr


def test_a_change_dockerd_cannot_reload_is_a_restart(tmp_path):
    _, stderr, rc = run_role(tmp_path, {"gpu-1": old_file(log_opts={"max-size": "10m", "max-file": "3"})})
    assert rc == 0, stderr[-3000:]
    assert "docker-restart.sh" in stderr and "systemctl reload docker.service" not in stderr


def test_a_restart_owed_from_an_earlier_run_is_made_though_daemon_json_is_current(tmp_path):
    # an earlier run wrote daemon.json, then its restart failed or was gated: the mark is still there
    operations, stderr, rc = run_role(tmp_path, {"gpu-1": {**current(), **OWED}})
    assert rc == 0, stderr[-3000:]
    assert op(operations, WRITE)["no_change"] == ["@fake/gpu-1"]
    assert op(operations, RESTART)["success"] == ["@fake/gpu-1"]
    assert "docker-restart.sh" in stderr and "rm -f /run/rocmfleet/docker-restart-pending" in stderr


def converged_state(data: dict | None = None, pending: bool = False) -> dict[str, list[str]]:
    """A fake ``HostState`` answer: Docker installed at the held version, running and enabled,
    daemon.json as rendered; ``pending``: a restart still owed by an earlier run."""
    settings = host_config({**DATA, **(data or {})}).settings
    text = daemon_json(settings).encode()
    lines = [
        json.dumps({"kind": "path", "path": "/etc/docker/daemon.json", "type": "file", "mode": "644",
                    "user": "root", "group": "root", "sha256": hashlib.sha256(text).hexdigest()}),
        json.dumps({"kind": "path", "path": "/run/rocmfleet/docker-restart-pending",
                    "type": "file" if pending else "missing"}),
        json.dumps({"kind": "unit", "unit": "docker.service", "load": "loaded", "active": "active",
                    "enabled": "enabled"}),
    ]  # fmt: skip
    lines += [
        json.dumps({"kind": "pkg", "package": p, "status": "hi ", "version": "20.10.24+dfsg1-1+deb12u1"})
        for p in ("docker.io", "containerd", "runc", "docker-cli")
    ]
    lines.append(json.dumps({"kind": "pkg", "package": "pigz", "status": "ii ", "version": "2.6-1"}))
    return {"' state.sh ": [*lines, '{"kind":"end"}']}


def test_a_converged_host_gets_no_operation_at_all(tmp_path):
    operations, stderr, rc = run_role(tmp_path, {"gpu-1": converged_state()})
    assert rc == 0, stderr[-3000:]
    assert operations == []


def test_a_restart_owed_by_an_earlier_run_is_still_made(tmp_path):
    operations, stderr, rc = run_role(tmp_path, {"gpu-1": {**converged_state(pending=True), **OWED}})
    assert rc == 0, stderr[-3000:]
    assert [o["name"].removeprefix("docker | ") for o in operations] == [RESTART]
    assert op(operations, RESTART)["success"] == ["@fake/gpu-1"]
