"""Facts about vLLM servers on a host."""

from __future__ import annotations

from pyinfra.api import FactBase

from rocmfleet.readiness import probe_script


class VllmReady(FactBase[bool]):
    """
    Whether the vLLM server on ``127.0.0.1:port`` is ready to serve ``model`` (see
    :mod:`rocmfleet.readiness` for what ready means).

    .. code:: python

        host.get_fact(VllmReady, port=8000, model="tiny-llama")  # True
    """

    default = bool

    def command(self, port: int, model: str) -> str:
        return f"if {probe_script(port, model)} 2>/dev/null; then echo ready; else echo not-ready; fi"

    def process(self, output: list[str]) -> bool:
        return output == ["ready"]
