#!/bin/sh
# rocmfleet: wait until vLLM instances are ready; roll back each one that is not by the deadline.
#
#   vllm-wait.sh TIMEOUT_S ROLLBACK_TIMEOUT_S INTERVAL_S LOG_LINES PROBE WARMUP COUNT <TARGETS
#
# COUNT is how many targets stdin holds: fewer (an empty or cut-short stdin, a line that is not
# a target) is an error (exit 2), never "all of them are ready".
# PROBE and WARMUP are the texts of vllm-probe.sh and vllm-warmup.sh, carried once: they are
# written to a directory of this run, $RF_SCRIPTS, and READY and BACK_READY call them from there
# (`sh "$RF_SCRIPTS"/vllm-probe.sh ready ...`).
# The targets come on stdin, not as arguments: a host's whole command is one argument of
# `sh -c` (SSH, sudo), at most 128 KiB on Linux (MAX_ARG_STRLEN), and 64 instances with a
# warm-up each are about 180 KB. Stdin is read whole into this run's private directory first
# (nothing the probes run reads it), then run as shell: one line per target,
#   target NAME UNIT CONTAINER PORT IMAGE READY BACK_READY ROLL_BACK_TO SAVED UNIT_PATH ENV_PATH SECRETS_PATH
# each word shell-quoted (built by rocmfleet/fleet/rollout/swap.py, wait_or_roll_back_script):
#   READY       shell that exits 0 when the new version is ready (vllm-probe.sh ready, with the
#               profile's known-answer request, then its warm-up if it has one)
#   BACK_READY  the same for the restored version (see rocmfleet/fleet/rollout/swap.py for what it checks)
#   ROLL_BACK_TO the last good version's image, or "" when there is none to restore
#   SAVED       the last good directory (copies "unit", "env", "secrets"); *_PATH the live files
#
# 1. Poll READY of every target until all are ready or TIMEOUT_S seconds have passed (one
#    deadline: they were restarted together); a target whose unit systemd shows failed (start
#    limit hit, GPUs held) or that answered the known-answer request wrongly (READY exits 3) is
#    given up at once.
# 2. For each target not ready: say so, with the probe's last words (why it is not ready) and
#    its container's last LOG_LINES log lines (the unit's journal when the container is gone);
#    with ROLL_BACK_TO, put its last good files back (unit 0644, environment and secrets 0600,
#    root's: the live files' modes, rocmfleet/fleet/rollout/swap.py SAVED_FILES).
# 3. If any were restored: systemctl daemon-reload, reset-failed (a crash loop may have hit the
#    start limit) and restart those units, poll BACK_READY for up to ROLLBACK_TIMEOUT_S seconds
#    and say, for each, which image it rolled back to and whether it is ready again.
# 4. Exit 1 when any target was not ready in step 1 (the host fails even after a good rollback),
#    else 0. Never exits early: every target gets its rollback.
set -u

usage() {
    echo "usage: vllm-wait.sh TIMEOUT_S ROLLBACK_TIMEOUT_S INTERVAL_S LOG_LINES PROBE WARMUP COUNT <TARGETS" \
        "(stdin: lines 'target NAME UNIT CONTAINER PORT IMAGE READY BACK_READY ROLL_BACK_TO SAVED" \
        "UNIT_PATH ENV_PATH SECRETS_PATH', shell-quoted)" >&2
    exit 2
}

[ $# -eq 7 ] || usage
timeout_s=$1 rollback_timeout_s=$2 interval_s=$3 log_lines=$4 probe_text=$5 warmup_text=$6 count=$7

said=$(mktemp -d) || exit 1
trap 'rm -rf "$said"' EXIT
# The scripts READY and BACK_READY call (see the top).
RF_SCRIPTS=$said/scripts
mkdir "$RF_SCRIPTS" || exit 1
printf '%s\n' "$probe_text" >"$RF_SCRIPTS/vllm-probe.sh" || exit 1
printf '%s\n' "$warmup_text" >"$RF_SCRIPTS/vllm-warmup.sh" || exit 1
cat >"$said/targets" || exit 1
exec </dev/null

# Targets as t<i>_<field> variables (POSIX sh has no arrays), plus per target the flags
# new (ready in step 1), on (still waited for), back (restored) and again (ready after restore).
n=0
# target NAME UNIT ... SECRETS_PATH: one line of stdin.
# shellcheck disable=SC2317 # called by the targets, below
target() {
    [ $# -eq 12 ] || usage
    for field in name unit container port image ready back_ready roll_back_to saved unit_path env_path secrets_path; do
        eval "t${n}_$field=\$1"
        shift
    done
    eval "t${n}_new=0 t${n}_on=1 t${n}_back=0 t${n}_again=0"
    n=$((n + 1))
}
# shellcheck source=/dev/null # the targets, written by rocmfleet/fleet/rollout/swap.py
. "$said/targets"
if [ "$n" != "$count" ]; then
    echo "vllm-wait.sh: $n target(s) on stdin, $count expected: not waiting on a partial list" >&2
    exit 2
fi

# get I FIELD: the value of target I's FIELD.
get() {
    eval "printf '%s' \"\$t${1}_$2\""
}

# put I FIELD VALUE
put() {
    eval "t${1}_$2=\$3"
}

# vllm-probe.sh's exit status for a server that answered, wrongly.
WRONG_ANSWER=3

# poll READY_FLAG ACTIVE_FLAG PROBE_FIELD TIMEOUT WATCH_FAILED: until every target with
# ACTIVE_FLAG 1 has READY_FLAG 1 (its PROBE_FIELD passed), or TIMEOUT seconds. The probe's
# stderr is kept in $said/<i> for the report. WATCH_FAILED=1: a unit systemd shows failed, or a
# server that answered the known-answer request wrongly (the probe's exit 3: at temperature 0 the
# answer is final), is not waited for any longer (ACTIVE_FLAG becomes 0, said on stderr).
poll() {
    deadline=$(($(date +%s) + $4))
    while :; do
        all_ready=1
        i=0
        while [ $i -lt $n ]; do
            if [ "$(get $i "$2")" = 1 ] && [ "$(get $i "$1")" = 0 ]; then
                (eval "$(get $i "$3")") >/dev/null 2>"$said/$i"
                status=$?
                if [ $status = 0 ]; then
                    put $i "$1" 1
                elif [ "$5" = 1 ] && [ $status = "$WRONG_ANSWER" ]; then
                    put $i "$2" 0
                    echo "$(get $i unit) answered the known-answer request wrongly; not waiting for it any longer" >&2
                elif [ "$5" = 1 ] && systemctl is-failed --quiet "$(get $i unit)"; then
                    put $i "$2" 0
                    unit=$(get $i unit)
                    echo "$unit failed (see systemctl status $unit); not waiting for it any longer" >&2
                else
                    all_ready=0
                fi
            fi
            i=$((i + 1))
        done
        [ $all_ready = 1 ] && break
        [ "$(date +%s)" -ge "$deadline" ] && break
        sleep "$interval_s"
    done
}

# logs I: the container's last log lines on stderr; from the journal when the container is gone
# (removed by its next start, or never created: the unit's journal holds the output).
logs() {
    {
        docker logs --tail "$log_lines" "$(get "$1" container)" 2>&1 ||
            journalctl --no-pager -o cat -n "$log_lines" -u "$(get "$1" unit)"
    } >&2
}

# why I: the last lines the probe said, when it said anything.
why() {
    if [ -s "$said/$1" ]; then
        echo "the readiness probe said:" >&2
        tail -n 5 "$said/$1" >&2
    fi
}

poll new on ready "$timeout_s" 1

failed=0 reload=0
i=0
while [ $i -lt $n ]; do
    if [ "$(get $i new)" = 0 ]; then
        failed=1
        unit=$(get $i unit)
        echo "vLLM instance $(get $i name) ($unit, port $(get $i port), image $(get $i image)) not ready after" \
            "$timeout_s s; last $log_lines log lines of its container:" >&2
        logs $i
        why $i
        back_to=$(get $i roll_back_to)
        if [ -n "$back_to" ]; then
            echo "$unit: restoring its last good unit and environment (image $back_to)" >&2
            saved=$(get $i saved)
            if install -m 644 -o root -g root "$saved/unit" "$(get $i unit_path)" &&
                install -m 600 -o root -g root "$saved/env" "$(get $i env_path)" &&
                install -m 600 -o root -g root "$saved/secrets" "$(get $i secrets_path)"; then
                put $i back 1
                reload=1
            else
                echo "$unit: could not restore its last good files" >&2
            fi
        else
            echo "$unit: no last good version to roll back to; left as it is" >&2
        fi
    fi
    i=$((i + 1))
done

if [ $reload = 1 ]; then
    systemctl daemon-reload
    i=0
    while [ $i -lt $n ]; do
        if [ "$(get $i back)" = 1 ]; then
            systemctl reset-failed "$(get $i unit)" 2>/dev/null
            systemctl restart "$(get $i unit)"
        fi
        i=$((i + 1))
    done
    poll again back back_ready "$rollback_timeout_s" 0
    i=0
    while [ $i -lt $n ]; do
        if [ "$(get $i back)" = 1 ]; then
            back="$(get $i unit) rolled back to image $(get $i roll_back_to)"
            if [ "$(get $i again)" = 1 ]; then
                echo "$back: ready again" >&2
            else
                echo "$back, but it is not ready after $rollback_timeout_s s either; last log lines:" >&2
                logs $i
                why $i
            fi
        fi
        i=$((i + 1))
    done
fi
exit $failed
