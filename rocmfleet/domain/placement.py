"""
Where each vLLM instance runs on a host: render nodes, visible devices, CPU and memory sets.

``place(instances, topology)`` is a pure function. It checks every instance shape against the
host's ``Topology`` (``rocmfleet.domain.topology``) first and refuses, naming every problem at once,
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

CPU and memory binding
----------------------
An instance is bound (``--cpuset-mems``) to the NUMA node(s) of its GPUs (reference §7) and
gets CPUs (``--cpuset-cpus``) of those nodes only. Instances on one host never share a CPU:
the instances whose GPUs are on one node split that node's CPUs into disjoint, near-equal,
contiguous shares in instance order (:func:`split_cpus`, which keeps SMT siblings together);
an instance spanning nodes gets the union of its share of each. A node with fewer CPUs than
instances sharing it is refused. No binding at all when a GPU's node or a node's CPU list is
unknown. ``Placement.notes`` (comments in the unit) say which node was shared and how.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rocmfleet.domain.topology import Gpu, NumaNode, Topology, format_id_list

VISIBLE_DEVICES_VAR = "CUDA_VISIBLE_DEVICES"


def world_problem(tensor_parallel_size: int, gpus: int) -> str | None:
    """Why an instance of ``gpus`` GPUs cannot run ``tensor_parallel_size`` ranks, or None.

    vLLM starts exactly ``world_size = pipeline_parallel_size × tensor_parallel_size`` workers,
    one per GPU, and data parallel multiplies the engines (vllm-0.33.0
    ``vllm/config/parallel.py``, ``ParallelConfig.__post_init__``; vllm-0.9.2 ``vllm/config.py``,
    the same). rocmfleet renders only the tensor size (pipeline and data parallel flags are
    refused in ``extra_args``), so the world is the tensor size and must equal the instance's
    GPUs: fewer leave GPUs idle that no other instance may use, more cannot start.

    Args:
        tensor_parallel_size: the profile's ``tensor_parallel_size`` (>= 1).
        gpus: how many GPUs (or partitions) the instance is given.

    Returns:
        The problem without the instance's name, e.g. ``"tensor_parallel_size 2 uses 2 of its 4
        GPUs: ..."``; None when they are equal.
    """
    if tensor_parallel_size == gpus:
        return None
    if tensor_parallel_size > gpus:
        return (
            f"tensor_parallel_size {tensor_parallel_size} exceeds its {gpus} GPU(s): vLLM starts one worker per "
            f"rank and would wait for {tensor_parallel_size - gpus} GPU(s) it cannot see"
        )
    return (
        f"tensor_parallel_size {tensor_parallel_size} uses {tensor_parallel_size} of its {gpus} GPUs: vLLM's world "
        f"is tensor x pipeline parallel size ({tensor_parallel_size} x 1 here), so {gpus - tensor_parallel_size} "
        f"GPU(s) would sit idle; give the instance {tensor_parallel_size} GPU(s) or set tensor_parallel_size {gpus}"
    )


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
        notes: why a binding was left out, that it spans NUMA nodes, and for each NUMA node it
            shares with other instances which share of the node's CPUs it got.
        gpus: the host GPU indices (KFD order) of the instance.
        gfx_arch: the GPUs' LLVM target (``gfx942`` for MI300X, from KFD ``gfx_target_version``),
            ``None`` when the instance's GPUs disagree; the environment policy reads it
            (:mod:`rocmfleet.domain.envpolicy`).
    """

    name: str
    render_nodes: tuple[str, ...]
    visible_devices_env: dict[str, str]
    cpuset_cpus: str
    cpuset_mems: str
    notes: tuple[str, ...] = field(default=())
    gpus: tuple[int, ...] = field(default=(), compare=False)
    gfx_arch: str | None = field(default=None, compare=False)


class PlacementError(ValueError):
    """Instance shapes that cannot run on this host; ``problems`` lists each, naming instance and rule."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("cannot place the instances:\n" + "\n".join(f"  - {p}" for p in self.problems))


def _node(topology: Topology, node: int) -> NumaNode:
    """A NUMA node the GPUs name and the binding checked exists (:func:`_bound_nodes`)."""
    numa = topology.numa(node)
    if numa is None:
        raise ValueError(f"NUMA node {node}: not in the host's topology")
    return numa


def place(instances: Sequence[InstanceShape], topology: Topology) -> list[Placement]:
    """Place every instance on the host described by ``topology``.

    Args:
        instances: the shapes, in profile order; that order also decides who gets which CPU
            share of a NUMA node that several instances use (see :func:`share_node_cpus`).
        topology: the host's GPUs and NUMA nodes (the ``GpuTopology`` fact).

    Returns:
        one ``Placement`` per instance, in the same order. CPU sets of instances are pairwise
        disjoint; memory sets are the instances' NUMA nodes and may overlap.

    Raises:
        PlacementError: listing every problem ``shape_problems`` finds, and every NUMA node with
            fewer CPUs than the instances that share it (:func:`share_node_cpus`).
    """
    problems = shape_problems(instances, topology)
    host_gpus = [
        sorted((g for g in topology.gpus if g.index in instance.gpus), key=lambda g: g.index) for instance in instances
    ]
    bindings = [_bound_nodes(gpus, topology) for gpus in host_gpus]
    shares, share_problems = share_node_cpus([i.name for i in instances], [b[0] for b in bindings], topology)
    problems += share_problems
    if problems and (lost := topology.without_kfd_node()):
        problems.append(
            f"the host shows {len(topology.physical_gpus())} GPU(s) to ROCm, and PCI device(s) {', '.join(lost)} "
            "bound to amdgpu have no KFD node: GPUs the driver did not bring up (`dmesg | grep -i amdgpu` on the "
            "host); repair them, or give this host fewer GPUs (vllm_instances)"
        )
    if problems:
        raise PlacementError(problems)
    return [
        _place_one(instance, gpus, nodes, notes, instance_shares, topology)
        for instance, gpus, (nodes, notes), instance_shares in zip(instances, host_gpus, bindings, shares, strict=True)
    ]


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
    elif problem := world_problem(tp, n):
        problems.append(f"{who}: {problem}")
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


def _place_one(
    instance: InstanceShape,
    gpus: Sequence[Gpu],
    nodes: tuple[int, ...] | None,
    notes: tuple[str, ...],
    shares: dict[int, CpuShare],
    topology: Topology,
) -> Placement:
    cpus = mems = ""
    notes_out = list(notes)
    if nodes is not None:
        cpus = format_id_list(c for n in nodes for c in shares[n].cpus)
        with_memory = [n for n in nodes if _node(topology, n).memory_mib != 0]
        mems = format_id_list(with_memory)
        if len(nodes) > 1:
            notes_out.append(f"spans NUMA nodes {format_id_list(nodes)}: bound to their union")
        notes_out += [shares[n].note() for n in nodes if shares[n].of > 1]
        if len(with_memory) < len(nodes):
            notes_out.append(
                f"NUMA node(s) {format_id_list(set(nodes) - set(with_memory))} have no memory: not in cpuset_mems"
            )
    return Placement(
        name=instance.name,
        render_nodes=tuple(g.render_node for g in gpus),
        visible_devices_env={VISIBLE_DEVICES_VAR: ",".join(str(i) for i in range(len(gpus)))},
        cpuset_cpus=cpus,
        cpuset_mems=mems,
        notes=tuple(notes_out),
        gpus=tuple(g.index for g in gpus),
        gfx_arch=archs.pop() if len(archs := {g.gfx_arch for g in gpus}) == 1 else None,
    )


def _bound_nodes(gpus: Sequence[Gpu], topology: Topology) -> tuple[tuple[int, ...] | None, tuple[str, ...]]:
    """The NUMA nodes an instance on ``gpus`` binds to, sorted, or ``None`` (and a note) for no binding.

    No binding when a GPU's node is unknown (``-1``) or a node's CPU list is unknown.
    """
    nodes = tuple(sorted({g.numa_node for g in gpus}))
    if unknown := [g.index for g in gpus if g.numa_node < 0]:
        return None, (f"GPU(s) {format_id_list(unknown)} have no known NUMA node: no CPU/memory binding",)
    if no_cpus := [n for n in nodes if not ((numa := topology.numa(n)) and numa.cpus)]:
        return None, (f"NUMA node(s) {format_id_list(no_cpus)}: CPU list unknown: no CPU/memory binding",)
    return nodes, ()


@dataclass(frozen=True)
class CpuShare:
    """One instance's share of one NUMA node's CPUs.

    Attributes:
        node: the NUMA node id.
        cpus: the CPUs of this share, sorted (the whole node when ``of == 1``).
        index: which share, 0-based, in instance order.
        of: how many instances share the node.
        node_cpus: all CPUs of the node.
        by_sibling_ranges: whether the node's sibling ranges were split alike (:func:`split_cpus`).

    The note names no other instance: it goes into the unit file, and a neighbour renamed or
    added with the same shares must not change this instance's unit (and restart it).
    """

    node: int
    cpus: tuple[int, ...]
    index: int
    of: int
    node_cpus: tuple[int, ...]
    by_sibling_ranges: bool

    def note(self) -> str:
        """One line for ``Placement.notes``, e.g. ``NUMA node 0 (CPUs 0-15,128-143): share 1 of 2 =
        0-7,128-135, each sibling range split alike``."""
        how = ", each sibling range split alike" if self.by_sibling_ranges else ""
        return (
            f"NUMA node {self.node} (CPUs {format_id_list(self.node_cpus)}): share {self.index + 1} of {self.of} = "
            f"{format_id_list(self.cpus)}{how}"
        )


def share_node_cpus(
    names: Sequence[str], nodes: Sequence[tuple[int, ...] | None], topology: Topology
) -> tuple[list[dict[int, CpuShare]], list[str]]:
    """Split each NUMA node's CPUs among the instances bound to it, so that no two instances share a CPU.

    For each node, the instances whose GPUs are on it (in ``names`` order) split its CPUs with
    :func:`split_cpus`: instance *j* of *k* gets share *j*. An instance on several nodes gets its
    share of each; an instance alone on a node gets all of it. Memory nodes are not split.

    Args:
        names: instance names, in profile order.
        nodes: per instance, the NUMA node ids it binds to, or ``None`` for an instance without a
            binding (unknown NUMA node or CPU list), which takes no share.
        topology: the host; every node named in ``nodes`` must have a CPU list.

    Returns:
        ``(shares, problems)``: per instance ``{node: CpuShare}`` (empty without a binding), and one
        problem per node with fewer CPUs (per sibling range) than instances sharing it, naming the
        node, its CPUs and the instances. With problems, the shares of those nodes are empty.
    """
    shares: list[dict[int, CpuShare]] = [{} for _ in names]
    problems: list[str] = []
    for node in sorted({n for bound in nodes if bound for n in bound}):
        sharers = [i for i, bound in enumerate(nodes) if bound and node in bound]
        node_cpus = _node(topology, node).cpus
        who = ", ".join(repr(names[i]) for i in sharers)
        try:
            pieces, by_ranges = split_cpus(node_cpus, len(sharers))
        except ValueError as exc:
            problems.append(f"NUMA node {node}: {exc}; instances sharing it: {who}")
            pieces, by_ranges = [() for _ in sharers], False
        for j, (i, piece) in enumerate(zip(sharers, pieces, strict=True)):
            shares[i][node] = CpuShare(node, piece, j, len(sharers), node_cpus, by_ranges)
    return shares, problems


def cpu_ranges(cpus: Sequence[int]) -> list[tuple[int, ...]]:
    """Contiguous runs of a sorted CPU list: ``(0, 1, 2, 8, 9)`` -> ``[(0, 1, 2), (8, 9)]``."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return [tuple(run) for run in runs]


def split_cpus(cpus: Sequence[int], parts: int) -> tuple[list[tuple[int, ...]], bool]:
    """Split one NUMA node's CPU list into ``parts`` disjoint, (near-)equal, contiguous shares.

    SMT siblings stay together (a heuristic): Linux numbers the second hardware thread of every
    core after all first threads, so an SMT-2 node's list is two equal-length ranges whose
    *i*-th CPUs are one core. In the 2-socket EPYC NPS4 ``lscpu`` fixture
    (``../shared/fixtures/lscpu-numa-2socket-nps4.txt``: 2 sockets × 64 cores, 2 threads per
    core, ``NUMA node0 CPU(s): 0-15,128-143``), CPU *n* and *n*+128 are the two threads of one
    core. So when the list consists of two or more contiguous ranges of equal length, each range
    is split into ``parts`` pieces and share *j* is the union of piece *j* of every range
    (``0-15,128-143`` in 2 -> ``0-7,128-135`` and ``8-15,136-143``). The sibling relation is not
    read from the host (sysfs ``thread_siblings_list`` would say); on a host numbered otherwise
    the shares are still disjoint, only not core-aligned. Any other list (one range, or ranges of
    different lengths) is split in CPU order as one sequence.

    When a range (or the list) does not divide evenly, the first ``len % parts`` shares get one
    CPU more from it: 16 CPUs in 3 -> 6, 5, 5.

    Args:
        cpus: the node's CPU ids (any order; duplicates ignored).
        parts: how many instances share the node, >= 1.

    Returns:
        ``(shares, by_sibling_ranges)``: ``parts`` sorted CPU tuples, in share order, and whether
        the sibling-range rule applied.

    Raises:
        ValueError: ``parts`` < 1, or fewer CPUs (per sibling range) than ``parts``; the message
            gives the CPU count and list.
    """
    if parts < 1:
        raise ValueError(f"cannot split CPUs into {parts} shares")
    ranges = cpu_ranges(cpus)
    total = sum(len(r) for r in ranges)
    by_ranges = len(ranges) > 1 and len({len(r) for r in ranges}) == 1
    if not by_ranges:
        ranges = [tuple(c for r in ranges for c in r)]
    per_range = len(ranges[0]) if ranges else 0
    if per_range < parts:
        listed = format_id_list(cpus)
        if by_ranges:
            raise ValueError(
                f"{total} CPUs ({listed}) in {len(ranges)} sibling ranges of {per_range}, fewer per range "
                f"than the {parts} instances that share it (SMT siblings are kept together)"
            )
        raise ValueError(f"{total} CPU(s) ({listed}), fewer than the {parts} instances that share it")
    shares: list[list[int]] = [[] for _ in range(parts)]
    for run in ranges:
        size, extra = divmod(len(run), parts)
        start = 0
        for j in range(parts):
            end = start + size + (1 if j < extra else 0)
            shares[j].extend(run[start:end])
            start = end
    return [tuple(sorted(share)) for share in shares], by_ranges
