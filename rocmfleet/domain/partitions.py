"""Compute and memory partitions of MI300X-class GPUs: which mode a profile needs, whether a host's
GPUs are in it, and where instances go when a profile opts into a partitioned mode.

An MI300X is one PCI device with 8 XCDs (accelerator dies) and 192 GB HBM3. Its compute
partition mode splits the XCDs into ROCm devices: SPX one device of 8 XCDs, DPX 2, QPX 4, CPX 8
of one XCD each; its memory partition (NPS) mode splits the HBM into 1 (NPS1), 2 or 4 (NPS4)
NUMA-like pools; NPS4 goes only with CPX (AMD's partitioning guide, ROCm/amdgpu-docs
``docs/gpu-partitioning/mi300x/overview.rst``; reference §3 [A7] and §7.1). Each partition is
its own KFD node with its own render node, so a host in CPX shows 64 "GPUs"; they are grouped
back into physical GPUs by PCI function 0 (``Gpu.physical``, :mod:`rocmfleet.domain.topology`).

Modes are read per physical GPU from sysfs ``current_compute_partition`` and
``current_memory_partition`` (the ``GpuTopology`` fact); without sysfs the compute mode is
inferred from KFD (``num_xcc`` and how many nodes share a device), the memory mode stays unknown.
A mode that cannot be read is not held against the host.

The default is SPX/NPS1 (every shipped profile); a host whose GPUs are in another mode is
refused with the command that changes it: ``amd-smi set --gpu all --compute-partition SPX`` and
``amd-smi set --gpu all --memory-partition NPS1`` (reference §7.1, [A1]: both change without a
reboot while no process uses the GPUs), with AMD's metrics exporter stopped around the change
(:data:`rocmfleet.domain.exporterunits.PARTITION_NOTE`: its GPU agent holds the GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from rocmfleet.domain import exporterunits as exporter
from rocmfleet.domain.partitionmodes import ComputePartition, MemoryPartition, PartitionPolicy, policy_problems
from rocmfleet.domain.parttable import Part
from rocmfleet.domain.topology import Gpu, Topology, format_id_list

#: Physical GPUs by (partition kind, mode found) where the mode is not the profile's.
_Found = dict[tuple[Literal["compute", "memory"], str], list[str]]


def set_command(kind: Literal["compute", "memory"], mode: str) -> str:
    """The ``amd-smi`` command that puts every GPU of a host in ``mode`` (reference §7.1, [A1])."""
    return f"amd-smi set --gpu all --{kind}-partition {mode}"


def mode_problems(
    topology: Topology, policy: PartitionPolicy, host: str = "", profile: str = "", part: Part | None = None
) -> list[str]:
    """Each physical GPU whose compute or memory partition mode is not the policy's, grouped by the mode
    found, with the ``amd-smi`` command that changes it. Unknown modes (``None``) pass.

    Args:
        topology: the host (the ``GpuTopology`` fact).
        policy: the profile's modes.
        host: host name for the message (``""``: none).
        profile: profile name for the message.
        part: the host's part (:mod:`rocmfleet.domain.parttable`); the profile is offered only a mode
            a profile may name (``get_args`` of the mode types) and the part has.

    Returns:
        One line per (kind, mode found), e.g. ``host gpu-1: physical GPU(s) 0000:05:00.0, ... are
        in compute partition CPX; profile llama-3.3-70b needs SPX: run `amd-smi set --gpu all
        --compute-partition SPX` (or opt the profile into CPX: compute_partition: CPX)``.
    """
    who = f"host {host}: " if host else ""
    wants = f"profile {profile} needs" if profile else "the profile needs"
    found: _Found = {}
    for key, parts in topology.physical_gpus().items():
        compute, memory = parts[0].partition, parts[0].memory_partition
        if compute is not None and compute != policy.compute:
            found.setdefault(("compute", compute), []).append(key)
        if memory is not None and memory != policy.memory:
            found.setdefault(("memory", memory), []).append(key)
    problems = []
    for (kind, mode), keys in sorted(found.items(), key=lambda item: _step(item[0], found, policy)):
        wanted = policy.compute if kind == "compute" else policy.memory
        setting = f"{kind}_partition"
        after = _after(kind, found, policy)
        named = get_args(ComputePartition if kind == "compute" else MemoryPartition)
        offer = mode in named and (kind == "memory" or part is None or mode in part.partitions)
        problems.append(
            f"{who}physical GPU(s) {', '.join(keys)} in {kind} partition {mode}; {wants} {wanted}: "
            f"run `{set_command(kind, wanted)}` on the host{after}"
            + (f", or set `{setting}: {mode}` in the profile if it is meant to run partitioned" if offer else "")
            + f"; {exporter.PARTITION_NOTE}"
        )
    return problems


def _memory_first(found: _Found, policy: PartitionPolicy) -> bool:
    """Whether the memory mode must change before the compute mode: the driver refuses a compute
    mode that the current memory mode does not go with (NPS4 only with CPX: CPX+NPS4 to SPX+NPS1
    needs NPS1 first, while SPX+NPS1 to CPX+NPS4 needs CPX first; reference §7.1 [A7])."""
    memories = {mode for (kind, mode) in found if kind == "memory"}
    if not memories or not any(kind == "compute" for kind, _ in found):
        return False
    return any(policy_problems(PartitionPolicy(policy.compute, m)) for m in memories)


def _step(
    key: tuple[Literal["compute", "memory"], str],
    found: _Found,
    policy: PartitionPolicy,
) -> tuple[int, str, str]:
    first = "memory" if _memory_first(found, policy) else "compute"
    return (0 if key[0] == first else 1, *key)


def _after(kind: str, found: _Found, policy: PartitionPolicy) -> str:
    """`` after the memory partition change`` on the step that must come second, or ``""``."""
    kinds = {k for k, _ in found}
    if kinds != {"compute", "memory"}:
        return ""
    first = "memory" if _memory_first(found, policy) else "compute"
    return "" if kind == first else f" after the {first} partition change above (the driver refuses it before)"


def tp_group_problems(name: str, gpus: Sequence[Gpu], policy: PartitionPolicy, tp: int) -> list[str]:
    """An instance whose TP ranks share a physical GPU, unless the policy allows it.

    Ranks are the instance's GPUs in index order, consecutive ``tp`` of them one TP group (vLLM
    numbers TP ranks first within a pipeline stage).
    """
    if policy.tp_on_one_gpu or tp < 2:
        return []
    ordered = sorted(gpus, key=lambda g: g.index)
    problems = []
    for start in range(0, len(ordered), tp):
        group = ordered[start : start + tp]
        shared = sorted({g.physical for g in group if sum(h.physical == g.physical for h in group) > 1})
        if shared:
            problems.append(
                f"instance {name!r}: TP ranks on GPUs {format_id_list(g.index for g in group)} share physical "
                f"GPU(s) {', '.join(shared)}; put each rank on its own GPU, or set tp_on_one_gpu: true in the profile"
            )
    return problems


def spread(
    names: Sequence[str], counts: Sequence[int], topology: Topology, policy: PartitionPolicy
) -> tuple[list[tuple[int, ...]], list[str]]:
    """GPU indices for instances of ``counts[i]`` partitions each, spread over physical GPUs and NUMA nodes.

    For each instance in order: the NUMA node with the fewest instances so far (then the lowest id)
    that has ``count`` physical GPUs with a free partition gives them, those with the most free
    partitions first (then the lowest index); when no node has enough, they come from all nodes
    alike. Each chosen physical GPU gives its lowest free partition. So TP ranks sit on distinct
    physical GPUs, on one NUMA node when they fit there, and successive instances alternate NUMA
    nodes and physical GPUs. Only with ``policy.tp_on_one_gpu`` may an instance take several
    partitions of one GPU, and only when distinct GPUs run out.

    Args:
        names: instance names, in instance order (for the messages).
        counts: GPUs (partitions) per instance, in the same order.
        topology: the host; GPUs of unknown NUMA node (``-1``) count as one node of their own.
        policy: the profile's partition policy.

    Returns:
        ``(gpus, problems)``: per instance its GPU indices, sorted (empty for an instance that
        could not be given its partitions), and one line per such instance.
    """
    free = {key: [g.index for g in parts] for key, parts in topology.physical_gpus().items()}
    numa = {key: parts[0].numa_node for key, parts in topology.physical_gpus().items()}
    first = {key: parts[0].index for key, parts in topology.physical_gpus().items()}
    load: dict[int, int] = dict.fromkeys(sorted(set(numa.values())), 0)
    result: list[tuple[int, ...]] = []
    problems: list[str] = []
    for name, count in zip(names, counts, strict=True):
        keys = _pick(count, free, numa, first, load)
        if keys is None and policy.tp_on_one_gpu:
            pool = sorted(idx for ids in free.values() for idx in ids)
            chosen = tuple(pool[:count]) if len(pool) >= count else ()
        elif keys is None:
            chosen = ()
        else:
            chosen = tuple(sorted(free[k][0] for k in keys))
        if not chosen:
            with_free = sum(1 for ids in free.values() if ids)
            problems.append(
                f"instance {name!r}: needs {count} partitions on distinct physical GPUs, but only {with_free} physical "
                f"GPU(s) have a free partition ({sum(len(v) for v in free.values())} free partitions)"
            )
            result.append(())
            continue
        owner = {idx: key for key, ids in free.items() for idx in ids}
        for idx in chosen:
            free[owner[idx]].remove(idx)
        for node in {numa[owner[idx]] for idx in chosen}:
            load[node] += 1
        result.append(chosen)
    return result, problems


def _pick(
    count: int, free: dict[str, list[int]], numa: dict[str, int], first: dict[str, int], load: dict[int, int]
) -> list[str] | None:
    def best(keys: list[str]) -> list[str]:
        return sorted(keys, key=lambda k: (-len(free[k]), first[k]))[:count]

    available = [k for k, ids in free.items() if ids]
    for node in sorted(load, key=lambda n: (load[n], n)):
        on_node = [k for k in available if numa[k] == node]
        if len(on_node) >= count:
            return best(on_node)
    if len(available) >= count:
        return best(available)
    return None
