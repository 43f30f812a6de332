"""``rocmfleet init DIR``: write an operator's repository (a *site*) from the packaged skeleton.

A site holds one fleet's inventories and group data under the operator's own version control;
the deploy itself (roles, templates, host scripts, shipped profiles) stays in the installed
package. The skeleton (``rocmfleet/skeleton/``, package data) is copied file by file::

    deploy.py                      two lines: rocmfleet.converge.converge()
    inventories/prod.py            example hosts, groups ``all`` and ``gpu_nodes``, validated on load
    group_vars/all.yml, gpu_nodes.yml   data for every host; the ``gpu_nodes`` group's profile
    group_vars/profiles/README.md  where the operator's own profiles go
    .gitignore, README.md

Example::

    >>> written = init(Path("site"))  # doctest: +SKIP
    >>> [str(p) for p in written][:1]  # doctest: +SKIP
    ['site/.gitignore']
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rocmfleet import project

#: Skeleton files stored under another name in the package (a dotfile is easy to lose as package data).
RENAMED = {"gitignore": ".gitignore"}


class SiteExistsError(ValueError):
    """Files of the skeleton already exist in the target; ``paths`` lists every one of them."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        super().__init__(f"{len(paths)} file(s) already there, nothing written: " + ", ".join(str(p) for p in paths))


def skeleton_files(skeleton: Path = project.SKELETON_DIR) -> dict[Path, Path]:
    """``{path relative to the site: source file}`` of every skeleton file (caches left out)."""
    files = {}
    for source in sorted(skeleton.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            relative = source.relative_to(skeleton)
            files[relative.with_name(RENAMED.get(relative.name, relative.name))] = source
    return files


def init(directory: Path, skeleton: Path = project.SKELETON_DIR) -> list[Path]:
    """Copy the skeleton into ``directory`` (created when missing) and return the files written.

    Args:
        directory: the site's root; it may exist and hold other files.
        skeleton: the files to copy (default the packaged skeleton).

    Raises:
        SiteExistsError: a file of the skeleton is already in ``directory`` (nothing is
            overwritten and nothing written; every such file is named).
        OSError: the directory or a file cannot be written.
    """
    files = skeleton_files(skeleton)
    taken = [directory / relative for relative in files if (directory / relative).exists()]
    if taken:
        raise SiteExistsError(taken)
    written = []
    for relative, source in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(target)
    return written
