"""Compile caches: a baked image is valid for the instances that run it, its cache was used (nothing
compiled since its containers started); no writable cache is shared."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain import cachedirs, cachekey, cacheproof, docker, vllmfiles
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import expect

if TYPE_CHECKING:
    from testinfra.host import Host

    from rocmfleet.config.settings import HostConfig
    from rocmfleet.domain.topology import Topology


def test_baked_image_matches_instances(
    host: Host, config: HostConfig, topology: Topology, docker_running: None
) -> None:
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


def test_baked_cache_was_used(host: Host, config: HostConfig, docker_running: None) -> None:
    """A baked image's cache was used: since each container started, no file under the compiler cache
    paths was written and vLLM logged no compile (``cache-proof.sh``). The failure names, per instance,
    how many files each compiler wrote, with paths, and what vLLM logged; a container that is not
    running, or whose caches cannot be read, is an error, never a pass."""
    if not cachedirs.is_baked(config):
        pytest.skip(f"{config.image.reference} is not a baked image: its caches are compiled on the host")
    misses = []
    for instance in config.instances():
        container = vllmfiles.files_of(instance).container
        result = host.run(cacheproof.command(container))
        if result.rc != 0:
            raise CannotCheck(f"cache-proof.sh {container} exited {result.rc}: {result.stderr.strip()[-300:]}")
        try:
            line = cacheproof.miss_line(instance.name, cacheproof.parse(result.stdout))
        except ValueError as exc:
            raise CannotCheck(f"cannot prove the cache of {container}: {exc}") from None
        if line:
            misses.append(line)
    assert not misses, "; ".join(misses)


def test_no_writable_cache_shared(host: Host, config: HostConfig, docker_running: None) -> None:
    """No two running instances mount the same writable compiler cache (aiter issue 3635: a
    shared JIT directory hung startup), as Docker reports their mounts."""
    paths = {d.path for d in cachedirs.LAYOUT}
    writers: dict[str, list[str]] = {}
    for instance in config.instances():
        container = vllmfiles.files_of(instance).container
        result = expect.container_inspect(host, container)
        if result.rc != 0:
            if "No such" in result.stderr:
                continue  # not running: the vllm checks report it
            raise CannotCheck(f"docker inspect {container} exited {result.rc}: {result.stderr.strip()[-300:]}")
        try:
            mounts = docker.parse_inspect(result.stdout, container).get("Mounts")
        except ValueError as exc:
            raise CannotCheck(str(exc)) from None
        for mount in mounts or []:
            if mount.get("RW") and mount.get("Destination") in paths:
                writers.setdefault(mount.get("Source", "?"), []).append(container)
    shared = {source: names for source, names in writers.items() if len(names) > 1}
    assert not shared, "; ".join(
        f"{source} is mounted writable by {', '.join(names)}" for source, names in shared.items()
    )
