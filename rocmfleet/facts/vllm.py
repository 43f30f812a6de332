"""Facts about vLLM servers on a host: readiness, who holds a port, which instances are rocmfleet's,
what a baked container compiled since its start."""

from __future__ import annotations

import shlex

from pyinfra.api.facts import FactBase

from rocmfleet import scripts
from rocmfleet.domain import cacheproof
from rocmfleet.domain.readiness import ReadyProbe, probe_script

#: First line of every unit rocmfleet renders (``templates/vllm/vllm.service.j2``): the mark that
#: makes a ``vllm-*.service`` ours to remove when the data no longer lists it.
UNIT_MARKER = "# Managed by rocmfleet (roles/vllm)."


class VllmReady(FactBase[bool]):
    """
    Whether the vLLM server of ``container`` on ``127.0.0.1:port`` is ready to serve ``model`` (see
    :mod:`rocmfleet.domain.readiness` for what ready means: a server answering on the port that is not
    the container's own never counts).

    .. code:: python

        host.get_fact(VllmReady, port=8000, model="tiny-llama", container="vllm-a")  # True

    ``ready_probe``: the profile's known-answer request (:class:`rocmfleet.domain.readiness.ReadyProbe`),
    or ``None``; with one, a server that answers it wrongly is not ready.
    """

    default = bool

    def command(self, port: int, model: str, container: str, ready_probe: ReadyProbe | None = None) -> str:
        probe = probe_script(port, model, container, ready_probe)
        return f"if {probe} 2>/dev/null; then echo ready; else echo not-ready; fi"

    def process(self, output: list[str]) -> bool:
        return output == ["ready"]


class CacheProof(FactBase[cacheproof.Proof]):
    """
    What ``container`` compiled since it started: cache files newer than its start and vLLM's compile
    log lines (``rocmfleet/scripts/cache-proof.sh``, :mod:`rocmfleet.domain.cacheproof`). Output that
    cannot be read is a :class:`~rocmfleet.domain.cacheproof.Proof` with ``problem`` set.

    .. code:: python

        host.get_fact(CacheProof, container="vllm-a")  # Proof(started="2026-...Z", files=(), logs=())
    """

    def command(self, container: str) -> str:
        return cacheproof.command(container)

    def process(self, output: list[str]) -> cacheproof.Proof:
        try:
            return cacheproof.parse("\n".join(output))
        except ValueError as exc:
            return cacheproof.Proof(problem=str(exc))

    @staticmethod
    def default() -> cacheproof.Proof:
        """No output (pyinfra gives the default instead of calling :meth:`process`): a problem, not
        ``None``, so the deploy's proof says it could not read it rather than failing on ``None``."""
        return cacheproof.Proof(problem="cache-proof.sh printed nothing")


class PortOwner(FactBase[str]):
    """
    Who listens on TCP ``port``: ``"free"``, ``"ours"`` (a process of ``container``) or
    ``"other PID COMMAND"`` (``rocmfleet/scripts/vllm-probe.sh owner``). ``port`` may be a range
    ``"FIRST-LAST"`` (an instance's internal ports): ``"ours"`` when every listener there is the
    container's, ``"other PID COMMAND on port N"`` for the first a stranger holds.

    .. code:: python

        host.get_fact(PortOwner, port=8001, container="vllm-b")  # "other 4242 python3 -m http.server 8001"
        host.get_fact(PortOwner, port="20010-20019", container="vllm-b")  # "free"
    """

    def command(self, port: int | str, container: str) -> str:
        return scripts.command("vllm-probe.sh", "owner", port, container)

    def process(self, output: list[str]) -> str:
        line = " ".join(output).strip()
        return line if line in ("free", "ours") or line.startswith("other ") else f"other ? (unreadable: {line!r})"

    @staticmethod
    def default() -> str:
        return "free"


class ManagedInstances(FactBase[list[str]]):
    """
    Names of the vLLM instances rocmfleet made on this host: every
    ``/etc/systemd/system/vllm-<name>.service`` whose first line is :data:`UNIT_MARKER`.

    .. code:: python

        host.get_fact(ManagedInstances)  # ["tiny-llama-a", "tiny-llama-b"]
    """

    default = list

    def command(self) -> str:
        marker = shlex.quote(UNIT_MARKER)
        return (
            'for f in /etc/systemd/system/vllm-*.service; do [ -f "$f" ] || continue; '
            f'head -n 1 "$f" | grep -qF {marker} && basename "$f" .service; done; true'
        )

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip().removeprefix("vllm-") for line in output if line.strip().startswith("vllm-"))
