"""The host-side scripts of issue 11 against stub ``docker``/``systemctl``/``curl`` commands."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rocmfleet import scripts

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
