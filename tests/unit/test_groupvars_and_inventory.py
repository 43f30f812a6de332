from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfleet import groupvars
from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.groupvars import GroupVarsError, load_group_vars

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collect_errors(monkeypatch):
    """Raise GroupVarsError instead of exiting, as ``rocmfleet validate`` does."""
    monkeypatch.setattr(groupvars, "EXIT_ON_ERROR", False)


def test_yaml_error_names_the_file(tmp_path, collect_errors):
    (tmp_path / "bad.yml").write_text("a: [1, 2\n")
    with pytest.raises(GroupVarsError, match=r"bad\.yml: not valid YAML"):
        load_group_vars("bad", tmp_path)


def test_under_pyinfra_a_bad_file_exits_2_with_the_message(tmp_path, capsys):
    (tmp_path / "bad.yml").write_text("a: [1, 2\n")
    with pytest.raises(SystemExit) as exit_info:
        load_group_vars("bad", tmp_path)
    assert exit_info.value.code == 2
    assert "bad.yml: not valid YAML" in capsys.readouterr().err


def test_top_level_must_be_a_mapping(tmp_path, collect_errors):
    (tmp_path / "list.yml").write_text("- a\n")
    with pytest.raises(GroupVarsError, match="top level must be a mapping"):
        load_group_vars("list", tmp_path)


def test_missing_group_file_is_empty(tmp_path):
    assert load_group_vars("nothing", tmp_path) == {}


def test_prod_inventory_loads_and_every_host_validates():
    out = subprocess.run(
        [sys.executable, "-m", "pyinfra", "inventories/prod.py", "debug-inventory", "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    hosts = json.loads(out.stdout)
    assert [h["name"] for h in hosts] == ["mi300x-a01", "mi300x-a02", "mi300x-a03"]
    from rocmfleet.settings import host_config

    for h in hosts:
        assert host_config(h["data"]).image.tag == "v0.33.0"


def test_device_group_ids_fact_parses_stat_output():
    fact = DeviceGroupIds()
    assert fact.process(["992", "992", "44", ""]) == [44, 992]
    assert fact.process([]) == []
