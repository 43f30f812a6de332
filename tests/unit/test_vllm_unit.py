"""The vLLM unit and its container (issue 11): the container is Docker's, the unit follows it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import pytest

from rocmfleet import project
from rocmfleet.config.settings import host_config
from rocmfleet.config.vault import Secret
from rocmfleet.domain import vllm, vllmfiles, watchdog
from rocmfleet.facts.vllm import UNIT_MARKER
from rocmfleet.plan.instance import vllm_settings
from rocmfleet.scripts import gpu_free

ROOT = Path(__file__).resolve().parents[2]
BDFS = ["0000:05:00.0"]


def render(config, placements, instance_index=0, bdfs=BDFS) -> str:
    instance = config.instances()[instance_index]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(project.PACKAGE), keep_trailing_newline=True)
    variables = vllm.unit_template_vars(vllm_settings(config), instance, placements[instance.name], [992], bdfs)
    return env.get_template("templates/vllm/vllm.service.j2").render(**variables)


def directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in re.sub(r"\\\n\s*", " ", unit).splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_follows_a_detached_container_without_requiring_docker(lab_config, lab_placements):
    unit = render(lab_config, lab_placements)
    assert unit.splitlines()[0].startswith(UNIT_MARKER)  # ManagedInstances reads it
    assert "\n\n\n" not in unit
    d = directives(unit)
    assert "Requires" not in d and "BindsTo" not in d and "PartOf" not in d  # docker restarts do not reach us
    assert d["Wants"] == ["docker.service network-online.target"]
    assert d["After"] == ["docker.service network-online.target"]  # stopped before Docker at shutdown
    assert d["Type"] == ["exec"]
    start = d["ExecStart"][0].split()
    assert start[:5] == [vllm.UNIT_SCRIPT, "run", "vllm-tiny-llama-a", "tiny-llama-a", "0000:05:00.0"]
    # the watchdog's options (rocmfleet.domain.watchdog), the lab profile's known-answer request last
    end = start.index("--")
    watch = dict(zip(start[5:end:2], start[6:end:2], strict=False))
    assert {k: watch[k] for k in ("--watch-port", "--watch-every", "--watch-failures", "--watch-start")} == {
        "--watch-port": "8000", "--watch-every": "30", "--watch-failures": "3", "--watch-start": "1800"
    }  # fmt: skip
    assert '--watch-request "{\\"model\\": \\"tiny-llama\\", \\"prompt\\": \\"The capital of France is\\"' in unit
    assert start[end + 1 : end + 5] == ["/usr/bin/docker", "run", "--detach", "--init"]
    # no SIGKILL of a running server before a start: a graceful stop, then a plain rm, in the script
    assert d["ExecStartPre"][0] == f"{vllm.UNIT_SCRIPT} clear vllm-tiny-llama-a 90"
    # then the instance's cache root keeps this image's and the last good version's namespaces and
    # loses its stale lock files (cachedirs.prepared), then the image's own AITER_JIT_DIR gets its
    # prebuilt AITER modules (cachedirs.aiter_seed_dir)
    root = f"{lab_config.settings.vllm_cache_dir.rstrip('/')}/tiny-llama-a"
    serve_json = f"{vllmfiles.CONFIG_DIR}/tiny-llama-a.last-good/serve.json"
    assert d["ExecStartPre"][1:] == [
        f"{vllm.UNIT_SCRIPT} prepare-cache {root} abababababab {serve_json}",
        f"{vllm.UNIT_SCRIPT} seed-aiter {lab_config.image.reference} {root}/abababababab/aiter",
    ]
    assert not [line for line in unit.splitlines() if "--force" in line and not line.startswith("#")]
    assert d["ExecStop"] == ["-/usr/bin/docker stop --time 90 vllm-tiny-llama-a"]


def test_restart_back_off_start_limit_and_timeouts(lab_data, lab_placements):
    lab_data["vllm_stop_grace_s"] = 120
    d = directives(render(host_config(lab_data), lab_placements))
    assert d["Restart"] == ["always"] and int(d["RestartSec"][0]) >= 10
    assert d["StartLimitBurst"] == ["3"]
    # three crashes a few minutes apart still fall within the interval
    assert int(d["StartLimitIntervalSec"][0]) >= 3 * (int(d["RestartSec"][0]) + 180)
    assert d["RestartPreventExitStatus"] == [f"{gpu_free.HELD_EXIT} {watchdog.GAVE_UP_EXIT}"]
    # TimeoutStartSec bounds ExecStartPre (Type=exec): a graceful stop of a left-over container and its rm
    assert int(d["TimeoutStartSec"][0]) > 120
    assert int(d["TimeoutStopSec"][0]) > 120
    assert "--stop-timeout 120" in d["ExecStart"][0] and d["ExecStop"] == [
        "-/usr/bin/docker stop --time 120 vllm-tiny-llama-a"
    ]


def test_secrets_stay_names_in_the_unit_and_values_in_its_environment_file(lab_data, lab_placements):
    lab_data["vllm_secret_env"] = {"HF_TOKEN": Secret("hf_SECRETvalue")}
    unit = render(host_config(lab_data), lab_placements)
    assert "hf_SECRETvalue" not in unit
    assert "--env HF_TOKEN" in unit
    assert directives(unit)["EnvironmentFile"] == ["/etc/rocmfleet/vllm/tiny-llama-a.secrets"]


def test_the_image_digest_labels_and_placement_are_kept(lab_config, lab_placements):
    unit = render(lab_config, lab_placements, 1)
    for expected in (
        f"{lab_config.image.reference}",
        "--label org.rocmfleet.instance=tiny-llama-b",
        "--label org.rocmfleet.profile=lab-tiny-llama",
        "--device /dev/kfd",
        "--cpuset-cpus",
    ):
        assert expected in unit
    assert "@sha256:" in lab_config.image.reference


def test_no_gpu_addresses_means_no_check(lab_config, lab_placements):
    start = directives(render(lab_config, lab_placements, bdfs=[]))["ExecStart"][0].split()
    assert start[4] == '""' and start[5] == "--watch-port"


def test_a_disabled_watchdog_renders_no_watch_options(lab_config, lab_placements):
    from dataclasses import replace

    off = lab_config.settings.model_copy(update={"vllm_watchdog": watchdog.WatchdogSettings(enabled=False)})
    start = directives(render(replace(lab_config, settings=off), lab_placements))["ExecStart"][0].split()
    assert start[5] == "--" and not any(w.startswith("--watch") for w in start)


# ---------------------------------------------------------------------------------------------
# GPU memory check: amd-smi process --json as amdsmi_cli/amdsmi_commands.py process() prints it


def _process(pid, name, vram, unit="B"):
    value = {"value": vram, "unit": unit}
    return {
        "process_info": {
            "name": name,
            "pid": pid,
            "memory_usage": {"gtt_mem": {"value": 0, "unit": "B"}, "cpu_mem": value, "vram_mem": value},
            "mem_usage": value,
            "usage": {"gfx": {"value": 0, "unit": "ns"}, "enc": {"value": 0, "unit": "ns"}},
        }
    }


FREE = [{"gpu": 0, "process_list": [{"process_info": "No running processes detected"}]}]
HELD = [
    {"gpu": 0, "process_list": [_process(4242, "python3", 75161927680), _process(77, "amd-smi", 4096)]},
    {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]},
]


def test_free_gpus_have_no_holders():
    assert gpu_free.holders(FREE) == []
    assert gpu_free.holders({"gpu_data": FREE}) == []


def test_a_process_holding_vram_is_named_and_amd_smi_itself_is_not():
    found = gpu_free.holders(json.loads(json.dumps(HELD)))
    assert found == [gpu_free.Holder(0, 4242, "python3", 75161927680)]
    text = gpu_free.message("a", ["0000:05:00.0"], found)
    assert "GPU 0: pid 4242 (python3) holds 70.0 GiB VRAM" in text
    assert "systemctl start vllm-a" in text


@pytest.mark.parametrize(("value", "expected"), [({"value": 2, "unit": "GB"}, 2 * 10**9), ("1.5 GiB", 1610612736)])
def test_memory_in_other_units(value, expected):
    report = [{"gpu": 3, "process_list": [{"process_info": {"name": "x", "pid": 1, "mem_usage": value}}]}]
    assert gpu_free.holders(report)[0].vram_bytes == expected


def test_an_unknown_form_is_an_error_not_free():
    with pytest.raises(ValueError):
        gpu_free.holders({"something": "else"})
    with pytest.raises(ValueError):
        gpu_free.holders([{"gpu": 0, "process_list": "N/A"}])


def test_without_amd_smi_the_check_is_skipped_with_a_note(monkeypatch, capsys):
    monkeypatch.setattr(gpu_free.shutil, "which", lambda name: None)
    assert gpu_free.main(["a", "0000:05:00.0"]) == 0
    assert "amd-smi not found: GPU memory check skipped" in capsys.readouterr().err


def test_amd_smi_output_decides(monkeypatch, capsys, tmp_path):
    fake = tmp_path / "amd-smi"
    fake.write_text(f"#!/bin/sh\necho '{json.dumps(HELD)}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert gpu_free.main(["a", "0000:05:00.0,0000:06:00.0"]) == gpu_free.HELD_EXIT
    assert "pid 4242 (python3)" in capsys.readouterr().err
    fake.write_text("#!/bin/sh\necho \"amd-smi (stand-in): 'process' has no recorded output\" >&2\nexit 2\n")
    assert gpu_free.main(["a", "0000:05:00.0"]) == 0
    assert "GPU memory check skipped" in capsys.readouterr().err


def test_a_baked_image_has_no_aiter_seed(lab_data, lab_placements):
    """A baked image carries AITER_JIT_DIR in its layer (seeded at the bake): nothing is mounted or seeded."""
    lab_data["vllm_image_tag"] = "lab-rfcache-0123456789ab"
    unit = render(host_config(lab_data), lab_placements)
    d = directives(unit)
    assert len(d["ExecStartPre"]) == 1 and d["ExecStartPre"][0].split()[1] == "clear"
    assert "\n\n\n" not in unit  # the steps left out leave no run of blank lines
