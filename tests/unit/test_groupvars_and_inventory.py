from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rocmfleet.config import groupvars
from rocmfleet.config.groupvars import load_group_vars

ROOT = Path(__file__).resolve().parents[2]


def problems_of(group: str, directory: Path) -> list[str]:
    """What loading ``<directory>/<group>.yml`` records (nothing is raised: validation reports it)."""
    groupvars.reset()
    load_group_vars(group, directory)
    return [str(p) for p in groupvars.problems()]


def test_yaml_error_names_the_file_and_line(tmp_path):
    (tmp_path / "bad.yml").write_text("a: [1, 2\n")
    (problem,) = problems_of("bad", tmp_path)
    assert problem.endswith("bad.yml: line 2: not valid YAML: expected ',' or ']', but got '<stream end>'")
    assert groupvars.LOADED[-1].fatal


def test_top_level_must_be_a_mapping(tmp_path):
    (tmp_path / "list.yml").write_text("- a\n")
    (problem,) = problems_of("list", tmp_path)
    assert problem.endswith("list.yml: top level must be a mapping of keys to values, got list")


def test_a_named_group_file_that_does_not_exist_is_a_problem(tmp_path):
    assert load_group_vars("nothing", tmp_path) == {}
    (problem,) = problems_of("nothing", tmp_path)
    assert (
        problem.endswith(
            "nothing.yml: no such group file (load_group_vars('nothing') in "
            "tests/unit/test_groupvars_and_inventory.py line 20)"
        )
        or "no such group file" in problem
    )


def test_duplicate_keys_and_yaml11_scalars_are_problems_with_their_lines(tmp_path):
    (tmp_path / "g.yml").write_text("vllm_profile: a\nssh_port: 022\nrocm_userspace: no\nvllm_profile: b\n")
    assert [p.split(".yml: ", 1)[1] for p in problems_of("g", tmp_path)] == [
        "ssh_port: line 2: unquoted 022 is octal 18 in YAML 1.1 (Ansible, PyYAML) but 22 in YAML 1.2: "
        "quote it ('022') for text, or write the number without a leading zero",
        "rocm_userspace: line 3: unquoted no is a boolean in YAML 1.1 (Ansible, PyYAML) but text in YAML 1.2: "
        "quote it ('no') for text, or write false for a boolean",
        "vllm_profile: line 4: given twice in one mapping (lines 1 and 4): keep one of them",
    ]


def test_not_utf8_names_line_and_column(tmp_path):
    (tmp_path / "g.yml").write_bytes(b"vllm_profile: a\nvllm_env:\n  X: caf\xe9\n")
    (problem,) = problems_of("g", tmp_path)
    assert problem.endswith("g.yml: line 3: not UTF-8 text (byte 0xe9 at column 9): save the file as UTF-8")


def test_group_files_are_found_beside_the_inventory(tmp_path, monkeypatch):
    (tmp_path / "inv").mkdir()
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "g.yml").write_text("vllm_profile: x\n")
    namespace = {"__file__": str(tmp_path / "inv" / "fleet.py")}
    groupvars.reset()
    monkeypatch.chdir("/")
    exec("from rocmfleet.config.groupvars import load_group_vars\ndata = load_group_vars('g')", namespace)  # noqa: S102
    assert namespace["data"] == {"vllm_profile": "x"}
    assert groupvars.LOADED[-1].path == tmp_path / "group_vars" / "g.yml"


def test_prod_inventory_loads_and_every_host_validates():
    out = subprocess.run(
        [sys.executable, "-m", "pyinfra", "inventories/prod.py", "debug-inventory", "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    hosts = json.loads(out.stdout)
    assert [h["name"] for h in hosts] == ["mi300x-a01", "mi300x-a02", "mi300x-a03"]
    from rocmfleet.config.settings import host_config

    for h in hosts:
        assert host_config(h["data"]).image.tag == "v0.33.0"


def test_an_inventory_that_imports_its_hosts_records_their_group_files_on_every_load(tmp_path, monkeypatch):
    # inventories/site.py imports the module that reads group_vars/site.yml: Python caches that
    # import, and a second load in one process (rocmfleet rollout loads the inventory three times)
    # recorded no group file at all.
    from rocmfleet.config.validate import validate_inventory

    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "site.yml").write_text("vllm_profile: lab-tiny-llama\n")
    (tmp_path / "inventories").mkdir()
    (tmp_path / "inventories" / "site_common.py").write_text(
        "from rocmfleet.config.groupvars import load_group_vars\nhosts = ['h1']\nsite = load_group_vars('site')\n"
    )
    inventory = tmp_path / "inventories" / "site.py"
    inventory.write_text("from inventories.site_common import hosts, site\ngpu_nodes = (hosts, site)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for _ in range(2):
        validate_inventory(str(inventory))
        assert [g.path for g in groupvars.LOADED] == [tmp_path / "group_vars" / "site.yml"]


def test_an_inventory_importing_a_module_that_reads_group_files_loads_in_pyinfra(tmp_path):
    # pyinfra executes the inventory, whose import runs load_group_vars('all'); then the
    # inventory's check_on_load loads it again, found the module cached, recorded no group file
    # and refused group_vars/all.yml as "not loaded" (issue 43: measure/lab_names.py did this),
    # while `rocmfleet validate` of the same file passed.
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("vllm_profile: llama-3.3-70b\nssh_user: root\n")
    (tmp_path / "inventories").mkdir()
    (tmp_path / "inventories" / "common.py").write_text(
        "from rocmfleet.config.groupvars import load_group_vars\nall_data = load_group_vars('all')\n"
    )
    (tmp_path / "inventories" / "site.py").write_text(
        "from inventories.common import all_data\n"
        "from rocmfleet.config.validate import check_on_load\n"
        "all = ([('h1', {'ssh_hostname': 'h1.example.internal'})], all_data)\n"
        "gpu_nodes = ['h1']\n"
        "check_on_load(__file__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pyinfra", "inventories/site.py", "debug-inventory", "--json"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "invalid configuration" not in out.stderr
    assert [h["name"] for h in json.loads(out.stdout)] == ["h1"]
