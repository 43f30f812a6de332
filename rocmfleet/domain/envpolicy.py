"""One policy for every source of a vLLM container's environment, and the variables rocmfleet
renders itself.

Sources, in the order they are merged (:func:`container_env`):

1. the profile's settings, rendered for its vLLM version by :data:`rocmfleet.domain.flags.FLAGS`, and
   its ``extra_env``;
2. the named sets the profile opts into (``env_sets``, :data:`ENV_SETS`), e.g. the runtime
   variables of AMD's MI300X production serving guidance;
3. safe values where a vLLM default is wrong for the GPU architecture (:data:`AITER_DEFAULTS`,
   per vLLM version range and gfx target, each row citing its source), and
   ``HSA_NO_SCRATCH_RECLAIM=1`` for TP > 1 (:data:`SCRATCH_RECLAIM`);
4. host data's ``vllm_env``;
5. vLLM's engine start deadline from ``vllm_ready_timeout_s`` (:data:`ENGINE_READY_TIMEOUT`), for
   the vLLM versions that read it;
6. placement's visible-devices variable (``CUDA_VISIBLE_DEVICES``, :mod:`rocmfleet.domain.placement`);
7. (in :func:`rocmfleet.domain.vllm.container_env`) the compiler cache paths, the Hugging Face cache
   offline (:func:`rocmfleet.domain.hfmodel.offline_env`) and ``VLLM_PORT``, the instance's internal
   ports (:mod:`rocmfleet.domain.ports`).

Rules, the same for ``extra_env`` and ``vllm_env`` (:func:`profile_problems`,
:func:`rocmfleet.domain.hostenv.host_problems`; both run when ``rocmfleet validate`` or an inventory loads):

- visibility variables (:data:`VISIBILITY`) belong to placement: refused elsewhere;
- ``VLLM_ENGINE_READY_TIMEOUT_S`` belongs to ``vllm_ready_timeout_s``: refused elsewhere;
- ``VLLM_PORT`` belongs to the instance's internal port block (``vllm_internal_port_base``): one
  value for every instance would give them all the same rendezvous port; refused elsewhere;
- ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE`` and ``HF_MODULES_CACHE`` belong to the staged model
  (:mod:`rocmfleet.domain.hfmodel`: the cache mounted read-only, read offline); refused elsewhere;
- a variable the target vLLM removed is refused with its replacement, and a variable the flag
  table renders with the setting that owns it (:func:`rocmfleet.domain.flagrender.env_passthrough_problems`);
- a variable a named set renders is refused: the set owns it;
- a safe-value variable set to another value where the table says the default is wrong is refused
  with the row's reason, on a host of that architecture (:func:`arch_problems`, at placement);
  ``HSA_NO_SCRATCH_RECLAIM`` other than ``1`` at TP > 1 everywhere;
- in ``vllm_env``, a secret (a token-like value such as ``hf_…``, or a name such as ``HF_TOKEN``)
  is refused: secrets go in ``vllm_secret_env`` as vault values. Its value is never printed.

The GPU architecture comes from the host's KFD ``gfx_target_version`` at placement
(``Placement.gfx_arch``). Validation has no host data and assumes no architecture: a value that is
wrong on gfx942 and right on gfx950 (FP4 BMM) is refused on the gfx942 host it would crash, not in
a profile that may serve both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from packaging.version import Version

from rocmfleet.domain import hfmodel, ports
from rocmfleet.domain.flags import Rendered


class PlacedEnv(Protocol):
    """What the policy reads of an instance's placement (:class:`rocmfleet.domain.placement.Placement`)."""

    @property
    def gfx_arch(self) -> str | None: ...
    @property
    def visible_devices_env(self) -> Mapping[str, str]: ...


class EnvProfile(Protocol):
    """What the policy reads of a profile (:class:`rocmfleet.config.profiles.Profile` has it)."""

    @property
    def vllm_version(self) -> str: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def env_sets(self) -> Sequence[str]: ...
    @property
    def extra_env(self) -> Mapping[str, str]: ...
    def render(self, vllm_version: str | None = None) -> Rendered: ...


#: Variables that choose which GPUs a process sees. Placement sets ``CUDA_VISIBLE_DEVICES`` only;
#: vLLM on ROCm raises at import when ``HIP_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` differ
#: (reference §3.2, [V-rocm-sync] vllm-0.33.0 vllm/platforms/rocm.py L138–157); ROCr and HIP
#: read ``ROCR_VISIBLE_DEVICES`` and ``GPU_DEVICE_ORDINAL`` too (reference [A8], HIP env vars).
VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")

#: vLLM's deadline for its engine cores to come up (weights loaded, compiled, memory profiled), in
#: seconds, and the first release that reads it: ``VLLM_ENGINE_READY_TIMEOUT_S`` (default 600) is in
#: vllm-0.14.0 ``vllm/envs.py`` L617-621 and read by ``vllm/v1/engine/core_client.py`` L533 and
#: L1347; vllm-0.13.0 (and 0.11.0-0.12.0) has no such variable and waits a fixed
#: ``poll(timeout=600_000)`` ms (vllm-0.13.0 ``vllm/v1/engine/core_client.py`` L530, L1342), so a
#: cold start of a large model longer than 10 minutes is killed by vLLM itself there. rocmfleet
#: renders it from ``vllm_ready_timeout_s`` (the deploy's own deadline), so that vLLM never gives up
#: before the deploy does.
ENGINE_READY_TIMEOUT = ("VLLM_ENGINE_READY_TIMEOUT_S", "0.14.0")

#: Names that are secrets whatever their value (Hugging Face: reference [HF-env]).
SECRET_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"})
_SECRET_NAME = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|ACCESS_KEY)$")
#: Values that look like credentials: Hugging Face user access tokens (``hf_`` and 34 letters and
#: digits), GitHub tokens (``ghp_``, ``github_pat_``), and ``sk-`` API keys.
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|sk-[A-Za-z0-9_-]{20,})"
)


@dataclass(frozen=True)
class EnvSet:
    """A named, documented set of container variables a profile can opt into (``env_sets``).

    Attributes:
        name: what profiles write.
        variables: ``{name: value}``.
        meaning: per variable, what it does.
        when_not: when not to use the set.
        source: where the values come from.
    """

    name: str
    variables: dict[str, str]
    meaning: dict[str, str]
    when_not: str
    source: str


#: The named sets. Reference §1.4 ([P1]: AMD MI300X production-inference guidance, the runtime
#: environment of its production best practices) and §1.3 ([A6]).
ENV_SETS: dict[str, EnvSet] = {
    s.name: s
    for s in (
        EnvSet(
            "mi300x-production",
            {"HIP_FORCE_DEV_KERNARG": "1", "HSA_ENABLE_SDMA": "1", "NCCL_COMM_BLOCKING": "0"},
            {
                "HIP_FORCE_DEV_KERNARG": "put kernel arguments in device memory: lower kernel launch latency "
                "(reference §1.1 row 7, §1.3 [A6])",
                "HSA_ENABLE_SDMA": "host-device copies on the SDMA copy engines (ROCm's default; the guidance "
                "states it explicitly; some AMD tuning guides set 0 to use blit kernels instead: reference §1.4)",
                "NCCL_COMM_BLOCKING": "0: RCCL communicator calls do not block (RCCL reads NCCL_* names)",
            },
            "a profile that follows another AMD guide on SDMA (HSA_ENABLE_SDMA=0) should list its own "
            "variables in extra_env instead",
            "reference §1.4 [P1] (production best practices: runtime environment)",
        ),
        EnvSet(
            "mi300x-production-multinode",
            {"RCCL_MSCCL_ENABLE": "1"},
            {"RCCL_MSCCL_ENABLE": "MSCCL all-reduce algorithms in RCCL"},
            "single-host instances (every shipped profile): the guidance gives it for multi-node RCCL over "
            "InfiniBand/RoCEv2 only",
            "reference §1.4 [P1]",
        ),
    )
}


@dataclass(frozen=True)
class SafeDefault:
    """A variable whose vLLM default is wrong on some GPU architectures, rendered explicitly there.

    Applies for ``since <= vLLM < until`` (``until`` ``None``: no end known) on ``archs``, and only
    when AITER is on (``VLLM_ROCM_USE_AITER=1``) if ``needs_aiter``. An explicit other value is
    refused on ``archs`` in that range, or in every vLLM version when ``broken_everywhere`` (the
    architecture lacks what the switch needs, so the value stays broken outside the range where
    the default is wrong).
    """

    name: str
    value: str
    since: str
    until: str | None
    archs: frozenset[str]
    needs_aiter: bool
    why: str
    source: str = field(default="")
    broken_everywhere: bool = False

    def applies(self, vllm_version: str, arch: str | None, aiter: bool) -> bool:
        """Whether the safe value is rendered for this vLLM, architecture and AITER switch."""
        v = Version(vllm_version)
        in_range = Version(self.since) <= v and (self.until is None or v < Version(self.until))
        return in_range and arch in self.archs and (aiter or not self.needs_aiter)

    def refuses(self, vllm_version: str, arch: str | None) -> bool:
        """Whether an explicit value other than the safe one is refused for this vLLM and architecture."""
        return arch in self.archs and (self.broken_everywhere or self.applies(vllm_version, arch, True))


#: Per (vLLM version range, gfx arch): safe values of AITER switches whose default is wrong there.
AITER_DEFAULTS: tuple[SafeDefault, ...] = (
    SafeDefault(
        "VLLM_ROCM_USE_AITER_FP4BMM",
        "0",
        "0.15.0",
        "0.33.0",
        frozenset({"gfx942"}),
        True,
        "defaults to on from vLLM 0.15 (PR 32238) and crashes on gfx942, which has no FP4 "
        "('MXFP4 quantization is not supported on gfx942'); FP4 BMM needs gfx950",
        "https://github.com/vllm-project/vllm/issues/34641; default False in vllm-0.33.0 vllm/envs.py "
        "(reference §4.1); releases 0.16-0.32 not checked, so the safe value is rendered for all of them",
        broken_everywhere=True,  # gfx942 has no FP4 in any vLLM: an explicit 1 is refused on 0.33 too
    ),
)

#: ``HSA_NO_SCRATCH_RECLAIM=1`` for TP > 1: without it RCCL collectives fail on MI300X; vLLM's own
#: ROCm base image sets it (reference [V-docker] vllm-0.33.0 docker/Dockerfile.rocm_base), other
#: images may not, so it is rendered explicitly.
SCRATCH_RECLAIM = ("HSA_NO_SCRATCH_RECLAIM", "1")


def vllm_bool(value: str) -> bool:
    """How vLLM reads a boolean switch: on for ``1`` or ``true`` in any case, off for anything else
    (vllm-0.33.0 ``vllm/envs.py``, e.g. ``VLLM_ROCM_USE_AITER_FP4BMM``: ``.lower() in ("true", "1")``)."""
    return value.lower() in ("true", "1")


def _aiter_on(env: Mapping[str, str]) -> bool:
    return vllm_bool(env.get("VLLM_ROCM_USE_AITER", "0"))


def rendered_env(profile: EnvProfile, arch: str | None, vllm_version: str | None = None) -> dict[str, str]:
    """What the profile renders into a container's environment (sources 1-3 above), without host data.

    Args:
        profile: the profile.
        arch: the GPUs' LLVM target, e.g. ``gfx942`` (``Placement.gfx_arch``); ``None``: unknown,
            no architecture-specific value is rendered.
        vllm_version: render for this vLLM (default: the profile's).

    Raises:
        FlagError: the settings do not render for that version.
    """
    version = vllm_version or profile.vllm_version
    env = dict(profile.render(version).env)
    for name in profile.env_sets:
        env.update(ENV_SETS[name].variables)
    for row in AITER_DEFAULTS:
        if row.applies(version, arch, _aiter_on(env)) and row.name not in profile.extra_env:
            env[row.name] = row.value
    if (profile.tensor_parallel_size or 1) > 1:
        env.setdefault(*SCRATCH_RECLAIM)
    return env


def ready_timeout_env(vllm_version: str, ready_timeout_s: int | None) -> dict[str, str]:
    """``{"VLLM_ENGINE_READY_TIMEOUT_S": "<s>"}`` for a vLLM that reads it (:data:`ENGINE_READY_TIMEOUT`),
    else ``{}``.

    Args:
        vllm_version: the image's vLLM version (the profile's ``vllm_version``).
        ready_timeout_s: seconds (``vllm_ready_timeout_s``); ``None``: render nothing.
    """
    name, since = ENGINE_READY_TIMEOUT
    if ready_timeout_s is None or Version(vllm_version) < Version(since):
        return {}
    return {name: str(ready_timeout_s)}


def container_env(
    profile: EnvProfile, vllm_env: Mapping[str, str], placement: PlacedEnv, ready_timeout_s: int | None = None
) -> dict[str, str]:
    """The whole container environment of one instance: :func:`rendered_env` on the placement's
    architecture, then ``vllm_env``, then vLLM's start deadline (:func:`ready_timeout_env`, seconds),
    then the placement's visible devices."""
    return {
        **rendered_env(profile, placement.gfx_arch),
        **vllm_env,
        **ready_timeout_env(profile.vllm_version, ready_timeout_s),
        **placement.visible_devices_env,
    }


def arch_problems(profile: EnvProfile, vllm_env: Mapping[str, str], arch: str | None) -> list[str]:
    """Explicit values of :data:`AITER_DEFAULTS` variables (in ``extra_env`` or ``vllm_env``) that are
    wrong on the host's architecture, e.g. ``VLLM_ROCM_USE_AITER_FP4BMM=1`` on gfx942.

    Args:
        profile: the profile (its ``extra_env`` and ``vllm_version``).
        vllm_env: host data's ``vllm_env``.
        arch: the host's LLVM target (``Placement.gfx_arch``); ``None``: nothing is refused.

    Returns:
        One line per variable, naming where it was set, the value it must have and the row's source.
    """
    problems = []
    for where, env in (("extra_env", profile.extra_env), ("vllm_env", vllm_env)):
        for name, value in env.items():
            for row in AITER_DEFAULTS:
                if (
                    row.name == name
                    and vllm_bool(value) != vllm_bool(row.value)
                    and row.refuses(profile.vllm_version, arch)
                ):
                    problems.append(
                        f"{where} {name}={value}: on {arch} with vLLM {profile.vllm_version} it must be "
                        f"{row.value}: {row.why} ({row.source.split(';')[0]})"
                    )
    return problems


def owned_problem(profile: EnvProfile, name: str, value: str, where: str) -> str | None:
    """Why ``name=value`` from ``where`` is refused by the policy's own rules, or ``None``."""
    if name in VISIBILITY:
        return (
            f"{where} {name}: visible GPUs belong to placement (CUDA_VISIBLE_DEVICES with the instance's own "
            "render nodes); choose GPUs with gpus_per_instance, instance_gpus or vllm_instances"
        )
    if name == ENGINE_READY_TIMEOUT[0]:
        return (
            f"{where} {name}: rendered from vllm_ready_timeout_s (the deploy's readiness deadline), so that vLLM "
            "does not give up on a cold start before the deploy does; set vllm_ready_timeout_s instead"
        )
    if name == ports.ENV:
        return (
            f"{where} {name}: rendered per instance, the first of its {ports.STRIDE} internal ports from "
            "vllm_internal_port_base; one value in every instance's environment would make them race for one "
            "torch.distributed rendezvous port (EADDRINUSE); set vllm_internal_port_base instead (VLLM_PORT is "
            "vLLM's internal port, not the API port: that is the profile's base_port or vllm_instances[].port)"
        )
    if name in hfmodel.OWNED_ENV:
        return (
            f"{where} {name}: the Hugging Face cache is rendered by rocmfleet: the host's vllm_hf_cache_dir, "
            "staged once per host and mounted read-only at /root/.cache/huggingface with HF_HUB_OFFLINE=1 "
            "(docs/host.md, Model staging); set vllm_hf_cache_dir to move it"
        )
    if name == "HF_ENDPOINT":
        return (
            f"{where} {name}: the instances read the staged cache offline (HF_HUB_OFFLINE=1) and never reach a "
            "Hub; the model is staged from vllm_hf_endpoint, which only the staging container gets (its "
            "environment file, with the token): set vllm_hf_endpoint instead"
        )
    owners = [s for s in profile.env_sets if name in ENV_SETS[s].variables]
    if owners:
        return f"{where} {name}: rendered by env_sets {owners}; drop the set and list its variables in extra_env"
    if name == SCRATCH_RECLAIM[0] and value != SCRATCH_RECLAIM[1] and (profile.tensor_parallel_size or 1) > 1:
        return (
            f"{where} {name}={value}: tensor_parallel_size {profile.tensor_parallel_size} needs "
            f"{name}=1 (RCCL on MI300X), which rocmfleet renders"
        )
    return None


def is_secret(name: str, value: str) -> bool:
    """Whether ``name=value`` looks like a credential (:data:`SECRET_NAMES`, a name ending in TOKEN,
    PASSWORD, SECRET, API_KEY or ACCESS_KEY, or a token-like value such as ``hf_…``)."""
    return name in SECRET_NAMES or bool(_SECRET_NAME.search(name)) or bool(_SECRET_VALUE.search(value))


def profile_problems(profile: EnvProfile) -> list[str]:
    """The policy's rules for the profile's ``extra_env`` and ``env_sets`` (removed and table-rendered
    variables in ``extra_env`` are :func:`rocmfleet.domain.flagrender.render`'s). One line per problem."""
    problems = [
        f"env_sets: unknown set {s!r}; known: {', '.join(ENV_SETS)}" for s in profile.env_sets if s not in ENV_SETS
    ]
    if problems:
        return problems
    for name, value in profile.extra_env.items():
        if why := owned_problem(profile, name, value, "extra_env"):
            problems.append(why)
        elif is_secret(name, value):
            problems.append(
                f"extra_env {name}: looks like a secret; put it in host data's vllm_secret_env (a vault value)"
            )
    return problems
