"""Load ``group_vars/<group>.yml`` for pyinfra inventories (pyinfra itself reads only ``.py``).

A file may be wholly encrypted with ansible-vault (then it holds secrets only: every string in
it is one), or hold inline ``!vault |`` values; both decrypt to :class:`rocmfleet.vault.Secret`.
Every loaded file is remembered, so that validation can say which file a bad value came from
(:func:`source_of`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from rocmfleet import vault

#: ``group_vars/`` beside ``inventories/``, i.e. at the project root.
GROUP_VARS_DIR = Path(__file__).resolve().parent.parent / "group_vars"

#: When True (pyinfra loading an inventory), an unreadable file prints its error and exits 2
#: before any connection; :mod:`rocmfleet.validate` turns it off to collect the error itself.
EXIT_ON_ERROR = True

#: group name -> (file, its keys), for every file :func:`load_group_vars` read.
LOADED: dict[str, tuple[Path, frozenset[str]]] = {}


class GroupVarsError(ValueError):
    """A group variables file cannot be read; the message names the file and the problem."""


def _loader(path: Path) -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        pass

    def construct_vault(loader: yaml.SafeLoader, node: yaml.Node) -> vault.Secret:
        key = getattr(node, "_rocmfleet_key", "")
        text = loader.construct_scalar(node)  # type: ignore[arg-type]
        return vault.Secret(vault.decrypt(str(text), f"{path}: line {node.start_mark.line + 1}{key}"))

    Loader.add_constructor("!vault", construct_vault)
    return Loader


def load_group_vars(group: str, directory: Path = GROUP_VARS_DIR) -> dict[str, Any]:
    """Read ``<directory>/<group>.yml`` into a dict (``{}`` when the file does not exist).

    Args:
        group: pyinfra group name (``all``, ``gpu_nodes``, ...).
        directory: where the YAML files live; defaults to the project's ``group_vars/``.

    Raises:
        GroupVarsError: the file is not valid YAML, its top level is not a mapping, or a vault
            value in it cannot be decrypted (wrong password, no password, damaged data); with
            :data:`EXIT_ON_ERROR` the message goes to stderr and the process exits with status 2.

    Example:

    .. code:: python

        gpu_nodes = (["gpu-1"], load_group_vars("gpu_nodes"))
    """
    try:
        return _read(group, directory / f"{group}.yml")
    except GroupVarsError as exc:
        if not EXIT_ON_ERROR:
            raise
        print(f"rocmfleet: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _read(group: str, path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text()
    try:
        if vault.is_encrypted(text):
            text = vault.decrypt(text, str(path))
            data = yaml.safe_load(text)
            data = _secret_leaves(data or {})
        else:
            data = yaml.load(text, Loader=_loader(path))  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise GroupVarsError(f"{path}: not valid YAML: {exc}") from None
    except vault.VaultError as exc:
        raise GroupVarsError(str(exc)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise GroupVarsError(f"{path}: top level must be a mapping of keys to values, got {type(data).__name__}")
    LOADED[group] = (path, frozenset(data))
    return data


def _secret_leaves(value: Any) -> Any:
    """Every string of a wholly encrypted file, at any depth, as a :class:`~rocmfleet.vault.Secret`.

    Such a file holds secrets only (``vllm_secret_env: {HF_TOKEN: ...}``); a setting that is
    not a secret belongs in a plain file, and validation says so.
    """
    if isinstance(value, str):
        return vault.Secret(value)
    if isinstance(value, dict):
        return {k: _secret_leaves(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_secret_leaves(v) for v in value]
    return value


def profiles_dir() -> Path:
    """``profiles/`` beside the group files loaded so far (the project's ``group_vars/profiles``)."""
    for path, _keys in LOADED.values():
        if (path.parent / "profiles").is_dir():
            return path.parent / "profiles"
    return GROUP_VARS_DIR / "profiles"


def source_of(key: str, groups: list[str], inventory_file: str) -> str:
    """Which file gives ``key`` to a host in ``groups`` (pyinfra's order, last group wins)?

    Returns the ``group_vars`` file of the last group whose file holds the key, else the
    inventory file (host data or inline group data).
    """
    for group in reversed(groups):
        loaded = LOADED.get(group)
        if loaded and key in loaded[1]:
            return str(loaded[0])
    return inventory_file
