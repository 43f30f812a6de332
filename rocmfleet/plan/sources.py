"""Where an offline plan's host facts come from: a recorded topology, or the part's default (pure reads).

``rocmfleet plan --topology SPEC`` plans every host on one :class:`HostFacts`:

- no ``SPEC``, or the name ``mi300x``: :data:`DEFAULT_NAME`, 8x MI300X in SPX/NPS1 on a
  two-socket host (:func:`default_topology_lines`);
- the name of a recorded topology shipped in the package (:func:`shipped_names`:
  ``rocmfleet/plan/topologies/<name>.txt``, e.g. ``mi308x-8gpu-cpx``);
- a file holding the GPU topology script's output (``rocmfleet.facts.topology.SCRIPT``, starting
  with ``@@rocmfleet-gpu-topology 1``), as the ``GpuTopology`` fact parses it;
- a directory: a copy of ``/sys/class/kfd/kfd/topology`` (or its ``nodes``, or of
  ``/sys/class/kfd/kfd`` itself), no CPU/NUMA data;
- a JSON file, a *recorded host*: ``{"topology": [script output lines], "device_gids": [44, 992],
  "os": {"id": "debian", "version_id": "12", "codename": "bookworm", "kernel": "6.1.0-28-amd64"}}``
  (every key but ``topology`` optional; another key is refused).

Facts a file does not carry take the documented defaults (:data:`DEFAULT_GIDS`,
:data:`DEFAULT_OS`) and :attr:`HostFacts.assumed` names each, so the plan says what it assumed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from rocmfleet.domain.topology import Topology, TopologyParseError, build_topology, read_kfd_tree
from rocmfleet.facts.state import Gathered
from rocmfleet.facts.topology import END, HEADER, parse_fact_output

DEFAULT_NAME = "mi300x"
#: The recorded topologies shipped with the package (``SOURCES.md`` there says where each is from).
SHIPPED = Path(__file__).resolve().parent / "topologies"
#: Bus numbers of the 8 MI300X of an OAM platform (``../shared/fixtures/amd-smi-list-mi300x-truncated.txt``:
#: 0000:05:00.0 ... 0000:e5:00.0), four on each socket.
MI300X_BUSES = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)
#: The group id assumed for ``/dev/kfd`` and the render nodes: Debian 12's ``render`` group as the
#: lab's hosts and ``tests/fixtures/plans/lab-1`` show it (a system group: its number is the OS's).
DEFAULT_GIDS: tuple[int, ...] = (992,)
#: The OS assumed: Debian 12 (bookworm), the release the deploy falls back to when it cannot read one
#: (``roles/rocm``: ``rocm.OS_TARGETS[("debian", "12")]``).
DEFAULT_OS = {"id": "debian", "version_id": "12", "codename": "bookworm", "kernel": ""}
#: The keys a recorded ``os`` must give (``kernel`` may be left out: kernel packages are then asked by pattern).
OS_REQUIRED = ("id", "version_id", "codename")
#: One past the largest group id (``gid_t`` is 32-bit unsigned; 4294967295 is ``(gid_t)-1``, "no group", chown(2)).
MAX_GID = 2**32 - 1


#: The keys of a recorded host file (the module's text).
RECORDED_KEYS = ("topology", "device_gids", "os")


class SourceError(ValueError):
    """A ``--topology`` that cannot be read: names the file and what is wrong."""


@dataclass(frozen=True)
class HostFacts:
    """What an offline plan knows of a host besides its data.

    Attributes:
        source: where the topology came from (``default mi300x (8x MI300X, SPX, NPS1)``, a path).
        topology: the GPUs and NUMA nodes (``None``: no KFD, nothing is placed).
        device_gids: group ids of ``/dev/kfd`` and the render nodes.
        os_id, os_version, os_codename, kernel: ``/etc/os-release`` and ``uname -r`` (kernel ``""``: unknown).
        assumed: the facts that are defaults, not recorded (``device_gids``, ``os``).
    """

    source: str
    topology: Topology | None
    device_gids: tuple[int, ...] = DEFAULT_GIDS
    os_id: str = DEFAULT_OS["id"]
    os_version: str = DEFAULT_OS["version_id"]
    os_codename: str = DEFAULT_OS["codename"]
    kernel: str = ""
    assumed: tuple[str, ...] = ("device_gids", "os")


def default_topology_lines() -> list[str]:
    """The GPU topology script's output for the default part: 8x MI300X (device_id 0x74a1 = 29857,
    gfx942 = ``gfx_target_version 90402``, 8 XCCs, 304 CUs = ``simd_count 1216``: AMD's MI300X data
    sheet and ``../shared/fixtures/kfd-topology-mi300x-*``) in SPX and NPS1 on two sockets of 96
    cores with SMT (node 0: CPUs 0-95,192-287; node 1: 96-191,288-383; 768 GiB each), GPUs 0-3 on
    node 0 and 4-7 on node 1, render minors 128-135."""
    lines = [
        HEADER,
        "@@node 0",
        "cpu_cores_count 192",
        "simd_count 0",
        "@@node 1",
        "cpu_cores_count 192",
        "simd_count 0",
    ]
    for i, bus in enumerate(MI300X_BUSES):
        node = i + 2
        lines += [
            f"@@node {node}",
            "cpu_cores_count 0",
            "simd_count 1216",
            "num_xcc 8",
            "device_id 29857",
            "gfx_target_version 90402",
            f"location_id {bus << 8}",
            "domain 0",
            f"drm_render_minor {128 + i}",
            f"unique_id {0xAF54E92B0A5D5700 + i}",
            f"@@io_link {node} 0",
            "type 2",
            f"node_from {node}",
            f"node_to {i // 4}",
            "weight 20",
        ]
    lines += [f"@@pci 0000:{bus:02x}:00.0 {i // 4} SPX NPS1" for i, bus in enumerate(MI300X_BUSES)]
    lines += ["@@lscpu", "NUMA node(s): 2", "NUMA node0 CPU(s): 0-95,192-287", "NUMA node1 CPU(s): 96-191,288-383"]
    lines += ["@@meminfo", "Node 0 MemTotal: 805306368 kB", "Node 1 MemTotal: 805306368 kB", END]
    return lines


def default_facts() -> HostFacts:
    """:class:`HostFacts` of the default part, with the default device group ids and OS (assumed)."""
    return HostFacts(f"default {DEFAULT_NAME} (8x MI300X, SPX, NPS1)", parse_fact_output(default_topology_lines()))


def shipped_names() -> list[str]:
    """Names ``--topology`` takes besides files: :data:`DEFAULT_NAME` and each shipped recording."""
    return [DEFAULT_NAME, *sorted(p.stem for p in SHIPPED.glob("*.txt"))]


def load(spec: str | None) -> HostFacts:
    """The :class:`HostFacts` ``--topology SPEC`` names (see the module's text).

    Raises:
        SourceError: no such name or file, a file that is neither the script's output nor a recorded
            host, a directory without KFD nodes, or text the topology parsers refuse; the message
            names the file and what is allowed.
    """
    if spec is None or spec == DEFAULT_NAME:
        return default_facts()
    names = ", ".join(shipped_names())
    allowed = f"give a name ({names}), the GPU topology script's output, a recorded host (JSON) or a KFD tree directory"
    if "/" not in spec and (SHIPPED / f"{spec}.txt").is_file():
        return HostFacts(f"shipped {spec}", parse_fact_output((SHIPPED / f"{spec}.txt").read_text().splitlines()))
    path = Path(spec)
    try:
        if path.is_dir():  # a copy of /sys/class/kfd/kfd holds the topology directory
            tree = path / "topology" if (path / "topology" / "nodes").is_dir() else path
            return HostFacts(f"kfd tree {spec}", build_topology(read_kfd_tree(tree)))
        if path.exists() and not path.is_file():  # /dev/null, a pipe: nothing to read a topology from
            raise SourceError(f"--topology {spec}: not a regular file or a directory; {allowed}")
        if not path.is_file():
            raise SourceError(f"--topology {spec}: no such file or directory; {allowed}")
        text = path.read_text()
        if text.lstrip().startswith("{"):
            return _recorded_host(spec, json.loads(text))
        return HostFacts(f"recorded {spec}", parse_fact_output(text.splitlines()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TopologyParseError) as exc:
        raise SourceError(f"--topology {spec}: {exc}; {allowed}") from None


def _recorded_host(spec: str, data: object) -> HostFacts:
    """A recorded host file's facts (keys ``topology``, ``device_gids``, ``os``)."""
    if not isinstance(data, dict) or not isinstance(data.get("topology"), list):
        raise SourceError(f"--topology {spec}: a recorded host is a JSON object with 'topology': [lines]")
    # a misspelt key ("device_gid") would otherwise be the default, said as assumed only
    if unknown := sorted(set(data) - set(RECORDED_KEYS)):
        raise SourceError(
            f"--topology {spec}: unknown key(s) {', '.join(map(repr, unknown))} of a recorded host; "
            f"allowed: {', '.join(map(repr, RECORDED_KEYS))}"
        )
    assumed: list[str] = []
    problems: list[str] = []  # every problem of the file at once
    gids = data.get("device_gids")
    if gids is None:
        assumed.append("device_gids")
        gids = list(DEFAULT_GIDS)
    # gid_t is 32-bit unsigned; (gid_t)-1 (4294967295) means "no group" (chown(2)); bool is not a gid
    if not isinstance(gids, list) or not all(type(g) is int and 0 <= g < MAX_GID for g in gids):
        problems.append(f"'device_gids' is a list of group ids (integers 0 to {MAX_GID - 1}), not {gids!r}")
    found = data.get("os")
    if found is None:
        assumed.append("os")
        found = DEFAULT_OS
    if (
        not isinstance(found, dict)
        or not all(isinstance(found.get(k, ""), str) for k in DEFAULT_OS)
        or set(found) - set(DEFAULT_OS)
    ):
        problems.append(f"'os' is an object of strings {sorted(DEFAULT_OS)}, not {found!r}")
    elif missing := [k for k in OS_REQUIRED if not found.get(k)]:
        # a partial os would be completed with Debian's values: "ubuntu 12" is no OS
        problems.append(
            f"'os' lacks {', '.join(map(repr, missing))} (recorded: {found!r}); give each of {list(OS_REQUIRED)}"
        )
    if problems:
        raise SourceError(f"--topology {spec}: " + "; ".join(problems))
    return HostFacts(
        source=f"recorded host {spec}",
        topology=parse_fact_output([str(line) for line in data["topology"]]),
        device_gids=tuple(sorted(set(gids))),
        os_id=found.get("id", DEFAULT_OS["id"]),
        os_version=found.get("version_id", DEFAULT_OS["version_id"]),
        os_codename=found.get("codename", DEFAULT_OS["codename"]),
        kernel=found.get("kernel", ""),
        assumed=tuple(assumed),
    )


# -- a connected host's facts, from its own ``HostState`` read ----------------------------------

#: ``HostFacts.source`` of facts read from the host.
READ_SOURCE = "read from the host"
#: The read's run of the GPU topology script (``rocmfleet.facts.topology.SCRIPT``): the name
#: ``rocmfleet.plan.vllmplan.TOPOLOGY_RUN`` gives it in the deploy's read (a test keeps them equal).
TOPOLOGY_RUN = "gpu-topology"
#: ``/dev/kfd`` and the render nodes: the device files whose group ids the containers are given.
KFD = "/dev/kfd"
RENDER_GLOB = "/dev/dri/renderD*"


def from_read(got: Gathered) -> HostFacts:
    """The :class:`HostFacts` a ``HostState`` read of the OS, :data:`KFD`, :data:`RENDER_GLOB` and the GPU
    topology script as run :data:`TOPOLOGY_RUN` shows (source
    :data:`READ_SOURCE`): its GPU topology (``None`` when it holds none, or one the script did not
    give or the parser refuses: no instance is then placed), the group ids of the device nodes that
    exist (:data:`DEFAULT_GIDS` and ``assumed`` when none does), its OS and running kernel (``os``
    assumed when not read)."""
    ran = got.runs.get(TOPOLOGY_RUN)
    topology = None
    if ran is not None and ran[0] == 0:
        try:
            topology = parse_fact_output(ran[1])
        except TopologyParseError:
            topology = None
    nodes = (item for path, item in got.paths.items() if path == KFD or fnmatchcase(path, RENDER_GLOB))
    gids = tuple(sorted({int(i.gid) for i in nodes if i.gid and i.gid.isdigit()}))
    assumed = ([] if gids else ["device_gids"]) + ([] if got.os else ["os"])
    facts = HostFacts(READ_SOURCE, topology, gids or DEFAULT_GIDS, assumed=tuple(assumed))
    if got.os is None:
        return facts
    os = got.os
    return dataclasses.replace(facts, os_id=os.id, os_version=os.version_id, os_codename=os.codename, kernel=os.kernel)
