from __future__ import annotations

from typing import Any

import pytest

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def lab_data() -> dict[str, Any]:
    """Host data as ``inventories/lab.py`` gives it, plus pyinfra's own keys."""
    return {
        "ssh_user": "root",
        "ssh_hostname": "10.213.0.11",
        "apt_proxy": "http://10.213.0.1:3128",
        "docker_source": "debian",
        "docker_insecure_registries": ["10.213.0.1:5000"],
        "vllm_image_repository": "10.213.0.1:5000/rocmfleet-lab/vllm-cpu",
        "vllm_image_tag": "0.32.0-lab.1",
        "vllm_image_digest": DIGEST,
        "vllm_model": "/opt/models/tiny-llama",
        "vllm_served_model_name": "tiny-llama",
        "vllm_args": {"max-model-len": 2048, "dtype": "bfloat16", "enforce-eager": True, "trust-remote-code": False},
        "vllm_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        "vllm_instances": [{"name": "tiny-llama", "port": 8000}],
    }
