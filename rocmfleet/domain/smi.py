"""The GPU lists and topologies AMD's SMI tools print (``rocm-smi --showtoponuma``, ``amd-smi list``,
``amd-smi topology --json``), parsed; a format it does not know raises
:class:`rocmfleet.domain.topology.TopologyParseError` naming the tool and quoting the line
(``../shared/reference/mi300x.md`` §7)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NamedTuple

from rocmfleet.domain.topology import TopologyParseError

ROCM_SMI_TOPONUMA = "rocm-smi --showtoponuma"
AMD_SMI_LIST = "amd-smi list"
AMD_SMI_TOPOLOGY_JSON = "amd-smi topology --json"


class SmiGpu(NamedTuple):
    """One ``amd-smi list`` entry."""

    gpu: int
    bdf: str
    uuid: str


class SmiGpuLinks(NamedTuple):
    """One ``amd-smi topology --json`` entry: the GPU and the link type to each GPU (``SELF`` for itself)."""

    gpu: int
    bdf: str
    link_types: dict[int, str]


# ---------------------------------------------------------------------------------------------
# rocm-smi / amd-smi

_SMI_NUMA = re.compile(r"GPU\[(\d+)\]\s*: \(Topology\) Numa (Node|Affinity): (-?\d+)")


def parse_rocm_smi_toponuma(text: str) -> dict[int, int]:
    """``{gpu index: NUMA node}`` from ``rocm-smi --showtoponuma``.

    rocm-smi prints ``Numa Node`` (the KFD CPU node, rocm_smi_kfd.cc) and ``Numa Affinity``
    (sysfs ``numa_node``, rocm_smi_device.cc). Affinity wins: KFD reports node 0 for an unknown
    node (kfd_crat.c), the kernel reports -1.

    Raises:
        TopologyParseError: a line that is neither a banner (``====``), a ``WARNING:`` nor a
            ``GPU[i] : (Topology) Numa …`` line; or no GPU lines.
    """
    node: dict[int, int] = {}
    affinity: dict[int, int] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("=", "WARNING:")):
            continue
        match = _SMI_NUMA.fullmatch(stripped)
        if not match:
            raise TopologyParseError(ROCM_SMI_TOPONUMA, "unknown line", line)
        (node if match[2] == "Node" else affinity)[int(match[1])] = int(match[3])
    if not node and not affinity:
        raise TopologyParseError(ROCM_SMI_TOPONUMA, "no 'GPU[i] : (Topology) Numa' lines")
    return dict(sorted({**node, **affinity}.items()))


_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_TRUNCATED = "[output truncated]"


def parse_amd_smi_list(text: str, allow_truncated: bool = False) -> list[SmiGpu]:
    """``[(gpu, bdf, uuid)]`` from ``amd-smi list`` (human output: ``GPU: 0`` then indented ``KEY: value``).

    Keys other than ``BDF`` and ``UUID`` (``KFD_ID``, ``NODE_ID``, ``PARTITION_ID`` in newer
    versions) are read past.

    Args:
        allow_truncated: accept a ``[output truncated]`` line (published excerpts have one) and
            return the entries before it. Otherwise it is an error: the list would be short.

    Raises:
        TopologyParseError: an unknown line, an entry without BDF or UUID, a malformed BDF.
    """
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == _TRUNCATED and allow_truncated:
            break
        if not stripped:
            continue
        if gpu := re.fullmatch(r"GPU: (\d+)", stripped):
            entries.append({"GPU": gpu[1]})
        elif (field := re.fullmatch(r"([A-Z_]+): (.*)", stripped)) and entries and line[:1].isspace():
            entries[-1][field[1]] = field[2].strip()
        else:
            raise TopologyParseError(AMD_SMI_LIST, "unknown line", line)
    return [_smi_gpu(entry) for entry in entries]


def _smi_gpu(entry: Mapping[str, str]) -> SmiGpu:
    for key in ("BDF", "UUID"):
        if key not in entry:
            raise TopologyParseError(AMD_SMI_LIST, f"GPU {entry['GPU']} has no {key}")
    if not _BDF.fullmatch(entry["BDF"]):
        raise TopologyParseError(AMD_SMI_LIST, f"GPU {entry['GPU']}: not a PCI address", entry["BDF"])
    return SmiGpu(gpu=int(entry["GPU"]), bdf=entry["BDF"], uuid=entry["UUID"])


def parse_amd_smi_topology_json(text: str) -> list[SmiGpuLinks]:
    """Link types from ``amd-smi topology [-a] [-t] --json``: a JSON list of
    ``{"gpu", "bdf", "links": [{"gpu", "bdf", "link_type", …}]}`` (amdsmi CHANGELOG, ROCm 6.3.0).

    Raises:
        TopologyParseError: not JSON (quoting the line it breaks on), not a list of such objects.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        lines = text.splitlines()
        line = lines[e.lineno - 1] if 0 < e.lineno <= len(lines) else ""
        raise TopologyParseError(AMD_SMI_TOPOLOGY_JSON, f"not JSON ({e.msg}, line {e.lineno})", line) from e
    if not isinstance(data, list):
        raise TopologyParseError(AMD_SMI_TOPOLOGY_JSON, f"expected a JSON list, got {type(data).__name__}")
    return [_smi_links(entry) for entry in data]


def _smi_links(entry: object) -> SmiGpuLinks:
    ok = isinstance(entry, dict) and isinstance(entry.get("gpu"), int) and isinstance(entry.get("bdf"), str)
    links = entry.get("links") if isinstance(entry, dict) else None
    if not ok or not isinstance(entry, dict) or not isinstance(links, list):
        raise TopologyParseError(AMD_SMI_TOPOLOGY_JSON, "entry without gpu/bdf/links", json.dumps(entry)[:200])
    types: dict[int, str] = {}
    for link in links:
        if not (isinstance(link, dict) and isinstance(link.get("gpu"), int) and isinstance(link.get("link_type"), str)):
            raise TopologyParseError(AMD_SMI_TOPOLOGY_JSON, "link without gpu/link_type", json.dumps(link)[:200])
        types[link["gpu"]] = link["link_type"]
    return SmiGpuLinks(gpu=entry["gpu"], bdf=entry["bdf"], link_types=types)
