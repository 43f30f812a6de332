"""Every inventory of this repository still loads and validates, without the lab.

The inventories are the files under ``inventories/`` and ``measure/`` that call
``check_on_load(__file__)`` (so a new measurement inventory is covered without editing this test). Each is
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
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from rocmfleet.config.validate import validate_inventory

ROOT = Path(__file__).resolve().parents[2]
#: The names ``measure/side_by_side.py`` measures with (issue 24: 100 names over the lab's hosts).
BENCH_NAMES = "100"
#: An inventory's last statement (``inventories/prod.py``): it validates the inventory as pyinfra loads it.
_CHECKS = re.compile(r"^(_check|check_on_load)\(__file__\)", re.M)
INVENTORIES = sorted(
    str(path.relative_to(ROOT))
    for folder in ("inventories", "measure")
    for path in (ROOT / folder).glob("*.py")
    if _CHECKS.search(path.read_text(encoding="utf-8"))
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
    # measure/lab_names.py writes its SSH config to the temp dir: here, not the lab's (a measurement may be running)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = {"ROCMFLEET_LAB_DIR": str(tmp_path), "ROCMFLEET_BENCH_NAMES": BENCH_NAMES, "TMPDIR": str(tmp_path)}
    return {**os.environ, **env}


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


def test_a_generated_site_validates_with_its_services_racks_and_canary(tmp_path: Path) -> None:
    # measure/plan_scale.py times `rocmfleet validate` and `rocmfleet plan --json` of a site
    # of 2,000 hosts and 20 services written by the same function; here a small one
    from measure.plan_scale import render
    from measure.site import write_site

    inventory = write_site(tmp_path / "site", hosts=40, services=4, rack_size=20)
    configs, problems = validate_inventory(str(inventory))
    assert problems == []
    served = Counter(config.profile.served_model_name for config in configs.values())
    assert served == {"deepseek-r1-00": 10, "deepseek-v3-01": 10, "llama-3.3-70b-02": 10, "llama-4-maverick-03": 10}
    pinned = {config.profile.name: config.image.tag for config in configs.values()}
    assert pinned == {"deepseek-r1-00": "v0.33.0", "deepseek-v3-01": "v0.33.1", "llama-3.3-70b-02": "v0.33.0",
                      "llama-4-maverick-03": "v0.33.1"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "pyinfra", str(inventory), "debug-inventory", "--json"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    groups = {host["name"]: set(host["groups"]) for host in json.loads(out.stdout)}
    canary = sorted(name for name, of in groups.items() if "canary" in of)
    assert len(canary) == 4 and len({configs[name].profile.name for name in canary}) == 4  # one host per service
    assert Counter(g for of in groups.values() for g in of if g.startswith("rack_")) == {"rack_000": 20, "rack_001": 20}
    # the `render` row's stand-in for the plan: every instance placed and rendered
    assert render(str(inventory)) == 0


def test_a_site_needs_a_host_per_service(tmp_path: Path) -> None:
    from measure.site import write_site

    with pytest.raises(ValueError, match="hosts >= services"):
        write_site(tmp_path, hosts=3, services=4)
