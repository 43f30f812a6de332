"""Topology parsers and the GpuTopology fact, on the real outputs in ../shared/fixtures/ (SOURCES.md there)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rocmfleet.domain.smi import (
    SmiGpu,
    SmiGpuLinks,
    parse_amd_smi_list,
    parse_amd_smi_topology_json,
    parse_rocm_smi_toponuma,
)
from rocmfleet.domain.topology import (
    Gpu,
    KfdTree,
    NumaNode,
    PciSysfs,
    TopologyParseError,
    format_id_list,
    parse_id_list,
    parse_kfd_properties,
    parse_kfd_topology,
    parse_lscpu_numa,
    parse_node_meminfo,
    pci_address,
    read_kfd_tree,
    with_gpu_numa,
)
from rocmfleet.facts.topology import END, HEADER, SCRIPT, GpuTopology, parse_fact_output

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures"
MI308X = FIXTURES / "kfd-topology" / "mi308x-8gpu-cpx" / "topology"
MI210 = FIXTURES / "kfd-topology" / "mi210-8gpu-xgmi-pcie"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def tool_output(name: str) -> str:
    """A fixture without its leading ``$ command`` line (the post's prompt, not tool output)."""
    text = fixture(name)
    return text.split("\n", 1)[1] if text.startswith("$ ") else text


# --- id lists ---------------------------------------------------------------------------------


def test_id_lists_round_trip():
    assert parse_id_list("0-2,8,10-11") == (0, 1, 2, 8, 10, 11)
    assert parse_id_list("") == ()
    assert format_id_list([11, 0, 1, 2, 8, 10, 2]) == "0-2,8,10-11"
    assert format_id_list([]) == ""
    for bad in ("0x0000ffff", "3-1", "a", "1,,-2"):
        assert parse_id_list(bad) is None


# --- KFD ----------------------------------------------------------------------------------------


def test_kfd_properties_of_mi300x_cpx_gpu_node():
    props = parse_kfd_properties(fixture("kfd-topology-mi300x-cpx-node2-gpu-properties.txt"))
    assert props["location_id"] == 1280
    assert props["drm_render_minor"] == 128
    assert props["device_id"] == 0x74A1
    assert props["hive_id"] == 15188982192727901047  # > 2**63: Python ints, no overflow


def test_pci_address_from_domain_and_location_id():
    assert pci_address(0, 1280) == "0000:05:00.0"  # 0x0500: bus 05, devfn 0
    assert pci_address(0, 2561) == "0000:0a:00.1"  # 0x0a01: MI308X partition 1 sits in the function bits
    assert pci_address(1, 2816) == "0001:0b:00.0"  # MI308X second socket: PCI domain 1
    assert pci_address(0, 0x0A0B) == "0000:0a:01.3"  # devfn 0x0b = device 1, function 3


def test_mi300x_cpx_single_files():
    # node2 properties: domain 0, location_id 1280 = 0x0500 -> 0000:05:00.0; drm_render_minor 128;
    # device_id 29857 = 0x74a1 (MI300X); gfx_target_version 90402. io_link 0 is type 2 (PCIe) from
    # node 2 to node 0, and node 0 is a CPU node (cpu_cores_count 96) -> NUMA node 0. io_link 1 is
    # XGMI to node 3, a GPU: not a NUMA hint. Only one partition file was published, so the
    # partition mode cannot be read from KFD alone: None.
    nodes = {
        0: fixture("kfd-topology-mi300x-cpx-node0-cpu-properties.txt"),
        2: fixture("kfd-topology-mi300x-cpx-node2-gpu-properties.txt"),
    }
    links = {
        2: [
            fixture("kfd-topology-mi300x-cpx-node2-iolink0-properties.txt"),
            fixture("kfd-topology-mi300x-cpx-node2-iolink1-xgmi-properties.txt"),
        ]
    }
    assert parse_kfd_topology(nodes, links) == [
        Gpu(
            index=0,
            pci_address="0000:05:00.0",
            kfd_node=2,
            render_minor=128,
            numa_node=0,
            partition=None,
            device_id=29857,
            gfx_target_version=90402,
        )
    ]
    # Without io_links and sysfs nothing says where it is.
    assert parse_kfd_topology(nodes)[0].numa_node == -1


def _mi308x_expected() -> list[tuple[str, int, int]]:
    # Written from the tree, per physical GPU (4 CPX partitions each, KFD nodes 2..33):
    # nodes 2-5   location_id 2560-2563 = 0x0a00-0x0a03, domain 0, minors 128-131, io_link type 2 -> CPU node 0
    # nodes 6-9   location_id 32768-32771 = 0x8000-.., domain 0, minors 136-139 (gap: 132-135 unused)
    # nodes 10-13 location_id 41984.. = 0xa400, domain 0, minors 144-147
    # nodes 14-17 location_id 51200.. = 0xc800, domain 0, minors 152-155
    # nodes 18-21 location_id 2816..  = 0x0b00, domain 1, minors 160-163, io_link type 2 -> CPU node 1
    # nodes 22-25 location_id 33024.. = 0x8100, domain 1, minors 168-171
    # nodes 26-29 location_id 42240.. = 0xa500, domain 1, minors 176-179
    # nodes 30-33 location_id 51456.. = 0xc900, domain 1, minors 184-187
    devices = [
        ("0000:0a", 128, 0),
        ("0000:80", 136, 0),
        ("0000:a4", 144, 0),
        ("0000:c8", 152, 0),
        ("0001:0b", 160, 1),
        ("0001:81", 168, 1),
        ("0001:a5", 176, 1),
        ("0001:c9", 184, 1),
    ]
    return [(f"{bus}:00.{p}", minor + p, numa) for bus, minor, numa in devices for p in range(4)]


def test_mi308x_cpx_tree():
    tree = read_kfd_tree(MI308X)
    gpus = parse_kfd_topology(tree["nodes"], tree["io_links"])
    assert [(g.pci_address, g.render_minor, g.numa_node) for g in gpus] == _mi308x_expected()
    assert [g.kfd_node for g in gpus] == list(range(2, 34))
    assert [g.index for g in gpus] == list(range(32))
    # GPU 4 is KFD node 6, drm_render_minor 136: renderD136, not 128+4.
    assert gpus[4].render_node == "/dev/dri/renderD136"
    # Each group of 4 nodes shares a unique_id and has num_xcc 1: one XCD per partition = CPX.
    assert {g.partition for g in gpus} == {"CPX"}
    assert {(g.device_id, g.gfx_target_version) for g in gpus} == {(0x74A2, 90402)}


def test_read_kfd_tree_takes_topology_or_nodes_dir():
    assert read_kfd_tree(MI308X) == read_kfd_tree(MI308X / "nodes")
    assert len(read_kfd_tree(MI308X)["io_links"][2]) == 32  # node 2 has io_links 0..31


def test_mi210_tree_nps1():
    # KFD order is not PCI order here: node 2 location_id 25344 = 0x6300 -> bus 63, node 3 17152 =
    # 0x4300, node 4 768 = 0x0300, node 5 9728 = 0x2600, node 6 58112 = 0xe300, node 7 49920 =
    # 0xc300, node 8 33536 = 0x8300, node 9 41728 = 0xa300. Minors 128..135 in node order. Nodes
    # 2-5 have a type-2 link to CPU node 0, nodes 6-9 to CPU node 1 (two CPU nodes: NPS1, two
    # sockets). device_id 29711 = 0x740f (MI210), gfx 90010; one node of num_xcc 1 each: no
    # partition mode.
    tree = read_kfd_tree(MI210)
    gpus = parse_kfd_topology(tree["nodes"], tree["io_links"])
    buses = ["63", "43", "03", "26", "e3", "c3", "83", "a3"]
    assert gpus == [
        Gpu(i, f"0000:{bus}:00.0", i + 2, 128 + i, 0 if i < 4 else 1, None, 0x740F, 90010)
        for i, bus in enumerate(buses)
    ]


def test_sysfs_numa_and_partition_win_over_kfd():
    tree = read_kfd_tree(MI308X)
    sysfs = {
        # Partitions 0a:00.1-3 have no PCI device of their own: looked up at function 0.
        "0000:0a:00.0": PciSysfs(numa_node=3, compute_partition="CPX"),
        # The kernel says unknown: stays unknown, although KFD's link says 0 (kfd_crat.c falls
        # back to node 0 when the device has no NUMA node).
        "0000:80:00.0": PciSysfs(numa_node=-1, compute_partition=None),
    }
    gpus = parse_kfd_topology(tree["nodes"], tree["io_links"], sysfs)
    assert [g.numa_node for g in gpus[:8]] == [3, 3, 3, 3, -1, -1, -1, -1]
    assert gpus[8].numa_node == 0


def test_with_gpu_numa():
    tree = read_kfd_tree(MI210)
    gpus = with_gpu_numa(parse_kfd_topology(tree["nodes"], tree["io_links"]), {0: 3, 7: 4})
    assert [g.numa_node for g in gpus] == [3, 0, 0, 0, 1, 1, 1, 4]


# --- lscpu / meminfo ----------------------------------------------------------------------------


def test_lscpu_nps4():
    # NUMA node0 CPU(s): 0-15,128-143 ... node7: 112-127,240-255 (2 sockets × 64 cores × SMT2, NPS4).
    nodes = parse_lscpu_numa(fixture("lscpu-numa-2socket-nps4.txt"))
    assert [n.node for n in nodes] == list(range(8))
    assert [format_id_list(n.cpus) for n in nodes] == [
        f"{16 * i}-{16 * i + 15},{128 + 16 * i}-{128 + 16 * i + 15}" for i in range(8)
    ]
    assert {n.memory_mib for n in nodes} == {None}


def test_node_meminfo():
    # Format from linux drivers/base/node.c node_read_meminfo ("Node %d MemTotal: %8lu kB").
    assert parse_node_meminfo("Node 0 MemTotal:       263834100 kB\nNode 1 MemTotal: 2048 kB\n") == {
        0: 257650,
        1: 2,
    }


# --- rocm-smi / amd-smi -------------------------------------------------------------------------


def test_rocm_smi_toponuma_mi210_nps4():
    assert parse_rocm_smi_toponuma(fixture("rocm-smi-showtoponuma-mi210-8gpu-nps4.txt")) == {
        0: 3,
        1: 2,
        2: 1,
        3: 0,
        4: 7,
        5: 6,
        6: 5,
        7: 4,
    }


def test_rocm_smi_affinity_beats_kfd_numa_node():
    text = "GPU[0]  : (Topology) Numa Node: 0\nGPU[0]  : (Topology) Numa Affinity: -1\n"
    assert parse_rocm_smi_toponuma(text) == {0: -1}


def test_amd_smi_list_truncated():
    text = tool_output("amd-smi-list-mi300x-truncated.txt")
    with pytest.raises(TopologyParseError, match=r"amd-smi list: unknown line: '\[output truncated\]'"):
        parse_amd_smi_list(text)
    assert parse_amd_smi_list(text, allow_truncated=True) == [
        SmiGpu(0, "0000:05:00.0", "afff74a1-0000-1000-8054-e92b0a5d57c8"),
        SmiGpu(1, "0000:26:00.0", "0aff74a1-0000-1000-805b-ce698de95724"),
        SmiGpu(2, "0000:46:00.0", "97ff74a1-0000-1000-8065-fa81273af9ce"),
    ]


def test_amd_smi_list_reads_past_newer_keys():
    text = "GPU: 0\n    BDF: 0000:05:00.0\n    UUID: u\n    KFD_ID: 1\n    NODE_ID: 2\n    PARTITION_ID: 0\n"
    assert parse_amd_smi_list(text) == [SmiGpu(0, "0000:05:00.0", "u")]


def test_amd_smi_topology_json():
    assert parse_amd_smi_topology_json(tool_output("amd-smi-topology-a-t-json-2gpu-changelog.txt")) == [
        SmiGpuLinks(0, "0000:08:00.0", {0: "SELF", 1: "PCIE"}),
        SmiGpuLinks(1, "0000:44:00.0", {0: "PCIE", 1: "SELF"}),
    ]


# --- formats the parsers do not know: a TopologyParseError naming the tool and the line --------

GARBAGE = [
    (lambda: parse_kfd_properties("simd_count eighty"), "KFD sysfs topology", "simd_count eighty"),
    (lambda: parse_kfd_properties(""), "KFD sysfs topology", None),
    (lambda: parse_kfd_topology({2: "simd_count 80\n"}), "no 'cpu_cores_count'", None),
    (lambda: parse_kfd_topology({2: "cpu_cores_count 0\nsimd_count 80\n"}), "no 'location_id'", None),
    (
        lambda: parse_kfd_topology(
            {2: fixture("kfd-topology-mi300x-cpx-node2-gpu-properties.txt")},
            {2: ["type 2\nnode_from 5\nnode_to 0\n"]},
        ),
        "io_link starts at node 5",
        None,
    ),
    (lambda: parse_lscpu_numa("NUMA node0 CPU(s): 0x0000ffff"), "lscpu", "NUMA node0 CPU(s): 0x0000ffff"),
    (lambda: parse_lscpu_numa("NUMA-Knoten0 CPU(s): 0-3"), "lscpu", "NUMA-Knoten0 CPU(s): 0-3"),
    (lambda: parse_lscpu_numa(fixture("rocm-smi-showtoponuma-mi210-8gpu-nps4.txt")), "lscpu: no", None),
    (lambda: parse_lscpu_numa("NUMA node(s): 2\nNUMA node0 CPU(s): 0-3\n"), "but 1 node lines", None),
    (lambda: parse_node_meminfo("Node 0 MemFree: 12 kB"), "meminfo", "Node 0 MemFree: 12 kB"),
    (lambda: parse_rocm_smi_toponuma(tool_output("rocm-smi-concise-mi300x-8gpu.txt")), "rocm-smi", "Device"),
    (lambda: parse_rocm_smi_toponuma("GPU[0] : (Topology) Numa Node: N/A"), "rocm-smi", "N/A"),
    (lambda: parse_rocm_smi_toponuma(""), "rocm-smi", None),
    (lambda: parse_amd_smi_list(tool_output("amd-smi-static-mi300x-truncated.txt")), "amd-smi list", "ASIC:"),
    (lambda: parse_amd_smi_list("GPU: 0\n    BDF: N/A\n    UUID: x\n"), "amd-smi list", "N/A"),
    (lambda: parse_amd_smi_list("GPU: 0\n    BDF: 0000:05:00.0\n"), "GPU 0 has no UUID", None),
    (lambda: parse_amd_smi_list(tool_output("amd-smi-topology-a-t-json-2gpu-changelog.txt")), "amd-smi", "["),
    (
        lambda: parse_amd_smi_topology_json(tool_output("amd-smi-topology-mi300x-truncated.txt")),
        "amd-smi topology --json: not JSON",
        "ACCESS TABLE:",
    ),
    (lambda: parse_amd_smi_topology_json('{"gpu": 0}'), "expected a JSON list", None),
    (lambda: parse_amd_smi_topology_json('[{"gpu": 0, "bdf": "x"}]'), "entry without gpu/bdf/links", None),
    (lambda: parse_amd_smi_topology_json('[{"gpu": 0, "bdf": "x", "links": [{}]}]'), "link without", None),
]


@pytest.mark.parametrize(("call", "names", "quotes"), GARBAGE)
def test_unknown_formats_raise_a_named_error(call, names, quotes):
    with pytest.raises(TopologyParseError) as info:
        call()
    assert isinstance(info.value, ValueError)
    if names:
        assert names in str(info.value)
    if quotes:
        assert quotes in str(info.value)


# --- the fact -----------------------------------------------------------------------------------


def fact_lines(tree: KfdTree, pci: tuple[str, ...] = (), lscpu: str = "", meminfo: str = "") -> list[str]:
    """What GpuTopology's command prints for this tree, assembled in Python."""
    lines = [HEADER]
    for node, text in tree["nodes"].items():
        lines += [f"@@node {node}", *text.splitlines()]
        for i, link in enumerate(tree["io_links"][node]):
            lines += [f"@@io_link {node} {i}", *link.splitlines()]
    lines += [f"@@pci {p}" for p in pci]
    return [*lines, "@@lscpu", *lscpu.splitlines(), "@@meminfo", *meminfo.splitlines(), END]


def test_fact_process_mi210_with_nps4_numa():
    tree = read_kfd_tree(MI210)
    lscpu = fixture("lscpu-numa-2socket-nps4.txt")
    meminfo = "\n".join(f"Node {n} MemTotal:       65536000 kB" for n in range(8))
    topo = GpuTopology().process(fact_lines(tree, ("0000:63:00.0 3 -", "0000:e3:00.0 -1 -"), lscpu, meminfo))
    assert topo.gpus == tuple(
        parse_kfd_topology(
            tree["nodes"],
            tree["io_links"],
            {"0000:63:00.0": PciSysfs(3, None), "0000:e3:00.0": PciSysfs(-1, None)},
        )
    )
    assert [g.numa_node for g in topo.gpus] == [3, 0, 0, 0, -1, 1, 1, 1]
    assert topo.numa(2) == NumaNode(2, parse_id_list("32-47,160-175"), 64000)


def test_fact_process_mi308x_without_lscpu():
    topo = GpuTopology().process(fact_lines(read_kfd_tree(MI308X)))
    assert [(g.pci_address, g.render_minor, g.numa_node) for g in topo.gpus] == _mi308x_expected()
    assert topo.numa_nodes == ()


def test_fact_command_reads_everything_under_a_timeout():
    command = GpuTopology().command()
    assert command.startswith("timeout 20 sh -c '")
    assert command.count("'") == 2
    for path in (
        "/sys/class/kfd/kfd/topology/nodes",
        "io_links",
        "/sys/bus/pci/drivers/amdgpu",
        "numa_node",
        "current_compute_partition",
        "lscpu",
        "/sys/devices/system/node/node*/meminfo",
    ):
        assert path in command


def test_fact_command_runs_on_a_fixture_tree():
    """The real shell script, pointed at the MI308X tree instead of /sys: same GPUs as reading it."""
    command = GpuTopology().command().replace("/sys/class/kfd/kfd/topology/nodes", str(MI308X / "nodes"))
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=True)
    topo = parse_fact_output(result.stdout.splitlines())
    tree = read_kfd_tree(MI308X)
    assert [g.kfd_node for g in topo.gpus] == [g.kfd_node for g in parse_kfd_topology(tree["nodes"], tree["io_links"])]
    assert [(g.pci_address, g.render_minor) for g in topo.gpus] == [(a, m) for a, m, _ in _mi308x_expected()]


def test_fact_script_reads_a_sysfs_tree_as_sections(tmp_path):
    # The script on a tree of its own (its /sys paths moved under tmp_path): every KFD properties
    # file under its header, in node order with each node's io_links after it; the PCI values read
    # without a process each ("-" where a file is missing or empty, a last line without its newline
    # read all the same); AMD display devices not bound to amdgpu named.
    root = tmp_path / "sys"
    nodes = root / "class/kfd/kfd/topology/nodes"
    for node, links in (("0", ["0"]), ("1", ["0", "1"]), ("10", [])):
        (nodes / node / "io_links").mkdir(parents=True)
        (nodes / node / "properties").write_text(f"cpu_cores_count 0\nnode {node}\n")
        for link in links:
            (nodes / node / "io_links" / link).mkdir()
            (nodes / node / "io_links" / link / "properties").write_text(f"type 11\nnode_to {link}\n")
    (nodes / "2").mkdir()  # a node without properties: skipped
    drv = root / "bus/pci/drivers/amdgpu"
    devs = root / "bus/pci/devices"
    for addr, numa, part, mem in (("0000:05:00.0", "0\n", "SPX\n", "NPS1\n"), ("0000:65:00.0", "1", None, "")):
        dev = devs / addr
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x1002\n")
        (dev / "class").write_text("0x120000\n")
        for name, value in (
            ("numa_node", numa),
            ("current_compute_partition", part),
            ("current_memory_partition", mem),
        ):
            if value is not None:
                (dev / name).write_text(value)
        drv.mkdir(parents=True, exist_ok=True)
        (drv / addr).symlink_to(dev)
        (dev / "driver").symlink_to(drv)
    for addr, vendor, cls in (("0000:c1:00.0", "0x1002", "0x038000"), ("0000:00:01.0", "0x1022", "0x120000")):
        (devs / addr).mkdir()
        (devs / addr / "vendor").write_text(vendor + "\n")
        (devs / addr / "class").write_text(cls + "\n")
    script = SCRIPT.replace("/sys/", f"{root}/")
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[: out.index("@@lscpu")] == [
        "@@rocmfleet-gpu-topology 1",
        "@@node 0", "cpu_cores_count 0", "node 0",
        "@@io_link 0 0", "type 11", "node_to 0",
        "@@node 1", "cpu_cores_count 0", "node 1",
        "@@io_link 1 0", "type 11", "node_to 0",
        "@@io_link 1 1", "type 11", "node_to 1",
        "@@node 10", "cpu_cores_count 0", "node 10",
        "@@pci 0000:05:00.0 0 SPX NPS1",
        "@@pci 0000:65:00.0 1 - -",
        "@@unbound 0000:c1:00.0",
    ]  # fmt: skip
    assert out[-1] == "@@end"
