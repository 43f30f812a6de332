"""roles/vllm against a pyinfra ``@fake`` host: the order of the operations and which ones are no-ops.

The ``@fake`` connector runs nothing; facts answer from canned output (``fake_responses``,
matched by substring), everything else succeeds with no output. A stand-in host with two GPUs
on one NUMA node of 2 CPUs (the lab's shape) and two instances.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rocmfleet.config.settings import host_config
from rocmfleet.domain import lastgood, vllm
from rocmfleet.domain.placement import InstanceShape, place
from rocmfleet.facts.topology import parse_fact_output
from rocmfleet.operations.vllm import NO_KFD
from rocmfleet.plan.instance import vllm_settings

ROOT = Path(__file__).resolve().parents[2]
DATA = {
    "vllm_profile": "lab-tiny-llama",
    "vllm_image_repository": "10.213.0.1:5000/rocmfleet-lab/vllm-cpu",
    "vllm_image_tag": "0.32.0-lab.1",
    "vllm_image_digest": "sha256:" + "ab" * 32,
    "vllm_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
    "vllm_instances": [{"name": "a", "port": 8000, "gpus": [0]}, {"name": "b", "port": 8001, "gpus": [1]}],
    "vllm_gpu_count": 2,  # the two GPUs of TOPOLOGY
}
GPU = ["cpu_cores_count 0", "simd_count 4", "domain 0", "device_id 29857", "gfx_target_version 90402"]
TOPOLOGY = [
    "@@rocmfleet-gpu-topology 1",
    *["@@node 0", "cpu_cores_count 2", "simd_count 0"],
    *["@@node 1", *GPU, "location_id 1280", "drm_render_minor 128"],
    *["@@node 2", *GPU, "location_id 1536", "drm_render_minor 129"],
    *["@@pci 0000:05:00.0 0 SPX", "@@pci 0000:06:00.0 0 SPX"],
    *["@@lscpu", "NUMA node(s): 1", "NUMA node0 CPU(s): 0-1", "@@meminfo", "Node 0 MemTotal: 1048576 kB", "@@end"],
]


def records() -> dict[str, str]:
    """``serve.json`` of each instance as the role computes it."""
    config = host_config(DATA)
    shapes = [InstanceShape(i.name, i.port, i.gpus, 1) for i in config.instances()]
    placed = {p.name: p for p in place(shapes, parse_fact_output(TOPOLOGY))}
    service = vllm_settings(config)
    return {
        i.name: lastgood.serve_record(
            service.image, vllm.serve_args(service, i), vllm.container_env(service, placed[i.name])
        )
        for i in config.instances()
    }


def run_role(
    tmp_path: Path,
    responses: dict,
    rc: int = 0,
    others: dict | None = None,
    mode: str = "-y",
    data: dict | None = None,
) -> tuple[list[dict], str]:
    """Run ``roles.vllm.apply`` on the fake host ``gpu-1`` (and ``others``: {name: responses});
    the JSON report's operations (none under ``mode="--dry"``), and stderr."""
    inventory, deploy = tmp_path / "inventory.py", tmp_path / "deploy.py"
    hosts = [
        (f"@fake/{name}", {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": answers})
        for name, answers in {"gpu-1": responses, **(others or {})}.items()
    ]
    inventory.write_text(f"hosts = {hosts!r}\n")
    deploy.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            import rocmfleet.roles.vllm
            from rocmfleet import roles
            from pyinfra.context import host
            from rocmfleet.config.settings import host_config
            from rocmfleet.plan.build import plan_host
            config = host_config({data or DATA!r})
            roles.vllm.apply(config, planner=lambda facts: plan_host(host.name, config, facts))
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", mode, "--json", str(inventory), str(deploy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )
    assert proc.returncode == rc, proc.stderr[-4000:]
    if mode == "--dry":
        return [], proc.stderr
    return json.loads(proc.stdout)["results"]["operations"], proc.stderr


def changed(operations: list[dict]) -> list[str]:
    return [op["name"].removeprefix("vllm | ") for op in operations if op["success"]]


def test_fresh_host_checks_before_writing_and_keeps_last_good_at_the_end(tmp_path):
    operations, _ = run_role(
        tmp_path,
        {
            "timeout 20 sh -c '": TOPOLOGY,
            "stat -c %g /dev/kfd": ["992"],
            "vllm-probe.sh ready 80": ["ready"],
            "vllm-probe.sh owner 80": ["free"],
        },
    )
    names = [op["name"].removeprefix("vllm | ") for op in operations]
    checks = [names.index(f"Check the vllm serve arguments of vllm-{i}.service with the image's vLLM") for i in "ab"]
    # (the model's staging, with its own env file, comes before: tests below)
    renders = [
        i
        for i, name in enumerate(names)
        if name.startswith(("Render", "Write", "Restart")) and "model-stage" not in name
    ]
    assert names.index("Pull the vLLM image by digest") < min(checks)
    assert max(checks) < min(renders)
    assert names[-3:] == [
        "Wait until every vLLM instance is ready; roll back each one that is not",
        "Keep the files of vllm-a.service as its last good version",
        "Keep the files of vllm-b.service as its last good version",
    ]
    # Both checks ran (no last good version yet); the wait was a no-op (ready); both were kept.
    assert {"Check the vllm serve arguments of vllm-a.service with the image's vLLM"} <= set(changed(operations))
    assert "Wait until every vLLM instance is ready; roll back each one that is not" not in changed(operations)
    assert "Keep the files of vllm-b.service as its last good version" in changed(operations)


def test_a_proven_version_is_not_checked_or_kept_again(tmp_path):
    saved = {
        f"! -e /etc/rocmfleet/vllm/{name}.last-good/unit": [
            "unit same",
            "env same",
            "secrets same",
            "serve " + record.strip(),
        ]
        for name, record in records().items()
    }
    responses = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 80": ["free"],
        **saved,
    }
    operations, _ = run_role(tmp_path, responses)
    ours = [name for name in changed(operations) if name.startswith(("Check", "Wait", "Keep"))]
    assert ours == []


def test_a_host_without_gpus_fails_alone_before_anything_of_vllm_changes(tmp_path):
    healthy = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 80": ["free"],
    }
    bare = {"timeout 20 sh -c '": ["@@rocmfleet-gpu-topology 1", "@@no-kfd"]}
    operations, stderr = run_role(tmp_path, bare, rc=1, others={"gpu-2": healthy})
    failed = [op["name"].removeprefix("vllm | ") for op in operations if op["error"]]
    assert failed[0] == "Place the vLLM instances on this host's GPUs"  # then nothing more ran there
    assert all(op["error"] == ["@fake/gpu-1"] for op in operations if op["error"])
    # the other host went on to the end
    assert operations[-1]["no_change"] + operations[-1]["success"] == ["@fake/gpu-2"]
    assert [line for line in stderr.splitlines() if "no GPUs in /sys/class/kfd" in line] == [
        f"    [@fake/gpu-1] rocmfleet: {NO_KFD}"
    ]
    assert "Traceback" not in stderr
    assert not [op["name"] for op in operations if "@fake/gpu-1" in op["success"] and "Create" not in op["name"]]


def test_an_orphan_unit_of_ours_is_removed_before_the_new_ones_start(tmp_path):
    responses = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 80": ["free"],
        "for f in /etc/systemd/system/vllm-*.service": ["vllm-a", "vllm-old"],
        # The role's one read finds the orphan's unit (marked as ours) and nothing else.
        "' state.sh ": [
            json.dumps({"kind": "marked", "glob": "/etc/systemd/system/vllm-*.service", "path": p})
            for p in ("/etc/systemd/system/vllm-a.service", "/etc/systemd/system/vllm-old.service")
        ]
        + ['{"kind":"end"}'],
    }
    operations, _ = run_role(tmp_path, responses)
    names = [op["name"].removeprefix("vllm | ") for op in operations]
    removal = names.index("Remove vLLM instances the data no longer lists")
    assert "Remove vLLM instances the data no longer lists" in changed(operations)
    assert removal < min(i for i, name in enumerate(names) if name.startswith(("Render", "Enable", "Restart")))


def test_a_stranger_on_one_port_fails_the_host_before_any_instance_is_swapped(tmp_path):
    healthy = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 8000": ["free"],
        "vllm-probe.sh owner 8001": ["other 4242 python3 -m http.server 8001"],
    }
    operations, stderr = run_role(
        tmp_path,
        healthy,
        rc=1,
        others={"gpu-2": {**healthy, "vllm-probe.sh owner 80": ["free"], "vllm-probe.sh owner 8001": ["free"]}},
    )
    failed = [op["name"].removeprefix("vllm | ") for op in operations if "@fake/gpu-1" in op["error"]]
    assert failed[0] == "Check port 8001 is free or held by vllm-b"
    swapped = [op["name"] for op in operations if "@fake/gpu-1" in op["success"] and "Render" in op["name"]]
    assert swapped == []


def test_dry_says_per_instance_what_differs_and_which_orphan_goes(tmp_path):
    """``--dry``: one line per instance to change (the plan's reasons) and per orphan, as the rocm
    role says what it would remove; ``-y`` runs say nothing of it (no change detection)."""
    responses = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 80": ["free"],
        "' state.sh ": [
            json.dumps({"kind": "marked", "glob": "/etc/systemd/system/vllm-*.service", "path": p})
            for p in ("/etc/systemd/system/vllm-a.service", "/etc/systemd/system/vllm-old.service")
        ]
        + [json.dumps({"kind": "ready", "key": "b", "rc": 7}), '{"kind":"end"}'],
    }
    _, stderr = run_role(tmp_path, responses, mode="--dry")
    said = [line.strip() for line in stderr.splitlines() if "] would " in line]
    assert said[0].startswith(
        "[@fake/gpu-1] would change vllm instance a: /etc/rocmfleet/vllm/a.env: not reported by the read; "
    )
    assert said[1].startswith("[@fake/gpu-1] would change vllm instance b: ")
    assert said[1].endswith("; serve.json differs; not serving (vllm-probe.sh live exit 7)")
    assert said[2] == "[@fake/gpu-1] would remove vllm instance old (no longer in the data)"
    assert said[3] == f"[@fake/gpu-1] would pull vllm image {host_config(DATA).image.reference} (not on the host)"
    config = host_config(DATA)
    assert said[4] == (
        f"[@fake/gpu-1] would stage model {config.profile.model}@{config.profile.revision} into "
        "/var/cache/huggingface (not staged)"
    )
    assert said[5].startswith("[@fake/gpu-1] would create or fix /etc/rocmfleet/vllm, ")
    assert len(said) == 6
    _, stderr = run_role(tmp_path, responses)
    assert "] would " not in stderr


def _baked_data() -> dict:
    """DATA on a baked image whose labels hold the key the fake host's instances compile."""
    from rocmfleet.domain import cachedirs, cachekey

    facts = cachekey.ImageFacts(base_digest="sha256:" + "cd" * 32, rocm_version="7.0.0", vllm_version="0.32.0")
    key = cachekey.instance_key(host_config(DATA), "gfx942", facts)
    labels = {cachekey.LABEL_KEY: key.canonical(), cachekey.LABEL_HASH: key.digest}
    return {**DATA, "vllm_image_tag": cachedirs.baked_tag(DATA["vllm_image_tag"], key.short)}, labels


def test_a_baked_deploy_proves_its_cache_after_the_wait_and_warns_on_a_miss(tmp_path, monkeypatch):
    data, labels = _baked_data()
    monkeypatch.setitem(globals(), "DATA", data)
    miss = ["started\t2026-12-04T20:25:04Z", "file\t/root/.triton/cache/AB/k.hsaco", "end"]
    responses = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["not-ready"],  # the fresh containers: the deploy waits for them
        "vllm-probe.sh owner 80": ["free"],
        "{{json .Config.Labels}}": [json.dumps(labels)],
        "cache-proof.sh": miss,
    }
    # gpu-1's wait "succeeds" but its probe still says not ready: keeping last good fails it; gpu-2 is
    # ready all along, so the run goes on (and reports) and gpu-2 reads no proof
    ready = {**responses, "vllm-probe.sh ready 80": ["ready"]}
    operations, stderr = run_role(tmp_path, responses, rc=1, others={"gpu-2": ready})
    names = [op["name"].removeprefix("vllm | ") for op in operations]
    wait = names.index("Wait until every vLLM instance is ready; roll back each one that is not")
    assert names[wait + 1] == "Prove the baked compile caches were used (nothing compiled since the start)"
    for instance in "ab":
        assert (
            f"[@fake/gpu-1] rocmfleet: baked compile cache missed: {instance}: 1 file(s) compiled since the start "
            "of the baked container (2026-12-04T20:25:04Z): Triton: 1 (/root/.triton/cache/AB/k.hsaco)"
        ) in stderr
    assert "[@fake/gpu-2] rocmfleet: baked compile cache missed" not in stderr


def test_a_baked_deploy_that_did_not_wait_reads_no_proof(tmp_path, monkeypatch):
    data, labels = _baked_data()
    monkeypatch.setitem(globals(), "DATA", data)
    responses = {
        "timeout 20 sh -c '": TOPOLOGY,
        "stat -c %g /dev/kfd": ["992"],
        "vllm-probe.sh ready 80": ["ready"],
        "vllm-probe.sh owner 80": ["free"],
        "{{json .Config.Labels}}": [json.dumps(labels)],
        "cache-proof.sh": ["started\t2026-12-04T20:25:04Z", "file\t/root/.triton/cache/AB/k.hsaco", "end"],
    }
    operations, stderr = run_role(tmp_path, responses)
    proof = [op for op in operations if op["name"].endswith("(nothing compiled since the start)")]
    assert [op["no_change"] for op in proof] == [["@fake/gpu-1"]]
    assert "baked compile cache missed" not in stderr  # the proof (a miss, were it read) was not read


#: A hub model (rocmfleet.domain.hfmodel): staged once per host before any instance is touched.
HUB = {**DATA, "vllm_profile": "qwen3-30b-a3b", "vllm_env": {}}
FRESH = {
    "timeout 20 sh -c '": TOPOLOGY,
    "stat -c %g /dev/kfd": ["992"],
    "vllm-probe.sh ready 80": ["ready"],
    "vllm-probe.sh owner 80": ["free"],
}


def test_a_hub_model_is_staged_once_after_the_pull_and_before_any_instance_is_touched(tmp_path):
    operations, _ = run_role(tmp_path, FRESH, data=HUB)
    names = [op["name"].removeprefix("vllm | ") for op in operations]
    stage = "Stage Qwen/Qwen3-30B-A3B@ad44e777bcd18fa416d9da3bd8f70d33ebb85d39 in /var/cache/huggingface"
    assert names.count(stage) == 1  # once per host, not per instance
    at = names.index(stage)
    assert names[at - 1] == "Write /etc/rocmfleet/vllm/model-stage.secrets"
    assert names[at + 1] == "Remove /etc/rocmfleet/vllm/model-stage.secrets"
    assert names.index("Pull the vLLM image by digest") < at - 1
    touched = [i for i, n in enumerate(names) if n.startswith(("Check the vllm serve", "Render", "Enable", "Restart"))]
    assert at < min(touched)


def test_dry_says_the_model_would_be_staged(tmp_path):
    _, stderr = run_role(tmp_path, FRESH, mode="--dry", data=HUB)
    assert (
        "would stage model Qwen/Qwen3-30B-A3B@ad44e777bcd18fa416d9da3bd8f70d33ebb85d39 into /var/cache/huggingface "
        "(not staged)"
    ) in stderr
