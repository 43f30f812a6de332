"""Corpus case: see expected.txt."""

from pathlib import Path as _Path

from rocmfleet.groupvars import load_group_vars as _load
from rocmfleet.validate import check_on_load as _check

_here = _Path(__file__).parent / "group_vars"
_conn = {"ssh_hostname": "127.0.0.1", "ssh_port": 9, "ssh_user": "root"}

all = ([("node-1", _conn), ("node-2", _conn)], _load("all", _here))  # noqa: A001
gpu_nodes = (["node-1", "node-2"], _load("gpu_nodes", _here))

_check(__file__)
