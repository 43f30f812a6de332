"""Corpus case: see expected.txt. Two profiles of one model share served_model_name `chat` (one
service, allowed); a third profile of another model gives the same name (refused)."""

import os as _os

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check

# tests/unit/test_corpus.py listens on a free port and names it here, to see any connection attempt.
_port = int(_os.environ.get("ROCMFLEET_CORPUS_SSH_PORT", "9"))
_conn = {"ssh_hostname": "127.0.0.1", "ssh_port": _port, "ssh_user": "root"}

all = (  # noqa: A001
    [
        ("node-1", _conn),
        ("node-2", {**_conn, "ssh_hostname": "127.0.0.2"}),
        ("node-3", {**_conn, "ssh_hostname": "127.0.0.3"}),
    ],
    {},
)
llama_a = (["node-1"], _load("llama_a"))
llama_b = (["node-2"], _load("llama_b"))
qwen = (["node-3"], _load("qwen"))

_check(__file__)
