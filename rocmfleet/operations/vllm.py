"""Operations for vLLM servers."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from rocmfleet.facts.vllm import VllmReady
from rocmfleet.readiness import wait_script


@operation()
def ready(port: int, model: str, container: str, timeout_s: int = 1800):
    """
    Wait until the vLLM server on ``port`` is ready, failing the host after ``timeout_s``.

    + port: API port on the host
    + model: served model name that ``/v1/models`` must list
    + container: container name, for the log lines printed on timeout
    + timeout_s: deadline in seconds (model load and compilation take minutes)

    A server that is already ready is a no-op, so a converged host reports no change.

    **Example:**

    .. code:: python

        vllm.ready(name="Wait for vLLM", port=8000, model="tiny-llama", container="vllm-main")
    """
    if host.get_fact(VllmReady, port=port, model=model):
        host.noop(f"vLLM on port {port} is ready")
        return
    yield StringCommand(wait_script(port, model, timeout_s, container))
