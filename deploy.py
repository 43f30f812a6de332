"""Converge hosts to serving vLLM: ``pyinfra inventories/<fleet>.py deploy.py``.

Roles run in a fixed order: base (apt proxy, packages), docker, vllm. Each host's data is
validated before any of its operations is planned.
"""

from pyinfra import host

import roles.base
import roles.docker
import roles.vllm
from rocmfleet.config import settings_for

settings = settings_for(host.name, host.data.dict())

roles.base.apply(settings)
roles.docker.apply(settings)
roles.vllm.apply(settings)
