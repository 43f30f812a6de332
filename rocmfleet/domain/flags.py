"""What an abstract serving setting becomes for a given vLLM version on ROCm, kept as data.

:data:`FLAGS` is the table: one :class:`Flag` per (setting, value, vLLM version range), naming
the environment variable, ``vllm serve`` flag or ``--compilation-config`` key it renders to
and its source. :func:`render` reads it; it never guesses: a setting the target vLLM does not
know is refused with :class:`FlagError`, naming the setting, the version and the replacement.

Sources (``../shared/reference/mi300x.md`` §4.1–4.5 and its §9 tags; lines are inside the PyPI
sdists). The reference sampled 0.9.2, 0.10.1.1, 0.11.0, 0.14.0 and 0.33.0; the version bounds
below were narrowed with the sdists of 0.9.0, 0.9.1, 0.10.0, 0.10.1, 0.11.1, 0.11.2, 0.12.0
and 0.13.0, so every bound is the first release that has (``since``) or lacks (``until``) the
thing. Releases between 0.14.0 and 0.33.0 were not checked: forms present in both are assumed
present throughout, and removals are dated only as "absent in 0.33.0".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

#: Oldest vLLM the table knows, and the newest release series (0.33.x).
OLDEST_KNOWN = "0.9.0"
NEWEST_KNOWN = "0.33"
#: The oldest version the table knows, and the first beyond the newest series it knows.
LOWEST_VERSION = Version(OLDEST_KNOWN)
BEYOND_VERSION = Version("0.34.0.dev0")

#: ``--kv-cache-dtype`` values every known version accepts (vllm-0.9.2 vllm/config.py L1477
#: ``CacheDType``; 0.33.0 accepts more). MI300X's fp8 is the fnuz variant (reference §4.5).
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
#: ``--quantization`` methods the ROCm platform supports in both 0.9.2 and 0.33.0
#: (``supported_quantization``: vllm-0.9.2 vllm/platforms/rocm.py L170, vllm-0.33.0 L668).
Quantization = Literal["awq", "gptq", "fp8", "compressed-tensors", "fbgemm_fp8", "quark"]
#: ROCm attention backends of ``AttentionBackendEnum`` (reference §4.3, [V-registry]).
AttentionBackend = Literal[
    "ROCM_ATTN",
    "ROCM_AITER_FA",
    "ROCM_AITER_UNIFIED_ATTN",
    "ROCM_AITER_MLA",
    "ROCM_AITER_TRITON_MLA",
    "ROCM_AITER_MLA_SPARSE",
    "TRITON_ATTN",
    "TRITON_MLA",
    "FLEX_ATTENTION",
    "ROCM_SEGMENTED_ATTN",
    "TURBOQUANT",
    "ROCM_OCTAVE",
    "ULTRAQUANT",
]
#: ``compilation_config.cudagraph_mode`` (reference §4.4, [V-comp] vllm-0.33.0
#: vllm/config/compilation.py L53–63).
CudagraphMode = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]


@dataclass(frozen=True)
class Rendered:
    """Container environment and ``vllm serve`` arguments (model, host and port not included): what
    :func:`rocmfleet.domain.flagrender.render` makes of :class:`ServingSettings`."""

    env: dict[str, str]
    args: list[str]


class FlagError(ValueError):
    """Settings that cannot be rendered for a vLLM version; one line per problem in ``problems``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ServingSettings(BaseModel):
    """Version-neutral serving settings; ``None`` leaves vLLM's default (nothing is rendered)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "8" or true is no count

    # Upper bounds: 64 GPUs on a CPX host; 10M tokens is Llama 4 Scout's context, the longest served.
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=64)
    max_model_len: int | None = Field(default=None, ge=1, le=10_485_760)
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=10_485_760)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_cache_dtype: KvCacheDtype | None = None
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = None
    quantization: Quantization | None = None
    block_size: Literal[1, 8, 16, 32, 64, 128] | None = None
    disable_log_requests: bool | None = Field(default=None, description="true: do not log requests; false: log them.")
    attention_backend: AttentionBackend | None = None
    cudagraph_mode: CudagraphMode | None = None
    trust_remote_code: bool | None = None
    use_v1: bool | None = Field(default=None, description="V1 engine (the only one from vLLM 0.11.1).")
    aiter: bool | None = Field(default=None, description="AITER master switch.")
    aiter_mha: bool | None = None
    aiter_mla: bool | None = None
    aiter_moe: bool | None = Field(default=None, description="AITER fused MoE.")
    aiter_linear: bool | None = Field(
        default=None, description="AITER linear: scaled_mm and block-scaled FP8 GEMM (DeepSeek)."
    )
    aiter_rmsnorm: bool | None = None
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="Other container environment; never a variable the table renders."
    )
    extra_args: list[str] = Field(
        default_factory=list, description="Other `vllm serve` arguments; never a flag the table renders."
    )


def compact_json(obj: dict[str, Any]) -> str:
    """``obj`` as the one JSON text of ``--compilation-config``: keys sorted, so a render is stable."""
    return json.dumps(obj, sort_keys=True)


ANY = "*"
Kind = Literal["env", "arg", "json", "default"]


@dataclass(frozen=True)
class Flag:
    """One table row: ``setting`` (at ``value``, or any value) in ``since <= vLLM < until``.

    ``kind`` ``env``: environment variable ``name``; ``arg``: CLI flag ``name`` (a bool
    setting gives a bare flag); ``json``: key ``name`` of ``--compilation-config``;
    ``default``: nothing, that vLLM already behaves so. ``out`` overrides the rendered value.
    ``note`` is said when the row is why a setting is refused (what replaces it).
    ``requires``/``needs`` is a check on the other settings that this rendering depends on.
    """

    setting: str
    value: Any
    since: str
    until: str | None
    kind: Kind
    name: str | None
    source: str
    out: Any = None
    note: str = ""
    requires: Callable[[ServingSettings], bool] | None = field(default=None, compare=False)
    needs: str = ""

    def matches(self, value: Any) -> bool:
        if self.value == ANY:
            return True
        if isinstance(self.value, frozenset):
            return value in self.value
        return type(value) is type(self.value) and value == self.value

    def applies(self, version: Version) -> bool:
        return Version(self.since) <= version and (self.until is None or version < Version(self.until))

    def rendered(self, value: Any) -> Any:
        if self.out is not None:
            return self.out
        if isinstance(value, bool):
            return ("1" if value else "0") if self.kind == "env" else True  # a row per value: bare flag
        return value

    @property
    def key(self) -> str:
        """``name`` of an ``env``, ``arg`` or ``json`` row (every such row has one; ``default`` rows have none)."""
        if self.name is None:
            raise ValueError(f"flag row {self.setting}={self.value!r} ({self.kind}) renders nothing: it has no name")
        return self.name

    def describe(self, value: Any) -> str:
        """``VLLM_USE_V1=0``, ``--attention-backend ROCM_ATTN``, ``--compilation-config {...}``."""
        out = self.rendered(value)
        if self.kind == "env":
            return f"{self.key}={out}"
        if self.kind == "json":
            return f"--compilation-config {compact_json({self.key: out})}"
        return self.key if out is True else f"{self.key} {out}"


def _aiter_mha_off(s: ServingSettings) -> bool:
    return not s.aiter or s.aiter_mha is False


_V092_ROCM_ATTN = "vllm-0.9.2 vllm/platforms/rocm.py L224–232, vllm-0.12.0 vllm/platforms/rocm.py L287–316"
_MHA_OFF = (
    "aiter_mha=false when aiter=true: AITER FA wins over it before vLLM 0.13 (VLLM_ROCM_USE_AITER_MHA "
    "defaults to True; AMD vLLM 0.9.x blog, 'Triton Prefill-Decode Attention')"
)
#: ROCm backends that only vLLM 0.33.0 knows (absent from the 0.14 registry).
_CLI_BACKENDS_033 = frozenset({"ROCM_SEGMENTED_ATTN", "TURBOQUANT", "ROCM_OCTAVE", "ULTRAQUANT"})
#: The rest of the ROCm backends: accepted by ``--attention-backend`` since vLLM 0.13.0.
_CLI_BACKENDS = frozenset(get_args(AttentionBackend)) - _CLI_BACKENDS_033


def _plain(setting: str, flag: str, l092: int, l033: int) -> Flag:
    """A ``vllm serve`` flag every known version has (reference §4.5 rows, [V-grep])."""
    return Flag(
        setting,
        ANY,
        OLDEST_KNOWN,
        None,
        "arg",
        flag,
        f"vllm-0.9.2 vllm/engine/arg_utils.py L{l092}; vllm-0.33.0 vllm/engine/arg_utils.py L{l033}",
    )


def _aiter(setting: str, env: str, since: str, l092: int, l033: int, extra: str = "") -> Flag:
    """A ``VLLM_ROCM_USE_AITER*`` switch (reference §4.1 [V-envs], §4.2)."""
    return Flag(
        setting,
        ANY,
        since,
        None,
        "env",
        env,
        f"vllm-0.9.2 vllm/envs.py L{l092}; vllm-0.33.0 vllm/envs.py L{l033}{extra}",
    )


#: The table. Arguments are rendered in this order (the order of AMD's published commands).
# fmt: off
FLAGS: tuple[Flag, ...] = (
    # Engine: VLLM_USE_V1 (reference §4.2, §4.5 "Engine").
    Flag("use_v1", ANY, OLDEST_KNOWN, "0.11.1", "env", "VLLM_USE_V1",
         "vllm-0.9.2 vllm/envs.py L637; vllm-0.11.0 vllm/envs.py L900; absent from vllm-0.11.1 vllm/envs.py",
         note="no replacement: V0 is gone and V1 is the only engine"),
    Flag("use_v1", True, "0.11.1", None, "default", None,
         "V1 only: VLLM_USE_V1 absent from vllm/envs.py from 0.11.1 (0.14.0, 0.33.0 [V-envs-hist])"),
    # AITER switches (reference §4.1, §4.2).
    _aiter("aiter", "VLLM_ROCM_USE_AITER", OLDEST_KNOWN, 642, 1267),
    _aiter("aiter_rmsnorm", "VLLM_ROCM_USE_AITER_RMSNORM", OLDEST_KNOWN, 666, 1326),
    _aiter("aiter_mha", "VLLM_ROCM_USE_AITER_MHA", "0.9.2", 678, 1350, "; absent from vllm-0.9.1"),
    _aiter("aiter_mla", "VLLM_ROCM_USE_AITER_MLA", OLDEST_KNOWN, 672, 1331),
    _aiter("aiter_moe", "VLLM_ROCM_USE_AITER_MOE", OLDEST_KNOWN, 661, 1296),
    _aiter("aiter_linear", "VLLM_ROCM_USE_AITER_LINEAR", OLDEST_KNOWN, 655, 1288,
           "; block-scaled FP8 GEMM gate: vllm-0.9.2 vllm/model_executor/layers/quantization/fp8.py L194–199; "
           "AMD vLLM 0.9.x blog: 'set both VLLM_ROCM_USE_AITER and VLLM_ROCM_USE_AITER_LINEAR to 1'"),
    # Attention backend before --attention-backend existed (reference §4.2, §4.3, §4.5).
    Flag("attention_backend", "ROCM_ATTN", "0.9.2", "0.13.0", "env", "VLLM_V1_USE_PREFILL_DECODE_ATTENTION",
         f"vllm-0.9.2 vllm/envs.py L311; {_V092_ROCM_ATTN}", out="1",
         requires=_aiter_mha_off, needs=_MHA_OFF),
    Flag("attention_backend", "TRITON_ATTN", "0.9.2", "0.13.0", "default", None,
         f"V1 default without AITER MHA: {_V092_ROCM_ATTN}", requires=_aiter_mha_off, needs=_MHA_OFF),
    Flag("attention_backend", "ROCM_AITER_FA", "0.9.2", "0.13.0", "default", None,
         "chosen when VLLM_ROCM_USE_AITER and VLLM_ROCM_USE_AITER_MHA: vllm-0.9.2 vllm/platforms/rocm.py L225",
         requires=lambda s: bool(s.aiter) and s.aiter_mha is not False, needs="aiter=true and aiter_mha not false"),
    Flag("attention_backend", "ROCM_AITER_MLA", "0.9.2", "0.13.0", "env", "VLLM_ATTENTION_BACKEND",
         "vllm-0.9.2 vllm/envs.py L412, vllm/platforms/rocm.py L179–213 (block size 1 only)",
         requires=lambda s: s.block_size == 1, needs="block_size=1 (AMD vLLM V1 optimization guide [A6])"),
    Flag("attention_backend", "TRITON_MLA", "0.9.2", "0.13.0", "env", "VLLM_ATTENTION_BACKEND",
         "vllm-0.9.2 vllm/envs.py L412, vllm/platforms/rocm.py L188–199 (not block size 1)",
         requires=lambda s: s.block_size != 1, needs="block_size other than 1"),
    # Serving shape (reference §4.5).
    _plain("tensor_parallel_size", "--tensor-parallel-size", 653, 1209),
    _plain("max_model_len", "--max-model-len", 522, 991),
    _plain("max_num_seqs", "--max-num-seqs", 867, 1754),
    _plain("max_num_batched_tokens", "--max-num-batched-tokens", 865, 1740),
    _plain("gpu_memory_utilization", "--gpu-memory-utilization", 721, 1389),
    _plain("kv_cache_dtype", "--kv-cache-dtype", 724, 1397),
    _plain("dtype", "--dtype", 508, 977),
    _plain("quantization", "--quantization", 524, 992),
    _plain("block_size", "--block-size", 720, 1387),
    # Request logging (reference §4.5 "Request logging" [V-logreq]).
    Flag("disable_log_requests", True, OLDEST_KNOWN, "0.10.1", "arg", "--disable-log-requests",
         "vllm-0.9.2 vllm/engine/arg_utils.py L1718, vllm/entrypoints/openai/api_server.py L1228"),
    Flag("disable_log_requests", True, "0.10.1", None, "default", None,
         "enable_log_requests=False by default: vllm-0.10.1 vllm/engine/arg_utils.py L1721; "
         "vllm-0.33.0 vllm/engine/arg_utils.py L3247"),
    Flag("disable_log_requests", False, OLDEST_KNOWN, "0.10.1", "default", None,
         "requests logged by default: vllm-0.9.2 vllm/entrypoints/openai/api_server.py L1228"),
    Flag("disable_log_requests", False, "0.10.1", None, "arg", "--enable-log-requests",
         "vllm-0.10.1 vllm/engine/arg_utils.py L1748; vllm-0.33.0 vllm/engine/arg_utils.py L3260"),
    # Attention backend by flag (reference §4.3 "How to select" [V-attn-doc]).
    Flag("attention_backend", _CLI_BACKENDS, "0.13.0", None, "arg", "--attention-backend",
         "vllm-0.13.0 vllm/engine/arg_utils.py L727; vllm-0.33.0 vllm/engine/arg_utils.py L1114; "
         "names: vllm-0.13.0 vllm/attention/backends/registry.py, vllm-0.33.0 vllm/v1/attention/backends/registry.py"),
    Flag("attention_backend", _CLI_BACKENDS_033, "0.33.0", None, "arg", "--attention-backend",
         "vllm-0.33.0 vllm/v1/attention/backends/registry.py (not in 0.14.0's)"),
    # CUDA graphs (reference §4.4, §4.5 "Full CUDA graph").
    Flag("cudagraph_mode", "FULL", OLDEST_KNOWN, "0.10.1", "json", "full_cuda_graph",
         "vllm-0.9.2 vllm/config.py L4079, --compilation-config vllm/engine/arg_utils.py L915 [V092-config]",
         out=True),
    Flag("cudagraph_mode", ANY, "0.10.1", None, "json", "cudagraph_mode",
         "vllm-0.10.1 vllm/config/compilation.py L226; vllm-0.33.0 vllm/config/compilation.py L610 [V-comp]",
         note="before it only cudagraph_mode=FULL renders (full_cuda_graph)"),
    Flag("trust_remote_code", True, OLDEST_KNOWN, None, "arg", "--trust-remote-code",
         "vllm-0.9.2 vllm/engine/arg_utils.py L506; vllm-0.33.0 vllm/engine/arg_utils.py L975"),
    Flag("trust_remote_code", False, OLDEST_KNOWN, None, "default", None, "off by default (same lines)"),
)
# fmt: on


@dataclass(frozen=True)
class Removed:
    """An environment variable or flag that a vLLM release dropped (reference §4.2, §4.5)."""

    name: str
    gone: str  # first checked release without it
    when: str  # "in vLLM X", or "after vLLM X (...)" where releases in between were not checked
    use: str  # the replacement, or "no replacement"
    source: str


# fmt: off
REMOVED: tuple[Removed, ...] = (
    Removed("VLLM_USE_V1", "0.11.1", "in vLLM 0.11.1", "use_v1=true renders nothing there; V1 is the only engine",
            "vllm-0.11.0 vllm/envs.py L900; absent from vllm-0.11.1"),
    Removed("VLLM_USE_TRITON_FLASH_ATTN", "0.11.1", "in vLLM 0.11.1", "attention_backend",
            "vllm-0.11.0 vllm/envs.py L484; absent from vllm-0.11.1"),
    Removed("VLLM_USE_AITER_UNIFIED_ATTENTION", "0.11.1",
            "in vLLM 0.11.1 (renamed VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION)",
            "attention_backend=ROCM_AITER_UNIFIED_ATTN (--attention-backend, vLLM >=0.13)",
            "vllm-0.11.0 vllm/envs.py L496; vllm-0.11.1 vllm/envs.py L946"),
    Removed("VLLM_V1_USE_PREFILL_DECODE_ATTENTION", "0.33.0", "after vLLM 0.14.0 (deprecated there; absent in 0.33.0)",
            "attention_backend=ROCM_ATTN (--attention-backend ROCM_ATTN)",
            "vllm-0.14.0 vllm/envs.py L571; absent from vllm-0.33.0 vllm/envs.py"),
    Removed("VLLM_ATTENTION_BACKEND", "0.33.0", "after vLLM 0.14.0 (deprecated there; absent in 0.33.0)",
            "attention_backend=<NAME> (--attention-backend NAME)",
            "vllm-0.14.0 vllm/envs.py L687 [V-attn-cfg]; absent from vllm-0.33.0"),
    Removed("VLLM_ROCM_CUSTOM_PAGED_ATTN", "0.33.0", "after vLLM 0.14.0 (absent in 0.33.0)", "no replacement",
            "vllm-0.14.0 vllm/envs.py L1018; absent from vllm-0.33.0"),
    Removed("VLLM_ROCM_USE_AITER_PAGED_ATTN", "0.33.0", "after vLLM 0.14.0 (absent in 0.33.0)", "no replacement",
            "vllm-0.14.0 vllm/envs.py L950; absent from vllm-0.33.0"),
    Removed("--disable-log-requests", "0.17.0",
            "after vLLM 0.16.0 (deprecated from 0.10.1; 0.33.0 has it again, as the inverse of --enable-log-requests)",
            "disable_log_requests=true (the default from 0.10.1; --enable-log-requests turns logging on)",
            "vllm-0.14.0 vllm/engine/arg_utils.py L2057; the PyPI sdists (rocmfleet/domain/vllm_serve_flags.json)"),
    Removed("--num-scheduler-steps", "0.10.1", "in vLLM 0.10.1", "no replacement (--async-scheduling is separate)",
            "vllm-0.10.0 vllm/engine/arg_utils.py; absent from vllm-0.10.1"),
    Removed("--max-seq-len-to-capture", "0.11.0", "in vLLM 0.11.0", "no replacement",
            "vllm-0.10.1 vllm/engine/arg_utils.py; absent from vllm-0.11.0"),
    Removed("--swap-space", "0.18.0", "in vLLM 0.18.0", "no replacement",
            "vllm-0.14.0 vllm/engine/arg_utils.py L914; the PyPI sdists (rocmfleet/domain/vllm_serve_flags.json)"),
)
# fmt: on

#: Short and dotted forms of flags the table renders (``-O`` changed meaning: reference §4.4).
ARG_ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-q": "--quantization",
    "-O": "--compilation-config",
    "-cc": "--compilation-config",
    "--attention-config": "--attention-backend",
    "-ac": "--attention-backend",
}

#: ``vllm serve`` arguments that rocmfleet renders outside the table, for every instance
#: (:func:`rocmfleet.domain.vllm.serve_args`), and what sets each. In ``extra_args`` they would
#: repeat (argparse keeps the last) or contradict what the unit, the readiness check and the
#: benchmark use.
SERVE_OWNED = {
    "--model": "the profile's model (the positional argument)",
    "--served-model-name": "the profile's served_model_name",
    "--host": "rocmfleet (0.0.0.0: the readiness check, the benchmark and the drain hooks reach every instance)",
    "--port": "the profile's base_port or vllm_instances[].port",
    # The staged snapshot (rocmfleet.domain.hfmodel): another revision is not in the read-only cache.
    "--revision": "the profile's revision (the snapshot staged on the host)",
    "--tokenizer-revision": "the profile's revision (vLLM's default for the tokenizer: vllm/config/model.py L598-599)",
}
#: Parallel sizes rocmfleet does not render (with vLLM's short forms, vllm-0.33.0
#: ``vllm/engine/arg_utils.py``): an instance's world is its ``tensor_parallel_size``, one rank per
#: GPU it is given (:func:`rocmfleet.domain.placement.world_problem`); a pipeline or data parallel
#: size would start more ranks than the instance has GPUs.
PARALLEL_SIZES = {
    "--pipeline-parallel-size": "pipeline",
    "-pp": "pipeline",
    "--data-parallel-size": "data",
    "-dp": "data",
    "--data-parallel-size-local": "data",
    "-dpl": "data",
    "--data-parallel-rank": "data",
    "--data-parallel-start-rank": "data",
    "--headless": "data",
    "--prefill-context-parallel-size": "context",
    "-pcp": "context",
    "--decode-context-parallel-size": "context",
    "-dcp": "context",
}
#: Other ``vllm serve`` arguments that would undo what rocmfleet renders or leak a secret
#: (vllm-0.33.0 ``vllm/entrypoints/openai/cli_args.py``, ``vllm/utils/argparse_utils.py``).
REFUSED_ARGS = {
    "--config": "a vLLM config file sets flags (port, model, parallel sizes) out of rocmfleet's sight; list them here",
    "--api-key": "a secret in the process arguments (ps, the unit file): set VLLM_API_KEY in vllm_secret_env",
    "--uds": "serves on a Unix socket instead of the instance's port, which the readiness check and clients use",
}
