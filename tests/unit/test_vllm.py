from __future__ import annotations

import dataclasses

from rocmfleet.config.settings import host_config
from rocmfleet.config.vault import Secret
from rocmfleet.domain import cachedirs, vllm, vllmfiles
from rocmfleet.plan.instance import vllm_settings
from tests.unit.conftest import DIGEST


def test_docker_run_argv_follows_amd_and_vllm_docs(lab_config, lab_placements):
    instance = lab_config.instances()[1]
    argv = vllm.docker_run_argv(
        vllm_settings(lab_config), instance, lab_placements[instance.name], device_gids=[992, 44, 992]
    )
    # detached and Docker's (live-restore keeps it across dockerd restarts); --init forwards SIGTERM
    assert argv[:9] == [
        "/usr/bin/docker", "run", "--detach", "--init", "--restart", "no", "--stop-timeout", "90", "--name",
    ]  # fmt: skip
    assert "--rm" not in argv
    joined = " ".join(argv)
    # reference §3.1/§3.2: kfd plus this instance's render node only; ipc=host; seccomp; ptrace; shm
    for expected in (
        "--device /dev/kfd --device /dev/dri/renderD129",
        "--ipc=host",
        "--security-opt seccomp=unconfined",
        "--cap-add=SYS_PTRACE",
        "--shm-size 16g",
        # GPU 1 is on NUMA node 0 (conftest TOPOLOGY) with a's GPU 0: b gets the second half of 0-47
        "--cpuset-cpus 24-47 --cpuset-mems 0",
        "--env-file /etc/rocmfleet/vllm/tiny-llama-b.env",
        "--name vllm-tiny-llama-b",
    ):
        assert expected in joined
    assert "/dev/dri " not in joined + " " and "renderD128" not in joined
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--group-add"] == ["44", "992"]
    image_at = argv.index(f"10.213.0.1:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1@{DIGEST}")
    assert argv[image_at + 1 :] == [
        "lab/tiny-llama",
        "--revision", "1ab0c0ffee1ab0c0ffee1ab0c0ffee1ab0c0ffee",
        "--served-model-name", "tiny-llama",
        "--host", "0.0.0.0",
        "--port", "8001",
        "--tensor-parallel-size", "1",
        "--max-model-len", "2048",
        "--max-num-seqs", "8",
        "--dtype", "bfloat16",
    ]  # fmt: skip


def test_the_model_cache_is_read_only_offline_and_pinned(lab_config, lab_placements):
    """The staged model (rocmfleet.domain.hfmodel): the cache mounted :ro, HF_HUB_OFFLINE=1, and for a
    hub model ``--revision`` right after it, so vLLM loads exactly the staged snapshot."""
    revision = lab_config.profile.revision  # the lab profile's hub model (tests/lab/hfhub.py)
    assert revision is not None
    profile = lab_config.profile.model_copy(update={"model": "/opt/models/tiny-llama", "revision": None})
    local = dataclasses.replace(lab_config, profile=profile)
    for config, pinned in ((local, []), (lab_config, ["--revision", revision])):
        instance = config.instances()[0]
        placement = lab_placements[instance.name]
        argv = vllm.docker_run_argv(vllm_settings(config), instance, placement, [])
        volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "--volume"]
        assert "/var/cache/huggingface:/root/.cache/huggingface:ro" in volumes
        assert not [v for v in volumes if "huggingface" in v and not v.endswith(":ro")]
        model_at = argv.index(config.profile.model)
        assert argv[model_at + 1 : model_at + 1 + len(pinned) + 1] == [*pinned, "--served-model-name"]
        env = vllm.container_env(vllm_settings(config), placement)
        assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == "/root/.cache/huggingface/hub"


def test_secrets_are_named_on_the_command_line_never_valued(lab_data, lab_placements):
    lab_data["vllm_secret_env"] = {"HF_TOKEN": Secret("hf_SECRETvalue")}
    config = host_config(lab_data)
    instance = config.instances()[0]
    argv = vllm.docker_run_argv(vllm_settings(config), instance, lab_placements[instance.name], [])
    assert "--env" in argv and argv[argv.index("--env") + 1] == "HF_TOKEN"
    assert "hf_SECRETvalue" not in " ".join(argv)


def test_container_env_has_profile_flags_user_env_and_visible_devices(lab_config, lab_placements):
    env = vllm.container_env(vllm_settings(lab_config), lab_placements["tiny-llama-a"])
    # the lab profile's vLLM is 0.32: it reads VLLM_ENGINE_READY_TIMEOUT_S, rendered from vllm_ready_timeout_s
    assert env == {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_USE_AOT_COMPILE": "0",  # the profile's extra_env
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_ENGINE_READY_TIMEOUT_S": "1800",
        "CUDA_VISIBLE_DEVICES": "0",
        **cachedirs.env(),
        "HF_HUB_CACHE": "/root/.cache/huggingface/hub",  # the staged cache, read offline
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": "/tmp/hf_modules",  # transformers' remote code, outside the read-only mount
        "VLLM_PORT": "20000",  # tiny-llama-a, the host's first instance: the first internal port block
    }
    assert "HIP_VISIBLE_DEVICES" not in env


def test_env_lines_are_sorted():
    assert vllm.env_lines({"B": "2", "A": "1"}) == "A=1\nB=2\n"


def test_names(lab_config):
    files = vllmfiles.files_of(lab_config.instances()[0])
    assert (files.unit, files.container) == ("vllm-tiny-llama-a.service", "vllm-tiny-llama-a")
    assert files.secrets_file == "/etc/rocmfleet/vllm/tiny-llama-a.secrets"
