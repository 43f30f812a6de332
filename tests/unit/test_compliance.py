"""The ``rocmfleet check`` runner's pure parts, its pytest plugin, and the CVS parsers."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import checkfile, compliance, cvs
from rocmfleet.fleet.check.compliance import CheckResult
from rocmfleet.fleet.inventory import FleetError, load_fleet
from tests.unit.test_topology import FIXTURES


@pytest.fixture
def inventory(tmp_path):
    """Write ``inventory.py`` with group ``gpu_nodes`` = (hosts, data); return a writer."""

    def write(hosts: str, data: str = '{"vllm_profile": "llama-4-scout"}'):
        path = tmp_path / "inventory.py"
        path.write_text(f"gpu_nodes = ({hosts}, {data})\n")
        return path

    return write


RESULTS = [
    CheckResult("gpu-1", "host::reachable", "passed"),
    CheckResult("gpu-1", "tuning::numa_balancing_persisted", "failed", "kernel.numa_balancing = 1", "trace"),
    CheckResult("gpu-1", "cvs::no_amdgpu_errors_since_boot", "skipped", "container host"),
    CheckResult("gpu-2", "host::reachable", "failed", "ssh: connect to host 10.0.0.2 port 22: No route to host"),
    CheckResult("gpu-3", "host::reachable", "passed"),
    CheckResult("gpu-3", "cvs::no_amdgpu_errors_since_boot", "error", "cannot check: the kernel log cannot be read"),
]


def test_module_selection_refuses_unknown_modules():
    assert [p.rsplit("/", 1)[1] for p in compliance.module_paths(["tuning", "rocm"])] == [
        "test_rocm.py",
        "test_tuning.py",
    ]
    assert len(compliance.module_paths()) == len(compliance.MODULES)
    with pytest.raises(ValueError, match="unknown check module.*gpus; known: rocm"):
        compliance.module_paths(["gpus"])


def test_lines_table_and_exit_status():
    assert compliance.line(RESULTS[1]) == "gpu-1  FAIL  tuning::numa_balancing_persisted  kernel.numa_balancing = 1"
    assert compliance.line(RESULTS[0]) == "gpu-1  PASS  host::reachable"
    assert compliance.line(RESULTS[0], 8) == "gpu-1     PASS  host::reachable"  # aligned with longer names
    table = compliance.summary_table(RESULTS).splitlines()
    assert table[0].split() == ["host", "passed", "failed", "errors", "skipped", "result"]
    assert table[1].split() == ["gpu-1", "1", "1", "0", "1", "FAIL"]
    assert table[2].split() == ["gpu-2", "0", "1", "0", "0", "FAIL"]
    assert table[3].split() == ["gpu-3", "1", "0", "1", "0", "FAIL"]  # an error is never a pass
    assert table[-1] == "3 host(s), 3 failed"
    assert compliance.line(RESULTS[5]).startswith("gpu-3  ERROR  cvs::no_amdgpu_errors_since_boot  cannot check")
    assert compliance.exit_status(RESULTS) == 1
    assert compliance.exit_status([RESULTS[0], RESULTS[2]]) == 0
    assert compliance.exit_status([RESULTS[4], RESULTS[5]]) == 1


def test_junit_xml_has_a_suite_per_host_and_a_case_per_check():
    root = ET.fromstring(compliance.junit_xml(RESULTS))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"gpu-1", "gpu-2", "gpu-3"}
    assert suites["gpu-3"].get("errors") == "1" and suites["gpu-3"].find("testcase/error") is not None
    assert (suites["gpu-1"].get("tests"), suites["gpu-1"].get("failures"), suites["gpu-1"].get("skipped")) == (
        "3",
        "1",
        "1",
    )
    failure = suites["gpu-1"].find("testcase[@name='tuning::numa_balancing_persisted']/failure")
    assert failure.get("message") == "kernel.numa_balancing = 1" and failure.text == "trace"


def test_json_report_gives_a_verdict_per_host():
    report = json.loads(compliance.json_report(RESULTS, "inventories/prod.py"))
    assert report["hosts"] == {"gpu-1": "failed", "gpu-2": "failed", "gpu-3": "failed"}
    assert report["results"][3]["message"].startswith("ssh: connect")


def test_report_plugin_records_each_check_once(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    assert 1 == 2, 'one is not two'\n"
        "def test_skipped():\n    pytest.skip('not here')\n"
        "def test_fixture(broken):\n    pass\n"
        "def test_parse():\n    int('banana')\n"
        "def test_unreadable():\n"
        "    from rocmfleet.domain.tooloutput import CannotCheck\n"
        "    raise CannotCheck('journal unreadable')\n"
        "@pytest.mark.parametrize('role', ['base', 'docker'])\ndef test_role(role):\n    assert role == 'base', role\n"
    )
    out = tmp_path / "report.jsonl"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "rocmfleet.fleet.check.report"]
        + [
            f"--rocmfleet-report={out}",
            "--rootdir",
            str(tmp_path),
            "-c",
            "/dev/null",
            str(tmp_path / "test_sample.py"),
        ],
        capture_output=True,
        check=False,
    )
    entries = {e["nodeid"].split("::")[1]: e for e in map(json.loads, out.read_text().splitlines())}
    assert entries["test_ok"]["check"] == "sample::ok"
    # a check per role is named by its role, as one per instance by its instance (drift::role_as_wanted[ROLE])
    roles = {entries.pop(f"test_role[{r}]")["check"]: r for r in ("base", "docker")}
    assert roles == {"sample::role[base]": "base", "sample::role[docker]": "docker"}
    assert {k: e["outcome"] for k, e in entries.items()} == {
        "test_ok": "passed",
        "test_bad": "failed",
        "test_skipped": "skipped",
        "test_fixture": "error",
        "test_parse": "error",
        "test_unreadable": "error",
    }
    assert entries["test_bad"]["message"] == "one is not two"
    assert entries["test_skipped"]["message"] == "not here"
    assert "fixture broke" in entries["test_fixture"]["message"]
    assert "banana" in entries["test_parse"]["message"]
    assert entries["test_unreadable"]["message"] == "cannot check: journal unreadable"


def test_ssh_settings_come_from_pyinfra_data(inventory, tmp_path):
    key = tmp_path / "k"
    key.write_text("")
    path = inventory(
        hosts=f'[("gpu-1", {{"ssh_hostname": "10.0.0.1", "ssh_port": 2222, "ssh_user": "ops", "ssh_key": "{key}", '
        '"_sudo": True}), "gpu-2"]'
    )
    targets = load_fleet(str(path))
    assert [t.name for t in targets] == ["gpu-1", "gpu-2"]
    one = targets[0].ssh
    assert (one.hostname, one.port, one.user, one.key, one.sudo) == ("10.0.0.1", 2222, "ops", str(key), True)
    # no ssh_port: pyinfra takes the SSH config's Port, else 22
    assert (targets[1].ssh.hostname, targets[1].ssh.port, targets[1].ssh.sudo) == ("gpu-2", None, False)
    assert [t.name for t in load_fleet(str(path), ["gpu-2"])] == ["gpu-2"]
    assert [t.name for t in load_fleet(str(path), ["gpu_nodes"])] == ["gpu-1", "gpu-2"]
    with pytest.raises(FleetError, match="matches no host"):
        load_fleet(str(path), ["gpu-9"])


def test_exclude_leaves_hosts_out_after_limit_and_refuses_a_typo_or_an_empty_fleet(inventory):
    path = inventory(hosts='["gpu-1", "gpu-2", "gpu-3"]')
    assert [t.name for t in load_fleet(str(path), exclude=["gpu-2"])] == ["gpu-1", "gpu-3"]
    assert [t.name for t in load_fleet(str(path), ["gpu-[12]"], exclude=["gpu-1"])] == ["gpu-2"]
    with pytest.raises(FleetError, match="--exclude gpu-9: matches no host, group or glob"):
        load_fleet(str(path), exclude=["gpu-1", "gpu-9"])  # a typo would leave gpu-... in silently
    with pytest.raises(FleetError, match="--exclude gpu_nodes leaves no host"):
        load_fleet(str(path), exclude=["gpu_nodes"])


def test_an_invalid_inventory_is_a_fleet_error(inventory):
    path = inventory(hosts='["gpu-1"]', data='{"vllm_profile": "lama-tiny"}')
    with pytest.raises(FleetError, match="vllm_profile"):
        load_fleet(str(path))


@pytest.mark.parametrize(
    ("attrs", "problems"),
    [
        (("32.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16"), []),
        (("16.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16"), ["0000:05:00.0: PCIe link 16 GT/s, capable of 32 GT/s"]),
        (("32 GT/s", "32 GT/s", "8", "16"), ["0000:05:00.0: PCIe link x8, capable of x16"]),
        (("2.5 GT/s PCIe", "32.0 GT/s PCIe", "1", "16"), ["0000:05:00.0: PCIe link x1, capable of x16",
                                                         "0000:05:00.0: PCIe link 2.5 GT/s, capable of 32 GT/s"]),
    ],
)  # fmt: skip
def test_pcie_link_downgrades(attrs, problems):
    names = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
    assert cvs.link_problems("0000:05:00.0", dict(zip(names, attrs, strict=True))) == problems


def test_pcie_link_text_not_understood_is_quoted():
    with pytest.raises(cvs.LinkParseError, match="'Unknown'"):
        cvs.link_speed_gt_s("Unknown\n")
    with pytest.raises(cvs.LinkParseError, match="'x16'"):
        cvs.link_width("x16")
    with pytest.raises(cvs.LinkParseError, match="no max_link_width"):
        cvs.link_problems("0000:05:00.0", {"current_link_speed": "", "max_link_speed": "", "current_link_width": ""})


def test_amd_smi_fixture_maximum_reads_as_sysfs_does():
    text = (FIXTURES / "amd-smi-static-mi300x-truncated.txt").read_text()
    speed = next(line.split(":", 1)[1] for line in text.splitlines() if "MAX_PCIE_SPEED" in line)
    assert cvs.link_speed_gt_s(speed) == 32.0  # amd-smi's "32 GT/s": a Gen 5 x16 MI300X


def test_amdgpu_errors_picks_the_driver_lines():
    log = (
        "[    5.1] nvme nvme0: I/O error\n"
        "[   12.3] amdgpu 0000:05:00.0: amdgpu: RAS: uncorrectable error\n"
        "[   13.0] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout\n"
    )
    assert cvs.amdgpu_errors(log) == log.splitlines()[1:]
    assert cvs.amdgpu_errors("-- No entries --\n") == []  # after kernel_log_readable: really none
    assert (
        cvs.amdgpu_errors("-- Journal begins at Mon 2026-11-30 --\n" + log + "    continued\n") == log.splitlines()[1:]
    )


@pytest.mark.parametrize(
    "probe",
    ["-- No entries --\n", "", "Hint: You are currently not seeing messages from other users and the system.\n",
     "[    0.000000] kern"[:5]],
    ids=["non-root-no-entries", "empty", "hint-only", "truncated"],
)  # fmt: skip
def test_an_unreadable_kernel_log_is_an_error_never_a_pass(probe):
    with pytest.raises(CannotCheck, match="kernel log of this boot cannot be read"):
        cvs.kernel_log_readable(probe)


def test_a_readable_kernel_log_passes_the_probe():
    cvs.kernel_log_readable("-- Journal begins at Mon 2026-11-30 --\n[    0.000000] gpu-1 kernel: Linux version 6.8\n")


@pytest.mark.parametrize(
    "log", ["", "\n", "<html>502 Bad Gateway</html>\n", "Nov 30 10:00:00 gpu-1 kernel: amdgpu: in short format\n"]
)
def test_kernel_error_log_empty_or_unknown_format_is_an_error(log):
    with pytest.raises(CannotCheck):
        cvs.amdgpu_errors(log)


ROOT_PORT, SW_UP, SW_DOWN, GPU = "0000:00:01.1", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"
PATH = f"/sys/devices/pci0000:00/{ROOT_PORT}/{SW_UP}/{SW_DOWN}/{GPU}"


def _links(**devices: tuple[str, str, str, str]) -> str:
    """grep -H output for devices given as (current speed, max speed, current width, max width)."""
    names = {"root": ROOT_PORT, "up": SW_UP, "down": SW_DOWN, "gpu": GPU}
    return "".join(
        f"/sys/bus/pci/devices/{names[key]}/{attr}:{value}\n"
        for key, values in devices.items()
        for attr, value in zip(cvs.LINK_FILES, values, strict=True)
    )


GEN5_X16 = ("32.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16")


def test_pcie_path_from_the_root_port_to_the_gpu():
    assert cvs.pci_path(PATH + "\n", GPU) == [ROOT_PORT, SW_UP, SW_DOWN, GPU]
    with pytest.raises(cvs.LinkParseError, match="does not lead to the GPU"):
        cvs.pci_path(PATH.rsplit("/", 1)[0], GPU)
    with pytest.raises(cvs.LinkParseError):
        cvs.pci_path("", GPU)


def test_an_upstream_switch_port_downgraded_above_a_full_speed_gpu_fails():
    devices = [ROOT_PORT, SW_UP, SW_DOWN, GPU]
    healthy = cvs.parse_link_files(_links(root=GEN5_X16, up=GEN5_X16, down=GEN5_X16, gpu=GEN5_X16), devices)
    assert cvs.path_link_problems(GPU, devices, healthy) == []
    slow_switch = ("16.0 GT/s PCIe", "32.0 GT/s PCIe", "8", "16")  # issue 16's case
    attrs = cvs.parse_link_files(_links(root=GEN5_X16, up=slow_switch, down=GEN5_X16, gpu=GEN5_X16), devices)
    assert cvs.path_link_problems(GPU, devices, attrs) == [
        f"{SW_UP} (upstream of GPU {GPU}): PCIe link x8, capable of x16",
        f"{SW_UP} (upstream of GPU {GPU}): PCIe link 16 GT/s, capable of 32 GT/s",
    ]


def test_a_link_runs_at_the_slower_ends_maximum_and_bridges_without_links_are_passed_over():
    devices = [ROOT_PORT, SW_UP, SW_DOWN, GPU]
    gen4 = ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "16", "16")
    down_at_gen4 = ("16.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16")  # its partner, the GPU, is Gen 4
    attrs = cvs.parse_link_files(_links(root=GEN5_X16, up=GEN5_X16, down=down_at_gen4, gpu=gen4), devices)
    assert cvs.path_link_problems(GPU, devices, attrs) == []
    no_root_link = cvs.parse_link_files(_links(up=GEN5_X16, down=GEN5_X16, gpu=GEN5_X16), devices)
    assert cvs.path_link_problems(GPU, devices, no_root_link) == []


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty output"),
        (_links(gpu=GEN5_X16).rsplit("\n", 2)[0] + "\n", "no max_link_width"),  # truncated
        ("grep: /sys/bus/pci/devices: Permission denied\n", "unexpected line"),
        (_links(gpu=("Unknown", "32.0 GT/s PCIe", "16", "16")), "unknown PCIe link speed 'Unknown'"),
    ],
    ids=["empty", "truncated", "unknown-format", "unknown-speed"],
)
def test_pcie_link_output_empty_truncated_or_unknown_is_an_error(text, match):
    with pytest.raises(CannotCheck, match=match):
        cvs.path_link_problems(GPU, [ROOT_PORT, SW_UP, SW_DOWN, GPU], cvs.parse_link_files(text, [GPU]))


def test_a_gpu_without_link_attributes_is_an_error():
    with pytest.raises(CannotCheck, match=f"{GPU}: no PCIe link attributes"):
        cvs.path_link_problems(GPU, [ROOT_PORT, GPU], cvs.parse_link_files(_links(root=GEN5_X16), [ROOT_PORT, GPU]))


def test_a_bad_data_override_is_blamed_on_data_not_a_file(inventory):
    path = inventory(hosts='["gpu-1"]')
    with pytest.raises(FleetError, match=r"--data: vllm_shm_size_gib"):
        load_fleet(str(path), overrides={"vllm_shm_size_gib": "lots"})


def test_check_refuses_bad_options_before_any_connection(inventory, tmp_path, capsys):
    from rocmfleet.entry import main

    path = str(inventory(hosts='[("gpu-1", {"ssh_hostname": "127.0.0.1", "ssh_port": 9})]'))
    assert main(["check", path, "--json", str(tmp_path / "missing" / "x.json")]) == 2
    assert "directory" in capsys.readouterr().err
    assert main(["check", path, "--limit", "gpu-9,gpu-8"]) == 2
    with pytest.raises(SystemExit):
        main(["check", path, "--parallel", "0"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["check", path, "--timeout-s", "inf"])  # float() parses it: a deadline that never comes
    assert "must be a finite number > 0, got inf" in capsys.readouterr().err
    assert main(["cache", "bake", path, "--host", "gpu-9"]) == 2  # the bake's own option is named
    assert capsys.readouterr().err == f"rocmfleet: --host gpu-9 matches no host of {path}\n"
    elsewhere = tmp_path / "other.yml"
    elsewhere.write_text("vllm_image_tag: old\n")
    assert main(["cache", "bake", path, "--host", "gpu-1", "--write", str(elsewhere)]) == 2  # before any connection
    assert capsys.readouterr().err.startswith(f"rocmfleet: --write {elsewhere}: the inventory never loads this file")


def test_a_report_that_cannot_be_written_after_the_run_is_said_and_is_not_a_pass(
    inventory, tmp_path, monkeypatch, capsys
):
    from rocmfleet import entry

    path = str(inventory(hosts='["gpu-1"]'))
    passed = [CheckResult("gpu-1", "host::reachable", "passed")]
    monkeypatch.setattr(compliance, "run_fleet", lambda *_args, **_kw: passed)
    (tmp_path / "gone").mkdir()
    junit = tmp_path / "gone" / "report.xml"
    real_write = type(junit).write_text

    def vanished(self, *args, **kwargs):  # the directory checked before the run is gone after it
        if self == junit:
            raise FileNotFoundError(2, "No such file or directory")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(type(junit), "write_text", vanished)
    json_path = tmp_path / "report.json"
    assert entry.main(["check", path, "--junit-xml", str(junit), "--json", str(json_path)]) == 1
    out, err = capsys.readouterr()
    assert "gpu-1" in out  # the summary table was printed before the reports
    assert err == f"rocmfleet: --junit-xml {junit}: cannot write the report (No such file or directory)\n"
    assert json.loads(json_path.read_text())  # the other report is still written


def test_a_report_to_standard_output_keeps_it_to_itself(inventory, monkeypatch, capsys):
    from rocmfleet import entry

    path = str(inventory(hosts='["gpu-1"]'))
    monkeypatch.setattr(compliance, "run_fleet", lambda *_a, on_host, **_k: on_host(RESULTS[:2]) or RESULTS[:2])
    assert entry.main(["check", path, "--json", "-"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["hosts"]  # stdout is the JSON report alone (`| jq` works)
    assert "numa_balancing_persisted" in err  # the progress and the summary went to stderr
    assert not Path("-").exists()
    assert entry.main(["check", path, "--junit-xml", "-"]) == 1
    assert ET.fromstring(capsys.readouterr().out).tag == "testsuites"
    assert entry.main(["check", path, "--junit-xml", "-", "--json", "-"]) == 2


@pytest.mark.parametrize(
    ("count", "processes", "sizes"),
    [(1, 10, [1]), (10, 10, [1] * 10), (11, 10, [2] + [1] * 9), (100, 10, [10] * 10), (5, 2, [3, 2]), (3, 0, [3])],
)
def test_hosts_are_dealt_in_order_into_at_most_parallel_processes(count, processes, sizes):
    items = list(range(count))
    dealt = compliance.groups(items, processes)
    assert [len(g) for g in dealt] == sizes
    assert [i for g in dealt for i in g] == items
    assert compliance.groups([], 4) == []


def _line(host, check, outcome="passed", message=""):
    return json.dumps({"nodeid": f"x::{check}", "host": host, "check": check, "outcome": outcome, "message": message})


def test_collator_reports_each_host_when_its_last_check_ends():
    collator = compliance.Collator(["gpu-1", "gpu-2"])
    assert collator.feed([_line("gpu-2", "rocm::a"), _line("gpu-1", "rocm::a", "failed", "no")]) == []
    done = collator.feed([_line("gpu-2", "tuning::b"), json.dumps({"host": "gpu-2", "done": True})])
    assert done == [("gpu-2", [CheckResult("gpu-2", "rocm::a", "passed"), CheckResult("gpu-2", "tuning::b", "passed")])]
    assert collator.feed([_line("gpu-9", "rocm::a")]) == []  # a host not of this process is ignored
    rest = collator.finish(None)
    assert rest == [("gpu-1", [CheckResult("gpu-1", "rocm::a", "failed", "no")])]
    assert collator.finish("late") == []  # each host once


def test_collator_gives_hosts_cut_off_a_suite_error_and_leaves_finished_ones_alone():
    collator = compliance.Collator(["gpu-1", "gpu-2", "gpu-3"])
    collator.feed([_line("gpu-1", "rocm::a"), json.dumps({"host": "gpu-1", "done": True}), _line("gpu-2", "rocm::a")])
    rest = dict(collator.finish("checks did not finish within 300 s per host (3 host(s))", 12.0))
    assert set(rest) == {"gpu-2", "gpu-3"}
    assert rest["gpu-2"][-1].check == rest["gpu-3"][-1].check == "host::suite"
    assert rest["gpu-3"] == [CheckResult("gpu-3", "host::suite", "error", rest["gpu-3"][0].message, "", 12.0)]
    assert compliance.exit_status(rest["gpu-2"]) == 1


def test_a_check_without_a_host_counts_for_every_host_of_its_process():
    collator = compliance.Collator(["gpu-1", "gpu-2"])
    collator.feed([_line(None, "sample::ok")])
    assert {h: [r.check for r in rs] for h, rs in collator.finish(None)} == {
        "gpu-1": ["sample::ok"],
        "gpu-2": ["sample::ok"],
    }


def test_each_host_runs_only_its_own_instances():
    from rocmfleet.fleet.check.conftest import instance_names, runs_here

    per_host = {"gpu-1": ["a", "b"], "gpu-2": ["solo", "a"], "gpu-3": []}
    assert instance_names(per_host) == ["a", "b", "solo"]
    assert runs_here("gpu-1", "b", per_host) and runs_here("gpu-2", "a", per_host)
    assert not runs_here("gpu-2", "b", per_host) and not runs_here("gpu-3", "a", per_host)
    assert runs_here("gpu-3", None, per_host)  # a check not per instance runs on every host


def test_each_hosts_last_check_is_found_in_run_order():
    from rocmfleet.fleet.check.report import last_items

    assert last_items(["gpu-1", "gpu-2", None, "gpu-1", "gpu-2", "gpu-3"]) == {3: "gpu-1", 4: "gpu-2", 5: "gpu-3"}
    assert last_items([None, None]) == {}


def _check_file(tmp_path, monkeypatch, hosts):
    """Write ``checkfile.check_input(hosts)`` where a check process reads it; its text."""
    from rocmfleet.fleet.check import expect

    text = checkfile.check_input(hosts)
    path = tmp_path / "check.json"
    path.write_text(text)
    monkeypatch.setenv(checkfile.FILE_ENV, str(path))
    for cache in (checkfile.load, expect._plan):
        cache.cache_clear()
    return text


def test_the_check_input_holds_each_hosts_plan_and_ssh_and_no_configuration_nor_secret(lab_data, tmp_path, monkeypatch):
    """The check process gets, per host, its SSH settings and its plan, and nothing else: no key of the
    configuration (``settings``, ``profile``, ``image``, ``vllm_secret_env``, ``docker_registry_auth``)
    and no secret's value; the checks read the plan back with the model's loader."""
    import dataclasses
    import json

    from rocmfleet.config.connection import SshSettings
    from rocmfleet.config.settings import host_config
    from rocmfleet.config.vault import Secret
    from rocmfleet.fleet.check import expect
    from rocmfleet.plan.build import plan_host
    from rocmfleet.plan.model import HostPlan

    secrets = {"HF_TOKEN": Secret("hf_neverShown4242")}
    auth = [{"registry": "registry.example.com", "username": "puller", "password": Secret("pw_neverShown4242")}]
    one = host_config({**lab_data, "vllm_secret_env": secrets, "docker_registry_auth": auth})
    two = host_config({**lab_data, "vllm_instances": [{"name": "solo", "port": 9000, "gpus": [0]}]})
    plans = {"gpu-1": plan_host("gpu-1", one), "gpu-2": plan_host("gpu-2", two)}
    text = _check_file(
        tmp_path,
        monkeypatch,
        {"gpu-1": (SshSettings("10.0.0.1"), plans["gpu-1"]), "gpu-2": (SshSettings("10.0.0.2"), plans["gpu-2"])},
    )
    try:
        assert "hf_neverShown4242" not in text and "pw_neverShown4242" not in text
        data = json.loads(text)
        assert list(data) == ["hosts"] and list(data["hosts"]) == ["gpu-1", "gpu-2"]
        fields = {f.name for f in dataclasses.fields(HostPlan)}
        for host in data["hosts"].values():
            assert set(host) == {"ssh", "plan"}
            plan_keys = set(host["plan"])
            assert plan_keys <= {*fields, "contents"} and {"settings", "profile", "rocm", "tuning"}.isdisjoint(
                plan_keys
            )
        config_only = ('"vllm_secret_env"', '"docker_registry_auth"', '"password"', '"vllm_profile"', '"vllm_env"')
        assert not [key for key in config_only if key in text]
        assert "HF_TOKEN" in text  # the secret's name: the secrets file's variables
        assert checkfile.host_names() == ["gpu-1", "gpu-2"]
        assert expect.host_plan("gpu-1") == plans["gpu-1"] and expect.host_plan("gpu-2") == plans["gpu-2"]
        assert [i.name for i in expect.instances_of("gpu-1")] == ["tiny-llama-a", "tiny-llama-b"]
        assert [i.name for i in expect.instances_of("gpu-2")] == ["solo"]
        assert checkfile.ssh_settings("gpu-2").hostname == "10.0.0.2"
        assert expect.rocm_settings("gpu-1") == one.rocm and expect.metrics_settings("gpu-1") == one.metrics
        with pytest.raises(checkfile.ExpectationError, match="no plan for host 'gpu-9'"):
            expect.host_plan("gpu-9")
    finally:
        for cache in (checkfile.load, expect._plan):
            cache.cache_clear()


def test_the_check_modules_never_read_the_configuration():
    """No module of the check process imports the configuration layer but for the SSH settings
    (``config.connection``), nor re-plans a host (``plan.build``, ``plan.hostdrift``'s planning,
    ``plan.hoststate``): the control side (``compliance``, ``hostplan``, given ``plan_host``) does."""
    import ast
    from pathlib import Path

    from rocmfleet.fleet import check

    control = {"compliance.py", "hostplan.py"}
    found = []
    for path in sorted(Path(check.__file__).parent.glob("*.py")):
        if path.name in control:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                bad = name.startswith("rocmfleet.config") and name != "rocmfleet.config.connection"
                if bad or name in ("rocmfleet.plan.build", "rocmfleet.plan.hoststate", "rocmfleet.plan.instance"):
                    found.append(f"{path.name}: {name}")
    assert not found, found


def test_check_help_names_every_module(capsys):
    from rocmfleet import entry

    with pytest.raises(SystemExit):
        entry.main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f" {name}," in text or f" {name} (" in text for name in compliance.MODULES), text


def test_a_check_message_is_one_line_of_at_most_600_characters():
    from rocmfleet.fleet.check.report import MESSAGE_CHARS, short

    script = "python3 - <<'EOF'\n" + "import json\n" * 700 + "EOF"  # a 7 KB probe quoted by an error
    line = short(f"ready probe failed: {script}")
    assert "\n" not in line and len(line) == MESSAGE_CHARS and line.endswith("…")
    assert short("port 8000:  connection refused\n") == "port 8000: connection refused"
