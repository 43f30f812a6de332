"""Does the model fit? Weights per GPU plus the KV cache of one full-length sequence, against the
memory vLLM may use, checked before anything is deployed.

vLLM refuses to start when the KV cache left after loading the weights cannot hold one sequence of
``max_model_len`` tokens (``check_enough_kv_cache_memory``, vllm/v1/core/kv_cache_utils.py);
the 128B-at-TP-1 case of vLLM recipes PR 490 failed there, on the host. This module does the same
arithmetic from the profile: a lower bound (activations, CUDA graphs and the non-torch memory
vLLM also reserves are not counted), so a refusal is certain and a pass is necessary, not
sufficient.

Per GPU, in GiB (2**30 bytes):

- weights: ``weights_gib / TP`` (tensor parallelism shards the weights; vLLM replicates a few
  small ones, ignored here);
- KV cache per token: for attention with KV heads, ``layers × 2 (K and V) × kv_heads_per_gpu ×
  head_dim × bytes``, where ``kv_heads_per_gpu = max(1, kv_heads // TP)`` (vLLM
  ``ModelConfig.get_num_kv_heads``: heads are split across TP ranks, replicated when fewer than
  TP); for MLA (DeepSeek-V2/V3/R1), ``layers × (kv_lora_rank + qk_rope_head_dim) × bytes``,
  the same on every TP rank (the latent cache is not split by heads);
- bytes per element: 1 for ``kv_cache_dtype`` fp8*, else the model's ``dtype`` (4 for
  float32, 2 otherwise, including ``auto`` for BF16/FP16 checkpoints);
- budget: GPU memory × ``gpu_memory_utilization`` (vLLM's default 0.9, vllm/config/cache.py),
  where GPU memory is, on a host of a known part, the part's memory divided by its partitions in
  the profile's compute partition mode (:mod:`rocmfleet.domain.parttable`: 24 GiB per MI300X CPX
  partition, 48 per MI308X one); in validation, which knows no host, the profile's
  ``gpu_memory_gib`` divided by the fewest partitions any known part has in that mode.

The profile's ``model_memory`` comes from the model's ``config.json`` (``num_hidden_layers``,
``num_key_value_heads``, ``head_dim`` or ``hidden_size / num_attention_heads``, ``kv_lora_rank``,
``qk_rope_head_dim``) and ``model.safetensors.index.json`` (``metadata.total_size`` in bytes /
2**30 = ``weights_gib``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rocmfleet.domain.partitionmodes import ComputePartition
from rocmfleet.domain.parttable import PARTS, fewest_partitions

GIB = 2**30
#: vLLM's default ``gpu_memory_utilization`` (vllm-0.33.0 vllm/config/cache.py; 0.9 since 0.9.x).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: Parts with more memory than an MI300X, for the advice: ``MI325X 256, MI350X 288, ...``.
_LARGER = ", ".join(f"{p.name} {p.memory_gib:g}" for p in PARTS if p.memory_gib > 192)
#: TP sizes tried for "the smallest TP that fits" (GPUs per MI300X host: 8).
TP_CANDIDATES = (1, 2, 4, 8)


class ModelMemory(BaseModel):
    """What the model needs in memory: weight size and the attention shape its KV cache has."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "8" or true is no count

    # Upper bounds: far above any published model (DeepSeek-V3: 61 layers, 642 GiB; Llama 4
    # Maverick: 48 layers; 10M tokens is the longest served context, as max_model_len's bound), so
    # that only a typo (an extra zero, bytes for GiB) is refused.
    weights_gib: float = Field(
        gt=0, le=65536, description="`metadata.total_size` of model.safetensors.index.json / 2**30 (at most 64 TiB)"
    )
    num_hidden_layers: int = Field(ge=1, le=1024, description="config.json `num_hidden_layers`")
    num_key_value_heads: int | None = Field(default=None, ge=1, le=4096, description="config.json (GQA/MHA)")
    head_dim: int | None = Field(
        default=None, ge=1, le=4096, description="config.json, or hidden_size / num_attention_heads"
    )
    kv_lora_rank: int | None = Field(default=None, ge=1, le=65536, description="config.json (MLA: DeepSeek)")
    qk_rope_head_dim: int | None = Field(default=None, ge=0, le=4096, description="config.json (MLA)")
    max_position_embeddings: int | None = Field(
        default=None,
        ge=1,
        le=10_485_760,
        description="config.json; the sequence length when the profile sets no max_model_len",
    )

    @model_validator(mode="after")
    def _one_shape(self) -> ModelMemory:
        heads = self.num_key_value_heads is not None and self.head_dim is not None
        mla = self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        if heads == mla:
            raise ValueError(
                "give either num_key_value_heads and head_dim (attention with KV heads) "
                "or kv_lora_rank and qk_rope_head_dim (MLA), not both or neither"
            )
        return self

    def kv_bytes_per_token(self, tp: int, element_bytes: int) -> int:
        """KV-cache bytes one token takes on one GPU at tensor parallel size ``tp``."""
        if self.kv_lora_rank is not None:
            return self.num_hidden_layers * (self.kv_lora_rank + (self.qk_rope_head_dim or 0)) * element_bytes
        heads = max(1, (self.num_key_value_heads or 1) // tp)
        return self.num_hidden_layers * 2 * heads * (self.head_dim or 0) * element_bytes


class FitSettings(Protocol):
    """What the arithmetic reads of a profile (:class:`rocmfleet.config.profiles.Profile` has it)."""

    @property
    def model_memory(self) -> ModelMemory | None: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def attention_heads(self) -> int | None: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def kv_cache_dtype(self) -> str | None: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def gpu_memory_gib(self) -> float: ...
    @property
    def gpu_memory_utilization(self) -> float | None: ...
    @property
    def compute_partition(self) -> ComputePartition: ...


@dataclass(frozen=True)
class Fit:
    """The arithmetic at one TP size, in GiB per GPU."""

    tp: int
    weights_gib: float
    kv_gib: float
    tokens: int
    kv_bytes_per_token: int
    device_gib: float
    utilization: float

    @property
    def need_gib(self) -> float:
        return self.weights_gib + self.kv_gib

    @property
    def budget_gib(self) -> float:
        return self.device_gib * self.utilization

    @property
    def fits(self) -> bool:
        return self.need_gib <= self.budget_gib


def element_bytes(kv_cache_dtype: str | None, dtype: str | None) -> int:
    """Bytes per KV-cache element: 1 for fp8 KV caches, 4 for float32 models, else 2."""
    if kv_cache_dtype and kv_cache_dtype.startswith("fp8"):
        return 1
    return 4 if dtype in ("float", "float32") else 2


def fit(profile: FitSettings, tp: int | None = None, device_gib: float | None = None) -> Fit | None:
    """The per-GPU arithmetic for ``profile`` at ``tp`` (default: its own), or ``None`` without
    ``model_memory``. Tokens: ``max_model_len``, else ``max_position_embeddings``, else 0 (weights only).

    Args:
        profile: the profile.
        tp: the TP size to try.
        device_gib: memory of one ROCm device, GiB, when the host's part is known
            (:func:`rocmfleet.domain.parttable.device_gib`); default: the profile's ``gpu_memory_gib``
            over the fewest partitions a known part has in its compute partition mode.
    """
    mem = profile.model_memory
    if mem is None:
        return None
    tp = tp or profile.tensor_parallel_size
    tokens = profile.max_model_len or mem.max_position_embeddings or 0
    per_token = mem.kv_bytes_per_token(tp, element_bytes(profile.kv_cache_dtype, profile.dtype))
    return Fit(
        tp=tp,
        weights_gib=mem.weights_gib / tp,
        kv_gib=per_token * tokens / GIB,
        tokens=tokens,
        kv_bytes_per_token=per_token,
        device_gib=device_gib or profile.gpu_memory_gib / fewest_partitions(profile.compute_partition)[0],
        utilization=profile.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
    )


def smallest_tp(profile: FitSettings, device_gib: float | None = None) -> int | None:
    """The smallest TP of :data:`TP_CANDIDATES` at which the profile fits (and that divides its
    ``attention_heads`` when given), or ``None``."""
    for tp in TP_CANDIDATES:
        if profile.attention_heads and profile.attention_heads % tp:
            continue
        result = fit(profile, tp, device_gib)
        if result is not None and result.fits:
            return tp
    return None


def problems(profile: FitSettings, device_gib: float | None = None, device: str = "") -> list[str]:
    """One line when the profile does not fit at its TP, with the numbers and the smallest TP that fits.

    Args:
        profile: the profile.
        device_gib: memory of one ROCm device of the host's part, GiB (see :func:`fit`).
        device: what that device is, for the message, e.g. ``"one CPX partition of an MI308X's 192 GiB"``.
    """
    result = fit(profile, None, device_gib)
    if result is None or result.fits or profile.model_memory is None:
        return []
    validating = device_gib is None
    if not device and profile.compute_partition != "SPX":
        count, part = fewest_partitions(profile.compute_partition)
        device = (
            f"one {profile.compute_partition} partition of gpu_memory_gib {profile.gpu_memory_gib:g} GiB, split "
            f"{count} ways as on an {part}, the fewest of any known part"
        )
    device = f"{result.device_gib:g} GiB" + (f" ({device})" if device else "")
    smallest = smallest_tp(profile, device_gib)
    advice = (
        f"the smallest tensor_parallel_size that fits is {smallest}"
        if smallest
        else f"it fits at no tensor_parallel_size up to {TP_CANDIDATES[-1]}"
    )
    if validating:  # the profile's gpu_memory_gib: a part with more memory says so there
        advice += f"; for a part with more memory, set gpu_memory_gib to it ({_LARGER})"
    return [
        f"model_memory: does not fit at tensor_parallel_size {result.tp}: each GPU needs "
        f"{result.weights_gib:.1f} GiB of weights ({profile.model_memory.weights_gib:g} GiB / TP {result.tp}) + "
        f"{result.kv_gib:.2f} GiB of KV cache for one sequence of {result.tokens} tokens "
        f"({result.kv_bytes_per_token} bytes/token) = {result.need_gib:.1f} GiB, more than {device} x "
        f"gpu_memory_utilization {result.utilization:g} = {result.budget_gib:.1f} GiB; {advice}"
    ]
