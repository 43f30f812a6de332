"""A lab inventory of N names over the lab's hosts, for ``measure/converge.py`` (lab only).

``ROCMFLEET_BENCH_NAMES=N pyinfra measure/lab_names.py deploy.py``: names ``n0000-lab-1``,
``n0001-lab-2``... are dealt round-robin over the lab's hosts, each with ``ssh_hostname`` set to
its host's address, so pyinfra treats each name as its own host. Every name on the first lab host
carries the same two instances as ``inventories/lab.py`` gives it, so all names converge to the
state the lab already has (a no-op). Group data is ``inventories/lab.py``'s.
"""

import os as _os

from inventories import lab as _lab
from rocmfleet.config.validate import check_on_load as _check

_count = int(_os.environ.get("ROCMFLEET_BENCH_NAMES", "1"))
_hosts = _lab.all[0]  # (name, {"ssh_hostname": address, ...}) of each lab host
_names = [(f"n{i:04d}-{_hosts[i % len(_hosts)][0]}", dict(_hosts[i % len(_hosts)][1])) for i in range(_count)]

all = (_names, _lab.all[1])  # noqa: A001 - pyinfra's name for the group of every host
gpu_nodes = ([name for name, _data in _names], _lab.gpu_nodes[1])

_check(__file__)
