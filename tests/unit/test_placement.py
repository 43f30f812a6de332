"""place(): expected values written by hand from the fixtures in ../shared/fixtures/ (reasoning in comments)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmfleet.domain.placement import InstanceShape, Placement, PlacementError, place
from rocmfleet.domain.smi import parse_rocm_smi_toponuma
from rocmfleet.domain.topology import (
    NumaNode,
    Topology,
    parse_kfd_topology,
    parse_lscpu_numa,
    read_kfd_tree,
    with_gpu_numa,
)

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"

# Constructed, not machine output: no lscpu was published for the MI210 KFD tree's host or the
# MI308X one. Two sockets in NPS1 (one NUMA node each), SMT2, Linux numbering siblings after all
# cores: 64 cores a socket for the MI210 host (its KFD CPU nodes have cpu_cores_count 64), 112 for
# the MI308X host (cpu_cores_count 112).
LSCPU_NPS1_2X64 = "NUMA node(s): 2\nNUMA node0 CPU(s): 0-63,128-191\nNUMA node1 CPU(s): 64-127,192-255\n"
LSCPU_NPS1_2X112 = "NUMA node(s): 2\nNUMA node0 CPU(s): 0-111,224-335\nNUMA node1 CPU(s): 112-223,336-447\n"


def kfd_gpus(path: Path):
    tree = read_kfd_tree(path)
    return tuple(parse_kfd_topology(tree["nodes"], tree["io_links"]))


def mi308x(lscpu: str | None = None) -> Topology:
    numa = tuple(parse_lscpu_numa(lscpu)) if lscpu else ()
    return Topology(gpus=kfd_gpus(FIXTURES / "kfd-topology/mi308x-8gpu-cpx/topology"), numa_nodes=numa)


def mi210_nps1() -> Topology:
    return Topology(
        gpus=kfd_gpus(FIXTURES / "kfd-topology/mi210-8gpu-xgmi-pcie"),
        numa_nodes=tuple(parse_lscpu_numa(LSCPU_NPS1_2X64)),
    )


def mi210_nps4() -> Topology:
    # NUMA per GPU and CPUs per node from the NPS4 host's rocm-smi and lscpu (same host, real
    # output); GPU identities (render minors) from the MI210 KFD tree of another 8×MI210 host.
    # The join is ours: it exercises the NPS4 path, it is not one machine.
    numa = parse_rocm_smi_toponuma((FIXTURES / "rocm-smi-showtoponuma-mi210-8gpu-nps4.txt").read_text())
    gpus = with_gpu_numa(kfd_gpus(FIXTURES / "kfd-topology/mi210-8gpu-xgmi-pcie"), numa)
    lscpu = parse_lscpu_numa((FIXTURES / "lscpu-numa-2socket-nps4.txt").read_text())
    return Topology(gpus=tuple(gpus), numa_nodes=tuple(lscpu))


def shape(name: str, port: int, gpus, tp: int, heads: int | None = None) -> InstanceShape:
    return InstanceShape(name=name, port=port, gpus=tuple(gpus), tensor_parallel_size=tp, attention_heads=heads)


def cuda(n: int) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(n)))}


# --- MI308X CPX: render minors with gaps --------------------------------------------------------


def test_a_gpu_the_driver_did_not_bring_up_is_named_by_its_pci_address():
    # The recorded 8xMI210 tree less one GPU's KFD node; sysfs still lists its PCI device under amdgpu.
    whole = mi210_nps1()
    lost = whole.gpus[-1]
    seven = Topology(
        gpus=whole.gpus[:-1], numa_nodes=whole.numa_nodes, amdgpu_pci=tuple(sorted(g.physical for g in whole.gpus))
    )
    assert seven.without_kfd_node() == [lost.physical]
    with pytest.raises(PlacementError) as info:
        place([shape(f"g{i}", 8000 + i, [i], 1) for i in range(8)], seven)
    assert info.value.problems[-1] == (
        f"the host shows 7 GPU(s) to ROCm, and PCI device(s) {lost.physical} bound to amdgpu have no KFD node: "
        "GPUs the driver did not bring up (`dmesg | grep -i amdgpu` on the host); repair them, or give this host "
        "fewer GPUs (vllm_instances)"
    )
    assert "instance 'g7': GPU(s) 7 not on this host (it has 0-6)" in info.value.problems
    assert len(place([shape(f"g{i}", 8000 + i, [i], 1) for i in range(7)], seven)) == 7  # what fits still places


def test_mi308x_render_nodes_follow_drm_render_minor():
    # KFD nodes 2-5 (GPUs 0-3) have drm_render_minor 128-131; nodes 6-9 (GPUs 4-7) have 136-139,
    # so GPU 4 -> renderD136, not renderD132. All eight link (io_link type 2) to CPU node 0, so a
    # and b split node 0 (0-111,224-335: two sibling ranges of 112): 56 + 56 of each range.
    a, b = place([shape("a", 8000, range(4), 4), shape("b", 8001, range(4, 8), 4)], mi308x(LSCPU_NPS1_2X112))
    assert a == Placement(
        name="a",
        render_nodes=tuple(f"/dev/dri/renderD{m}" for m in (128, 129, 130, 131)),
        visible_devices_env=cuda(4),
        cpuset_cpus="0-55,224-279",
        cpuset_mems="0",
        notes=("NUMA node 0 (CPUs 0-111,224-335): share 1 of 2 = 0-55,224-279, each sibling range split alike",),
    )
    # Inside b's container its GPUs are 0-3 again (only its render nodes are passed).
    assert b.render_nodes == tuple(f"/dev/dri/renderD{m}" for m in (136, 137, 138, 139))
    assert b.visible_devices_env == cuda(4)
    assert (b.cpuset_cpus, b.cpuset_mems) == ("56-111,280-335", "0")
    assert b.notes == (
        "NUMA node 0 (CPUs 0-111,224-335): share 2 of 2 = 56-111,280-335, each sibling range split alike",
    )


def test_mi308x_instance_spanning_sockets_gets_the_union():
    # GPUs 12-15 are KFD nodes 14-17 (bus c8, domain 0, minors 152-155, CPU node 0); GPUs 16-19
    # are nodes 18-21 (bus 0b, domain 1, minors 160-163, CPU node 1).
    (p,) = place([shape("wide", 8000, range(12, 20), 8, heads=64)], mi308x(LSCPU_NPS1_2X112))
    assert p.render_nodes == tuple(f"/dev/dri/renderD{m}" for m in (152, 153, 154, 155, 160, 161, 162, 163))
    assert p.visible_devices_env == cuda(8)
    assert p.cpuset_cpus == "0-447"
    assert p.cpuset_mems == "0-1"
    assert p.notes == ("spans NUMA nodes 0-1: bound to their union",)


def test_mi308x_without_cpu_lists_binds_nothing_and_says_so():
    (p,) = place([shape("a", 8000, [16], 1)], mi308x())
    # GPU 16 = KFD node 18, drm_render_minor 160, CPU node 1; no lscpu -> no CPU list.
    assert p.render_nodes == ("/dev/dri/renderD160",)
    assert (p.cpuset_cpus, p.cpuset_mems) == ("", "")
    assert p.notes == ("NUMA node(s) 1: CPU list unknown: no CPU/memory binding",)


# --- MI210, NPS1: GPU0-3 -> node 0, GPU4-7 -> node 1 -------------------------------------------


def test_mi210_nps1_one_instance_per_gpu():
    # KFD nodes 2-9 = GPUs 0-7, drm_render_minor 128-135 (no gaps on this host). Nodes 2-5 link to
    # CPU node 0, nodes 6-9 to CPU node 1. Four instances per node: each sibling range of 64
    # (0-63 and 128-191 on node 0) splits into 16s, share j taking the j-th 16 of both.
    placements = place([shape(f"g{i}", 8000 + i, [i], 1) for i in range(8)], mi210_nps1())
    assert [p.render_nodes for p in placements] == [(f"/dev/dri/renderD{128 + i}",) for i in range(8)]
    assert [p.visible_devices_env for p in placements] == [cuda(1)] * 8
    assert [p.cpuset_cpus for p in placements] == [
        "0-15,128-143",
        "16-31,144-159",
        "32-47,160-175",
        "48-63,176-191",
        "64-79,192-207",
        "80-95,208-223",
        "96-111,224-239",
        "112-127,240-255",
    ]
    assert [p.cpuset_mems for p in placements] == ["0"] * 4 + ["1"] * 4
    assert placements[2].notes == (
        "NUMA node 0 (CPUs 0-63,128-191): share 3 of 4 = 32-47,160-175, each sibling range split alike",
    )


def test_render_nodes_in_host_order_whatever_the_profile_order():
    (p,) = place([shape("a", 8000, [5, 4], 2)], mi210_nps1())
    assert p.render_nodes == ("/dev/dri/renderD132", "/dev/dri/renderD133")


# --- MI210, NPS4: GPU -> NUMA 3,2,1,0,7,6,5,4 ---------------------------------------------------


def test_mi210_nps4_per_gpu():
    # rocm-smi: GPU[0] Numa Node 3 ... GPU[7] Numa Node 4. lscpu: node3 48-63,176-191;
    # node2 32-47,160-175; node7 112-127,240-255; node4 64-79,192-207.
    placements = place([shape(f"g{i}", 8000 + i, [i], 1) for i in range(8)], mi210_nps4())
    expected = {
        0: ("48-63,176-191", "3"),
        1: ("32-47,160-175", "2"),
        2: ("16-31,144-159", "1"),
        3: ("0-15,128-143", "0"),
        4: ("112-127,240-255", "7"),
        5: ("96-111,224-239", "6"),
        6: ("80-95,208-223", "5"),
        7: ("64-79,192-207", "4"),
    }
    assert {i: (p.cpuset_cpus, p.cpuset_mems) for i, p in enumerate(placements)} == expected


def test_mi210_nps4_spanning_instances():
    # GPUs 0,1 -> nodes 3,2: 32-63,160-191 and mems 2-3. GPUs 4-7 -> nodes 7,6,5,4 (socket 1):
    # 64-127,192-255 and mems 4-7.
    a, b = place([shape("a", 8000, [0, 1], 2), shape("b", 8001, [4, 5, 6, 7], 4, heads=32)], mi210_nps4())
    assert (a.cpuset_cpus, a.cpuset_mems) == ("32-63,160-191", "2-3")
    assert (b.cpuset_cpus, b.cpuset_mems) == ("64-127,192-255", "4-7")
    assert b.notes == ("spans NUMA nodes 4-7: bound to their union",)
    assert b.render_nodes == tuple(f"/dev/dri/renderD{m}" for m in (132, 133, 134, 135))


# --- CPU sets shared out: several instances on one NUMA node ------------------------------------

# Constructed like the two above: 2 sockets of 96 cores in NPS1, SMT2, siblings numbered after all
# cores (the MI300X CPX KFD testdata has cpu_cores_count 96 per CPU node).
LSCPU_NPS1_2X96 = "NUMA node(s): 2\nNUMA node0 CPU(s): 0-95,192-287\nNUMA node1 CPU(s): 96-191,288-383\n"


def test_eight_tp1_instances_on_two_nodes_get_disjoint_sibling_aligned_quarters():
    # MI210 KFD tree: GPUs 0-3 -> node 0, 4-7 -> node 1 (the §7.1 layout of 8-GPU OAM boards).
    # Node 0 = 0-95 and their siblings 192-287: 96 / 4 = 24 per range per instance.
    topo = Topology(
        gpus=kfd_gpus(FIXTURES / "kfd-topology/mi210-8gpu-xgmi-pcie"),
        numa_nodes=tuple(parse_lscpu_numa(LSCPU_NPS1_2X96)),
    )
    placements = place([shape(f"g{i}", 8000 + i, [i], 1) for i in range(8)], topo)
    assert [(p.cpuset_cpus, p.cpuset_mems) for p in placements] == [
        ("0-23,192-215", "0"),
        ("24-47,216-239", "0"),
        ("48-71,240-263", "0"),
        ("72-95,264-287", "0"),
        ("96-119,288-311", "1"),
        ("120-143,312-335", "1"),
        ("144-167,336-359", "1"),
        ("168-191,360-383", "1"),
    ]


def test_nps1_two_tp2_instances_per_socket():
    # MI210 NPS1: a, b on node 0 (0-63,128-191), c, d on node 1 (64-127,192-255): halves of each range.
    placements = place(
        [
            shape("a", 8000, [0, 1], 2),
            shape("b", 8001, [2, 3], 2),
            shape("c", 8002, [4, 5], 2),
            shape("d", 8003, [6, 7], 2),
        ],
        mi210_nps1(),
    )
    assert [(p.name, p.cpuset_cpus, p.cpuset_mems) for p in placements] == [
        ("a", "0-31,128-159", "0"),
        ("b", "32-63,160-191", "0"),
        ("c", "64-95,192-223", "1"),
        ("d", "96-127,224-255", "1"),
    ]


def test_tp8_over_both_sockets_has_every_cpu_and_no_share_note():
    (p,) = place([shape("all", 8000, range(8), 8)], mi210_nps1())
    assert (p.cpuset_cpus, p.cpuset_mems) == ("0-255", "0-1")
    assert p.notes == ("spans NUMA nodes 0-1: bound to their union",)


def test_spanning_instance_takes_its_share_of_each_node_in_instance_order():
    # a (GPUs 0,1) and wide (2-5) share node 0: a first. wide and b (6,7) share node 1: wide first.
    # node 0: a 0-31,128-159 | wide 32-63,160-191; node 1: wide 64-95,192-223 | b 96-127,224-255.
    a, wide, b = place(
        [shape("a", 8000, [0, 1], 2), shape("wide", 8001, [2, 3, 4, 5], 4), shape("b", 8002, [6, 7], 2)],
        mi210_nps1(),
    )
    assert (a.cpuset_cpus, a.cpuset_mems) == ("0-31,128-159", "0")
    assert (wide.cpuset_cpus, wide.cpuset_mems) == ("32-95,160-223", "0-1")
    assert (b.cpuset_cpus, b.cpuset_mems) == ("96-127,224-255", "1")
    assert wide.notes == (
        "spans NUMA nodes 0-1: bound to their union",
        "NUMA node 0 (CPUs 0-63,128-191): share 2 of 2 = 32-63,160-191, each sibling range split alike",
        "NUMA node 1 (CPUs 64-127,192-255): share 1 of 2 = 64-95,192-223, each sibling range split alike",
    )


def nps4_cpx() -> Topology:
    # CPU side: the NPS4 lscpu fixture (node 3 = 48-63,176-191, node 2 = 32-47,160-175). GPU side:
    # the MI308X CPX KFD tree's first two devices (GPUs 0-3 and 4-7: four CPX partitions each,
    # one unique_id per device), put on the NUMA nodes the NPS4 host's rocm-smi gives its GPU[0]
    # and GPU[1] (3 and 2). The join is ours, to have partitions share an NPS4 quadrant.
    gpus = with_gpu_numa(
        kfd_gpus(FIXTURES / "kfd-topology/mi308x-8gpu-cpx/topology")[:8], {i: 3 if i < 4 else 2 for i in range(8)}
    )
    lscpu = parse_lscpu_numa((FIXTURES / "lscpu-numa-2socket-nps4.txt").read_text())
    return Topology(gpus=tuple(gpus), numa_nodes=tuple(lscpu))


def test_nps4_partitions_split_their_quadrant():
    # Node 3: 16 + 16 CPUs, four TP1 instances -> 4 of each range; the TP4 instance has node 2 alone.
    placements = place(
        [shape(f"p{i}", 8000 + i, [i], 1) for i in range(4)] + [shape("q", 8004, range(4, 8), 4)], nps4_cpx()
    )
    assert [(p.cpuset_cpus, p.cpuset_mems) for p in placements] == [
        ("48-51,176-179", "3"),
        ("52-55,180-183", "3"),
        ("56-59,184-187", "3"),
        ("60-63,188-191", "3"),
        ("32-47,160-175", "2"),
    ]
    assert placements[4].notes == ()


def test_uneven_split_gives_the_first_instances_one_more_per_range():
    # Node 3 of the NPS4 fixture has 16 CPUs per range; 3 instances -> 6, 5, 5 of each.
    placements = place([shape(f"p{i}", 8000 + i, [i], 1) for i in range(3)], nps4_cpx())
    assert [p.cpuset_cpus for p in placements] == ["48-53,176-181", "54-58,182-186", "59-63,187-191"]


def test_two_cpus_two_instances_get_one_each():
    # The lab's case: one NUMA node holding this machine's 2 CPUs (tests/lab/rootfs.py), GPUs 0, 1 on it.
    topo = Topology(mi210_nps1().gpus[:2], (NumaNode(0, (0, 1), 1024),))
    a, b = place([shape("a", 8000, [0], 1), shape("b", 8001, [1], 1)], topo)
    assert (a.cpuset_cpus, a.cpuset_mems, b.cpuset_cpus, b.cpuset_mems) == ("0", "0", "1", "0")
    assert a.notes == ("NUMA node 0 (CPUs 0-1): share 1 of 2 = 0",)


def test_ranges_of_different_lengths_are_split_as_one_list():
    # 0-2 and 5-6 are not sibling ranges (3 != 2): split 0,1,2,5,6 in order -> 3 + 2.
    topo = Topology(mi210_nps1().gpus[:2], (NumaNode(0, (0, 1, 2, 5, 6), 1024),))
    a, b = place([shape("a", 8000, [0], 1), shape("b", 8001, [1], 1)], topo)
    assert (a.cpuset_cpus, b.cpuset_cpus) == ("0-2", "5-6")
    assert a.notes == ("NUMA node 0 (CPUs 0-2,5-6): share 1 of 2 = 0-2",)


def test_a_node_with_fewer_cpus_than_instances_is_refused():
    topo = Topology(mi210_nps1().gpus[:3], (NumaNode(0, (0, 1), 1024),))
    problems = refusal([shape("a", 8000, [0], 1), shape("b", 8001, [1], 1), shape("c", 8002, [2], 1)], topo)
    assert problems == (
        "NUMA node 0: 2 CPU(s) (0-1), fewer than the 3 instances that share it; instances sharing it: 'a', 'b', 'c'",
    )


def test_sibling_ranges_shorter_than_the_instances_are_refused():
    # 0-1 and 4-5 are sibling ranges of 2: three instances cannot each get whole cores.
    topo = Topology(mi210_nps1().gpus[:3], (NumaNode(0, (0, 1, 4, 5), 1024),))
    problems = refusal([shape("a", 8000, [0], 1), shape("b", 8001, [1], 1), shape("c", 8002, [2], 1)], topo)
    assert problems == (
        "NUMA node 0: 4 CPUs (0-1,4-5) in 2 sibling ranges of 2, fewer per range than the 3 instances"
        " that share it (SMT siblings are kept together); instances sharing it: 'a', 'b', 'c'",
    )


def test_cpu_refusals_come_with_the_shape_problems():
    topo = Topology(mi210_nps1().gpus[:3], (NumaNode(0, (0,), 1024),))
    problems = refusal([shape("a", 0, [0], 1), shape("b", 8001, [1], 1)], topo)
    assert problems == (
        "instance 'a': port 0 is not in 1-65535",
        "NUMA node 0: 1 CPU(s) (0), fewer than the 2 instances that share it; instances sharing it: 'a', 'b'",
    )


# --- unknown NUMA -------------------------------------------------------------------------------


def test_unknown_numa_node_means_no_binding():
    # The MI300X CPX node-2 file alone, without its io_links: nothing says its NUMA node (-1).
    nodes = {
        0: (FIXTURES / "kfd-topology-mi300x-cpx-node0-cpu-properties.txt").read_text(),
        2: (FIXTURES / "kfd-topology-mi300x-cpx-node2-gpu-properties.txt").read_text(),
    }
    topo = Topology(gpus=tuple(parse_kfd_topology(nodes)), numa_nodes=(NumaNode(0, (0, 1), 1024),))
    (p,) = place([shape("a", 8000, [0], 1)], topo)
    assert p.render_nodes == ("/dev/dri/renderD128",)
    assert (p.cpuset_cpus, p.cpuset_mems) == ("", "")
    assert p.notes == ("GPU(s) 0 have no known NUMA node: no CPU/memory binding",)


def test_memoryless_node_is_left_out_of_mems():
    base = mi210_nps1()
    topo = Topology(base.gpus, (NumaNode(0, (0, 1), 0), NumaNode(1, (2, 3), 1024)))
    (p,) = place([shape("a", 8000, [3, 4], 2)], topo)
    assert (p.cpuset_cpus, p.cpuset_mems) == ("0-3", "1")
    assert "NUMA node(s) 0 have no memory: not in cpuset_mems" in p.notes


def test_never_sets_hip_visible_devices():
    for p in place([shape("a", 8000, range(8), 8)], mi210_nps4()):
        assert set(p.visible_devices_env) == {"CUDA_VISIBLE_DEVICES"}


# --- refusals -----------------------------------------------------------------------------------


def refusal(instances, topology=None) -> tuple[str, ...]:
    with pytest.raises(PlacementError) as info:
        place(instances, topology or mi210_nps1())
    assert isinstance(info.value, ValueError)
    for problem in info.value.problems:
        assert problem in str(info.value)
    return info.value.problems


@pytest.mark.parametrize(
    ("instances", "problem"),
    [
        (
            [shape("a", 8000, [0, 1, 2, 3], 2)],
            "instance 'a': tensor_parallel_size 2 uses 2 of its 4 GPUs: vLLM's world is tensor x pipeline parallel "
            "size (2 x 1 here), so 2 GPU(s) would sit idle; give the instance 2 GPU(s) or set tensor_parallel_size 4",
        ),
        (
            [shape("a", 8000, [0], 2)],
            "instance 'a': tensor_parallel_size 2 exceeds its 1 GPU(s): vLLM starts one worker per rank and would "
            "wait for 1 GPU(s) it cannot see",
        ),
        ([shape("a", 8000, [0], 0)], "instance 'a': tensor_parallel_size 0 must be at least 1"),
        ([shape("a", 8000, [7, 8, 9], 1)], "instance 'a': GPU(s) 8-9 not on this host (it has 0-7)"),
        (
            [shape("a", 8000, [0, 1], 2), shape("b", 8001, [1, 2], 2)],
            "instances 'a', 'b' share GPU 1",
        ),
        ([shape(f"g{i}", 8000 + i, [i % 8], 1) for i in range(9)], "9 instances but the host has 8 GPU(s)"),
        (
            [shape("a", 8000, [0, 1, 2], 3, heads=40)],
            "instance 'a': attention_heads 40 not divisible by tensor_parallel_size 3",
        ),
        ([shape("a", 8000, [0], 1), shape("b", 8000, [1], 1)], "instances 'a', 'b' share port 8000"),
        ([shape("a", 8000, [0], 1), shape("a", 8001, [1], 1)], "instances 'a', 'a' share name a"),
        ([shape("a", 0, [0], 1)], "instance 'a': port 0 is not in 1-65535"),
        ([shape("a", 8000, [0, 0], 2)], "instance 'a': lists a GPU more than once: [0, 0]"),
    ],
)
def test_each_refusal(instances, problem):
    assert problem in refusal(instances)


def test_all_problems_at_once():
    problems = refusal(
        [
            shape("a", 8000, [0, 1, 2], 2, heads=40),  # TP does not divide 3 GPUs
            shape("b", 8000, [2, 9], 2, heads=40),  # same port as a; GPU 9 missing; GPU 2 shared with a
            shape("c", 8002, [3], 1, heads=7),  # fine
            shape("d", 8003, [4, 5, 6], 3, heads=40),  # 40 heads not divisible by TP 3
        ]
    )
    assert problems == (
        "instance 'a': tensor_parallel_size 2 uses 2 of its 3 GPUs: vLLM's world is tensor x pipeline parallel size "
        "(2 x 1 here), so 1 GPU(s) would sit idle; give the instance 2 GPU(s) or set tensor_parallel_size 3",
        "instance 'b': GPU(s) 9 not on this host (it has 0-7)",
        "instance 'd': attention_heads 40 not divisible by tensor_parallel_size 3",
        "instances 'a', 'b' share GPU 2",
        "instances 'a', 'b' share port 8000",
    )
