"""The Instinct parts rocmfleet knows, as data, and what a host's topology must agree with.

:data:`PARTS` is the per-part table: architecture, PCI device ids, memory per GPU, the ROCm
devices each compute partition mode gives, and the first ROCm and vLLM versions that serve on it.
:func:`host_part` names a host's part from the KFD ``device_id`` of its GPUs (the ``GpuTopology``
fact); :func:`topology_problems` checks that its devices, KFD nodes and partition modes agree,
naming PCI addresses. Placement (:func:`rocmfleet.domain.vllm.placements`) reads both, and sizes
memory with the part's own numbers (:func:`device_gib`) instead of MI300X's.

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

from rocmfleet.domain.topology import Topology

_MI300_MODES = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}  # 8 XCDs: 8, 4, 2, 1 per partition [spec]
_SPEC = "ROCm/rocprofiler-compute src/utils/mi_gpu_spec.yaml"
_ARCH = "ROCm docs gpu-arch-specs"
_VLLM = "vLLM docs gpu.rocm.inc.md"


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
    source: str = f"{_SPEC} (ids, modes); {_ARCH} (arch, memory); {_VLLM} (ROCm, vLLM)"

    def modes(self) -> str:
        """``SPX, DPX, CPX``: the compute partition modes, fewest devices first."""
        return ", ".join(sorted(self.partitions, key=self.partitions.__getitem__))


#: The parts, by [spec] ``chip_ids`` (physical, virtual). Parts not listed are placed as before,
#: with the profile's ``gpu_memory_gib`` and MI300X's partition counts.
PARTS: tuple[Part, ...] = (
    Part("MI300X", "gfx942", (0x74A1, 0x74B5), 192.0),
    Part("MI325X", "gfx942", (0x74A5, 0x74B9), 256.0),
    Part(
        "MI308X",
        "gfx942",
        (0x74A2, 0x74B6),
        192.0,
        {"SPX": 1, "DPX": 2, "CPX": 4},  # 4 XCDs: 4, 2, 1 per partition [spec]
        source=f"{_SPEC} (ids, modes); the MI308X KFD fixture (memory); {_VLLM} (ROCm, vLLM)",
    ),
    Part("MI300A", "gfx942", (0x74A0, 0x74B4), 128.0, {"SPX": 1, "TPX": 3}),  # 6 XCDs: 6, 2 [spec]
    Part("MI350X", "gfx950", (0x75A0, 0x75B0), 288.0, rocm_since="7.0", vllm_since="0.10.2"),
    Part("MI355X", "gfx950", (0x75A3, 0x75B3), 288.0, rocm_since="7.0", vllm_since="0.10.2"),
)


def part_of(device_id: int) -> Part | None:
    """The part with this PCI device id (KFD ``device_id``), or ``None``."""
    return next((p for p in PARTS if device_id in p.device_ids), None)


def host_part(topology: Topology) -> tuple[Part | None, list[str]]:
    """The one part a host's GPUs are, and the problems when they are not one.

    Returns:
        ``(part, [])`` when every GPU is one known part; ``(None, [])`` when some device id is not
        in :data:`PARTS` (nothing is held against it); ``(None, [problem])`` when the GPUs are
        several known parts, naming the PCI addresses of each.
    """
    by_part: dict[str, list[str]] = {}
    for key, nodes in topology.physical_gpus().items():
        part = part_of(nodes[0].device_id)
        if part is None:
            return None, []
        by_part.setdefault(part.name, []).append(key)
    if len(by_part) > 1:
        listed = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in by_part.items())
        return None, [
            f"the host's GPUs are different parts ({listed}); one profile's memory and partition modes "
            "cannot fit both: give each part its own hosts"
        ]
    return (next((p for p in PARTS if p.name in by_part), None), [])


def device_gib(part: Part, compute_partition: str) -> float | None:
    """Memory of one ROCm device of ``part`` in ``compute_partition`` (GiB): the part's HBM shared
    equally by its partitions (a partition gets an equal share in every NPS mode, as the MI308X
    fixture shows); ``None`` for a mode the part does not have."""
    count = part.partitions.get(compute_partition)
    return None if count is None else part.memory_gib / count


def fewest_partitions(compute_partition: str) -> int:
    """The fewest ROCm devices any known part gives in ``compute_partition`` (CPX: 4, an MI308X's),
    so that validation, which does not know the part, sizes a partition generously: its memory
    refusal then holds on every part, and placement checks the host's own part.

    Raises:
        KeyError: a mode no known part has.
    """
    return min(p.partitions[compute_partition] for p in PARTS if compute_partition in p.partitions)


def topology_problems(topology: Topology, part: Part | None, gpu_count: int) -> list[str]:
    """Where the host's devices, KFD nodes and partition modes disagree, each naming PCI addresses.

    Args:
        topology: the ``GpuTopology`` fact.
        part: the host's part (:func:`host_part`); ``None``: partition counts are not checked.
        gpu_count: host data's ``vllm_gpu_count``: the GPUs (KFD nodes) the host should show.

    Returns:
        One line per problem:

        - PCI devices bound to amdgpu with no KFD node (a failed init, a RAS error at boot, a
          partition switch that did not finish) while the host shows another number of GPUs than
          ``vllm_gpu_count``: ROCm numbers the rest anew, so indices no longer name the GPUs the
          configuration meant, and every layout is refused. ``vllm_gpu_count`` set to what the host
          shows accepts it;
        - a physical GPU whose partitions report different compute modes, or whose KFD node count
          is not what its mode gives on this part, or in a mode the part does not have.
    """
    problems = []
    shown, lost = len(topology.gpus), topology.without_kfd_node()
    if lost and shown != gpu_count:
        problems.append(
            f"PCI device(s) {', '.join(lost)} are bound to amdgpu but have no KFD node: GPUs the driver did not "
            f"bring up (`dmesg | grep -i amdgpu` on the host), so ROCm shows {shown} GPU(s) and numbers them "
            f"anew; repair them, or set vllm_gpu_count: {shown} for this host to serve on the GPUs it has"
        )
    for key, nodes in topology.physical_gpus().items():
        modes = {n.partition for n in nodes}
        if len(modes) > 1:
            problems.append(
                f"physical GPU {key}: its KFD nodes report different compute partitions "
                f"({', '.join(sorted(str(m) for m in modes))}): a partition change that did not finish; "
                "reload amdgpu or reboot the host"
            )
            continue
        mode = modes.pop()
        if part is None or mode is None:
            continue
        want = part.partitions.get(mode)
        if want is None:
            problems.append(
                f"physical GPU {key}: compute partition {mode}, which an {part.name} does not have ({part.modes()})"
            )
        elif len(nodes) != want:
            problems.append(
                f"physical GPU {key}: compute partition {mode} gives an {part.name} {want} KFD node(s), the host "
                f"shows {len(nodes)} ({', '.join(n.pci_address for n in nodes)}): a partition change that did not "
                "finish; reload amdgpu or reboot the host"
            )
    return problems


def missing_gpus(topology: Topology, gpu_count: int) -> str | None:
    """``the host shows 7 of its 8 GPUs (vllm_gpu_count); ...``: the line that explains why instances
    do not fit, naming the AMD accelerators amdgpu did not take, or ``None`` when none is missing.

    Args:
        topology: the ``GpuTopology`` fact (``unbound_pci``: AMD accelerators bound to no driver or
            another one, e.g. ``vfio-pci``).
        gpu_count: host data's ``vllm_gpu_count``.
    """
    shown = len(topology.gpus)
    if shown >= gpu_count:
        return None
    where = (
        f"AMD accelerator(s) {', '.join(topology.unbound_pci)} are on the PCI bus but not bound to amdgpu "
        "(`lspci -k -s <address>` on the host)"
        if topology.unbound_pci
        else "no AMD accelerator is left on the PCI bus without amdgpu: a GPU fell off the bus (`lspci -d 1002:` "
        "and `dmesg` on the host)"
    )
    return f"the host shows {shown} of its {gpu_count} GPUs (vllm_gpu_count): {where}"


def support_problems(part: Part, vllm_version: str, rocm_version: str) -> list[str]:
    """The profile's vLLM or the host's ROCm older than the first that serves ``part``."""
    problems = []
    if Version(vllm_version) < Version(part.vllm_since):
        problems.append(
            f"the host's GPUs are {part.name} ({part.arch}), which vLLM images before {part.vllm_since} do not "
            f"run on; the profile's vllm_version is {vllm_version}: use an image of vLLM {part.vllm_since} or "
            f"later ({part.source})"
        )
    if rocm_version and Version(rocm_version) < Version(part.rocm_since):
        problems.append(
            f"the host's GPUs are {part.name} ({part.arch}), which needs ROCm {part.rocm_since} or later; "
            f"rocm_version is {rocm_version} ({part.source})"
        )
    return problems
