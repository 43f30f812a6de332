#!/bin/sh
# rocmfleet: restart Docker and wait until it and the vLLM containers that were running answer again.
#
#   docker-restart.sh TIMEOUT_S [CONTAINER:PORT ...]
#       Notes which CONTAINERs run (their ID and start time), restarts docker.service, then waits
#       up to TIMEOUT_S seconds in all until dockerd answers and each container that ran before
#       runs again and answers GET /health on 127.0.0.1:PORT. With daemon.json's live-restore the
#       containers are not touched (same ID and start time; said for each). Exit 1 with the
#       reason when the deadline passes: the deploy then restarts Docker on no further host.
set -u

timeout=$1
shift
deadline=$(( $(date +%s) + timeout ))
state() { docker inspect --format '{{.Id}} {{.State.StartedAt}} {{.State.Running}}' "$1" 2>/dev/null; }

# "CONTAINER PORT ID STARTED" of each container running now
records=$(for pair in "$@"; do
    container=${pair%%:*}
    now=$(state "$container") || continue
    [ "${now##* }" = true ] && echo "$container ${pair##*:} ${now% *}"
done)

systemctl restart docker.service || exit 1

until docker info >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "rocmfleet: dockerd does not answer ${timeout} s after its restart (see journalctl -u docker)" >&2
        exit 1
    fi
    sleep 1
done
echo "rocmfleet: docker.service restarted"

while read -r container port id started; do
    [ -n "$container" ] || continue
    before="$id $started"
    until now=$(state "$container") && [ "${now##* }" = true ] &&
        curl -fsS -m 5 -o /dev/null "http://127.0.0.1:$port/health"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "rocmfleet: $container does not answer on port $port ${timeout} s after the Docker restart" \
                "(before: $before; now: ${now:-gone})" >&2
            exit 1
        fi
        sleep 2
    done
    if [ "${now% *}" = "$before" ]; then
        echo "rocmfleet: $container kept running through the restart (same container and start time) and answers"
    else
        echo "rocmfleet: $container was replaced during the restart (before: $before; now: ${now% *}); it answers again"
    fi
done <<EOF
$records
EOF
