"""Load ``group_vars/<group>.yml`` for pyinfra inventories (pyinfra itself reads only ``.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: ``group_vars/`` beside ``inventories/``, i.e. at the project root.
GROUP_VARS_DIR = Path(__file__).resolve().parent.parent / "group_vars"


class GroupVarsError(ValueError):
    """A group variables file cannot be read; the message names the file and the problem."""


def load_group_vars(group: str, directory: Path = GROUP_VARS_DIR) -> dict[str, Any]:
    """Read ``<directory>/<group>.yml`` into a dict (``{}`` when the file does not exist).

    Args:
        group: pyinfra group name (``all``, ``gpu_nodes``, ...).
        directory: where the YAML files live; defaults to the project's ``group_vars/``.

    Raises:
        GroupVarsError: the file is not valid YAML, or its top level is not a mapping.

    Example:

    .. code:: python

        gpu_nodes = (["gpu-1"], load_group_vars("gpu_nodes"))
    """
    path = directory / f"{group}.yml"
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise GroupVarsError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GroupVarsError(f"{path}: top level must be a mapping of keys to values, got {type(data).__name__}")
    return data
