"""Example production fleet (host names are placeholders): ``pyinfra inventories/prod.py deploy.py``.

Groups are module-level tuples ``(hosts, data)``; data comes from ``group_vars/<group>.yml``
(pyinfra reads only ``.py`` group data, so the YAML is loaded here). A host's own dict wins
over its groups, a later group over an earlier one, and every group over ``all``. The last
line validates every host before pyinfra connects to any (``rocmfleet validate`` does the same).
"""

from rocmfleet.config.groupvars import load_group_vars as _load
from rocmfleet.config.validate import check_on_load as _check

all = (  # noqa: A001 - pyinfra's name for the group of every host
    [
        ("mi300x-a01", {"ssh_hostname": "mi300x-a01.example.internal"}),
        ("mi300x-a02", {"ssh_hostname": "mi300x-a02.example.internal"}),
        ("mi300x-a03", {"ssh_hostname": "mi300x-a03.example.internal"}),
    ],
    _load("all"),
)

gpu_nodes = (
    ["mi300x-a01", "mi300x-a02", "mi300x-a03"],
    {**_load("prod"), "ssh_user": "root"},
)

_check(__file__)
