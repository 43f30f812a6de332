"""Memory fit before deploy: weights/TP + KV cache of one max_model_len sequence against GPU memory x
gpu_memory_utilization. Numbers worked by hand in the comments."""

from __future__ import annotations

import pytest
import yaml

from rocmfleet.config.profiles import Profile, ProfileError, load_profile, load_profiles
from rocmfleet.domain import memfit
from tests.unit.conftest import every_profile

DIGEST = "sha256:" + "0" * 64

#: A 128B-parameter dense model in BF16: 128e9 x 2 bytes / 2**30 = 238.42 GiB; 88 layers, 8 KV
#: heads of 128 (GQA), 96 attention heads.
BIG = {
    "name": "big-128b",
    "model": "example/big-128b",
    "revision": "0123456789abcdef0123456789abcdef01234567",
    "served_model_name": "big",
    "image": {"repository": "docker.io/vllm/vllm-openai-rocm", "tag": "v0.33.0", "digest": DIGEST},
    "vllm_version": "0.33.0",
    "base_port": 8000,
    "attention_heads": 96,
    "max_model_len": 8192,
    "dtype": "bfloat16",
    "model_memory": {"weights_gib": 238.42, "num_hidden_layers": 88, "num_key_value_heads": 8, "head_dim": 128},
}


def big(tp: int, **changes) -> dict:
    return {**BIG, "tensor_parallel_size": tp, "instances_per_host": 8 // tp, "gpus_per_instance": tp, **changes}


def write(tmp_path, data: dict):
    path = tmp_path / f"{data['name']}.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_128b_bf16_refused_at_tp1_with_the_numbers(tmp_path):
    # KV per token at TP 1: 88 layers x 2 x 8 heads x 128 x 2 bytes = 360448; x 8192 tokens = 2.75 GiB.
    # 238.42 + 2.75 = 241.2 GiB > 192 x 0.9 (vLLM's default utilization) = 172.8 GiB.
    with pytest.raises(ProfileError) as info:
        load_profile(write(tmp_path, big(1)))
    assert (
        "model_memory: does not fit at tensor_parallel_size 1: each GPU needs 238.4 GiB of weights "
        "(238.42 GiB / TP 1) + 2.75 GiB of KV cache for one sequence of 8192 tokens (360448 bytes/token) = "
        "241.2 GiB, more than 192 GiB x gpu_memory_utilization 0.9 = 172.8 GiB; the smallest "
        "tensor_parallel_size that fits is 2"
    ) in str(info.value)


@pytest.mark.parametrize("tp", [2, 4])
def test_128b_bf16_accepted_at_tp2_and_tp4(tmp_path, tp):
    profile = load_profile(write(tmp_path, big(tp)))
    result = memfit.fit(profile)
    # TP 2: 119.2 GiB + 4 KV heads -> 1.375 GiB; TP 4: 59.6 GiB + 0.69 GiB.
    assert result.fits
    assert result.weights_gib == pytest.approx(238.42 / tp)
    assert result.kv_gib == pytest.approx(2.75 / tp)


def test_cpx_partition_in_validation_has_the_memory_of_the_largest_known_partition(tmp_path):
    # Validation knows no part, so a CPX partition gets the most any known part gives it: an MI308X's
    # 192 GiB over 4 = 48 GiB (an MI300X's is 24, checked at placement: test_parts.py). Llama 3.3 70B
    # at TP 1: 131.4 GiB of weights; from TP 4 it fits (32.9 + 0.31 GiB at 8 KV heads / 4 = 2 heads:
    # 80 x 2 x 2 x 128 x 1 byte x 8192 = 0.3125 GiB), within 48 x 0.92 = 44.2.
    llama = load_profiles()["llama-3.3-70b"]
    cpx = Profile.model_validate(
        {**llama.model_dump(exclude={"model_memory"}), "compute_partition": "CPX", "instances_per_host": 1,
         "gpus_per_instance": 8, "tensor_parallel_size": 8}
    )  # fmt: skip
    cpx = cpx.model_copy(update={"model_memory": llama.model_memory, "tensor_parallel_size": 1})
    (line,) = memfit.problems(cpx)
    assert (
        "more than 48 GiB (one CPX partition of gpu_memory_gib 192 GiB, split 4 ways as on an MI308X, the fewest of "
        "any known part) x gpu_memory_utilization 0.92 = 44.2 GiB" in line
    )
    assert line.endswith(
        "the smallest tensor_parallel_size that fits is 4; for a part with more memory, set gpu_memory_gib to it "
        "(MI325X 256, MI350X 288, MI355X 288)"
    )
    (line,) = memfit.problems(cpx, 24.0, "one CPX partition of an MI300X's 192 GiB")
    assert "more than 24 GiB (one CPX partition of an MI300X's 192 GiB) x gpu_memory_utilization 0.92" in line
    assert line.endswith("the smallest tensor_parallel_size that fits is 8")


def test_mla_cache_is_not_split_by_tp():
    # DeepSeek: 61 layers x (512 + 64) x 2 bytes = 70272 bytes per token at every TP.
    mem = load_profiles()["deepseek-r1"].model_memory
    assert mem.kv_bytes_per_token(1, 2) == mem.kv_bytes_per_token(8, 2) == 70272


def test_kv_heads_replicated_when_fewer_than_tp():
    mem = memfit.ModelMemory(weights_gib=1, num_hidden_layers=1, num_key_value_heads=2, head_dim=64)
    assert mem.kv_bytes_per_token(8, 1) == 2 * 1 * 64  # max(1, 2 // 8) = 1 head per GPU


def test_shape_is_one_or_the_other():
    with pytest.raises(ValueError, match="give either num_key_value_heads and head_dim"):
        memfit.ModelMemory(weights_gib=1, num_hidden_layers=1, num_key_value_heads=8)


def test_shipped_profiles_with_model_memory_fit():
    for profile in every_profile().values():
        assert memfit.problems(profile) == [], profile.name
