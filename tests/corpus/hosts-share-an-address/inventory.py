"""Corpus case: see expected.txt."""

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check

# Two names for one machine, twice: the same IP address, and one DNS name written two ways (case,
# trailing dot). A third host at the first address on another port is another machine (sshd per
# port, e.g. a container). Refused before any connection, so the port is fixed.
_a = {"ssh_hostname": "127.0.0.1", "ssh_port": 2222, "ssh_user": "root"}
all = (  # noqa: A001
    [
        ("node-1", _a),
        ("node-2", {**_a, "ssh_user": "ops"}),
        ("node-3", {**_a, "ssh_port": 2223}),
        ("gpu-7.example.net", {"ssh_port": 2222}),
        ("node-4", {"ssh_hostname": "GPU-7.example.net.", "ssh_port": 2222}),
    ],
    {},
)
gpu_nodes = (["node-1", "node-2", "node-3", "gpu-7.example.net", "node-4"], _load("gpu_nodes"))

_check(__file__)
