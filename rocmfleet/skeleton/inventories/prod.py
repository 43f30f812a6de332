"""The fleet: ``pyinfra inventories/prod.py deploy.py`` (replace the example hosts with yours).

Groups are module-level tuples ``(hosts, data)``. Data comes from ``group_vars/<group>.yml``
(pyinfra itself reads only ``.py`` group data, so the YAML is loaded here); a group's name and its
file's name match, as in pyinfra and Ansible. A host's own dict wins over its groups, a later group
over an earlier one, and every group over ``all``. (pyinfra also puts every host in a group
named after this file, ``prod``: name your own groups otherwise.) The last line validates every host before
pyinfra connects to any (``rocmfleet validate inventories/prod.py`` does the same).

Hosts are reached with pyinfra's SSH client, which reads ``~/.ssh/config`` (``HostName``,
``User``, ``ProxyJump``, ``IdentityFile``): a host name that is an alias there needs no
``ssh_hostname``. Every host of another group must also be listed in ``all``: pyinfra takes
``all``'s list as every host there is (``rocmfleet validate`` refuses one that is not).
"""

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check

all = (  # noqa: A001 - pyinfra's name for the group of every host
    [
        ("mi300x-a01", {"ssh_hostname": "mi300x-a01.example.internal"}),
        ("mi300x-a02", {"ssh_hostname": "mi300x-a02.example.internal"}),
    ],
    _load("all"),
)

gpu_nodes = (
    ["mi300x-a01", "mi300x-a02"],
    _load("gpu_nodes"),
)

_check(__file__)
