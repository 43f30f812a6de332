"""Corpus case: see expected.txt."""

import os as _os

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check

# tests/unit/test_corpus.py listens on a free port and names it here, to see any connection attempt.
_port = int(_os.environ.get("ROCMFLEET_CORPUS_SSH_PORT", "9"))
_conn = {"ssh_hostname": "127.0.0.1", "ssh_port": _port, "ssh_user": "root"}

_names = ["node-1", "nod\u0435-2", "node\u200b-3", "rack/4", "gpu\u3164x", "gpu-\uff11"]
_bare = ["-gpu-6", "10.0.0.300"]  # no ssh_hostname: the name is the address
all = (
    [
        *((n, {**_conn, "ssh_hostname": f"127.0.0.{i + 1}"}) for i, n in enumerate(_names)),
        *((n, {"ssh_port": _port}) for n in _bare),
    ],
    {},
)  # noqa: A001
gpu_nodes = ([*_names, *_bare], _load("gpu_nodes"))

_check(__file__)
