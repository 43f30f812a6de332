"""Compile caches: a baked image is valid for the instances that run it, its cache was used (nothing
compiled since its containers started); no writable cache is shared."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from rocmfleet.domain import cachedirs, cachekey, cacheproof, docker
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.fleet.check import expect

if TYPE_CHECKING:
    from collections.abc import Mapping

    from testinfra.host import Host

    from rocmfleet.domain.topology import Topology
    from rocmfleet.plan.checkmodel import CheckValues


def refusal(checks: CheckValues, labels: Mapping[str, str] | None, gpu_arch: str) -> list[str]:
    """Why the baked image of the plan must not run its instances on ``gpu_arch`` GPUs (empty: it may),
    as :func:`rocmfleet.domain.cachekey.refusal` says it: the tag's key must be the label's, and every
    field of the label's key but the image's own facts (its base digest and ROCm version) the plan's
    (:attr:`~rocmfleet.plan.model.CheckValues.cache_key`).

    Raises:
        CannotCheck: the plan's key was made for other GPUs than ``gpu_arch`` (or none of one architecture).
    """
    ref = checks.image
    tag_key = cachedirs.baked_key_of(ref.split("@", 1)[0].rsplit(":", 1)[-1])
    if tag_key is None:
        return []
    try:
        baked = cachekey.key_from_labels(labels)
    except ValueError as exc:
        return [f"baked image {ref}: {exc}"]
    if checks.cache_key is None or checks.cache_arch != gpu_arch:
        raise CannotCheck(
            f"the plan's cache key is for GPUs {checks.cache_arch or '(none of one architecture)'}, "
            f"the host has {gpu_arch}"
        )
    problems = []
    if baked.short != tag_key:
        problems.append(f"baked image {ref}: its tag names key {tag_key}, its label holds key {baked.short}")
    planned = json.loads(checks.cache_key) | {"base_digest": baked.base_digest, "rocm_version": baked.rocm_version}
    wanted = cachekey.CacheKey.model_validate(planned)
    if baked.key_version != cachekey.KEY_VERSION:
        problems.append(
            f"baked image {ref}: cache key version {baked.key_version}, this rocmfleet uses {cachekey.KEY_VERSION}"
        )
    for name, have, want in cachekey.differences(baked, wanted):
        if name == "key_version":
            continue
        problems.append(
            f"baked image {ref}: cache key field {name} is {have!r} in the image, {want!r} for this "
            f"instance (profile {checks.profile}); bake again with `rocmfleet cache bake` or deploy the base image"
        )
    return problems


def test_baked_image_matches_instances(
    host: Host, checks: CheckValues, topology: Topology, docker_running: None
) -> None:
    """A baked image (tag ``...-rfcache-<key>``) runs only where its cache key is the instance's:
    same architecture, TP, model, settings; the failure names the differing field."""
    if not checks.baked:
        pytest.skip(f"{checks.image} is not a baked image")
    ref = checks.image_pinned
    result = host.run(f"docker image inspect --format '{{{{json .Config.Labels}}}}' {ref}")
    labels = json.loads(result.stdout) if result.rc == 0 and result.stdout.strip().startswith("{") else None
    archs = {g.gfx_arch for g in topology.gpus}
    assert len(archs) == 1, f"GPUs of more than one architecture: {sorted(archs)}"
    problems = refusal(checks, labels, archs.pop())
    assert not problems, "; ".join(problems)


def test_baked_cache_was_used(host: Host, checks: CheckValues, docker_running: None) -> None:
    """A baked image's cache was used: since each container started, no file under the compiler cache
    paths was written and vLLM logged no compile (``cache-proof.sh``). The failure names, per instance,
    how many files each compiler wrote, with paths, and what vLLM logged; a container that is not
    running, or whose caches cannot be read, is an error, never a pass."""
    if not checks.baked:
        pytest.skip(f"{checks.image} is not a baked image: its caches are compiled on the host")
    misses = []
    for instance in checks.instances:
        container = instance.container
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


def test_no_writable_cache_shared(host: Host, checks: CheckValues, docker_running: None) -> None:
    """No two running instances mount the same writable compiler cache (aiter issue 3635: a
    shared JIT directory hung startup), as Docker reports their mounts."""
    paths = {d.path for d in cachedirs.LAYOUT}
    writers: dict[str, list[str]] = {}
    for instance in checks.instances:
        container = instance.container
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
