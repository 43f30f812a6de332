#!/bin/sh
# rocmfleet: what a vLLM instance's systemd unit runs (templates/vllm/vllm.service.j2).
#
# The container is Docker's, not a child of the unit: it is created detached (`docker run
# --detach`) and, with daemon.json's "live-restore": true, keeps running while dockerd restarts
# or is upgraded. The unit follows it: its main process waits on the container and ends with it.
#
#   vllm-unit.sh clear CONTAINER GRACE_S
#       (ExecStartPre) make room for a new container: a running CONTAINER (left by a unit that
#       died, or by hand) gets `docker stop --time GRACE_S` (SIGTERM, then SIGKILL after
#       GRACE_S seconds: in-flight requests finish), then the stopped one is removed (no --force).
#   vllm-unit.sh seed-aiter IMAGE DIR
#       (ExecStartPre of an image without baked caches; `rocmfleet cache bake` before its bake
#       container) make DIR, the instance's AITER_JIT_DIR on the host, hold the AITER modules
#       IMAGE ships prebuilt. With AITER_JIT_DIR set, AITER imports its modules from that
#       directory only (aiter/jit/core.py: get_user_jit_dir, get_module_custom_op imports
#       `md_name` from sys.path, not `aiter.jit.md_name`), so an empty one would make it JIT-build
#       again (minutes each) what the package directory already holds. The modules are the
#       `*.so` files of the image's `aiter/jit/` package directory. DIR is emptied and seeded when
#       its marker DIR/.rocmfleet-seeded names another image (AITER's JIT modules carry no version
#       check: those of another image must go); else nothing happens. Never fails the start: a
#       failed seed leaves a warning and AITER builds what it needs, as without it.
#   vllm-unit.sh run CONTAINER INSTANCE BDFS -- DOCKER_RUN_ARGV...
#       (ExecStart) check that no other process holds memory on the GPUs BDFS (comma-separated
#       PCI addresses, gpu_free.py beside this script; exit 75 when held, the unit does not
#       retry), create and start the container with DOCKER_RUN_ARGV (`docker run --detach ...`,
#       secrets reach it by name from the unit's environment), then follow it: wait until it
#       exits and exit 0 if it ended cleanly (0, or 143: SIGTERM from `docker stop`, so that
#       `systemctl stop` leaves the unit inactive, not failed), else 1. Restart=always starts
#       the unit again either way unless it is being stopped. While dockerd does not answer
#       (restart, upgrade), keep waiting: the container runs on under live-restore.
set -u

mode=$1
container=$2

case "$mode" in
clear)
    grace=$3
    running=$(docker inspect --format '{{.State.Running}}' "$container" 2>/dev/null) || exit 0
    if [ "$running" = true ]; then
        echo "rocmfleet: stopping the running container $container (grace ${grace} s) before a new one starts" >&2
        docker stop --time "$grace" "$container" >/dev/null || exit 1
    fi
    docker rm "$container" >/dev/null || exit 1
    ;;
seed-aiter)
    image=$2 dir=$3
    marker="$dir/.rocmfleet-seeded"
    if [ "$(cat "$marker" 2>/dev/null)" = "$image" ]; then
        exit 0
    fi
    if ! rm -rf "$dir" || ! mkdir -p "$dir"; then
        echo "rocmfleet: cannot empty $dir; AITER builds its modules there" >&2
        exit 0
    fi
    # shellcheck disable=SC2016 # expanded in the container
    copy='d=$(python3 -c "import importlib.util as u; s = u.find_spec(\"aiter\"); print(s.submodule_search_locations[0] if s and s.submodule_search_locations else \"\")" 2>/dev/null) || d=
n=0
if [ -n "$d" ] && [ -d "$d/jit" ]; then
    for f in "$d"/jit/*.so; do
        [ -e "$f" ] || continue
        cp -p "$f" "$1/" && n=$((n + 1))
    done
fi
echo "$n"'
    if count=$(docker run --rm --network none --entrypoint /bin/sh --volume "$dir:$dir" "$image" -c "$copy" seed "$dir"); then
        printf '%s\n' "$image" >"$marker"
        echo "rocmfleet: $dir seeded with ${count:-0} prebuilt AITER module(s) of $image" >&2
    else
        echo "rocmfleet: could not copy the prebuilt AITER modules of $image; AITER builds what it needs" >&2
    fi
    ;;
run)
    instance=$3 bdfs=$4
    shift 4
    [ "${1:-}" = -- ] && shift
    if [ -z "$bdfs" ]; then
        :
    elif ! command -v amd-smi >/dev/null 2>&1; then
        echo "rocmfleet: amd-smi not found: GPU memory check skipped" >&2
    elif ! command -v python3 >/dev/null 2>&1; then
        echo "rocmfleet: no python3 to read amd-smi's JSON: GPU memory check skipped" >&2
    else
        python3 "$(dirname "$0")/gpu_free.py" "$instance" "$bdfs"
        status=$?
        [ "$status" = 0 ] || exit "$status"
    fi
    "$@" >/dev/null || exit 1
    echo "rocmfleet: container $container started" >&2
    unreachable=0
    while :; do
        if code=$(docker wait "$container" 2>/dev/null); then
            echo "rocmfleet: container $container exited with status $code" >&2
            # 0, or 143 (SIGTERM through --init: `systemctl stop` runs `docker stop`) is a clean end;
            # anything else (137 after `docker kill` or the grace period, a crash) a failure.
            case "$code" in
            0 | 143) exit 0 ;;
            *) exit 1 ;;
            esac
        fi
        if docker info >/dev/null 2>&1; then
            if ! docker inspect "$container" >/dev/null 2>&1; then
                echo "rocmfleet: container $container is gone" >&2
                exit 1
            fi
            unreachable=0
        elif [ "$unreachable" = 0 ]; then
            echo "rocmfleet: dockerd does not answer; $container keeps running (live-restore), waiting" >&2
            unreachable=1
        fi
        sleep 1
    done
    ;;
*)
    echo "usage: vllm-unit.sh clear CONTAINER GRACE_S | seed-aiter IMAGE DIR | run CONTAINER INSTANCE BDFS -- DOCKER_RUN_ARGV..." >&2
    exit 2
    ;;
esac
