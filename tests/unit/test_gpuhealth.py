"""GPU health as the ``gpu`` check reads it (rocmfleet/domain/gpuhealth.py, rocmfleet/scripts/gpu-health.sh)."""

from __future__ import annotations

import json
import subprocess

import pytest

from rocmfleet import scripts
from rocmfleet.domain import gpuhealth
from rocmfleet.domain.gpuhealth import EccCounts

# amd-smi metric --ecc --json, the list of ROCm 6.x and the {"gpu_data": [...]} of amd-smi 25+
ROW = {"total_correctable_count": 0, "total_uncorrectable_count": 0, "total_deferred_count": 0,
       "cache_correctable_count": 0, "cache_uncorrectable_count": 0}  # fmt: skip


def _gpus(**changed: dict) -> list[dict]:
    return [{"gpu": i, "ecc": {**ROW, **changed.get(f"g{i}", {})}} for i in range(8)]


def test_both_amd_smi_shapes_and_not_available_counts():
    listed = gpuhealth.parse_amd_smi_ecc(json.dumps(_gpus(g3={"total_uncorrectable_count": 1})))
    wrapped = gpuhealth.parse_amd_smi_ecc(json.dumps({"gpu_data": _gpus(g3={"total_uncorrectable_count": 1})}))
    assert listed == wrapped and len(listed) == 8 and listed[3] == EccCounts("3", 0, 1, 0)
    na = gpuhealth.parse_amd_smi_ecc(json.dumps([{"gpu": 0, "ecc": {"total_correctable_count": "N/A"}}]))
    assert na == (EccCounts("0", None, None, None),) and gpuhealth.ecc_problems(na, 0) == []
    for bad in ("", "[]", '{"gpu_data": []}', "not json"):
        with pytest.raises(ValueError):
            gpuhealth.parse_amd_smi_ecc(bad)


def test_uncorrectable_or_deferred_fail_at_once_correctable_above_the_threshold():
    counts = (EccCounts("0", 100, 0, 0), EccCounts("1", 101, 0, 0), EccCounts("2", 0, 0, 2), EccCounts("3", 0, 1))
    assert gpuhealth.ecc_problems(counts, 100) == [
        "GPU 1: 101 correctable ECC error(s) (more than 100) since boot",
        "GPU 2: 2 deferred ECC error(s) since boot",
        "GPU 3: 1 uncorrectable ECC error(s) since boot",
    ]


def test_sysfs_ras_counters_are_summed_per_card():
    text = "card1 umc ue: 0\ncard1 umc ce: 3\ncard1 gfx ue: 1\ncard1 gfx ce: 0\ncard10 umc ue: 0\ncard10 umc ce: 0\n"
    assert gpuhealth.parse_sysfs_ras(text) == (EccCounts("card1", 3, 1), EccCounts("card10", 0, 0))
    assert gpuhealth.ecc_problems(gpuhealth.parse_sysfs_ras(text), 100) == [
        "card1: 1 uncorrectable ECC error(s) since boot"
    ]


KERNEL = """\
[    5.1] amdgpu 0000:05:00.0: amdgpu: SMU is initialized successfully!
[ 8812.3] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2
[ 8812.4] amdgpu 0000:05:00.0: amdgpu: GPU reset begin!
[ 8813.0] amdgpu 0000:05:00.0: amdgpu: GPU reset(1) succeeded!
"""


def test_the_script_output_parsed_with_its_kernel_resets():
    read = gpuhealth.parse_health(f"== ecc amd-smi\n{json.dumps(_gpus())}\n== kernel\n{KERNEL}")
    assert read.source == "amd-smi" and len(read.ecc) == 8 and read.kernel_log_error is None
    assert len(read.resets) == 3 and read.resets[-1].endswith("GPU reset(1) succeeded!")
    quiet = gpuhealth.parse_health("== ecc none\n== kernel unreadable: dmesg: read kernel buffer failed\n")
    assert quiet.source is None and quiet.ecc == () and quiet.kernel_log_error.startswith("dmesg: read kernel")
    clean = gpuhealth.parse_health("== ecc none\n== kernel\n" + KERNEL.splitlines()[0] + "\n")
    assert clean.resets == () and clean.kernel_log_error is None


def test_the_script_reads_amd_smi_when_it_answers(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "amd-smi").write_text(f"#!/bin/sh\necho '{json.dumps(_gpus())}'\n")
    denied = "dmesg: read kernel buffer failed: Operation not permitted"
    (bin_dir / "dmesg").write_text(f"#!/bin/sh\necho '{denied}'; exit 1\n")
    (bin_dir / "journalctl").write_text("#!/bin/sh\nexit 1\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    out = subprocess.run(
        ["sh", "-c", scripts.text("gpu-health.sh")], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    read = gpuhealth.parse_health(out)
    assert read.source == "amd-smi" and len(read.ecc) == 8
    assert read.kernel_log_error == "dmesg: read kernel buffer failed: Operation not permitted"


def test_the_deploy_warns_of_each_gpu_problem_its_read_shows(monkeypatch, caplog):
    import logging
    from types import SimpleNamespace

    from rocmfleet import converge
    from rocmfleet.facts.state import Gathered

    monkeypatch.setattr(converge, "host", SimpleNamespace(name="mi300x-a01"))
    sick = _gpus(g3={"total_uncorrectable_count": 1})
    lines = f"== ecc amd-smi\n{json.dumps(sick)}\n== kernel\n{KERNEL}".splitlines()
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        converge._report_gpu_health(100, Gathered(runs={converge.GPU_HEALTH: (0, lines)}))
        converge._report_gpu_health(100, Gathered(runs={converge.GPU_HEALTH: (0, ["== ecc none", "== kernel"])}))
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "mi300x-a01: GPU health: GPU 3: 1 uncorrectable ECC error(s) since boot (rocmfleet check --select gpu)",
        "mi300x-a01: GPU health: 3 amdgpu reset/hang line(s) in the kernel log since boot: "
        "[ 8813.0] amdgpu 0000:05:00.0: amdgpu: GPU reset(1) succeeded! (rocmfleet check --select gpu)",
    ]


def test_the_correctable_threshold_is_a_setting_with_bounds(lab_data):
    from rocmfleet.config.errors import ConfigError
    from rocmfleet.config.settings import host_config

    assert host_config({**lab_data, "gpu_ecc_correctable_max": 5}).settings.gpu_ecc_correctable_max == 5
    with pytest.raises(ConfigError, match="gpu_ecc_correctable_max"):
        host_config({**lab_data, "gpu_ecc_correctable_max": -1})


def test_odd_counts_and_lines_are_not_errors():
    odd = [{"gpu": 0, "ecc": {"total_uncorrectable_count": -3, "total_correctable_count": "\u00b2"}},
           {"gpu": None, "ecc": {"total_uncorrectable_count": 1}}]  # fmt: skip
    assert gpuhealth.parse_amd_smi_ecc(json.dumps(odd)) == (EccCounts("0", None, None, None),)
    deferred = gpuhealth.parse_sysfs_ras("card1 umc ue: 0\ncard1 umc ce:  2\ncard1 umc de: 1\n")
    assert deferred == (EccCounts("card1", 2, 0, 1),)
    assert gpuhealth.ecc_problems(deferred, 100) == ["card1: 1 deferred ECC error(s) since boot"]
    for benign in ("amdgpu 0000:05:00.0: amdgpu: GPU reset is not supported", "amdgpu: GPU recovery disabled."):
        assert not gpuhealth.RESET_PATTERN.search(benign)
