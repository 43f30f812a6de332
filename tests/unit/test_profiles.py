"""Shipped model profiles render AMD's published configurations (rocmfleet/config/profiles.py, flags.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from rocmfleet.config.profiles import PROFILES_DIR, Profile, ProfileError, load_profile, load_profiles
from tests.unit.conftest import LAB_PROFILE, every_profile

# AMD's published Llama 4 command: ROCm blog "Accelerated LLM Inference on AMD Instinct GPUs with
# vLLM 0.9.x and ROCm" (28 Jun 2025), "Step 3: Run the vLLM Server":
#   VLLM_USE_V1=1 VLLM_ROCM_USE_AITER=1 VLLM_ROCM_USE_AITER_RMSNORM=0 VLLM_ROCM_USE_AITER_MHA=0
#   VLLM_V1_USE_PREFILL_DECODE_ATTENTION=1 vllm serve $MODEL --tensor-parallel-size 8
#   --max-model-len 32768 --max-num-seqs 1024 --max-num-batched-tokens 32768 --disable-log-requests
#   --compilation-config '{"full_cuda_graph":true}' --trust-remote-code
# (the JSON is rendered with json.dumps spacing; test_llama_4_json_is_amds checks it parses equal).
LLAMA4_092_ENV = {
    "VLLM_USE_V1": "1",
    "VLLM_ROCM_USE_AITER": "1",
    "VLLM_ROCM_USE_AITER_RMSNORM": "0",
    "VLLM_ROCM_USE_AITER_MHA": "0",
    "VLLM_V1_USE_PREFILL_DECODE_ATTENTION": "1",
}
LLAMA4_092_ARGS = [
    "--tensor-parallel-size", "8", "--max-model-len", "32768", "--max-num-seqs", "1024",
    "--max-num-batched-tokens", "32768", "--disable-log-requests",
    "--compilation-config", '{"full_cuda_graph": true}', "--trust-remote-code",
]  # fmt: skip

# DeepSeek-V3/R1: AMD "vLLM V1 performance optimization" [A6], AITER MLA requirements:
#   VLLM_ROCM_USE_AITER=1 vllm serve deepseek-ai/DeepSeek-R1 --block-size 1 --tensor-parallel-size 8
# with the feature switches named explicitly: VLLM_ROCM_USE_AITER_MLA=1 ([A6]) and
# VLLM_ROCM_USE_AITER_LINEAR=1 (block-scaled FP8 GEMM, vLLM 0.9.x blog).
DEEPSEEK_ENV = {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MLA": "1", "VLLM_ROCM_USE_AITER_LINEAR": "1"}
DEEPSEEK_ARGS = ["--tensor-parallel-size", "8", "--block-size", "1"]

# Qwen3 MoE: AITER fused MoE, VLLM_ROCM_USE_AITER=1 VLLM_ROCM_USE_AITER_MOE=1 (vLLM 0.9.x blog,
# "Enabling AITER Fused MoE Kernel"; [A6] "AITER MoE requirements"); 235B-A22B at TP 8 (issue 5).
QWEN3_ENV = {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MOE": "1"}

#: name -> (vLLM version the profile names, env, vllm serve args after the model), by hand.
PUBLISHED: dict[str, tuple[str, dict[str, str], list[str]]] = {
    "llama-4-scout": ("0.9.2", LLAMA4_092_ENV, LLAMA4_092_ARGS),
    "llama-4-maverick": ("0.9.2", LLAMA4_092_ENV, LLAMA4_092_ARGS),
    # Issue 5: bf16, TP 1, fp8 KV cache, gpu-memory-utilization 0.92, max-model-len 8192;
    # [A6]: "VLLM_ROCM_USE_AITER=1 vllm serve meta-llama/Llama-3.3-70B-Instruct"; reference §1.4
    # [P1] adds --trust-remote-code (its environment set: tests/unit/test_envpolicy.py).
    "llama-3.3-70b": (
        "0.33.0",
        {"VLLM_ROCM_USE_AITER": "1"},
        [
            "--tensor-parallel-size",
            "1",
            "--max-model-len",
            "8192",
            "--gpu-memory-utilization",
            "0.92",
            "--kv-cache-dtype",
            "fp8",
            "--dtype",
            "bfloat16",
            "--trust-remote-code",
        ],
    ),  # fmt: skip
    "deepseek-r1": ("0.33.0", DEEPSEEK_ENV, DEEPSEEK_ARGS),
    "deepseek-v3": ("0.33.0", DEEPSEEK_ENV, DEEPSEEK_ARGS),
    "qwen3-235b-a22b": ("0.33.0", QWEN3_ENV, ["--tensor-parallel-size", "8"]),
    "qwen3-30b-a3b": ("0.33.0", QWEN3_ENV, ["--tensor-parallel-size", "1"]),
}


@pytest.fixture(scope="module")
def profiles() -> dict[str, Profile]:
    return every_profile()


#: Profiles that serve the lab's model (tests/lab), not a configuration AMD published.
LAB_PROFILES = {
    "lab-tiny-llama": (
        "0.32.0",
        {"VLLM_USE_AOT_COMPILE": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
        ["--tensor-parallel-size", "1", "--max-model-len", "2048", "--max-num-seqs", "8", "--dtype", "bfloat16"],
    )
}


def test_every_shipped_profile_has_its_published_configuration(profiles):
    assert sorted(profiles) == sorted({**PUBLISHED, **LAB_PROFILES})


def test_lab_profile_renders_plain_flags_for_the_cpu_build(profiles):
    version, env, args = LAB_PROFILES["lab-tiny-llama"]
    rendered = profiles["lab-tiny-llama"].render()
    assert (profiles["lab-tiny-llama"].vllm_version, rendered.env, rendered.args) == (version, env, args)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_profile_renders_the_published_configuration(profiles, name):
    version, env, args = PUBLISHED[name]
    profile = profiles[name]
    assert profile.vllm_version == version
    rendered = profile.render()
    assert rendered.env == env
    assert rendered.args == args


def test_llama_4_json_is_amds(profiles):
    args = profiles["llama-4-scout"].render().args
    assert json.loads(args[args.index("--compilation-config") + 1]) == json.loads('{"full_cuda_graph":true}')


@pytest.mark.parametrize("name", ["llama-4-scout", "llama-4-maverick"])
def test_llama_4_for_0_33_uses_the_replacements(profiles, name):
    # Reference §4.5: VLLM_USE_V1 gone (V1 only); VLLM_V1_USE_PREFILL_DECODE_ATTENTION=1 ->
    # --attention-backend ROCM_ATTN; full_cuda_graph -> cudagraph_mode FULL; --disable-log-requests
    # gone (logging is off by default). The AITER switches still exist (§4.1, §4.2).
    rendered = profiles[name].render("0.33.0")
    assert rendered.env == {
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_ROCM_USE_AITER_RMSNORM": "0",
        "VLLM_ROCM_USE_AITER_MHA": "0",
    }
    assert rendered.args == [
        "--tensor-parallel-size", "8", "--max-model-len", "32768", "--max-num-seqs", "1024",
        "--max-num-batched-tokens", "32768", "--attention-backend", "ROCM_ATTN",
        "--compilation-config", '{"cudagraph_mode": "FULL"}', "--trust-remote-code",
    ]  # fmt: skip


def test_llama_4_differs_between_0_9_and_0_33_exactly_as_the_reference_says(profiles):
    old, new = profiles["llama-4-scout"].render("0.9.2"), profiles["llama-4-scout"].render("0.33.0")
    assert set(old.env) - set(new.env) == {"VLLM_USE_V1", "VLLM_V1_USE_PREFILL_DECODE_ATTENTION"}
    assert set(new.env) - set(old.env) == set()
    assert [a for a in old.args if a not in new.args] == ["--disable-log-requests", '{"full_cuda_graph": true}']
    assert [a for a in new.args if a not in old.args] == [
        "--attention-backend",
        "ROCM_ATTN",
        '{"cudagraph_mode": "FULL"}',
    ]


@pytest.mark.parametrize("name", ["deepseek-r1", "qwen3-235b-a22b", "llama-3.3-70b"])
def test_version_neutral_profiles_render_the_same_for_0_9_2(profiles, name):
    assert profiles[name].render("0.9.2") == profiles[name].render()


def test_profile_shape_and_image(profiles):
    llama = profiles["llama-3.3-70b"]
    assert llama.ports == [8000 + i for i in range(8)]
    assert llama.image.reference == f"docker.io/vllm/vllm-openai-rocm:v0.33.0@sha256:{'0' * 64}"
    assert profiles["llama-4-scout"].image.reference.startswith(
        "docker.io/rocm/vllm-dev:nightly_0624_rc2_0624_rc2_20250620@sha256:"
    )


def test_placeholder_digests_are_marked_in_the_yaml():
    for path in [*PROFILES_DIR.glob("*.yml"), LAB_PROFILE]:
        text = path.read_text()
        if "sha256:" + "0" * 64 in text:
            assert "PLACEHOLDER digest, to replace" in text, path


# Bad values.


@pytest.fixture
def data() -> dict[str, Any]:
    return yaml.safe_load((PROFILES_DIR / "llama-4-scout.yml").read_text())


def errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as err:
        Profile.model_validate(data)
    return [(".".join(map(str, e["loc"])), e["msg"].removeprefix("Value error, ")) for e in err.value.errors()]


@pytest.mark.parametrize(
    ("key", "value", "loc", "message"),
    [
        ("gpu_memory_utilization", 0, "gpu_memory_utilization", "greater than 0"),
        ("gpu_memory_utilization", 1.5, "gpu_memory_utilization", "less than or equal to 1"),
        ("kv_cache_dtype", "int8", "kv_cache_dtype", "'auto', 'fp8', 'fp8_e4m3' or 'fp8_e5m2'"),
        ("quantization", "bitsandbytes", "quantization", "Input should be 'awq'"),
        ("vllm_version", "0.8.5", "vllm_version", "older than the oldest version the flag table knows (0.9.0)"),
        ("vllm_version", "0.34.0", "vllm_version", "newer than the newest version the flag table knows (0.33.x)"),
        ("tensor_parallel_size", 0, "tensor_parallel_size", "greater than or equal to 1"),
        ("base_port", 70000, "base_port", "less than or equal to 65535"),
        ("attention_backend", "FLASH_ATTN", "attention_backend", "Input should be 'ROCM_ATTN'"),
        ("max_num_seqs", "many", "max_num_seqs", "valid integer"),
        ("enable_prefix_caching", True, "enable_prefix_caching", "Extra inputs are not permitted"),
        # a newline would add a line to the unit file (Description=, --served-model-name)
        ("served_model_name", "x\nExecStartPost=/bin/touch /tmp/p", "served_model_name", "should match pattern"),
        ("model", "org/model\r", "model", "should match pattern"),
        # a known answer that any answer matches checks nothing
        ("ready_probe", {"prompt": "2+2=", "expect_regex": "x*"}, "ready_probe.expect_regex", "matches an empty"),
        (
            "ready_probe",
            {"prompt": "2+2=", "expect_regex": "4", "chat_expect_regex": "(?i)"},
            "ready_probe.chat_expect_regex",
            "matches an empty",
        ),
    ],
)
def test_bad_values_are_refused(data, key, value, loc, message):
    data[key] = value
    ((got_loc, got_message),) = errors(data)
    assert got_loc == loc and message in got_message


def test_bad_image_digest_is_refused(data):
    data["image"]["digest"] = "sha256:1234"
    digest = "not an image digest: sha256: and 64 lower-case hex digits (skopeo inspect docker://IMAGE:TAG)"
    assert errors(data) == [("image.digest", digest)]


def test_impossible_shapes_are_refused(data):
    data.update(gpus_per_instance=4, attention_heads=36)
    ((_, message),) = errors(data)
    assert "instance 0: tensor_parallel_size 8 exceeds its 4 GPU(s)" in message
    assert "attention_heads 36 is not divisible by tensor_parallel_size 8" in message


def test_gpus_are_given_one_way_and_never_twice(data):
    data["instance_gpus"] = [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert "give exactly one of gpus_per_instance and instance_gpus" in errors(data)[0][1]
    del data["gpus_per_instance"]
    data.update(instances_per_host=2, tensor_parallel_size=4, instance_gpus=[[0, 1, 2, 3], [3, 4, 5, 6]])
    assert "a GPU is given to two instances" in errors(data)[0][1]
    data["instance_gpus"] = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert Profile.model_validate(data).instance_gpus == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_profile_must_render_for_its_own_vllm_version(data):
    data["vllm_version"] = "0.9.1"  # before VLLM_ROCM_USE_AITER_MHA and the prefill-decode switch rendering
    ((loc, message),) = errors(data)
    assert loc == ""
    assert "does not render for vLLM 0.9.1: aiter_mha=false: vLLM 0.9.1 does not know it" in message


def test_load_profile_names_the_file_and_each_problem(tmp_path, data):
    data["gpu_memory_utilization"] = 2
    data["image"]["tag"] = "bad tag"
    path = tmp_path / "llama-4-scout.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value).splitlines() == [
        f"{path}: invalid profile (2 problem(s)):",
        "  gpu_memory_utilization: Input should be less than or equal to 1 (got 2)",
        "  image.tag: not an image tag: up to 128 of A-Z, a-z, 0-9, '_', '.', '-', not starting with '.' or '-'"
        " (got 'bad tag')",
    ]


def test_load_profile_refuses_a_name_that_is_not_the_file_name(tmp_path, data):
    path = tmp_path / "scout.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match=r"name: must match the file name 'scout' \(got 'llama-4-scout'\)"):
        load_profile(path)


@pytest.mark.parametrize("text", ["a: [", "- just\n- a list\n"])
def test_load_profile_refuses_what_is_not_a_mapping(tmp_path, text):
    path = Path(tmp_path / "x.yml")
    path.write_text(text)
    with pytest.raises(ProfileError, match=str(path)):
        load_profile(path)


def test_ready_probe_is_optional_profile_data(tmp_path):
    text = LAB_PROFILE.read_text().replace("name: lab-tiny-llama", "name: probe")
    text = text[: text.index("\nready_probe:")] + "\n"  # the lab's own known answer, replaced here
    (tmp_path / "probe.yml").write_text(
        text + "ready_probe: {prompt: 'The capital of France is', expect_regex: 'Paris'}\n"
    )
    probe = load_profile(tmp_path / "probe.yml").ready_probe
    assert (probe.prompt, probe.expect_regex, probe.max_tokens, probe.chat) == (
        "The capital of France is",
        "Paris",
        16,
        False,
    )
    (tmp_path / "probe.yml").write_text(text + "ready_probe: {prompt: p, expect_regex: '(unclosed'}\n")
    with pytest.raises(ProfileError, match="ready_probe.expect_regex: not a regular expression"):
        load_profile(tmp_path / "probe.yml")
    (tmp_path / "probe.yml").write_text(text + "ready_probe: {prompt: p, expect_regex: p, chat_expect_regex: '['}\n")
    with pytest.raises(ProfileError, match="ready_probe.chat_expect_regex: not a regular expression"):
        load_profile(tmp_path / "probe.yml")
    assert load_profiles()["llama-3.3-70b"].ready_probe is None


def test_a_profile_is_the_sites_own_then_the_shipped_one(tmp_path):
    from rocmfleet.config.profiles import known_profiles, profile_path

    own = tmp_path / "profiles"
    assert profile_path("llama-3.3-70b", own) == PROFILES_DIR / "llama-3.3-70b.yml"  # no folder: shipped
    own.mkdir()
    (own / "llama-3.3-70b.yaml").write_text("x")  # Ansible's other spelling is theirs too
    assert profile_path("llama-3.3-70b", own) == own / "llama-3.3-70b.yaml"
    (own / "llama-4-scout.yml").symlink_to(tmp_path / "gone.yml")  # a link to nothing is theirs: an error
    assert profile_path("llama-4-scout", own) == own / "llama-4-scout.yml"
    assert profile_path("nothing-anywhere", own) == own / "nothing-anywhere.yml"  # named in the message
    assert {"llama-3.3-70b", "deepseek-r1"} <= set(known_profiles(own))


def test_the_profiles_folder_is_beside_the_group_files_never_the_working_directory(tmp_path, monkeypatch):
    from rocmfleet.config import groupvars

    site = tmp_path / "site" / "group_vars"
    monkeypatch.setattr(groupvars, "LOADED", [groupvars.GroupFile("all", site / "all.yml", {})])
    monkeypatch.delenv("ROCMFLEET_PROFILES_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "group_vars" / "profiles").mkdir(parents=True)  # another site's, where the command runs
    assert groupvars.profiles_dir() == site / "profiles"  # though it does not exist
    monkeypatch.setenv("ROCMFLEET_PROFILES_DIR", str(tmp_path / "mine"))
    assert groupvars.profiles_dir() == tmp_path / "mine"


# Model revision (rocmfleet.domain.hfmodel): staged once per host, loaded offline.


def _load(tmp_path, data) -> list[tuple[str, str, str]]:
    path = tmp_path / f"{data['name']}.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(err.value).startswith(f"{path}: invalid profile")  # the file, then one line per problem
    return err.value.problems


def test_a_hub_model_without_a_revision_is_refused(tmp_path, data):
    del data["revision"]
    ((key, message, value),) = _load(tmp_path, data)
    assert key == "revision" and value == ""
    assert message.startswith("missing for the Hugging Face model 'meta-llama/Llama-4-Scout-17B-16E-Instruct': pin")
    assert "40 hex" in message and "revision_unpinned: true" in message


@pytest.mark.parametrize("revision", ["main", "v1.0", "4BD10C4DC905B4000D76640D07A552344146FAEC", "4bd10c4"])
def test_a_revision_that_is_not_a_commit_is_refused(tmp_path, data, revision):
    data["revision"] = revision
    ((key, message, value),) = _load(tmp_path, data)
    assert (key, value) == ("revision", repr(revision))
    assert message.startswith("not a commit: 40 lower-case hex digits")


def test_the_escape_hatch_serves_a_hub_model_unpinned(data):
    del data["revision"]
    data["revision_unpinned"] = True
    profile = Profile.model_validate(data)
    assert profile.revision is None and profile.revision_unpinned


def test_a_revision_and_the_escape_hatch_together_are_refused(tmp_path, data):
    data["revision_unpinned"] = True
    ((key, message, _),) = _load(tmp_path, data)
    assert key == "revision" and message == "given with revision_unpinned: true; give one of them"


def test_a_local_path_needs_no_revision_and_takes_none(tmp_path, data):
    del data["revision"]
    data["model"] = "/opt/models/tiny-llama"
    assert Profile.model_validate(data).revision is None
    data["revision"] = "a" * 40
    ((key, message, _),) = _load(tmp_path, data)
    assert key == "revision" and "is a path in the container, which has no revision" in message


@pytest.mark.parametrize(
    "model",
    [
        "org/name/extra",
        "org/",
        "../x",
        "org/my model",
        " org/name",
        "a/$(id)",
        "a/b;rm -rf /",
        "-x/y",
        "a/--b",
        "org/x..",
        "o/" + "n" * 95,
    ],
)
def test_a_model_that_is_no_hub_id_nor_a_path_is_refused(tmp_path, data, model):
    # It would name the cache folder, the stamp's path and `hf download`'s argument on the host.
    data["model"] = model
    problems = _load(tmp_path, data)
    assert [(key, value) for key, _, value in problems] == [("model", repr(model))]
    assert problems[0][1].startswith("not a Hugging Face repository id: [org/]name")


@pytest.mark.parametrize("model", ["gpt2", "Qwen/Qwen3-30B-A3B", "org_1/name.v2-x", "o/" + "n" * 94])
def test_hub_ids_as_huggingface_hub_takes_them_are_accepted(data, model):
    data["model"] = model
    assert Profile.model_validate(data).model == model


def test_every_shipped_hub_profile_pins_a_commit(profiles):
    for name, profile in profiles.items():
        assert profile.model.startswith("/") or (profile.revision and len(profile.revision) == 40), name
        assert not profile.revision_unpinned, name


@pytest.mark.parametrize("flag", ["--revision", "--tokenizer-revision"])
def test_extra_args_may_not_pick_another_revision(data, flag):
    data["extra_args"] = [flag, "b" * 40]
    ((loc, message),) = errors(data)
    assert "the profile's revision" in message, (loc, message)
