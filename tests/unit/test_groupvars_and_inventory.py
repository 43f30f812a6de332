from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.groupvars import GroupVarsError, load_group_vars

ROOT = Path(__file__).resolve().parents[2]


def test_yaml_error_names_the_file(tmp_path):
    (tmp_path / "bad.yml").write_text("a: [1, 2\n")
    with pytest.raises(GroupVarsError, match=r"bad\.yml: not valid YAML"):
        load_group_vars("bad", tmp_path)


def test_top_level_must_be_a_mapping(tmp_path):
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
    from rocmfleet.config import settings_for

    for h in hosts:
        assert settings_for(h["name"], h["data"]).vllm_image_tag == "v0.33.0"


def test_device_group_ids_fact_parses_stat_output():
    fact = DeviceGroupIds()
    assert fact.process(["992", "992", "44", ""]) == [44, 992]
    assert fact.process([]) == []
