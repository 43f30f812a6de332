"""Every inventory of this repository still loads and validates, without the lab.

The inventories are the files under ``inventories/`` and ``measure/`` that end with
``check_on_load`` (so a new measurement inventory is covered without editing this test). Each is
loaded twice: the way pyinfra loads it (``pyinfra INVENTORY debug-inventory``, a process of its
own, where the inventory's own ``check_on_load`` validates it) and the way ``rocmfleet validate``
does (:func:`rocmfleet.config.validate.validate_inventory`). Issue 43: ``measure/lab_names.py``
validated under ``rocmfleet validate`` but pyinfra refused it ("group all: group_vars/all.yml
exists but the inventory does not load it"), so the converge cost measurement could not run.

``inventories/lab.py`` (and ``measure/lab_names.py``, which reads it) read the lab's state file
(``tests/lab/config.py``: ``$ROCMFLEET_LAB_DIR/run/state.json``, written by ``python -m tests.lab
up``): here a fake one, with the lab's addresses as ``tests/lab/config.py`` numbers them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfleet.config.validate import validate_inventory

ROOT = Path(__file__).resolve().parents[2]
#: The names ``measure/side_by_side.py`` measures with (issue 24: 100 names over the lab's hosts).
BENCH_NAMES = "100"
INVENTORIES = sorted(
    str(path.relative_to(ROOT))
    for folder in ("inventories", "measure")
    for path in (ROOT / folder).glob("*.py")
    if "check_on_load" in path.read_text(encoding="utf-8")
)


def test_the_inventories_are_found():
    assert {"inventories/prod.py", "inventories/lab.py", "measure/lab_names.py"} <= set(INVENTORIES)


@pytest.fixture
def fake_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A lab state file as ``python -m tests.lab up`` writes it (three hosts); the environment a
    process needs to read it. This process reads it too (``tests.lab.config.STATE_FILE``)."""
    from tests.lab import config as lab_config

    (tmp_path / "run").mkdir()
    key, known = tmp_path / "id_ed25519", tmp_path / "known_hosts"
    key.write_text("not a key: validation checks that the file exists\n")
    known.write_text("")
    gateway = "10.213.0.1"
    state = {
        "hosts": {f"lab-{i}": f"10.213.0.{10 + i}" for i in (1, 2, 3)},
        "ssh_key": str(key),
        "known_hosts": str(known),
        "apt_proxy": f"http://{gateway}:3128",
        "registry": f"{gateway}:5000",
        "amd_repo": f"http://{gateway}:8080",
        "hf_endpoint": f"http://{gateway}:8090",
        "prometheus": f"http://{gateway}:9190",
        "images": {f"{gateway}:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1": "sha256:" + "5a" * 32},
    }
    (tmp_path / "run" / "state.json").write_text(json.dumps(state))
    monkeypatch.setattr(lab_config, "STATE_FILE", tmp_path / "run" / "state.json")
    # inventories/lab.py sets it with os.environ.setdefault: set here, monkeypatch takes it back
    monkeypatch.setenv("ROCMFLEET_VAULT_PASSWORD_FILE", str(lab_config.LabState.vault_password_file()))
    monkeypatch.setenv("ROCMFLEET_BENCH_NAMES", BENCH_NAMES)
    monkeypatch.chdir(ROOT)
    return {**os.environ, "ROCMFLEET_LAB_DIR": str(tmp_path), "ROCMFLEET_BENCH_NAMES": BENCH_NAMES}


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_each_inventory_loads_in_pyinfra(inventory: str, fake_lab: dict[str, str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pyinfra", inventory, "debug-inventory", "--json"],
        cwd=ROOT, env=fake_lab, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "invalid configuration" not in out.stderr
    assert json.loads(out.stdout), "no hosts"


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_each_inventory_validates(inventory: str, fake_lab: dict[str, str]) -> None:
    configs, problems = validate_inventory(inventory)
    assert problems == []
    assert configs
    if inventory == "measure/lab_names.py":
        assert len(configs) == int(BENCH_NAMES)
