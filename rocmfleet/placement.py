"""
Where each vLLM instance runs on a host: render nodes, visible devices, CPU and memory sets.

``place(instances, topology)`` is a pure function. It checks every instance shape against the
host's ``Topology`` (``rocmfleet.topology``) first and refuses, naming every problem at once,
before anything touches the host.

Visible devices inside the container
------------------------------------
The container gets ``/dev/kfd`` plus only its instance's ``/dev/dri/renderD<minor>`` nodes.
libhsakmt skips every KFD node whose render node it cannot open (ROCR-Runtime
``libhsakmt/src/topology.c``, ``topology_sysfs_check_node_supported``), so inside the container
the instance's GPUs are renumbered ``0..n-1``, in host KFD order. Host indices (``4,5``) would
name GPUs that do not exist there. So the variable is ``CUDA_VISIBLE_DEVICES=0,…,n-1``: the same
as leaving it unset, but it states the GPU count the instance expects. Only
``CUDA_VISIBLE_DEVICES`` is set, as AMD's vLLM guide says (reference §3.2, [A6]): vLLM on ROCm
raises at import when ``HIP_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` differ, and copies HIP
to CUDA when only HIP is set (vllm ``platforms/rocm.py``, [V-rocm-sync]). The render nodes are
the isolation; ``ROCR_VISIBLE_DEVICES`` is not needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rocmfleet.topology import Gpu, Topology, format_id_list

VISIBLE_DEVICES_VAR = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class InstanceShape:
    """What a profile asks for one instance.

    Attributes:
        name: instance name (unit ``vllm@<name>``).
        port: TCP port it serves on.
        gpus: host GPU indices (``Gpu.index``, KFD order).
        tensor_parallel_size: vLLM ``--tensor-parallel-size``.
        attention_heads: the model's ``num_attention_heads``, when the profile states it.
    """

    name: str
    port: int
    gpus: tuple[int, ...]
    tensor_parallel_size: int
    attention_heads: int | None = None


@dataclass(frozen=True)
class Placement:
    """Where one instance runs.

    Attributes:
        name: the instance.
        render_nodes: ``/dev/dri/renderD<minor>`` for each GPU, host index order, for ``--device``.
        visible_devices_env: ``{"CUDA_VISIBLE_DEVICES": "0,…,n-1"}`` (see the module docstring).
        cpuset_cpus: ``--cpuset-cpus`` value, e.g. ``"0-23,96-119"``; ``""`` = no binding.
        cpuset_mems: ``--cpuset-mems`` value, e.g. ``"0"`` or ``"0-1"``; ``""`` = no binding.
        notes: why a binding was left out, or that it spans NUMA nodes.
    """

    name: str
    render_nodes: tuple[str, ...]
    visible_devices_env: dict[str, str]
    cpuset_cpus: str
    cpuset_mems: str
    notes: tuple[str, ...] = field(default=())


class PlacementError(ValueError):
    """Instance shapes that cannot run on this host; ``problems`` lists each, naming instance and rule."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("cannot place the instances:\n" + "\n".join(f"  - {p}" for p in self.problems))


def place(instances: Sequence[InstanceShape], topology: Topology) -> list[Placement]:
    """Place every instance on the host described by ``topology``.

    Raises:
        PlacementError: listing every problem ``shape_problems`` finds.
    """
    problems = shape_problems(instances, topology)
    if problems:
        raise PlacementError(problems)
    return [_place_one(instance, topology) for instance in instances]


def shape_problems(instances: Sequence[InstanceShape], topology: Topology) -> list[str]:
    """Every rule each instance (or the set of them) breaks; empty when all can run."""
    host = {g.index for g in topology.gpus}
    problems = [p for i in instances for p in _instance_problems(i, host)]
    problems += _shared_problems(instances, len(host))
    return problems


def _instance_problems(instance: InstanceShape, host_gpus: set[int]) -> list[str]:
    who = f"instance {instance.name!r}"
    n, tp = len(instance.gpus), instance.tensor_parallel_size
    problems = []
    if not 1 <= instance.port <= 65535:
        problems.append(f"{who}: port {instance.port} is not in 1-65535")
    if tp < 1:
        problems.append(f"{who}: tensor_parallel_size {tp} must be at least 1")
    elif tp > n:
        problems.append(f"{who}: tensor_parallel_size {tp} exceeds its {n} GPU(s)")
    elif n % tp:
        # vLLM's world size is tensor_parallel_size × pipeline_parallel_size.
        problems.append(f"{who}: tensor_parallel_size {tp} does not divide its {n} GPUs")
    if tp >= 1 and instance.attention_heads is not None and instance.attention_heads % tp:
        # vLLM ModelConfig.verify_with_parallel_config: "Total number of attention heads (…) must
        # be divisible by tensor parallel size (…)".
        problems.append(f"{who}: attention_heads {instance.attention_heads} not divisible by tensor_parallel_size {tp}")
    if missing := sorted(set(instance.gpus) - host_gpus):
        problems.append(
            f"{who}: GPU(s) {format_id_list(missing)} not on this host (it has {format_id_list(host_gpus)})"
        )
    if len(set(instance.gpus)) != n:
        problems.append(f"{who}: lists a GPU more than once: {list(instance.gpus)}")
    return problems


def _shared_problems(instances: Sequence[InstanceShape], host_gpu_count: int) -> list[str]:
    problems = []
    if len(instances) > host_gpu_count:
        problems.append(f"{len(instances)} instances but the host has {host_gpu_count} GPU(s)")
    problems += _duplicates("GPU", {g: [i.name for i in instances if g in i.gpus] for i in instances for g in i.gpus})
    problems += _duplicates("port", {i.port: [j.name for j in instances if j.port == i.port] for i in instances})
    problems += _duplicates("name", {i.name: [j.name for j in instances if j.name == i.name] for i in instances})
    return problems


def _duplicates(what: str, claims: dict[object, list[str]]) -> list[str]:
    return [
        f"instances {', '.join(repr(n) for n in names)} share {what} {key}"
        for key, names in sorted(claims.items(), key=lambda kv: str(kv[0]))
        if len(names) > 1
    ]


def _place_one(instance: InstanceShape, topology: Topology) -> Placement:
    gpus = sorted((g for g in topology.gpus if g.index in instance.gpus), key=lambda g: g.index)
    cpus, mems, notes = numa_binding(gpus, topology)
    return Placement(
        name=instance.name,
        render_nodes=tuple(g.render_node for g in gpus),
        visible_devices_env={VISIBLE_DEVICES_VAR: ",".join(str(i) for i in range(len(gpus)))},
        cpuset_cpus=cpus,
        cpuset_mems=mems,
        notes=notes,
    )


def numa_binding(gpus: Sequence[Gpu], topology: Topology) -> tuple[str, str, tuple[str, ...]]:
    """``(cpuset_cpus, cpuset_mems, notes)`` for a set of GPUs: the union over their NUMA nodes.

    No binding at all (``""``, ``""``) when a GPU's node is unknown (``-1``) or a node's CPU list
    is unknown; a note says which. A node known to have no memory (``memory_mib == 0``) is left
    out of ``cpuset_mems``, since Docker refuses a memory node without memory.
    """
    nodes = sorted({g.numa_node for g in gpus})
    if unknown := [g.index for g in gpus if g.numa_node < 0]:
        return "", "", (f"GPU(s) {format_id_list(unknown)} have no known NUMA node: no CPU/memory binding",)
    if no_cpus := [n for n in nodes if not (topology.numa(n) and topology.numa(n).cpus)]:
        return "", "", (f"NUMA node(s) {format_id_list(no_cpus)}: CPU list unknown: no CPU/memory binding",)
    cpus = format_id_list(c for n in nodes for c in topology.numa(n).cpus)
    with_memory = [n for n in nodes if topology.numa(n).memory_mib != 0]
    notes = [f"spans NUMA nodes {format_id_list(nodes)}: bound to their union"] if len(nodes) > 1 else []
    if len(with_memory) < len(nodes):
        notes.append(f"NUMA node(s) {format_id_list(set(nodes) - set(with_memory))} have no memory: not in cpuset_mems")
    return cpus, format_id_list(with_memory), tuple(notes)
