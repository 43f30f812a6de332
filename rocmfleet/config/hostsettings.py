"""The keys of a host's data that rocmfleet owns (``apt_*``, ``base_*``, ``docker_*``, ``gpu_*``, ``vllm_*``),
validated with pydantic: :class:`HostSettings` and the value types its fields share.

Keys are flat (``docker_source``, ``vllm_profile``) so that pyinfra's precedence (host data,
then groups in inventory order, the later winning, then ``all``) applies key by key. Units are
in the names (``*_s``, ``*_gib``). Keys that start with one of :data:`OWN_PREFIXES` belong to
rocmfleet: an unknown one is an error, with a "did you mean" for near misses; other keys
(``ssh_*``, pyinfra's own) are left alone. The ``rocm_*``, ``tuning_*`` and ``metrics_*`
keys are their domains' own models (:class:`rocmfleet.domain.rocm.RocmSettings`, ...).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.functional_validators import AfterValidator, PlainValidator

from rocmfleet.config.values import ImageDigest, ImageName, ImageTag
from rocmfleet.config.vault import Secret
from rocmfleet.domain import baseurl, ports
from rocmfleet.domain.docker import DockerDaemon
from rocmfleet.domain.watchdog import WatchdogSettings

#: Key prefixes of :class:`HostSettings`; ``rocm_*`` and ``tuning_*`` belong to the rocm and
#: tuning roles' models (:mod:`rocmfleet.domain.rocm`, :mod:`rocmfleet.domain.tuning`).
OWN_PREFIXES = ("apt_", "base_", "docker_", "gpu_", "vllm_")
#: pyinfra's own host data: connector settings and global-argument defaults (``_sudo``).
PYINFRA_PREFIXES = ("ssh_", "_", "fake_", "chroot_", "vagrant_", "terraform_", "podman_", "dockerssh_")
PYINFRA_KEYS = frozenset({"docker_identifier", "docker_platform", "docker_architecture", "docker_container_id"})


#: The most GPUs one host can show: 8 MI300X, each split into 8 in CPX compute partition mode
#: (AMD Instinct MI300X compute partitioning: SPX 1, DPX 2, QPX 4, CPX 8 per GPU).
MAX_GPUS = 64


def path_problem(value: str) -> str | None:
    """Why ``value`` is not a host directory Docker can bind-mount with ``-v PATH:...``, or None."""
    if not value.startswith("/"):
        return "must be an absolute host path (a relative one becomes a Docker named volume)"
    if any(c.isspace() or c in ":," for c in value):
        return "must not hold white space, ':' or ',' (Docker's -v/--mount separators)"
    return None


def _host_path(value: str) -> str:
    problem = path_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _hub_endpoint(value: str) -> str:
    problem = baseurl.hub_endpoint_problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: An absolute host path for a bind mount.
HostPath = Annotated[str, AfterValidator(_host_path)]


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

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$", description="Unit `vllm-<name>.service`.")
    port: int = Field(ge=1, le=65535, description="API port on the host (TCP ports end at 65535).")
    gpus: list[int] = Field(
        min_length=1,
        max_length=MAX_GPUS,
        description="Host GPU indices (KFD order) the instance gets; each below `vllm_gpu_count`.",
    )


class HostSettings(BaseModel):
    """Everything the roles read for one host."""

    model_config = ConfigDict(extra="forbid", strict=True)

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
    docker_version: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[0-9A-Za-z.+~:*?-]+$",
        description=(
            "apt version (or glob) of the Docker engine packages: `docker-ce`/`docker-ce-cli` for "
            "`docker_source: docker` (e.g. `5:27.5.1-1~debian.12~bookworm`), `docker.io` for `debian` "
            "(e.g. `20.10.24+dfsg1-*`). Installed at the newest matching version and held; "
            "`rocmfleet check` compares the running server with it. Null: the newest, not held."
        ),
    )
    docker_daemon: DockerDaemon = Field(
        default_factory=DockerDaemon,
        description=(
            "Keys of `/etc/docker/daemon.json` with Docker's types (`live-restore` a boolean, `log-opts` an object "
            "of strings...), merged over rocmfleet's (`log-opts` key by key). The keys known are those of the "
            "daemon.json reference (`rocmfleet.domain.docker.DockerDaemon`); others go in `docker_daemon_extra`."
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
        le=1000,
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
        le=3600,
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
        description="Model profile: `group_vars/profiles/<name>.yml` beside the group files, else the shipped "
        "profile of that name (model, image, serving shape, flags).",
    )
    vllm_image_repository: ImageName | None = Field(
        default=None, description="Overrides the profile's image repository (no tag, no digest)."
    )
    vllm_image_tag: ImageTag | None = Field(default=None, description="Overrides the profile's image tag.")
    vllm_image_digest: ImageDigest | None = Field(
        default=None,
        description="Overrides the profile's digest; required with `vllm_image_tag` (a tag alone is never run).",
    )
    vllm_instances: list[InstanceOverride] | None = Field(
        default=None,
        description="Explicit instances (name, port, GPUs) instead of the profile's `instances_per_host` layout.",
    )
    vllm_internal_port_base: int = Field(
        default=ports.DEFAULT_BASE,
        ge=ports.LOWEST,
        le=65535,
        description=(
            f"First of the ports vLLM opens besides its API port (its torch.distributed rendezvous): instance i "
            f"of the host gets {ports.STRIDE} ports from `base + {ports.STRIDE} * i`, its `VLLM_PORT`. The blocks "
            "must miss every API port and stay in 1024-32767 or 61000-65535, outside Linux's default ephemeral "
            "range (32768-60999)."
        ),
    )
    vllm_env: dict[str, str] = Field(default_factory=dict, description="Container environment (not secrets).")
    vllm_secret_env: dict[str, VaultSecret] = Field(
        default_factory=dict,
        description="Secret container environment (e.g. `HF_TOKEN`): vault values, written only to a 0600 file.",
    )
    vllm_shm_size_gib: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Container `/dev/shm` size (AMD MAD uses 16G); at most 1024: it is host RAM, and MI300X "
        "platforms have 1.5 to 3 TiB.",
    )
    vllm_ready_timeout_s: int = Field(
        default=1800,
        ge=10,
        le=86400,
        description=(
            "How long the deploy waits for a new container to be ready; also vLLM's own engine start deadline "
            "(`VLLM_ENGINE_READY_TIMEOUT_S`, vLLM >= 0.14), so that a slow cold start is not killed at vLLM's "
            "600 s. At most a day (a 671B model's first load and compile takes well under that)."
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
    vllm_drain_command: str | None = Field(
        default=None,
        description=(
            "Shell command run on the host (over SSH, with the inventory's sudo) before a rollout or rolling restart "
            "switches it, to take it out of the load balancer; a non-zero exit stops the rollout before the host is "
            "touched. `ROCMFLEET_HOST` and `ROCMFLEET_PORTS` (comma-separated API ports) are set for it."
        ),
    )
    vllm_undrain_command: str | None = Field(
        default=None,
        description="Shell command run on the host after the rollout's gate passed (or it rolled back).",
    )
    vllm_drain_timeout_s: int = Field(
        default=300, ge=1, le=3600, description="Seconds a drain or undrain command may take (at most an hour)."
    )
    gpu_ecc_correctable_max: int = Field(
        default=100,
        ge=0,
        le=10**9,
        description="Correctable ECC errors per GPU since boot above which `rocmfleet check` (module `gpu`) and a "
        "rollout's gate fail the host; any uncorrectable or deferred error fails it. A fleet policy: AMD "
        "publishes no threshold, and a rising count is how an HBM stack fails.",
    )
    vllm_watchdog: WatchdogSettings = Field(
        default_factory=WatchdogSettings,
        description="The watchdog in every instance's unit: it sends the known-answer request every `interval_s` "
        "and restarts an instance that stops answering (a wedged engine answers `/health` but no completion); "
        'docs/host.md, "The watchdog".',
    )

    @model_validator(mode="after")
    def _drain_pair(self) -> HostSettings:
        """A drain hook without its undrain hook leaves every host the rollout drained out of the
        load balancer for good; an undrain hook alone puts back hosts nobody took out."""
        for key, command in (("vllm_drain_command", self.vllm_drain_command),
                             ("vllm_undrain_command", self.vllm_undrain_command)):  # fmt: skip
            if command is not None and not command.strip():
                raise ValueError(f"{key} is empty: give a command, or leave both hooks out")
        if (self.vllm_drain_command is None) != (self.vllm_undrain_command is None):
            given, missing = (
                ("vllm_drain_command", "vllm_undrain_command")
                if self.vllm_undrain_command is None
                else ("vllm_undrain_command", "vllm_drain_command")
            )
            raise ValueError(
                f"{given} is given without {missing}: the rollout runs them as a pair (drain before a host "
                "switches, undrain after its gate); give both, or neither"
            )
        return self

    vllm_cache_dir: HostPath = Field(
        default="/var/cache/vllm",
        description="Host directory of the instances' compiler caches: `<dir>/<instance>/<first 12 hex of the "
        "image digest>/{vllm,inductor,triton,aiter}`, each instance and image its own (none for a baked image: its "
        "caches are in the image); absolute: a relative one would be a Docker named volume.",
    )
    vllm_hf_cache_dir: HostPath = Field(
        default="/var/cache/huggingface",
        description="Host directory mounted as `/root/.cache/huggingface` (absolute).",
    )
    vllm_hf_endpoint: Annotated[str, AfterValidator(_hub_endpoint)] | None = Field(
        default=None,
        description="Hugging Face Hub endpoint the model is staged from (huggingface_hub's `HF_ENDPOINT`): "
        "a mirror or proxy of `https://huggingface.co`, e.g. `https://hf-mirror.example.com`; null for the Hub "
        "itself. Only the staging container gets it; the instances read the cache offline.",
    )
    vllm_gpu_count: int = Field(
        default=8,
        ge=1,
        le=MAX_GPUS,
        description="GPUs the host shows (KFD nodes): 8 on MI300X platforms, 64 in CPX compute partition mode "
        "(8 per GPU, the most there can be). `validate` checks `vllm_instances` against it; placement refuses a "
        "host that shows fewer (ROCm would number the rest anew), or other GPUs while one is lost or not bound "
        "to amdgpu.",
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
        # One NAME=value line each in Docker's --env-file and systemd's EnvironmentFile: a newline
        # (or another control character) in a value would add lines, i.e. other variables.
        controls = sorted(name for name, value in env.items() if re.search(r"[\x00-\x1f\x7f]", _text(value)))
        if controls:
            raise ValueError(
                f"values of {', '.join(controls)} hold a newline or another control character: each variable is "
                "one line of an environment file"
            )
        return env


def _text(value: Any) -> str:
    """A value as the environment file gets it (a secret's revealed text, only to be checked)."""
    reveal = getattr(value, "reveal", None)
    return reveal() if callable(reveal) else str(value)
