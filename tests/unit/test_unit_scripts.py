"""The host-side scripts of issue 11 against stub ``docker``/``systemctl``/``curl`` commands."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfleet import scripts
from rocmfleet.domain import cachedirs, lastgood

DOCKER = r"""#!/bin/sh
# stub docker: answers from files in $STUB
echo "docker $*" >> "$STUB/calls"
case "$1" in
wait)
    step=$(head -n 1 "$STUB/wait"); sed -i 1d "$STUB/wait"
    case "$step" in
    down) touch "$STUB/down"; echo "error waiting: unexpected EOF" >&2; exit 1 ;;
    up) rm -f "$STUB/down"; echo "error waiting: unexpected EOF" >&2; exit 1 ;;
    *) echo "$step"; exit 0 ;;
    esac ;;
info) [ ! -e "$STUB/down" ] ;;
inspect) [ -e "$STUB/inspect" ] || exit 1; cat "$STUB/inspect" ;;
stop|rm) exit 0 ;;
*) exit 0 ;;
esac
"""


def stubs(tmp_path: Path, **files: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER)
    (bin_dir / "systemctl").write_text('#!/bin/sh\necho "systemctl $*" >> "$STUB/calls"\n')
    (bin_dir / "curl").write_text('#!/bin/sh\n[ -e "$STUB/healthy" ]\n')
    (bin_dir / "sleep").write_text("#!/bin/sh\n")  # no waiting in tests
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return {**os.environ, "STUB": str(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin"}


def run(env, name, *args, timeout=20):
    script = scripts.DIR / name
    return subprocess.run(
        ["sh", str(script), *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_follower_waits_through_a_dockerd_restart_and_ends_with_the_container(tmp_path):
    env = stubs(tmp_path, wait="down\nup\n137\n", inspect="true\n")
    proc = run(env, "vllm-unit.sh", "run", "vllm-a", "a", "", "--", "true")
    assert proc.returncode == 1  # a killed container: systemd restarts the unit
    assert "dockerd does not answer; vllm-a keeps running (live-restore), waiting" in proc.stderr
    assert "container vllm-a exited with status 137" in proc.stderr
    assert (tmp_path / "calls").read_text().count("docker wait vllm-a") == 3


@pytest.mark.parametrize(("code", "status"), [("0", 0), ("143", 0), ("137", 1), ("1", 1)])
def test_a_stop_is_clean_and_a_kill_or_crash_is_a_failure(tmp_path, code, status):
    env = stubs(tmp_path, wait=f"{code}\n", inspect="true\n")
    assert run(env, "vllm-unit.sh", "run", "vllm-a", "a", "", "--", "true").returncode == status


def test_a_container_that_cannot_be_created_fails_the_start(tmp_path):
    env = stubs(tmp_path, wait="0\n")
    proc = run(env, "vllm-unit.sh", "run", "vllm-a", "a", "", "--", "false")
    calls = tmp_path / "calls"
    assert proc.returncode == 1 and not (calls.exists() and "docker wait" in calls.read_text())


def test_clear_stops_a_running_container_gracefully_and_never_forces(tmp_path):
    env = stubs(tmp_path, inspect="true\n")
    assert run(env, "vllm-unit.sh", "clear", "vllm-a", 90).returncode == 0
    calls = (tmp_path / "calls").read_text()
    assert "docker stop --time 90 vllm-a" in calls and "docker rm vllm-a" in calls
    assert "--force" not in calls and " -f " not in calls


def test_clear_without_a_container_does_nothing(tmp_path):
    env = stubs(tmp_path)
    assert run(env, "vllm-unit.sh", "clear", "vllm-a", 90).returncode == 0
    assert "docker stop" not in (tmp_path / "calls").read_text()


def test_docker_restart_waits_for_the_containers_that_ran(tmp_path):
    env = stubs(tmp_path, inspect="ID1 2026-11-30T10:00:00Z true\n", healthy="")
    proc = run(env, "docker-restart.sh", 30, "vllm-a:8000")
    assert proc.returncode == 0, proc.stderr
    assert "systemctl restart docker.service" in (tmp_path / "calls").read_text()
    assert "vllm-a kept running through the restart (same container and start time) and answers" in proc.stdout


def test_docker_restart_fails_when_a_container_does_not_answer_again(tmp_path):
    env = stubs(tmp_path, inspect="ID1 2026-11-30T10:00:00Z true\n")  # /health never answers
    proc = run(env, "docker-restart.sh", 1, "vllm-a:8000", timeout=30)
    assert proc.returncode == 1
    assert "vllm-a does not answer on port 8000 1 s after the Docker restart" in proc.stderr


def test_docker_restart_does_not_wait_for_containers_that_were_not_running(tmp_path):
    env = stubs(tmp_path, inspect="ID1 2026-11-30T10:00:00Z false\n")
    proc = run(env, "docker-restart.sh", 1, "vllm-a:8000")
    assert proc.returncode == 0 and "vllm-a" not in proc.stdout


DOCKERD = r"""#!/bin/sh
# stub dockerd: --help lists --validate when $STUB/validates exists; --validate accepts unless $STUB/rejects
case "$1" in
--help) [ -e "$STUB/validates" ] && echo "      --validate     Validate daemon configuration and exit"; exit 0 ;;
--validate)
    if [ -e "$STUB/rejects" ]; then echo "unable to configure the Docker daemon: bad live-restore" >&2; exit 1; fi
    echo "configuration OK" ;;
esac
"""


def daemon_files(tmp_path: Path, **flags: str) -> tuple[dict[str, str], Path, Path]:
    env = stubs(tmp_path, **flags)
    (tmp_path / "bin" / "dockerd").write_text(DOCKERD)
    (tmp_path / "bin" / "dockerd").chmod(0o755)
    live, new = tmp_path / "daemon.json", tmp_path / "daemon.json.rocmfleet-new"
    live.write_text('{"old": true}\n')
    new.write_text('{"new": true}\n')
    return env, live, new


def test_daemon_json_replaced_once_dockerd_validates_it(tmp_path):
    env, live, new = daemon_files(tmp_path, validates="")
    proc = run(env, "docker-daemon-json.sh", new, live)
    assert proc.returncode == 0 and "configuration OK" in proc.stdout
    assert live.read_text() == '{"new": true}\n' and not new.exists()


def test_daemon_json_rejected_by_dockerd_leaves_the_old_file(tmp_path):
    env, live, new = daemon_files(tmp_path, validates="", rejects="")
    proc = run(env, "docker-daemon-json.sh", new, live)
    assert proc.returncode == 1
    assert "dockerd rejects the new daemon.json" in proc.stderr and "bad live-restore" in proc.stderr
    assert live.read_text() == '{"old": true}\n' and not new.exists()


def test_daemon_json_without_validate_is_replaced_with_a_note(tmp_path):
    env, live, new = daemon_files(tmp_path)
    proc = run(env, "docker-daemon-json.sh", new, live)
    assert proc.returncode == 0 and "has no --validate" in proc.stderr
    assert live.read_text() == '{"new": true}\n'


def test_without_amd_smi_the_gpu_check_is_skipped_with_a_note(tmp_path):
    env = stubs(tmp_path, wait="0\n", inspect="true\n")
    proc = run(env, "vllm-unit.sh", "run", "vllm-a", "a", "0000:05:00.0", "--", "true")
    assert proc.returncode == 0
    assert "amd-smi not found: GPU memory check skipped" in proc.stderr


def test_gpus_held_by_another_process_stop_the_start_before_any_container(tmp_path):
    env = stubs(tmp_path, wait="0\n", inspect="true\n")
    held = [{"gpu": 0, "process_list": [{"process_info": {"name": "python3", "pid": 4242, "mem_usage": 8 << 30}}]}]
    amd_smi = tmp_path / "bin" / "amd-smi"
    amd_smi.write_text(f"#!/bin/sh\necho '{json.dumps(held)}'\n")
    amd_smi.chmod(0o755)
    # the unit runs the installed copy: vllm-unit.sh and gpu_free.py side by side
    proc = run(env, "vllm-unit.sh", "run", "vllm-a", "a", "0000:05:00.0", "--", "touch", str(tmp_path / "created"))
    assert proc.returncode == 75
    assert "its GPUs (0000:05:00.0) are still held by another process: GPU 0: pid 4242 (python3)" in proc.stderr
    assert not (tmp_path / "created").exists()


SEED_DOCKER = r"""#!/bin/sh
# stub docker run: runs the container's `sh -c SCRIPT ARGS...` here, with $STUB/pkg on PYTHONPATH
echo "docker $*" >> "$STUB/calls"
[ -e "$STUB/fail" ] && exit 1
while [ "$1" != -c ]; do shift; done
shift
PYTHONPATH="$STUB/pkg" exec sh -c "$@"
"""


def _seed_env(tmp_path, modules=("module_aiter_core.so", "module_rmsnorm.so")):
    env = stubs(tmp_path)
    (tmp_path / "bin" / "docker").write_text(SEED_DOCKER)
    jit = tmp_path / "pkg" / "aiter" / "jit"
    jit.mkdir(parents=True)
    (jit.parent / "__init__.py").write_text("raise SystemExit('aiter must not be imported to find it')\n")
    (jit / "core.py").write_text("")
    for name in modules:
        (jit / name).write_text(name)
    return env


def test_seed_aiter_copies_the_prebuilt_modules_once_per_image(tmp_path):
    """seed-aiter: the image's aiter/jit/*.so land in the instance's AITER_JIT_DIR (AITER imports
    them from there only), stale files of another image go, and the same image is not seeded twice."""
    env = _seed_env(tmp_path)
    jit_dir = tmp_path / "cache" / "vllm-a" / "aiter"
    jit_dir.mkdir(parents=True)
    (jit_dir / "module_old.so").write_text("built for another image")
    proc = run(env, "vllm-unit.sh", "seed-aiter", "reg/vllm:1@sha256:aa", jit_dir)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in jit_dir.iterdir()) == [
        ".rocmfleet-seeded",
        "module_aiter_core.so",
        "module_rmsnorm.so",
    ]
    assert "2 prebuilt AITER module(s)" in proc.stderr
    assert "--network none" in (tmp_path / "calls").read_text()
    (jit_dir / "module_jit_built.so").write_text("built by AITER at run time")
    (tmp_path / "calls").unlink()
    assert run(env, "vllm-unit.sh", "seed-aiter", "reg/vllm:1@sha256:aa", jit_dir).returncode == 0
    assert not (tmp_path / "calls").exists() and (jit_dir / "module_jit_built.so").exists()
    assert run(env, "vllm-unit.sh", "seed-aiter", "reg/vllm:2@sha256:bb", jit_dir).returncode == 0
    assert not (jit_dir / "module_jit_built.so").exists() and (jit_dir / "module_rmsnorm.so").exists()


def test_seed_aiter_never_fails_the_start(tmp_path):
    """An image without AITER seeds nothing; a docker failure warns, exits 0 and leaves no marker."""
    env = _seed_env(tmp_path, modules=())
    jit_dir = tmp_path / "aiter"
    proc = run(env, "vllm-unit.sh", "seed-aiter", "reg/vllm:cpu@sha256:cc", jit_dir)
    assert proc.returncode == 0 and "0 prebuilt" in proc.stderr
    (tmp_path / "fail").write_text("")
    proc = run(env, "vllm-unit.sh", "seed-aiter", "reg/vllm:2@sha256:dd", jit_dir)
    assert proc.returncode == 0 and "could not copy" in proc.stderr
    assert not (jit_dir / ".rocmfleet-seeded").exists()


# --- vllm-unit.sh prepare-cache: old namespaces and stale JIT lock files (issue 27) -------------

NOW, GOOD, OLD = "aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"
#: A holder that stays alive: ``baton`` keeps the file open as AITER's and torch's FileBaton do
#: (os.open(O_CREAT|O_EXCL), closed at release), ``flock`` as the filelock package (inductor) does.
HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT)
if sys.argv[1] == "flock":
    fcntl.flock(fd, fcntl.LOCK_EX)
print("holding", flush=True)
time.sleep(60)
"""


def _serve_json(tmp_path: Path, namespace: str | None) -> Path:
    """The last good version's serve.json as lastgood.serve_record writes it (an env value that
    names a third image must not count)."""
    record = tmp_path / "serve.json"
    if namespace:
        env = {"NOTE": '"image": "r:x@sha256:' + OLD + "0" * 52 + '"'}
        image = f"reg/vllm:good@sha256:{namespace}{'0' * 52}"
        record.write_text(lastgood.serve_record(image, ["/m", "--port", "8000"], env))
    return record


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_prepare_cache_looks_for_the_lock_names_the_layout_documents():
    text = (scripts.DIR / "vllm-unit.sh").read_text()
    find = next(line for line in text.splitlines() if "locks=$(find" in line)
    assert tuple(p.strip("'") for p in re.findall(r"-name (\S+)", find)) == cachedirs.LOCK_NAMES


def test_prepare_cache_keeps_this_and_the_last_good_namespace_and_removes_the_rest(tmp_path):
    env = stubs(tmp_path)
    root = tmp_path / "cache" / "a"
    for name in (NOW, GOOD, OLD, "vllm", "triton", "operator-notes", "abc"):
        (root / name / "sub").mkdir(parents=True)
    record = _serve_json(tmp_path, GOOD)
    proc = run(env, "vllm-unit.sh", "prepare-cache", root, NOW, record)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in root.iterdir()) == sorted([NOW, GOOD, "operator-notes", "abc"])
    assert f"removed {root}/{OLD}: compile caches of an image neither this start ({NOW}) nor" in proc.stderr
    before = _tree(root)
    again = run(env, "vllm-unit.sh", "prepare-cache", root, NOW, record)
    assert again.returncode == 0 and again.stderr == "" and _tree(root) == before  # idempotent
    # the last good version is now this image (saved after it was ready): the other one goes
    proc = run(env, "vllm-unit.sh", "prepare-cache", root, NOW, _serve_json(tmp_path, NOW))
    assert sorted(p.name for p in root.iterdir()) == sorted([NOW, "operator-notes", "abc"])
    # no last good version, no cache root yet: nothing fails
    (tmp_path / "serve.json").unlink()
    assert run(env, "vllm-unit.sh", "prepare-cache", tmp_path / "none", NOW, tmp_path / "serve.json").returncode == 0


@pytest.mark.parametrize("kind", ["baton", "flock"])
def test_prepare_cache_removes_a_dead_writers_lock_and_never_a_live_writers(tmp_path, kind):
    """A lock file no process holds (its writer was killed with its container) goes; one a live
    writer holds stays, however it holds it; lock files of another namespace are not touched."""
    env = stubs(tmp_path)
    root = tmp_path / "cache" / "a"
    build = root / NOW / "aiter" / "build"
    (build / "module_rmsnorm" / "build").mkdir(parents=True)
    dead = [build / "lock_module_moe", build / "module_rmsnorm" / "build" / "lock", build / "lock_module_moe.steal"]
    dead.append(root / NOW / "inductor" / "locks" / "x.lock")
    live = build / "lock_module_gemm"
    kept = [root / NOW / "aiter" / "module_gemm.so", root / GOOD / "aiter" / "build" / "lock_module_moe"]
    for path in (*dead, live, *kept):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, kind, str(live)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        proc = run(env, "vllm-unit.sh", "prepare-cache", root, NOW, _serve_json(tmp_path, GOOD))
        assert holder.poll() is None  # still alive: its lock was live throughout
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr
    assert [p for p in dead if p.exists()] == []
    assert live.exists() and all(p.exists() for p in kept)
    assert f"{live} is held open by a running process: left" in proc.stderr
    assert f"removed {dead[0]}: no process holds it" in proc.stderr
    # once its writer is gone, the same lock is stale
    proc = run(env, "vllm-unit.sh", "prepare-cache", root, NOW, _serve_json(tmp_path, GOOD))
    assert not live.exists() and f"removed {live}" in proc.stderr


def test_prepare_cache_never_removes_what_a_lock_name_with_a_newline_or_a_symlink_points_at(tmp_path):
    """A lock path holding a newline is not split into two other files (it named ``keep``, a
    compile artifact, before); an old namespace or a namespace's subdirectory that is a symlink
    (to ``/`` or elsewhere) loses the link only, never what it points at."""
    env = stubs(tmp_path)
    root = tmp_path / "cache" / "a"
    (root / NOW / "triton").mkdir(parents=True)
    keep = root / NOW / "triton" / "keep"
    keep.write_text("artifact")
    odd = root / NOW / "triton" / "keep\nx.lock"
    odd.write_text("")
    outside = tmp_path / "precious"
    (outside / "build").mkdir(parents=True)
    (outside / "build" / "lock").write_text("")
    (root / OLD).symlink_to(outside)
    (root / "eeeeeeeeeeee").symlink_to("/")
    (root / NOW / "aiter").symlink_to(outside)
    proc = run(env, "vllm-unit.sh", "prepare-cache", root, NOW, _serve_json(tmp_path, GOOD))
    assert proc.returncode == 0, proc.stderr
    assert keep.read_text() == "artifact" and odd.exists()
    assert (outside / "build" / "lock").exists()  # behind a symlink: not the namespace's own
    assert sorted(p.name for p in root.iterdir()) == [NOW]


# --- the watchdog (vllm-unit.sh run --watch-*, rocmfleet/domain/watchdog.py) -------------------

WATCH_DOCKER = r"""#!/bin/sh
# stub docker: `wait` ends with 137 once `kill` ran, or with 0 after 3 s or once $STUB/stop exists
echo "docker $*" >> "$STUB/calls"
case "$1" in
wait)
    i=0
    while [ $i -lt 150 ]; do
        [ -e "$STUB/killed" ] && { echo 137; exit 0; }
        [ -e "$STUB/stop" ] && { echo 0; exit 0; }
        /bin/sleep 0.02; i=$((i + 1))
    done
    echo 0 ;;
kill) touch "$STUB/killed" ;;
esac
exit 0
"""

# stub curl: each call takes the next line of $STUB/curl ("ok", or a curl exit status); when
# they run out, the last one again; "stop" ends the run (docker wait returns 0)
WATCH_CURL = r"""#!/bin/sh
echo "curl $*" >> "$STUB/calls"
line=$(head -n 1 "$STUB/curl")
[ "$(wc -l < "$STUB/curl")" -gt 1 ] && sed -i 1d "$STUB/curl"
out=
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
case "$line" in
ok) printf '{"choices": [{"text": " Paris"}]}' > "$out"; printf 200 ;;
stop) touch "$STUB/stop"; exit 28 ;;
*) printf 000; exit "$line" ;;
esac
"""


def watch_env(tmp_path: Path, curl: str) -> dict[str, str]:
    env = stubs(tmp_path, curl=curl)
    (tmp_path / "bin" / "docker").write_text(WATCH_DOCKER)
    (tmp_path / "bin" / "curl").write_text(WATCH_CURL)
    return {**env, "ROCMFLEET_WATCHDOG_DIR": str(tmp_path / "watchdog")}


def watch_run(env, start=1800, restarts=3):
    watch = ["--watch-port", 8000, "--watch-every", 5, "--watch-deadline", 7, "--watch-failures", 3,
             "--watch-restarts", restarts, "--watch-window", 3600, "--watch-start", start,
             "--watch-request", '{"prompt": "The capital of France is"}']  # fmt: skip
    return run(env, "vllm-unit.sh", "run", "vllm-a", "a", "", *watch, "--", "true", timeout=30)


def test_the_watchdog_kills_a_container_that_answered_then_stopped_answering(tmp_path):
    env = watch_env(tmp_path, "ok\nok\n28\n")
    proc = watch_run(env)
    assert proc.returncode == 1  # the container was killed: Restart=always starts the unit again
    lines = [line for line in proc.stderr.splitlines() if "watchdog" in line]
    assert lines[-1] == (
        "rocmfleet watchdog: restarting vllm-a: POST http://127.0.0.1:8000/v1/completions: no answer within 7 s, "
        "3 time(s) in a row (every 5 s) (restart 1 of at most 3 in 3600 s)"
    ), proc.stderr
    assert len(lines) == 4 and lines[0] == "rocmfleet watchdog: vllm-a answers; watching it every 5 s"
    assert "2 time(s) in a row" in lines[2]
    assert "docker kill vllm-a" in (tmp_path / "calls").read_text()
    assert len((tmp_path / "watchdog" / "a" / "restarts").read_text().split()) == 1
    request = [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith("curl ")][0]
    assert "-m 7" in request and '{"prompt": "The capital of France is"}' in request


def test_the_watchdog_gives_up_after_its_restarts_and_the_unit_stays_failed(tmp_path):
    import time

    env = watch_env(tmp_path, "ok\n7\n")
    state = tmp_path / "watchdog" / "a"
    state.mkdir(parents=True)
    now = int(time.time())
    (state / "restarts").write_text(f"{now - 7200}\n{now - 60}\n{now - 30}\n")  # one outside the window
    proc = watch_run(env, restarts=2)
    assert proc.returncode == 76, proc.stderr  # RestartPreventExitStatus: left failed
    gave_up = (state / "gave-up").read_text().strip()
    assert gave_up.startswith("POST http://127.0.0.1:8000/v1/completions: connection refused, 3 time(s) in a row")
    assert gave_up.endswith("2 restart(s) in the last 3600 s already (at most 2): left failed")
    assert proc.stderr.splitlines()[-1] == f"rocmfleet: watchdog gave up: {gave_up}"
    # a new start (a deploy, systemctl restart) counts afresh
    (tmp_path / "again").mkdir()
    again = watch_run(watch_env(tmp_path / "again", "stop\n") | {"ROCMFLEET_WATCHDOG_DIR": str(tmp_path / "watchdog")})
    assert again.returncode == 0 and "its count starts afresh" in again.stderr
    assert not (state / "gave-up").exists() and not (state / "restarts").exists()


def test_the_watchdog_leaves_a_starting_instance_alone_until_its_start_deadline(tmp_path):
    (tmp_path / "x").mkdir()
    quiet = watch_env(tmp_path / "x", "7\n7\n7\n7\n7\nstop\n")
    proc = watch_run(quiet)  # never answered, 1800 s to start: not its business yet
    assert proc.returncode == 0 and "docker kill" not in (tmp_path / "x" / "calls").read_text(), proc.stderr
    late = watch_env(tmp_path, "7\n")
    proc = watch_run(late, start=0)  # never answered and past its start deadline
    assert proc.returncode == 1 and "restarting vllm-a: POST" in proc.stderr


def test_the_watchdog_leaves_a_host_a_rollout_holds_alone_until_the_hold_expires(tmp_path):
    import time

    env = watch_env(tmp_path, "ok\n28\n")
    (tmp_path / "watchdog").mkdir()
    (tmp_path / "watchdog" / "hold").write_text(f"{int(time.time()) + 600} 20261204T170000Z\n")
    proc = watch_run(env)  # docker wait ends after 3 s
    assert proc.returncode == 0 and "curl" not in (tmp_path / "calls").read_text(), proc.stderr
    (tmp_path / "watchdog" / "hold").write_text(f"{int(time.time()) - 1} 20261204T170000Z\n")
    (tmp_path / "calls").unlink()
    assert watch_run(env).returncode == 1  # an expired hold holds nothing


def test_the_watchdog_keeps_watching_when_its_kill_fails_and_counts_4xx_as_an_answer(tmp_path):
    env = watch_env(tmp_path, "ok\n28\n")
    docker = (
        (tmp_path / "bin" / "docker")
        .read_text()
        .replace("kill) touch", "kill) echo 'dockerd is restarting' >&2; exit 1; touch")
    )
    (tmp_path / "bin" / "docker").write_text(docker)
    proc = watch_run(env)  # docker wait ends after 3 s: the watchdog kept asking
    assert "docker kill vllm-a failed (dockerd is restarting); watching on" in proc.stderr, proc.stderr
    assert (tmp_path / "calls").read_text().count("curl ") > 4
    (tmp_path / "x").mkdir()
    teapot = watch_env(tmp_path / "x", "ok\n")
    (tmp_path / "x" / "bin" / "curl").write_text(WATCH_CURL.replace("printf 200", "printf 418"))
    proc = watch_run(teapot, start=0)  # a 418 is an answer: the server lives
    assert proc.returncode == 0 and "restarting" not in proc.stderr, proc.stderr


def test_the_watchdog_leaves_a_unit_systemd_is_stopping_alone_and_one_it_cannot_write_for_alone(tmp_path):
    env = watch_env(tmp_path, "ok\n28\n")
    (tmp_path / "bin" / "systemctl").write_text("#!/bin/sh\necho deactivating\n")
    proc = watch_run(env)
    assert proc.returncode == 0 and "curl" not in (tmp_path / "calls").read_text(), proc.stderr
    (tmp_path / "y").mkdir()
    locked = {**watch_env(tmp_path / "y", "28\n"), "ROCMFLEET_WATCHDOG_DIR": "/proc/rocmfleet"}
    proc = watch_run(locked, start=0)
    assert proc.returncode == 0 and "cannot be written: vllm-a is not watched" in proc.stderr, proc.stderr


def test_a_hold_written_without_a_newline_holds(tmp_path):
    import time

    env = watch_env(tmp_path, "ok\n28\n")
    (tmp_path / "watchdog").mkdir()
    (tmp_path / "watchdog" / "hold").write_text(f"{int(time.time()) + 600} r1")
    assert watch_run(env).returncode == 0 and "curl" not in (tmp_path / "calls").read_text()
