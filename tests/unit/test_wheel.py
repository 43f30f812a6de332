"""The wheel carries the deploy: every role module (``roles/``) and template (``templates/``) of the
repository's top level, as ``rocmfleet/roles/`` and ``rocmfleet/templates/``, and every other file
of the package. ``rocmfleet/roles`` and ``rocmfleet/templates`` are links to those folders
(``docs/layout.md`` says why links, not a ``package-dir`` mapping).

The wheel is built with setuptools' own API (``build_meta``, what pip calls; the ``dev`` extra pins
setuptools, so no network and no build isolation) from a copy of what the build reads, links kept:
about 3 s. ``tests/unit/test_install.py`` installs the whole checkout and deploys from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Folder of the checkout -> where its files are in the wheel.
PACKAGED = {"rocmfleet": "rocmfleet", "roles": "rocmfleet/roles", "templates": "rocmfleet/templates"}
#: The links inside the package -> what they point at (relative, so a copy or clone keeps them).
LINKS = {"rocmfleet/roles": "../roles", "rocmfleet/templates": "../templates"}
#: What the build reads besides those folders (``readme`` in pyproject.toml).
BUILD_FILES = ("pyproject.toml", "README.md")
BUILD_LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.pyc")


def files_under(top: Path) -> set[str]:
    """Every regular file under ``top`` (links not followed, compiled files left out), relative, ``/``-separated."""
    found = set()
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not (Path(folder) / d).is_symlink()]
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink() and not name.endswith(".pyc"):
                found.add(path.relative_to(top).as_posix())
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The names in a wheel built from a copy of the checkout's package folders."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, src / name)
    for name in PACKAGED:
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=BUILD_LEFTOVERS)
    build = "import sys\nfrom setuptools import build_meta\nprint(build_meta.build_wheel(sys.argv[1]))\n"
    proc = subprocess.run([sys.executable, "-c", build, str(out)], cwd=src, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with zipfile.ZipFile(out / proc.stdout.split()[-1]) as built:
        return set(built.namelist())


def test_roles_and_templates_are_at_the_top_level_and_linked_into_the_package() -> None:
    for link, target in LINKS.items():
        assert (ROOT / link).is_symlink() and os.readlink(ROOT / link) == target, f"{link} must be a link to {target}"
    roles = {p.parent.name for p in (ROOT / "roles").glob("*/__init__.py")}
    assert {"base", "rocm", "tuning", "exporter", "docker", "vllm"} <= roles, roles
    assert (ROOT / "templates" / "vllm" / "vllm.service.j2").is_file()


def test_the_wheel_carries_every_role_module_every_template_and_the_package(wheel: set[str]) -> None:
    expected = {f"{inside}/{name}" for folder, inside in PACKAGED.items() for name in files_under(ROOT / folder)}
    assert sum(name.startswith("rocmfleet/roles/") and name.endswith(".py") for name in expected) >= 7
    assert sum(name.startswith("rocmfleet/templates/") and name.endswith(".j2") for name in expected) >= 10
    missing = sorted(expected - wheel)
    assert not missing, f"not in the wheel (pyproject.toml's packages and package-data): {missing}"
    # Nothing of its own at site-packages' top level (a `roles` or `templates` package there would
    # be anyone's), and no compiled leftovers.
    stray = sorted(n for n in wheel if not n.startswith(("rocmfleet/", "rocmfleet-")) or n.endswith(".pyc"))
    assert not stray, stray
