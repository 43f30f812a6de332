"""MI300X partition modes and what each gives: the names profiles use, the devices per GPU, the
policy a profile asks for and the mode combinations AMD supports.

A leaf of the domain layer (no imports): a profile's validation (:mod:`rocmfleet.config.profiles`)
checks its policy here, :mod:`rocmfleet.domain.partitions` checks hosts against these modes,
:mod:`rocmfleet.domain.parttable` has the devices each mode gives per part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ComputePartition = Literal["SPX", "DPX", "QPX", "CPX"]
MemoryPartition = Literal["NPS1", "NPS2", "NPS4"]

#: HBM per MI300X in GiB (192 GB HBM3, reference §2.5 "MI300X device facts"). A partition gets an
#: equal share in every NPS mode: the MI308X CPX fixture (4 partitions of one 192 GB device) has
#: ``mem_banks/0 size_in_bytes`` 51539607552 = 48 GiB per partition.
MI300X_MEMORY_GIB = 192.0


@dataclass(frozen=True)
class PartitionPolicy:
    """What a profile asks of the GPUs' partitions.

    Attributes:
        compute: compute partition mode every physical GPU must be in (``SPX``...``CPX``).
        memory: memory partition mode every physical GPU must be in (``NPS1``, ``NPS2``, ``NPS4``).
        tp_on_one_gpu: allow the ranks of one TP group on partitions of the same physical GPU
            (off: each rank on its own physical GPU).
    """

    compute: str = "SPX"
    memory: str = "NPS1"
    tp_on_one_gpu: bool = False

    @property
    def partitioned(self) -> bool:
        """Whether a physical GPU is more than one ROCm device in this mode."""
        return self.compute != "SPX"


def policy_problems(policy: PartitionPolicy) -> list[str]:
    """Combinations AMD does not support: NPS4 (or NPS2) memory partitions need a compute mode with at
    least as many partitions ([A7]: "NPS4 is only compatible with CPX" on MI300X; reference §7.1)."""
    if policy.memory == "NPS4" and policy.compute != "CPX":
        return [f"memory_partition NPS4 needs compute_partition CPX (got {policy.compute}); reference §7.1 [A7]"]
    if policy.memory == "NPS2" and policy.compute == "SPX":
        return ["memory_partition NPS2 needs a partitioned compute mode (DPX or CPX), not SPX [A7]"]
    return []
