"""The host ports one vLLM instance opens besides its API port, and how each instance gets its own.

Every container runs with ``--network=host`` (:func:`rocmfleet.domain.vllm.docker_run_argv`), so a
port any process of an instance binds is a port of the host, shared with every other instance.

What one instance binds, read in vllm-0.32.0 (the released wheel; ``vllm/...`` paths below), for
the shapes rocmfleet renders (one node, tensor parallel only: pipeline, data and context parallel
sizes are refused in ``extra_args``, :data:`rocmfleet.domain.flags.PARALLEL_SIZES`):

- the API port, ``--port`` (:func:`rocmfleet.domain.vllm.serve_args`);
- the torch.distributed rendezvous, a ``TCPStore`` on ``tcp://<loopback or host IP>:<port>``,
  when AITER's custom all-reduce is on (ROCm with ``VLLM_ROCM_USE_AITER=1``): its ``IPC metadata
  exchange asserts on TCPStore`` (``vllm/utils/network_utils.py`` L157-165,
  ``aiter_requires_tcp_store``). With TP > 1 ``vllm/v1/executor/multiproc_executor.py`` L138-143,
  at TP 1 ``vllm/v1/executor/uniproc_executor.py`` L79-84 choose the port with ``get_open_port()``;
  otherwise they rendezvous through a ``file://`` store and bind no port. The ``file://`` store
  came with vLLM PR 50999 (the comment at L160: "Prefer the TCP rendezvous (pre-#50999)"), so
  older releases such as 0.9.2 rendezvous over TCP whatever AITER's switch is (not re-read
  here); ``VLLM_PORT`` is rendered for every version and TP size alike;
- nothing else: the engine core and its client, and the scheduler-output broadcast to the TP
  workers, are ZMQ ``ipc://`` sockets under ``VLLM_RPC_BASE_PATH`` when all ranks are on one node
  (``vllm/v1/utils.py`` L153-164 ``get_engine_client_zmq_addr``;
  ``vllm/distributed/device_communicators/shm_broadcast.py`` L531-567: ``tcp://`` only for
  readers on other nodes). The data parallel ports (``data_parallel_master_port`` 29500,
  ``data_parallel_rpc_port`` 29550, ``get_open_ports_list(5)``: ``vllm/config/parallel.py``
  L155-165, L979-995) are opened only with a data parallel size above 1, which rocmfleet refuses,
  so there is nothing to set for them. RCCL's bootstrap and gloo's pairs bind port 0: the kernel
  picks from ``net.ipv4.ip_local_port_range`` (default 32768-60999, the kernel's
  ``Documentation/networking/ip-sysctl.rst``) a port nobody holds, so they cannot collide, and
  vLLM has no setting for them.

``get_open_port()`` without ``VLLM_PORT`` binds port 0 and closes the socket; the ``TCPStore``
binds that number later. Between the two another instance starting at the same moment can be
handed the same number and one of them dies with ``EADDRINUSE``
(``torch.distributed.DistNetworkError``; vLLM says the same of its data parallel ports,
``vllm/config/parallel.py`` L714-720). With ``VLLM_PORT`` set, ``get_open_port()`` returns the
first port from ``VLLM_PORT`` upward that it can bind, and code asking for several ports gets
``VLLM_PORT``, ``VLLM_PORT + 1``, ... (``vllm/envs.py`` L723-727; ``vllm/utils/network_utils.py``
L192-264). vLLM's own documentation of ``VLLM_PORT`` says it is for vLLM's internal use and is not
the API server's port (https://docs.vllm.ai/en/latest/configuration/env_vars.html): the API port
stays ``--port``.

So each instance gets a block of :data:`STRIDE` ports from ``vllm_internal_port_base``, by its
position on the host (instance *i*: ``base + STRIDE * i``), and ``VLLM_PORT`` is the first port of
its block. The block holds what vLLM takes (one port here; five more with data parallel) and
room for the upward walk past a port something else holds; the deploy's port check
(``vllm-probe.sh owner FIRST-LAST``) refuses a block another process holds, so at start the walk
never leaves the block. Blocks must stay outside the kernel's default ephemeral range (32768-60999:
1024-32767 or 61000-65535), where a port RCCL or any outgoing connection was given would be skipped
by the walk and race it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

#: Ports per instance block: vLLM's rendezvous (1), the five ``get_open_ports_list(5)`` of data
#: parallel, and room to walk past a held port (module docstring).
STRIDE = 10
#: ``vllm_internal_port_base``'s default: below the ephemeral range, away from the usual API ports
#: (8000+), torch's ``MASTER_PORT`` default 29500 and vLLM's data parallel 29500/29550.
DEFAULT_BASE = 20000
#: The lowest port a block may use (below: privileged ports, ``ip_unprivileged_port_start``).
LOWEST = 1024
#: Linux's default ``net.ipv4.ip_local_port_range`` (``Documentation/networking/ip-sysctl.rst``).
EPHEMERAL = range(32768, 61000)
#: The variable vLLM reads for its first internal port (``vllm/envs.py`` L723-727).
ENV = "VLLM_PORT"


@dataclass(frozen=True)
class Block:
    """One instance's internal ports: ``first`` to ``first + count - 1``.

    Attributes:
        first: ``VLLM_PORT``, a TCP port.
        count: how many ports from ``first`` are the instance's (:data:`STRIDE`).
    """

    first: int
    count: int = STRIDE

    @property
    def last(self) -> int:
        """The block's last port."""
        return self.first + self.count - 1

    def spec(self) -> str:
        """``FIRST-LAST``, as ``vllm-probe.sh owner`` and the unit's comment take it."""
        return f"{self.first}-{self.last}"

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.first <= port <= self.last


def block(base: int, index: int) -> Block:
    """The block of the instance at ``index`` (0-based position in the host's instances) from
    ``base`` (``vllm_internal_port_base``): ``base + STRIDE * index``."""
    return Block(base + STRIDE * index)


def env(first: int) -> dict[str, str]:
    """``{"VLLM_PORT": "<first>"}``: the container variable that gives vLLM its block."""
    return {ENV: str(first)}


class PortedInstance(Protocol):
    """What :func:`problems` reads of an instance (``rocmfleet.config.instances.Instance`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def internal_port(self) -> int: ...


def problems(instances: Sequence[PortedInstance], other_ports: Sequence[tuple[int, str]] = ()) -> list[str]:
    """Every rule the instances' blocks break, all at once.

    Args:
        instances: the host's instances, each with its API ``port`` and ``internal_port`` (its
            block's first port, :func:`block`).
        other_ports: further ``(port, owner)`` pairs rocmfleet makes something listen on (Docker's
            ``metrics-addr``), each checked against the blocks.

    Returns:
        One line per problem, naming the instance, its block and what it meets: a block outside
        1024-65535 or reaching into the ephemeral range 32768-60999, a block holding an
        instance's API port or another port of ``other_ports``, two blocks that overlap.
    """
    found: list[str] = []
    blocks = [(i, Block(i.internal_port)) for i in instances]
    for instance, own in blocks:
        who = f"instance {instance.name}'s internal ports {own.spec()} (VLLM_PORT {own.first})"
        if own.first < LOWEST or own.last > 65535:
            found.append(f"{who} are not all in {LOWEST}-65535")
        elif own.first <= EPHEMERAL[-1] and own.last >= EPHEMERAL[0]:
            found.append(
                f"{who} reach into Linux's ephemeral range {EPHEMERAL[0]}-{EPHEMERAL[-1]} "
                "(net.ipv4.ip_local_port_range), where the kernel hands ports to RCCL and outgoing connections"
            )
        for other in instances:
            if other.port in own:
                found.append(f"{who} hold instance {other.name}'s API port {other.port}")
        for port, owner in other_ports:
            if port in own:
                found.append(f"{who} hold port {port} of {owner}")
    for a, (first, one) in enumerate(blocks):
        for second, two in blocks[a + 1 :]:
            if one.first <= two.last and two.first <= one.last:
                found.append(
                    f"instances {first.name} and {second.name} share internal ports: {one.spec()} and {two.spec()}"
                )
    return found
