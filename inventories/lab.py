"""The local lab: hosts, addresses and services from ``python -m tests.lab up``.

Run ``pyinfra -y inventories/lab.py deploy.py`` after ``python -m tests.lab up``; group data
comes from ``group_vars/all.yml`` and ``group_vars/lab.yml``, and the lab's state file adds
what changes from one lab run to the next (addresses, proxy, registry, image digest).
"""

from rocmfleet.groupvars import load_group_vars as _load
from tests.lab.config import LabState as _LabState

_state = _LabState.load()
_lab = _load("lab")
_image = f"{_state.registry}/rocmfleet-lab/vllm-cpu"

all = (  # noqa: A001 - pyinfra's name for the group of every host
    [(name, {"ssh_hostname": address}) for name, address in _state.hosts.items()],
    _load("all"),
)

gpu_nodes = (
    list(_state.hosts),
    {
        **_lab,
        "ssh_user": "root",
        "ssh_key": _state.ssh_key,
        "ssh_known_hosts_file": _state.known_hosts,
        "ssh_strict_host_key_checking": "yes",
        "apt_proxy": _state.apt_proxy,
        "docker_insecure_registries": [_state.registry],
        "vllm_image_repository": _image,
        "vllm_image_digest": _state.images.get(f"{_image}:{_lab['vllm_image_tag']}", ""),
    },
)
