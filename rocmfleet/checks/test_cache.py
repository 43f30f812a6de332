"""Compile caches: a baked image is valid for the instances that run it; no writable cache is shared."""

from __future__ import annotations

import json

import pytest

from rocmfleet import cachedirs, cachekey


def test_baked_image_matches_instances(host, config, topology, docker_running):
    """A baked image (tag ``...-rfcache-<key>``) runs only where its cache key is the instance's:
    same architecture, TP, model, settings; the failure names the differing field."""
    if not cachedirs.is_baked(config):
        pytest.skip(f"{config.image.reference} is not a baked image")
    ref = f"{config.image.repository}@{config.image.digest}"
    result = host.run(f"docker image inspect --format '{{{{json .Config.Labels}}}}' {ref}")
    labels = json.loads(result.stdout) if result.rc == 0 and result.stdout.strip().startswith("{") else None
    archs = {g.gfx_arch for g in topology.gpus}
    assert len(archs) == 1, f"GPUs of more than one architecture: {sorted(archs)}"
    problems = cachekey.refusal(config.image.reference, labels, config, archs.pop())
    assert not problems, "; ".join(problems)


def test_no_writable_cache_shared(config):
    """Two instances never mount the same writable compiler cache (aiter issue 3635)."""
    problems = cachedirs.writable_sharing(config)
    assert not problems, "; ".join(problems)
