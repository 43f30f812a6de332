"""The Instinct parts rocmfleet knows, as data: a leaf of the domain (it imports none of it), so that
memory fit (:mod:`rocmfleet.domain.memfit`) and the partition modes offered
(:mod:`rocmfleet.domain.partitions`) read the table without what a host's topology must agree with
(:mod:`rocmfleet.domain.parts`).

:data:`PARTS` is the per-part table: architecture, PCI device ids, memory per GPU, the ROCm
devices each compute partition mode gives, and the first ROCm and vLLM versions that serve on it.
Placement (:func:`rocmfleet.domain.vllmplace.placements`) sizes memory with the part's own numbers
(:func:`device_gib`) instead of MI300X's.

Sources, cited per row:

- [spec] AMD's per-part table in ROCm/rocprofiler-compute ``src/utils/mi_gpu_spec.yaml``: the PCI
  device ids (``chip_ids`` physical and virtual, decimal) and the XCDs per partition of every
  compute partition mode (``num_xcds``); a mode gives ``XCDs / XCDs per partition`` ROCm devices.
- [arch] ROCm docs "GPU hardware specifications" (``docs/reference/gpu-arch-specs``, 2026-02-20):
  LLVM target and VRAM (GiB) per part. MI308X is not in it: its 192 GiB is the MI308X KFD fixture's
  (``../shared/fixtures/kfd-topology/mi308x-8gpu-cpx``: 4 CPX partitions of 48 GiB,
  ``mem_banks/0 size_in_bytes`` 51539607552).
- [vllm-rocm] vLLM's ROCm install guide (``docs/getting_started/installation/gpu.rocm.inc.md``):
  "ROCm 6.3 or above", "MI350/MI355 requires ROCm 7.0 or above"; gfx942 has been served since
  vLLM 0.2.4 (the same guide's first version, "MI300 (gfx942)"), below rocmfleet's oldest known
  vLLM (:data:`rocmfleet.domain.flags.OLDEST_KNOWN`).
- [vllm-gfx950] The first vLLM images built on ROCm 7.0, which gfx950 needs: AMD's
  ``rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006`` (ROCm docs ``rocm-for-ai/inference/benchmark-docker/
  previous-versions/vllm-0.10.2-20251006``) and upstream from 0.11.0 (ROCm/vllm issue 685, AMD's
  comment of 2025-09-16: "ROCm 7.0 will be used in the next official release"). An image of an
  older vLLM has no gfx950 kernels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.version import Version

_MI300_MODES = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}  # 8 XCDs: 8, 4, 2, 1 per partition [spec]
_SOURCE = (
    "ids and modes: ROCm/rocprofiler-compute src/utils/mi_gpu_spec.yaml; arch and memory: ROCm docs "
    "gpu-arch-specs; ROCm and vLLM: vLLM docs gpu.rocm.inc.md"
)
_SOURCE_GFX950 = (
    f"{_SOURCE}, and AMD's first vLLM image on ROCm 7.0, rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006, in ROCm docs "
    "rocm-for-ai/inference/benchmark-docker/previous-versions/vllm-0.10.2-20251006"
)


@dataclass(frozen=True)
class Part:
    """One Instinct part.

    Attributes:
        name: marketing name, e.g. ``MI300X``.
        arch: LLVM target (KFD ``gfx_target_version`` 90402 is ``gfx942``).
        device_ids: PCI device ids of the physical function and the SR-IOV virtual function.
        memory_gib: HBM of one physical GPU, GiB.
        partitions: ``{compute partition mode: ROCm devices per physical GPU}``, the modes the part has.
        rocm_since: first ROCm that vLLM serves this part on.
        vllm_since: first vLLM whose images run on this part.
        source: where each value comes from.
    """

    name: str
    arch: str
    device_ids: tuple[int, ...]
    memory_gib: float
    partitions: Mapping[str, int] = field(default_factory=lambda: dict(_MI300_MODES))
    rocm_since: str = "6.3"
    vllm_since: str = "0.2.4"
    source: str = _SOURCE

    def modes(self) -> str:
        """``SPX, DPX, CPX``: the compute partition modes, fewest devices first."""
        return ", ".join(sorted(self.partitions, key=self.partitions.__getitem__))


#: The parts, by [spec] ``chip_ids`` (physical, virtual). A part not listed (MI300X HF and MI308X
#: HF are in [spec] but not in [arch]: their memory is not cited) is placed with the profile's
#: ``gpu_memory_gib`` and MI300X's partition counts (:func:`device_gib` with ``part`` ``None``).
PARTS: tuple[Part, ...] = (
    Part("MI300X", "gfx942", (0x74A1, 0x74B5), 192.0),
    Part("MI325X", "gfx942", (0x74A5, 0x74B9), 256.0),
    Part(
        "MI308X",
        "gfx942",
        (0x74A2, 0x74B6),
        192.0,
        {"SPX": 1, "DPX": 2, "CPX": 4},  # 4 XCDs: 4, 2, 1 per partition [spec]
        source=_SOURCE.replace("arch and memory: ROCm docs gpu-arch-specs", "memory: the MI308X KFD fixture"),
    ),
    Part("MI300A", "gfx942", (0x74A0, 0x74B4), 128.0, {"SPX": 1, "TPX": 3}),  # 6 XCDs: 6, 2 [spec]
    Part("MI350X", "gfx950", (0x75A0, 0x75B0), 288.0, rocm_since="7.0", vllm_since="0.10.2", source=_SOURCE_GFX950),
    Part("MI355X", "gfx950", (0x75A3, 0x75B3), 288.0, rocm_since="7.0", vllm_since="0.10.2", source=_SOURCE_GFX950),
)


def part_of(device_id: int) -> Part | None:
    """The part with this PCI device id (KFD ``device_id``), or ``None``."""
    return next((p for p in PARTS if device_id in p.device_ids), None)


def device_gib(part: Part | None, compute_partition: str, gpu_memory_gib: float) -> float | None:
    """Memory of one ROCm device in ``compute_partition`` (GiB): the part's HBM shared equally by
    its partitions (a partition gets an equal share in every NPS mode, as the MI308X fixture shows);
    for a part not in :data:`PARTS`, the profile's ``gpu_memory_gib`` over MI300X's partitions, as
    placement did before parts were known. ``None`` for a mode the part does not have."""
    if part is None:
        return gpu_memory_gib / _MI300_MODES[compute_partition] if compute_partition in _MI300_MODES else None
    count = part.partitions.get(compute_partition)
    return None if count is None else part.memory_gib / count


def fewest_partitions(compute_partition: str) -> tuple[int, str]:
    """The fewest ROCm devices any known part gives in ``compute_partition``, and that part (CPX:
    4, an MI308X's), so that validation, which does not know the part, sizes a partition of
    ``gpu_memory_gib`` generously: its refusal then holds on every part with that much memory, and
    placement checks the host's own part.

    Raises:
        ValueError: a mode no known part has.
    """
    count, name = min((p.partitions[compute_partition], p.name) for p in PARTS if compute_partition in p.partitions)
    return count, name


def support_problems(part: Part, vllm_version: str, rocm_version: str) -> list[str]:
    """The profile's vLLM or the host's ROCm older than the first that serves ``part``."""
    problems = []
    if Version(vllm_version) < Version(part.vllm_since):
        problems.append(
            f"the host's GPUs are {part.name} ({part.arch}), which vLLM images before {part.vllm_since} do not "
            f"run on; the profile's vllm_version is {vllm_version}: use an image of vLLM {part.vllm_since} or "
            f"later (sources: {part.source})"
        )
    if rocm_version and Version(rocm_version) < Version(part.rocm_since):
        problems.append(
            f"the host's GPUs are {part.name} ({part.arch}), which needs ROCm {part.rocm_since} or later; "
            f"rocm_version is {rocm_version} (sources: {part.source})"
        )
    return problems
