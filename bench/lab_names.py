"""A lab inventory of N names over the lab's hosts, for ``bench/converge.py`` (lab only).

``ROCMFLEET_BENCH_NAMES=N pyinfra bench/lab_names.py deploy.py``: names ``n0000-lab-1``,
``n0001-lab-2``... are dealt round-robin over the lab's hosts, each with ``ssh_hostname`` set to
its host's address, so pyinfra treats each name as its own host. Every name on the first lab host
carries the same two instances as ``inventories/lab.py`` gives it, so all names converge to the
state the lab already has (a no-op). Group data is ``inventories/lab.py``'s.
"""

import os as _os

from rocmfleet.groupvars import load_group_vars as _load
from rocmfleet.validate import check_on_load as _check
from tests.lab.config import LabState as _LabState

_os.environ.setdefault("ROCMFLEET_VAULT_PASSWORD_FILE", str(_LabState.vault_password_file()))
_state = _LabState.load()
_lab = _load("lab")
_image = f"{_state.registry}/rocmfleet-lab/vllm-cpu"
_tag = "0.32.0-lab.1"
_count = int(_os.environ.get("ROCMFLEET_BENCH_NAMES", "1"))
_hosts = list(_state.hosts.items())
_two_instances = {
    "vllm_instances": [
        {"name": "tiny-llama-a", "port": 8000, "gpus": [0]},
        {"name": "tiny-llama-b", "port": 8001, "gpus": [1]},
    ]
}
_names = []
for _i in range(_count):
    _lab_name, _address = _hosts[_i % len(_hosts)]
    _extra = _two_instances if _i % len(_hosts) == 0 else {}
    _names.append((f"n{_i:04d}-{_lab_name}", {"ssh_hostname": _address, **_extra}))

all = (_names, _load("all"))  # noqa: A001 - pyinfra's name for the group of every host

gpu_nodes = (
    [name for name, _data in _names],
    {
        "vllm_image_repository": _image,
        "vllm_image_tag": _tag,
        "vllm_image_digest": _state.images.get(f"{_image}:{_tag}"),
        **_lab,
        "ssh_user": "root",
        "ssh_key": _state.ssh_key,
        "ssh_known_hosts_file": _state.known_hosts,
        "ssh_strict_host_key_checking": "yes",
        "apt_proxy": _state.apt_proxy,
        "rocm_repo_url": _state.amd_repo,
        "rocm_key_url": f"{_state.amd_repo}/rocm/rocm.gpg.key",
        "rocm_current_repo_url": f"{_state.amd_repo}/stable.repo.amd.com/rocm/core/packages",
        "rocm_current_key_url": f"{_state.amd_repo}/stable.repo.amd.com/rocm/gpg/packages.gpg",
        "docker_insecure_registries": [_state.registry],
    },
)

_check(__file__)
