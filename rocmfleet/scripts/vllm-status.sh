#!/bin/sh
# rocmfleet: what the vLLM instances of a host run now (rocmfleet status, rollout).
#
#   vllm-status.sh INSTANCE...
#       prints "now EPOCH" (the host's clock, seconds), then one line per instance, tab-separated:
#       instance  unit ActiveState  unit SubState  image reference  container StartedAt (RFC 3339)
#       then, when the instance's watchdog gave up on it (rocmfleet/domain/watchdog.py), a sixth
#       field: its reason. An absent container prints "-" for the image and the start; exit 0.
#
# Unit vllm-<instance>.service runs container vllm-<instance> (rocmfleet/domain/vllm.py); the image
# reference is the container's Config.Image, which the unit pins as repository:tag@digest.
set -u

printf 'now %s\n' "$(date +%s)"
for instance in "$@"; do
    unit="vllm-$instance.service"
    active=$(systemctl show -p ActiveState --value "$unit" 2>/dev/null)
    sub=$(systemctl show -p SubState --value "$unit" 2>/dev/null)
    inspected=$(docker inspect --type container -f '{{.Config.Image}}	{{.State.StartedAt}}' "vllm-$instance" 2>/dev/null)
    if [ -z "$inspected" ]; then
        inspected=$(printf '%s\t%s' - -)
    fi
    gave_up=$(head -n 1 "/run/rocmfleet/watchdog/$instance/gave-up" 2>/dev/null | tr '\t' ' ')
    if [ -n "$gave_up" ]; then
        printf '%s\t%s\t%s\t%s\t%s\n' "$instance" "${active:-unknown}" "${sub:-unknown}" "$inspected" "watchdog gave up: $gave_up"
    else
        printf '%s\t%s\t%s\t%s\n' "$instance" "${active:-unknown}" "${sub:-unknown}" "$inspected"
    fi
done
