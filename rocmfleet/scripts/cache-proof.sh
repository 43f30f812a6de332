#!/bin/sh
# rocmfleet: what compiled in a running vLLM container since it started (rocmfleet/domain/cacheproof.py
# reads the output; the deploy after its readiness wait and `rocmfleet check --select cache` run it).
#
#   cache-proof.sh CONTAINER PATTERN PATH...
#       prints, tab-separated, one per line:
#         started  the container's State.StartedAt (RFC 3339)
#         file     each file under the PATHs inside the container modified after that instant
#                  (GNU find -newermt; a PATH the container lacks is skipped)
#         log      each line of the container's log since that instant matching PATTERN (grep -E)
#         problem  why the rest could not be read (no such container, not running, find failed)
#       and a last line "end"; exit 0 (a problem is data, not a failure of this script).
#
# Arguments are data: nothing here is generated.
set -u

container=$1 pattern=$2
shift 2

finish() {
    echo end
    exit 0
}

state=$(docker inspect --type container -f '{{.State.Running}} {{.State.StartedAt}}' "$container" 2>&1) || {
    printf 'problem\tdocker inspect %s: %s\n' "$container" "$(printf '%s' "$state" | tr '\t\n' '  ' | cut -c1-300)"
    finish
}
running=${state%% *} started=${state#* }
if [ "$running" != true ]; then
    printf 'problem\tcontainer %s is not running\n' "$container"
    finish
fi
printf 'started\t%s\n' "$started"

if ! found=$(mktemp) || ! errors=$(mktemp); then
    printf 'problem\tmktemp failed\n'
    finish
fi
trap 'rm -f "$found" "$errors"' EXIT
# shellcheck disable=SC2016 # the inner script's variables are the container shell's
if ! docker exec "$container" sh -c '
since=$1
shift
for dir in "$@"; do
    if [ -d "$dir" ]; then
        find "$dir" -type f -newermt "$since" -print || exit 3
    fi
done' sh "$started" "$@" >"$found" 2>"$errors" || [ -s "$errors" ]; then
    printf 'problem\tfind in %s failed: %s\n' "$container" "$(tr '\t\n' '  ' <"$errors" | cut -c1-300)"
    finish
fi
awk '{ print "file\t" $0 }' "$found"
docker logs --since "$started" "$container" 2>&1 | tr -d '\r' | grep -E -e "$pattern" | awk '{ print "log\t" $0 }'
finish
