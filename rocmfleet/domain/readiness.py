"""Readiness of a vLLM server, as a shell probe run on the host itself.

Ready means all of (vLLM's API: ``vllm/entrypoints/openai/api_server.py``): the port is held by
the instance's own container; ``GET /health`` answers 200 (503 once the engine is dead);
``GET /v1/models`` lists the served model; one ``POST /v1/completions`` succeeds and, when the
profile has a ``ready_probe``, its greedy answer (temperature 0) to the known prompt matches the
profile's ``expect_regex`` (an HTTP 200 with garbage is not ready: FP8 KV cache on MI300X, vLLM
issue 45562); with ``ready_probe.chat``, ``POST /v1/chat/completions`` must answer and match too
(a model without a chat template answers 400 there while completions work: vLLM issue 39279).
The port is bound before the engine is up, so connection refused only means "not yet"
(reference §6, "Readiness"). The script is ``rocmfleet/scripts/vllm-probe.sh``.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rocmfleet import scripts


class ReadyProbe(BaseModel):
    """A known-answer request for readiness: sent at temperature 0 after ``/health`` and ``/v1/models``;
    an answer not matching ``expect_regex`` means not ready (vLLM issue 45562: FP8 KV cache on MI300X
    answering HTTP 200 with garbage)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "8" or true is no count

    prompt: str = Field(min_length=1, description="completion prompt")
    expect_regex: str = Field(
        min_length=1,
        description="Python regular expression the greedy answer must contain (re.search; anchor with ^ for a prefix)",
    )
    max_tokens: int = Field(default=16, ge=1, le=4096)
    chat: bool = Field(
        default=False, description="also send the prompt to /v1/chat/completions (served to chat clients)"
    )
    chat_expect_regex: str | None = Field(
        default=None,
        min_length=1,
        description="chat answer's regex when it differs from expect_regex (the chat template wraps the prompt)",
    )

    @field_validator("expect_regex", "chat_expect_regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if compiled.search(""):
            # ``x*``, ``|``, ``(?i)``: every answer, garbage included, would match.
            raise ValueError("matches an empty answer, so any answer would pass; give text the answer must contain")
        return value


def probe_args(model: str, ready_probe: ReadyProbe | None = None) -> list[str]:
    """The arguments of ``vllm-probe.sh ready`` after ``PORT CONTAINER``: ``MODEL_JSON BODY
    [EXPECT_JSON [CHAT_BODY CHAT_EXPECT_JSON]]``.

    All are JSON with ``\\u`` escapes (``json.dumps``' default), so they are ASCII whatever the
    served name or prompt holds; the script parses the server's answers with a JSON parser, so
    raw UTF-8 or escaped names and answers match alike.

    Args:
        model: the served model name (``--served-model-name``), any Unicode.
        ready_probe: the profile's known-answer request, or ``None``: then the completion is one
            token of ``"ping"`` and only has to succeed.
    """
    if ready_probe is None:
        return [json.dumps(model), json.dumps({"model": model, "prompt": "ping", "max_tokens": 1})]
    greedy = {"temperature": 0, "max_tokens": ready_probe.max_tokens}
    args = [
        json.dumps(model),
        json.dumps({"model": model, "prompt": ready_probe.prompt, **greedy}),
        json.dumps(ready_probe.expect_regex),
    ]
    if ready_probe.chat:
        messages = [{"role": "user", "content": ready_probe.prompt}]
        args.append(json.dumps({"model": model, "messages": messages, **greedy}))
        args.append(json.dumps(ready_probe.chat_expect_regex or ready_probe.expect_regex))
    return args


def live_args(port: int, container: str) -> list[object]:
    """Arguments of ``vllm-probe.sh live``: ``port`` is held by a process of ``container`` and its
    ``/health`` answers 200.

    What a no-op converge asks of every instance (``rocmfleet.plan.vllmplan.query``), where the unit
    file, ``serve.json`` and an active unit already prove what the server was started with: no
    request that makes the model generate and no ``docker exec``. The known answer (the profile's
    ``ready_probe``) is asked after every change (the wait), by ``rocmfleet check`` and by a
    rollout's gate. Measured on the lab's CPU vLLM (30 concurrent probes): the full probe cost
    the host 0.34 CPU-seconds, 0.2 of them the two known-answer requests and 0.05 the
    ``docker exec`` that parses the answers; ``live`` costs about 0.05 (issue 16).
    """
    return ["live", port, container]


def probe_script(
    port: int, model: str, container: str, ready_probe: ReadyProbe | None = None, answer_s: int | None = None
) -> str:
    """Shell that exits 0 when ``container``'s server on ``127.0.0.1:port`` is ready.

    Runs ``rocmfleet/scripts/vllm-probe.sh ready``: the port must be held by a process of
    ``container`` (an orphan or a stranger answering there never makes this instance ready),
    then ``/health``, ``/v1/models`` listing ``model``, and one completion; with ``ready_probe``
    (:class:`ReadyProbe`) the completion is its prompt at temperature 0 and the
    answer must match its ``expect_regex`` (``re.search``), and with ``ready_probe.chat`` the same
    prompt as a chat message must answer and match ``chat_expect_regex`` (default: ``expect_regex``).
    Not ready: exit 1, the reason on stderr; a wrong answer: exit 3 (final at temperature 0).

    Args:
        port: the instance's API port on the host.
        model: the served model name.
        container: the instance's container (``vllm-<instance>``).
        ready_probe: the profile's known-answer request, or ``None``.
        answer_s: seconds a request may take (``PROBE_ANSWER_S``; ``None``: the script's 60).
    """
    command = scripts.command("vllm-probe.sh", "ready", port, container, *probe_args(model, ready_probe))
    return command if answer_s is None else f"PROBE_ANSWER_S={int(answer_s)} {command}"


def answers_script(
    port: int, model: str, container: str, ready_probe: ReadyProbe | None = None, answer_s: int | None = None
) -> str:
    """Shell that asks ``container``'s server what :func:`probe_script` asks, without judging the answers.

    Runs ``rocmfleet/scripts/vllm-probe.sh answers``: exit 1 with the reason on stderr where
    :func:`probe_script` would say "not ready yet" before any answer is judged (the port is not
    ``container``'s, ``/health`` or ``/v1/models`` does not answer, or a completion without a
    known answer fails); else exit 0 and the answers on stdout for :func:`judge`. ``rocmfleet
    check`` asks this and judges locally: the judge in the container (``probe_script``) costs the
    host a ``docker exec`` (on the lab, one probe at a time: 0.14 of the full probe's 0.34
    CPU-seconds, the host's and the container's together; issue 16).

    ``answer_s``: seconds a request may take (``PROBE_ANSWER_S``; ``None``: the script's 60): a
    completion with no answer by then is exit 1, "no answer within N s, though /health answers 200".

    Example: ``judge(host.run(answers_script(8000, "tiny", "vllm-a", probe)).stdout_bytes, "tiny", probe)``.
    """
    command = scripts.command("vllm-probe.sh", "answers", port, container, *probe_args(model, ready_probe))
    return command if answer_s is None else f"PROBE_ANSWER_S={int(answer_s)} {command}"


@functools.cache
def _check() -> dict[str, Any]:
    """The namespace of ``vllm-probe.sh``'s ``CHECK`` text (its ``judge`` and ``Verdict``), run once here."""
    lines = scripts.text("vllm-probe.sh").splitlines()
    start = lines.index("CHECK='") + 1
    source = "\n".join(lines[start : lines.index("'", start)])
    namespace: dict[str, Any] = {"__name__": "vllm_probe_check"}  # not __main__: no argv, no exit
    exec(compile(source, "vllm-probe.sh (CHECK)", "exec"), namespace)  # noqa: S102 - our own file
    namespace["WHERE"] = "in rocmfleet check"
    return namespace


def judge(answers: bytes, model: str, ready_probe: ReadyProbe | None = None) -> tuple[int, str]:
    """Judge what :func:`answers_script` printed, as ``vllm-probe.sh ready`` does in the container.

    The same Python text runs (the ``CHECK`` program of ``rocmfleet/scripts/vllm-probe.sh``, its
    ``judge`` function), here in this process instead of the container's ``python3``.

    Args:
        answers: the script's stdout: the ``/v1/models``, completion and chat answers, NUL-separated.
        model, ready_probe: as given to :func:`answers_script`.

    Returns:
        ``(0, "")`` when ready; else ``(1, reason)`` (not ready yet) or ``(3, reason)`` (a wrong
        answer), the reason worded as the probe's stderr (``vllm-probe: ...``).
    """
    args = probe_args(model, ready_probe)
    expect = args[2] if len(args) > 2 else ""
    chat_expect = args[4] if len(args) > 4 else ""
    check = _check()
    try:
        check["judge"](args[0], expect, chat_expect, answers)
    except check["Verdict"] as verdict:
        return verdict.status, "vllm-probe: " + verdict.text
    return 0, ""


def wait_script(
    port: int,
    model: str,
    timeout_s: int,
    container: str,
    interval_s: int = 5,
    warmup: str | None = None,
    ready_probe: ReadyProbe | None = None,
) -> str:
    """Shell that polls :func:`probe_script` until ready or ``timeout_s`` seconds have passed.

    On timeout it prints the container's last 40 log lines and exits 1, so the deploy fails
    the host with the reason in its output. With ``warmup`` (shell, e.g.
    :func:`rocmfleet.domain.warmup.script` for a profile with ``warmup_at_start``), that runs once the
    probe passes, and the instance is ready only when it succeeds: a failed warm-up fails like a
    timeout, with the container's log lines. ``ready_probe``: as for :func:`probe_script`.
    """
    probe = probe_script(port, model, container, ready_probe)
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
