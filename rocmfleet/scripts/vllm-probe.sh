#!/bin/sh
# rocmfleet: who holds a vLLM instance's port, and whether that instance is ready.
#
#   vllm-probe.sh owner PORT CONTAINER
#       prints "free" (nothing listens on PORT), "ours" (a process of CONTAINER listens on it)
#       or "other PID COMMAND" (another process does); exit 0.
#   vllm-probe.sh ready PORT CONTAINER LISTED BODY
#       exit 0 when a process of CONTAINER listens on PORT and the server there is ready:
#       GET /health answers 200, GET /v1/models contains LISTED ("id":"<served name>", as the
#       server writes it, UTF-8 as is), and POST /v1/completions with BODY succeeds
#       (vLLM's API: vllm/entrypoints/openai/api_server.py). Exit 1 otherwise, with the reason
#       on stderr.
#
# Containers run with --network=host, so their listening sockets are the host's: `ss -ltnp`
# (iproute2) names the processes holding the socket on PORT; it belongs to CONTAINER when one of
# them is a process of the container (`docker top`). Readiness checks the owner first: an
# orphan or a stranger answering on the port must never count as this instance being ready.
set -u

if [ $# -lt 3 ]; then
    echo "usage: vllm-probe.sh owner PORT CONTAINER | ready PORT CONTAINER LISTED BODY" >&2
    exit 2
fi
mode=$1 port=$2 container=$3

owner() {
    # A port nobody can read is not a free port: say so rather than "free".
    if ! listening=$(ss -Hltnp "sport = :$port" 2>&1); then
        echo "other ? (ss failed: $(echo "$listening" | head -n 1))"
        return 0
    fi
    pids=$(echo "$listening" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u)
    if [ -z "$pids" ]; then
        if [ -n "$listening" ]; then
            echo "other ? (a listener whose process ss cannot see)"
        else
            echo free
        fi
        return 0
    fi
    ours=$(docker top "$container" -eo pid 2>/dev/null | tail -n +2)
    for pid in $pids; do
        for own in $ours; do
            if [ "$pid" = "$own" ]; then
                echo ours
                return 0
            fi
        done
    done
    pid=$(echo "$pids" | head -n 1)
    command=$( (tr '\0' ' ' < "/proc/$pid/cmdline") 2>/dev/null | cut -c1-120)
    echo "other $pid ${command:-(command unknown)}"
}

case "$mode" in
owner)
    owner
    ;;
ready)
    listed=$4 body=$5
    base="http://127.0.0.1:$port"
    held=$(owner)
    if [ "$held" != ours ]; then
        echo "port $port: $held (not container $container)" >&2
        exit 1
    fi
    curl -fsS -m 5 -o /dev/null "$base/health" &&
        curl -fsS -m 5 "$base/v1/models" | grep -qF -- "$listed" &&
        curl -fsS -m 60 -o /dev/null -H 'content-type: application/json' -d "$body" "$base/v1/completions"
    ;;
*)
    echo "usage: vllm-probe.sh owner PORT CONTAINER | ready PORT CONTAINER LISTED BODY" >&2
    exit 2
    ;;
esac
