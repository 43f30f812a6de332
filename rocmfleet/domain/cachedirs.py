"""Where compilers keep their caches in a vLLM container, and which host directory backs each.

Four caches make a cold vLLM start slow on ROCm (``../shared/reference/mi300x.md`` §6):

========  ===========================  ======================  =====================================
name      variable                     container path          written by
========  ===========================  ======================  =====================================
vllm      ``VLLM_CACHE_ROOT``          ``/root/.cache/vllm``   vLLM: ``torch_compile_cache/<hash10>/``
                                                               (Dynamo/AOT artifacts; vLLM puts
                                                               inductor's and Triton's caches in it
                                                               unless told otherwise), model info
inductor  ``TORCHINDUCTOR_CACHE_DIR``  ``/root/.cache/inductor``  TorchInductor: FX graphs, autotuning
triton    ``TRITON_CACHE_DIR``         ``/root/.triton/cache`` Triton: compiled kernels (its default
                                                               path), autotuning results
aiter     ``AITER_JIT_DIR``            ``/root/.aiter/jit``    AITER: JIT-built modules (``build/``)
========  ===========================  ======================  =====================================

Setting ``TRITON_CACHE_DIR`` explicitly makes vLLM leave it alone (vLLM only sets it when the user
has not, ``vllm/compilation/compiler_interface.py``), so every Triton kernel, vLLM's own and
inductor's, lands in one directory the bake can attribute.

**Never two compilers on one writable cache** (aiter issue 3635: a persisted AITER JIT directory
shared between starting containers hung startup). Two layouts, chosen per image:

* a **baked** image (its tag ends in ``-rfcache-<key>``, :func:`rocmfleet.domain.cachekey.baked_key_of`)
  carries the caches in an image layer at the container paths; nothing is mounted over them, so
  what a container adds goes to its own copy-on-write layer and dies with it;
* any other image gets **per-instance, per-image** host directories,
  ``<vllm_cache_dir>/<instance>/<namespace>/<name>``, mounted read-write: an instance's caches
  survive its restarts, and no other instance ever writes them (instance names are unique on a
  host). The **namespace** is the first 12 hex of the image's manifest digest (:func:`namespace`).

**Why per image**: the compilers key their entries on what they compile, not on the build that
compiles it. A Triton cache written by another Triton or ROCm build is found and used, and gives
garbled output until wiped (vllm-project/vllm issue 41871); AITER's JIT modules carry no version
check at all. So a new image starts in a new namespace. The other parts of the cache key
(:mod:`rocmfleet.domain.cachekey`) are not in the namespace, on purpose: the GPU architecture is
the host's and never changes under an instance, and the profile's settings, the model and the
environment are in the compilers' own keys (vLLM hashes its config into
``torch_compile_cache/<hash10>``, inductor its FX graph and config, Triton the kernel source and
constants), so a profile change with the same image keeps what still applies.

**Old namespaces**: before each start the unit removes those neither the image it starts nor the
instance's last good version (:mod:`rocmfleet.domain.lastgood`, its ``serve.json``) runs, so a
rollback finds its warm cache and a host keeps at most two per instance
(``rocmfleet/scripts/vllm-unit.sh prepare-cache``). Only names rocmfleet makes are removed: 12-hex
namespaces and the ``vllm``, ``inductor``, ``triton``, ``aiter`` directories of the layout before
namespaces.

**Stale JIT lock files**: the same step removes lock files in the namespace of the image it starts
that no process holds open (:data:`LOCK_NAMES`; docs/host.md, "Compiler caches", has the
sources): AITER builds under an ``O_CREAT|O_EXCL`` file baton that waits while the file exists,
so one left by a killed build made every later start of the same image wait for it.

**AITER's prebuilt modules**: with ``AITER_JIT_DIR`` set, AITER looks for its modules in that
directory only (ROCm/aiter ``aiter/jit/core.py``), not in the package's ``aiter/jit/`` where an
image ships them prebuilt; an empty per-instance directory would have AITER build them again.
So the unit seeds its namespace's directory from the image before each start (:func:`aiter_seed_dir`,
``rocmfleet/scripts/vllm-unit.sh seed-aiter``: once per image; another image's modules go), and
the bake seeds its directory the same way, so a baked layer holds the prebuilt modules and what
the warm-up built. Not setting ``AITER_JIT_DIR`` would keep the prebuilt ones in reach, but AITER
would then write its builds into the image's package directory, in each container's own
throw-away layer: never persisted across restarts, never captured by a bake.

Pure functions only; the ``docker run`` line uses :func:`volume_args` and :func:`env`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# This module imports nothing of rocmfleet's (measure/cache_gpu.py runs it without deps): it reads
# a host's configuration (``rocmfleet.config.settings.HostConfig`` has it) through these Protocols.


class _Tagged(Protocol):
    @property
    def tag(self) -> str: ...
    @property
    def digest(self) -> str: ...


class _CacheDir(Protocol):
    @property
    def vllm_cache_dir(self) -> str: ...


class NamedInstance(Protocol):
    """A vLLM instance, by its name (``rocmfleet.config.instances.Instance`` has it)."""

    @property
    def name(self) -> str: ...


class CacheHost(Protocol):
    """What the cache layout reads of a host: its image's tag and digest, ``vllm_cache_dir`` and its instances."""

    @property
    def image(self) -> _Tagged: ...
    @property
    def settings(self) -> _CacheDir: ...
    def instances(self) -> Sequence[NamedInstance]: ...


#: A baked image's tag: ``<base tag>-rfcache-<first 12 hex of its cache key hash>``.
BAKED_TAG = re.compile(r"^(?P<base>\w[\w.-]*)-rfcache-(?P<key>[0-9a-f]{12})$")
#: Hex digits of the image digest that name a namespace: Docker's own short form of an id
#: (``docker ps``, ``docker images``), 48 bits: two images of one instance never share one.
NAMESPACE_HEX = 12
#: Names of the lock files ``vllm-unit.sh prepare-cache`` removes when no process holds them open
#: (its ``find -name`` patterns, the same list; docs/host.md, "Compiler caches", has each one's
#: source): AITER's file batons ``build/lock_<module>``, ``build/lock_3rdparty_clone_<name>``,
#: ``build/<module>/build/lock`` and their ``.steal`` companions; inductor's ``locks/*.lock``
#: (flock: harmless once their writer is gone, removed all the same).
LOCK_NAMES = ("lock", "lock_*", "*.lock", "*.steal")
#: Docker's tag length limit (``[\w][\w.-]{0,127}``, distribution/reference).
TAG_MAX = 128


@dataclass(frozen=True)
class CacheDir:
    """One compiler cache: its short ``name``, the variable that points at it, its container path."""

    name: str
    variable: str
    path: str
    writer: str


#: The container layout (module docstring). The order is the order of mounts and layer entries.
LAYOUT: tuple[CacheDir, ...] = (
    CacheDir("vllm", "VLLM_CACHE_ROOT", "/root/.cache/vllm", "vLLM torch.compile (Dynamo, AOT artifacts)"),
    CacheDir("inductor", "TORCHINDUCTOR_CACHE_DIR", "/root/.cache/inductor", "TorchInductor"),
    CacheDir("triton", "TRITON_CACHE_DIR", "/root/.triton/cache", "Triton"),
    CacheDir("aiter", "AITER_JIT_DIR", "/root/.aiter/jit", "AITER JIT"),
)
#: The variables of :data:`LAYOUT`: owned by rocmfleet, never taken from ``vllm_env``.
VARIABLES = frozenset(d.variable for d in LAYOUT)


@dataclass(frozen=True)
class Mount:
    """A bind mount: ``host`` directory at ``container`` path, writable unless ``read_only``."""

    host: str
    container: str
    read_only: bool = False

    def arg(self) -> str:
        """``HOST:CONTAINER[:ro]`` for ``docker run --volume``."""
        return f"{self.host}:{self.container}" + (":ro" if self.read_only else "")


def env() -> dict[str, str]:
    """The container environment that points each compiler at its :data:`LAYOUT` path.

    The same for every instance and for baked and unbaked images: what differs is what backs
    the paths (:func:`mounts`).
    """
    return {d.variable: d.path for d in LAYOUT}


def baked_key_of(tag: str) -> str | None:
    """The 12-hex key a baked image's tag names (:data:`BAKED_TAG`); ``None`` for any other tag."""
    match = BAKED_TAG.fullmatch(tag)
    return match["key"] if match else None


def baked_tag(base_tag: str, key_short: str) -> str:
    """The tag of the image baked from ``base_tag`` with cache key ``key_short`` (12 hex).

    The base tag is shortened from the right when needed, so the result stays within Docker's
    128 characters; a base tag that is itself baked is replaced, not extended.

    Raises:
        ValueError: ``key_short`` is not 12 lowercase hex digits.
    """
    if not re.fullmatch(r"[0-9a-f]{12}", key_short):
        raise ValueError(f"cache key {key_short!r}: expected 12 lowercase hex digits")
    match = BAKED_TAG.fullmatch(base_tag)
    base = match["base"] if match else base_tag
    suffix = f"-rfcache-{key_short}"
    return base[: TAG_MAX - len(suffix)] + suffix


def is_baked(config: CacheHost) -> bool:
    """Whether the host runs a baked image (its tag names a cache key)."""
    return baked_key_of(config.image.tag) is not None


def instance_root(config: CacheHost, instance: NamedInstance) -> str:
    """``<vllm_cache_dir>/<instance name>``: the host directory of one instance's caches."""
    return f"{config.settings.vllm_cache_dir.rstrip('/')}/{instance.name}"


def namespace(config: CacheHost) -> str:
    """The namespace of the host's image: the first :data:`NAMESPACE_HEX` hex of its digest.

    Example: digest ``sha256:0123456789abcdef...`` gives ``0123456789ab``.

    Raises:
        ValueError: the digest is not ``sha256:`` and 64 lowercase hex (the configuration refuses
            any other, ``rocmfleet.config.imageref.digest_problem``).
    """
    match = re.fullmatch(r"sha256:([0-9a-f]{64})", config.image.digest)
    if not match:
        raise ValueError(f"image digest {config.image.digest!r}: expected sha256: and 64 lowercase hex")
    return match[1][:NAMESPACE_HEX]


def namespace_root(config: CacheHost, instance: NamedInstance) -> str:
    """``<vllm_cache_dir>/<instance name>/<namespace>``: the host directory of ``instance``'s caches
    for the host's image (:func:`namespace`)."""
    return f"{instance_root(config, instance)}/{namespace(config)}"


def mounts(config: CacheHost, instance: NamedInstance) -> list[Mount]:
    """The cache mounts of ``instance``: none for a baked image, else one writable host directory
    per :data:`LAYOUT` entry under :func:`namespace_root` (Docker creates missing ones, as root).
    """
    if is_baked(config):
        return []
    root = namespace_root(config, instance)
    return [Mount(f"{root}/{d.name}", d.path) for d in LAYOUT]


def prepared(config: CacheHost, instance: NamedInstance) -> tuple[str, str] | None:
    """``(instance_root, namespace)`` that ``instance``'s unit prepares before each start
    (``vllm-unit.sh prepare-cache``: old namespaces removed, stale lock files cleared); ``None`` for
    a baked image, which has no host directories."""
    if is_baked(config):
        return None
    return instance_root(config, instance), namespace(config)


def aiter_seed_dir(config: CacheHost, instance: NamedInstance) -> str | None:
    """The host directory behind ``instance``'s ``AITER_JIT_DIR`` that its unit seeds with the
    image's prebuilt AITER modules before each start (``rocmfleet/scripts/vllm-unit.sh seed-aiter``);
    ``None`` for a baked image (its layer holds them: the bake seeds its directory the same way).

    Why: with ``AITER_JIT_DIR`` set, AITER imports modules from that directory only
    (ROCm/aiter ``aiter/jit/core.py``: ``get_user_jit_dir`` returns it, ``get_module_custom_op``
    imports the bare module name from ``sys.path``), so the ``*.so`` an image ships prebuilt in
    ``aiter/jit/`` would be built again, minutes each, in an empty per-instance directory.
    """
    if is_baked(config):
        return None
    return f"{namespace_root(config, instance)}/aiter"


def volume_args(config: CacheHost, instance: NamedInstance) -> list[str]:
    """``--volume`` arguments of :func:`mounts`, for ``docker run``."""
    return [arg for m in mounts(config, instance) for arg in ("--volume", m.arg())]


def writable_sharing(config: CacheHost) -> list[str]:
    """Writable cache directories that two instances of the host would share (one line each).

    A directory is shared when two instances mount the same host path writable, or one mounts a
    directory inside another's. Empty for every configuration :func:`mounts` produces; kept as
    the check the tests and ``rocmfleet check`` run.
    """
    owners = [
        (m.host.rstrip("/") + "/", i.name) for i in config.instances() for m in mounts(config, i) if not m.read_only
    ]
    problems = []
    for index, (path, owner) in enumerate(owners):
        for other_path, other in owners[index + 1 :]:
            if other != owner and (path.startswith(other_path) or other_path.startswith(path)):
                problems.append(f"instances {owner} and {other} share writable cache {path.rstrip('/')}")
    return problems


def layout_relative(container_path: str) -> str | None:
    """``<layout name>/<rest>`` of a file at a :data:`LAYOUT` container path (what :func:`writer_of`
    reads), e.g. ``/root/.triton/cache/ab/k.hsaco`` gives ``triton/ab/k.hsaco``; ``None`` outside them."""
    for d in LAYOUT:
        if container_path.startswith(d.path + "/"):
            return f"{d.name}/{container_path[len(d.path) + 1 :]}"
    return None


def writer_of(path: str) -> str:
    """Which compiler wrote ``path`` (relative to the bake directory or to the container's cache
    paths, ``<layout name>/...``, :func:`layout_relative`).

    Inside vLLM's cache (vllm/compilation/backends.py, compiler_interface.py):
    ``torch_compile_cache/torch_aot_compile/`` is vLLM's AOT compile, an ``inductor_cache`` or
    ``triton_cache`` directory below ``torch_compile_cache/<hash>/rank_*/`` is inductor's or
    Triton's when vLLM placed them there, the rest of ``torch_compile_cache`` is vLLM's
    torch.compile (Dynamo graphs, its cache index).
    """
    name, _, rest = path.partition("/")
    if name == "vllm":
        parts = rest.split("/")
        if parts[0] != "torch_compile_cache":
            return "vLLM (other)"
        if len(parts) > 1 and parts[1] == "torch_aot_compile":
            return "vLLM AOT compile"
        if "inductor_cache" in parts:
            return "TorchInductor (in vLLM's cache)"
        if "triton_cache" in parts:
            return "Triton (in vLLM's cache)"
        return "vLLM torch.compile"
    return {d.name: d.writer for d in LAYOUT}.get(name, f"unknown ({name})")
