"""Converge every host of an inventory to serving vLLM: ``pyinfra inventories/prod.py deploy.py``.

The roles, templates and host scripts are in the installed ``rocmfleet`` package; this file runs
them. Keep it to these lines: ``rocmfleet rollout`` and ``restart`` converge each host they switch
with the package's own copy of it (``rocmfleet/deploy.py``), so anything added here would run in a
plain deploy and not in a rollout. Put other operations in a deploy file of their own.
"""

from rocmfleet.converge import converge

converge()
