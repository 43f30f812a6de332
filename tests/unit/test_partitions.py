"""Compute/memory partitions: modes per physical GPU, refusal with the fix, spreading in CPX.

Expected placements are written by hand (reasoning in comments) from the recorded KFD files in
../shared/fixtures: the whole MI308X CPX tree, and an 8×MI300X CPX host assembled from the
recorded MI300X CPX node files (one GPU partition's properties and its PCIe io_link).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rocmfleet.config.profiles import PROFILES_DIR, profile_path
from rocmfleet.config.settings import host_config
from rocmfleet.domain import vllmplace
from rocmfleet.domain.partitionmodes import PartitionPolicy, policy_problems
from rocmfleet.domain.partitions import mode_problems, spread
from rocmfleet.domain.placement import PlacementError
from rocmfleet.domain.topology import PciSysfs, Topology, build_topology, read_kfd_tree
from rocmfleet.facts.topology import GpuTopology
from rocmfleet.plan.instance import vllm_settings
from tests.unit.conftest import LAB_PROFILE
from tests.unit.test_topology import fact_lines

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
MI308X = FIXTURES / "kfd-topology" / "mi308x-8gpu-cpx" / "topology"
PROFILES = PROFILES_DIR
DIGEST = "sha256:" + "ab" * 32

#: Two sockets, NPS1, SMT2 (constructed: the MI300X CPX testdata's CPU nodes have 96 cores each).
LSCPU_2X96 = "NUMA node(s): 2\nNUMA node0 CPU(s): 0-95,192-287\nNUMA node1 CPU(s): 96-191,288-383\n"
LSCPU_2X112 = "NUMA node(s): 2\nNUMA node0 CPU(s): 0-111,224-335\nNUMA node1 CPU(s): 112-223,336-447\n"
#: MI300X buses of the CPX testdata: 05/27/47/65 -> CPU node 0, 85/a7/c7/e5 -> CPU node 1 (reference §7.1).
MI300X_BUSES = (0x05, 0x27, 0x47, 0x65, 0x85, 0xA7, 0xC7, 0xE5)


def _set(props: str, key: str, value: int) -> str:
    return re.sub(rf"^{key} \d+$", f"{key} {value}", props, flags=re.M)


def mi300x_cpx(lscpu: str = LSCPU_2X96, sysfs: dict | None = None) -> Topology:
    """8×MI300X in CPX: 64 KFD GPU nodes (2 + 8g + p) from the recorded partition properties, the
    partition number in the PCI function bits (location_id = bus << 8 | p), render minors 128 + 8g + p."""
    gpu = (FIXTURES / "kfd-topology-mi300x-cpx-node2-gpu-properties.txt").read_text()
    link = (FIXTURES / "kfd-topology-mi300x-cpx-node2-iolink0-properties.txt").read_text()
    cpu = (FIXTURES / "kfd-topology-mi300x-cpx-node0-cpu-properties.txt").read_text()
    nodes, links = {0: cpu, 1: cpu}, {0: [], 1: []}
    for g, bus in enumerate(MI300X_BUSES):
        for p in range(8):
            node = 2 + 8 * g + p
            props = _set(_set(gpu, "location_id", bus << 8 | p), "drm_render_minor", 128 + 8 * g + p)
            nodes[node] = _set(props, "unique_id", 1000 + g)
            links[node] = [_set(_set(link, "node_from", node), "node_to", 0 if g < 4 else 1)]
    return build_topology({"nodes": nodes, "io_links": links}, sysfs, lscpu)


def mi308x(sysfs: dict | None = None) -> Topology:
    return build_topology(read_kfd_tree(MI308X), sysfs, LSCPU_2X112)


# --- modes per physical GPU -------------------------------------------------------------------


def test_partitions_group_by_physical_gpu():
    # MI308X CPX: 32 KFD GPU nodes, 4 per device (location_id 2560..2563 = bus 0a functions 0-3).
    groups = mi308x().physical_gpus()
    assert list(groups) == [
        "0000:0a:00.0", "0000:80:00.0", "0000:a4:00.0", "0000:c8:00.0",
        "0001:0b:00.0", "0001:81:00.0", "0001:a5:00.0", "0001:c9:00.0",
    ]  # fmt: skip
    assert [g.index for g in groups["0000:80:00.0"]] == [4, 5, 6, 7]
    assert {len(parts) for parts in groups.values()} == {4}
    # The 8×MI300X host: 8 devices of 8 partitions, NUMA 0 for the first four.
    topo = mi300x_cpx()
    assert [len(p) for p in topo.physical_gpus().values()] == [8] * 8
    assert [p[0].numa_node for p in topo.physical_gpus().values()] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.gfx_arch for g in topo.gpus} == {"gfx942"}


def test_spx_profile_refused_on_a_cpx_host_with_the_fix():
    problems = mode_problems(mi300x_cpx(), PartitionPolicy(), "gpu-1", "llama-3.3-70b")
    assert len(problems) == 1  # one line for the eight GPUs in the same mode
    line = problems[0]
    assert line.startswith("host gpu-1: physical GPU(s) 0000:05:00.0, 0000:27:00.0,")
    assert "in compute partition CPX; profile llama-3.3-70b needs SPX" in line
    assert "run `amd-smi set --gpu all --compute-partition SPX`" in line
    assert "compute_partition: CPX" in line


def test_nps4_from_sysfs_refused_unless_the_profile_says_so():
    # sysfs at function 0 of each device: CPX and NPS4 (the fact reads current_memory_partition).
    sysfs = {g.physical: PciSysfs(None, "CPX", "NPS4") for g in mi308x().gpus}
    topo = mi308x(sysfs)
    assert {(g.partition, g.memory_partition) for g in topo.gpus} == {("CPX", "NPS4")}
    problems = mode_problems(topo, PartitionPolicy("CPX", "NPS1"), "gpu-2", "small")
    assert len(problems) == 1
    assert "in memory partition NPS4; profile small needs NPS1" in problems[0]
    assert "`amd-smi set --gpu all --memory-partition NPS1`" in problems[0]
    assert mode_problems(topo, PartitionPolicy("CPX", "NPS4")) == []


def test_remedies_come_in_an_order_the_driver_accepts():
    # The recorded MI300X CPX tree with sysfs saying NPS4: back to SPX/NPS1 needs NPS1 first (the
    # driver refuses SPX while the memory is NPS4); from NPS1 towards CPX/NPS4 needs CPX first.
    cpx = mi300x_cpx()
    sysfs = {g.physical: PciSysfs(None, "CPX", "NPS4") for g in cpx.gpus}
    memory, compute = mode_problems(mi300x_cpx(sysfs=sysfs), PartitionPolicy(), "gpu-1")
    assert "in memory partition NPS4" in memory and "--memory-partition NPS1` on the host," in memory
    assert "in compute partition CPX" in compute
    assert "--compute-partition SPX` on the host after the memory partition change above" in compute
    sysfs = {g.physical: PciSysfs(None, "DPX", "NPS1") for g in cpx.gpus}
    compute, memory = mode_problems(mi300x_cpx(sysfs=sysfs), PartitionPolicy("CPX", "NPS4"), "gpu-1")
    assert "--compute-partition CPX` on the host," in compute
    assert "--memory-partition NPS4` on the host after the compute partition change above" in memory


def test_unknown_modes_are_not_held_against_the_host():
    # No sysfs: memory mode unknown; MI308X compute mode inferred CPX from KFD.
    assert mode_problems(mi308x(), PartitionPolicy("CPX", "NPS1")) == []


def test_nps4_needs_cpx():
    assert policy_problems(PartitionPolicy("SPX", "NPS4"))
    assert policy_problems(PartitionPolicy("CPX", "NPS4")) == []


def test_fact_reads_memory_partition():
    lines = fact_lines(read_kfd_tree(MI308X), ("0000:0a:00.0 0 CPX NPS4", "0000:80:00.0 0 CPX -"))
    topo = GpuTopology().process(lines)
    assert [(g.partition, g.memory_partition) for g in topo.gpus[:8]] == [("CPX", "NPS4")] * 4 + [("CPX", None)] * 4
    assert "current_memory_partition" in GpuTopology().command()


# --- spreading --------------------------------------------------------------------------------


def test_eight_tp1_instances_one_per_physical_gpu_alternating_numa():
    # Each instance goes to the NUMA node with fewer instances (node 0 first), on its physical GPU
    # with the most free partitions: 05 (GPU 0), 85 (32), 27 (8), a7 (40), 47 (16), c7 (48), 65 (24), e5 (56).
    gpus, problems = spread([f"i{n}" for n in range(8)], [1] * 8, mi300x_cpx(), PartitionPolicy("CPX"))
    assert problems == []
    assert gpus == [(0,), (32,), (8,), (40,), (16,), (48,), (24,), (56,)]


def test_tp8_instances_take_one_partition_of_each_physical_gpu():
    # No NUMA node has 8 physical GPUs: each instance takes partition k of all eight.
    gpus, problems = spread(["a", "b", "c"], [8, 8, 8], mi300x_cpx(), PartitionPolicy("CPX"))
    assert problems == []
    assert gpus == [tuple(range(k, 64, 8)) for k in range(3)]


def test_tp4_instances_stay_on_one_numa_node_each():
    # MI308X: node 0 has 0a, 80, a4, c8 (GPUs 0, 4, 8, 12 ...), node 1 the domain-1 devices (16...).
    gpus, problems = spread(["a", "b", "c", "d"], [4] * 4, mi308x(), PartitionPolicy("CPX"))
    assert problems == []
    assert gpus == [(0, 4, 8, 12), (16, 20, 24, 28), (1, 5, 9, 13), (17, 21, 25, 29)]


def test_more_ranks_than_physical_gpus_refused_unless_allowed():
    # MI308X has 8 physical GPUs: a TP-16 group cannot have each rank on its own GPU.
    gpus, problems = spread(["big"], [16], mi308x(), PartitionPolicy("CPX"))
    assert gpus == [()]
    assert problems == [
        "instance 'big': needs 16 partitions on distinct physical GPUs, but only 8 physical GPU(s) have a "
        "free partition (32 free partitions)"
    ]
    gpus, problems = spread(["big"], [16], mi308x(), PartitionPolicy("CPX", tp_on_one_gpu=True))
    assert problems == [] and gpus == [tuple(range(16))]


# --- through the profile and vllmplace.placements --------------------------------------------------


def _config(tmp_path, profile: str, host: dict | None = None, **changes):
    data = yaml.safe_load(profile_path(profile, LAB_PROFILE.parent).read_text())
    data.update(changes)
    (tmp_path / f"{profile}.yml").write_text(yaml.safe_dump(data))
    return host_config({"vllm_profile": profile, **(host or {})}, tmp_path)


def test_shipped_llama_on_a_cpx_host_is_refused(tmp_path):
    config = _config(tmp_path, "llama-3.3-70b")
    with pytest.raises(PlacementError) as info:
        vllmplace.placements(vllm_settings(config), mi300x_cpx(), host="gpu-7")
    assert "host gpu-7: physical GPU(s) 0000:05:00.0" in str(info.value)
    assert "amd-smi set --gpu all --compute-partition SPX" in str(info.value)


def test_cpx_profile_tp8_spans_physical_gpus(tmp_path):
    # A TP-8 profile opted into CPX: 8 instances of 8 partitions, each on all 8 physical GPUs.
    config = _config(
        tmp_path,
        "deepseek-r1",
        host={"vllm_gpu_count": 64},  # 8 physical GPUs x 8 CPX partitions
        compute_partition="CPX",
        instances_per_host=8,
        model_memory=None,
    )
    placed = vllmplace.placements(vllm_settings(config), mi300x_cpx())
    assert len(placed) == 8
    for k, p in enumerate(placed.values()):
        assert p.gpus == tuple(range(k, 64, 8))
        assert p.render_nodes == tuple(f"/dev/dri/renderD{128 + 8 * g + k}" for g in range(8))
        assert p.cpuset_mems == "0-1"
    physical = {g.index: g.physical for g in mi300x_cpx().gpus}
    assert all(len({physical[i] for i in p.gpus}) == 8 for p in placed.values())


def test_cpx_profile_tp1_instances_one_per_physical_gpu(tmp_path):
    config = _config(tmp_path, "llama-3.3-70b", compute_partition="CPX", model_memory=None)
    placed = vllmplace.placements(vllm_settings(config), mi300x_cpx())
    assert [p.gpus for p in placed.values()] == [(0,), (32,), (8,), (40,), (16,), (48,), (24,), (56,)]
    assert [p.cpuset_mems for p in placed.values()] == ["0", "1"] * 4
    assert placed["llama-3.3-70b-1"].notes[-1] == (
        "compute partition CPX: GPU(s) 32 are partitions of physical GPU(s) 0000:85:00.0"
    )


def test_explicit_tp_group_on_one_physical_gpu_refused(tmp_path):
    data = {
        "vllm_profile": "qwen",
        "vllm_instances": [{"name": "q", "port": 8000, "gpus": [0, 1]}],
    }
    (tmp_path / "qwen.yml").write_text(
        yaml.safe_dump(
            {
                **yaml.safe_load((PROFILES / "qwen3-30b-a3b.yml").read_text()),
                "name": "qwen",
                "compute_partition": "CPX",
                "tensor_parallel_size": 2,
                "instances_per_host": 1,
                "gpus_per_instance": 2,
                "attention_heads": None,
            }
        )
    )
    config = host_config(data, tmp_path)
    with pytest.raises(PlacementError, match="TP ranks on GPUs 0-1 share physical GPU"):
        vllmplace.placements(vllm_settings(config), mi300x_cpx())
    (tmp_path / "qwen.yml").write_text((tmp_path / "qwen.yml").read_text() + "tp_on_one_gpu: true\n")
    assert vllmplace.placements(vllm_settings(host_config(data, tmp_path)), mi300x_cpx())["q"].gpus == (0, 1)
