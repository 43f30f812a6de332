"""The local lab: hosts, addresses and services from ``python -m tests.lab up``.

Run ``pyinfra -y inventories/lab.py deploy.py`` after ``python -m tests.lab up``; group data
comes from ``group_vars/all.yml`` and ``group_vars/lab.yml``, and the lab's state file adds
what changes from one lab run to the next (addresses, proxy, registry, image digest).
"""

import os as _os

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check
from tests.lab.config import METRICS_TARGETS_FILE as _TARGETS
from tests.lab.config import LabState as _LabState

# The lab's vault password (a test value, committed on purpose); a real fleet's is never in git.
_os.environ.setdefault("ROCMFLEET_VAULT_PASSWORD_FILE", str(_LabState.vault_password_file()))
_state = _LabState.load()
_lab = _load("lab")
_image = f"{_state.registry}/rocmfleet-lab/vllm-cpu"
_tag = "0.32.0-lab.1"

#: The first host runs two single-GPU instances (render nodes and CPU sets from its topology).
_two_instances = {
    "vllm_instances": [
        {"name": "tiny-llama-a", "port": 8000, "gpus": [0]},
        {"name": "tiny-llama-b", "port": 8001, "gpus": [1]},
    ]
}

all = (  # noqa: A001 - pyinfra's name for the group of every host
    [
        (name, {"ssh_hostname": address, **(_two_instances if index == 0 else {})})
        for index, (name, address) in enumerate(_state.hosts.items())
    ],
    _load("all"),
)

gpu_nodes = (
    list(_state.hosts),
    {
        # The lab's image; group_vars/lab.yml wins when it pins one (`rocmfleet rollout --image` writes it there).
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
        # the current stream's server is a directory of the same stand-in (tests/lab/amdrepo.py)
        "rocm_current_repo_url": f"{_state.amd_repo}/stable.repo.amd.com/rocm/core/packages",
        "rocm_current_key_url": f"{_state.amd_repo}/stable.repo.amd.com/rocm/gpg/packages.gpg",
        # AMD's metrics exporter from the same stand-in (tests/lab/amdrepo.py), signed with its repo.radeon.com key
        "metrics_exporter_repo_url": f"{_state.amd_repo}/device-metrics-exporter/apt",
        "docker_insecure_registries": [_state.registry],
        # the model is staged once per host from the stand-in Hub (tests/lab/hfhub.py)
        "vllm_hf_endpoint": _state.hf_endpoint or None,
        # the deploy writes the lab Prometheus's file_sd targets (tests/lab/services.py)
        "metrics_targets_file": str(_TARGETS),
    },
)

_check(__file__)
