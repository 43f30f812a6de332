"""The bad-input corpus: every case fails validation with its message, before any connection."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rocmfleet.entry import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "inventory.py").exists())
VAULT_ENV = {"ROCMFLEET_VAULT_PASSWORD_FILE": str(CORPUS / "vault-password.txt")}


def expected(case: str) -> list[str]:
    return [line for line in (CORPUS / case / "expected.txt").read_text().splitlines() if line]


def test_corpus_covers_the_issue_list():
    assert len(CASES) >= 14


@pytest.mark.parametrize("case", CASES)
def test_validate_reports_the_problem_and_exits_2(case, capsys, monkeypatch):
    for name, value in VAULT_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    assert main(["validate", f"tests/corpus/{case}/inventory.py"]) == 2
    err = capsys.readouterr().err
    for line in expected(case):
        assert line in err


@pytest.fixture(scope="module")
def ssh_listener():
    """Listen on a free port of every address (the corpus hosts are at 127.0.0.1, .2, ...: one each),
    to catch any connection attempt.

    The port is the kernel's choice (bind to 0), so two test runs on one machine never share it;
    the corpus inventories read it from ``ROCMFLEET_CORPUS_SSH_PORT``.
    """
    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))  # every corpus host is on 127.0.0.0/8, one address each
    sock.listen(16)
    sock.setblocking(False)
    yield sock
    sock.close()


@pytest.fixture(scope="module")
def pyinfra_runs(ssh_listener) -> dict[str, subprocess.CompletedProcess]:
    """``pyinfra -y <case>/inventory.py deploy.py`` of every case, run side by side (one per core,
    at least two: each is mostly its interpreter's imports); {case: the finished process}."""
    env = {**os.environ, **VAULT_ENV, "ROCMFLEET_CORPUS_SSH_PORT": str(ssh_listener.getsockname()[1])}

    def run(case: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "pyinfra", "-y", f"tests/corpus/{case}/inventory.py", "deploy.py"]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        return dict(zip(CASES, pool.map(run, CASES), strict=True))


@pytest.mark.parametrize("case", CASES)
def test_pyinfra_stops_before_connecting(case, pyinfra_runs, ssh_listener):
    proc = pyinfra_runs[case]
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "Connecting to hosts" not in output
    assert "Traceback" not in output
    for line in expected(case):
        assert line in output
    with pytest.raises(BlockingIOError):
        ssh_listener.accept()  # nobody knocked (a knock fails the first case checked after it)


def test_five_independent_problems_in_three_files_are_all_reported(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["validate", "tests/corpus/five-problems-three-files/inventory.py"]) == 2
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()[1:]]
    prefix = "tests/corpus/five-problems-three-files/group_vars/"
    where = sorted(line.removeprefix(prefix).split(": ")[:2] for line in lines)
    assert where == [
        ["all.yml", "docker_source"],
        ["all.yml", "vllm_cache_dir"],
        ["gpu_nodes.yml", "vllm_image_tag"],
        ["gpu_nodes.yml", "vllm_instances"],
        ["profiles/p.yml", "max_num_seq"],
    ]
