"""Readiness of a vLLM server, as a shell probe run on the host itself.

Ready means all three (vLLM's API: ``vllm/entrypoints/openai/api_server.py``):
``GET /health`` answers 200 (503 once the engine is dead); ``GET /v1/models`` lists the
served model; and one short ``POST /v1/completions`` succeeds. The port is bound before the
engine is up, so connection refused only means "not yet" (reference §6, "Readiness").
"""

from __future__ import annotations

import json
import shlex

from rocmfleet import scripts


def probe_script(port: int, model: str, container: str) -> str:
    """Shell that exits 0 when ``container``'s server on ``127.0.0.1:port`` is ready.

    Runs ``rocmfleet/scripts/vllm-probe.sh ready``: the port must be held by a process of
    ``container`` (an orphan or a stranger answering there never makes this instance ready),
    then ``/health``, ``/v1/models`` listing ``model`` (matched as the server writes it: UTF-8,
    not ``\\u`` escapes) and one short completion.
    """
    listed = f'"id":{json.dumps(model, ensure_ascii=False)}'
    completion = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1})
    return scripts.command("vllm-probe.sh", "ready", port, container, listed, completion)


def wait_script(
    port: int, model: str, timeout_s: int, container: str, interval_s: int = 5, warmup: str | None = None
) -> str:
    """Shell that polls :func:`probe_script` until ready or ``timeout_s`` seconds have passed.

    On timeout it prints the container's last 40 log lines and exits 1, so the deploy fails
    the host with the reason in its output. With ``warmup`` (shell, e.g.
    :func:`rocmfleet.warmup.script` for a profile with ``warmup_at_start``), that runs once the
    probe passes, and the instance is ready only when it succeeds: a failed warm-up fails like a
    timeout, with the container's log lines.
    """
    probe = probe_script(port, model, container)
    warm = (
        f"; if ! ( {warmup} ) >&2; then echo 'vLLM on port {port}: warm-up failed; last container log lines:' >&2; "
        f"docker logs --tail 40 {shlex.quote(container)} >&2; exit 1; fi"
        if warmup
        else ""
    )
    return (
        f"deadline=$(( $(date +%s) + {timeout_s} )); "
        f"until ( {probe} ) >/dev/null 2>&1; do "
        f"if [ $(date +%s) -ge $deadline ]; then "
        f"echo 'vLLM on port {port} not ready after {timeout_s} s; last container log lines:' >&2; "
        f"docker logs --tail 40 {shlex.quote(container)} >&2; exit 1; fi; "
        f"sleep {interval_s}; done{warm}"
    )
