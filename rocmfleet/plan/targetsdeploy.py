"""The deploy's rewrite of ``metrics_targets_file``: :func:`write_for_deploy`.

``pyinfra INVENTORY deploy.py`` calls it from :func:`rocmfleet.converge.converge` for each host; the
first call of a run writes the whole inventory's targets (:func:`rocmfleet.plan.targetsfile.write_file`),
on the control machine, while pyinfra prepares the run (before any operation runs on a host); the
others do nothing.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any

from pyinfra.api.exceptions import PyinfraError

from rocmfleet.config import groupvars
from rocmfleet.config.connection import SshSettings
from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import HostConfig, host_config
from rocmfleet.config.validate import validated_config, validated_on_load
from rocmfleet.plan import metricstargets as targets
from rocmfleet.plan.targetsfile import scrape_address, write_file

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.state import State

logger = logging.getLogger("pyinfra")


class TargetsFileError(PyinfraError):
    """``metrics_targets_file`` cannot be written; pyinfra ends the run with this one line, no traceback
    (a ``PyinfraError`` raised while the deploy file loads: ``pyinfra_cli/util.py`` ``exec_file``)."""


#: The pyinfra runs (``State``) whose targets file is written already: one write per run.
_WRITTEN: weakref.WeakSet[Any] = weakref.WeakSet()


def _config(state: State, host: Host) -> HostConfig | None:
    """The configuration ``host`` has in this run's targets.

    A host the run deploys (in ``--limit``): its data as the deploy sees it, ``--data`` overrides
    included (a rollout's deploy of the new image). Any other host: as the inventory validated it on
    load, without the overrides (``--data`` applies to every host's data, but only the limited ones
    change). ``None`` when neither validates (the host's own deploy reports why).
    """
    data = host.data.dict()
    on_load = validated_on_load(host.name)
    try:
        if state.is_host_in_limit(host):
            return validated_config(host.name, data) or host_config(data, groupvars.profiles_dir())
        return on_load or host_config(data, groupvars.profiles_dir())
    except ConfigError:
        return on_load


def write_for_deploy(state: State) -> str | None:
    """Rewrite ``metrics_targets_file`` with every host of the inventory, once per pyinfra run.

    Called for each host while pyinfra loads the deploy file (:func:`rocmfleet.converge.converge`);
    only the first call of a run (``state``) writes. Nothing is written when no host sets
    ``metrics_targets_file``.

    Returns:
        The line said in the deploy's output (``PATH: N vLLM instance(s) and ...``), or ``None``
        (another host's call wrote it, or no file is set).

    Raises:
        TargetsFileError: the hosts name different files (``rocmfleet validate`` refuses that
            first), or the file cannot be written.
    """
    if state in _WRITTEN:
        return None
    _WRITTEN.add(state)
    configs: list[tuple[Host, HostConfig]] = []
    files: dict[str | None, list[str]] = {}
    left_out = []
    for host in state.inventory:
        config = _config(state, host)
        if config is None:
            left_out.append(host.name)
            continue
        files.setdefault(config.metrics.metrics_targets_file, []).append(host.name)
        configs.append((host, config))
    if not set(files) - {None}:
        return None
    if len(files) > 1:
        said = "; ".join(f"{path or 'unset'} for {', '.join(names)}" for path, names in files.items())
        raise TargetsFileError(
            f"rocmfleet: metrics_targets_file: the hosts name different files ({said}): one file holds the whole "
            "inventory's targets; set it once, in group_vars/all.yml"
        )
    path = next(iter(files))
    assert path is not None
    hosts = [
        targets.FleetHost(host.name, scrape_address(SshSettings.from_host_data(host.name, host.data.dict())), config)
        for host, config in configs
    ]
    try:
        groups = write_file(path, hosts)
    except OSError as exc:
        raise TargetsFileError(
            f"rocmfleet: metrics_targets_file {path}: cannot write it on this machine "
            f"({exc.strerror or exc}); nothing was deployed"
        ) from None
    if left_out:
        logger.warning(f"rocmfleet: metrics_targets_file {path}: left out {', '.join(left_out)} (invalid data)")
    return f"rocmfleet: metrics_targets_file {path}: {targets.summary(groups)}"
