from __future__ import annotations

from rocmfleet import vllm
from rocmfleet.config import settings_for
from tests.unit.conftest import DIGEST


def test_docker_run_argv_follows_amd_and_vllm_docs(lab_data):
    settings = settings_for("lab-1", lab_data)
    instance = settings.vllm_instances[0]
    argv = vllm.docker_run_argv(settings, instance, device_gids=[992, 44, 992])
    assert argv[:3] == ["/usr/bin/docker", "run", "--rm"]
    joined = " ".join(argv)
    # reference §3.1: kfd + DRI, ipc=host, seccomp unconfined, SYS_PTRACE, shm size
    for expected in (
        "--device /dev/kfd",
        "--device /dev/dri",
        "--ipc=host",
        "--security-opt seccomp=unconfined",
        "--cap-add=SYS_PTRACE",
        "--shm-size 16g",
        "--env-file /etc/rocmfleet/vllm/tiny-llama.env",
        "--name vllm-tiny-llama",
    ):
        assert expected in joined
    # numeric GIDs, each once, sorted
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--group-add"] == ["44", "992"]
    image_at = argv.index(f"10.213.0.1:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1@{DIGEST}")
    assert argv[image_at + 1 :] == [
        "/opt/models/tiny-llama",
        "--served-model-name", "tiny-llama",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--max-model-len", "2048",
    ]  # fmt: skip


def test_env_file_is_sorted_lines(lab_data):
    lab_data["vllm_env"] = {"B": "2", "A": "1"}
    assert vllm.env_file(settings_for("h", lab_data)) == "A=1\nB=2\n"


def test_names(lab_data):
    instance = settings_for("h", lab_data).vllm_instances[0]
    assert vllm.unit_name(instance) == "vllm-tiny-llama.service"
    assert vllm.container_name(instance) == "vllm-tiny-llama"
