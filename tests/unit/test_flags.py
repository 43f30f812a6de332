"""The flag table and its renderer (rocmfleet/domain/flags.py); facts from ../shared/reference/mi300x.md §4."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from packaging.version import Version
from pydantic import ValidationError

from rocmfleet.domain.flagrender import render
from rocmfleet.domain.flags import ANY, FLAGS, REMOVED, FlagError, ServingSettings

#: Every release the bounds were read from, plus versions between them.
VERSIONS = [
    "0.9.0", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.1.1", "0.11.0", "0.11.1", "0.11.2",
    "0.12.0", "0.13.0", "0.14.0", "0.20.0", "0.33.0", "0.33.7",
]  # fmt: skip


def problems(settings: ServingSettings, version: str) -> list[str]:
    with pytest.raises(FlagError) as err:
        render(settings, version)
    return err.value.problems


def sample_values(setting: str) -> list[object]:
    """Every value a Literal/bool setting takes; one value for numeric ones."""
    annotation = ServingSettings.model_fields[setting].annotation
    values = [v for arg in get_args(annotation) for v in (get_args(arg) or [arg]) if v is not type(None)]
    if bool in values:
        return [True, False]
    return [v for v in values if not isinstance(v, type)] or [1]


def test_each_row_has_a_source_and_a_known_setting():
    for flag in FLAGS:
        assert flag.setting in ServingSettings.model_fields, flag
        assert flag.source, flag
        assert flag.kind == "default" or flag.name, flag
    for removed in REMOVED:
        assert removed.source and removed.use and Version(removed.gone), removed


@pytest.mark.parametrize("version", VERSIONS)
def test_at_most_one_row_renders_a_setting_value_at_a_version(version):
    for setting in {f.setting for f in FLAGS}:
        for value in sample_values(setting):
            rows = [f for f in FLAGS if f.setting == setting and f.matches(value) and f.applies(Version(version))]
            assert len(rows) <= 1, (setting, value, version, rows)


def test_plain_serving_shape_renders_the_same_flags_everywhere():
    settings = ServingSettings(
        tensor_parallel_size=2,
        max_model_len=4096,
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="fp8",
        dtype="bfloat16",
        quantization="fp8",
        block_size=16,
        trust_remote_code=True,
    )
    expected = [
        "--tensor-parallel-size", "2", "--max-model-len", "4096", "--max-num-seqs", "64",
        "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8",
        "--dtype", "bfloat16", "--quantization", "fp8", "--block-size", "16", "--trust-remote-code",
    ]  # fmt: skip
    for version in VERSIONS:
        assert render(settings, version).args == expected
        assert render(settings, version).env == {}


def test_aiter_switches_render_as_1_and_0():
    settings = ServingSettings(
        aiter=True, aiter_mha=False, aiter_mla=True, aiter_moe=True, aiter_linear=True, aiter_rmsnorm=False
    )
    assert render(settings, "0.33.0").env == {
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_ROCM_USE_AITER_RMSNORM": "0",
        "VLLM_ROCM_USE_AITER_MHA": "0",
        "VLLM_ROCM_USE_AITER_MLA": "1",
        "VLLM_ROCM_USE_AITER_MOE": "1",
        "VLLM_ROCM_USE_AITER_LINEAR": "1",
    }
    assert render(settings, "0.9.2").env == render(settings, "0.33.0").env


# Boundaries, each read from the sdists on both sides (flags.py docstrings give file and line).


def test_prefill_decode_attention_env_until_0_12_then_attention_backend_flag():
    settings = ServingSettings(aiter=True, aiter_mha=False, attention_backend="ROCM_ATTN")
    assert render(settings, "0.12.0").env["VLLM_V1_USE_PREFILL_DECODE_ATTENTION"] == "1"
    assert render(settings, "0.12.0").args == []
    assert "VLLM_V1_USE_PREFILL_DECODE_ATTENTION" not in render(settings, "0.13.0").env
    assert render(settings, "0.13.0").args == ["--attention-backend", "ROCM_ATTN"]


def test_full_cuda_graph_until_0_10_0_then_cudagraph_mode():
    settings = ServingSettings(cudagraph_mode="FULL")
    assert render(settings, "0.10.0").args == ["--compilation-config", '{"full_cuda_graph": true}']
    assert render(settings, "0.10.1").args == ["--compilation-config", '{"cudagraph_mode": "FULL"}']
    assert render(ServingSettings(cudagraph_mode="FULL_DECODE_ONLY"), "0.33.0").args == [
        "--compilation-config",
        '{"cudagraph_mode": "FULL_DECODE_ONLY"}',
    ]


def test_vllm_use_v1_until_0_11_0_then_nothing():
    assert render(ServingSettings(use_v1=True), "0.11.0").env == {"VLLM_USE_V1": "1"}
    assert render(ServingSettings(use_v1=False), "0.11.0").env == {"VLLM_USE_V1": "0"}
    assert render(ServingSettings(use_v1=True), "0.11.1") == render(ServingSettings(), "0.11.1")


def test_request_logging_flags_follow_the_default_that_flipped_in_0_10_1():
    assert render(ServingSettings(disable_log_requests=True), "0.10.0").args == ["--disable-log-requests"]
    assert render(ServingSettings(disable_log_requests=True), "0.10.1").args == []
    assert render(ServingSettings(disable_log_requests=False), "0.10.0").args == []
    assert render(ServingSettings(disable_log_requests=False), "0.33.0").args == ["--enable-log-requests"]


def test_aiter_mla_backend_before_0_13_is_the_env_and_needs_block_size_1():
    settings = ServingSettings(aiter=True, attention_backend="ROCM_AITER_MLA", block_size=1)
    assert render(settings, "0.9.2").env == {"VLLM_ROCM_USE_AITER": "1", "VLLM_ATTENTION_BACKEND": "ROCM_AITER_MLA"}
    assert render(settings, "0.33.0").args == ["--block-size", "1", "--attention-backend", "ROCM_AITER_MLA"]
    (problem,) = problems(settings.model_copy(update={"block_size": 16}), "0.9.2")
    assert "attention_backend=ROCM_AITER_MLA" in problem and "0.9.2" in problem and "block_size=1" in problem


def test_prefill_decode_before_0_13_needs_aiter_mha_off_when_aiter_is_on():
    settings = ServingSettings(aiter=True, attention_backend="ROCM_ATTN")
    (problem,) = problems(settings, "0.9.2")
    assert "attention_backend=ROCM_ATTN" in problem and "vLLM 0.9.2" in problem and "aiter_mha=false" in problem
    assert render(settings, "0.33.0").args == ["--attention-backend", "ROCM_ATTN"]
    assert render(ServingSettings(attention_backend="ROCM_ATTN"), "0.9.2").env == {
        "VLLM_V1_USE_PREFILL_DECODE_ATTENTION": "1"
    }


def test_compilation_config_json_is_one_deterministic_line():
    rendered = render(ServingSettings(cudagraph_mode="FULL", trust_remote_code=True), "0.9.2")
    assert rendered.args == ["--compilation-config", '{"full_cuda_graph": true}', "--trust-remote-code"]
    assert json.loads(rendered.args[1]) == json.loads('{"full_cuda_graph":true}')  # AMD's spelling


# Refusals: the setting, the version and the replacement, all problems at once.


def test_v0_engine_is_refused_once_removed_with_no_replacement():
    (problem,) = problems(ServingSettings(use_v1=False), "0.33.0")
    assert problem == (
        "use_v1=false: vLLM 0.33.0 does not know it: VLLM_USE_V1=0 was removed in vLLM 0.11.1; "
        "no replacement: V0 is gone and V1 is the only engine"
    )


def test_settings_newer_than_the_target_are_refused_naming_where_they_start():
    found = problems(
        ServingSettings(aiter_mha=False, cudagraph_mode="PIECEWISE", attention_backend="ROCM_AITER_UNIFIED_ATTN"),
        "0.9.1",
    )
    assert found == [  # in the order of ServingSettings' fields
        "attention_backend=ROCM_AITER_UNIFIED_ATTN: vLLM 0.9.1 does not know it: "
        "--attention-backend ROCM_AITER_UNIFIED_ATTN was added in vLLM 0.13.0",
        'cudagraph_mode=PIECEWISE: vLLM 0.9.1 does not know it: --compilation-config {"cudagraph_mode": '
        '"PIECEWISE"} was added in vLLM 0.10.1; before it only cudagraph_mode=FULL renders (full_cuda_graph)',
        "aiter_mha=false: vLLM 0.9.1 does not know it: VLLM_ROCM_USE_AITER_MHA=0 was added in vLLM 0.9.2",
    ]


def test_backends_new_in_0_33_are_refused_for_0_14():
    (problem,) = problems(ServingSettings(attention_backend="TURBOQUANT"), "0.14.0")
    assert "--attention-backend TURBOQUANT was added in vLLM 0.33.0" in problem
    assert render(ServingSettings(attention_backend="TURBOQUANT"), "0.33.0").args == [
        "--attention-backend",
        "TURBOQUANT",
    ]


def test_removed_env_var_in_extra_env_names_version_and_replacement():
    (problem,) = problems(ServingSettings(extra_env={"VLLM_V1_USE_PREFILL_DECODE_ATTENTION": "1"}), "0.33.0")
    assert problem == (
        "extra_env VLLM_V1_USE_PREFILL_DECODE_ATTENTION: vLLM 0.33.0 does not know it: "
        "VLLM_V1_USE_PREFILL_DECODE_ATTENTION was removed after vLLM 0.14.0 (deprecated there; absent in 0.33.0); "
        "use attention_backend=ROCM_ATTN (--attention-backend ROCM_ATTN)"
    )


def test_removed_flag_in_extra_args_names_version_and_replacement():
    found = problems(ServingSettings(extra_args=["--disable-log-requests", "--swap-space", "4"]), "0.20.0")
    assert found[0].startswith("extra_args --disable-log-requests: vLLM 0.20.0 does not know it: ")
    assert found[0].endswith("use disable_log_requests=true (the default from 0.10.1; --enable-log-requests turns "
                             "logging on)")  # fmt: skip
    assert found[1].startswith("extra_args --swap-space: vLLM 0.20.0 does not know it: ")
    assert found[1].endswith("; no replacement")
    assert render(ServingSettings(extra_args=["--swap-space", "4"]), "0.9.2").args == ["--swap-space", "4"]
    # 0.33.0's parser pairs every --enable-x with --disable-x: --disable-log-requests is a flag again,
    # and the setting that renders it owns it
    assert problems(ServingSettings(extra_args=["--disable-log-requests"]), "0.33.0") == [
        "extra_args --disable-log-requests: rendered from setting disable_log_requests; set that instead"
    ]


def test_extra_env_and_args_may_not_bypass_the_table():
    found = problems(
        ServingSettings(
            extra_env={"VLLM_ROCM_USE_AITER": "1", "VLLM_ATTENTION_BACKEND": "ROCM_AITER_MLA"},
            extra_args=["-tp=2", "--compilation-config", "{}", "-O3", "--no-enable-log-requests"],
        ),
        "0.9.2",
    )
    assert found == [
        "extra_env VLLM_ROCM_USE_AITER: rendered from setting aiter; set that instead",
        "extra_env VLLM_ATTENTION_BACKEND: rendered from setting attention_backend; set that instead",
        "extra_args -tp: rendered from setting tensor_parallel_size; set that instead",
        "extra_args --compilation-config: rendered from setting cudagraph_mode; set that instead",
        "extra_args -O3: -O meant --compilation-config up to vLLM 0.11.0 and means --optimization-level in 0.13+ "
        "(reference §4.4): write the long form (--optimization-level N), or set cudagraph_mode for CUDA graphs",
        "extra_args --no-enable-log-requests: rendered from setting disable_log_requests; set that instead",
    ]


def test_other_extra_env_and_args_pass_through_after_the_table():
    settings = ServingSettings(tensor_parallel_size=8, extra_env={"HF_HUB_OFFLINE": "1"}, extra_args=["--seed", "0"])
    assert render(settings, "0.33.0").env == {"HF_HUB_OFFLINE": "1"}
    assert render(settings, "0.33.0").args == ["--tensor-parallel-size", "8", "--seed", "0"]


def test_all_problems_are_reported_together():
    found = problems(
        ServingSettings(use_v1=False, aiter=True, attention_backend="ROCM_AITER_FA", extra_env={"VLLM_USE_V1": "0"}),
        "0.33.0",
    )
    assert [p.split(":")[0] for p in found] == ["use_v1=false", "extra_env VLLM_USE_V1"]
    assert "was removed in vLLM 0.11.1" in found[1]


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("0.8.5", "vLLM 0.8.5 is older than the oldest version the flag table knows (0.9.0)"),
        ("0.34.0", "vLLM 0.34.0 is newer than the newest version the flag table knows (0.33.x)"),
        ("0.34.0rc1", "vLLM 0.34.0rc1 is newer than the newest version the flag table knows (0.33.x)"),
        ("latest", "not a vLLM version: 'latest'"),
    ],
)
def test_versions_outside_the_table_are_refused(version, message):
    (problem,) = problems(ServingSettings(), version)
    assert problem.startswith(message)


def test_versions_inside_the_table_render():
    for version in ["0.9.0", "0.33.9", "0.33.0+rocm7.2", "v0.14.0"]:
        assert render(ServingSettings(tensor_parallel_size=1), version).args == ["--tensor-parallel-size", "1"]


def test_settings_are_validated():
    with pytest.raises(ValidationError, match="attention_backend"):
        ServingSettings(attention_backend="FLASH_ATTN")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        ServingSettings(enable_chunked_prefill=True)
    with pytest.raises(ValidationError, match="gpu_memory_utilization"):
        ServingSettings(gpu_memory_utilization=0)


def test_any_is_the_wildcard_for_numeric_settings():
    assert {f.setting for f in FLAGS if f.value == ANY} >= {"tensor_parallel_size", "aiter", "cudagraph_mode"}
