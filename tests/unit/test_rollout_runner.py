"""The rollout runner with stand-in steps, digest resolution against a local registry stand-in,
the host status script under sh with stand-in systemctl and docker, and the whole command from
the CLI on stand-in hosts (runner, hoststeps, command, fleetimage, status in rocmfleet/fleet/rollout/)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmfleet import scripts
from rocmfleet.fleet import inventory as fleet_inventory
from rocmfleet.fleet import registry
from rocmfleet.fleet.bench.bench import Thresholds
from rocmfleet.fleet.bench.client import RUN, BenchClient
from rocmfleet.fleet.rollout import batches as rbatches
from rocmfleet.fleet.rollout import fleetimage, hoststeps, targetimage
from rocmfleet.fleet.rollout import report as rreport
from rocmfleet.fleet.rollout import state as rstate
from rocmfleet.fleet.rollout.instancestatus import InstanceStatus, parse_status, running_image
from rocmfleet.fleet.rollout.progress import LineProgress
from rocmfleet.fleet.rollout.runner import Runner
from rocmfleet.fleet.rollout.steps import StepError

OLD = rstate.ImageRef(repository="reg:5000/vllm", tag="lab.1", digest="sha256:" + "a" * 64)
NEW = rstate.ImageRef(repository="reg:5000/vllm", tag="lab.2", digest="sha256:" + "b" * 64)


# --- digest resolution ------------------------------------------------------------------------

INDEX = json.dumps({"schemaVersion": 2, "mediaType": registry.MANIFEST_TYPES[0], "manifests": []}).encode()
INDEX_DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()


class Registry(BaseHTTPRequestHandler):
    """A registry stand-in: ``/v2/<name>/manifests/<tag>`` for tag ``good``; options on the server."""

    def log_message(self, *args):
        pass

    def _manifest(self, body: bool):
        server = self.server
        server.seen.append((self.command, self.path, dict(self.headers)))
        if self.path.startswith("/token"):
            payload = json.dumps({"token": "T0K"}).encode()
            server.token_requests.append((self.path, self.headers.get("Authorization")))
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if server.bearer and self.headers.get("Authorization") != "Bearer T0K":
            self.send_response(401)
            realm = f"http://127.0.0.1:{server.server_port}/token"
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="reg",scope="repository:x:pull"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        accept = self.headers.get("Accept", "")
        served = ("/v2/rocm/vllm/manifests/good", f"/v2/rocm/vllm/manifests/{INDEX_DIGEST}")
        if self.path not in served or registry.MANIFEST_TYPES[0] not in accept:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", registry.MANIFEST_TYPES[0])
        self.send_header("Content-Length", str(len(INDEX)))
        if not (server.no_digest_on_head and self.command == "HEAD"):
            self.send_header("Docker-Content-Digest", server.digest or INDEX_DIGEST)
        self.end_headers()
        if body:
            self.wfile.write(INDEX)

    def do_HEAD(self):  # noqa: N802 - http.server's name
        self._manifest(False)

    def do_GET(self):  # noqa: N802
        self._manifest(True)


@pytest.fixture
def reg():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    server.seen, server.token_requests = [], []
    server.bearer = server.no_digest_on_head = False
    server.digest = None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _name(server, tag="good"):
    return registry.parse_image(f"127.0.0.1:{server.server_port}/rocm/vllm:{tag}")


def test_parse_image_splits_like_docker():
    assert registry.parse_image("ubuntu:24.04") == registry.ImageName("docker.io", "library/ubuntu", "24.04", "ubuntu")
    assert registry.parse_image("rocm/vllm:t1").path == "rocm/vllm"
    name = registry.parse_image("reg.example:5000/a/b:0.32.0-lab.1")
    assert (name.registry, name.path, name.tag) == ("reg.example:5000", "a/b", "0.32.0-lab.1")
    assert registry.parse_image("localhost/x:y").registry == "localhost"
    for bad in ("rocm/vllm", "rocm/vllm@sha256:" + "a" * 64, "reg:5000/x", ":t"):
        with pytest.raises(ValueError, match="--image"):
            registry.parse_image(bad)


def test_a_pinned_digest_is_asked_for_by_digest_and_kept(reg):
    pinned = registry.parse_image(f"127.0.0.1:{reg.server_port}/rocm/vllm:good@{INDEX_DIGEST}")
    assert (pinned.tag, pinned.digest) == ("good", INDEX_DIGEST)
    assert registry.resolve_digest(pinned, [pinned.registry]) == INDEX_DIGEST
    assert reg.seen[-1][1] == f"/v2/rocm/vllm/manifests/{INDEX_DIGEST}"  # the manifest, not the tag
    other = "sha256:" + "e" * 64
    with pytest.raises(registry.RegistryError, match=f"HTTP 404: no manifest {other} in "):
        registry.resolve_digest(registry.parse_image(f"{pinned.repository}:good@{other}"), [pinned.registry])
    with pytest.raises(ValueError, match="not an image digest"):
        registry.parse_image("rocm/vllm:good@sha256:abc")


def test_docker_login_credentials_of_the_control_machine(tmp_path, monkeypatch):
    import base64

    helper = tmp_path / "bin" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text('#!/bin/sh\nread server\necho "{\\"Username\\": \\"bot\\", \\"Secret\\": \\"s-$server\\"}"\n')
    helper.chmod(0o755)
    auth = base64.b64encode(b"ops:pw").decode()
    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {"reg.example:5000": {"auth": auth}, registry.DOCKER_HUB_CONFIG_KEY: {"auth": auth}},
                    "credHelpers": {"helped.example": "fake"}})
    )  # fmt: skip
    assert registry.docker_config_credentials("reg.example:5000", str(tmp_path)) == ("ops", "pw")
    assert registry.docker_config_credentials("docker.io", str(tmp_path)) == ("ops", "pw")
    assert registry.docker_config_credentials("other.example", str(tmp_path)) is None
    monkeypatch.setenv("PATH", f"{helper.parent}:{os.environ['PATH']}")
    assert registry.docker_config_credentials("helped.example", str(tmp_path)) == ("bot", "s-helped.example")
    assert registry.docker_config_credentials("reg.example:5000", str(tmp_path / "none")) is None


def test_head_with_every_manifest_type_gives_the_digest(reg):
    name = _name(reg)
    assert registry.resolve_digest(name, [name.registry]) == INDEX_DIGEST
    method, path, headers = reg.seen[-1]
    assert (method, path) == ("HEAD", "/v2/rocm/vllm/manifests/good")
    assert [t.strip() for t in headers["Accept"].split(",")] == list(registry.MANIFEST_TYPES)


def test_bearer_challenge_gets_a_token_with_the_credentials(reg):
    reg.bearer = True
    name = _name(reg)
    assert registry.resolve_digest(name, [name.registry], credentials=("u", "p")) == INDEX_DIGEST
    path, auth = reg.token_requests[0]
    assert "scope=repository%3Ax%3Apull" in path and "service=reg" in path
    assert auth == "Basic dTpw"  # base64("u:p")


def test_no_digest_on_head_falls_back_to_the_sha256_of_the_body(reg):
    reg.no_digest_on_head = True
    name = _name(reg)
    assert registry.resolve_digest(name, [name.registry]) == INDEX_DIGEST
    assert [m for m, _p, _h in reg.seen] == ["HEAD", "GET"]


def test_unknown_tag_wrong_digest_and_unreachable_registry_are_errors(reg):
    name = _name(reg, "missing")
    with pytest.raises(registry.RegistryError, match="HTTP 404: no tag missing"):
        registry.resolve_digest(name, [name.registry])
    reg.digest, reg.no_digest_on_head = "sha256:" + "c" * 64, True
    with pytest.raises(registry.RegistryError, match="differs from the body"):
        registry.resolve_digest(_name(reg), [_name(reg).registry])
    with pytest.raises(registry.RegistryError, match="127.0.0.1:1/v2"):
        registry.resolve_digest(registry.parse_image("127.0.0.1:1/x:y"), ["127.0.0.1:1"], timeout_s=5)


# --- host status ------------------------------------------------------------------------------


def test_status_script_with_stand_in_systemctl_and_docker(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        '#!/bin/sh\ncase "$3 $5" in "ActiveState vllm-a.service") echo active;;'
        ' "SubState vllm-a.service") echo running;;'
        ' "ActiveState vllm-b.service") echo failed;; *) echo dead;; esac\n'
    )
    (bin_dir / "docker").write_text(
        '#!/bin/sh\n[ "$6" = vllm-a ] && printf "%s\\t%s\\n" "' + OLD.reference + '" 2026-01-01T00:00:00.5Z; exit 0\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["sh", "-c", scripts.command("vllm-status.sh", "a", "b")], capture_output=True, text=True, env=env, check=True
    ).stdout
    now, instances, started = parse_status("h", out)
    assert now is not None and now > 1.7e9
    assert instances[0] == InstanceStatus("h", "a", "active", "running", OLD.reference, None, instances[0].uptime_s)
    assert instances[0].uptime_s == pytest.approx(now - 1767225600.5)
    assert (instances[1].active, instances[1].image, instances[1].uptime_s) == ("failed", None, None)
    assert started == {"a": 1767225600.5, "b": None}


def test_running_image_is_one_pinned_reference():
    def inst(image):
        return InstanceStatus("h", "x", "active", "running", image)

    assert running_image([inst(OLD.reference), inst(OLD.reference)]) == (OLD, None)
    assert running_image([])[1] == "no vLLM container runs"
    assert "different images" in running_image([inst(OLD.reference), inst(NEW.reference)])[1]
    assert "not pinned" in running_image([inst("reg/vllm:latest")])[1]


# --- the runner with stand-in steps -----------------------------------------------------------


class Killed(BaseException):
    """Stands for the control process dying (SIGKILL: nothing runs after it)."""


class FakeSteps:
    """Records every step; ``fail`` = {(step, host)}: raise StepError there; ``kill_at`` = (step, host)."""

    def __init__(self, fail=(), kill_at=None, slow=None, unjudged=None):
        self.log: list[tuple[str, str]] = []
        self.fail, self.kill_at = set(fail), kill_at
        #: {(step, host): times}: raise an inconclusive StepError there that many times (-1: always)
        self.unjudged = dict(unjudged or {})
        self.running: dict[str, str] = {}
        self.out_of_service: set[str] = set()
        self.most_out = 0
        self.lock = threading.Lock()
        self.slow = slow or {}
        self.rolled_back_in_service: list[str] = []

    def _do(self, step, host):
        with self.lock:
            self.log.append((step, host))
        if (step, host) == self.kill_at:
            raise Killed
        if (step, host) in self.fail:
            raise StepError(step, f"{step} failed on {host} (stand-in)")
        left = self.unjudged.get((step, host), 0)
        if left:
            self.unjudged[(step, host)] = left - 1
            raise StepError(step, f"{step} could not run on {host} (stand-in)", inconclusive=True)

    def pull(self, host, image):
        self._do("pull", host)

    def drain(self, host):
        self._do("drain", host)
        with self.lock:
            self.out_of_service.add(host)
            self.most_out = max(self.most_out, len(self.out_of_service))

    def undrain(self, host):
        self._do("undrain", host)
        with self.lock:
            self.out_of_service.discard(host)

    def bench(self, host, label):
        self._do(f"bench-{label}", host)
        return {}, [f"case: {label} failed on {host}"] if ("bench-" + label, host) in self.slow else []

    def switch(self, host, image):
        self._do("switch", host)
        time.sleep(0.2)  # hosts of one batch switch together: their out-of-service times overlap
        self.running[host] = image.digest
        return {"restart": 1.0, "readiness": 2.0}

    def check(self, host):
        self._do("check", host)
        return ["vllm::ready[x]: failed"] if ("gate", host) in self.fail else []

    def rollback(self, host, image):
        self._do("rollback", host)
        with self.lock:
            self.rolled_back_in_service.extend([host] if host not in self.out_of_service else [])
        self.running[host] = image.digest

    def thresholds(self, host):
        return Thresholds()


def _plan(hosts, canary=1, most=1, kind="rollout", services=None):
    """A planned rollout of ``hosts`` (``services``: ``{host: {service: replicas}}``, default one
    replica of one service each: the batches are then the first ``canary`` hosts, then runs of ``most``)."""
    replicas = services or {h: {"svc": 1} for h in hosts}
    bounds = {s: most for s in rbatches.totals(replicas)}
    head = rbatches.default_canary(replicas, canary)
    batches = rbatches.plan_batches(replicas, bounds, head)
    index = {h: i for i, b in enumerate(batches) for h in b}
    return rstate.RolloutState(
        id="r1", kind=kind, inventory="inventories/lab.py", target=NEW if kind == "rollout" else None, canary=canary,
        max_unavailable=max((len(b) for b in batches), default=1), batches=batches,
        canary_batches=len(rbatches.pack(head, replicas, bounds)),
        services={s: rstate.ServiceBound(replicas=n, max_unavailable=most)
                  for s, n in rbatches.totals(replicas).items()},
        hosts={h: rstate.HostState(batch=index[h], before=OLD, after=NEW, replicas=replicas[h]) for h in hosts},
    )  # fmt: skip


def _runner(tmp_path, state, steps, reverted=None, slept=None, lines=None):
    path = tmp_path / "state.json"
    rstate.save_state(state, path)
    lines = [] if lines is None else lines
    waits = [] if slept is None else slept
    return Runner(state, path, steps, LineProgress(lines.append), on_data_revert=reverted, sleep=waits.append), path


def test_a_registry_lost_after_the_canary_pauses_and_resume_finishes(tmp_path):
    """h3's pull never works (a registry gone): retried twice (10 s, 20 s), then paused, exit 3:
    h1 and h2 keep the new image, h3 untouched, nothing rolled back, plain deploys still refused;
    --resume with the registry back ends done."""
    steps = FakeSteps(unjudged={("pull", "h3"): -1})
    reverted, slept, lines = [], [], []
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"]), steps, lambda: reverted.append(1), slept, lines)
    assert runner.run() == 3
    state = rstate.load_state(path)
    assert state.status == "paused" and state.blocking and reverted == []
    assert "h3: pull gate inconclusive: pull could not run on h3" in state.failure
    assert [state.hosts[h].step for h in ("h1", "h2", "h3")] == ["done", "done", "pending"]
    assert steps.running == {"h1": NEW.digest, "h2": NEW.digest}
    assert not any(s == "rollback" for s, _h in steps.log)
    assert [s for s, h in steps.log if h == "h3"] == ["pull"] * 3 and slept == [10, 20]
    assert any("h3: pull inconclusive" in line and "retry 1 of 2 in 10 s" in line for line in lines)
    assert any("--resume" in line and "nothing was rolled back" in line for line in lines), lines
    assert "paused" in rreport.markdown_report(state)
    again, _ = _runner(tmp_path, state, FakeSteps())
    again.resume_paused()
    assert again.run() == 0
    state = rstate.load_state(path)
    assert state.status == "done" and state.failure is None and all(h.error is None for h in state.hosts.values())


def test_an_inconclusive_step_that_works_on_retry_goes_on(tmp_path):
    steps = FakeSteps(unjudged={("drain", "h2"): 1, ("bench-before", "h2"): 1, ("undrain", "h2"): 1})
    slept = []
    runner, path = _runner(tmp_path, _plan(["h1", "h2"]), steps, slept=slept)
    assert runner.run() == 0
    assert rstate.load_state(path).status == "done" and slept == [10, 10, 10]
    mine = [s for s, h in steps.log if h == "h2"]
    assert mine == ["pull", "drain", "drain", "bench-before", "bench-before", "switch", "check", "bench-after",
                    "undrain", "undrain"]  # fmt: skip


def test_a_failed_canary_does_not_wait_for_the_next_batchs_pull_retries(tmp_path):
    steps = FakeSteps(fail={("gate", "h1")}, unjudged={("pull", h): -1 for h in ("h2", "h3", "h4")})
    slept = []
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3", "h4"], canary=1, most=3), steps, slept=slept)
    runner.sleep = lambda s: (slept.append(s), time.sleep(0.3))  # the canary's gate ends while the pull waits
    assert runner.run() == 1
    assert rstate.load_state(path).status == "rolled_back"
    assert len(slept) <= 2, slept  # not 2 retries for each of the three hosts


def test_a_failure_beside_an_inconclusive_host_rolls_back(tmp_path):
    """One verdict against the image in the batch is enough: the batch rolls back."""
    steps = FakeSteps(fail={("gate", "h2")}, unjudged={("drain", "h3"): -1})
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"], canary=1, most=2), steps, slept=[])
    assert runner.run() == 1
    state = rstate.load_state(path)
    assert state.status == "rolled_back"
    assert "h2: check gate failed" in state.failure and "h3: drain gate inconclusive" in state.failure


def test_a_pause_undrains_a_host_not_yet_switched_and_keeps_a_switched_one_drained(tmp_path):
    steps = FakeSteps(unjudged={("bench-before", "h2"): -1, ("check", "h3"): -1})
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"], canary=1, most=2), steps, slept=[])
    assert runner.run() == 3
    state = rstate.load_state(path)
    assert state.hosts["h2"].step == "pending" and ("undrain", "h2") in steps.log  # serves the old image again
    assert state.hosts["h3"].step == "switched" and "h3" in steps.out_of_service  # new image, not judged: drained
    assert steps.running["h3"] == NEW.digest and not any(s == "rollback" for s, _h in steps.log)
    assert "Left drained (not yet judged): h3" in rreport.markdown_report(state)


def test_a_rolling_restart_pauses_too(tmp_path):
    steps = FakeSteps(unjudged={("drain", "h2"): -1})
    steps.switch = lambda host, image: {"restart": 0.1}
    runner, path = _runner(tmp_path, _plan(["h1", "h2"], kind="restart"), steps, slept=[])
    assert runner.run() == 3
    state = rstate.load_state(path)
    assert state.status == "paused" and state.blocking


def test_good_rollout_canary_then_batches_never_more_out_than_allowed(tmp_path):
    hosts = ["h1", "h2", "h3", "h4", "h5"]
    steps = FakeSteps()
    runner, path = _runner(tmp_path, _plan(hosts, canary=1, most=2), steps)
    assert runner.run() == 0
    state = rstate.load_state(path)
    assert state.status == "done" and all(h.step == "done" for h in state.hosts.values())
    assert steps.running == dict.fromkeys(hosts, NEW.digest)
    assert steps.most_out == 2 and not steps.out_of_service
    order = [host for step, host in steps.log if step == "switch"]
    assert order[0] == "h1" and set(order[1:3]) == {"h2", "h3"} and set(order[3:]) == {"h4", "h5"}
    # each host: drain, benchmark before, switch, check, benchmark after, undrain; pulled before its drain
    for host in hosts:
        mine = [step for step, h in steps.log if h == host]
        assert mine == ["pull", "drain", "bench-before", "switch", "check", "bench-after", "undrain"]
    # the next batch was pulled before the current one finished switching
    log = steps.log
    assert log.index(("pull", "h2")) < log.index(("undrain", "h1"))
    assert state.hosts["h1"].times["restart"] == 1.0 and state.hosts["h1"].times["readiness"] == 2.0
    assert {"pull", "drain", "gate", "undrain"} <= set(state.hosts["h1"].times)


def test_failed_canary_gate_rolls_the_canary_back_and_leaves_the_rest_untouched(tmp_path):
    steps = FakeSteps(fail={("gate", "h1")})
    reverted = []
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"]), steps, lambda: reverted.append(1))
    assert runner.run() == 1
    state = rstate.load_state(path)
    assert state.status == "rolled_back" and reverted == [1]
    assert "h1: check gate failed: vllm::ready[x]: failed" in state.failure
    assert state.hosts["h1"].step == "rolled_back" and steps.running["h1"] == OLD.digest
    assert [s for s, h in steps.log if h in ("h2", "h3")] == ["pull"]  # only the next batch was pre-pulled
    assert state.hosts["h2"].step == state.hosts["h3"].step == "pending"
    assert ("undrain", "h1") in steps.log


def test_failure_in_a_later_batch_rolls_back_every_switched_host(tmp_path):
    steps = FakeSteps(slow={("bench-after", "h4")})
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3", "h4", "h5", "h6"], canary=1, most=2), steps)
    assert runner.run() == 1
    state = rstate.load_state(path)
    rolled = sorted(h for s, h in steps.log if s == "rollback")
    assert rolled == ["h1", "h2", "h3", "h4", "h5"]  # h5 passed, but its batch failed
    assert state.hosts["h6"].step == "pending" and "h6" not in steps.running
    assert "h4: benchmark gate failed: case: after failed on h4" in state.failure
    assert all(steps.running[h] == OLD.digest for h in rolled)
    # every host was drained before its rollback, and never more than max-unavailable out at once
    assert steps.rolled_back_in_service == [] and steps.most_out <= 2 and not steps.out_of_service
    first = min(steps.log.index(("rollback", h)) for h in ("h1", "h2", "h3"))
    assert steps.log.index(("rollback", "h4")) < first  # the failed host, still drained, first


def test_a_failing_drain_stops_before_the_host_is_touched(tmp_path):
    steps = FakeSteps(fail={("drain", "h2")})
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"]), steps)
    assert runner.run() == 1
    state = rstate.load_state(path)
    assert ("switch", "h2") not in steps.log and state.hosts["h2"].step == "pending"
    assert "drain" in state.hosts["h2"].error
    assert [h for s, h in steps.log if s == "rollback"] == ["h1"]


def test_unreachable_host_is_reported_and_the_rollback_still_ends(tmp_path):
    steps = FakeSteps(fail={("switch", "h2"), ("rollback", "h2")})
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"], canary=1, most=2), steps)
    assert runner.run() == 1
    state = rstate.load_state(path)
    assert state.status == "rollback_failed" and state.blocking
    assert state.hosts["h1"].step == "rolled_back" and state.hosts["h2"].step == "rollback_failed"
    assert "rollback failed on h2" in state.hosts["h2"].error


def test_killed_after_the_canary_resumes_to_the_end(tmp_path):
    steps = FakeSteps(kill_at=("switch", "h2"))
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"]), steps)
    with pytest.raises(Killed):
        runner.run()
    state = rstate.load_state(path)  # what the file says after the kill
    assert state.status == "running" and state.blocking
    assert [state.hosts[h].step for h in ("h1", "h2", "h3")] == ["done", "switching", "pending"]
    assert state.touched() == ["h1", "h2"]
    steps2 = FakeSteps()
    resumed, _ = _runner(tmp_path, state, steps2)
    assert resumed.run() == 0
    assert rstate.load_state(path).status == "done"
    assert [s for s, h in steps2.log if h == "h1"] == []  # the canary is not switched again
    assert [s for s, h in steps2.log if h == "h2"] == ["switch", "check", "bench-after", "undrain"]


def test_killed_rollout_returns_with_rollback(tmp_path):
    steps = FakeSteps(kill_at=("check", "h2"))
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"]), steps)
    with pytest.raises(Killed):
        runner.run()
    state = rstate.load_state(path)
    reverted = []
    steps2 = FakeSteps()
    back, _ = _runner(tmp_path, state, steps2, lambda: reverted.append(1))
    assert back.roll_back(None) == 0
    state = rstate.load_state(path)
    assert state.status == "rolled_back" and not state.blocking and reverted == [1]
    assert sorted(h for s, h in steps2.log if s == "rollback") == ["h1", "h2"]
    assert ("rollback", "h3") not in steps2.log
    assert steps2.running == {"h1": OLD.digest, "h2": OLD.digest}


def test_rolling_restart_switches_with_no_image_and_has_nothing_to_roll_back(tmp_path):
    steps = FakeSteps(fail={("gate", "h2")})
    seen = []
    steps.switch = lambda host, image: seen.append((host, image)) or {"restart": 0.1}
    runner, path = _runner(tmp_path, _plan(["h1", "h2", "h3"], kind="restart"), steps)
    assert runner.run() == 1
    assert seen == [("h1", None), ("h2", None)]
    assert not any(s == "pull" or s == "rollback" for s, _h in steps.log)
    state = rstate.load_state(path)
    # h2 failed its gate: nothing was rolled back, so it is not called rolled_back; it is left drained
    assert state.status == "failed" and state.failure.startswith("h2: check gate failed")
    assert [state.hosts[h].step for h in ("h1", "h2", "h3")] == ["done", "failed", "pending"]
    assert steps.out_of_service == {"h2"} and state.drained() == ["h2"]
    assert "Left drained, not rolled back" in rreport.markdown_report(state) and "h2" in rreport.markdown_report(state)
    assert not state.blocking  # a deploy may be what fixes h2
    with pytest.raises(ValueError, match="nothing to roll back"):
        runner.roll_back("no")
    # --resume: h2 is restarted and gated again (still drained: not drained twice; no baseline was
    # kept, so it is benchmarked first), then h3
    steps2 = FakeSteps()
    steps2.switch = lambda host, image: steps2.log.append(("switch", host)) or {"restart": 0.1}
    resumed, _ = _runner(tmp_path, state, steps2)
    resumed.retry_failed()
    assert resumed.run() == 0
    assert rstate.load_state(path).status == "done"
    assert [s for s, h in steps2.log if h == "h2"] == ["bench-before", "switch", "check", "bench-after", "undrain"]
    assert [s for s, h in steps2.log if h == "h3"] == [
        "drain",
        "bench-before",
        "switch",
        "check",
        "bench-after",
        "undrain",
    ]


def test_a_restart_whose_drain_fails_leaves_the_host_pending_not_failed(tmp_path):
    steps = FakeSteps(fail={("drain", "h1")})
    runner, path = _runner(tmp_path, _plan(["h1", "h2"], kind="restart"), steps)
    assert runner.run() == 1
    state = rstate.load_state(path)
    assert state.status == "failed" and state.hosts["h1"].step == "pending" and "drain" in state.hosts["h1"].error
    assert state.drained() == []


def test_restart_rollback_is_refused_and_resume_of_a_failed_restart_retries(recorded, capsys):
    from rocmfleet import entry

    state = _plan(["h1", "h2"], kind="restart")
    state.status, state.hosts["h1"].step = "failed", "failed"
    rstate.save_state(state, recorded)
    assert entry.main(["restart", PROD, "--rollback"]) == 2
    err = capsys.readouterr().err
    assert "changes no image: nothing to roll back" in err and "--resume" in err
    assert entry.main(["rollout", PROD, "--resume"]) == 2  # the recorded one is a restart
    assert f"{recorded} records restart r1, not a rollout: use `rocmfleet restart" in capsys.readouterr().err


# --- on real hosts: the deploy's watch and the group data file --------------------------------


class _Target:
    def __init__(self, port: int) -> None:
        from rocmfleet.config.connection import SshSettings

        self.ssh = SshSettings(hostname="127.0.0.1", port=port, connect_timeout_s=2)
        image = SimpleNamespace(reference="r/vllm:new@sha256:" + "b" * 64)
        self.config = SimpleNamespace(image=image, profile=SimpleNamespace(vllm_version="0.33.0"))


def test_a_deploy_whose_host_stops_answering_is_stopped_and_reported(monkeypatch):
    monkeypatch.setattr(hoststeps, "HEARTBEAT_S", 0.5)
    steps = hoststeps.HostSteps("inv.py", {"gone": _Target(1)}, None, "id")  # nothing listens on port 1
    proc = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    with pytest.raises(StepError) as failed:
        steps._watch("gone", proc, 600, "switch")
    assert time.monotonic() - started < 20
    assert failed.value.gate == "switch" and "gone stopped answering SSH" in str(failed.value)
    assert proc.returncode is not None  # the deploy was stopped, not left running


def test_the_check_and_bench_steps_are_the_ones_given(tmp_path):
    """HostSteps runs the check and benchmark the rollout command passes in; without them those steps fail."""
    calls = []

    def check(target, timeout_s):
        calls.append(("check", target, timeout_s))
        return ["vllm::ready: failed: not ready"]

    def bench(target, directory, timeout_s, emit, client):
        calls.append(("bench", target, directory, timeout_s, client))
        return None, {"h/a:short": "result"}, ["h/a:long: vllm bench serve exited 1: boom"]

    target = _Target(1)
    steps = hoststeps.HostSteps("inv.py", {"h": target}, tmp_path, "id", bench_timeout_s=7, check=check, bench=bench)
    assert steps.check("h") == ["vllm::ready: failed: not ready"]
    assert steps.bench("h", "before") == ({"h/a:short": "result"}, ["h/a:long: vllm bench serve exited 1: boom"])
    steps.bench("h", "after")
    # one client for the runs before and after the switch: the new image's, in a container of its own
    one = BenchClient("r/vllm:new@sha256:" + "b" * 64, "0.33.0", RUN)
    assert calls == [
        ("check", target, hoststeps.CHECK_TIMEOUT_S),
        ("bench", target, tmp_path / "bench" / "before", 7, one),
        ("bench", target, tmp_path / "bench" / "after", 7, one),
    ]
    # what the image cannot have caused is inconclusive: the host unreachable, the client timed out
    # or lost, every check an error (none ran to a verdict)
    for error, results in (("unreachable", []), (None, ["h/a:long: timed out after 60 s (--timeout-s)"]),
                           (None, ["h/a:long: connection lost: EOFError: "])):  # fmt: skip
        given = lambda *a, e=error, r=results: (e, {}, r)  # noqa: E731
        unjudged = hoststeps.HostSteps("inv.py", {"h": target}, tmp_path, "id", bench=given)
        with pytest.raises(StepError, match="before the switch: ") as raised:
            unjudged.bench("h", "before")
        assert raised.value.inconclusive
    for lines in (["vllm::x: error: lost"], ["host::reachable: failed: h: Could not connect"]):
        unjudged = hoststeps.HostSteps("inv.py", {"h": target}, tmp_path, "id", check=lambda *a, ls=lines: ls)
        with pytest.raises(StepError, match=lines[0]) as raised:
            unjudged.check("h")
        assert raised.value.inconclusive
    judged = hoststeps.HostSteps(
        "inv.py", {"h": target}, tmp_path, "id", check=lambda *a: ["vllm::x: failed: says error: x"]
    )
    assert judged.check("h") == ["vllm::x: failed: says error: x"]
    observer = hoststeps.HostSteps("inv.py", {"h": target}, tmp_path, "status")
    for step in (lambda: observer.check("h"), lambda: observer.bench("h", "after")):
        with pytest.raises(StepError, match="no .* step given"):
            step()


def test_a_deploy_that_ends_is_returned_with_its_output(monkeypatch):
    steps = hoststeps.HostSteps("inv.py", {"h": _Target(1)}, None, "id")
    script = "echo out; echo err >&2; exit 3"
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert steps._watch("h", proc, 60, "switch") == ("out\n", "err\n")
    assert proc.returncode == 3


def test_a_deploy_dies_with_the_rollout_process(tmp_path):
    """The deploy's preexec_fn asks for SIGTERM when its parent dies (a killed rollout leaves none running)."""
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from rocmfleet.fleet.rollout.hoststeps import _die_with_parent\n"
            "p = subprocess.Popen(['sleep', '60'], preexec_fn=_die_with_parent)\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)\n",
        ]
    )
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as stat:  # a zombie waits for init: dead enough
            if stat.read().split()[2] == "Z":
                break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        raise AssertionError("the deploy outlived the rollout process")


def test_image_pins_go_to_the_group_file_that_holds_them(tmp_path, monkeypatch):
    from rocmfleet.config import groupvars

    monkeypatch.setattr(groupvars, "LOADED", [])
    all_yml, lab_yml = tmp_path / "all.yml", tmp_path / "lab.yml"
    all_yml.write_text("docker_source: debian\n")
    lab_yml.write_text('# the lab\nvllm_image_tag: "lab.1"  # pinned\nvllm_ready_timeout_s: 900\n')
    for group, path in (("all", all_yml), ("lab", lab_yml)):
        groupvars.LOADED.append(groupvars.GroupFile(group, path, {}))
    path, old, new = fleetimage.data_file(NEW)
    assert path == lab_yml and old == lab_yml.read_text()
    assert 'vllm_image_tag: "lab.2"  # pinned\n' in new and "vllm_ready_timeout_s: 900\n" in new
    assert new.count("vllm_image_digest:") == 1 and new.endswith(f'vllm_image_digest: "{NEW.digest}"\n')


class BenchingSteps(FakeSteps):
    """FakeSteps whose benchmark gives real results: ``throughput`` {label: output tokens/s}."""

    def __init__(self, directory, throughput, **kwargs):
        super().__init__(**kwargs)
        self.directory, self.throughput = directory, throughput

    def bench(self, host, label):
        from rocmfleet.fleet.bench.bench import load_result

        self._do(f"bench-{label}", host)
        data = json.loads(BENCH_EXAMPLE.read_text())
        data["output_throughput"] = self.throughput.get(label, self.throughput.get("after"))  # after-again: as after
        data["failed"] = getattr(self, "failed", 0) if label != "before" else 0
        data["failed"] = getattr(self, "failed_in", {}).get(label, data["failed"])
        path = self.directory / f"{host}-{label}.json"
        path.write_text(json.dumps(data))
        return {"case": load_result(path)}, []


def test_a_regression_is_run_again_and_fails_the_gate_only_when_it_repeats(tmp_path):
    noisy = BenchingSteps(tmp_path, {"before": 1000.0, "after": 100.0, "after-again": 990.0})
    runner, path = _runner(tmp_path, _plan(["h1"]), noisy)
    assert runner.run() == 0
    assert [c for c in noisy.log if c[0].startswith("bench")] == [
        ("bench-before", "h1"), ("bench-after", "h1"), ("bench-after-again", "h1")
    ]  # fmt: skip
    assert rstate.load_state(path).hosts["h1"].step == "done"
    slower = BenchingSteps(tmp_path, {"before": 1000.0, "after": 100.0, "after-again": 110.0})
    runner, path = _runner(tmp_path, _plan(["h1"]), slower)
    assert runner.run() == 1
    error = rstate.load_state(path).hosts["h1"].error
    assert error.startswith("benchmark gate failed: slower twice; first run: case: output_throughput: 100")
    assert "110.00 tok/s" in error
    then_failing = BenchingSteps(tmp_path, {"before": 1000.0, "after": 100.0, "after-again": 1000.0})
    then_failing.failed_in = {"after-again": 3}
    runner, path = _runner(tmp_path, _plan(["h1"]), then_failing)
    assert runner.run() == 1
    error = rstate.load_state(path).hosts["h1"].error
    assert "slower, then the second run failed" in error and "failed: 3 requests" in error
    failing = BenchingSteps(tmp_path, {"before": 1000.0, "after": 1000.0})
    failing.failed = 2  # a failed request is not run again
    runner, path = _runner(tmp_path, _plan(["h1"]), failing)
    assert runner.run() == 1
    assert ("bench-after-again", "h1") not in failing.log


#: In ../shared/fixtures beside the checkout (a worktree of it may sit one folder deeper).
BENCH_EXAMPLE = next(
    (p / "shared" / "fixtures" / "vllm-bench-serve-save-result-example.json")
    for p in Path(__file__).resolve().parents[2].parents
    if (p / "shared" / "fixtures").is_dir()
)


def test_a_gate_after_resume_still_compares_with_the_baseline_taken_before_the_kill(tmp_path):
    steps = BenchingSteps(tmp_path, {"before": 1000.0, "after": 100.0}, kill_at=("check", "h1"))
    runner, path = _runner(tmp_path, _plan(["h1", "h2"]), steps)
    with pytest.raises(Killed):
        runner.run()
    state = rstate.load_state(path)
    assert state.hosts["h1"].step == "switched" and state.hosts["h1"].baseline
    resumed, _ = _runner(tmp_path, state, BenchingSteps(tmp_path, {"before": 1000.0, "after": 100.0}))
    assert resumed.run() == 1  # throughput 90 % below the baseline: the gate fails, as without the kill
    assert "benchmark gate failed" in rstate.load_state(path).failure


def test_image_with_limit_is_refused_before_anything_is_read_or_changed(tmp_path):
    # --image rewrites the shared group file: hosts outside --limit would switch at their next deploy.
    proc = subprocess.run(
        [sys.executable, "-m", "rocmfleet.entry", "rollout", "inventories/prod.py", "--image", "reg:5000/v:new",
         "--limit", "gpu-node-01"],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "--image with --limit" in proc.stderr


# --- the command's options and messages ---------------------------------------------------------

PROD = str(Path(__file__).resolve().parents[2] / "inventories" / "prod.py")


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A rollout of inventories/prod.py recorded as running, in a results root of its own."""
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    state = _plan(["h1", "h2"])
    path = rstate.state_path(tmp_path, PROD)
    rstate.save_state(state, path)
    return path


@pytest.mark.parametrize("mode", ["--resume", "--rollback"])
@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--canary", "2"], "--canary 2"),
        (["--canary", "0"], "--canary 0"),
        (["--max-unavailable", "25%"], "--max-unavailable 25%"),
        (["--limit", "h1", "--limit", "h2"], "--limit h1,h2"),
        (["--force"], "--force"),
        (["--image", "reg:5000/vllm:new", "--canary", "1"], "--image reg:5000/vllm:new, --canary 1"),
    ],
)
def test_resume_and_rollback_refuse_options_that_would_change_the_recorded_plan(recorded, capsys, mode, options, named):
    from rocmfleet import entry

    before = recorded.read_text()
    assert entry.main(["rollout", PROD, mode, *options]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"rocmfleet: {mode} with {named}: {mode} runs the plan recorded in {recorded}"), err
    assert recorded.read_text() == before  # nothing ran


def test_resume_of_an_inconsistent_state_file_is_refused_with_every_problem_on_stderr(recorded, capsys):
    from rocmfleet import entry

    data = json.loads(recorded.read_text())
    data["batches"] = [["h1"], ["h1"]]
    data["hosts"]["h2"]["step"] = "finished"
    recorded.write_text(json.dumps(data))
    for mode in ("--resume", "--rollback"):
        assert entry.main(["restart" if mode == "--rollback" else "rollout", PROD, mode]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith(f"rocmfleet: {recorded}: not a usable rollout state file (1 problem(s))"), err
        assert "hosts.h2.step: \"finished\": Input should be 'pending'" in err
    data["hosts"]["h2"]["step"] = "pending"
    recorded.write_text(json.dumps(data))
    assert entry.main(["rollout", PROD, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "(2 problem(s))" in err
    assert "  - batches[1][0]: 'h1': already in batch 0; a host is in one batch\n" in err
    assert "  - hosts.h2: in no batch; every host is in one batch\n" in err


def test_a_refusal_to_start_goes_to_stderr_not_stdout(recorded, capsys):
    from rocmfleet import entry

    assert entry.main(["rollout", PROD]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "rollout r1 of inventories/lab.py" in err and "--resume" in err


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("", "expected REPO:TAG"),  # an unset shell variable: never "the pinned image"
        ("reg:5000/a\nb:1", "holds white space"),
        ("a:b:c", "holds a tag"),
        ("reg:5000/Vllm:1", "must be lower case"),
        ("reg:5000/vllm\u00e9:1", "not a repository name"),
    ],
)
def test_an_image_docker_would_refuse_is_refused_before_any_read(tmp_path, monkeypatch, capsys, image, why):
    from rocmfleet import entry

    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "results"))
    with pytest.raises(SystemExit) as exit_:
        entry.main(["rollout", PROD, "--image", image])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --image: " in err and why in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()  # no state, no lock: nothing started


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--canary", "999"], "--canary 999: replicas of each service in the canary, more than a service has"),
        (["--max-unavailable", "999"], "--max-unavailable 999: replicas of each service out at once, more than any"),
        (["--limit", "mi300x-a01,mi300x-a20"], "--limit mi300x-a20: matches no host, group or glob of"),
        (["--exclude", "mi300x-a20"], "--exclude mi300x-a20: matches no host, group or glob of"),
        (["--exclude", "gpu_nodes"], "--exclude gpu_nodes leaves no host of"),
        (["--exclude", "mi300x-a01", "--image", "reg:5000/v:new"], "--image with --exclude: --image rewrites"),
        (["--exclude", "mi300x-a01", "--resume"], "--exclude with --resume or --rollback"),
    ],
)
def test_counts_beyond_the_fleet_and_a_limit_typo_are_refused_before_any_connection(
    tmp_path, monkeypatch, capsys, options, said
):
    from rocmfleet import entry
    from rocmfleet.fleet.rollout import hoststeps

    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path))
    monkeypatch.setattr(hoststeps.HostSteps, "observe", lambda *_a: pytest.fail("connected to a host"))
    assert entry.main(["rollout", PROD, *options]) == 2
    out, err = capsys.readouterr()
    assert out == "" and said in err, err


def test_a_results_root_that_cannot_hold_the_state_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    from rocmfleet import entry

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(rstate.RESULTS_ENV, str(blocker))
    for command in ("rollout", "restart"):
        assert entry.main([command, PROD]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert f"cannot write the state's lock file {blocker}/prod/rollout-state.json.lock" in err
        assert rstate.RESULTS_ENV in err and err.endswith("nothing was done\n"), err


@pytest.mark.parametrize("command", ["rollout", "restart", "check", "bench", "status", "cache"])
def test_ctrl_c_ends_with_what_was_left_and_exit_130_not_a_traceback(monkeypatch, capsys, command):
    from rocmfleet import entry

    def interrupted(_args):
        raise KeyboardInterrupt

    from rocmfleet.cli import bench, cache, check, rollout, status

    for module in (rollout, check, bench, status, cache):
        monkeypatch.setattr(module, "run", interrupted)
    argv = [command, PROD] + (["--host", "h1"] if command == "cache" else [])
    if command == "cache":
        argv.insert(1, "bake")
    assert entry.main(argv) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"\nrocmfleet: {command}: interrupted; ")
    assert err.count("\n") == 2, err  # one line: what the command left


# --- the whole command from the CLI, on stand-in hosts (issue 24) --------------------------------
#
# `rocmfleet rollout INVENTORY --image ...` through entry.main: the inventory is inventories/prod.py's
# hosts with the image its group data file (a copy in tmp_path) pins; the registry, the hosts'
# status, the preflight check and the steps are stand-ins. A failed rollout ends with its summary
# on stderr and exit status 1, never with a traceback.

BASE_IMAGE = rstate.ImageRef(repository="docker.io/vllm/vllm-openai-rocm", tag="v0.33.0", digest="sha256:" + "a" * 64)
SLOWER = rstate.ImageRef(repository="docker.io/vllm/vllm-openai-rocm", tag="v0.34.0-slow", digest="sha256:" + "b" * 64)


class CliSteps(FakeSteps):
    """FakeSteps that also observe hosts (running ``BASE_IMAGE``, or what they were switched to)."""

    def observe(self, host):
        image = BASE_IMAGE.reference if self.running.get(host, BASE_IMAGE.digest) == BASE_IMAGE.digest else None
        image = image or next(r.reference for r in (SLOWER, BASE_IMAGE) if r.digest == self.running[host])
        return 0.0, [InstanceStatus(host, "a", "active", "running", image)], {"a": None}


@pytest.fixture(scope="module")
def prod_targets():
    from rocmfleet.fleet.inventory import load_fleet

    return {t.name: t for t in load_fleet(PROD, None, None)}


@pytest.fixture
def stand_in_fleet(tmp_path, monkeypatch, prod_targets):
    """The command's hosts, registry, preflight and group data file replaced; returns (steps, group file)."""
    from rocmfleet.config import groupdata_edit, groupvars
    from rocmfleet.fleet.check import compliance

    group = tmp_path / "group_vars" / "prod.yml"
    group.parent.mkdir()
    group.write_text("# prod\n" + "".join(f'{k}: "{v}"\n' for k, v in BASE_IMAGE.data().items()))
    monkeypatch.setattr(groupvars, "LOADED", [groupvars.GroupFile("prod", group, {})])
    monkeypatch.setenv(rstate.RESULTS_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(rstate.OWN_DEPLOY_ENV, raising=False)

    def load(inventory, limit=None, overrides=None):
        data = groupdata_edit.parse(group.read_text(), str(group))
        pinned = rstate.ImageRef(**{k.removeprefix("vllm_image_"): str(data[k]) for k in groupdata_edit.IMAGE_KEYS})
        return {n: targetimage.with_image(t, pinned) for n, t in prod_targets.items() if not limit or n in limit}

    images = {f"{r.repository}:{r.tag}": r for r in (BASE_IMAGE, SLOWER)}

    def resolve(reference, targets):
        if reference not in images:
            raise fleetimage.CommandError(f"cannot resolve {reference}: stand-in registry")
        return images[reference]

    steps = CliSteps()
    monkeypatch.setattr(fleet_inventory, "load_targets", load)
    monkeypatch.setattr(targetimage, "resolve", resolve)
    monkeypatch.setattr(hoststeps, "HostSteps", lambda *args, **kwargs: steps)
    monkeypatch.setattr(compliance, "run_fleet", lambda targets, select, timeout_s, planning: [])
    return steps, group


def _assert_failed_with_summary(code, err, state_file, status="rolled_back"):
    state = rstate.load_state(state_file)  # entry.main returned: nothing raised out (a traceback would fail the test)
    assert "Traceback" not in err, err
    assert code == (3 if status == "paused" else 1), err
    assert state.status == status
    report = state_file.parent / state.id / "report.md"
    assert err.rstrip().endswith(f"rollout {state.id}: {status}; report {report}; state {state_file}"), err
    assert report.read_text().startswith("#")
    return state


def test_a_canary_that_fails_its_gate_from_the_cli_ends_with_the_summary_not_a_traceback(stand_in_fleet, capsys):
    from rocmfleet import entry

    steps, group = stand_in_fleet
    saved = group.read_text()
    canary = "mi300x-a01"
    steps.fail = {("gate", canary)}
    code = entry.main(["rollout", PROD, "-y", "--image", "docker.io/vllm/vllm-openai-rocm:v0.34.0-slow"])
    out, err = capsys.readouterr()
    state = _assert_failed_with_summary(code, err, rstate.state_path(rstate.results_root(None, PROD), PROD))
    assert f"{canary}: rolled_back: check gate failed: vllm::ready[x]: failed" in err
    assert f'+vllm_image_digest: "{SLOWER.digest}"' in out  # the group data was edited ...
    assert group.read_text() == saved  # ... and put back
    assert [h for h, s in state.hosts.items() if s.step != "pending"] == [canary]
    assert steps.running == {canary: BASE_IMAGE.digest}


def test_dry_shows_the_edit_and_the_batches_and_changes_nothing(stand_in_fleet, capsys):
    from rocmfleet import entry

    steps, group = stand_in_fleet
    saved = group.read_text()
    slower = f"{SLOWER.repository}:{SLOWER.tag}"
    code = entry.main(["rollout", PROD, "--dry", "--max-unavailable", "2", "--image", slower])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f'+vllm_image_digest: "{SLOWER.digest}"' in out  # the edit it would make, shown
    # every prod host holds 8 replicas of the one service, more than 2: each host is a batch of its own
    assert "services: llama-3.3-70b: 24 replica(s), at most 2 out of service at once" in out
    assert "mi300x-a01 holds 8 replicas of llama-3.3-70b (at most 2): a host switches whole" in out
    assert "plan: batch 1 (canary): mi300x-a01; batch 2: mi300x-a02; batch 3: mi300x-a03" in out
    said = "at most 8 replica(s) out of service at once (bound 2: a host holds 8)"  # each host switches whole
    assert f"--dry: rollout of 3 host(s) in 3 batch(es), {said}; nothing was" in out
    assert group.read_text() == saved and steps.running == {}  # no group file edit, no host switched
    assert not rstate.state_path(rstate.results_root(None, PROD), PROD).exists()  # no state recorded
    assert entry.main(["rollout", PROD, "--dry", "--resume"]) == 2


def test_the_question_before_a_start_stops_it_unless_answered_yes(stand_in_fleet, capsys, monkeypatch):
    from rocmfleet import entry

    steps, group = stand_in_fleet
    saved = group.read_text()
    asked = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda *prompt: asked.append(prompt) or "n")
    code = entry.main(["rollout", PROD, "--image", f"{SLOWER.repository}:{SLOWER.tag}"])
    out, err = capsys.readouterr()
    assert code == 2 and "not confirmed; nothing was changed" in err and asked == [()]
    # the question on stderr: stdout may be a --json report
    said = "at most 8 replica(s) out of service at once (bound 1: a host holds 8)"
    assert f"start this rollout of 3 host(s) in 3 batch(es), {said}? [y/N] " in err
    assert "[y/N]" not in out
    assert group.read_text() == saved and steps.running == {}
    asked.clear()
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)  # a script: refused at the question, not asked
    code = entry.main(["rollout", PROD, "--image", f"{SLOWER.repository}:{SLOWER.tag}"])
    err = capsys.readouterr().err
    assert code == 2 and asked == [] and "not a terminal to ask on: pass -y" in err
    assert group.read_text() == saved and steps.running == {}
    code = entry.main(["rollout", PROD, "-y", "--image", f"{SLOWER.repository}:{SLOWER.tag}"])
    assert code == 0 and asked == []  # -y: no question, the rollout ran
    assert set(steps.running.values()) == {SLOWER.digest}


def test_a_registry_that_stops_answering_mid_rollout_ends_with_the_summary(stand_in_fleet, capsys):
    from rocmfleet import entry

    steps, group = stand_in_fleet
    saved = group.read_text()
    steps.unjudged = {("pull", "mi300x-a02"): -1}  # resolved at the start; the second batch's pull finds no registry
    image = "docker.io/vllm/vllm-openai-rocm:v0.34.0-slow"
    code = entry.main(["rollout", PROD, "-y", "--retries", "0", "--image", image])
    err = capsys.readouterr().err
    path = rstate.state_path(rstate.results_root(None, PROD), PROD)
    state = _assert_failed_with_summary(code, err, path, status="paused")
    assert "mi300x-a02: pending: pull: pull could not run on mi300x-a02 (stand-in)" in err
    assert "retry" not in err  # --retries 0
    assert state.hosts["mi300x-a01"].step == "done" and steps.running["mi300x-a01"] != BASE_IMAGE.digest
    assert group.read_text() != saved  # the group file keeps the new image: the rollout goes on from here
    assert entry.main(["rollout", PROD, "-y", "--image", image]) == 2  # a new one is refused while it is paused
    assert "recorded as paused" in capsys.readouterr().err
    steps.unjudged = {}  # the registry is back
    assert entry.main(["rollout", PROD, "--resume"]) == 0
    assert rstate.load_state(path).status == "done"


def test_a_step_that_raises_something_else_is_that_hosts_failure_not_a_traceback(stand_in_fleet, capsys):
    from rocmfleet import entry

    steps, _group = stand_in_fleet

    def pull(host, image):
        if host == "mi300x-a02":
            raise ConnectionResetError("the registry's mirror went away")

    def rollback(host, image):
        raise OSError(f"cannot run the deploy for {host}")

    steps.fail = {("gate", "mi300x-a01")}
    steps.pull, steps.rollback = pull, rollback
    code = entry.main(["rollout", PROD, "-y", "--image", "docker.io/vllm/vllm-openai-rocm:v0.34.0-slow"])
    err = capsys.readouterr().err
    state = _assert_failed_with_summary(
        code, err, rstate.state_path(rstate.results_root(None, PROD), PROD), status="rollback_failed"
    )
    assert "rollback: OSError: cannot run the deploy for mi300x-a01" in state.hosts["mi300x-a01"].error


def test_a_host_whose_status_cannot_be_read_stops_the_start_with_a_message(stand_in_fleet, capsys):
    from rocmfleet import entry

    steps, group = stand_in_fleet
    saved = group.read_text()

    def observe(host):
        raise EOFError("the SSH channel closed")

    steps.observe = observe
    assert entry.main(["rollout", PROD, "-y", "--image", "docker.io/vllm/vllm-openai-rocm:v0.34.0-slow"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "mi300x-a01: EOFError: the SSH channel closed" in err
    assert err.startswith("rocmfleet: cannot start: what these hosts run is unknown")
    assert group.read_text() == saved


def test_rollout_bake_whose_rollout_fails_at_the_canary_ends_with_the_summary(stand_in_fleet, monkeypatch, capsys):
    from rocmfleet import entry
    from rocmfleet.fleet.cache import cachebake

    steps, group = stand_in_fleet
    saved = group.read_text()
    baked = rstate.ImageRef(
        repository=BASE_IMAGE.repository,
        tag="v0.33.0-rfcache-0123456789ab",
        digest="sha256:" + "c" * 64,
    )
    resolve = targetimage.resolve

    def resolve_baked(reference, targets):
        return baked if reference == f"{baked.repository}:{baked.tag}" else resolve(reference, targets)

    class Baked:
        repository, tag, digest, reference = baked.repository, baked.tag, baked.digest, baked.reference
        key = type("Key", (), {"short": "0123456789ab"})
        manifest = type("Manifest", (), {"files": 3})

    monkeypatch.setattr(targetimage, "resolve", resolve_baked)
    monkeypatch.setattr(cachebake, "bake", lambda target, emit: Baked)
    steps.fail = {("gate", "mi300x-a01")}
    code = entry.main(["rollout", PROD, "-y", "--bake"])
    err = capsys.readouterr().err
    _assert_failed_with_summary(code, err, rstate.state_path(rstate.results_root(None, PROD), PROD))
    assert group.read_text() == saved


@pytest.mark.parametrize("failure", ["BakeError", "ValueError"])
def test_rollout_bake_whose_bake_fails_ends_with_a_message_not_a_traceback(
    stand_in_fleet, monkeypatch, capsys, failure
):
    from rocmfleet import entry
    from rocmfleet.fleet.cache import cachebake

    steps, group = stand_in_fleet
    saved = group.read_text()
    exc = cachebake.BakeError("mi300x-a01: warm-up failed") if failure == "BakeError" else ValueError("bad listing")

    def bake(target, emit):
        raise exc

    monkeypatch.setattr(cachebake, "bake", bake)
    assert entry.main(["rollout", PROD, "-y", "--bake"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith("rocmfleet: the bake on mi300x-a01 failed, nothing rolled out: "), err
    assert str(exc) in err and group.read_text() == saved and not steps.log


def test_exclude_hands_the_rollout_the_hosts_left_by_name(monkeypatch):
    from rocmfleet import entry
    from rocmfleet.fleet.rollout import command

    seen = {}
    monkeypatch.setattr(command, "run_rollout", lambda inventory, **kw: seen.update(kw) or 0)
    assert entry.main(["restart", PROD, "--exclude", "mi300x-a02", "--dry"]) == 0
    assert seen["limit"] == ["mi300x-a01", "mi300x-a03"]
    assert entry.main(["restart", PROD, "--limit", "mi300x-a0[12]", "--exclude", "mi300x-a02", "--dry"]) == 0
    assert seen["limit"] == ["mi300x-a01"]


def test_json_prints_the_record_this_run_left_and_nothing_else_on_stdout(stand_in_fleet, capsys):
    import json

    from rocmfleet import entry

    steps, _group = stand_in_fleet
    steps.fail = {("gate", "mi300x-a01")}
    code = entry.main(["rollout", PROD, "-y", "--json", "--image", "docker.io/vllm/vllm-openai-rocm:v0.34.0-slow"])
    out, err = capsys.readouterr()
    report = json.loads(out)  # stdout is the JSON alone: the plan and the progress went to stderr
    assert report["exit_status"] == code == 1 and "plan: batch 1 (canary): " in err
    assert report["rollout"]["status"] == "rolled_back" and report["rollout"]["hosts"]["mi300x-a01"]["step"]
    assert "mi300x-a01" in report["rollout"]["failure"]
    code = entry.main(["restart", PROD, "--json", "--rollback"])  # refused: not that record
    assert json.loads(capsys.readouterr().out) == {"exit_status": 2, "rollout": None} and code == 2
    code = entry.main(["rollout", PROD, "--json", "--exclude", "mi300x-a01", "--resume"])  # refused before the run
    assert json.loads(capsys.readouterr().out) == {"exit_status": 2, "rollout": None} and code == 2
    code = entry.main(["restart", PROD, "-y", "--json", "--canary", "999"])  # refused: no record of its own
    assert json.loads(capsys.readouterr().out) == {"exit_status": 2, "rollout": None} and code == 2
