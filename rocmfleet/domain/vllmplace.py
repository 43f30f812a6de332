"""Where a host's vLLM instances go on its hardware: their shapes (:func:`instance_shapes`), their placement
on the host's topology (:func:`placements`) and the problems of the hardware for them (:func:`hardware_problems`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol, get_args

from rocmfleet.domain import envpolicy, memfit, partitions, parts, parttable
from rocmfleet.domain.partitionmodes import ComputePartition, PartitionPolicy
from rocmfleet.domain.placement import InstanceShape, Placement, PlacementError, place
from rocmfleet.domain.topology import Gpu, Topology


class PlacedInstance(Protocol):
    """One instance as placement reads it: its name, API port and configured GPU indices
    (``rocmfleet.domain.vllm.ServedInstance`` and ``rocmfleet.config.instances.Instance`` have them)."""

    @property
    def name(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def gpus(self) -> tuple[int, ...]: ...


class PlaceSettings(Protocol):
    """What placement reads of a host's vLLM settings (``rocmfleet.domain.vllm.VllmSettings`` has it,
    built by ``rocmfleet.plan.instance.vllm_settings``): the instances and their TP shape, the partition
    modes, the GPUs the host should show, and what the env policy and the memory fit check on its part."""

    @property
    def profile(self) -> str: ...
    @property
    def instances(self) -> Sequence[PlacedInstance]: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def attention_heads(self) -> int | None: ...
    @property
    def partition_policy(self) -> PartitionPolicy: ...
    @property
    def automatic_gpus(self) -> bool: ...
    @property
    def gpu_count(self) -> int: ...
    @property
    def env_profile(self) -> envpolicy.EnvProfile: ...
    @property
    def vllm_env(self) -> Mapping[str, str]: ...
    @property
    def fit_profile(self) -> memfit.FitSettings: ...
    @property
    def rocm_version(self) -> str: ...


def instance_shapes(service: PlaceSettings, topology: Topology | None = None) -> list[InstanceShape]:
    """What each of the host's instances asks of placement: GPUs, TP size, attention heads.

    With ``topology`` and a profile in a partitioned compute mode (``compute_partition`` other than
    SPX) whose instances come from ``gpus_per_instance`` (``service.automatic_gpus``), the GPUs are
    chosen on the topology by :func:`rocmfleet.domain.partitions.spread` (distinct physical GPUs per
    TP group, instances spread over GPUs and NUMA nodes); otherwise they are the configured indices.

    Raises:
        PlacementError: the partitions cannot be spread as the profile asks.
    """
    tp, heads = service.tensor_parallel_size, service.attention_heads
    instances = service.instances
    gpus = [i.gpus for i in instances]
    policy = service.partition_policy
    if topology is not None and policy.partitioned and service.automatic_gpus:
        gpus, problems = partitions.spread([i.name for i in instances], [len(g) for g in gpus], topology, policy)
        if problems:
            raise PlacementError(problems)
    return [InstanceShape(i.name, i.port, g, tp, heads) for i, g in zip(instances, gpus, strict=True)]


def placements(service: PlaceSettings, topology: Topology, host: str = "") -> dict[str, Placement]:
    """Each instance's placement on ``topology`` (the ``GpuTopology`` fact), by instance name.

    The host's GPUs must be in the profile's partition modes (SPX/NPS1 unless it says otherwise),
    and no TP group may share a physical GPU unless the profile allows it.

    Args:
        service: the host's vLLM settings (:class:`PlaceSettings`; ``VllmSettings`` is one).
        topology: the host's GPUs.
        host: the host's name, for the messages.

    Raises:
        PlacementError: GPUs in another partition mode (naming the host, the mode found and the
            ``amd-smi`` command that changes it), or instances that do not fit this host's GPUs
            (:func:`rocmfleet.domain.placement.place`).
    """
    policy = service.partition_policy
    part, problems = parts.host_part(topology)
    problems += hardware_problems(service, topology, part)
    if part is None or policy.compute in part.partitions:  # else: the profile's mode is the problem
        problems += partitions.mode_problems(topology, policy, host, service.profile, part)
    if problems:
        raise PlacementError(problems)
    shapes = instance_shapes(service, topology)
    by_index = {g.index: g for g in topology.gpus}
    tp = service.tensor_parallel_size
    problems = [
        p
        for s in shapes
        for p in partitions.tp_group_problems(s.name, [by_index[i] for i in s.gpus if i in by_index], policy, tp)
    ]
    if problems:
        raise PlacementError(problems)
    placed = place(shapes, topology)
    if policy.partitioned:
        placed = [replace(p, notes=(*p.notes, _partition_note(p, by_index, policy))) for p in placed]
    return {p.name: p for p in placed}


def hardware_problems(service: PlaceSettings, topology: Topology, part: parttable.Part | None) -> list[str]:
    """What the host's hardware refuses before any instance is placed (:mod:`rocmfleet.domain.parts`).

    - devices, KFD nodes and partition modes that disagree, or another number of GPUs than
      ``vllm_gpu_count`` (:func:`rocmfleet.domain.parts.topology_problems`);
    - a compute partition mode the part does not have, a vLLM or ROCm older than the first that
      serves it, a model that does not fit the memory of one of its devices (for a part not in the
      table: the profile's ``gpu_memory_gib`` over MI300X's partitions);
    - explicit environment values wrong on its architecture (:func:`envpolicy.arch_problems`).

    Args:
        service: the host's vLLM settings.
        topology: the ``GpuTopology`` fact.
        part: the host's part (:func:`rocmfleet.domain.parts.host_part`), ``None`` when unknown.

    Returns:
        One line per problem, without the host's name; empty when the hardware takes the profile.
    """
    mode = service.partition_policy.compute
    problems = parts.topology_problems(topology, part, service.gpu_count, mode)
    archs = {g.gfx_arch for g in topology.gpus}
    env = service.env_profile
    problems += envpolicy.arch_problems(env, service.vllm_env, archs.pop() if len(archs) == 1 else None)
    fit = service.fit_profile
    device_gib = parttable.device_gib(part, mode, fit.gpu_memory_gib)
    if device_gib is None:
        assert part is not None  # every profile mode has MI300X's count
        named = [m for m in part.modes().split(", ") if m in get_args(ComputePartition)]
        problems.append(
            f"profile {service.profile}: compute_partition {mode}, which an {part.name} does not have "
            f"({part.modes()}): give this host a profile with compute_partition {' or '.join(named)}"
        )
    else:
        what = part.name if part else f"{fit.gpu_memory_gib:g} GiB, gpu_memory_gib of a part rocmfleet does not know"
        device = f"one {mode} partition of {what}" if mode != "SPX" else ("" if part is None else part.name)
        problems += memfit.problems(fit, device_gib, device)
    if part is not None:
        problems += parttable.support_problems(part, env.vllm_version, service.rocm_version)
    return problems


def _partition_note(placement: Placement, by_index: dict[int, Gpu], policy: PartitionPolicy) -> str:
    """``compute partition CPX: GPUs 0,8 are partitions of physical GPUs 0000:05:00.0, 0000:27:00.0``."""
    physical = list(dict.fromkeys(by_index[i].physical for i in placement.gpus))
    return (
        f"compute partition {policy.compute}: GPU(s) {','.join(map(str, placement.gpus))} are partitions of "
        f"physical GPU(s) {', '.join(physical)}"
    )
