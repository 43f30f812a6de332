"""One environment policy for extra_env, vllm_env and the flag table; safe AITER values per
(vLLM version, gfx arch); the MI300X production set; HSA_NO_SCRATCH_RECLAIM for TP > 1."""

from __future__ import annotations

import pytest

from rocmfleet.config.errors import ConfigError
from rocmfleet.config.profiles import ProfileError, load_profile
from rocmfleet.config.settings import host_config
from rocmfleet.domain import envpolicy, vllm, vllmplace
from rocmfleet.domain.placement import Placement
from rocmfleet.plan.instance import vllm_settings
from tests.unit.conftest import LAB_PROFILE, TOPOLOGY, every_profile
from tests.unit.test_partitions import PROFILES, _config

FP4 = "VLLM_ROCM_USE_AITER_FP4BMM"


@pytest.fixture(scope="module")
def profiles():
    return every_profile()


# --- rendered environment ---------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.15.0", "0.16.0", "0.32.0"])
def test_deepseek_on_gfx942_from_015_gets_the_safe_fp4bmm_value(profiles, version):
    env = envpolicy.rendered_env(profiles["deepseek-r1"], "gfx942", version)
    assert env[FP4] == "0"
    assert env["VLLM_ROCM_USE_AITER"] == "1"
    assert env["HSA_NO_SCRATCH_RECLAIM"] == "1"  # TP 8


@pytest.mark.parametrize(
    ("arch", "version"),
    [("gfx942", "0.14.0"), ("gfx942", "0.33.0"), ("gfx950", "0.15.0"), (None, "0.15.0")],
)
def test_deepseek_without_the_value_where_not_needed(profiles, arch, version):
    # Before 0.15 the default was off; 0.33.0's default is False (reference §4.1); gfx950 has FP4.
    assert FP4 not in envpolicy.rendered_env(profiles["deepseek-r1"], arch, version)


def test_safe_value_only_with_aiter_on(profiles):
    lab = profiles["lab-tiny-llama"]  # no aiter setting
    assert FP4 not in envpolicy.rendered_env(lab, "gfx942", "0.15.0")


def test_llama_reproduces_the_production_guidance(profiles):
    llama = profiles["llama-3.3-70b"]
    env = envpolicy.rendered_env(llama, "gfx942")
    assert {k: env[k] for k in ("HIP_FORCE_DEV_KERNARG", "HSA_ENABLE_SDMA", "NCCL_COMM_BLOCKING")} == {
        "HIP_FORCE_DEV_KERNARG": "1",
        "HSA_ENABLE_SDMA": "1",
        "NCCL_COMM_BLOCKING": "0",
    }
    assert "RCCL_MSCCL_ENABLE" not in env  # multi-node only
    assert "HSA_NO_SCRATCH_RECLAIM" not in env  # TP 1
    assert llama.render().args == [
        "--tensor-parallel-size", "1", "--max-model-len", "8192", "--gpu-memory-utilization", "0.92",
        "--kv-cache-dtype", "fp8", "--dtype", "bfloat16", "--trust-remote-code",
    ]  # fmt: skip


def test_container_env_reads_the_placements_arch(tmp_path):
    config = _config(tmp_path, "deepseek-r1", vllm_version="0.16.0")
    placement = Placement("deepseek-r1-0", (), {"CUDA_VISIBLE_DEVICES": "0"}, "", "", gpus=(0,), gfx_arch="gfx942")
    assert vllm.container_env(vllm_settings(config), placement)[FP4] == "0"
    placement = Placement("deepseek-r1-0", (), {"CUDA_VISIBLE_DEVICES": "0"}, "", "", gpus=(0,), gfx_arch="gfx950")
    assert FP4 not in vllm.container_env(vllm_settings(config), placement)


def test_every_env_set_is_documented():
    for s in envpolicy.ENV_SETS.values():
        assert set(s.meaning) == set(s.variables) and s.when_not and s.source


# --- vllm_env and extra_env -------------------------------------------------------------------


def problems(env: dict[str, str], profile: str = "llama-3.3-70b") -> dict[str, tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        host_config({"vllm_profile": profile, "vllm_env": env})
    return {p.key: (p.message, p.value) for p in info.value.problems}


@pytest.mark.parametrize("name", ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
def test_visibility_belongs_to_placement(name):
    message, value = problems({name: "0,1"})[f"vllm_env.{name}"]
    assert "visible GPUs belong to placement" in message and value == "'0,1'"


def test_removed_variables_name_the_replacement():
    found = problems({"VLLM_ATTENTION_BACKEND": "ROCM_ATTN", "VLLM_USE_TRITON_FLASH_ATTN": "0"})
    assert "removed after vLLM 0.14.0" in found["vllm_env.VLLM_ATTENTION_BACKEND"][0]
    assert "use attention_backend=<NAME> (--attention-backend NAME)" in found["vllm_env.VLLM_ATTENTION_BACKEND"][0]
    assert "removed in vLLM 0.11.1; use attention_backend" in found["vllm_env.VLLM_USE_TRITON_FLASH_ATTN"][0]


def test_table_rendered_variable_only_through_its_setting():
    message, _ = problems({"VLLM_ROCM_USE_AITER": "0"})["vllm_env.VLLM_ROCM_USE_AITER"]
    assert message == "rendered from setting aiter; set that instead"


def test_env_set_variable_owned_by_the_set():
    message, _ = problems({"HSA_ENABLE_SDMA": "0"})["vllm_env.HSA_ENABLE_SDMA"]
    assert "rendered by env_sets ['mi300x-production']" in message


def test_scratch_reclaim_off_refused_at_tp8():
    message, _ = problems({"HSA_NO_SCRATCH_RECLAIM": "0"}, "deepseek-r1")["vllm_env.HSA_NO_SCRATCH_RECLAIM"]
    assert "tensor_parallel_size 8 needs HSA_NO_SCRATCH_RECLAIM=1" in message


def test_validation_assumes_no_architecture_and_placement_refuses_on_gfx942(tmp_path):
    # FP4 BMM crashes on gfx942 (no FP4) and is right on gfx950: validation, which knows no host,
    # accepts it; the host's architecture decides, at every vLLM version (vLLM issue 34641).
    (tmp_path / "ds.yml").write_text(
        (PROFILES / "deepseek-r1.yml").read_text().replace("name: deepseek-r1", "name: ds")
        .replace('vllm_version: "0.33.0"', 'vllm_version: "0.16.0"')
    )  # fmt: skip
    config = host_config({"vllm_profile": "ds", "vllm_env": {FP4: "1"}}, tmp_path)
    (line,) = envpolicy.arch_problems(config.profile, config.settings.vllm_env, "gfx942")
    assert line.startswith(f"vllm_env {FP4}=1: on gfx942 with vLLM 0.16.0 it must be 0") and "34641" in line
    assert envpolicy.arch_problems(config.profile, config.settings.vllm_env, "gfx950") == []
    assert envpolicy.arch_problems(config.profile, config.settings.vllm_env, None) == []
    extra = config.profile.model_copy(update={"extra_env": {FP4: "1"}, "vllm_version": "0.33.0"})
    (line,) = envpolicy.arch_problems(extra, {}, "gfx942")
    assert line.startswith(f"extra_env {FP4}=1: on gfx942 with vLLM 0.33.0 it must be 0")


def test_token_value_refused_and_masked():
    token = "hf_" + "aB3" * 12
    found = problems({"MY_VAR": token, "HF_TOKEN": "x"})
    for key in ("vllm_env.MY_VAR", "vllm_env.HF_TOKEN"):
        message, value = found[key]
        assert "put it in vllm_secret_env" in message and value == "*MASKED*"
    assert token not in str(found)


def test_ordinary_variables_pass():
    config = host_config(
        {"vllm_profile": "llama-3.3-70b", "vllm_env": {"NCCL_DEBUG": "WARN", "HF_HUB_VERBOSITY": "info"}}
    )
    assert config.settings.vllm_env["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize("name", ["HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HOME", "HF_MODULES_CACHE"])
def test_the_hugging_face_cache_variables_are_rocmfleets(name):
    """The staged cache is mounted read-only and read offline: vllm_env may not move it or go online."""
    with pytest.raises(ConfigError) as err:
        host_config({"vllm_profile": "llama-3.3-70b", "vllm_env": {name: "0"}})
    (problem,) = err.value.problems
    assert problem.key == f"vllm_env.{name}" and problem.value == "'0'"
    assert "staged once per host and mounted read-only" in problem.message and "vllm_hf_cache_dir" in problem.message


def test_a_hub_endpoint_in_the_instances_environment_points_to_vllm_hf_endpoint():
    """The instances are offline: HF_ENDPOINT there would do nothing, while the staging went to
    the Hub itself; and a user:password in it is masked in the error."""
    with pytest.raises(ConfigError) as err:
        host_config({"vllm_profile": "llama-3.3-70b", "vllm_env": {"HF_ENDPOINT": "https://u:s3cr3t@mirror.example"}})
    (problem,) = err.value.problems
    assert problem.key == "vllm_env.HF_ENDPOINT" and "set vllm_hf_endpoint instead" in problem.message
    assert "s3cr3t" not in str(err.value) and problem.value == "'https://*MASKED*@mirror.example'"


def test_extra_env_follows_the_same_rules(tmp_path):
    text = (PROFILES / "llama-3.3-70b.yml").read_text().replace("name: llama-3.3-70b", "name: bad")
    (tmp_path / "bad.yml").write_text(text + "extra_env:\n  HIP_VISIBLE_DEVICES: '0'\n  HSA_ENABLE_SDMA: '0'\n")
    with pytest.raises(ProfileError) as info:
        load_profile(tmp_path / "bad.yml")
    assert "extra_env HIP_VISIBLE_DEVICES: visible GPUs belong to placement" in str(info.value)
    assert "extra_env HSA_ENABLE_SDMA: rendered by env_sets" in str(info.value)


def test_unknown_env_set(tmp_path):
    text = LAB_PROFILE.read_text().replace("name: lab-tiny-llama", "name: x")
    (tmp_path / "x.yml").write_text(text + "env_sets: [mi300x-prod]\n")
    with pytest.raises(ProfileError, match="unknown set 'mi300x-prod'; known: mi300x-production"):
        load_profile(tmp_path / "x.yml")


def test_engine_ready_timeout_is_rendered_only_for_vllm_that_reads_it():
    # vllm-0.14.0 vllm/envs.py has VLLM_ENGINE_READY_TIMEOUT_S; 0.13.0 waits a fixed 600 s
    assert envpolicy.ready_timeout_env("0.14.0", 3600) == {"VLLM_ENGINE_READY_TIMEOUT_S": "3600"}
    assert envpolicy.ready_timeout_env("0.33.0", 1800) == {"VLLM_ENGINE_READY_TIMEOUT_S": "1800"}
    assert envpolicy.ready_timeout_env("0.13.0", 3600) == {}
    assert envpolicy.ready_timeout_env("0.9.2", 3600) == {}
    assert envpolicy.ready_timeout_env("0.33.0", None) == {}


def test_engine_ready_timeout_follows_the_setting_and_is_refused_in_vllm_env(lab_data):
    lab_data["vllm_ready_timeout_s"] = 5400
    config = host_config(lab_data)
    placement = vllmplace.placements(vllm_settings(config), TOPOLOGY)[config.instances()[0].name]
    assert vllm.container_env(vllm_settings(config), placement)["VLLM_ENGINE_READY_TIMEOUT_S"] == "5400"
    lab_data["vllm_env"] = {"VLLM_ENGINE_READY_TIMEOUT_S": "60"}
    with pytest.raises(ConfigError) as exc:
        host_config(lab_data)
    assert "vllm_env.VLLM_ENGINE_READY_TIMEOUT_S: rendered from vllm_ready_timeout_s" in str(exc.value)
