"""Load ``group_vars/<group>.yml`` for pyinfra inventories (pyinfra itself reads only ``.py``).

Files are YAML 1.2 (:mod:`rocmfleet.config.yamlfile`): a key given twice, or a plain scalar that YAML
1.1 reads otherwise (``022``, ``no``), is a problem. A file may be wholly encrypted with
ansible-vault (then it holds secrets only: every string in it is one), or hold inline
``!vault |`` values; both decrypt to :class:`rocmfleet.config.vault.Secret`.

Where the files are: ``load_group_vars("prod")`` looks, as Ansible and pyinfra do, beside the
inventory file that calls it: ``<inventory dir>/group_vars/``, then the parent directory's
``group_vars/`` (the layout of this repository: ``inventories/prod.py`` and ``group_vars/``),
then ``./group_vars/`` (pyinfra's deploy directory); ``load_group_vars("prod", directory)``
names the directory. A named file that does not exist is a problem.

Problems do not stop the inventory from loading: every file is read and every problem is kept
in :data:`LOADED`, so that :func:`rocmfleet.config.validate.check_on_load` (the inventory's last line)
and ``rocmfleet validate`` report all of them at once, each with its file, line and key.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rocmfleet.config import vault, yamlfile
from rocmfleet.config.errors import Problem

#: Directory names searched for group files, relative to the inventory (see the module docstring).
DIRECTORY = "group_vars"


class GroupVarsError(ValueError):
    """A group variables file cannot be used; ``problems`` holds each problem (file, key, message)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass
class GroupFile:
    """One group file as read: its data, where each top-level key is, and what is wrong with it."""

    group: str
    path: Path
    data: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    fatal: bool = False  # could not be read at all: its data is unknown
    caller_file: str = ""  # the inventory (or module) that loaded it
    caller_line: int = 0

    @property
    def empty(self) -> bool:
        """True when the file holds no keys (empty, or comments only)."""
        return not self.fatal and not self.data


#: Every file :func:`load_group_vars` read since the last :func:`reset`, in order.
LOADED: list[GroupFile] = []


#: Whether inline ``!vault`` values are decrypted as a file is read (a deploy, check or rollout
#: writes them); :func:`secrets_by_name` turns it off for ``rocmfleet plan``.
_DECRYPT = [True]


@contextmanager
def secrets_by_name() -> Iterator[None]:
    """Inline ``!vault`` values read in this block are not decrypted: each is a stand-in
    :class:`~rocmfleet.config.vault.Secret` (its name is its key), so no vault password is needed.
    For ``rocmfleet plan``, which shows secrets by name only; a file encrypted whole still needs
    the password (its keys are unknown without it)."""
    _DECRYPT.append(False)
    try:
        yield
    finally:
        _DECRYPT.pop()


def reset() -> None:
    """Forget the files read so far (before an inventory is loaded again)."""
    LOADED.clear()


def display(path: Path | str) -> str:
    """``path`` relative to the working directory when it is under it, else absolute."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def search_dirs(inventory_file: str | None) -> list[Path]:
    """Where ``group_vars/`` may be for ``inventory_file``, in the order they are tried."""
    dirs = []
    if inventory_file:
        here = Path(inventory_file).resolve().parent
        dirs += [here / DIRECTORY, here.parent / DIRECTORY]
    dirs.append(Path.cwd() / DIRECTORY)
    return list(dict.fromkeys(dirs))


def load_group_vars(group: str, directory: Path | str | None = None) -> dict[str, Any]:
    """Read ``<group_vars>/<group>.yml`` into a dict of host data for a pyinfra group.

    Args:
        group: the file's name without ``.yml`` (usually the pyinfra group: ``all``, ``gpu_nodes``).
        directory: the directory holding the file; default: ``group_vars/`` found from the
            calling inventory's directory (module docstring).

    Returns:
        The file's top-level mapping; ``{}`` when it cannot be read. Nothing is raised: every
        problem (missing file, not UTF-8, invalid YAML, duplicate key, a YAML 1.1 scalar, a vault
        value that does not decrypt) is recorded in :data:`LOADED` for validation to report.

    Example:

    .. code:: python

        gpu_nodes = (["gpu-1"], load_group_vars("gpu_nodes"))
    """
    frame = sys._getframe(1)
    caller = frame.f_globals.get("__file__") or ""
    if directory is None:
        dirs = search_dirs(caller)
        found = next((d for d in dirs if (d / f"{group}.yml").is_file()), None)
        found = found or next((d for d in dirs if d.is_dir()), dirs[0])
        path = found / f"{group}.yml"
    else:
        dirs = [Path(directory)]
        path = Path(directory) / f"{group}.yml"
    loaded = read_group_file(group, path)
    loaded.caller_file, loaded.caller_line = caller, frame.f_lineno
    if not path.exists():
        where = f" (load_group_vars({group!r}) in {display(caller)} line {frame.f_lineno})" if caller else ""
        looked = "" if directory is not None else f"; looked in {', '.join(display(d) for d in dirs)}"
        loaded.problems = [Problem("", f"no such group file{where}{looked}", file=display(path))]
    LOADED.append(loaded)
    return loaded.data


def read_group_file(group: str, path: Path) -> GroupFile:
    """Read one group file; problems are in the result (``fatal`` when none of it could be read)."""
    name = display(path)
    result = GroupFile(group, path, {})
    try:
        raw = path.read_bytes()
    except OSError as exc:
        result.fatal = True
        result.problems.append(Problem("", f"cannot read: {exc.strerror}", file=name))
        return result
    text, bad = yamlfile.decode(raw)
    if text is None:
        assert bad is not None
        result.fatal = True
        result.problems.append(Problem("", f"line {bad.line}: {bad.message}", file=name))
        return result
    whole_vault = vault.is_encrypted(text)
    if whole_vault:
        try:
            text = vault.decrypt(text, name)
        except vault.VaultError as exc:
            result.fatal = True
            result.problems.append(Problem("", f"cannot decrypt the file ({exc.reason})", file=name))
            return result

    def construct_vault(node: Any, key: str) -> vault.Secret:
        if not _DECRYPT[-1]:
            return vault.Secret("")  # by name only (secrets_by_name): never written anywhere
        try:
            return vault.Secret(vault.decrypt(str(node.value), name))
        except vault.VaultError as exc:
            line = node.start_mark.line + 1
            result.problems.append(Problem(key, f"line {line}: cannot decrypt ({exc.reason})", file=name))
            return vault.Secret("")  # a stand-in: the problem above already stops the run

    doc = yamlfile.load(text, tags={} if whole_vault else {"!vault": construct_vault})
    result.fatal = doc.fatal
    result.lines = doc.lines
    for p in doc.problems:
        result.problems.append(Problem(p.key, f"line {p.line}: {p.message}" if p.line else p.message, file=name))
    data = doc.data
    if doc.fatal:
        return result
    if data is None:
        data = {}
    if not isinstance(data, dict):
        result.fatal = True
        result.problems.append(
            Problem("", f"top level must be a mapping of keys to values, got {type(data).__name__}", file=name)
        )
        return result
    result.data = _secret_leaves(data) if whole_vault else data
    return result


def _secret_leaves(value: Any) -> Any:
    """Every string of a wholly encrypted file, at any depth, as a :class:`~rocmfleet.config.vault.Secret`.

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


def problems() -> list[Problem]:
    """Every problem of the files loaded since :func:`reset`."""
    return [p for loaded in LOADED for p in loaded.problems]


def profiles_dir() -> Path:
    """Where an inventory's own profiles are: ``$ROCMFLEET_PROFILES_DIR`` when set, else ``profiles/``
    beside the first group file loaded (whether it exists or not: the shipped profiles are the
    fallback, never another directory's), else ``./group_vars/profiles``."""
    explicit = os.environ.get("ROCMFLEET_PROFILES_DIR")
    if explicit:
        return Path(explicit)
    for loaded in LOADED:
        return loaded.path.parent / "profiles"
    return Path.cwd() / DIRECTORY / "profiles"


@cache
def _assignments(filename: str, mtime: float) -> list[tuple[int, int, tuple[str, ...]]]:
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    found = []
    for stmt in tree.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else []
        if isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        names = tuple(t.id for t in targets if isinstance(t, ast.Name))
        if names:
            found.append((stmt.lineno, stmt.end_lineno or stmt.lineno, names))
    return found


def assigned_to(loaded: GroupFile) -> tuple[str, ...]:
    """The module-level names the call that loaded ``loaded`` is assigned to (``gpu_nodes = (..., _load("prod"))``)."""
    if not loaded.caller_file or not Path(loaded.caller_file).is_file():
        return ()
    spans = _assignments(loaded.caller_file, Path(loaded.caller_file).stat().st_mtime)
    return next((names for first, last, names in spans if first <= loaded.caller_line <= last), ())


def files_of_group(group: str, group_data: dict[str, Any]) -> list[GroupFile]:
    """The loaded files that give data to pyinfra group ``group`` (whose data is ``group_data``).

    A file belongs to a group when the call loading it is assigned to the group's name in the
    inventory, or when the group's data holds the very values the file produced (a file loaded
    into a variable first, then merged: ``{**_lab, "ssh_user": "root"}``).
    """
    files = []
    for loaded in LOADED:
        if group in assigned_to(loaded) or any(
            key in group_data and group_data[key] is value and not isinstance(value, bool | int | type(None))
            for key, value in loaded.data.items()
        ):
            files.append(loaded)
    return files
