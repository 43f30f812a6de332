"""The per-instance watchdog on the host: its settings and the arguments its unit runs it with.

vLLM's ``GET /health`` answers 200 while the API server process lives and its engine core has not
reported an error (``vllm/entrypoints/openai/api_server.py``, ``health``: ``engine_client.check_health()``),
so an engine core that hangs (a hung collective, a stuck kernel, a stopped process) leaves
``/health`` green while every completion waits forever. The watchdog therefore asks what clients
ask: it sends the instance's known-answer request (the profile's ``ready_probe`` body, or a
one-token ``ping``) to ``POST /v1/completions`` with a short deadline, every ``interval_s``.
It asks whether the server answers, not whether the answer is right: a wrong answer is the
image's fault, which a restart does not mend (the deploy, ``rocmfleet check`` and the rollout's
gate judge it).

It is a loop inside the instance's own unit (``rocmfleet/scripts/vllm-unit.sh run --watch-*``),
so it runs whenever the instance does, with nobody running rocmfleet, and dies with the unit:

* it does nothing while the instance is starting: until the instance's first answer, or until
  the start deadline (``vllm_ready_timeout_s``) has passed since the container started;
* it does nothing while a rollout or a rolling restart holds the host (:data:`HOLD_FILE`: written
  by the drain step with an expiry, removed by the undrain step; an expired hold is ignored, so a
  killed rollout cannot switch the watchdog off for good);
* after ``failures`` failed requests in a row it kills the container (``docker kill``: a wedged
  engine finishes nothing, and SIGKILL also ends a frozen container) with one journal line
  saying why; the unit's ``Restart=always`` starts it again;
* it backs off: after its k-th restart within ``window_s`` it waits ``interval_s * 2**k`` before its
  first request of the new container;
* its ``max_restarts``-th restart within ``window_s`` is its last: the next time it would
  restart it writes why to ``<STATE_DIR>/<instance>/gave-up`` and kills the container, and the
  unit exits :data:`GAVE_UP_EXIT`, which its ``RestartPreventExitStatus=`` keeps failed: the
  reason is the unit's last journal line (``systemctl status``) and ``rocmfleet status`` shows it.
  Starting the unit again (a deploy, ``systemctl restart``) clears it.

The unit's own start limit (``StartLimitBurst=`` starts in ``StartLimitIntervalSec=``) still
applies, and the watchdog's restarts count as starts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Where the watchdog keeps its per-instance state: ``<dir>/<instance>/restarts`` (one epoch second
#: per restart) and ``<dir>/<instance>/gave-up`` (why it stopped restarting). Under /run: a reboot
#: starts every count again.
STATE_DIR = "/run/rocmfleet/watchdog"
#: The host-wide hold a rollout's drain writes (``EXPIRY_EPOCH_S WHO``) and its undrain removes.
HOLD_FILE = f"{STATE_DIR}/hold"
#: The unit's exit status when the watchdog gave up (in ``RestartPreventExitStatus=``, beside the
#: GPU-held status 75; 76 is free in systemd's and the BSD ``sysexits.h`` ranges the unit uses).
GAVE_UP_EXIT = 76


class WatchdogSettings(BaseModel):
    """``vllm_watchdog`` in group data: the per-instance watchdog (module docstring).

    Detection takes between ``interval_s * failures`` and ``(interval_s + deadline_s) * failures``
    seconds after an instance stops answering.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    enabled: bool = Field(default=True, description="Run the watchdog in every vLLM instance's unit.")
    interval_s: int = Field(default=30, ge=5, le=3600, description="Seconds between two requests.")
    deadline_s: int = Field(
        default=30,
        ge=1,
        le=600,
        description="Seconds one request may take (the known-answer request generates at most its `max_tokens`).",
    )
    failures: int = Field(
        default=3, ge=1, le=100, description="Failed requests in a row after which the instance is restarted."
    )
    max_restarts: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Restarts within `window_s` after which the watchdog leaves the unit failed instead.",
    )
    window_s: int = Field(
        default=3600, ge=60, le=604800, description="Seconds over which `max_restarts` is counted (at most a week)."
    )


def watch_args(settings: WatchdogSettings, port: int, request: str, start_s: int) -> list[str]:
    """The ``--watch-*`` options of ``vllm-unit.sh run`` for one instance; empty when disabled.

    Args:
        settings: the host's ``vllm_watchdog``.
        port: the instance's API port on the host.
        request: the JSON body of its known-answer ``POST /v1/completions``
            (:func:`rocmfleet.domain.readiness.probe_args`' second argument).
        start_s: the start deadline, seconds (``vllm_ready_timeout_s``).

    Example:
        >>> watch_args(WatchdogSettings(), 8000, '{"prompt": "ping"}', 1800)[:4]
        ['--watch-port', '8000', '--watch-every', '30']
    """
    if not settings.enabled:
        return []
    return [
        "--watch-port", str(port),
        "--watch-every", str(settings.interval_s),
        "--watch-deadline", str(settings.deadline_s),
        "--watch-failures", str(settings.failures),
        "--watch-restarts", str(settings.max_restarts),
        "--watch-window", str(settings.window_s),
        "--watch-start", str(start_s),
        "--watch-request", request,
    ]  # fmt: skip
