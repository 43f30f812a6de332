from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from rocmfleet.config.profiles import Profile, load_profile, load_profiles
from rocmfleet.config.settings import host_config
from rocmfleet.domain.placement import InstanceShape, place
from rocmfleet.domain.topology import Gpu, NumaNode, Topology

DIGEST = "sha256:" + "ab" * 32
#: The lab's profile: this repository's own (``group_vars/profiles/``), not a shipped one.
LAB_PROFILE = Path(__file__).resolve().parents[2] / "group_vars" / "profiles" / "lab-tiny-llama.yml"


def every_profile() -> dict[str, Profile]:
    """The shipped profiles and the lab's, by name."""
    return {**load_profiles(), "lab-tiny-llama": load_profile(LAB_PROFILE)}


@pytest.fixture
def lab_data() -> dict[str, Any]:
    """Host data as ``inventories/lab.py`` gives it, plus pyinfra's own keys."""
    return {
        "ssh_user": "root",
        "ssh_hostname": "10.213.0.11",
        "apt_proxy": "http://10.213.0.1:3128",
        "docker_source": "debian",
        "docker_insecure_registries": ["10.213.0.1:5000"],
        "vllm_profile": "lab-tiny-llama",
        "vllm_image_repository": "10.213.0.1:5000/rocmfleet-lab/vllm-cpu",
        "vllm_image_tag": "0.32.0-lab.1",
        "vllm_image_digest": DIGEST,
        "vllm_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        # as inventories/lab.py gives its first host
        "vllm_instances": [
            {"name": "tiny-llama-a", "port": 8000, "gpus": [0]},
            {"name": "tiny-llama-b", "port": 8001, "gpus": [1]},
        ],
    }


#: Two NUMA nodes, 4 GPUs each, render minors with a gap (as on the MI308X fixture).
TOPOLOGY = Topology(
    gpus=tuple(
        Gpu(
            i,
            f"0000:{0x05 + i:02x}:00.0",
            i + 2,
            128 + i + (4 if i >= 4 else 0),
            0 if i < 4 else 1,
            "SPX",
            0x74A1,
            90402,
        )
        for i in range(8)
    ),
    numa_nodes=(NumaNode(0, tuple(range(0, 48)), 1024), NumaNode(1, tuple(range(48, 96)), 1024)),
)


@pytest.fixture
def lab_config(lab_data):
    return host_config(lab_data)


@pytest.fixture
def lab_placements(lab_config):
    shapes = [InstanceShape(i.name, i.port, i.gpus, 1) for i in lab_config.instances()]
    return {p.name: p for p in place(shapes, TOPOLOGY)}


@pytest.fixture(autouse=True)
def _forget_loaded_group_files():
    """Each test starts with no group file loaded: profiles are found beside loaded files."""
    from rocmfleet.config import groupvars

    groupvars.reset()
    yield
    groupvars.reset()


@pytest.fixture
def no_network(monkeypatch) -> list[str]:
    """Record (and fail) every TCP/UDP connect and DNS lookup the process tries. pyinfra's CLI
    package swaps in gevent's socket on import (``monkey.patch_all``), so it is imported first and
    the recorder goes on top of what the commands will use."""
    import pyinfra_cli  # noqa: F401

    tried: list[str] = []

    def refuse(what: str):
        def call(*args, **_kwargs):
            tried.append(f"{what}{args[1:] if what.startswith('socket.') else args}")
            raise OSError(f"test: no network ({what})")

        return call

    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    return tried
