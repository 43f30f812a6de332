"""Prometheus scrape targets: the file_sd groups of validated hosts, ``rocmfleet metrics targets``
(offline, every problem at once), the file written whole, and the deploy's once-per-run rewrite
of ``metrics_targets_file``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rocmfleet import entry
from rocmfleet.config import validate
from rocmfleet.config.connection import SshSettings
from rocmfleet.config.settings import host_config
from rocmfleet.plan import metricstargets as targets
from rocmfleet.plan import targetsdeploy, targetsfile
from tests.unit.conftest import DIGEST

ROOT = Path(__file__).resolve().parents[2]
PROD = "inventories/prod.py"


def fleet_host(data: dict, name: str = "lab-1", address: str = "10.213.0.11") -> targets.FleetHost:
    return targets.FleetHost(name, address, host_config(data))


def test_each_instance_and_the_exporter_is_one_labelled_target(lab_data):
    groups = targets.file_sd([fleet_host(lab_data)])
    assert groups == [
        {"targets": ["10.213.0.11:5000"], "labels": {"job": "amd-device-metrics", "host": "lab-1"}},
        {
            "targets": ["10.213.0.11:8000"],
            "labels": {
                "job": "vllm",
                "host": "lab-1",
                "rocmfleet_instance": "tiny-llama-a",
                "model": "lab/tiny-llama",
                "served_model_name": "tiny-llama",
                "image_digest": DIGEST,
                "gpus": "0",
                "vllm_version": "0.32.0",
            },
        },
        {
            "targets": ["10.213.0.11:8001"],
            "labels": {
                "job": "vllm",
                "host": "lab-1",
                "rocmfleet_instance": "tiny-llama-b",
                "model": "lab/tiny-llama",
                "served_model_name": "tiny-llama",
                "image_digest": DIGEST,
                "gpus": "1",
                "vllm_version": "0.32.0",
            },
        },
    ]
    assert all("instance" not in g["labels"] for g in groups)  # Prometheus's own: the target address


def test_no_exporter_target_where_it_is_off_and_its_own_port_where_moved(lab_data):
    off = targets.file_sd([fleet_host({**lab_data, "metrics_exporter": False})])
    assert [g["labels"]["job"] for g in off] == ["vllm", "vllm"]
    moved = targets.file_sd([fleet_host({**lab_data, "metrics_exporter_port": 9400})])
    assert moved[0]["targets"] == ["10.213.0.11:9400"]


def test_order_does_not_depend_on_the_inventory_and_ports_sort_as_numbers(lab_data):
    instances = [{"name": "z", "port": 10000, "gpus": [0]}, {"name": "y", "port": 9000, "gpus": [1]}]
    wide = {**lab_data, "vllm_instances": instances}
    one = [fleet_host(wide, "b", "10.0.0.2"), fleet_host(lab_data, "a", "10.0.0.1")]
    groups = targets.file_sd(one)
    assert targets.render(groups) == targets.render(targets.file_sd(list(reversed(one))))
    assert [g["targets"][0] for g in groups] == [
        "10.0.0.1:5000", "10.0.0.2:5000", "10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:9000", "10.0.0.2:10000",
    ]  # fmt: skip
    assert targets.summary(groups) == "4 vLLM instance(s) and 2 exporter(s) on 2 host(s): a, b"


def test_an_ipv6_address_is_bracketed_and_multi_gpu_instances_list_their_gpus(lab_data):
    data = {**lab_data, "vllm_profile": "deepseek-r1", "vllm_instances": None}  # one TP-8 instance
    groups = targets.file_sd([fleet_host(data, address="fd00::11")])
    assert groups[1]["targets"] == ["[fd00::11]:8000"] and groups[1]["labels"]["gpus"] == "0,1,2,3,4,5,6,7"
    assert targets.target("[fd00::11]", 1) == "[fd00::11]:1"


def test_the_address_is_where_ssh_goes_ssh_config_hostname_included(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu-a\n    HostName 10.9.8.7\n    User root\n")
    assert targetsfile.scrape_address(SshSettings("gpu-a", options={"ssh_config_file": str(config)})) == "10.9.8.7"
    assert targetsfile.scrape_address(SshSettings("gpu-b", options={"ssh_config_file": str(config)})) == "gpu-b"
    assert targetsfile.scrape_address(SshSettings("10.1.1.1", options={"ssh_config_file": str(tmp_path / "none")})) == (
        "10.1.1.1"
    )


def test_metrics_targets_prints_the_whole_inventory_without_connecting(no_network, monkeypatch, capsys):  # noqa: F811
    monkeypatch.chdir(ROOT)
    assert entry.main(["metrics", "targets", PROD]) == 0
    groups = json.loads(capsys.readouterr().out)
    jobs = [g["labels"]["job"] for g in groups]
    assert jobs.count("amd-device-metrics") == 3 and jobs.count("vllm") == 24  # 8 TP-1 instances a host
    assert {g["targets"][0].rsplit(":", 1)[0] for g in groups} == {f"mi300x-a0{i}.example.internal" for i in (1, 2, 3)}
    assert no_network == []


def test_metrics_targets_writes_the_file_whole_with_mode_0644(no_network, monkeypatch, capsys, tmp_path):  # noqa: F811
    monkeypatch.chdir(ROOT)
    out = tmp_path / "targets.json"
    out.write_text("old")
    os.chmod(out, 0o600)
    old = os.umask(0o077)
    try:
        assert entry.main(["metrics", "targets", PROD, "-o", str(out)]) == 0
    finally:
        os.umask(old)
    said = capsys.readouterr().out
    assert said == (
        f"wrote {out}: 24 vLLM instance(s) and 3 exporter(s) on 3 host(s): mi300x-a01, mi300x-a02, mi300x-a03\n"
    )
    assert len(json.loads(out.read_text())) == 27
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["targets.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["-o", "{tmp}/no/such/dir/t.json"], "does not exist"),
        (["-o", "{tmp}"], "is a directory"),
        (["-o", ""], "give a file"),
    ],
)
def test_an_output_it_cannot_write_is_refused_before_reading_the_inventory(argv, said, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    code = entry.main(["metrics", "targets", PROD, *[a.replace("{tmp}", str(tmp_path)) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err


def test_output_dash_is_standard_output_not_a_file_named_dash(no_network, monkeypatch, capsys, tmp_path):  # noqa: F811
    monkeypatch.chdir(ROOT)
    assert entry.main(["metrics", "targets", PROD]) == 0
    printed = capsys.readouterr().out
    assert not (ROOT / "-").exists()
    assert entry.main(["metrics", "targets", PROD, "-o", "-"]) == 0
    assert capsys.readouterr().out == printed and len(json.loads(printed)) == 27
    assert not (ROOT / "-").exists()


@pytest.mark.parametrize("name", ["targets.txt", "targets", "targets.json.bak", "targets.jsonl"])
def test_an_output_prometheus_would_not_read_is_refused(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    out = tmp_path / name
    assert entry.main(["metrics", "targets", PROD, "-o", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"rocmfleet: -o {out}: Prometheus's file_sd reads only files ending in .json, .yml or .yaml; "
        "name such a file, or - for standard output\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["t.json", "t.yml", "t.yaml", "T.JSON"])
def test_json_yml_and_yaml_names_are_written(no_network, name, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.chdir(ROOT)
    assert entry.main(["metrics", "targets", PROD, "-o", str(tmp_path / name)]) == 0
    assert len(json.loads((tmp_path / name).read_text())) == 27  # JSON, which YAML reads too


def test_a_write_failure_is_exit_2_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(ROOT)

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(targetsfile.tempfile, "mkstemp", refuse)
    assert entry.main(["metrics", "targets", PROD, "-o", str(tmp_path / "t.json")]) == 2
    assert capsys.readouterr().err == f"rocmfleet: -o {tmp_path / 't.json'}: cannot write it (Permission denied)\n"


def test_an_invalid_inventory_says_every_problem_and_exits_2(no_network, monkeypatch, capsys):  # noqa: F811
    monkeypatch.chdir(ROOT)
    code = entry.main(["metrics", "targets", "tests/corpus/five-problems-three-files/inventory.py"])
    err = capsys.readouterr().err
    assert code == 2 and "invalid configuration (5 problem(s))" in err and "Traceback" not in err
    assert entry.main(["metrics", "targets", "inventories/nosuch.py"]) == 2
    assert "no such inventory file" in capsys.readouterr().err
    assert no_network == []


def test_hosts_naming_different_targets_files_is_a_validation_problem(lab_data):
    one = host_config({**lab_data, "metrics_targets_file": "/srv/a.json"})
    other = host_config({**lab_data, "metrics_targets_file": "/srv/b.json"})
    problems = validate.targets_file_problems({"h1": one, "h2": other, "h3": one}, "inv.py")
    assert [str(p) for p in problems] == [
        "inv.py: metrics_targets_file: one file holds the whole inventory's scrape targets, but the hosts disagree "
        "(/srv/a.json for h1, h3; /srv/b.json for h2); set it once (group_vars/all.yml) [hosts: h1, h2, h3]"
    ]
    assert validate.targets_file_problems({"h1": one, "h3": one}, "inv.py") == []
    unset = host_config(lab_data)
    assert "unset for h2" in str(validate.targets_file_problems({"h1": one, "h2": unset}, "inv.py")[0])


# --- the deploy's rewrite (pyinfra State and Inventory built here, as pyinfra's CLI builds them)


def pyinfra_state(hosts: dict[str, dict], limit: list[str] | None = None):
    from pyinfra.api.config import Config
    from pyinfra.api.inventory import Inventory
    from pyinfra.api.state import State

    inventory = Inventory((list(hosts.items()), {}))
    state = State()
    state.init(inventory, Config(), initial_limit=[inventory.get_host(n) for n in limit] if limit else None)
    return state


def test_the_deploy_writes_the_whole_inventory_once_per_run(lab_data, tmp_path, monkeypatch):
    path = tmp_path / "fleet.json"
    data = {**lab_data, "metrics_targets_file": str(path)}
    hosts = {"lab-1": data, "lab-2": {**data, "ssh_hostname": "10.213.0.12", "vllm_instances": None}}
    state = pyinfra_state(hosts)
    said = targetsdeploy.write_for_deploy(state)
    assert said == (
        f"rocmfleet: metrics_targets_file {path}: 3 vLLM instance(s) and 2 exporter(s) on 2 host(s): lab-1, lab-2"
    )
    groups = json.loads(path.read_text())
    assert {g["targets"][0] for g in groups} >= {"10.213.0.11:8001", "10.213.0.12:8000", "10.213.0.12:5000"}
    path.write_text("[]")
    assert targetsdeploy.write_for_deploy(state) is None  # the other hosts' calls of the same run
    assert path.read_text() == "[]"
    assert targetsdeploy.write_for_deploy(pyinfra_state(hosts)) is not None  # the next run writes again
    assert json.loads(path.read_text()) == groups


def test_a_deploy_without_the_setting_writes_nothing(lab_data):
    assert targetsdeploy.write_for_deploy(pyinfra_state({"lab-1": lab_data})) is None


def test_hosts_outside_the_limit_keep_the_image_the_inventory_gives_them(lab_data, tmp_path, monkeypatch):
    # A rollout deploys the canary with --data vllm_image_*: pyinfra gives the overrides to every
    # host's data, but only the limited host runs the new image.
    path = tmp_path / "fleet.json"
    new = "sha256:" + "cd" * 32
    on_disk = {**lab_data, "metrics_targets_file": str(path)}
    monkeypatch.setitem(validate._VALIDATED, "lab-2", ({}, host_config({**on_disk, "ssh_hostname": "10.213.0.12"})))
    overridden = {**on_disk, "vllm_image_digest": new}
    state = pyinfra_state({"lab-1": overridden, "lab-2": {**overridden, "ssh_hostname": "10.213.0.12"}}, ["lab-1"])
    targetsdeploy.write_for_deploy(state)
    digests = {(g["labels"]["host"], g["labels"].get("image_digest")) for g in json.loads(path.read_text())}
    assert digests == {("lab-1", new), ("lab-2", DIGEST), ("lab-1", None), ("lab-2", None)}


def test_a_file_it_cannot_write_ends_the_run_in_one_line(lab_data, tmp_path):
    from pyinfra.api.exceptions import PyinfraError

    path = tmp_path / "no" / "fleet.json"
    state = pyinfra_state({"lab-1": {**lab_data, "metrics_targets_file": str(path)}})
    with pytest.raises(PyinfraError) as raised:
        targetsdeploy.write_for_deploy(state)
    assert str(raised.value) == (
        f"rocmfleet: metrics_targets_file {path}: cannot write it on this machine (No such file or directory); "
        "nothing was deployed"
    )


def test_hosts_naming_different_files_end_the_run(lab_data, tmp_path):
    from pyinfra.api.exceptions import PyinfraError

    state = pyinfra_state(
        {
            "lab-1": {**lab_data, "metrics_targets_file": str(tmp_path / "a.json")},
            "lab-2": {**lab_data, "ssh_hostname": "10.213.0.12", "metrics_targets_file": str(tmp_path / "b.json")},
        }
    )
    with pytest.raises(PyinfraError, match="the hosts name different files"):
        targetsdeploy.write_for_deploy(state)
    assert list(tmp_path.iterdir()) == []
