"""Corpus case: see expected.txt."""

import os as _os

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check

# tests/unit/test_corpus.py listens on a free port and names it here, to see any connection attempt.
_port = int(_os.environ.get("ROCMFLEET_CORPUS_SSH_PORT", "9"))
_conn = {"ssh_hostname": "127.0.0.1", "ssh_port": _port, "ssh_user": "root"}

# One deploy writes one file of the whole inventory's targets: node-2 names another.
all = (  # noqa: A001
    [
        ("node-1", _conn),
        ("node-2", {**_conn, "ssh_hostname": "127.0.0.2", "metrics_targets_file": "/tmp/other-targets.json"}),
        ("node-3", {**_conn, "ssh_hostname": "127.0.0.3"}),
    ],
    {},
)
gpu_nodes = (["node-1", "node-2", "node-3"], _load("gpu_nodes"))

_check(__file__)
