"""A lab inventory of N names over the lab's hosts, for ``measure/converge.py`` (lab only).

``ROCMFLEET_BENCH_NAMES=N pyinfra measure/lab_names.py deploy.py``: names ``n0000-lab-1``,
``n0001-lab-2``... are dealt round-robin over the lab's hosts. Each name reaches its host through
an SSH config entry (``Host n0000-lab-1`` / ``HostName <address>``, in a file written to the
temporary directory and named by ``ssh_config_file``), as a fleet behind aliases does, so pyinfra treats
each name as its own host; an inventory that gave many names one ``ssh_hostname`` would be refused
(one machine under two names). Every name on the first lab host
carries the same two instances as ``inventories/lab.py`` gives it, so all names converge to the
state the lab already has (a no-op). Group data is ``inventories/lab.py``'s, read the way that
inventory reads it: its file is executed afresh each time this one is (``runpy.run_path``), so its
``load_group_vars`` calls are recorded on every load. An ``import inventories.lab`` is executed
once per process: the validation pyinfra runs on load (``check_on_load``) then found the module
cached, no group file recorded, and refused ``group_vars/all.yml`` as not loaded.
"""

import os as _os
import runpy as _runpy
import tempfile as _tempfile
from pathlib import Path as _Path

from rocmfleet.config.validate import check_on_load as _check

# inventories/lab.py's groups, its group files read again by this load (see above)
_lab = _runpy.run_path(str(_Path(__file__).resolve().parents[1] / "inventories" / "lab.py"))

_count = int(_os.environ.get("ROCMFLEET_BENCH_NAMES", "1"))
_hosts = _lab["all"][0]  # (name, {"ssh_hostname": address, ...}) of each lab host
_dealt = [(f"n{i:04d}-{_hosts[i % len(_hosts)][0]}", dict(_hosts[i % len(_hosts)][1])) for i in range(_count)]
_ssh_config = _Path(_tempfile.gettempdir()) / f"rocmfleet-lab-names-{_os.getuid()}.ssh_config"
_ssh_config.write_text("".join(f"Host {name}\n  HostName {data.pop('ssh_hostname')}\n" for name, data in _dealt))
_names = [(name, {**data, "ssh_config_file": str(_ssh_config)}) for name, data in _dealt]

all = (_names, _lab["all"][1])  # noqa: A001 - pyinfra's name for the group of every host
gpu_nodes = ([name for name, _data in _names], _lab["gpu_nodes"][1])

_check(__file__)
