"""Installed as an operator installs it: ``pip install <checkout>`` into a fresh virtual environment
outside the checkout, as a user who is not root, then ``init``, ``validate`` and a dry deploy
from the site that ``init`` wrote. Nothing of the checkout is on the path: only the wheel's files.

Needs PyPI (pip installs the pinned dependencies; about a minute).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Left out of the copy: what a clone does not have, and this machine's builds.
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache",
                                    ".ruff_cache", "build", "dist", "bench-results", "rollout-results")  # fmt: skip


@pytest.fixture(scope="module")
def installed() -> Iterator[tuple[Path, dict[str, str], list[str]]]:
    """``(work dir, environment, argv prefix)``: the checkout copied and pip-installed into a venv there."""
    work = Path(tempfile.mkdtemp(prefix="rocmfleet-install-", dir="/tmp"))
    prefix: list[str] = []
    try:
        shutil.copytree(ROOT, work / "checkout", ignore=NOT_COPIED)
        (work / "home" / ".ssh").mkdir(parents=True)
        (work / "home" / ".ssh" / "known_hosts").touch()  # an operator's, empty
        if os.geteuid() == 0:  # as an operator: not root (nobody owns the copy and the new venv)
            nobody = pwd.getpwnam("nobody")
            for path in [work, *work.rglob("*")]:
                os.lchown(path, nobody.pw_uid, nobody.pw_gid)
            prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
        env = {"HOME": str(work / "home"), "PATH": f"{work / 'venv' / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8"}
        # The system's Python when root hands the work to nobody (a Python under /root is not theirs
        # to run; `./dev setup` installs python3-venv for it), else the one running the tests.
        python = "/usr/bin/python3" if prefix else getattr(sys, "_base_executable", None) or "python3"
        for argv in ([python, "-m", "venv", str(work / "venv")],
                     [str(work / "venv" / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                      str(work / "checkout")]):  # fmt: skip
            proc = subprocess.run([*prefix, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, f"{argv}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        shutil.rmtree(work / "checkout")  # nothing of it may be needed any more
        yield work, env, prefix
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(installed, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    work, env, prefix = installed
    return subprocess.run([*prefix, *argv], cwd=cwd or work, env=env, capture_output=True, text=True, timeout=300)


def test_version_init_validate_and_a_dry_deploy_from_the_wheel_alone(installed) -> None:
    work = installed[0]
    proc = run(installed, "rocmfleet", "--version")
    assert proc.returncode == 0 and proc.stdout.strip().startswith("rocmfleet 0."), proc.stdout + proc.stderr
    proc = run(installed, "env", "HOME=/nonexistent", "rocmfleet", "--version")  # a service account's HOME
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    proc = run(installed, "rocmfleet", "init", "site")
    assert proc.returncode == 0, proc.stderr
    site = work / "site"
    for name in ("deploy.py", "inventories/prod.py", "group_vars/all.yml", ".gitignore", "README.md"):
        assert (site / name).is_file(), name
    proc = run(installed, "rocmfleet", "validate", "inventories/prod.py", cwd=site)
    assert proc.returncode == 0, proc.stderr
    assert "mi300x-a01: ok (llama-3.3-70b, " in proc.stdout  # a shipped profile, found in the package
    proc = run(installed, "pyinfra", "inventories/prod.py", "deploy.py", "--dry", cwd=site)
    output = proc.stdout + proc.stderr
    # As far as connecting: the example hosts do not exist, and nothing before that failed.
    assert "--> Connecting to hosts..." in output and "[mi300x-a01]" in output, output[-3000:]
    for wrong in ("Traceback", "No such file", "ModuleNotFoundError", "ImportError", "invalid configuration"):
        assert wrong not in output, output[-3000:]


def test_the_package_carries_the_deploy_and_everything_it_reads(installed) -> None:
    probe = (
        "import rocmfleet.project as p, rocmfleet.scripts as s, rocmfleet.roles.vllm as r, sys\n"
        "assert 'site-packages' in str(p.PACKAGE) and 'site-packages' in r.__file__, (p.PACKAGE, r.__file__)\n"
        "need = [p.DEPLOY_FILE, p.TEMPLATES_DIR / 'vllm' / 'vllm.service.j2', p.PROFILES_DIR / 'llama-3.3-70b.yml',\n"
        "        p.PACKAGE / 'domain' / 'vllm_serve_flags.json', p.SKELETON_DIR / 'gitignore', *s.DIR.glob('*.sh')]\n"
        "missing = [str(x) for x in need if not x.is_file()]\n"
        "print(len(need), missing)\n"
        "sys.exit(1 if missing or len(need) < 7 else 0)\n"
    )
    proc = run(installed, "python", "-c", probe)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_init_refuses_to_overwrite_and_names_every_file(installed) -> None:
    proc = run(installed, "mkdir", "taken")
    assert proc.returncode == 0, proc.stderr
    proc = run(installed, "rocmfleet", "init", "taken")
    assert proc.returncode == 0
    proc = run(installed, "rocmfleet", "init", "taken")
    assert proc.returncode == 2 and "nothing written" in proc.stderr
    assert "inventories/prod.py" in proc.stderr and "deploy.py" in proc.stderr and "Traceback" not in proc.stderr
