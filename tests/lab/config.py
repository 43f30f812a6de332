"""Where the lab keeps its files, and the addresses and ports it uses.

Everything here is lab-only: the lab is a stand-in for a rack of MI300X servers and
never leaks into ``rocmfleet/``, ``roles/`` or ``templates/`` (the package, its roles and templates).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: Root of everything the lab writes; caches survive ``lab down``, ``run/`` does not.
LAB_DIR = Path(os.environ.get("ROCMFLEET_LAB_DIR", "/var/lib/rocmfleet-lab"))
#: Caches (debootstrap trees, image, registry storage); two labs may share one.
CACHE_DIR = Path(os.environ.get("ROCMFLEET_LAB_CACHE", LAB_DIR / "cache"))
RUN_DIR = LAB_DIR / "run"
HOSTS_DIR = LAB_DIR / "hosts"
STATE_FILE = RUN_DIR / "state.json"

#: Repository root (``tests/lab/config.py`` -> three levels up).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Real MI300X tool outputs, shipped beside the repository (never copied into it).
FIXTURES_DIR = Path(os.environ.get("ROCMFLEET_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures"))

# A second lab beside the first (another LAB_DIR) needs its own bridge, subnet and host names.
BRIDGE = os.environ.get("ROCMFLEET_LAB_BRIDGE", "rflab0")
#: The lab's own subnet (first three octets of a /24); nothing outside this machine is addressed.
NETWORK_PREFIX = os.environ.get("ROCMFLEET_LAB_SUBNET", "10.213.0")
#: Host names are ``<prefix>-<n>``; nspawn names each host's veth ``vb-<name>``.
HOST_PREFIX = os.environ.get("ROCMFLEET_LAB_HOST_PREFIX", "lab")
GATEWAY = f"{NETWORK_PREFIX}.1"
PREFIX_LEN = 24
HOST_ADDRESS_BASE = 11  # lab-1 -> .11, lab-2 -> .12, ...

APT_PROXY_PORT = 3128
REGISTRY_PORT = 5000
AMD_REPO_PORT = 8080
HF_HUB_PORT = 8090
#: The lab's Prometheus (Debian's package; not 9090, which the distribution's own service may hold).
PROMETHEUS_PORT = 9190
#: The file_sd file the deploy writes (``metrics_targets_file``) and the lab's Prometheus reads.
METRICS_TARGETS_FILE = RUN_DIR / "prometheus" / "targets.json"

DEBIAN_MIRROR = os.environ.get("ROCMFLEET_LAB_MIRROR", "http://deb.debian.org/debian")

#: cgroup v1 hierarchies each host gets its own subtree in (see issue 2).
CGROUP_CONTROLLERS = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "systemd",
)


def host_name(index: int) -> str:
    """Name of the lab host with 1-based ``index`` (``lab-1``); short enough for nspawn's veth."""
    return f"{HOST_PREFIX}-{index}"


def host_address(index: int) -> str:
    """IPv4 address of the lab host with 1-based ``index`` on the lab bridge."""
    return f"{NETWORK_PREFIX}.{HOST_ADDRESS_BASE + index - 1}"


@dataclass
class LabState:
    """What ``lab up`` brought up; read by ``inventories/lab.py`` and the tests."""

    hosts: dict[str, str] = field(default_factory=dict)  # name -> address
    ssh_key: str = ""
    known_hosts: str = ""
    apt_proxy: str = ""
    registry: str = ""
    amd_repo: str = ""
    hf_endpoint: str = ""  # the stand-in Hugging Face Hub (tests/lab/hfhub.py)
    prometheus: str = ""  # the lab's Prometheus (Debian's package), scraping METRICS_TARGETS_FILE
    images: dict[str, str] = field(default_factory=dict)  # "repo:tag" -> "sha256:..."

    def save(self) -> None:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        tmp = STATE_FILE.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        tmp.replace(STATE_FILE)

    @staticmethod
    def vault_password_file() -> Path:
        """The lab's vault password (a test value, committed on purpose)."""
        return Path(__file__).resolve().parent / "vault-password"

    @classmethod
    def load(cls) -> LabState:
        """Read the state file.

        Raises:
            FileNotFoundError: the lab is not up (run ``python -m tests.lab up``).
        """
        if not STATE_FILE.exists():
            raise FileNotFoundError(f"{STATE_FILE} not found: the lab is not up (run `python -m tests.lab up`)")
        return cls(**json.loads(STATE_FILE.read_text()))
