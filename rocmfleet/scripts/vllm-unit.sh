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
#   vllm-unit.sh prepare-cache ROOT NAMESPACE SERVE_JSON
#       (ExecStartPre of an image without baked caches, after clear: the instance's container is
#       gone) ROOT is the instance's cache root (<vllm_cache_dir>/<instance>), NAMESPACE the one
#       of the image this start runs (12 hex of its digest; rocmfleet/domain/cachedirs.py),
#       SERVE_JSON the instance's last good version (rocmfleet/domain/lastgood.py). 1. Removes
#       the namespaces under ROOT that neither NAMESPACE nor the image in SERVE_JSON is (a
#       rollback finds its warm cache); only names rocmfleet makes: 12 hex, and vllm, inductor,
#       triton, aiter (the layout before namespaces). 2. Removes the lock files in
#       ROOT/NAMESPACE (lock, lock_*, *.lock, *.steal) that no process on the host holds open.
#       AITER's JIT build lock is a file baton (aiter/jit/utils/file_baton.py: O_CREAT|O_EXCL,
#       its holder keeps it open until it removes it; waiters wait while it exists), so one left
#       by a killed build made every later start wait on it until VLLM_ENGINE_READY_TIMEOUT_S.
#       Held open = some /proc/PID/fd entry is the same file (device and inode: a process in a
#       container names it by its container path). Never fails the start: what cannot be done
#       leaves a warning.
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
#   vllm-unit.sh run CONTAINER INSTANCE BDFS [--watch-NAME VALUE...] -- DOCKER_RUN_ARGV...
#       (ExecStart) check that no other process holds memory on the GPUs BDFS (comma-separated
#       PCI addresses, gpu_free.py beside this script; exit 75 when held, the unit does not
#       retry), create and start the container with DOCKER_RUN_ARGV (`docker run --detach ...`,
#       secrets reach it by name from the unit's environment), then follow it: wait until it
#       exits and exit 0 if it ended cleanly (0, or 143: SIGTERM from `docker stop`, so that
#       `systemctl stop` leaves the unit inactive, not failed), else 1. Restart=always starts
#       the unit again either way unless it is being stopped. While dockerd does not answer
#       (restart, upgrade), keep waiting: the container runs on under live-restore.
#       With --watch-port, the watchdog runs beside it (rocmfleet/domain/watchdog.py says what
#       it does and why): every --watch-every seconds it POSTs --watch-request (JSON) to
#       127.0.0.1:PORT/v1/completions with a deadline of --watch-deadline seconds, and after
#       --watch-failures failures in a row (once the container answered, or --watch-start seconds
#       after it started; never while the hold file of a rollout is unexpired) it kills the
#       container, which ends this unit's run; the --watch-restarts-th restart within
#       --watch-window seconds is the last: the next time it writes why to its gave-up file and
#       the unit exits 76 (RestartPreventExitStatus: left failed). A new start clears that.
set -u

mode=$1
container=$2
# The watchdog's state (rocmfleet/domain/watchdog.py: STATE_DIR, HOLD_FILE); tests point it elsewhere.
STATE_DIR=${ROCMFLEET_WATCHDOG_DIR:-/run/rocmfleet/watchdog}
HOLD_FILE=$STATE_DIR/hold

# Restarts of the watchdog within the last $window seconds (one epoch second per line of $state/restarts).
recent_restarts() {
    since=$(($(date +%s) - window))
    n=0
    if [ -r "$state/restarts" ]; then
        while read -r at; do
            [ "${at:-0}" -ge "$since" ] 2>/dev/null && n=$((n + 1))
        done <"$state/restarts"
    fi
    echo "$n"
}

# Whether a rollout's drain holds this host now (an unexpired hold file: EXPIRY_EPOCH_S WHO).
held() {
    [ -r "$HOLD_FILE" ] || return 1
    until=
    read -r until _who <"$HOLD_FILE" || [ -n "$until" ] || return 1
    [ "${until:-0}" -gt "$(date +%s)" ] 2>/dev/null
}

# Whether systemd is stopping or restarting this unit (its ExecStop's grace period runs: a
# server that refuses new connections then is not wedged).
stopping() {
    case "$(systemctl show -p ActiveState --value "vllm-$instance.service" 2>/dev/null)" in
    deactivating | inactive | failed) return 0 ;;
    esac
    return 1
}

# The watchdog of `run --watch-port` (in the background; its lines go to the unit's journal).
watch() {
    if ! mkdir -p "$state" || ! : >"$state/answer" 2>/dev/null; then
        echo "rocmfleet watchdog: $state cannot be written: $container is not watched" >&2
        return 0
    fi
    born=$(date +%s)
    wait_s=$every
    k=$(recent_restarts)
    i=0
    while [ "$i" -lt "$k" ] && [ "$i" -lt 6 ]; do
        wait_s=$((wait_s * 2))
        i=$((i + 1))
    done
    answered=0 fails=0
    url="http://127.0.0.1:$port/v1/completions"
    sleep "$wait_s"
    while :; do
        if held || stopping; then
            fails=0
            sleep "$every"
            continue
        fi
        http=$(curl -sS -m "$deadline" -o "$state/answer" -w '%{http_code}' -H 'content-type: application/json' \
            -d "$request" "$url" 2>"$state/curl.err")
        code=$?
        # Any HTTP answer but a server error is an answer: the server is alive (a 4xx is the
        # request's problem, which a restart does not mend).
        if [ "$code" = 0 ] && [ "${http:-0}" -ge 200 ] 2>/dev/null && [ "$http" -lt 500 ]; then
            if [ "$answered" = 0 ]; then
                echo "rocmfleet watchdog: $container answers; watching it every $every s" >&2
            fi
            answered=1 fails=0
        elif [ "$answered" = 0 ] && [ $(($(date +%s) - born)) -lt "$start" ]; then
            : # starting: the start deadline holds
        else
            case "$code:$http" in
            28:*) why="no answer within $deadline s" ;;
            7:*) why="connection refused" ;;
            0:*) why="HTTP $http" ;;
            *) why="curl failed: $(head -c 160 "$state/curl.err" | tr '\n' ' ')" ;;
            esac
            fails=$((fails + 1))
            reason="POST $url: $why, $fails time(s) in a row (every $every s)"
            if [ "$fails" -lt "$failures" ]; then
                echo "rocmfleet watchdog: $container: $reason" >&2
            else
                n=$(recent_restarts)
                if [ "$n" -ge "$restarts" ]; then
                    printf '%s\n' "$reason; $n restart(s) in the last $window s already (at most $restarts): left failed" >"$state/gave-up"
                    echo "rocmfleet watchdog: giving up on $container: $(cat "$state/gave-up")" >&2
                else
                    date +%s >>"$state/restarts"
                    echo "rocmfleet watchdog: restarting $container: $reason (restart $((n + 1)) of at most $restarts in $window s)" >&2
                fi
                # SIGKILL: a wedged engine finishes nothing in a grace period, and it also ends a
                # frozen container (Docker unpauses a paused one it kills).
                if ! out=$(docker kill "$container" 2>&1); then
                    echo "rocmfleet watchdog: docker kill $container failed ($out); watching on" >&2
                    rm -f "$state/gave-up"
                    fails=0
                    sleep "$every"
                    continue
                fi
                t=0
                while [ "$(docker inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" = true ] && [ "$t" -lt 60 ]; do
                    sleep 1
                    t=$((t + 1))
                done
                if [ "$t" -ge 60 ]; then
                    # A process SIGKILL cannot end (uninterruptible sleep after a GPU hang): only
                    # a person, or a reboot, can end it.
                    printf '%s\n' "$reason; the container still runs 60 s after SIGKILL (a process in uninterruptible sleep?): reboot the host" >"$state/gave-up"
                    echo "rocmfleet watchdog: $container: $(cat "$state/gave-up")" >&2
                fi
                return 0
            fi
        fi
        sleep "$every"
    done
}

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
prepare-cache)
    root=$2 ns=$3 record=$4
    # serve.json is one line of JSON, keys sorted (lastgood.serve_record): a quote inside a value is
    # escaped, so the only unescaped `"image": "` is the key's.
    good=$(sed -n 's/.*"image": "[^"]*@sha256:\([0-9a-f]\{12\}\)[0-9a-f]*".*/\1/p' "$record" 2>/dev/null | head -n 1)
    for entry in "$root"/*; do
        [ -e "$entry" ] || [ -L "$entry" ] || continue
        name=${entry##*/}
        if [ "$name" = "$ns" ] || [ "$name" = "$good" ]; then
            continue
        fi
        case "$name" in
        vllm | inductor | triton | aiter) ;;
        *[!0-9a-f]*) continue ;;
        *) [ "${#name}" = 12 ] || continue ;;
        esac
        if rm -rf "$entry"; then
            echo "rocmfleet: removed $entry: compile caches of an image neither this start (${ns}) nor the last good version (${good:-none}) runs" >&2
        else
            echo "rocmfleet: cannot remove $entry" >&2
        fi
    done
    dir="$root/$ns"
    [ -d "$dir" ] || exit 0
    # One path a line: a path holding a newline would be read as two, each another file (or a
    # path relative to the unit's directory), so such paths are left out; the cache's own names
    # (hashes, module names) hold none.
    nl='
'
    locks=$(find "$dir" -xdev -type f \( -name lock -o -name 'lock_*' -o -name '*.lock' -o -name '*.steal' \) ! -path "*$nl*" -print 2>/dev/null)
    [ -n "$locks" ] || exit 0
    # device:inode of every file a process holds open (find -L stats what each fd points at).
    held=$(find -L /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -printf '%D:%i\n' 2>/dev/null | sort -u)
    if [ -z "$held" ]; then
        echo "rocmfleet: cannot read the open files of the host's processes (/proc/*/fd): lock files in $dir left as they are" >&2
        exit 0
    fi
    printf '%s\n' "$locks" | while IFS= read -r lock; do
        id=$(stat -c '%d:%i' "$lock" 2>/dev/null) || continue
        if printf '%s\n' "$held" | grep -qx "$id"; then
            echo "rocmfleet: $lock is held open by a running process: left" >&2
        elif rm -f "$lock"; then
            echo "rocmfleet: removed $lock: no process holds it (left by a JIT build that was killed)" >&2
        else
            echo "rocmfleet: cannot remove the stale lock file $lock" >&2
        fi
    done
    exit 0
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
    port='' every=30 deadline=30 failures=3 restarts=3 window=3600 start=1800 request=''
    while [ $# -gt 1 ] && [ "$1" != -- ]; do
        case "$1" in
        --watch-port) port=$2 ;;
        --watch-every) every=$2 ;;
        --watch-deadline) deadline=$2 ;;
        --watch-failures) failures=$2 ;;
        --watch-restarts) restarts=$2 ;;
        --watch-window) window=$2 ;;
        --watch-start) start=$2 ;;
        --watch-request) request=$2 ;;
        *)
            echo "rocmfleet: vllm-unit.sh run: unknown option $1" >&2
            exit 2
            ;;
        esac
        shift 2
    done
    [ "${1:-}" = -- ] && shift
    state="$STATE_DIR/$instance"
    if [ -e "$state/gave-up" ]; then
        # Left failed by the watchdog; this start is a person's or a deploy's: count afresh.
        echo "rocmfleet: started again after the watchdog gave up ($(cat "$state/gave-up" 2>/dev/null)); its count starts afresh" >&2
        rm -f "$state/gave-up" "$state/restarts"
    fi
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
    watcher=
    if [ -n "$port" ] && [ -n "$request" ]; then
        watch &
        watcher=$!
    fi
    unreachable=0
    while :; do
        if code=$(docker wait "$container" 2>/dev/null); then
            echo "rocmfleet: container $container exited with status $code" >&2
            [ -z "$watcher" ] || kill "$watcher" 2>/dev/null
            if [ -e "$state/gave-up" ]; then
                echo "rocmfleet: watchdog gave up: $(cat "$state/gave-up")" >&2
                exit 76
            fi
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
    echo "usage: vllm-unit.sh clear CONTAINER GRACE_S | prepare-cache ROOT NAMESPACE SERVE_JSON | seed-aiter IMAGE DIR | run CONTAINER INSTANCE BDFS -- DOCKER_RUN_ARGV..." >&2
    exit 2
    ;;
esac
