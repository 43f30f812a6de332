#!/bin/sh
# rocmfleet: read the Prometheus /metrics of several local ports in one command.
#
#   metrics-read.sh PORT...
#       for each PORT, in order: a line "# rocmfleet-metrics PORT STATUS" (STATUS: "ok", or why
#       nothing was read: curl's exit code and message), then, when ok, the body of
#       GET http://127.0.0.1:PORT/metrics (the Prometheus text format; vLLM serves it on its API
#       port, vllm/entrypoints/serve/instrumentator/metrics.py, AMD's device-metrics-exporter on
#       its ServerPort, ROCm/device-metrics-exporter docs/installation/deb-package.rst). Exit 0
#       when every port answered, 1 otherwise; 2 on a usage error.
#
# One command per host for all its instances and its exporter: `rocmfleet check --select metrics`
# and `rollout --soak` read a host's counters at one moment this way, over the one SSH connection
# they hold. A body ends with a newline in the text format. A body's lines that start like the
# header ("# rocmfleet-metrics ") are left out: the format lets a page hold any comment line
# ("Lines with a # as the first non-whitespace character are comments. They are ignored unless
# the first token after # is either HELP or TYPE", Prometheus's "Exposition formats"), so leaving
# them out changes no sample, and the reader never takes one for the next port's header.
set -u

if [ $# -lt 1 ]; then
    echo "usage: metrics-read.sh PORT..." >&2
    exit 2
fi
for port in "$@"; do
    case $port in
        '' | *[!0-9]*)
            echo "metrics-read.sh: not a port: $port" >&2
            exit 2
            ;;
    esac
done

failed=0
for port in "$@"; do
    body=$(curl -fsS -m 10 "http://127.0.0.1:$port/metrics" 2>&1)
    status=$?
    if [ "$status" = 0 ]; then
        echo "# rocmfleet-metrics $port ok"
        printf '%s\n' "$body" | sed '/^# rocmfleet-metrics /d'
    else
        failed=1
        echo "# rocmfleet-metrics $port curl exit $status: $(printf '%s' "$body" | tr '\n' ' ' | cut -c1-200)"
    fi
done
exit "$failed"
