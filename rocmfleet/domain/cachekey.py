"""When a baked compile cache is valid: the cache key, and the refusal that names what differs.

A cache baked into an image (``rocmfleet cache bake``) is only what a new instance would compile
when everything that goes into the compilers' own keys is the same (``../shared/reference/mi300x.md``
§6): Triton and AITER key on the GPU architecture (``gfx942``) and their own builds (the image);
vLLM's torch.compile cache directory is a hash of its environment, its config and the model code;
CUDA-graph capture sizes follow ``max_num_seqs`` and the cudagraph mode. :class:`CacheKey` holds
all of it:

* from the **image**: the base image digest, the ROCm version inside it (``/opt/rocm/.info/version``)
  and its vLLM version (``vllm.__version__``), read at bake time;
* from the **host**: the GPUs' LLVM target (``gfx942``, KFD ``gfx_target_version``);
* from the **profile**: model and revision (its ``revision``; ``None`` is unpinned or a local path),
  and every serving setting that changes compiled code: TP, max-num-batched-tokens, max-model-len,
  max-num-seqs (capture sizes), dtype, kv-cache dtype, quantization, block size, attention backend,
  cudagraph mode, V1, the AITER switches, ``extra_args`` (all of them: an unknown flag may change
  compiled code, so it counts), and the compile-relevant container environment
  (:data:`ENV_PREFIXES`, without the device-visibility and cache-path variables).

Settings that change no compiled code (ports, served name, ``gpu_memory_utilization``, request
logging, readiness probe, benchmark) are not in the key, so changing them keeps a baked image valid.

:meth:`CacheKey.digest` is the sha256 of the key's canonical JSON (sorted keys, no spaces, with
:data:`KEY_VERSION`); the baked tag carries its first 12 hex (:func:`rocmfleet.domain.cachedirs.baked_tag`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rocmfleet.domain import cachedirs, cacheproof, envpolicy


class KeyedProfile(envpolicy.EnvProfile, Protocol):
    """What the key reads of a profile (:class:`rocmfleet.config.profiles.Profile` has it): besides what the
    environment policy reads, its name, model, revision, extra arguments and the :data:`SERVING_FIELDS` (read
    by name)."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def extra_args(self) -> Sequence[str]: ...


class HostEnv(Protocol):
    """The host's own container environment (``vllm_env``)."""

    @property
    def vllm_env(self) -> Mapping[str, str]: ...


class KeyedConfig(Protocol):
    """What the key reads of a host's configuration (:class:`rocmfleet.config.settings.HostConfig` has it)."""

    @property
    def profile(self) -> KeyedProfile: ...
    @property
    def settings(self) -> HostEnv: ...


#: Bumped when the key's fields or their meaning change: every older bake becomes invalid.
KEY_VERSION = 1
#: Image labels a baked image carries.
LABEL_KEY = "org.rocmfleet.cache-key"
LABEL_HASH = "org.rocmfleet.cache-key-sha256"
LABEL_MANIFEST = "org.rocmfleet.cache-manifest"
LABEL_BASE = "org.rocmfleet.base-image"
#: Container variables whose values can change compiled code (vLLM's own compile hash covers the
#: ``VLLM_*`` it reads; inductor and Triton read ``TORCH*``/``TRITON_*``; AITER ``AITER_*``; the HIP
#: runtime ``HIP_*``/``HSA_*``/``GPU_*``/``ROCM_*``/``MIOPEN_*``/``PYTORCH_*``).
ENV_PREFIXES = ("VLLM_", "TORCH", "TRITON_", "AITER_", "HIP_", "HSA_", "GPU_", "ROCM_", "MIOPEN_", "PYTORCH_")
#: Never in the key: which devices an instance sees and where its caches live are the instance's;
#: ``VLLM_FORCE_AOT_LOAD`` says only whether a miss is an error (vLLM leaves it out of its own hash:
#: vllm-0.32.0 ``vllm/envs.py`` L2383), and a baked image's containers get it, its bake's do not
#: (:func:`rocmfleet.domain.cacheproof.strict_env`).
ENV_EXCLUDED = frozenset(
    {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", cacheproof.STRICT_LOAD[0]}
) | (cachedirs.VARIABLES)
#: The profile's :class:`~rocmfleet.domain.flags.ServingSettings` that are in the key (module docstring).
SERVING_FIELDS = (
    "tensor_parallel_size",
    "max_num_batched_tokens",
    "max_model_len",
    "max_num_seqs",
    "dtype",
    "kv_cache_dtype",
    "quantization",
    "block_size",
    "attention_backend",
    "cudagraph_mode",
    "use_v1",
    "aiter",
    "aiter_mha",
    "aiter_mla",
    "aiter_moe",
    "aiter_linear",
    "aiter_rmsnorm",
)


class ImageFacts(BaseModel):
    """What the bake reads from the base image: its digest, ROCm and vLLM versions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    rocm_version: str = Field(description="`/opt/rocm/.info/version`; empty when the image has none")
    vllm_version: str = Field(min_length=1, description="`vllm.__version__` inside the image")


class CacheKey(BaseModel):
    """Everything a baked compile cache depends on (module docstring). Equal keys: the cache is valid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_version: int = KEY_VERSION
    base_digest: str
    gpu_arch: str = Field(pattern=r"^gfx[0-9a-f]+$")
    rocm_version: str
    vllm_version: str
    model: str
    model_revision: str | None
    tensor_parallel_size: int
    max_num_batched_tokens: int | None
    max_model_len: int | None
    max_num_seqs: int | None
    dtype: str | None
    kv_cache_dtype: str | None
    quantization: str | None
    block_size: int | None
    attention_backend: str | None
    cudagraph_mode: str | None
    use_v1: bool | None
    aiter: bool | None
    aiter_mha: bool | None
    aiter_mla: bool | None
    aiter_moe: bool | None
    aiter_linear: bool | None
    aiter_rmsnorm: bool | None
    extra_args: tuple[str, ...]
    env: dict[str, str]

    def canonical(self) -> str:
        """The key as canonical JSON: sorted keys, no whitespace (what :meth:`digest` hashes)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """sha256 hex of :meth:`canonical`."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    @property
    def short(self) -> str:
        """The first 12 hex of :attr:`digest` (the baked tag's suffix)."""
        return self.digest[:12]


def compile_env(config: KeyedConfig, gpu_arch: str) -> dict[str, str]:
    """The container variables of ``config`` that can change compiled code (:data:`ENV_PREFIXES`),
    as :func:`rocmfleet.domain.envpolicy.rendered_env` on ``gpu_arch`` plus the host's ``vllm_env``."""
    env = {**envpolicy.rendered_env(config.profile, gpu_arch), **config.settings.vllm_env}
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES) and k not in ENV_EXCLUDED}


def instance_key(config: KeyedConfig, gpu_arch: str, image: ImageFacts) -> CacheKey:
    """The key of ``config``'s instances on GPUs of ``gpu_arch`` with the image of ``image``.

    Args:
        config: the host's validated configuration (its profile gives model and settings).
        gpu_arch: the GPUs' LLVM target, e.g. ``gfx942`` (:attr:`rocmfleet.domain.topology.Gpu.gfx_arch`).
        image: the base image's facts (at bake time: read from the image; when checking a baked
            image: the ones its key label records).
    """
    profile = config.profile
    serving = {name: getattr(profile, name) for name in SERVING_FIELDS}
    serving["tensor_parallel_size"] = profile.tensor_parallel_size
    return CacheKey(
        base_digest=image.base_digest,
        gpu_arch=gpu_arch,
        rocm_version=image.rocm_version,
        vllm_version=image.vllm_version,
        model=profile.model,
        model_revision=profile.revision,
        extra_args=tuple(profile.extra_args),
        env=compile_env(config, gpu_arch),
        **serving,
    )


def differences(baked: CacheKey, wanted: CacheKey) -> list[tuple[str, Any, Any]]:
    """``(field, baked value, wanted value)`` for each field that differs, in field order
    (for ``env``, one entry per differing variable, named ``env.NAME``)."""
    found = []
    for name in CacheKey.model_fields:
        a, b = getattr(baked, name), getattr(wanted, name)
        if a == b:
            continue
        if name == "env":
            for var in sorted(set(a) | set(b)):
                if a.get(var) != b.get(var):
                    found.append((f"env.{var}", a.get(var), b.get(var)))
        else:
            found.append((name, a, b))
    return found


def key_from_labels(labels: Mapping[str, str] | None) -> CacheKey:
    """The :class:`CacheKey` an image's labels carry (``docker image inspect``'s ``.Config.Labels``).

    Raises:
        ValueError: no :data:`LABEL_KEY` label, a label that is not a key, or a key whose digest is
            not the :data:`LABEL_HASH` label's (the label was edited).
    """
    text = (labels or {}).get(LABEL_KEY)
    if not text:
        raise ValueError(f"no {LABEL_KEY} label: not an image baked by rocmfleet")
    try:
        key = CacheKey.model_validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"label {LABEL_KEY} is not a rocmfleet cache key: {exc.errors()[0]['msg']}") from None
    recorded = (labels or {}).get(LABEL_HASH)
    if recorded and recorded != key.digest:
        raise ValueError(f"label {LABEL_HASH} {recorded[:12]} does not match the key it labels ({key.short})")
    return key


def refusal(image_ref: str, labels: Mapping[str, str] | None, config: KeyedConfig, gpu_arch: str) -> list[str]:
    """Why a baked image must not run ``config``'s instances on ``gpu_arch`` GPUs; empty when it may.

    The deploy (before the unit is written) and ``rocmfleet check`` call this with the labels of
    the image the host data names. An image whose tag is not a baked tag is never refused here.
    The image facts are the ones the label records (they describe the image itself); the tag's key
    must be the label's, and every other field must be what the instance would compile.

    Args:
        image_ref: ``repository:tag@digest``, for the messages.
        labels: the image's labels (``None``: it has none, or it is not pulled).
        config: the host's configuration.
        gpu_arch: the host's GPUs' LLVM target.

    Returns:
        one line per problem, naming the field: ``baked image R: cache key field
        tensor_parallel_size is 8 in the image, 4 for this instance; bake again ...``.
    """
    tag = image_ref.split("@", 1)[0].rsplit(":", 1)[-1]
    tag_key = cachedirs.baked_key_of(tag)
    if tag_key is None:
        return []
    try:
        baked = key_from_labels(labels)
    except ValueError as exc:
        return [f"baked image {image_ref}: {exc}"]
    problems = []
    if baked.short != tag_key:
        problems.append(f"baked image {image_ref}: its tag names key {tag_key}, its label holds key {baked.short}")
    facts = ImageFacts.model_construct(
        base_digest=baked.base_digest, rocm_version=baked.rocm_version, vllm_version=config.profile.vllm_version
    )
    wanted = instance_key(config, gpu_arch, facts)
    if baked.key_version != KEY_VERSION:
        problems.append(
            f"baked image {image_ref}: cache key version {baked.key_version}, this rocmfleet uses {KEY_VERSION}"
        )
    for name, have, want in differences(baked, wanted):
        if name == "key_version":
            continue
        problems.append(
            f"baked image {image_ref}: cache key field {name} is {have!r} in the image, {want!r} for this "
            f"instance (profile {config.profile.name}); bake again with `rocmfleet cache bake` or deploy the base image"
        )
    return problems
