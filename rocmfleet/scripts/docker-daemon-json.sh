#!/bin/sh
# rocmfleet: put a new /etc/docker/daemon.json in place only if dockerd accepts it.
#
#   docker-daemon-json.sh NEW LIVE
#       NEW is the rendered file next to LIVE. Where dockerd has --validate (Docker 23.0 and later:
#       moby/moby#42393, docker/cli#3108), `dockerd --validate --config-file NEW` must accept it;
#       if it does not, NEW is removed, LIVE stays as it was and the exit status is 1 with dockerd's
#       message. Then NEW replaces LIVE with one rename (mv within one directory), so dockerd never
#       reads a half-written file.
set -u

new=$1 live=$2

if dockerd --help 2>/dev/null | grep -q -- '--validate'; then
    if ! said=$(dockerd --validate --config-file "$new" 2>&1); then
        echo "rocmfleet: dockerd rejects the new daemon.json, $live is left as it was: $said" >&2
        rm -f "$new"
        exit 1
    fi
    echo "rocmfleet: dockerd --validate accepts the new daemon.json: $said"
else
    echo "rocmfleet: this dockerd has no --validate (Docker before 23.0): the new daemon.json is not validated on the host" >&2
fi
mv -f "$new" "$live"
