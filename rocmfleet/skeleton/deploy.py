"""Converge every host of an inventory to serving vLLM: ``pyinfra inventories/prod.py deploy.py``.

The roles, templates and host scripts are in the installed ``rocmfleet`` package; this file runs them.
"""

from rocmfleet.converge import converge

converge()
