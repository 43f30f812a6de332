"""``rocmfleet cache bake`` in the lab: bake -> push -> deploy, and the baked start compiles nothing.

Runs on the deployed lab (after ``tests/e2e/test_deploy.py``), on the last lab host (one instance,
``lab-tiny-llama-0``). Assumes the lab registry accepts pushes from the lab hosts (it is in
``docker_insecure_registries``) and that the lab image's vLLM CPU build writes its torch.compile
cache under ``VLLM_CACHE_ROOT`` (``/root/.cache/vllm/torch_compile_cache``).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import lab_inventory, lab_ssh, pyinfra_json, rocmfleet_cli

pytestmark = pytest.mark.lab

CONTAINER = "vllm-lab-tiny-llama-0"
CACHE_PATHS = "/root/.cache/vllm /root/.cache/inductor /root/.triton/cache /root/.aiter/jit"


@pytest.fixture(scope="module")
def baked(lab):
    """Bake on the last host; yields (host, reference); the host goes back to the base image after."""
    host = sorted(lab.hosts)[-1]
    result = rocmfleet_cli("cache", "bake", "inventories/lab.py", "--host", host, "-y", timeout_s=3000)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    print(result.stdout)  # the key, the manifest's writers, the reference: evidence for the run's log
    refs = re.findall(r"^(\S+:\S+-rfcache-[0-9a-f]{12}@sha256:[0-9a-f]{64})$", result.stdout, re.M)
    assert refs, result.stdout
    yield host, refs[-1]
    code, _, err = pyinfra_json("deploy.py", "-y", "--limit", host)
    assert code == 0, err[-2000:]


def test_bake_pushes_a_labelled_image(lab, baked):
    host, ref = baked
    repository_tag, digest = ref.split("@")
    repository = repository_tag.rsplit(":", 1)[0]  # the registry part has a port: split the tag off the right
    inspect = lab_ssh(lab, host, f"docker image inspect --format '{{{{json .Config.Labels}}}}' {repository}@{digest}")
    assert inspect.returncode == 0, inspect.stderr
    labels = json.loads(inspect.stdout)
    manifest = json.loads(labels["org.rocmfleet.cache-manifest"])
    print("manifest writers:", manifest["writers"])
    assert manifest["files"] > 0, manifest  # the bake container compiled something into the caches
    assert json.loads(labels["org.rocmfleet.cache-key"])["tensor_parallel_size"] == 1


def test_baked_deploy_starts_without_recompiling(lab, baked, tmp_path):
    host, ref = baked
    repository_tag, digest = ref.split("@")
    tag = repository_tag.rsplit(":", 1)[1]
    inventory = lab_inventory(tmp_path, {host: {"vllm_image_tag": tag, "vllm_image_digest": digest}})
    code, _, err = pyinfra_json("deploy.py", "-y", "--limit", host, inventory=inventory)
    assert code == 0, err[-3000:]
    assert "baked compile cache missed" not in err and "cannot prove the baked compile cache" not in err, err[-3000:]
    started = lab_ssh(lab, host, f"docker inspect --format '{{{{.State.StartedAt}}}}' {CONTAINER}").stdout.strip()
    baked_files = lab_ssh(lab, host, f"docker exec {CONTAINER} find {CACHE_PATHS} -type f 2>/dev/null | wc -l")
    assert int(baked_files.stdout.strip()) > 0, "the baked caches are not at the container's paths"
    # Ready (the deploy waited) and one request served: no cache file may be newer than the start.
    body = json.dumps({"model": "tiny-llama", "prompt": "hi", "max_tokens": 4})
    url = "http://127.0.0.1:8000/v1/completions"
    lab_ssh(lab, host, f"curl -fsS -m 120 -o /dev/null -H 'content-type: application/json' -d '{body}' {url}")
    newer = lab_ssh(lab, host, f"docker exec {CONTAINER} find {CACHE_PATHS} -type f -newermt '{started}' 2>/dev/null")
    logs = lab_ssh(lab, host, f"docker logs {CONTAINER} 2>&1").stdout
    # vLLM's own words (vllm/compilation/decorators.py, backends.py): "Directly load AOT compilation from
    # path ..." on a hit; "Cannot load aot compilation from path ..., error: ..." or "Compiling a graph for
    # ..." when it compiles again.
    compile_lines = [
        line for line in logs.splitlines() if re.search(r"aot compilation|Compiling a graph|torch.compile", line, re.I)
    ]
    print("\n".join(compile_lines))
    assert newer.stdout.strip() == "", (
        f"files compiled after the start of the baked container:\n{newer.stdout[:2000]}\n" + "\n".join(compile_lines)
    )
    assert "Compiling a graph for" not in logs, "vLLM compiled a graph although the cache was baked"
    assert "Cannot load aot compilation" not in logs, "\n".join(compile_lines)
    check = rocmfleet_cli("check", inventory, "--limit", host, "--select", "cache")
    assert check.returncode == 0, check.stdout[-2000:]
