"""
GPU and NUMA topology of one host, parsed from what the host prints.

Everything here is a pure function of text: the pyinfra fact that gathers the text is
``rocmfleet.facts.topology.GpuTopology``, and the tests feed the real outputs in
``../shared/fixtures/``. Facts and sources are in ``../shared/reference/mi300x.md`` §7.

A parser that meets a format it does not know raises ``TopologyParseError`` naming the tool
and quoting the line, rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple, TypedDict

KFD = "KFD sysfs topology"
LSCPU = "lscpu"
NODE_MEMINFO = "/sys/devices/system/node/node*/meminfo"

# Keys every KFD GPU node has (kfd_topology.c, node_show); a tree without them is not one we know.
_KFD_GPU_KEYS = ("location_id", "domain", "drm_render_minor", "device_id", "gfx_target_version")


class TopologyParseError(ValueError):
    """Tool output that a parser does not understand.

    Args:
        tool: the tool or file that printed it, e.g. ``"lscpu"``.
        problem: what is wrong, in words.
        line: the offending line, quoted in the message when given.
        version: the tool's version, when the output says.
    """

    def __init__(self, tool: str, problem: str, line: str | None = None, version: str | None = None) -> None:
        self.tool = tool
        self.version = version
        self.line = line
        name = f"{tool} {version}" if version else tool
        super().__init__(f"{name}: {problem}" + ("" if line is None else f": {line!r}"))


@dataclass(frozen=True)
class Gpu:
    """One GPU as ROCm enumerates it (a whole device, or one compute partition of it).

    Attributes:
        index: position among the host's GPU nodes in KFD node order. ROCr creates its agents in
            that order and HIP numbers them so, which is what ``CUDA_VISIBLE_DEVICES`` indexes.
            It need not follow PCI order (the MI210 fixture's KFD order is buses 63, 43, 03, 26, …).
        pci_address: ``DDDD:BB:DD.F`` from KFD ``domain`` and ``location_id``. For partitions of
            gfx 9.4.3 parts the function number is the partition number, not a PCI function.
        kfd_node: the KFD topology node id.
        render_minor: KFD ``drm_render_minor``: the device is ``/dev/dri/renderD<render_minor>``.
        numa_node: Linux NUMA node of the device, ``-1`` when unknown.
        partition: compute partition mode (``SPX``, ``DPX``, ``QPX``, ``CPX``), ``None`` when unknown.
        device_id: PCI device id (29857 = 0x74a1 is MI300X).
        gfx_target_version: e.g. 90402 for gfx942.
        memory_partition: memory partition (NPS) mode of the physical GPU (``NPS1``, ``NPS2``,
            ``NPS4``, ``NPS8``), from sysfs ``current_memory_partition``; ``None`` when unknown.
        physical: the physical GPU this node belongs to: the PCI address at function 0
            (``DDDD:BB:DD.0``); every compute partition of one device has the same one.
    """

    index: int
    pci_address: str
    kfd_node: int
    render_minor: int
    numa_node: int
    partition: str | None
    device_id: int
    gfx_target_version: int
    memory_partition: str | None = None
    physical: str = ""

    def __post_init__(self) -> None:
        if not self.physical:  # default: the device's PCI function 0
            object.__setattr__(self, "physical", self.pci_address[:-1] + "0")

    @property
    def gfx_arch(self) -> str:
        """The LLVM target name from ``gfx_target_version``: 90402 -> ``gfx942``, 90010 -> ``gfx90a``.

        KFD encodes major*10000 + minor*100 + stepping (kfd_topology.c); LLVM names the target
        ``gfx<major><minor><stepping>`` with minor and stepping as one hex digit each.
        """
        major, rest = divmod(self.gfx_target_version, 10000)
        minor, stepping = divmod(rest, 100)
        return f"gfx{major}{minor:x}{stepping:x}"

    @property
    def render_node(self) -> str:
        """The device file to pass to ``docker run --device``, e.g. ``/dev/dri/renderD136``."""
        return f"/dev/dri/renderD{self.render_minor}"


@dataclass(frozen=True)
class NumaNode:
    """One Linux NUMA node: its id, its CPUs (sorted) and its memory in MiB (``None`` if unknown)."""

    node: int
    cpus: tuple[int, ...]
    memory_mib: int | None


@dataclass(frozen=True)
class Topology:
    """The GPUs (in ``index`` order) and NUMA nodes (in ``node`` order) of one host."""

    gpus: tuple[Gpu, ...]
    numa_nodes: tuple[NumaNode, ...]
    #: PCI addresses of the devices bound to amdgpu (sysfs ``/sys/bus/pci/drivers/amdgpu``), sorted;
    #: empty when not read.
    amdgpu_pci: tuple[str, ...] = ()
    #: PCI addresses of AMD accelerators (vendor 0x1002, class 0x12 or 0x0380) bound to no driver or
    #: another one: GPUs the host has that amdgpu did not take; empty when not read.
    unbound_pci: tuple[str, ...] = ()

    def without_kfd_node(self) -> list[str]:
        """PCI addresses bound to amdgpu that no KFD GPU node belongs to: GPUs the driver took but
        did not bring up (a failed init, a RAS fatal error at boot), so ROCm and vLLM cannot see them."""
        physical = {g.physical for g in self.gpus}
        return [a for a in self.amdgpu_pci if a[:-1] + "0" not in physical]

    def physical_gpus(self) -> dict[str, tuple[Gpu, ...]]:
        """``{physical GPU key: its GPU nodes (partitions) in index order}``, in order of first index."""
        groups: dict[str, list[Gpu]] = {}
        for gpu in sorted(self.gpus, key=lambda g: g.index):
            groups.setdefault(gpu.physical, []).append(gpu)
        return {key: tuple(gpus) for key, gpus in groups.items()}

    def gpu(self, index: int) -> Gpu | None:
        """The GPU with this index, or ``None``."""
        return next((g for g in self.gpus if g.index == index), None)

    def numa(self, node: int) -> NumaNode | None:
        """The NUMA node with this id, or ``None``."""
        return next((n for n in self.numa_nodes if n.node == node), None)


class PciSysfs(NamedTuple):
    """What ``/sys/bus/pci/devices/<bdf>/`` says about one GPU: ``numa_node``,
    ``current_compute_partition`` and ``current_memory_partition`` (amdgpu, gfx 9.4.3 parts)."""

    numa_node: int | None
    compute_partition: str | None
    memory_partition: str | None = None


class KfdTree(TypedDict):
    """Raw text of a KFD topology: ``{node id: properties}`` and ``{node id: [io_link properties, …]}``."""

    nodes: dict[int, str]
    io_links: dict[int, list[str]]


# ---------------------------------------------------------------------------------------------
# id lists ("0-15,128-143"), as lscpu prints them and as docker --cpuset-cpus takes them


def parse_id_list(text: str) -> tuple[int, ...] | None:
    """``"0-2,8"`` -> ``(0, 1, 2, 8)``; ``""`` -> ``()``; ``None`` if it is not such a list."""
    ids: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            return None
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            return None
        ids.update(range(low, high + 1))
    return tuple(sorted(ids))


def format_id_list(ids: Iterable[int]) -> str:
    """``[0, 1, 2, 8]`` -> ``"0-2,8"`` (sorted, duplicates dropped); ``[]`` -> ``""``."""
    ranges: list[list[int]] = []
    for i in sorted(set(ids)):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


# ---------------------------------------------------------------------------------------------
# KFD: /sys/class/kfd/kfd/topology/nodes/<n>/properties and io_links/<m>/properties


def parse_kfd_properties(text: str, where: str = "properties") -> dict[str, int]:
    """Parse a KFD ``properties`` file: one ``name value`` pair a line, values integers.

    Args:
        text: the file's content.
        where: which file, for error messages (e.g. ``"node 2"``).

    Raises:
        TopologyParseError: a line that is not ``name <integer>``, or no lines at all.
    """
    props: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = re.fullmatch(r"([a-z_][a-z0-9_]*) (\d+)", line.strip())
        if not match:
            raise TopologyParseError(KFD, f"{where}: not a 'name value' line", line)
        props[match[1]] = int(match[2])
    if not props:
        raise TopologyParseError(KFD, f"{where}: empty properties file")
    return props


def read_kfd_tree(path: Path) -> KfdTree:
    """Read a KFD topology tree from disk (a copy of ``/sys/class/kfd/kfd/topology``).

    Args:
        path: the ``topology`` directory, or its ``nodes`` directory.

    Raises:
        FileNotFoundError: no node directories under ``path``.
    """
    nodes_dir = path / "nodes" if (path / "nodes").is_dir() else path
    tree: KfdTree = {"nodes": {}, "io_links": {}}
    for node_dir in sorted(p for p in nodes_dir.iterdir() if p.name.isdigit()):
        node = int(node_dir.name)
        tree["nodes"][node] = (node_dir / "properties").read_text()
        links = sorted((p for p in (node_dir / "io_links").glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
        tree["io_links"][node] = [(p / "properties").read_text() for p in links]
    if not tree["nodes"]:
        raise FileNotFoundError(f"no KFD node directories under {nodes_dir}")
    return tree


def pci_address(domain: int, location_id: int) -> str:
    """KFD ``domain`` + ``location_id`` -> ``"0000:05:00.0"``.

    ``location_id`` is ``pci_dev_id()`` = bus << 8 | devfn (kfd_topology.c, kfd_topology_add_device);
    devfn = device << 3 | function. 1280 = 0x0500 -> bus 05, device 0, function 0. Bits above 15
    (a short-lived kernel patch put the partition id in bits 28-31) are not part of the address.
    """
    bus, devfn = (location_id >> 8) & 0xFF, location_id & 0xFF
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7:x}"


def parse_kfd_topology(
    nodes: Mapping[int, str],
    io_links: Mapping[int, Sequence[str]] | None = None,
    sysfs: Mapping[str, PciSysfs] | None = None,
) -> list[Gpu]:
    """The GPUs of a KFD topology, in KFD node order.

    A node is a GPU when ``simd_count > 0`` and a CPU node when ``cpu_cores_count > 0``
    (reference §7.2). NUMA node, in order of trust:

    1. ``sysfs[bdf].numa_node`` when given (the kernel's PCI ``numa_node``; ``-1`` stays unknown);
    2. else the lowest-weight io_link from the GPU to a CPU node: kfd_crat.c
       (``kfd_fill_gpu_direct_io_link_to_cpu``) sets its target to the device's ``numa_node``, but
       to 0 when that is unknown, so this fallback cannot tell "node 0" from "unknown";
    3. else ``-1``.

    Args:
        nodes: ``{KFD node id: properties text}``.
        io_links: ``{KFD node id: [io_link properties text, …]}``; optional.
        sysfs: ``{"0000:05:00.0": PciSysfs}`` from the PCI devices; optional. A partition's
            entry is looked up at its device's function 0 when its own address has none.

    Raises:
        TopologyParseError: a properties file we cannot parse, a GPU node without the keys
            above, or an io_link that does not start at its node.
    """
    props = {node: parse_kfd_properties(text, f"node {node}") for node, text in nodes.items()}
    cpu_nodes = {n for n, p in props.items() if _kfd_int(p, n, "cpu_cores_count") > 0}
    gpu_nodes = sorted(n for n, p in props.items() if _kfd_int(p, n, "simd_count") > 0)
    links = {n: _parse_io_links(n, (io_links or {}).get(n, ())) for n in gpu_nodes}
    group_sizes = _partition_group_sizes({n: props[n] for n in gpu_nodes})
    return [
        _kfd_gpu(index, node, props[node], links[node], cpu_nodes, group_sizes, sysfs or {})
        for index, node in enumerate(gpu_nodes)
    ]


def _kfd_int(props: Mapping[str, int], node: int, key: str) -> int:
    if key not in props:
        raise TopologyParseError(KFD, f"node {node}: no {key!r} in its properties")
    return props[key]


def _parse_io_links(node: int, texts: Iterable[str]) -> list[dict[str, int]]:
    links = [parse_kfd_properties(text, f"node {node} io_link") for text in texts]
    for link in links:
        if _kfd_int(link, node, "node_from") != node:
            raise TopologyParseError(KFD, f"node {node}: io_link starts at node {link['node_from']}")
        _kfd_int(link, node, "node_to")
    return links


def _device_key(props: Mapping[str, int]) -> tuple[int, int, int]:
    """(domain, bus<<5 | device, unique_id): the same for all partitions of one physical GPU."""
    return props["domain"], (props["location_id"] & 0xFFFF) >> 3, props.get("unique_id", 0)


def _partition_group_sizes(gpu_props: Mapping[int, Mapping[str, int]]) -> dict[tuple[int, int, int], int]:
    sizes: dict[tuple[int, int, int], int] = {}
    for node, props in gpu_props.items():
        for key in _KFD_GPU_KEYS:
            _kfd_int(props, node, key)
        sizes[_device_key(props)] = sizes.get(_device_key(props), 0) + 1
    return sizes


def _infer_partition(partitions: int, xcc_per_partition: int | None) -> str | None:
    """Compute partition mode from KFD alone.

    AMD's partitioning guide (ROCm/amdgpu-docs ``gpu-partitioning/mi300x/overview.rst``): SPX is one
    partition of all XCDs, DPX two, QPX four, CPX one XCD per partition. An MI308X in CPX shows
    4 KFD nodes of ``num_xcc 1`` sharing one ``unique_id``. One node of one XCC (MI210, or a lone
    partition file) says nothing, so ``None``.
    """
    if xcc_per_partition is None:
        return None
    if partitions == 1:
        return "SPX" if xcc_per_partition > 1 else None
    if xcc_per_partition == 1:
        return "CPX"
    return {2: "DPX", 4: "QPX"}.get(partitions)


def _sysfs_entry(sysfs: Mapping[str, PciSysfs], address: str) -> PciSysfs | None:
    return sysfs.get(address) or sysfs.get(address[:-1] + "0")


def _kfd_numa(links: Sequence[Mapping[str, int]], cpu_nodes: set[int], entry: PciSysfs | None) -> int:
    if entry is not None and entry.numa_node is not None:
        return entry.numa_node
    to_cpu = sorted((link.get("weight", 0), link["node_to"]) for link in links if link["node_to"] in cpu_nodes)
    return to_cpu[0][1] if to_cpu else -1


def _kfd_gpu(
    index: int,
    node: int,
    props: Mapping[str, int],
    links: Sequence[Mapping[str, int]],
    cpu_nodes: set[int],
    group_sizes: Mapping[tuple[int, int, int], int],
    sysfs: Mapping[str, PciSysfs],
) -> Gpu:
    address = pci_address(props["domain"], props["location_id"])
    entry = _sysfs_entry(sysfs, address)
    inferred = _infer_partition(group_sizes[_device_key(props)], props.get("num_xcc"))
    return Gpu(
        index=index,
        pci_address=address,
        kfd_node=node,
        render_minor=props["drm_render_minor"],
        numa_node=_kfd_numa(links, cpu_nodes, entry),
        partition=(entry.compute_partition if entry and entry.compute_partition else inferred),
        device_id=props["device_id"],
        gfx_target_version=props["gfx_target_version"],
        memory_partition=entry.memory_partition if entry and entry.memory_partition else None,
        physical=_physical_key(props),
    )


def _physical_key(props: Mapping[str, int]) -> str:
    """The physical GPU of a KFD node: its PCI address at function 0. Partitions of gfx 9.4.3 parts
    put the partition number in the function bits (the MI308X CPX fixture: ``location_id``
    2560..2563 share ``unique_id`` 598046273873802902), so all partitions of one device agree."""
    return pci_address(props["domain"], props["location_id"])[:-1] + "0"


def with_gpu_numa(gpus: Iterable[Gpu], numa_by_index: Mapping[int, int]) -> list[Gpu]:
    """The same GPUs with ``numa_node`` replaced where ``numa_by_index`` (``{gpu index: node}``,
    e.g. from ``parse_rocm_smi_toponuma``) says; the others unchanged."""
    return [replace(g, numa_node=numa_by_index[g.index]) if g.index in numa_by_index else g for g in gpus]


# ---------------------------------------------------------------------------------------------
# NUMA nodes: lscpu and per-node meminfo

_LSCPU_NODE = re.compile(r"NUMA node(\d+) CPU\(s\):\s*(.*)")
_LSCPU_COUNT = re.compile(r"NUMA node\(s\):\s*(\d+)")


def parse_lscpu_numa(text: str) -> list[NumaNode]:
    """NUMA nodes from ``LC_ALL=C lscpu`` (``NUMA node0 CPU(s):   0-15,128-143``), sorted by node.

    Other lscpu lines are ignored. ``memory_mib`` is ``None`` (lscpu does not print it).

    Raises:
        TopologyParseError: a ``NUMA…`` line of another shape (e.g. a hex mask, another
            language), no node lines, or fewer node lines than ``NUMA node(s):`` announces.
    """
    nodes: dict[int, tuple[int, ...]] = {}
    announced: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("NUMA"):
            continue
        if count := _LSCPU_COUNT.fullmatch(stripped):
            announced = int(count[1])
            continue
        match = _LSCPU_NODE.fullmatch(stripped)
        cpus = parse_id_list(match[2]) if match else None
        if match is None or cpus is None:
            raise TopologyParseError(LSCPU, "unknown NUMA line", line)
        nodes[int(match[1])] = cpus
    if not nodes:
        raise TopologyParseError(LSCPU, "no 'NUMA nodeN CPU(s):' lines")
    if announced is not None and announced != len(nodes):
        raise TopologyParseError(LSCPU, f"'NUMA node(s): {announced}' but {len(nodes)} node lines")
    return [NumaNode(node=n, cpus=nodes[n], memory_mib=None) for n in sorted(nodes)]


def parse_node_meminfo(text: str) -> dict[int, int]:
    """``{node: MemTotal in MiB}`` from ``MemTotal`` lines of ``/sys/devices/system/node/node*/meminfo``.

    The line is ``Node 0 MemTotal:       263834100 kB`` (linux ``drivers/base/node.c``,
    ``node_read_meminfo``); kB are KiB, so MiB = kB // 1024.

    Raises:
        TopologyParseError: any non-blank line of another shape.
    """
    result: dict[int, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = re.fullmatch(r"Node (\d+) MemTotal:\s+(\d+) kB", line.strip())
        if not match:
            raise TopologyParseError(NODE_MEMINFO, "not a 'Node N MemTotal: X kB' line", line)
        result[int(match[1])] = int(match[2]) // 1024
    return result


def merge_numa(nodes: Iterable[NumaNode], memory_mib: Mapping[int, int]) -> list[NumaNode]:
    """NUMA nodes with ``memory_mib`` filled in; nodes that only ``memory_mib`` knows get no CPUs."""
    by_node = {n.node: n for n in nodes}
    for node in memory_mib:
        by_node.setdefault(node, NumaNode(node=node, cpus=(), memory_mib=None))
    return [NumaNode(n, by_node[n].cpus, memory_mib.get(n, by_node[n].memory_mib)) for n in sorted(by_node)]


def build_topology(
    kfd: KfdTree,
    sysfs: Mapping[str, PciSysfs] | None = None,
    lscpu: str | None = None,
    meminfo: str | None = None,
) -> Topology:
    """A whole ``Topology`` from the raw texts; blank or missing ``lscpu``/``meminfo`` leave CPUs/memory unknown.

    Raises:
        TopologyParseError: from any parser.
    """
    gpus = parse_kfd_topology(kfd["nodes"], kfd["io_links"], sysfs)
    numa = parse_lscpu_numa(lscpu) if lscpu and lscpu.strip() else []
    memory = parse_node_meminfo(meminfo) if meminfo else {}
    return Topology(gpus=tuple(gpus), numa_nodes=tuple(merge_numa(numa, memory)), amdgpu_pci=tuple(sorted(sysfs or {})))
