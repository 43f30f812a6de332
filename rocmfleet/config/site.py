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

import contextlib
import os
import shutil
from pathlib import Path

from rocmfleet import project

#: Skeleton files stored under another name in the package (a dotfile is easy to lose as package data).
RENAMED = {"gitignore": ".gitignore"}


class SiteExistsError(ValueError):
    """Files of the skeleton already exist in the target; ``paths`` lists every one of them."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        super().__init__(
            f"{len(paths)} path(s) already there (a file, a link, or a file where a folder goes), nothing written: "
            + ", ".join(str(p) for p in paths)
        )


def skeleton_files(skeleton: Path = project.SKELETON_DIR) -> dict[Path, Path]:
    """``{path relative to the site: source file}`` of every skeleton file (caches left out)."""
    files = {}
    for source in sorted(skeleton.rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            relative = source.relative_to(skeleton)
            files[relative.with_name(RENAMED.get(relative.name, relative.name))] = source
    return files


def _in_the_way(directory: Path, relative: Path) -> Path | None:
    """What stops ``relative`` from being written under ``directory``: the file itself (or a link,
    even one to nothing: following it would write outside the site), or a parent that is not a
    directory."""
    target = directory / relative
    if os.path.lexists(target):
        return target
    for parent in list(relative.parents)[:-1]:  # the folders between directory and the file
        path = directory / parent
        if os.path.lexists(path) and not path.is_dir():
            return path
    return None


def init(directory: Path, skeleton: Path = project.SKELETON_DIR) -> list[Path]:
    """Copy the skeleton into ``directory`` (created when missing) and return the files written.

    Every file is written or none: what stands in the way is found before the first write, and a
    write that fails half-way removes the files it wrote.

    Args:
        directory: the site's root; it may exist and hold other files.
        skeleton: the files to copy (default the packaged skeleton).

    Raises:
        SiteExistsError: a file of the skeleton, a link, or a non-directory where a folder of it
            goes, is already in ``directory`` (nothing is overwritten and nothing written; every
            such path is named).
        OSError: the directory or a file cannot be written (then nothing of it is left).
    """
    files = skeleton_files(skeleton)
    taken = sorted({path for relative in files if (path := _in_the_way(directory, relative)) is not None})
    if taken:
        raise SiteExistsError(taken)
    written: list[Path] = []
    made: list[Path] = []
    try:
        if not directory.is_dir():
            directory.mkdir(parents=True)
            made.append(directory)
        for relative, source in files.items():
            target = directory / relative
            for parent in reversed([directory / p for p in relative.parents][:-1]):
                if not parent.is_dir():
                    parent.mkdir()
                    made.append(parent)
            with source.open("rb") as src, open(target, "xb") as dst:  # x: never through a link
                written.append(target)
                shutil.copyfileobj(src, dst)
    except OSError:
        for path in reversed(written):
            path.unlink(missing_ok=True)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return written
