"""``rocmfleet cache bake``: compile once on one host, ship the caches in an image.

The flow, over :mod:`rocmfleet.fleet.connect` (host-side steps: ``rocmfleet/scripts/cache-bake.sh``):

1. read the base image's ROCm and vLLM versions and the host's GPU architecture; compute the
   :class:`~rocmfleet.domain.cachekey.CacheKey` of the profile's first instance;
2. stop that instance's unit (the bake needs its GPUs; it is started again at the end, whatever
   happens) and start the same ``docker run`` from the base image, detached, with empty cache
   directories ``/var/cache/rocmfleet-bake/<key>/<name>`` mounted at the :data:`~rocmfleet.domain.cachedirs.LAYOUT`
   paths (the ``aiter`` one seeded with the base image's prebuilt AITER modules,
   :func:`~rocmfleet.domain.cachedirs.aiter_seed_dir`);
3. wait until it is ready (:mod:`rocmfleet.domain.readiness`), send the warm-up (:mod:`rocmfleet.domain.warmup`),
   stop it;
4. list the caches (:func:`manifest`: sizes, file counts, content checksum, which compiler wrote
   what), pack them as a tar layer at the container paths, render the Dockerfile
   (``templates/cache/Dockerfile.j2``: ``FROM <base>@<digest>``, ``ADD`` the layer, the cache
   variables, the key and manifest labels), build, push under :func:`rocmfleet.domain.cachedirs.baked_tag`,
   and report ``repository:tag@digest``.

Everything but :func:`bake` is pure and unit-tested.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jinja2
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field

from rocmfleet import project, scripts
from rocmfleet.config.instances import Instance
from rocmfleet.config.profiles import Image
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import cachedirs, cachekey, readiness, vllm, vllmfiles, vllmplace, warmup
from rocmfleet.domain.cachedirs import writer_of as writer_of  # the bake's manifest names writers with it
from rocmfleet.domain.cachekey import CacheKey, ImageFacts
from rocmfleet.domain.placement import Placement
from rocmfleet.plan.instance import vllm_settings

if TYPE_CHECKING:
    from rocmfleet.fleet.target import Target

TEMPLATES = project.TEMPLATES_DIR / "cache"
#: Host directory under which a bake keeps its cache directories and build context.
BAKE_ROOT = "/var/cache/rocmfleet-bake"
#: The layer's file name in the build context.
LAYER = "cache-layer.tar"
#: Seconds for the image facts, the build and the push (a large layer over a slow link).
BUILD_TIMEOUT_S = 3600


class BakeError(RuntimeError):
    """The bake cannot go on; the message says which step on which host, and why."""


class CacheStats(BaseModel):
    """Files and bytes of one part of the caches."""

    files: int = 0
    bytes: int = 0


class Manifest(BaseModel):
    """What a baked layer holds (the ``org.rocmfleet.cache-manifest`` label).

    ``checksum``: sha256 over ``sha256sum`` of every file in path order (content only);
    ``layer_sha256``: of the tar archive itself; ``caches``: per :data:`~rocmfleet.domain.cachedirs.LAYOUT`
    name; ``writers``: per compiler (:func:`writer_of`).
    """

    checksum: str
    layer_sha256: str = ""
    files: int
    bytes: int
    caches: dict[str, CacheStats] = Field(default_factory=dict)
    writers: dict[str, CacheStats] = Field(default_factory=dict)


def manifest(listing: str, layer_sha256: str = "") -> Manifest:
    """The :class:`Manifest` of ``cache-bake.sh list`` output.

    Args:
        listing: lines ``<bytes>\\t<path>`` and a last line ``checksum\\t<sha256>``.
        layer_sha256: the tar layer's sha256 (``cache-bake.sh pack``'s output), if made.

    Raises:
        ValueError: a line that is neither, or no checksum line.
    """
    checksum = None
    caches: dict[str, CacheStats] = {}
    writers: dict[str, CacheStats] = {}
    total = CacheStats()
    for number, line in enumerate(listing.splitlines(), 1):
        first, sep, path = line.partition("\t")
        if first == "checksum" and re.fullmatch(r"[0-9a-f]{64}", path):
            checksum = path
            continue
        if not sep or not first.isdigit() or not path:
            raise ValueError(f"cache listing line {number}: expected '<bytes>\\t<path>', got {line!r}")
        size = int(first)
        for table, key in ((caches, path.split("/", 1)[0]), (writers, writer_of(path))):
            stats = table.setdefault(key, CacheStats())
            stats.files += 1
            stats.bytes += size
        total.files += 1
        total.bytes += size
    if checksum is None:
        raise ValueError("cache listing has no 'checksum' line")
    return Manifest(
        checksum=checksum,
        layer_sha256=layer_sha256,
        files=total.files,
        bytes=total.bytes,
        caches=dict(sorted(caches.items())),
        writers=dict(sorted(writers.items())),
    )


def _docker_quote(value: str) -> str:
    """A Dockerfile double-quoted word: ``\\``, ``"`` and ``$`` escaped (no variable expansion)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def labels(base: Image, key: CacheKey, found: Manifest) -> dict[str, str]:
    """The baked image's labels: key (canonical JSON), its sha256, the manifest, the base reference."""
    return {
        cachekey.LABEL_KEY: key.canonical(),
        cachekey.LABEL_HASH: key.digest,
        cachekey.LABEL_MANIFEST: found.model_dump_json(),
        cachekey.LABEL_BASE: base.reference,
    }


def dockerfile(base: Image, key: CacheKey, found: Manifest) -> str:
    """The baked image's Dockerfile (``templates/cache/Dockerfile.j2``)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # a Dockerfile, not HTML  # noqa: S701
    )
    return env.get_template("Dockerfile.j2").render(
        base_repository=base.repository,
        base_digest=base.digest,
        layer=LAYER,
        env=sorted(cachedirs.env().items()),
        labels=[(name, _docker_quote(value)) for name, value in labels(base, key, found).items()],
    )


def baked_image_ref(base: Image, key: CacheKey) -> str:
    """``repository:tag`` the baked image is pushed as: the base repository, :func:`cachedirs.baked_tag`."""
    return f"{base.repository}:{cachedirs.baked_tag(base.tag, key.short)}"


def image_facts(output: str, base: Image, profile_vllm: str) -> ImageFacts:
    """The :class:`ImageFacts` of ``cache-bake.sh facts`` output (``rocm=...``/``vllm=...`` lines).

    The image's vLLM must be the profile's (its public version: ``0.33.0+rocm700`` is ``0.33.0``):
    the profile renders flags for its version, and the key records that version.

    Raises:
        BakeError: no vLLM in the image, or another version than the profile's.
    """
    found = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    version = found.get("vllm", "").strip()
    try:
        public = Version(version).public
    except InvalidVersion:
        raise BakeError(
            f"image {base.reference}: no vLLM version found (python3 -c 'import vllm'): {version!r}"
        ) from None
    if Version(public) != Version(profile_vllm):
        raise BakeError(f"image {base.reference} has vLLM {version}; the profile says vllm_version {profile_vllm}")
    return ImageFacts(base_digest=base.digest, rocm_version=found.get("rocm", "").strip(), vllm_version=profile_vllm)


def bake_run_argv(
    config: HostConfig, instance: Instance, placement: Placement, device_gids: list[int], bake_dir: str
) -> list[str]:
    """The instance's own ``docker run`` (:func:`rocmfleet.domain.vllm.docker_run_argv`), detached, with
    ``bake_dir/<name>`` mounted at each :data:`~rocmfleet.domain.cachedirs.LAYOUT` path and the cache
    variables set, whatever the host's current files say."""
    mounts = [cachedirs.Mount(f"{bake_dir}/{d.name}", d.path) for d in cachedirs.LAYOUT]
    argv = vllm.docker_run_argv(vllm_settings(config), instance, placement, device_gids, cache_mounts=mounts)
    extra = ["-d", *(a for name, value in cachedirs.env().items() for a in ("--env", f"{name}={value}"))]
    return [*argv[:2], *extra, *argv[2:]]


@dataclass(frozen=True)
class Baked:
    """The result: ``reference`` is ``repository:tag@digest``; ``key`` and ``manifest`` as labelled."""

    repository: str
    tag: str
    digest: str
    key: CacheKey
    manifest: Manifest

    @property
    def reference(self) -> str:
        return f"{self.repository}:{self.tag}@{self.digest}"


def bake(target: Target[HostConfig], emit: Callable[[str], None] = print, ready_timeout_s: int | None = None) -> Baked:
    """Bake the compile caches of ``target``'s first instance into an image and push it.

    Args:
        target: a :class:`rocmfleet.fleet.target.Target` (validated config and SSH settings).
        emit: where progress lines go.
        ready_timeout_s: how long the bake container may take to be ready (default the host's
            ``vllm_ready_timeout_s``).

    Raises:
        BakeError: any step failed (the message names it and the host); the instance's unit is
            started again if it was running, and the bake container is stopped. A bake that
            succeeds returns once that unit's instance is ready again.
        rocmfleet.fleet.connect.ConnectError: the host cannot be reached.
    """
    from rocmfleet.facts.devices import DeviceGroupIds
    from rocmfleet.facts.topology import GpuTopology, parse_fact_output
    from rocmfleet.fleet.connect import Session

    config: HostConfig = target.config
    if cachedirs.is_baked(config):
        raise BakeError(
            f"{target.name} runs the baked image {config.image.reference}: bake from the base image "
            "(its group data's vllm_image_* keys, or --data vllm_image_tag=... vllm_image_digest=...)"
        )
    instance = config.instances()[0]
    names = vllmfiles.files_of(instance)

    with Session.open(target.ssh) as session:

        def run(command: str, step: str, timeout_s: float = 300) -> str:
            result = session.run(command, timeout_s=timeout_s)
            if result.exit_status != 0:
                tail = (result.stderr.strip() or result.stdout.strip())[-800:]
                raise BakeError(f"{target.name}: {step} failed (exit {result.exit_status}): {tail}")
            return result.stdout

        problem = session.sudo_problem()
        if problem:
            raise BakeError(problem)
        topology = parse_fact_output(run(GpuTopology().command(), "reading the GPU topology").splitlines())
        if topology is None:
            raise BakeError(f"{target.name}: no GPUs in /sys/class/kfd")
        placement = vllmplace.placements(vllm_settings(config), topology, target.name)[instance.name]
        if not placement.gfx_arch:
            raise BakeError(f"{target.name}: the GPUs of {instance.name} are of more than one architecture")
        gids = DeviceGroupIds().process(run(DeviceGroupIds().command(), "reading device group ids").splitlines())
        emit(f"{target.name}: reading ROCm and vLLM versions of {config.image.reference}")
        out = run(scripts.command("cache-bake.sh", "facts", config.image.reference), "image facts", BUILD_TIMEOUT_S)
        facts = image_facts(out, config.image, config.profile.vllm_version)
        key = cachekey.instance_key(config, placement.gfx_arch, facts)
        bake_dir = f"{BAKE_ROOT}/{key.short}"
        context = f"{bake_dir}.context"
        emit(f"{target.name}: cache key {key.short} ({placement.gfx_arch}, ROCm {facts.rocm_version or '?'}, "
             f"vLLM {facts.vllm_version}, TP {key.tensor_parallel_size})")  # fmt: skip
        run(scripts.command("cache-bake.sh", "prepare", bake_dir, *(d.name for d in cachedirs.LAYOUT)), "prepare")
        # AITER imports from AITER_JIT_DIR only: the layer starts with the base image's prebuilt modules
        # (cachedirs.aiter_seed_dir), so that the bake builds, and the layer adds, only what the image lacks.
        seed = scripts.command("vllm-unit.sh", "seed-aiter", config.image.reference, f"{bake_dir}/aiter")
        run(seed, "seeding AITER's JIT directory", BUILD_TIMEOUT_S)
        timeout = ready_timeout_s or config.settings.vllm_ready_timeout_s
        # the same wait for the bake container and, after the bake, the instance's own (same name, port)
        wait = readiness.wait_script(
            instance.port, config.profile.served_model_name, timeout, names.container,
            ready_probe=config.profile.ready_probe,
        )  # fmt: skip
        was = run(scripts.command("cache-bake.sh", "stop", names.unit), f"stopping {names.unit}").strip()
        try:
            # The unit's container is Docker's and outlives its stop (issue 11): it goes, so that the bake
            # container can take its name (the readiness probe asks that container for the port).
            session.run(f"docker rm {shlex.quote(names.container)} >/dev/null 2>&1 || true", timeout_s=120)
            emit(f"{target.name}: starting {names.container} from the base image with empty caches")
            run(shlex.join(bake_run_argv(config, instance, placement, gids, bake_dir)), "starting the bake container")
            run(wait, "waiting for the bake container to be ready", timeout + 60)
            steps = warmup.plan(config.profile)
            emit(f"{target.name}: warm-up, {len(steps)} step(s)")
            emit(run(warmup.script(config.profile, instance.port), "warm-up", BUILD_TIMEOUT_S).rstrip())
        finally:
            session.run(f"docker stop {shlex.quote(names.container)} >/dev/null 2>&1 || true", timeout_s=120)
            session.run(scripts.command("cache-bake.sh", "resume", names.unit, was), timeout_s=120)
        listing = run(scripts.command("cache-bake.sh", "list", bake_dir), "listing the caches")
        pairs = [f"{d.name}={d.path}" for d in cachedirs.LAYOUT]
        layer_sha = run(
            scripts.command("cache-bake.sh", "pack", bake_dir, f"{context}/{LAYER}", *pairs), "packing", BUILD_TIMEOUT_S
        ).strip()
        found = manifest(listing, layer_sha)
        emit(f"{target.name}: {found.files} files, {found.bytes} bytes: " + ", ".join(
            f"{w} {s.files} files" for w, s in found.writers.items()))  # fmt: skip
        ref = baked_image_ref(config.image, key)
        run(scripts.command("cache-bake.sh", "dockerfile", context, dockerfile(config.image, key, found)), "Dockerfile")
        emit(f"{target.name}: building and pushing {ref}")
        pushed = run(scripts.command("cache-bake.sh", "build", context, ref), "docker build/push", BUILD_TIMEOUT_S)
        digest = pushed.strip().rsplit("@", 1)[-1]
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise BakeError(f"{target.name}: docker push of {ref} gave no digest: {pushed.strip()[-300:]!r}")
        run(scripts.command("cache-bake.sh", "clean", context), "cleaning up")
        if was == "active":
            # The instance (started again above, while the layer was packed and pushed) serves before the
            # bake returns: a rollout's preflight checks it next (issue 27: `rollout --bake` failed on a
            # check of the canary's instance still starting).
            emit(f"{target.name}: waiting until {names.unit} is ready again")
            run(wait, f"waiting for {names.unit} to be ready again", timeout + 60)
        repository, tag = ref.rsplit(":", 1)
        return Baked(repository, tag, digest, key, found)


def group_data_with_image(text: str, repository: str, tag: str, digest: str, source: str = "<text>") -> str:
    """``text`` (a ``group_vars`` YAML file) with ``vllm_image_repository``/``_tag``/``_digest`` set,
    by the same edit ``rocmfleet rollout --image`` makes (:func:`rocmfleet.config.groupdata_edit.set_keys`):
    existing top-level keys replaced in place (comments and the rest kept), missing ones appended.

    Raises:
        rocmfleet.config.groupdata_edit.EditError: not YAML, a key given twice, or a value this edit
            cannot rewrite safely (a block scalar, a value on the next line, an anchor...).
    """
    from rocmfleet.config.groupdata_edit import set_keys

    values = {"vllm_image_repository": repository, "vllm_image_tag": tag, "vllm_image_digest": digest}
    return set_keys(text, values, source)
