"""MI300X partition modes and what each gives: the names profiles use and the devices per GPU.

A leaf of the domain layer (no imports): :mod:`rocmfleet.domain.partitions` checks hosts against
these modes, :mod:`rocmfleet.domain.memfit` sizes a partition's memory with them.
"""

from __future__ import annotations

from typing import Literal

ComputePartition = Literal["SPX", "DPX", "QPX", "CPX"]
MemoryPartition = Literal["NPS1", "NPS2", "NPS4"]

#: ROCm devices per MI300X in each compute partition mode (8 XCDs: [A7]).
PARTITIONS_PER_GPU: dict[str, int] = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
#: HBM per MI300X in GiB (192 GB HBM3, reference §2.5 "MI300X device facts"). A partition gets an
#: equal share in every NPS mode: the MI308X CPX fixture (4 partitions of one 192 GB device) has
#: ``mem_banks/0 size_in_bytes`` 51539607552 = 48 GiB per partition.
MI300X_MEMORY_GIB = 192.0
