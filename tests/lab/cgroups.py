"""A private cgroup v1 subtree per lab host, bound in as the host's ``/sys/fs/cgroup``.

This machine has cgroup v1 hierarchies and ``systemd-nspawn`` mounts them read-only inside
a container, so Docker's runc cannot create cgroups there. Binding the machine's whole
``/sys/fs/cgroup`` makes every host's systemd share one tree (SSH sessions then stall for
120 s). What works (issue 2): each host gets ``lab/<host>`` in every hierarchy, those
subtrees are bound into a small tmpfs tree, the process that execs nspawn moves itself into
them, and nspawn's cgroup namespace makes the subtree the host's root.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from tests.lab import config

CGROUP_ROOT = Path("/sys/fs/cgroup")


#: nspawn moves itself into ``<its cgroup>/supervisor`` and the host into ``<its cgroup>/payload``
#: of the name=systemd and unified hierarchies (src/nspawn/nspawn-cgroup.c: create_subcgroup).
PAYLOAD = "payload"
#: Hierarchies the launching process moves into: the host's nine, plus the unified one so that
#: nspawn's supervisor/payload split lands inside ``lab/<host>`` and not at the machine's root.
_ENTERED = (*config.CGROUP_CONTROLLERS, "unified")


def _subtree(controller: str, host: str | None = None) -> Path:
    path = CGROUP_ROOT / controller / "lab"
    return path / host if host else path


def _bound(controller: str, host: str) -> Path:
    """The subtree bound as ``/sys/fs/cgroup/<controller>`` inside ``host``: its cgroup root."""
    subtree = _subtree(controller, host)
    return subtree / PAYLOAD if controller == "systemd" else subtree


def tree_path(host: str) -> Path:
    """The tmpfs tree that becomes ``/sys/fs/cgroup`` inside ``host``."""
    return config.RUN_DIR / host / "cgroup"


def create(host: str) -> Path:
    """Create ``lab/<host>`` in every hierarchy and bind them into the host's tmpfs tree.

    Returns:
        The tree to pass to nspawn as ``--bind=TREE:/sys/fs/cgroup``.
    """
    for controller in _ENTERED:
        for path in (_subtree(controller), _subtree(controller, host), _bound(controller, host)):
            path.mkdir(exist_ok=True)
            if controller == "cpuset":
                # A new cpuset has no CPUs or memory nodes until given its parent's.
                parent = path.parent
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((parent / knob).read_text())
                (path / "cgroup.clone_children").write_text("1")
    tree = tree_path(host)
    tree.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(tree):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755,size=1m", "lab-cgroup", str(tree)], check=True)
    for controller in config.CGROUP_CONTROLLERS:
        target = tree / controller
        target.mkdir(exist_ok=True)
        if not os.path.ismount(target):
            subprocess.run(["mount", "--bind", str(_bound(controller, host)), str(target)], check=True)
    return tree


def enter(host: str) -> None:
    """Move the calling process into ``host``'s subtrees (call right before exec'ing nspawn)."""
    pid = str(os.getpid())
    for controller in _ENTERED:
        (_subtree(controller, host) / "cgroup.procs").write_text(pid)


def _remove_tree(path: Path) -> None:
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir():
            _remove_tree(child)
    with contextlib.suppress(OSError):
        path.rmdir()


def destroy(host: str) -> None:
    """Unmount ``host``'s tree and remove its subtrees (idempotent)."""
    tree = tree_path(host)
    subprocess.run(["umount", "-R", str(tree)], stderr=subprocess.DEVNULL, check=False)
    for controller in _ENTERED:
        _remove_tree(_subtree(controller, host))


def remove_lab_root() -> None:
    """Remove the empty ``lab`` subtree from every hierarchy."""
    for controller in _ENTERED:
        with contextlib.suppress(OSError):
            _subtree(controller).rmdir()


def pids(host: str) -> list[int]:
    """PIDs still in ``host``'s name=systemd subtree, recursively."""
    root = _subtree("systemd", host)
    found: list[int] = []
    if root.is_dir():
        for procs in root.rglob("cgroup.procs"):
            found += [int(p) for p in procs.read_text().split()]
    return found
