"""Facts about GPU and NUMA topology (KFD sysfs, PCI sysfs, lscpu, per-node meminfo)."""

from __future__ import annotations

import re
from dataclasses import replace

from pyinfra.api.exceptions import FactProcessError
from pyinfra.api.facts import FactBase

from rocmfleet.domain.topology import KfdTree, PciSysfs, Topology, TopologyParseError, build_topology

# Section markers. A line starting with "@@" cannot come from the files read: KFD properties
# are "name value" lines, lscpu lines start with a label, meminfo lines with "Node".
HEADER = "@@rocmfleet-gpu-topology 1"
NO_KFD = "@@no-kfd"
END = "@@end"

TIMEOUT_S = 20

# One shell command, run under `timeout` so a hung sysfs read or lscpu fails the fact (exit 124)
# instead of hanging the deploy. No single quotes inside: it is wrapped in sh -c '…'. The deploy
# runs it inside its one HostState read (rocmfleet.plan.vllmplan.query). Files are read with the
# shell's `read` and every KFD properties file by one awk, not a `cat` each: a host has about forty
# KFD files and hundreds of PCI devices, each a process otherwise, on every converge (issue 43).
SCRIPT = r"""
echo "@@rocmfleet-gpu-topology 1"
T=/sys/class/kfd/kfd/topology/nodes
if [ ! -d "$T" ]; then echo "@@no-kfd"; exit 0; fi
set --
for n in "$T"/*; do
  [ -f "$n/properties" ] || continue
  set -- "$@" "$n/properties"
  for l in "$n"/io_links/*; do
    [ -f "$l/properties" ] && set -- "$@" "$l/properties"
  done
done
[ $# -eq 0 ] || awk "FNR == 1 { n = split(FILENAME, p, \"/\")
  if (p[n - 2] == \"io_links\") print \"@@io_link \" p[n - 3] \" \" p[n - 1]; else print \"@@node \" p[n - 1] }
  { print }" "$@"
val() { v=""; { read -r v < "$1" || [ -n "$v" ]; } 2>/dev/null || v=-; }
for p in /sys/bus/pci/drivers/amdgpu/*:*:*.*; do
  [ -e "$p" ] || continue
  val "$p/numa_node"; numa=$v
  val "$p/current_compute_partition"; part=$v
  val "$p/current_memory_partition"; mem=$v
  echo "@@pci ${p##*/} $numa $part $mem"
done
for p in /sys/bus/pci/devices/*; do
  val "$p/vendor"; vendor=$v
  val "$p/class"
  case "$vendor $v" in "0x1002 0x12"*|"0x1002 0x0380"*) ;; *) continue ;; esac
  case "$(readlink "$p/driver" 2>/dev/null)" in */amdgpu) continue ;; esac
  echo "@@unbound ${p##*/}"
done
echo "@@lscpu"; LC_ALL=C lscpu | grep "^NUMA"
echo "@@meminfo"; cat /sys/devices/system/node/node*/meminfo 2>/dev/null | grep MemTotal
echo "@@end"
"""


class GpuTopology(FactBase[Topology | None]):
    """
    The host's GPUs (KFD order, render minor, PCI address, NUMA node, compute and memory
    partition modes from sysfs ``current_compute_partition``/``current_memory_partition``) and NUMA
    nodes (CPUs, memory). ``None`` where there is no KFD (amdgpu not loaded, or no GPU driver).

    NUMA node per GPU: the PCI device's sysfs ``numa_node`` (read here for every device bound to
    amdgpu), else the KFD io_link to a CPU node; see ``rocmfleet.domain.topology.parse_kfd_topology``.

    .. code:: python

        topo = host.get_fact(GpuTopology)
        topo.gpus[4].render_node  # "/dev/dri/renderD136"
    """

    def command(self) -> str:
        return f"timeout {TIMEOUT_S} sh -c '{SCRIPT}'"

    def process(self, output: list[str]) -> Topology | None:
        try:
            return parse_fact_output(output)
        except TopologyParseError as e:
            raise FactProcessError(str(e)) from e


def parse_fact_output(lines: list[str]) -> Topology | None:
    """The ``Topology`` from the fact command's output lines; ``None`` for ``@@no-kfd``.

    Raises:
        TopologyParseError: output without the header or the end marker (cut short), an
            unknown ``@@`` marker, or text any parser refuses.
    """
    if not lines or lines[0].strip() != HEADER:
        raise TopologyParseError("GpuTopology fact", "output does not start with the header", lines[0] if lines else "")
    if any(line.strip() == NO_KFD for line in lines):
        return None
    if lines[-1].strip() != END:
        raise TopologyParseError("GpuTopology fact", "output cut short (no end marker)", lines[-1])
    kfd: KfdTree = {"nodes": {}, "io_links": {}}
    sysfs: dict[str, PciSysfs] = {}
    texts: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines[1:-1]:
        if line.startswith("@@"):
            current = _open_section(line, kfd, sysfs, texts)
        else:
            current.append(line)
    _close_sections(kfd, texts)
    topology = build_topology(kfd, sysfs, "\n".join(texts.get("lscpu", [])), "\n".join(texts.get("meminfo", [])))
    return replace(topology, unbound_pci=tuple(sorted(texts.get("unbound", []))))


def _open_section(line: str, kfd: KfdTree, sysfs: dict[str, PciSysfs], texts: dict[str, list[str]]) -> list[str]:
    """Start the section ``line`` names; return the list its lines go to."""
    words = line.split()
    match words:
        case ["@@node", node] if node.isdigit():
            key = f"node {node}"
        case ["@@io_link", node, link] if node.isdigit() and link.isdigit():
            key = f"io_link {node} {link}"
        case ["@@pci", bdf, numa, partition, *memory] if len(memory) <= 1 and (
            numa == "-" or numa.lstrip("-").isdigit()
        ):
            mem = memory[0] if memory and memory[0] != "-" else None
            sysfs[bdf] = PciSysfs(None if numa == "-" else int(numa), None if partition == "-" else partition, mem)
            return []
        case ["@@unbound", bdf] if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", bdf):
            if bdf not in texts.setdefault("unbound", []):
                texts["unbound"].append(bdf)
            return []
        case ["@@unbound", *_]:
            raise TopologyParseError("GpuTopology fact", "@@unbound needs one PCI address (DDDD:BB:DD.F)", line)
        case ["@@lscpu"] | ["@@meminfo"]:
            key = words[0][2:]
        case _:
            raise TopologyParseError("GpuTopology fact", "unknown section marker", line)
    return texts.setdefault(key, [])


def _close_sections(kfd: KfdTree, texts: dict[str, list[str]]) -> None:
    """Move the ``node``/``io_link`` sections into ``kfd`` (io_links in link order)."""
    links: dict[int, list[tuple[int, str]]] = {}
    for key, body in texts.items():
        kind, *ids = key.split()
        if kind == "node":
            kfd["nodes"][int(ids[0])] = "\n".join(body)
        elif kind == "io_link":
            links.setdefault(int(ids[0]), []).append((int(ids[1]), "\n".join(body)))
    for node in kfd["nodes"]:
        kfd["io_links"][node] = [text for _, text in sorted(links.get(node, []))]
