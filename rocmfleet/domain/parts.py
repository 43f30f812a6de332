"""What a host's topology must agree with, per Instinct part (the table: :mod:`rocmfleet.domain.parttable`).

:func:`host_part` names a host's part from the KFD ``device_id`` of its GPUs (the ``GpuTopology``
fact); :func:`topology_problems` checks that its devices, KFD nodes and partition modes agree,
naming PCI addresses. Placement (:func:`rocmfleet.domain.vllmplace.placements`) reads both.
"""

from __future__ import annotations

from rocmfleet.domain import exporterunits as exporter
from rocmfleet.domain.parttable import Part, part_of
from rocmfleet.domain.topology import Topology


def _devices(what: str, addresses: list[str], one: str, many: str) -> str:
    """``PCI device 0000:05:00.0 is bound`` / ``PCI devices 0000:05:00.0, 0000:27:00.0 are bound``."""
    return f"{what} {addresses[0]} {one}" if len(addresses) == 1 else f"{what}s {', '.join(addresses)} {many}"


def host_part(topology: Topology) -> tuple[Part | None, list[str]]:
    """The one part a host's GPUs are, and the problems when they are not one.

    Returns:
        ``(part, [])`` when every GPU is one known part; ``(None, [])`` when every GPU has one
        device id that is not in :data:`rocmfleet.domain.parttable.PARTS`; ``(None, [problem])``
        when the GPUs have several device ids or architectures (known or not), naming the PCI
        addresses of each.
    """
    kinds: dict[tuple[int, int], list[str]] = {}
    for key, nodes in topology.physical_gpus().items():
        kinds.setdefault((nodes[0].device_id, nodes[0].gfx_target_version), []).append(key)
    if len(kinds) > 1:
        listed = "; ".join(f"{_kind(device_id, gfx)}: {', '.join(keys)}" for (device_id, gfx), keys in kinds.items())
        return None, [
            f"the host's GPUs are different parts ({listed}); one profile's memory, partition modes and "
            "kernels cannot fit both: give each part its own hosts"
        ]
    if not kinds:
        return None, []
    ((device_id, _gfx),) = kinds
    return part_of(device_id), []


def _kind(device_id: int, gfx_target_version: int) -> str:
    part = part_of(device_id)
    major, rest = divmod(gfx_target_version, 10000)
    arch = f"gfx{major}{rest // 100:x}{rest % 100:x}"
    return f"{part.name} ({arch})" if part else f"device 0x{device_id:04x} ({arch})"


def topology_problems(topology: Topology, part: Part | None, gpu_count: int, wanted: str = "") -> list[str]:
    """Where the host's devices, KFD nodes and partition modes disagree, each naming PCI addresses.

    Args:
        topology: the ``GpuTopology`` fact.
        part: the host's part (:func:`host_part`); ``None``: partition counts are not checked.
        gpu_count: host data's ``vllm_gpu_count``: the GPUs (KFD nodes) the host should show.
        wanted: the profile's compute partition mode, for the remedy.

    Returns:
        One line per problem (GPUs with the same problem share a line):

        - fewer GPUs than ``vllm_gpu_count``, naming the PCI devices bound to amdgpu without a KFD
          node (a failed init, a RAS error at boot) and the AMD accelerators amdgpu did not take
          (``vfio-pci``, no driver), or saying that neither is left on the bus. ROCm numbers the
          GPUs it shows anew, so indices no longer name the GPUs the configuration meant: every
          layout is refused until the GPUs come back or ``vllm_gpu_count`` says what the host has;
        - more GPUs than ``vllm_gpu_count`` (a partitioned host) while such devices exist: the same;
        - physical GPUs whose partitions report different compute modes, whose KFD node count is
          not what their mode gives on this part, or in a mode the part does not have.
    """
    problems = []
    shown, lost, unbound = len(topology.gpus), topology.without_kfd_node(), list(topology.unbound_pci)
    why = []
    if lost:
        why.append(
            _devices("PCI device", lost, "is bound to amdgpu but has", "are bound to amdgpu but have")
            + " no KFD node: the driver did not bring them up (`dmesg | grep -i amdgpu` on the host)"
        )
    if unbound:
        why.append(
            _devices("AMD accelerator", unbound, "is", "are")
            + " on the PCI bus but not bound to amdgpu (`lspci -k -s <address>` on the host)"
        )
    if shown < gpu_count or (why and shown != gpu_count):
        if not why:
            why.append(
                "no other AMD accelerator is on the PCI bus: a GPU fell off the bus (`lspci -d 1002:` and `dmesg` "
                "on the host), or vllm_gpu_count is more than this host has"
            )
        fix = "repair them" if shown == 0 else f"repair them, or set vllm_gpu_count: {shown} for this host"
        problems.append(
            f"the host shows {shown} GPU(s) and vllm_gpu_count says {gpu_count}: {'; '.join(why)}; ROCm numbers "
            f"the GPUs it shows anew, so no layout is placed: {fix}"
        )
    mixed: list[str] = []
    lacking: dict[str, list[str]] = {}
    unfinished: dict[tuple[str, int, int], list[str]] = {}
    for key, nodes in topology.physical_gpus().items():
        modes = {n.partition for n in nodes}
        if len(modes) > 1:
            mixed.append(key)
            continue
        mode = modes.pop()
        if part is None or mode is None:
            continue
        want = part.partitions.get(mode)
        if want is None:
            lacking.setdefault(mode, []).append(key)
        elif len(nodes) != want:
            unfinished.setdefault((mode, want, len(nodes)), []).append(key)
    if mixed:
        problems.append(
            f"physical GPU(s) {', '.join(mixed)}: the KFD nodes of each report different compute partitions: a "
            "partition change that did not finish; reload amdgpu or reboot the host"
        )
    for mode, keys in lacking.items():
        assert part is not None
        target = wanted if part is not None and wanted in part.partitions else "SPX"
        problems.append(
            f"physical GPU(s) {', '.join(keys)}: compute partition {mode}, which an {part.name} does not have "
            f"({part.modes()}): run `amd-smi set --gpu all --compute-partition {target}` on the host; "
            + exporter.PARTITION_NOTE
        )
    for (mode, want, got), keys in unfinished.items():
        assert part is not None
        problems.append(
            f"physical GPU(s) {', '.join(keys)}: compute partition {mode} gives an {part.name} {want} KFD node(s), "
            f"the host shows {got} for each: a partition change that did not finish; reload amdgpu or reboot the host"
        )
    return problems
