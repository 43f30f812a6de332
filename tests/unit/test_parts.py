"""The per-part hardware table and the host checks that read it, on the recorded trees in
``../shared/fixtures`` (MI300X CPX partitions, 8xMI308X in CPX, 8xMI210) and on parts derived from
them by device id: each case is placed correctly or refused naming the PCI address and the reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rocmfleet.domain import parts, parttable, vllmplace
from rocmfleet.domain.placement import PlacementError
from rocmfleet.domain.topology import PciSysfs, Topology
from rocmfleet.plan.instance import vllm_settings
from tests.unit.conftest import TOPOLOGY, every_profile
from tests.unit.test_partitions import _config, mi300x_cpx, mi308x
from tests.unit.test_placement import mi210_nps1

FP4 = "VLLM_ROCM_USE_AITER_FP4BMM"


def as_part(topology: Topology, device_id: int, gfx_target_version: int = 90402) -> Topology:
    """The same tree with another part's device id (and architecture)."""
    gpus = tuple(replace(g, device_id=device_id, gfx_target_version=gfx_target_version) for g in topology.gpus)
    return replace(topology, gpus=gpus)


def refusal(config, topology: Topology) -> list[str]:
    with pytest.raises(PlacementError) as info:
        vllmplace.placements(vllm_settings(config), topology, "gpu-1")
    return list(info.value.problems)


# --- the table --------------------------------------------------------------------------------


def test_each_device_id_names_one_part_and_the_recorded_trees_are_known():
    ids = [i for p in parttable.PARTS for i in p.device_ids]
    assert len(ids) == len(set(ids))
    assert parts.host_part(mi300x_cpx())[0].name == "MI300X"  # device_id 29857 = 0x74a1
    assert parts.host_part(mi308x())[0].name == "MI308X"  # device_id 29858 = 0x74a2
    assert parts.host_part(mi210_nps1()) == (None, [])  # not in the table: placed as before
    assert parttable.device_gib(parttable.part_of(0x74A2), "CPX", 192) == 48.0  # the fixture's mem_banks size
    assert parttable.device_gib(parttable.part_of(0x74A1), "CPX", 192) == 24.0
    assert parttable.device_gib(parttable.part_of(0x74A2), "QPX", 192) is None
    assert parttable.device_gib(None, "CPX", 192) == 24.0  # a part not in the table: as before, MI300X's count


def test_gpus_of_two_parts_on_one_host_are_refused_naming_each():
    mixed = TOPOLOGY
    mixed = replace(mixed, gpus=tuple(replace(g, device_id=0x74A5) if g.index >= 4 else g for g in mixed.gpus))
    assert parts.host_part(mixed) == (
        None,
        [
            "the host's GPUs are different parts (MI300X (gfx942): 0000:05:00.0, 0000:06:00.0, 0000:07:00.0, "
            "0000:08:00.0; MI325X (gfx942): 0000:09:00.0, 0000:0a:00.0, 0000:0b:00.0, 0000:0c:00.0); one "
            "profile's memory, partition modes and kernels cannot fit both: give each part its own hosts"
        ],
    )


def test_every_shipped_profile_is_placed_on_an_8x_mi300x_spx_nps1_host(tmp_path):
    spx_nps1 = replace(TOPOLOGY, gpus=tuple(replace(g, memory_partition="NPS1") for g in TOPOLOGY.gpus))
    for name in every_profile():
        config = _config(tmp_path, name)
        assert len(vllmplace.placements(vllm_settings(config), spx_nps1)) == len(config.instances()), name


# --- memory per part ----------------------------------------------------------------------------


def test_a_cpx_partition_has_its_parts_memory(tmp_path):
    # Llama 3.3 70B at TP 4 in CPX: 32.9 GiB of weights + 0.31 GiB of KV cache per partition. An
    # MI308X partition has 48 GiB (x 0.92 = 44.2): placed. An MI300X one has 24 GiB: refused.
    config = _config(
        tmp_path,
        "llama-3.3-70b",
        {"vllm_gpu_count": 32},
        compute_partition="CPX",
        gpus_per_instance=4,
        tensor_parallel_size=4,
    )
    placed = vllmplace.placements(vllm_settings(config), mi308x())
    assert len(placed) == 8 and all(len(p.gpus) == 4 for p in placed.values())
    (line,) = refusal(config, mi300x_cpx())
    assert line.startswith("model_memory: does not fit at tensor_parallel_size 4")
    assert "more than 24 GiB (one CPX partition of MI300X) x gpu_memory_utilization 0.92" in line
    assert line.endswith("the smallest tensor_parallel_size that fits is 8")


def test_a_model_that_fits_an_mi325x_is_refused_on_an_mi300a(tmp_path):
    # Llama 3.3 70B at TP 1: 131.4 GiB. An MI325X has 256 GiB: placed; an MI300A has 128: refused.
    config = _config(tmp_path, "llama-3.3-70b", instances_per_host=8)
    assert len(vllmplace.placements(vllm_settings(config), as_part(TOPOLOGY, 0x74A5))) == 8
    (line,) = refusal(config, as_part(TOPOLOGY, 0x74A0))
    assert "more than 128 GiB (MI300A) x gpu_memory_utilization" in line


# --- partition modes the part has, and KFD nodes that agree with them ---------------------------


def test_a_mode_the_part_does_not_have_is_refused():
    qpx = mi308x({g.physical: PciSysfs(None, "QPX", "NPS1") for g in mi308x().gpus})
    problems = parts.topology_problems(qpx, parttable.part_of(0x74A2), 8)
    (line,) = problems  # one line for the eight GPUs, with the fix
    assert line.startswith(
        "physical GPU(s) 0000:0a:00.0, 0000:80:00.0, 0000:a4:00.0, 0000:c8:00.0, 0001:0b:00.0, 0001:81:00.0, "
        "0001:a5:00.0, 0001:c9:00.0: compute partition QPX, which an MI308X does not have (SPX, DPX, CPX): "
        "run `amd-smi set --gpu all --compute-partition SPX` on the host"
    )


def test_a_profile_mode_the_part_does_not_have_is_refused(tmp_path):
    config = _config(tmp_path, "llama-3.3-70b", compute_partition="CPX", model_memory=None)
    mi300a_cpx = as_part(mi300x_cpx(), 0x74A0)
    problems = refusal(config, mi300a_cpx)
    assert problems[-1] == (
        "profile llama-3.3-70b: compute_partition CPX, which an MI300A does not have (SPX, TPX): give this host a "
        "profile with compute_partition SPX"
    )
    assert not any("--compute-partition CPX" in p or "compute_partition: TPX" in p for p in problems), problems


def test_a_partition_change_that_did_not_finish_is_named_by_address():
    # The recorded MI308X tree: 4 KFD nodes per GPU (CPX). sysfs says GPU 0000:0a:00.0 is in SPX,
    # which gives an MI308X one node: the switch did not finish.
    tree = mi308x()
    first = tree.gpus[0].physical
    sysfs = {g.physical: PciSysfs(None, "SPX" if g.physical == first else "CPX", "NPS1") for g in tree.gpus}
    (line,) = parts.topology_problems(mi308x(sysfs), parttable.part_of(0x74A2), 8)
    assert line.startswith(f"physical GPU(s) {first}: compute partition SPX gives an MI308X 1 KFD node(s), the host")
    assert "a partition change that did not finish" in line


def test_partitions_of_one_gpu_in_two_modes_are_refused():
    tree = mi308x({g.physical: PciSysfs(None, "CPX", "NPS1") for g in mi308x().gpus})
    odd = replace(tree, gpus=tuple(replace(g, partition="DPX") if g.index == 1 else g for g in tree.gpus))
    (line,) = parts.topology_problems(odd, parttable.part_of(0x74A2), 8)
    assert line.startswith(f"physical GPU(s) {tree.gpus[0].physical}: the KFD nodes of each report different")


# --- a GPU missing ------------------------------------------------------------------------------


def seven_of_mi210(bound: bool) -> tuple[Topology, str]:
    """The recorded 8xMI210 tree less its last GPU's KFD node, that GPU bound to amdgpu or not."""
    whole = mi210_nps1()
    lost = whole.gpus[-1].physical
    everyone = tuple(sorted(g.physical for g in whole.gpus))
    seven = replace(
        whole,
        gpus=whole.gpus[:-1],
        amdgpu_pci=everyone if bound else tuple(a for a in everyone if a != lost),
        unbound_pci=() if bound else (lost,),
    )
    return seven, lost


def test_a_gpu_bound_without_a_kfd_node_refuses_every_layout_until_the_count_says_so(tmp_path):
    # Indices after a lost GPU move, so even a layout that fits seven GPUs is refused, naming the
    # address; vllm_gpu_count: 7 accepts the host as it is.
    seven, lost = seven_of_mi210(bound=True)
    config = _config(tmp_path, "llama-3.3-70b", instances_per_host=7, model_memory=None)
    (line,) = refusal(config, seven)
    assert line.startswith(
        f"the host shows 7 GPU(s) and vllm_gpu_count says 8: PCI device {lost} is bound to amdgpu but has no KFD node"
    )
    assert line.endswith("no layout is placed: repair them, or set vllm_gpu_count: 7 for this host")
    seven_known = _config(tmp_path, "llama-3.3-70b", {"vllm_gpu_count": 7}, instances_per_host=7, model_memory=None)
    assert len(vllmplace.placements(vllm_settings(seven_known), seven)) == 7


def test_fewer_gpus_than_the_count_refuse_every_layout_naming_what_is_missing(tmp_path):
    # A GPU that vfio-pci (or nothing) holds, or one gone from the bus: the rest are renumbered, so
    # even an instance on GPU 5 alone would land on another physical GPU. Refused, naming the address.
    seven, lost = seven_of_mi210(bound=False)
    config = _config(tmp_path, "qwen3-30b-a3b", {"vllm_instances": [{"name": "a", "port": 8000, "gpus": [5]}]})
    (line,) = refusal(config, seven)
    assert line == (
        f"the host shows 7 GPU(s) and vllm_gpu_count says 8: AMD accelerator {lost} is on the PCI bus but not "
        "bound to amdgpu (`lspci -k -s <address>` on the host); ROCm numbers the GPUs it shows anew, so no layout "
        "is placed: repair them, or set vllm_gpu_count: 7 for this host"
    )
    (line,) = refusal(config, replace(seven, unbound_pci=()))
    assert "a GPU fell off the bus (`lspci -d 1002:` and `dmesg` on the host), or vllm_gpu_count is more" in line
    none = replace(seven, gpus=(), amdgpu_pci=tuple(g.physical for g in mi210_nps1().gpus), unbound_pci=())
    (line,) = parts.topology_problems(none, None, 8)
    assert line.endswith("no layout is placed: repair them")  # vllm_gpu_count: 0 is no setting


def test_an_unknown_part_is_sized_as_before_and_mixed_device_ids_are_refused(tmp_path):
    # MI300X HF (0x74a9) is in AMD's id list but its memory is not cited: the profile's 192 GiB over
    # MI300X's 8 CPX partitions, 24 GiB, does not hold TP 4 of Llama 3.3 70B (33.2 GiB).
    config = _config(
        tmp_path, "llama-3.3-70b", {"vllm_gpu_count": 64}, compute_partition="CPX", gpus_per_instance=4,
        tensor_parallel_size=4,
    )  # fmt: skip
    (line,) = refusal(config, as_part(mi300x_cpx(), 0x74A9))
    assert "more than 24 GiB (one CPX partition of 192 GiB, gpu_memory_gib of a part rocmfleet does not know)" in line
    half = replace(TOPOLOGY, gpus=tuple(replace(g, device_id=0x740F, gfx_target_version=90010) if g.index >= 4 else g
                                         for g in TOPOLOGY.gpus))  # fmt: skip
    (line,) = parts.host_part(half)[1]
    assert "MI300X (gfx942): 0000:05:00.0" in line and "device 0x740f (gfx90a): 0000:09:00.0" in line


def test_fp4_off_in_any_spelling_vllm_reads_as_off_is_accepted_on_gfx942(tmp_path):
    for off in ("0", "false", "False", "no"):
        config = _config(tmp_path, "llama-3.3-70b", {"vllm_env": {FP4: off}}, model_memory=None)
        assert len(vllmplace.placements(vllm_settings(config), TOPOLOGY)) == 8, off


# --- architecture: gfx950 ----------------------------------------------------------------------


def test_a_gfx950_host_needs_an_image_that_knows_it_and_takes_fp4(tmp_path):
    mi355x = as_part(TOPOLOGY, 0x75A3, 90500)
    old = _config(tmp_path, "llama-3.3-70b", vllm_version="0.9.2", model_memory=None)
    (line,) = refusal(old, mi355x)
    assert line.startswith(
        "the host's GPUs are MI355X (gfx950), which vLLM images before 0.10.2 do not run on; the profile's "
        "vllm_version is 0.9.2"
    )
    fp4 = _config(tmp_path, "llama-3.3-70b", {"vllm_env": {FP4: "1"}}, model_memory=None)
    placed = vllmplace.placements(vllm_settings(fp4), mi355x)
    assert {p.gfx_arch for p in placed.values()} == {"gfx950"}
    (line,) = refusal(fp4, TOPOLOGY)
    assert line.startswith(f"vllm_env {FP4}=1: on gfx942 with vLLM 0.33.0 it must be 0")
