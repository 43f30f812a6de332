"""The ``rocmfleet check`` runner's pure parts, its pytest plugin, and the CVS parsers."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from rocmfleet import compliance, cvs
from rocmfleet.compliance import CheckResult
from rocmfleet.fleet import FleetError, load_fleet
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
]


def test_module_selection_refuses_unknown_modules():
    assert [p.rsplit("/", 1)[1] for p in compliance.module_paths(["tuning", "rocm"])] == [
        "test_rocm.py",
        "test_tuning.py",
    ]
    assert len(compliance.module_paths()) == len(compliance.MODULES)
    with pytest.raises(ValueError, match="unknown check module.*gpu; known: rocm"):
        compliance.module_paths(["gpu"])


def test_lines_table_and_exit_status():
    assert compliance.line(RESULTS[1]) == "gpu-1  FAIL  tuning::numa_balancing_persisted  kernel.numa_balancing = 1"
    assert compliance.line(RESULTS[0]) == "gpu-1  PASS  host::reachable"
    assert compliance.line(RESULTS[0], 8) == "gpu-1     PASS  host::reachable"  # aligned with longer names
    table = compliance.summary_table(RESULTS).splitlines()
    assert table[1].split() == ["gpu-1", "1", "1", "1", "FAIL"]
    assert table[2].split() == ["gpu-2", "0", "1", "0", "FAIL"]
    assert table[-1] == "2 host(s), 2 failed"
    assert compliance.exit_status(RESULTS) == 1
    assert compliance.exit_status([RESULTS[0], RESULTS[2]]) == 0


def test_junit_xml_has_a_suite_per_host_and_a_case_per_check():
    root = ET.fromstring(compliance.junit_xml(RESULTS))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"gpu-1", "gpu-2"}
    assert (suites["gpu-1"].get("tests"), suites["gpu-1"].get("failures"), suites["gpu-1"].get("skipped")) == (
        "3",
        "1",
        "1",
    )
    failure = suites["gpu-1"].find("testcase[@name='tuning::numa_balancing_persisted']/failure")
    assert failure.get("message") == "kernel.numa_balancing = 1" and failure.text == "trace"


def test_json_report_gives_a_verdict_per_host():
    report = json.loads(compliance.json_report(RESULTS, "inventories/prod.py"))
    assert report["hosts"] == {"gpu-1": "failed", "gpu-2": "failed"}
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
    )
    out = tmp_path / "report.jsonl"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "rocmfleet.checks.report"]
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
    assert {k: e["outcome"] for k, e in entries.items()} == {
        "test_ok": "passed",
        "test_bad": "failed",
        "test_skipped": "skipped",
        "test_fixture": "failed",
        "test_parse": "failed",
    }
    assert entries["test_bad"]["message"] == "one is not two"
    assert entries["test_skipped"]["message"] == "not here"
    assert "fixture broke" in entries["test_fixture"]["message"]
    assert "banana" in entries["test_parse"]["message"]


def test_ssh_settings_come_from_pyinfra_data(inventory):
    path = inventory(
        hosts='[("gpu-1", {"ssh_hostname": "10.0.0.1", "ssh_port": 2222, "ssh_user": "ops", "ssh_key": "/k"}), "gpu-2"]'
    )
    targets = load_fleet(str(path))
    assert [t.name for t in targets] == ["gpu-1", "gpu-2"]
    one = targets[0]
    assert (one.hostname, one.port, one.user, one.key) == ("10.0.0.1", 2222, "ops", "/k")
    assert "  Port 2222" in one.ssh_config() and one.ssh_config().startswith("Host 10.0.0.1\n")
    assert targets[1].hostname == "gpu-2" and "-o" in targets[1].ssh_options()
    assert [t.name for t in load_fleet(str(path), ["gpu-2"])] == ["gpu-2"]
    assert [t.name for t in load_fleet(str(path), ["gpu_nodes"])] == ["gpu-1", "gpu-2"]
    with pytest.raises(FleetError, match="matches no host"):
        load_fleet(str(path), ["gpu-9"])


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
    assert cvs.amdgpu_errors("") == []


def test_a_bad_data_override_is_blamed_on_data_not_a_file(inventory):
    path = inventory(hosts='["gpu-1"]')
    with pytest.raises(FleetError, match=r"--data: vllm_shm_size_gib"):
        load_fleet(str(path), overrides={"vllm_shm_size_gib": "lots"})


def test_check_refuses_bad_options_before_any_connection(inventory, tmp_path, capsys):
    from rocmfleet.cli import main

    path = str(inventory(hosts='[("gpu-1", {"ssh_hostname": "127.0.0.1", "ssh_port": 9})]'))
    assert main(["check", path, "--json", str(tmp_path / "missing" / "x.json")]) == 2
    assert "directory" in capsys.readouterr().err
    assert main(["check", path, "--limit", "gpu-9,gpu-8"]) == 2
    with pytest.raises(SystemExit):
        main(["check", path, "--parallel", "0"])
