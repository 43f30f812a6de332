#!/bin/sh
# rocmfleet: who holds a vLLM instance's port, and whether that instance is ready.
#
#   vllm-probe.sh owner PORT CONTAINER
#       prints "free" (nothing listens on PORT), "ours" (a process of CONTAINER listens on it)
#       or "other PID COMMAND" (another process does); exit 0. PORT may be a range FIRST-LAST (an
#       instance's internal ports, rocmfleet/domain/ports.py): "free" when nothing listens on any of
#       them, "ours" when every listener there is CONTAINER's, else "other PID COMMAND on port N"
#       for the first port a stranger holds.
#   vllm-probe.sh ready PORT CONTAINER MODEL_JSON BODY [EXPECT_JSON [CHAT_BODY CHAT_EXPECT_JSON]]
#       exit 0 when a process of CONTAINER listens on PORT and the server there is ready:
#       GET /health answers 200, GET /v1/models lists the served model name MODEL_JSON (a JSON
#       string), POST /v1/completions with BODY succeeds and, with EXPECT_JSON (a JSON string
#       holding a Python regular expression), its first choice's text matches it (re.search);
#       with CHAT_BODY, POST /v1/chat/completions succeeds and its first message matches
#       CHAT_EXPECT_JSON
#       (vLLM's API: vllm/entrypoints/openai/api_server.py). Exit 3 when the server answered
#       and the answer does not match (at temperature 0 that answer is final: waiting longer
#       does not change it), exit 1 when it is not ready yet; the reason on stderr.
#       A completion that gets no answer within PROBE_ANSWER_S seconds (environment; default 60)
#       is exit 1 at once, saying so.
#   vllm-probe.sh answers PORT CONTAINER MODEL_JSON BODY [EXPECT_JSON [CHAT_BODY CHAT_EXPECT_JSON]]
#       what `ready` asks, without judging it: exit 1 (the reason on stderr) as `ready` for a port
#       that is not CONTAINER's, a /health or /v1/models that does not answer, or (without
#       EXPECT_JSON) a completion that fails; else exit 0 and the answers of /v1/models, the
#       completion and the chat request on stdout, NUL-separated (empty for a request that
#       failed). The caller judges them with the `judge` function of CHECK below: `rocmfleet
#       check` does, in its own Python (rocmfleet.domain.readiness.judge), saving the host the
#       `docker exec` (issue 16).
#   vllm-probe.sh live PORT CONTAINER
#       the port is CONTAINER's and its /health answers 200: exit 0, else 1 with the reason on
#       stderr. A no-op converge asks this of every instance (rocmfleet.plan.vllmplan), where the
#       unit file, serve.json and an active unit already prove what the server was started
#       with: no request that makes the model generate, no `docker exec`; about a sixth of
#       what `ready` costs the host (issue 16).
#
# Containers run with --network=host, so their listening sockets are the host's: `ss -ltnp`
# (iproute2) names the processes holding the socket on PORT; it belongs to CONTAINER when one of
# them is a process of the container (`docker top`, asked of Docker's API where it can be). Readiness checks the owner first: an
# orphan or a stranger answering on the port must never count as this instance being ready.
#
# The answers are JSON, read with a JSON parser, never with grep: the server writes a served
# name or an answer in raw UTF-8 or with \u escapes as its encoder likes, and an answer may hold
# quotes, backslashes or newlines. Hosts have no python3 or jq (the deploy installs neither), but
# the instance's own container runs vLLM, a Python program: the parser is its python3, through
# `docker exec` (the same python3 the argument check runs, rocmfleet/fleet/rollout/swap.py), and the regular
# expression is matched by Python's `re`, the engine the profile's expect_regex is validated with
# (rocmfleet/config/profiles.py). MODEL_JSON and EXPECT_JSON are JSON with \u escapes, so the
# arguments are ASCII whatever the container's locale.
set -u

if [ $# -lt 3 ]; then
    echo "usage: vllm-probe.sh owner PORT CONTAINER | live PORT CONTAINER | ready|answers PORT CONTAINER MODEL_JSON BODY [EXPECT_JSON [CHAT_BODY CHAT_EXPECT_JSON]]" >&2
    exit 2
fi
mode=$1 port=$2 container=$3

# GET PATH of Docker's Engine API over its default socket with curl: a few milliseconds, where a
# call of Docker's CLI costs about 25 (its start). Fails where the socket is not the default one
# (DOCKER_HOST set, no socket, no curl) or Docker answers an error: the caller then asks the CLI.
docker_api() {
    [ -z "${DOCKER_HOST:-}" ] && [ -S /var/run/docker.sock ] && command -v curl >/dev/null 2>&1 &&
        curl -fsS -m 10 --unix-socket /var/run/docker.sock "http://localhost/$1" 2>/dev/null
}

owner() {
    case $port in
        *-*) first=${port%-*} last=${port#*-} filter="sport >= :${port%-*} and sport <= :${port#*-}" ;;
        *) first=$port last=$port filter="sport = :$port" ;;
    esac
    # A port nobody can read is not a free port: say so rather than "free".
    if ! listening=$(ss -Hltnp "$filter" 2>&1); then
        echo "other ? (ss failed: $(echo "$listening" | head -n 1))"
        return 0
    fi
    if [ -z "$listening" ]; then
        echo free
        return 0
    fi
    # Whose the processes are: where Docker's API answers, a process is the container's when its
    # cgroup (/proc/PID/cgroup: /docker/ID under cgroupfs, docker-ID.scope under systemd) holds
    # the container's ID (the API's {"Id":"<64 hex digits>",...}): the processes `docker top`
    # lists, without Docker running ps. Else the PIDs `docker top` lists.
    cid=$(docker_api "containers/$container/json" | sed -n 's/^{"Id":"\([0-9a-f]\{64\}\)".*/\1/p')
    ours=
    if [ -z "$cid" ]; then ours=$(docker top "$container" -eo pid 2>/dev/null | tail -n +2); fi
    # One line per listening socket: state, queues, local address:port, peer, processes. The
    # first socket none of whose processes is the container's is the stranger.
    stranger=$(echo "$listening" | while read -r _ _ _ local rest; do
        where=""
        [ "$first" = "$last" ] || where=" on port ${local##*:}"
        # every pid=N of the line ("users:((\"vllm\",pid=1907,fd=12),...)"), without a process
        pids="" r=$rest
        while :; do
            case $r in *pid=[0-9]*) ;; *) break ;; esac
            r=${r#*pid=}
            pids="$pids ${r%%[!0-9]*}"
        done
        if [ -z "$pids" ]; then
            echo "other ? (a listener whose process ss cannot see)$where"
            break
        fi
        for pid in $pids; do
            if [ -n "$cid" ]; then
                { while IFS= read -r line; do
                    case $line in *"$cid"*) continue 3 ;; esac
                done <"/proc/$pid/cgroup"; } 2>/dev/null
            else
                for own in $ours; do
                    [ "$pid" = "$own" ] && continue 3
                done
            fi
        done
        # shellcheck disable=SC2086 # one PID per word, split on purpose
        pid=$(printf '%s\n' $pids | sort -u | head -n 1)
        command=$( (tr '\0' ' ' < "/proc/$pid/cmdline") 2>/dev/null | cut -c1-120)
        echo "other $pid ${command:-(command unknown)}$where"
        break
    done)
    echo "${stranger:-ours}"
}

# CHECK: the judge of the answers, a Python program. `ready` runs it with the container's python3
# (`python3 -c "$CHECK" MODEL_JSON EXPECT_JSON CHAT_EXPECT_JSON` with the answers of /v1/models,
# the completion and (when CHAT_EXPECT_JSON is not empty) the chat request on stdin,
# NUL-separated: a JSON text never holds a raw NUL), in one `docker exec` (each costs about 50 ms
# and a process in the container; the wait after a change probes every instance, issue 16).
# `rocmfleet check` runs the same text's `judge` in its own Python (rocmfleet.domain.readiness.judge,
# which reads it from this file between the lines CHECK=' and '). A failed request's answer is
# empty. In order: ready when /v1/models lists the id MODEL and, with EXPECT (a regular
# expression), the completion's first choice's text matches it, and, with CHAT_EXPECT, the chat
# message's content matches that. Else the reason on stderr, exit 1 (not ready yet) or exit 3
# for an answer that does not match. The text holds no single quote (it is a shell string).
CHECK='
import json, re, sys
WHERE = "in the container"  # where the regular expression is compiled (rocmfleet check: there)
class Verdict(Exception):
    """Not ready: TEXT says why; STATUS 1 (not yet) or 3 (a wrong answer, final)."""
    def __init__(self, text, status=1):
        super().__init__(text)
        self.text, self.status = text, status
def parse(what, raw):
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise Verdict(what + ": no JSON answer")
def matches(what, reply, want):
    try:
        choice = reply["choices"][0]
        text = choice["text"] if what == "completion" else choice["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise Verdict(what + ": unexpected answer " + json.dumps(reply)[:300] + " (" + repr(exc) + ")")
    try:
        found = isinstance(text, str) and re.search(want, text)
    except re.error as exc:
        raise Verdict("the regular expression " + json.dumps(want) + " does not compile " + WHERE + ": " + str(exc), 3)
    if not found:
        raise Verdict(what + " answered " + json.dumps(text) + ", which does not match " + json.dumps(want), 3)
def judge(model, expect, chat_expect, data):
    """Raise Verdict unless the NUL-separated answers in DATA (bytes) are ready (see above)."""
    replies = data.decode("utf-8", "replace").split("\0")
    reply = parse("models", replies[0])
    want = json.loads(model)
    try:
        ids = [entry["id"] for entry in reply["data"]]
    except (KeyError, IndexError, TypeError) as exc:
        raise Verdict("models: unexpected answer " + json.dumps(reply)[:300] + " (" + repr(exc) + ")")
    if want not in ids:
        raise Verdict("/v1/models lists " + json.dumps(ids) + ", not " + json.dumps(want))
    if expect:
        matches("completion", parse("completion", replies[1] if len(replies) > 1 else ""), json.loads(expect))
    if chat_expect:
        matches("chat", parse("chat", replies[2] if len(replies) > 2 else ""), json.loads(chat_expect))
if __name__ == "__main__":
    try:
        judge(sys.argv[1], sys.argv[2], sys.argv[3], sys.stdin.buffer.read())
    except Verdict as verdict:
        print("vllm-probe: " + verdict.text, file=sys.stderr)
        sys.exit(verdict.status)
'

case "$mode" in
owner)
    owner
    ;;
live)
    if [ $# -ne 3 ]; then
        echo "usage: vllm-probe.sh live PORT CONTAINER" >&2
        exit 2
    fi
    held=$(owner)
    if [ "$held" != ours ]; then
        echo "port $port: $held (not container $container)" >&2
        exit 1
    fi
    curl -fsS -m 5 -o /dev/null "http://127.0.0.1:$port/health" || exit 1
    ;;
ready | answers)
    if [ $# -lt 5 ]; then
        echo "usage: vllm-probe.sh $mode PORT CONTAINER MODEL_JSON BODY [EXPECT_JSON [CHAT_BODY CHAT_EXPECT_JSON]]" >&2
        exit 2
    fi
    model=$4 body=$5 expect=${6:-} chat=${7:-} chat_expect=${8:-\"\"}
    base="http://127.0.0.1:$port"
    held=$(owner)
    if [ "$held" != ours ]; then
        echo "port $port: $held (not container $container)" >&2
        exit 1
    fi
    curl -fsS -m 5 -o /dev/null "$base/health" || exit 1
    models=$(curl -fsS -m 5 "$base/v1/models") || exit 1
    # A request that fails leaves its answer empty: the check judges the answers in order, so a
    # wrong completion is exit 3 even when the chat request then fails (e.g. no chat template).
    # One that gets no answer within $PROBE_ANSWER_S seconds (default 60) ends the probe: /health
    # answered, so the engine is alive but not answering (wedged, or swamped).
    answer_s=${PROBE_ANSWER_S:-60}
    completion=
    completion=$(curl -fsS -m "$answer_s" -H 'content-type: application/json' -d "$body" "$base/v1/completions" 2>/dev/null)
    status=$?
    if [ "$status" = 28 ]; then
        echo "POST /v1/completions got no answer within $answer_s s, though /health answers 200 (engine not answering)" >&2
        exit 1
    fi
    if [ "$status" != 0 ]; then
        completion=
        # without a known answer the completion only has to succeed
        if [ -z "$expect" ]; then
            echo "POST /v1/completions failed (curl exit $status)" >&2
            exit 1
        fi
    fi
    answer=
    if [ -n "$chat" ]; then
        answer=$(curl -fsS -m "$answer_s" -H 'content-type: application/json' -d "$chat" "$base/v1/chat/completions") || answer=
    fi
    if [ "$mode" = answers ]; then
        printf '%s\0%s\0%s' "$models" "$completion" "$answer"
        exit 0
    fi
    if [ -z "$chat" ]; then
        chat_expect=
    fi
    printf '%s\0%s\0%s' "$models" "$completion" "$answer" |
        docker exec -i "$container" python3 -c "$CHECK" "$model" "$expect" "$chat_expect"
    status=$?
    # 3 only from the check itself; docker's own failures (125-127) mean "not yet".
    [ $status -le 3 ] || status=1
    exit $status
    ;;
*)
    echo "usage: vllm-probe.sh owner PORT CONTAINER | live PORT CONTAINER | ready|answers PORT CONTAINER MODEL_JSON BODY [EXPECT_JSON [CHAT_BODY CHAT_EXPECT_JSON]]" >&2
    exit 2
    ;;
esac
