"""The per-part hardware table and the host checks that read it, on the recorded trees in
``../shared/fixtures`` (MI300X CPX partitions, 8xMI308X in CPX, 8xMI210) and on parts derived from
them by device id: each case is placed correctly or refused naming the PCI address and the reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rocmfleet.config.profiles import load_profiles
from rocmfleet.domain import parts, vllm
from rocmfleet.domain.placement import PlacementError
from rocmfleet.domain.topology import PciSysfs, Topology
from rocmfleet.plan.instance import vllm_settings
from tests.unit.conftest import TOPOLOGY
from tests.unit.test_partitions import _config, mi300x_cpx, mi308x
from tests.unit.test_placement import mi210_nps1

FP4 = "VLLM_ROCM_USE_AITER_FP4BMM"


def as_part(topology: Topology, device_id: int, gfx_target_version: int = 90402) -> Topology:
    """The same tree with another part's device id (and architecture)."""
    gpus = tuple(replace(g, device_id=device_id, gfx_target_version=gfx_target_version) for g in topology.gpus)
    return replace(topology, gpus=gpus)


def refusal(config, topology: Topology) -> list[str]:
    with pytest.raises(PlacementError) as info:
        vllm.placements(vllm_settings(config), topology, "gpu-1")
    return list(info.value.problems)


# --- the table --------------------------------------------------------------------------------


def test_each_device_id_names_one_part_and_the_recorded_trees_are_known():
    ids = [i for p in parts.PARTS for i in p.device_ids]
    assert len(ids) == len(set(ids))
    assert parts.host_part(mi300x_cpx())[0].name == "MI300X"  # device_id 29857 = 0x74a1
    assert parts.host_part(mi308x())[0].name == "MI308X"  # device_id 29858 = 0x74a2
    assert parts.host_part(mi210_nps1()) == (None, [])  # not in the table: placed as before
    assert parts.device_gib(parts.part_of(0x74A2), "CPX") == 48.0  # the fixture's mem_banks size
    assert parts.device_gib(parts.part_of(0x74A1), "CPX") == 24.0
    assert parts.device_gib(parts.part_of(0x74A2), "QPX") is None


def test_gpus_of_two_parts_on_one_host_are_refused_naming_each():
    mixed = TOPOLOGY
    mixed = replace(mixed, gpus=tuple(replace(g, device_id=0x74A5) if g.index >= 4 else g for g in mixed.gpus))
    assert parts.host_part(mixed) == (
        None,
        [
            "the host's GPUs are different parts (MI300X: 0000:05:00.0, 0000:06:00.0, 0000:07:00.0, 0000:08:00.0; "
            "MI325X: 0000:09:00.0, 0000:0a:00.0, 0000:0b:00.0, 0000:0c:00.0); one profile's memory and partition "
            "modes cannot fit both: give each part its own hosts"
        ],
    )


def test_every_shipped_profile_is_placed_on_an_8x_mi300x_spx_nps1_host(tmp_path):
    spx_nps1 = replace(TOPOLOGY, gpus=tuple(replace(g, memory_partition="NPS1") for g in TOPOLOGY.gpus))
    for name in load_profiles():
        config = _config(tmp_path, name)
        assert len(vllm.placements(vllm_settings(config), spx_nps1)) == len(config.instances()), name


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
    placed = vllm.placements(vllm_settings(config), mi308x())
    assert len(placed) == 8 and all(len(p.gpus) == 4 for p in placed.values())
    (line,) = refusal(config, mi300x_cpx())
    assert line.startswith("model_memory: does not fit at tensor_parallel_size 4")
    assert "more than 24 GiB (one CPX partition of an MI300X's 192 GiB) x gpu_memory_utilization 0.92" in line
    assert line.endswith("the smallest tensor_parallel_size that fits is 8")


def test_a_model_that_fits_an_mi325x_is_refused_on_an_mi300a(tmp_path):
    # Llama 3.3 70B at TP 1: 131.4 GiB. An MI325X has 256 GiB: placed; an MI300A has 128: refused.
    config = _config(tmp_path, "llama-3.3-70b", instances_per_host=8)
    assert len(vllm.placements(vllm_settings(config), as_part(TOPOLOGY, 0x74A5))) == 8
    (line,) = refusal(config, as_part(TOPOLOGY, 0x74A0))
    assert "more than 128 GiB (MI300A) x gpu_memory_utilization" in line


# --- partition modes the part has, and KFD nodes that agree with them ---------------------------


def test_a_mode_the_part_does_not_have_is_refused():
    qpx = mi308x({g.physical: PciSysfs(None, "QPX", "NPS1") for g in mi308x().gpus})
    problems = parts.topology_problems(qpx, parts.part_of(0x74A2), 8)
    assert problems[0] == (
        "physical GPU 0000:0a:00.0: compute partition QPX, which an MI308X does not have (SPX, DPX, CPX)"
    )
    assert len(problems) == 8


def test_a_profile_mode_the_part_does_not_have_is_refused(tmp_path):
    config = _config(tmp_path, "llama-3.3-70b", compute_partition="CPX", model_memory=None)
    mi300a_cpx = as_part(mi300x_cpx(), 0x74A0)
    problems = refusal(config, mi300a_cpx)
    assert "profile llama-3.3-70b: compute_partition CPX, which an MI300A does not have (SPX, TPX)" in problems


def test_a_partition_change_that_did_not_finish_is_named_by_address():
    # The recorded MI308X tree: 4 KFD nodes per GPU (CPX). sysfs says GPU 0000:0a:00.0 is in SPX,
    # which gives an MI308X one node: the switch did not finish.
    tree = mi308x()
    first = tree.gpus[0].physical
    sysfs = {g.physical: PciSysfs(None, "SPX" if g.physical == first else "CPX", "NPS1") for g in tree.gpus}
    (line,) = parts.topology_problems(mi308x(sysfs), parts.part_of(0x74A2), 8)
    assert line.startswith(f"physical GPU {first}: compute partition SPX gives an MI308X 1 KFD node(s), the host")
    assert "a partition change that did not finish" in line


def test_partitions_of_one_gpu_in_two_modes_are_refused():
    tree = mi308x({g.physical: PciSysfs(None, "CPX", "NPS1") for g in mi308x().gpus})
    odd = replace(tree, gpus=tuple(replace(g, partition="DPX") if g.index == 1 else g for g in tree.gpus))
    (line,) = parts.topology_problems(odd, parts.part_of(0x74A2), 8)
    assert line.startswith(f"physical GPU {tree.gpus[0].physical}: its KFD nodes report different compute partitions")


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
    assert line.startswith(f"PCI device(s) {lost} are bound to amdgpu but have no KFD node")
    assert line.endswith("set vllm_gpu_count: 7 for this host to serve on the GPUs it has")
    seven_known = _config(tmp_path, "llama-3.3-70b", {"vllm_gpu_count": 7}, instances_per_host=7, model_memory=None)
    assert len(vllm.placements(vllm_settings(seven_known), seven)) == 7


def test_fewer_gpus_than_the_count_says_which_address_is_missing(tmp_path):
    seven, lost = seven_of_mi210(bound=False)
    config = _config(tmp_path, "llama-3.3-70b", model_memory=None)
    problems = refusal(config, seven)
    assert problems[0] == (
        f"the host shows 7 of its 8 GPUs (vllm_gpu_count): AMD accelerator(s) {lost} are on the PCI bus but not "
        "bound to amdgpu (`lspci -k -s <address>` on the host)"
    )
    assert "instance 'llama-3.3-70b-7': GPU(s) 7 not on this host (it has 0-6)" in problems
    gone = replace(seven, unbound_pci=())
    assert "a GPU fell off the bus" in refusal(config, gone)[0]


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
    placed = vllm.placements(vllm_settings(fp4), mi355x)
    assert {p.gfx_arch for p in placed.values()} == {"gfx950"}
    (line,) = refusal(fp4, TOPOLOGY)
    assert line.startswith(f"vllm_env {FP4}=1: on gfx942 with vLLM 0.33.0 it must be 0")
