"""Model profiles: what a host serves and in what shape, as group data (``group_vars/profiles/``).

A profile names the model, the image (tag and digest), the vLLM version inside the image, how
many instances run per host on how many GPUs each, and the serving settings of
:mod:`rocmfleet.domain.flags`, which renders them for that vLLM version. Loading a profile validates it
completely, including that its settings render for its own vLLM version.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rocmfleet import project
from rocmfleet.config import groupvars, yamlfile
from rocmfleet.config.errors import Problem, shown
from rocmfleet.config.keys import did_you_mean, model_keys
from rocmfleet.config.values import ImageDigest, ImageName, ImageTag, checked
from rocmfleet.domain import envpolicy, hfmodel, memfit, names
from rocmfleet.domain.benchshape import BenchSettings, served_problems
from rocmfleet.domain.flagrender import parse_version, render
from rocmfleet.domain.flags import FlagError, Rendered, ServingSettings
from rocmfleet.domain.memfit import ModelMemory
from rocmfleet.domain.partitionmodes import (
    MI300X_MEMORY_GIB,
    ComputePartition,
    MemoryPartition,
    PartitionPolicy,
    policy_problems,
)
from rocmfleet.domain.placement import world_problem
from rocmfleet.domain.readiness import ReadyProbe
from rocmfleet.domain.soak import SoakThresholds

#: The shipped profiles (package data). An inventory's ``vllm_profile`` is looked up first in
#: ``profiles/`` beside its group files, then here (:func:`rocmfleet.config.profiles.profile_path`).
PROFILES_DIR = project.PROFILES_DIR


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and every problem.

    ``problems`` holds ``(key, message, value)`` for each, ``value`` as ``repr`` or ``""``.
    """

    def __init__(self, message: str, problems: list[tuple[str, str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [("(profile)", message, "")]


class Image(BaseModel):
    """The container image; units run it by digest, the tag says what it is."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "8" or true is no count

    repository: ImageName = Field(description="e.g. `docker.io/vllm/vllm-openai-rocm` (no tag, no digest)")
    tag: ImageTag
    digest: ImageDigest = Field(description="manifest digest, `sha256:` and 64 hex")

    @property
    def reference(self) -> str:
        """``repository:tag@digest``."""
        return f"{self.repository}:{self.tag}@{self.digest}"


class Profile(ServingSettings):
    """One model served on a host: ``instances_per_host`` vLLM servers of the same shape.

    GPUs are given either as a count per instance (``gpus_per_instance``; placement picks
    them from the host's topology) or as explicit GPU index lists (``instance_gpus``).
    """

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$")
    # No control characters: both reach the unit file (a newline would add a line to it).
    model: Annotated[str, checked(hfmodel.hub_id_problem)] = Field(
        min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$", description="Hugging Face id (or a path inside the container)"
    )
    # Before revision: its validator reads both (pydantic validates fields in this order).
    revision_unpinned: bool = Field(
        default=False,
        description="serve a hub model without a pinned revision: staged once per host at its main branch",
    )
    revision: str | None = Field(
        default=None,
        validate_default=True,  # a missing revision is a problem of its own key
        description=(
            "commit of the model's Hugging Face repository, 40 hex (`vllm serve --revision`): the snapshot the "
            "host stages once and every instance loads offline; required for a hub model unless revision_unpinned"
        ),
    )
    served_model_name: Annotated[str, checked(names.lookalike_problem)] = Field(
        min_length=1, pattern=r"^[^\x00-\x1f\x7f]+$"
    )
    image: Image
    vllm_version: str = Field(description="vLLM version inside the image; flags are rendered for it")
    instances_per_host: int = Field(ge=1, le=64, description="at most 64: one per GPU partition of a CPX host")
    tensor_parallel_size: int = Field(ge=1, le=64, description="at most 64: the GPUs one host can show (CPX)")
    gpus_per_instance: int | None = Field(default=None, ge=1, le=64, description="at most 64 (a CPX host's GPUs)")
    instance_gpus: list[list[int]] | None = Field(default=None, description="GPU indices of each instance")
    base_port: int = Field(ge=1, le=65535, description="port of instance 0; instance i listens on base_port + i")
    attention_heads: int | None = Field(
        default=None, ge=1, le=4096, description="to check TP divisibility; at most 4096 (Llama 4 has 40, DeepSeek 128)"
    )
    bench: BenchSettings = Field(
        default_factory=BenchSettings, description="smoke benchmark (`rocmfleet bench`): cases and thresholds"
    )
    soak: SoakThresholds = Field(
        default_factory=SoakThresholds,
        description="how `rollout --soak` judges the soaked hosts against the hosts not yet switched",
    )
    compute_partition: ComputePartition = Field(
        default="SPX",
        description="compute partition mode the GPUs must be in (SPX, DPX, QPX, CPX); hosts in another are refused",
    )
    memory_partition: MemoryPartition = Field(
        default="NPS1", description="memory partition (NPS) mode the GPUs must be in (NPS1, NPS2, NPS4)"
    )
    tp_on_one_gpu: bool = Field(
        default=False, description="allow the ranks of one TP group on partitions of the same physical GPU"
    )
    env_sets: list[str] = Field(
        default_factory=list, description="named environment sets (`rocmfleet.domain.envpolicy.ENV_SETS`)"
    )
    gpu_memory_gib: float = Field(
        default=MI300X_MEMORY_GIB, gt=0, le=1024, description="memory of one physical GPU, GiB (at most 1 TiB)"
    )
    model_memory: ModelMemory | None = Field(
        default=None, description="weights and KV-cache shape, to check that the model fits before deploy"
    )
    warmup_at_start: bool = Field(
        default=False,
        description=(
            "after the server is up, send the warm-up requests (the bench shapes and every CUDA/HIP-graph batch "
            "size, `rocmfleet/domain/warmup.py`) before the instance counts as ready: for images without a baked cache"
        ),
    )
    ready_probe: ReadyProbe | None = Field(
        default=None, description="known-answer request the readiness check sends (temperature 0)"
    )

    @field_validator("revision")
    @classmethod
    def _pinned(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A hub model names its commit unless ``revision_unpinned``; a path names none
        (:func:`rocmfleet.domain.hfmodel.revision_problem`). Skipped when ``model`` is itself invalid."""
        if value is not None and not hfmodel.is_revision(value):
            raise ValueError(
                "not a commit: 40 lower-case hex digits (a branch or tag moves; pin the commit it points at)"
            )
        if "model" in info.data:
            problem = hfmodel.revision_problem(info.data["model"], value, info.data.get("revision_unpinned", False))
            if problem:
                raise ValueError(problem.split(": ", 1)[1] if problem.startswith("revision: ") else problem)
        return value

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        parse_version(value)  # FlagError is a ValueError: pydantic reports it on this field
        return value

    @model_validator(mode="after")
    def _shape(self) -> Profile:
        problems = []
        if (self.gpus_per_instance is None) == (self.instance_gpus is None):
            problems.append("give exactly one of gpus_per_instance and instance_gpus")
        counts = [self.gpus_per_instance] * self.instances_per_host if self.gpus_per_instance else []
        if self.instance_gpus is not None:
            counts = [len(gpus) for gpus in self.instance_gpus]
            flat = [gpu for gpus in self.instance_gpus for gpu in gpus]
            if len(self.instance_gpus) != self.instances_per_host:
                problems.append(
                    f"instance_gpus has {len(self.instance_gpus)} lists for {self.instances_per_host} instances"
                )
            if any(not gpus for gpus in self.instance_gpus) or any(gpu < 0 for gpu in flat):
                problems.append("instance_gpus: every instance needs GPU indices >= 0")
            if len(set(flat)) != len(flat):
                problems.append(f"instance_gpus: a GPU is given to two instances: {self.instance_gpus}")
        for i, count in enumerate(counts):
            if count and (problem := world_problem(self.tensor_parallel_size, count)):
                problems.append(f"instance {i}: {problem}")
        if self.attention_heads and self.attention_heads % self.tensor_parallel_size:
            problems.append(
                f"attention_heads {self.attention_heads} is not divisible by tensor_parallel_size "
                f"{self.tensor_parallel_size}"
            )
        if self.base_port + self.instances_per_host - 1 > 65535:
            problems.append(f"ports {self.base_port}..{self.base_port + self.instances_per_host - 1} exceed 65535")
        try:
            self.render()
        except FlagError as exc:
            problems += [f"does not render for vLLM {self.vllm_version}: {p}" for p in exc.problems]
        policy = PartitionPolicy(self.compute_partition, self.memory_partition, self.tp_on_one_gpu)
        problems += policy_problems(policy) + envpolicy.profile_problems(self) + memfit.problems(self)
        if self.kv_cache_dtype == "fp8_e5m2" and self.quantization is not None:
            # vllm-0.9.2 vllm/attention/layer.py (Attention.__init__), vllm-0.33.0
            # vllm/model_executor/layers/attention/attention.py (_init_kv_cache_quant): any quantized
            # checkpoint loads KV scales, and then "fp8_e5m2 kv-cache is not supported with fp8 checkpoints."
            problems.append(
                f"kv_cache_dtype fp8_e5m2 with quantization {self.quantization}: vLLM refuses an e5m2 KV cache "
                "for a quantized checkpoint at load time; use kv_cache_dtype fp8 (e4m3, fnuz on MI300X) or auto"
            )
        served_len = self.max_model_len or (self.model_memory.max_position_embeddings if self.model_memory else None)
        problems += served_problems(self.bench, served_len, self.max_num_seqs)
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line: _problem splits them
        return self

    @property
    def ports(self) -> list[int]:
        """The API port of each instance."""
        return [self.base_port + i for i in range(self.instances_per_host)]

    def render(self, vllm_version: str | None = None) -> Rendered:
        """Environment and ``vllm serve`` args for ``vllm_version`` (default: the profile's)."""
        settings = ServingSettings.model_validate(self.model_dump(include=set(ServingSettings.model_fields)))
        return render(settings, vllm_version or self.vllm_version)


def load_profile(path: str | Path) -> Profile:
    """Read and validate one profile YAML file (YAML 1.2, :mod:`rocmfleet.config.yamlfile`); ``name`` must be its stem.

    Raises:
        ProfileError: unreadable file or YAML, or one problem per invalid field (key, message,
            value): a duplicate key or a YAML 1.1 scalar, an unknown key (with a "did you mean"),
            a bad value.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from None
    # Every host of a fleet reads the same few profiles: parse each file's text once per process
    # (issue 16: parsing was 90% of validating 1,000 hosts). A copy each, as callers may change it.
    key = (str(path), raw)
    if key not in _PARSED:
        try:
            _PARSED[key] = _parse(path, raw)
        except ProfileError as exc:
            _PARSED[key] = exc
    parsed = _PARSED[key]
    if isinstance(parsed, ProfileError):
        raise ProfileError(str(parsed), parsed.problems)
    return parsed.model_copy(deep=True)


#: ``{(path, file bytes): Profile or the ProfileError it gives}`` for :func:`load_profile`.
_PARSED: dict[tuple[str, bytes], Profile | ProfileError] = {}


def _parse(path: Path, raw: bytes) -> Profile:
    text, bad = yamlfile.decode(raw)
    if text is None:
        assert bad is not None
        raise ProfileError(f"{path}: line {bad.line}: {bad.message}", [("", f"line {bad.line}: {bad.message}", "")])
    doc = yamlfile.load(text)
    problems = [(p.key, f"line {p.line}: {p.message}" if p.line else p.message, "") for p in doc.problems]
    data: Any = doc.data
    if doc.fatal:
        raise ProfileError(f"{path}: {problems[0][1]}", problems)
    if not isinstance(data, dict):
        message = f"top level must be a mapping, got {type(data).__name__}"
        raise ProfileError(f"{path}: {message}", [*problems, ("", message, "")])
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            key, message, value = _problem(err, doc.lines)
            problems += [(key, line, value) for line in message.split("\n")]  # a model rule's lines, each
        profile = None
    if profile is not None and profile.name != path.stem:
        problems.append(("name", f"must match the file name {path.stem!r}", repr(profile.name)))
    if problems:
        lines = [f"{path}: invalid profile ({len(problems)} problem(s)):"]
        lines += [f"  {key}: {message}" + (f" (got {value})" if value else "") for key, message, value in problems]
        raise ProfileError("\n".join(lines), problems)
    assert profile is not None
    return profile


def _problem(err: Any, lines: dict[str, int]) -> tuple[str, str, str]:
    key = ".".join(str(p) for p in err["loc"]) or "(profile)"
    # A missing key with a default (revision) is checked with None: nothing was given, nothing to show.
    missing = err["type"] == "missing" or (err["type"] == "value_error" and err.get("input") is None)
    value = "" if missing or not err["loc"] else shown(err.get("input"))
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown key" + did_you_mean(str(err["loc"][-1]), model_keys(Profile, err["loc"][:-1]))
        value = ""
    elif err["type"] == "string_type" and isinstance(err.get("input"), bool | int | float):
        what = "a boolean" if isinstance(err["input"], bool) else "a number (30.30 becomes 30.3)"
        message += f"; quote it: unquoted, YAML reads it as {what}"
    return key, message, value


def load_profiles(directory: Path = PROFILES_DIR) -> dict[str, Profile]:
    """Every ``*.yml`` profile in ``directory``, by name."""
    return {p.name: p for p in map(load_profile, sorted(directory.glob("*.yml")))}


# --- which profile a host names, and its image after the host's overrides ------------------------


def _profile_names(directory: Path) -> set[str]:
    """Names of the profile files in ``directory`` (``.yml`` or ``.yaml``)."""
    return {p.stem for p in (*directory.glob("*.yml"), *directory.glob("*.yaml"))}


def known_profiles(directory: Path) -> list[str]:
    """Names of the profiles an inventory can name: those in ``directory`` and the shipped ones."""
    return sorted(_profile_names(directory) | _profile_names(PROFILES_DIR))


def _known_text(directory: Path) -> str:
    """``yours (DIR): a, b; shipped: c, d`` for a message."""
    own = sorted(_profile_names(directory))
    shipped = sorted(_profile_names(PROFILES_DIR) - set(own))
    mine = f"yours ({groupvars.display(directory)}): {', '.join(own) or 'none'}"
    return f"{mine}; shipped: {', '.join(shipped) or 'none'}"


def profile_path(name: str, directory: Path) -> Path:
    """Where profile ``name`` is read from: ``directory`` (the operator's ``group_vars/profiles``)
    when it has ``<name>.yml``, else the shipped profile of that name (``rocmfleet/profiles``).

    An operator's file of a shipped name replaces the shipped one (copy it, then change it). The
    path returned may not exist (then ``<directory>/<name>.yml``, for the message)."""
    own = directory / f"{name}.yml"
    try:
        for candidate in (own, own.with_suffix(".yaml")):
            if candidate.exists() or candidate.is_symlink():  # a dangling link is theirs, and an error
                return candidate
    except OSError:  # the directory cannot be searched: its reading says so
        return own
    shipped = PROFILES_DIR / f"{name}.yml"
    return shipped if shipped.exists() else own


def profile_of(name: str, directory: Path, problems: list[Problem]) -> Profile | None:
    """The profile ``name`` (``vllm_profile``) names, loaded; None with its problems added to ``problems``."""
    path = profile_path(name, directory)
    try:
        found = path.exists()
    except OSError as exc:
        problems.append(
            Problem(
                "vllm_profile",
                f"cannot search {groupvars.display(directory)}: {exc.strerror or exc}",
                repr(name),
            )  # fmt: skip
        )
        return None
    if not found:
        known = known_profiles(directory)
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        problems.append(
            Problem(
                "vllm_profile",
                f"no profile {groupvars.display(path)}; {hint}known profiles: {_known_text(directory)}",
                repr(name),
            )
        )
        return None
    try:
        return load_profile(path)
    except ProfileError as exc:
        problems += [Problem(key, message, value, file=groupvars.display(path)) for key, message, value in exc.problems]
        return None


def image_of(
    overrides: dict[str, str | None],
    profile: Profile | None,
    directory: Path,
    data: dict[str, Any],
    problems: list[Problem],
) -> Image | None:
    """The profile's image after the host's ``vllm_image_*`` ``overrides`` (``repository``, ``tag``, ``digest``),
    validated; None with its problems added to ``problems`` (a tag without its digest in ``data`` is one)."""
    if data.get("vllm_image_tag") and not data.get("vllm_image_digest"):
        problems.append(
            Problem(
                "vllm_image_tag",
                "a tag needs its digest (vllm_image_digest): a tag alone is never deployed",
                repr(data["vllm_image_tag"]),
            )
        )
    if profile is None:
        return None
    merged = {**profile.image.model_dump(), **{k: v for k, v in overrides.items() if v}}
    try:
        return Image.model_validate(merged)  # after the overrides: model_copy(update=...) would not validate
    except ValidationError as exc:
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "repository"
            key = f"vllm_image_{field}" if overrides.get(field) else f"image.{field}"
            file = "" if overrides.get(field) else groupvars.display(profile_path(profile.name, directory))
            problems.append(Problem(key, err["msg"].removeprefix("Value error, "), shown(err.get("input")), file))
        return None
