"""Converge hosts to serving vLLM: ``pyinfra inventories/<fleet>.py deploy.py``.

Roles run in a fixed order: base (apt proxy, packages), rocm (AMD's repositories, the amdgpu
driver), tuning (MI300X OS settings), one reboot if the driver or kernel command line changed,
docker, vllm. A bare host converges in one run: the vllm role reads the GPU topology at
execution time, after the reboot (``roles/vllm``), not while pyinfra prepares the run.

Every per-host problem fails that host alone, through pyinfra's own error path
(:mod:`rocmfleet.operations.fail`): the other hosts converge and pyinfra exits non-zero naming
the failed hosts. The inventory already validated every host before connecting
(``rocmfleet.config.validate.check_on_load``); a host whose data is still what was validated there
uses that config, one changed by ``--data`` overrides is validated again here.
"""

import sys
import types

from pyinfra.context import host

import roles.base
import roles.docker
import roles.rocm
import roles.tuning
import roles.vllm
from rocmfleet.config import groupvars
from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import host_config
from rocmfleet.config.validate import validated_config
from rocmfleet.domain import vllm
from rocmfleet.facts.state import HostState
from rocmfleet.operations import fail
from rocmfleet.plan import hoststate, rocmplan, vllmplan

# pyinfra orders each operation by walking the call stack (``inspect.getframeinfo`` of every
# frame). This file is exec()'d by pyinfra, not imported, so for its frames ``inspect.getmodule``
# finds no module and scans all of ``sys.modules`` (~900 here) each time: about a fifth of the
# control CPU of a no-op converge. A module entry naming this file turns that scan into one cache
# hit. Nothing that runs on the hosts changes.
if "rocmfleet._deploy_file" not in sys.modules:
    sys.modules["rocmfleet._deploy_file"] = types.ModuleType("rocmfleet._deploy_file")
    sys.modules["rocmfleet._deploy_file"].__file__ = __file__

try:
    # Group files that could not be read (an inventory without check_on_load still loads them).
    if groupvars.problems():
        raise ConfigError(groupvars.problems())
    data = host.data.dict()
    config = validated_config(host.name, data) or host_config(data, groupvars.profiles_dir())
except ConfigError as exc:
    fail.failed(name="Validate this host's data", message=f"rocmfleet: {host.name}: {exc}".replace("\n", "; "))
else:
    # One read of everything the roles manage (files, units, packages, sysctls, the image, whether
    # each instance is serving); each role calls operations only for what differs from its data.
    got = host.get_fact(
        HostState,
        **hoststate.merge_queries(
            roles.base.query(config.settings),
            roles.rocm.query(config.rocm),
            roles.tuning.query(config.tuning),
            roles.docker.query(config.settings),
            vllmplan.query(config),
        ),
    )
    # What the rocm role would do (nothing, on a converged host: then none of its operations, its
    # reboot or its driver checks is called, and the host costs no command beyond the read).
    rocm_todo = rocmplan.differs(config.rocm, got)
    found = roles.rocm.preflight(config.rocm, got=got, todo=rocm_todo)
    roles.base.apply(config.settings, got=got)
    roles.rocm.apply(config.rocm, got=got, found=found, todo=rocm_todo)
    tuning_reboot = roles.tuning.apply(config.tuning, got=got)
    settled = not rocm_todo and not tuning_reboot and roles.tuning.cmdline_settled(config.tuning, got)
    rebooted = roles.rocm.reboot(config.rocm, predicted=tuning_reboot, got=got, found=found, settled=settled)
    instances = [(vllm.files_of(i).container, i.port) for i in config.instances()]
    roles.docker.apply(config.settings, instances=instances, got=got)
    roles.vllm.apply(config, rebooted=rebooted, got=got)
