"""The data a deploy, check, bench or rollout reads for one host, validated with pydantic.

Keys are flat (``docker_source``, ``vllm_profile``) so that pyinfra's precedence (host data,
then groups in inventory order, the later winning, then ``all``) applies key by key. Units are
in the names (``*_s``, ``*_gib``). Keys that start with one of :data:`OWN_PREFIXES` belong to
rocmfleet: an unknown one is an error, with a "did you mean" for near misses; other keys
(``ssh_*``, pyinfra's own) are left alone.

The serving shape comes from a profile, ``group_vars/profiles/<vllm_profile>.yml``
(:mod:`rocmfleet.profiles`); host data may pin another image (``vllm_image_*``), which is how
a rollout moves hosts to a new tag and digest.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    field_serializer,
    field_validator,
)
from pydantic.functional_validators import PlainValidator

from rocmfleet import docker, envpolicy
from rocmfleet.docker import DockerDaemon
from rocmfleet.errors import ConfigError, Problem
from rocmfleet.profiles import PROFILES_DIR, Image, Profile, ProfileError, load_profile
from rocmfleet.rocm import PREFIX as ROCM_PREFIX
from rocmfleet.rocm import RocmSettings
from rocmfleet.tuning import PREFIX as TUNING_PREFIX
from rocmfleet.tuning import TuningSettings
from rocmfleet.vault import Secret

#: Key prefixes of :class:`HostSettings`; ``rocm_*`` and ``tuning_*`` belong to the rocm and
#: tuning roles' models (:mod:`rocmfleet.rocm`, :mod:`rocmfleet.tuning`).
OWN_PREFIXES = ("apt_", "base_", "docker_", "vllm_")
#: pyinfra's own host data: connector settings and global-argument defaults (``_sudo``).
PYINFRA_PREFIXES = ("ssh_", "_", "fake_", "chroot_", "vagrant_", "terraform_", "podman_", "dockerssh_")
PYINFRA_KEYS = frozenset({"docker_identifier", "docker_platform", "docker_architecture", "docker_container_id"})


def _secret(value: Any) -> Secret:
    if isinstance(value, Secret):
        return value
    raise ValueError(
        "must be an ansible-vault value (`!vault |`), not plain text: run `rocmfleet vault encrypt-string`"
    )


#: A value that must come from ansible-vault; never printed.
VaultSecret = Annotated[
    Secret,
    PlainValidator(_secret),
    PlainSerializer(lambda s: repr(s), return_type=str),
    WithJsonSchema({"type": "string", "description": "an ansible-vault `!vault |` value"}),
]


class RegistryAuth(BaseModel):
    """Credentials Docker uses to pull from one registry (written by ``docker login``)."""

    model_config = ConfigDict(extra="forbid")

    registry: str = Field(description="Registry host[:port], e.g. `registry.example.com`.")
    username: str
    password: VaultSecret


class InstanceOverride(BaseModel):
    """An explicit instance in host data, replacing the profile's ``instances_per_host`` layout."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$", description="Unit `vllm-<name>.service`.")
    port: int = Field(ge=1, le=65535, description="API port on the host.")
    gpus: list[int] = Field(min_length=1, description="Host GPU indices (KFD order) the instance gets.")


class ConnectionSettings(BaseModel):
    """pyinfra's SSH keys that rocmfleet checks early (pyinfra would only fail at connect time)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    ssh_port: int = Field(default=22, ge=1, le=65535, description="SSH port (an integer, not a string).")
    ssh_user: str | None = Field(default=None, description="SSH user (pyinfra's; default: the local user).")
    ssh_hostname: str | None = Field(default=None, description="Address to connect to (default: the host's name).")
    ssh_strict_host_key_checking: Literal["yes", "no", "ask", "accept-new", "off"] | None = Field(
        default=None,
        description="OpenSSH's StrictHostKeyChecking, as pyinfra reads it; `rocmfleet check`/`bench` never ask.",
    )


class HostSettings(BaseModel):
    """Everything the roles read for one host."""

    model_config = ConfigDict(extra="forbid")

    apt_proxy: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(:\d+)?/?$",
        description="HTTP proxy for apt, e.g. `http://10.0.0.1:3128`; null for none.",
    )
    apt_lock_timeout_s: int = Field(
        default=600,
        ge=0,
        le=3600,
        description=(
            "Seconds apt waits for the dpkg lock held by another apt (unattended-upgrades or apt-daily on a first "
            "boot) before the host fails naming the holder (apt's `DPkg::Lock::Timeout`). Up to an hour: "
            "a longer hold is a stuck apt, not a busy one."
        ),
    )
    base_packages: list[str] = Field(
        default=["ca-certificates", "curl", "gnupg", "iproute2"],
        description="Debian packages every host gets (curl and iproute2's `ss`: the vLLM readiness probe).",
    )

    docker_source: Literal["docker", "debian"] = Field(
        default="docker",
        description="`docker`: Docker's own apt repository (docker-ce); `debian`: the distribution's docker.io.",
    )
    docker_repo_url: str = Field(
        default="https://download.docker.com/linux/debian", description="Docker apt repository base URL."
    )
    docker_key_url: str = Field(
        default="https://download.docker.com/linux/debian/gpg", description="Docker apt signing key URL."
    )
    docker_daemon: DockerDaemon = Field(
        default_factory=DockerDaemon,
        description=(
            "Keys of `/etc/docker/daemon.json` with Docker's types (`live-restore` a boolean, `log-opts` an object "
            "of strings...), merged over rocmfleet's (`log-opts` key by key). The keys known are those of the "
            "daemon.json reference (`rocmfleet.docker.DockerDaemon`); others go in `docker_daemon_extra`."
        ),
    )
    docker_daemon_extra: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Escape hatch: daemon.json keys rocmfleet does not type, written as given (Docker checks them, with "
            "`dockerd --validate` on the host before the file is replaced where Docker has it)."
        ),
    )
    docker_restart_parallel: int = Field(
        default=1,
        ge=1,
        description=(
            "How many hosts restart Docker at a time when a daemon.json change needs a restart (a change of "
            "keys dockerd reloads, such as registries or mirrors, is a `systemctl reload docker` instead); each "
            "waits until its vLLM instances answer again before the next host restarts, and a failed restart "
            "stops the roll."
        ),
    )
    docker_restart_timeout_s: int = Field(
        default=300,
        ge=10,
        description="How long a Docker restart may take until dockerd and every vLLM container that ran before answer.",
    )
    docker_insecure_registries: list[str] = Field(
        default_factory=list, description="`host:port` registries Docker may use over plain HTTP."
    )
    docker_registry_auth: list[RegistryAuth] = Field(
        default_factory=list, description="Registry credentials; `password` must be a vault value."
    )

    vllm_profile: str = Field(
        pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$",
        description="Model profile: `group_vars/profiles/<name>.yml` (model, image, serving shape, flags).",
    )
    vllm_image_repository: str | None = Field(default=None, description="Overrides the profile's image repository.")
    vllm_image_tag: str | None = Field(
        default=None, pattern=r"^\w[\w.-]{0,127}$", description="Overrides the profile's image tag."
    )
    vllm_image_digest: str | None = Field(
        default=None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Overrides the profile's digest; required with `vllm_image_tag` (a tag alone is never run).",
    )
    vllm_instances: list[InstanceOverride] | None = Field(
        default=None,
        description="Explicit instances (name, port, GPUs) instead of the profile's `instances_per_host` layout.",
    )
    vllm_env: dict[str, str] = Field(default_factory=dict, description="Container environment (not secrets).")
    vllm_secret_env: dict[str, VaultSecret] = Field(
        default_factory=dict,
        description="Secret container environment (e.g. `HF_TOKEN`): vault values, written only to a 0600 file.",
    )
    vllm_shm_size_gib: int = Field(default=16, ge=1, description="Container `/dev/shm` size (AMD MAD uses 16G).")
    vllm_ready_timeout_s: int = Field(
        default=1800,
        ge=10,
        description=(
            "How long the deploy waits for a new container to be ready; also vLLM's own engine start deadline "
            "(`VLLM_ENGINE_READY_TIMEOUT_S`, vLLM >= 0.14), so that a slow cold start is not killed at vLLM's 600 s."
        ),
    )
    vllm_stop_grace_s: int = Field(
        default=90,
        ge=10,
        le=3600,
        description=(
            "Seconds `docker stop` gives vLLM to finish in-flight requests after SIGTERM before SIGKILL "
            "(the unit's stop and the container's `--stop-timeout`)."
        ),
    )
    vllm_cache_dir: str = Field(
        default="/var/cache/vllm", description="Host directory mounted as the container's `/root/.cache/vllm`."
    )
    vllm_hf_cache_dir: str = Field(
        default="/var/cache/huggingface", description="Host directory mounted as `/root/.cache/huggingface`."
    )

    @field_serializer("docker_daemon")
    def _daemon_as_docker_writes_it(self, daemon: DockerDaemon) -> dict[str, Any]:
        """Docker's spelling, without unset keys: a dump validates again (``rocmfleet check`` ships it)."""
        return daemon.model_dump(mode="json", by_alias=True, exclude_none=True)

    @field_validator("vllm_env", "vllm_secret_env")
    @classmethod
    def _env_names(cls, env: dict[str, Any]) -> dict[str, Any]:
        bad = [name for name in env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
        if bad:
            raise ValueError(f"not environment variable names: {', '.join(bad)}")
        return env


@dataclass(frozen=True)
class Instance:
    """One vLLM server of a host: unit ``vllm-<name>.service``, container ``vllm-<name>``."""

    name: str
    port: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class HostConfig:
    """A host's validated settings with its profile loaded and its image resolved."""

    settings: HostSettings
    profile: Profile
    image: Image
    rocm: RocmSettings
    tuning: TuningSettings

    def instances(self) -> list[Instance]:
        """``vllm_instances`` if given, else ``<profile>-<i>`` on ``base_port + i`` with the profile's GPUs."""
        if self.settings.vllm_instances is not None:
            return [Instance(i.name, i.port, tuple(i.gpus)) for i in self.settings.vllm_instances]
        p = self.profile
        if p.instance_gpus is not None:
            groups = [tuple(g) for g in p.instance_gpus]
        else:
            n = p.gpus_per_instance or 1
            groups = [tuple(range(i * n, (i + 1) * n)) for i in range(p.instances_per_host)]
        return [Instance(f"{p.name}-{i}", port, groups[i]) for i, port in enumerate(p.ports)]


def _all_fields() -> list[str]:
    from rocmfleet.rocm import RocmSettings
    from rocmfleet.tuning import TuningSettings

    return [*HostSettings.model_fields, *RocmSettings.model_fields, *TuningSettings.model_fields]


def _problems(exc: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        key = prefix + ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        value = "" if err["type"] == "missing" else repr(err.get("input"))
        if not key:  # a model-level rule: name the first key its message is about
            named = [f for f in _all_fields() if f in message]
            key = min(named, key=message.index) if named else "(top level)"
            inputs = err.get("input")
            value = repr(inputs.get(key)) if isinstance(inputs, dict) and key in inputs else ""
        if err["loc"][:1] == ("docker_daemon",) and len(err["loc"]) >= 2 and err["type"] != "extra_forbidden":
            wanted = docker.key_type(str(err["loc"][1]))
            if wanted:
                message += f"; Docker's daemon.json type for {err['loc'][1]} is {wanted}"
        if isinstance(err.get("input"), Secret) and err["type"] != "extra_forbidden":
            message = "is a vault secret here, but this key is not a secret: a wholly encrypted file holds secrets only"
            message += " (move the key to a plain group_vars file)"
            value = "*MASKED*"
        if any(word in str(part) for part in err["loc"] for word in ("secret", "password")):
            value = "" if not value else "*MASKED*"  # a plain-text secret is still a secret
        if err["type"] == "extra_forbidden" and err["loc"][0] == "docker_daemon" and len(err["loc"]) == 2:
            near = difflib.get_close_matches(str(err["loc"][-1]), docker.known_keys(), n=1)
            message = (
                "not a daemon.json key rocmfleet types"
                + (f"; did you mean {near[0]!r}?" if near else "")
                + " A key Docker has that rocmfleet does not type goes in docker_daemon_extra"
            )
            value = ""
        elif err["type"] == "extra_forbidden":
            near = difflib.get_close_matches(str(err["loc"][-1]), _all_fields(), n=1)
            message = "unknown key" + (f"; did you mean {near[0]!r}?" if near else "")
            value = ""
        problems.append(Problem(key, message, value))
    return problems


def known_profiles(directory: Path = PROFILES_DIR) -> list[str]:
    """Names of the profiles in ``directory``."""
    return sorted(p.stem for p in directory.glob("*.yml"))


def host_config(data: dict[str, Any], profiles_dir: Path = PROFILES_DIR) -> HostConfig:
    """Validate one host's merged data (``host.data.dict()``) and load its profile.

    Raises:
        ConfigError: every problem at once (key, message, bad value; files and hosts are added
            by :mod:`rocmfleet.validate`, which knows the inventory).
    """
    problems: list[Problem] = []
    foreign = [
        k
        for k in data
        if not k.startswith((*OWN_PREFIXES, ROCM_PREFIX, TUNING_PREFIX, *PYINFRA_PREFIXES)) and k not in PYINFRA_KEYS
    ]
    for key in sorted(foreign):
        near = difflib.get_close_matches(key, _all_fields(), n=1)
        problems.append(Problem(key, "unknown key" + (f"; did you mean {near[0]!r}?" if near else "")))
    validated = {}
    for name, model, prefixes in (
        ("connection", ConnectionSettings, None),
        ("settings", HostSettings, OWN_PREFIXES),
        ("rocm", RocmSettings, (ROCM_PREFIX,)),
        ("tuning", TuningSettings, (TUNING_PREFIX,)),
    ):
        own = data if prefixes is None else {k: v for k, v in data.items() if k.startswith(prefixes)}
        try:
            validated[name] = model.model_validate(own)
        except ValidationError as exc:
            problems += _problems(exc)
    if problems:
        raise ConfigError(problems)
    settings = validated["settings"]
    path = profiles_dir / f"{settings.vllm_profile}.yml"
    if not path.exists():
        known = known_profiles(profiles_dir)
        near = difflib.get_close_matches(settings.vllm_profile, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ConfigError(
            [Problem("vllm_profile", f"no profile {path}{hint} Known: {', '.join(known)}", repr(settings.vllm_profile))]
        )
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        raise ConfigError(
            [Problem(key, message, value, file=str(path)) for key, message, value in exc.problems]
        ) from None
    image = profile.image
    overrides = {
        "repository": settings.vllm_image_repository,
        "tag": settings.vllm_image_tag,
        "digest": settings.vllm_image_digest,
    }
    if settings.vllm_image_tag and not settings.vllm_image_digest:
        raise ConfigError(
            [
                Problem(
                    "vllm_image_tag",
                    "a tag needs its digest (vllm_image_digest): a tag alone is never deployed",
                    repr(settings.vllm_image_tag),
                )
            ]  # fmt: skip
        )
    image = image.model_copy(update={k: v for k, v in overrides.items() if v})
    config = HostConfig(settings, profile, image, validated["rocm"], validated["tuning"])
    shape = instance_problems(config) + [Problem(*p) for p in envpolicy.host_problems(profile, settings.vllm_env)]
    shape += [Problem(*p) for p in docker.daemon_problems(settings)]
    if shape:
        raise ConfigError(shape)
    return config


def instance_problems(config: HostConfig) -> list[Problem]:
    """Instance rules that need the profile: unique names, ports and GPUs; TP divides the GPUs."""
    problems = []
    instances = config.instances()
    tp = config.profile.tensor_parallel_size
    for attr, what in (("name", "name"), ("port", "port")):
        values = [getattr(i, attr) for i in instances]
        for dup in sorted({v for v in values if values.count(v) > 1}, key=str):
            owners = [i.name for i in instances if getattr(i, attr) == dup]
            problems.append(Problem("vllm_instances", f"{what} {dup} used by more than one instance: {owners}"))
    claims: dict[int, list[str]] = {}
    for instance in instances:
        for gpu in instance.gpus:
            claims.setdefault(gpu, []).append(instance.name)
        if len(instance.gpus) % tp:
            problems.append(
                Problem(
                    "vllm_instances",
                    f"instance {instance.name}: tensor_parallel_size {tp} (profile {config.profile.name}) "
                    f"does not divide its {len(instance.gpus)} GPU(s) {list(instance.gpus)}",
                )
            )
    for gpu, owners in sorted(claims.items()):
        if len(owners) > 1:
            problems.append(Problem("vllm_instances", f"GPU {gpu} claimed by more than one instance: {owners}"))
    return problems
