"""The data a deploy, check, bench or rollout reads for one host, validated with pydantic.

Keys are flat (``docker_source``, ``vllm_profile``) so that pyinfra's precedence (host data,
then groups in inventory order, the later winning, then ``all``) applies key by key. Units are
in the names (``*_s``, ``*_gib``). Keys that start with one of :data:`OWN_PREFIXES` belong to
rocmfleet: an unknown one is an error, with a "did you mean" for near misses; other keys
(``ssh_*``, pyinfra's own) are left alone.

The serving shape comes from a profile, ``group_vars/profiles/<vllm_profile>.yml`` or a shipped one
(:mod:`rocmfleet.config.profiles`, :func:`profile_path`); host data may pin another image
(``vllm_image_*``), which is how a rollout moves hosts to a new tag and digest.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
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
    model_validator,
)
from pydantic.functional_validators import AfterValidator, PlainValidator

from rocmfleet.config import groupvars
from rocmfleet.config.errors import ConfigError, Problem, shown
from rocmfleet.config.keys import did_you_mean, model_keys
from rocmfleet.config.profiles import (
    PROFILES_DIR,
    Image,
    ImageDigest,
    ImageName,
    ImageTag,
    Profile,
    ProfileError,
    load_profile,
)
from rocmfleet.config.sshkeys import pyinfra_ssh_keys
from rocmfleet.config.vault import Secret
from rocmfleet.domain import docker, envpolicy, hfmodel, ports
from rocmfleet.domain.docker import DockerDaemon
from rocmfleet.domain.metrics import PREFIX as METRICS_PREFIX
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.domain.placement import world_problem
from rocmfleet.domain.rocm import PREFIX as ROCM_PREFIX
from rocmfleet.domain.rocm import RocmSettings
from rocmfleet.domain.tuning import PREFIX as TUNING_PREFIX
from rocmfleet.domain.tuning import TuningSettings
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
    problem = hfmodel.endpoint_problem(value)
    if problem:
        raise ValueError(problem)
    return value


#: An absolute host path for a bind mount.
HostPath = Annotated[str, AfterValidator(_host_path)]


def address_problem(value: str) -> str | None:
    """Why ``value`` is not something SSH can connect to (a host name or an IP address), or None.

    Host names follow RFC 1123 (letters, digits, '-', dot-separated labels of at most 63);
    IPv6 addresses are checked by :mod:`ipaddress`.
    """
    import ipaddress

    if any(c.isspace() for c in value) or not value:
        return "must be a host name or IP address: it holds white space"
    try:
        ipaddress.ip_address(value.strip("[]"))
        return None
    except ValueError:
        pass
    label = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
    if len(value) > 253 or not re.fullmatch(rf"{label}(?:\.{label})*\.?", value):
        return "must be a host name (letters, digits, '-', '.') or an IP address"
    if value.rstrip(".").rsplit(".", 1)[-1].isdigit():  # RFC 3696 §2: a top-level label is never all digits
        return "is neither an IP address (four parts of 0-255, or IPv6) nor a host name (its last part is all digits)"
    return None


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


class ConnectionSettings(BaseModel):
    """pyinfra's SSH keys that rocmfleet checks early (pyinfra would only fail at connect time).

    An ``ssh_*`` key pyinfra's SSH connector does not know is refused (:meth:`unknown_keys`):
    pyinfra ignores it, so a misspelt ``ssh_config_file`` or ``ssh_known_hosts_file`` would
    silently connect some other way.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    ssh_port: int = Field(default=22, ge=1, le=65535, description="SSH port (an integer, not a string).")
    ssh_user: str | None = Field(default=None, description="SSH user (pyinfra's; default: the local user).")
    ssh_hostname: str | None = Field(default=None, description="Address to connect to (default: the host's name).")

    @field_validator("ssh_hostname")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        problem = None if value is None else address_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    ssh_key: str | None = Field(default=None, description="Private key file on the control machine (`~` expanded).")
    ssh_config_file: str | None = Field(
        default=None, description="OpenSSH client config to read instead of `~/.ssh/config` (an existing file)."
    )

    @field_validator("ssh_key")
    @classmethod
    def _key_file(cls, value: str | None) -> str | None:
        # pyinfra tries the path with ``~`` expanded, from the working directory
        # (pyinfra/connectors/ssh_util.py, _resolve_key_paths), and fails at connect time only.
        if value is not None and not Path(value).expanduser().is_file():
            resolved = str(Path(value).expanduser().absolute())
            raise ValueError("no such file on this machine" + (f" ({resolved})" if resolved != value else ""))
        return value

    @field_validator("ssh_config_file")
    @classmethod
    def _config_file(cls, value: str | None) -> str | None:
        # pyinfra reads the file only when ``Path(value).exists()``, without expanding ``~``, and
        # otherwise connects without it, silently (pyinfra/connectors/sshuserclient/client.py,
        # get_ssh_config): its ProxyJump and HostName would not apply.
        if value is not None and not Path(value).is_file():
            if value.startswith("~"):
                raise ValueError("no such file on this machine: pyinfra does not expand ~ here; give the full path")
            resolved = str(Path(value).absolute())
            raise ValueError("no such file on this machine" + (f" ({resolved})" if resolved != value else ""))
        return value

    ssh_strict_host_key_checking: Literal["yes", "no", "ask", "accept-new", "off"] | None = Field(
        default=None,
        description="OpenSSH's StrictHostKeyChecking, as pyinfra reads it; `rocmfleet check`/`bench` never ask.",
    )

    @staticmethod
    def unknown_keys(data: dict[str, Any]) -> list[Problem]:
        """One problem per ``ssh_*`` key of ``data`` that pyinfra does not know, with a "did you mean"."""
        known = pyinfra_ssh_keys()
        problems = []
        for key in sorted(k for k in data if k.startswith("ssh_") and k not in known):
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; pyinfra's are {', '.join(known)}"
            problems.append(Problem(key, "not an SSH key pyinfra knows (it would ignore it)" + hint))
        return problems


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


@dataclass(frozen=True)
class Instance:
    """One vLLM server of a host: unit ``vllm-<name>.service``, container ``vllm-<name>``.

    Attributes:
        name: the instance's name.
        port: its API port (``--port``).
        gpus: its host GPU indices (KFD order).
        internal_port: the first of its internal ports, ``VLLM_PORT`` (:func:`rocmfleet.domain.ports.block`
            of ``vllm_internal_port_base`` and its position on the host).
    """

    name: str
    port: int
    gpus: tuple[int, ...]
    internal_port: int

    @property
    def internal_ports(self) -> ports.Block:
        """The ports vLLM may open besides ``port`` (:mod:`rocmfleet.domain.ports`)."""
        return ports.Block(self.internal_port)


@dataclass(frozen=True)
class HostConfig:
    """A host's validated settings with its profile loaded and its image resolved."""

    settings: HostSettings
    profile: Profile
    image: Image
    rocm: RocmSettings
    tuning: TuningSettings
    metrics: MetricsSettings = field(default_factory=MetricsSettings)

    def instances(self) -> list[Instance]:
        """``vllm_instances`` if given, else ``<profile>-<i>`` on ``base_port + i`` with the profile's GPUs;
        instance *i* gets the internal ports of :func:`rocmfleet.domain.ports.block`."""
        return _instances(self.settings, self.profile)


def _all_fields() -> list[str]:
    from rocmfleet.domain.rocm import RocmSettings
    from rocmfleet.domain.tuning import TuningSettings

    return [
        *HostSettings.model_fields,
        *RocmSettings.model_fields,
        *TuningSettings.model_fields,
        *MetricsSettings.model_fields,
    ]


def _problems(exc: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        key = prefix + ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        value = "" if err["type"] == "missing" else shown(err.get("input"))
        if not key:  # a model-level rule: name the first key its message is about
            named = [f for f in _all_fields() if f in message]
            key = min(named, key=message.index) if named else "(top level)"
            inputs = err.get("input")
            value = shown(inputs.get(key)) if isinstance(inputs, dict) and key in inputs else ""
            message = message.removeprefix(f"{key}: ")  # the key is said once
        if err["loc"][:1] == ("docker_daemon",) and len(err["loc"]) >= 2 and err["type"] != "extra_forbidden":
            wanted = docker.key_type(str(err["loc"][1]))
            if wanted:
                message += f"; Docker's daemon.json type for {err['loc'][1]} is {wanted}"
        if isinstance(err.get("input"), Secret) and err["type"] != "extra_forbidden":
            message = (
                "is a vault value, but this key is written in plain text (unit, env file or logs): a container "
                "secret goes under vllm_secret_env (a 0600 file), a registry password under "
                "docker_registry_auth[].password; a wholly encrypted group file may hold only those"
            )
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
            nested = err["loc"][:-1]
            known = _all_fields() if not nested else model_keys(HostSettings, nested)
            message = "unknown key" + did_you_mean(str(err["loc"][-1]), known)
            value = ""
        elif err["type"] in ("string_type", "literal_error") and type(err.get("input")) in (bool, int, float):
            what = "a boolean" if isinstance(err["input"], bool) else "a number (30.30 becomes 30.3)"
            message += f"; quote it: unquoted, YAML reads it as {what}"
        problems.append(Problem(key, message, value))
    return problems


def _partial(model: type[BaseModel], own: dict[str, Any]) -> tuple[BaseModel | None, list[Problem]]:
    """``own`` validated by ``model``; when invalid, also the model without the offending keys.

    Later stages (profile, image, instances) run on that partial model, so that one run reports
    the problems of every stage, not only the first stage's.
    """
    try:
        return model.model_validate(own), []
    except ValidationError as exc:
        problems = _problems(exc)
        bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
        if not bad:
            return None, problems
        try:
            return model.model_validate({k: v for k, v in own.items() if k not in bad}), problems
        except ValidationError:
            return None, problems


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


def host_config(data: dict[str, Any], profiles_dir: Path | str | None = None) -> HostConfig:
    """Validate one host's merged data (``host.data.dict()``) and load its profile.

    Every stage runs, each on what the earlier ones could validate: the settings models, the
    profile, the image after host overrides (re-validated: ``model_copy`` does not), and the
    instances (names, ports, GPUs against ``vllm_gpu_count``, TP against the GPUs).

    Args:
        data: the host's data, keys as in ``group_vars``.
        profiles_dir: where ``<vllm_profile>.yml`` is; default :func:`rocmfleet.config.groupvars.profiles_dir`
            (``profiles/`` beside the inventory's group files).

    Raises:
        ConfigError: every problem at once (key, message, bad value; a problem in a profile
            file carries that file; the files of host data are added by :mod:`rocmfleet.config.validate`,
            which knows the inventory).
    """
    directory = Path(profiles_dir) if profiles_dir is not None else groupvars.profiles_dir()
    problems: list[Problem] = []
    foreign = [
        k
        for k in data
        if not k.startswith((*OWN_PREFIXES, ROCM_PREFIX, TUNING_PREFIX, METRICS_PREFIX, *PYINFRA_PREFIXES))
        and k not in PYINFRA_KEYS
    ]
    for key in sorted(foreign):
        problems.append(Problem(key, "unknown key" + did_you_mean(key, _all_fields())))
    problems += ConnectionSettings.unknown_keys(data)
    validated: dict[str, Any] = {}
    for name, model, prefixes in (
        ("connection", ConnectionSettings, None),
        ("settings", HostSettings, OWN_PREFIXES),
        ("rocm", RocmSettings, (ROCM_PREFIX,)),
        ("tuning", TuningSettings, (TUNING_PREFIX,)),
        ("metrics", MetricsSettings, (METRICS_PREFIX,)),
    ):
        own = data if prefixes is None else {k: v for k, v in data.items() if k.startswith(prefixes)}
        validated[name], found = _partial(model, own)
        problems += found
    settings: HostSettings | None = validated["settings"]
    profile = _profile(settings, directory, problems) if settings else None
    image = _image(settings, profile, directory, data, problems) if settings else None
    instances: list[Instance] | None = None
    if settings and (settings.vllm_instances is not None or profile is not None):
        instances = _instances(settings, profile)
    if instances is not None and settings is not None:
        key = "vllm_instances" if settings.vllm_instances is not None else "vllm_profile"
        problems += instance_problems(instances, profile, settings.vllm_gpu_count, key)
        problems += port_problems(instances, settings, key, validated["metrics"])
    if settings is not None and profile is not None:
        problems += [Problem(*p) for p in envpolicy.host_problems(profile, settings.vllm_env)]
    if settings is not None:
        problems += [Problem(*p) for p in docker.daemon_problems(settings)]
    if problems:
        raise ConfigError(problems)
    assert settings is not None and profile is not None and image is not None
    return HostConfig(settings, profile, image, validated["rocm"], validated["tuning"], validated["metrics"])


def port_problems(
    instances: list[Instance], settings: HostSettings, key: str, metering: MetricsSettings | None = None
) -> list[Problem]:
    """The host's one port map: every TCP port rocmfleet makes something listen on, each owned once.

    vLLM serves on ``0.0.0.0:<port>`` (``rocmfleet.domain.vllm.serve_args``), so it takes the port
    on every address; Docker's ``metrics-addr`` listens on its own. Two owners of one port: the
    second to start dies with ``EADDRINUSE`` (vLLM at start, dockerd at start-up). The instances'
    own duplicates are :func:`instance_problems`'. Each instance's internal ports (``VLLM_PORT``
    and the block after it, :mod:`rocmfleet.domain.ports`) miss every API port, the metrics port
    and each other, and stay in 1024-32767 (:func:`rocmfleet.domain.ports.problems`), reported
    under ``vllm_internal_port_base``. The exporter's port misses Docker's ``metrics-addr`` port
    too: a listener on every address and one on a single address of the same port cannot both
    bind it (``bind(2)``, ``EADDRINUSE``), whichever address ``metrics-addr`` names.

    Args:
        instances: the host's instances; ``key`` is where they come from, for the message.
        settings: the host's settings (``docker_daemon.metrics-addr``).
        metering: the host's metrics settings (the exporter's ``metrics_exporter_port``, when it is on).
    """
    problems = []
    api_ports = "their port in vllm_instances" if key == "vllm_instances" else "the profile's base_port"
    metrics = settings.docker_daemon.metrics_addr
    port_text = metrics.rpartition(":")[2] if metrics else ""
    others = [(int(port_text), "Docker's metrics-addr (docker_daemon)")] if port_text.isdigit() else []
    if metering is not None and metering.metrics_exporter:
        others.append((metering.metrics_exporter_port, "AMD's exporter (metrics_exporter_port)"))
        for instance in instances:
            if instance.port == metering.metrics_exporter_port:
                problems.append(
                    Problem(
                        "metrics_exporter_port",
                        f"port {instance.port} is also instance {instance.name}'s ({key}): give the exporter "
                        "another port, or set metrics_exporter: false",
                        repr(metering.metrics_exporter_port),
                    )
                )
        if port_text.isdigit() and int(port_text) == metering.metrics_exporter_port:
            problems.append(
                Problem(
                    "metrics_exporter_port",
                    f"port {metering.metrics_exporter_port} is also Docker's metrics-addr (docker_daemon): one of "
                    "them cannot start; give one another port, or set metrics_exporter: false",
                    repr(metering.metrics_exporter_port),
                )
            )
    problems += [
        Problem(
            "vllm_internal_port_base",
            f"{p}; give vllm_internal_port_base another value (instance i takes {ports.STRIDE} ports from "
            f"base + {ports.STRIDE} * i), or move the API ports ({api_ports})",
            repr(settings.vllm_internal_port_base),
        )
        for p in ports.problems(instances, others)
    ]
    if port_text.isdigit():
        for instance in instances:
            if instance.port == int(port_text):
                problems.append(
                    Problem(
                        "docker_daemon.metrics-addr",
                        f"port {instance.port} is also instance {instance.name}'s ({key}): vLLM listens on every "
                        "address, so one of them cannot start; give one another port",
                        repr(metrics),
                    )
                )
    return problems


def _profile(settings: HostSettings, directory: Path, problems: list[Problem]) -> Profile | None:
    path = profile_path(settings.vllm_profile, directory)
    try:
        found = path.exists()
    except OSError as exc:
        problems.append(
            Problem(
                "vllm_profile",
                f"cannot search {groupvars.display(directory)}: {exc.strerror or exc}",
                repr(settings.vllm_profile),
            )  # fmt: skip
        )
        return None
    if not found:
        known = known_profiles(directory)
        near = difflib.get_close_matches(settings.vllm_profile, known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        problems.append(
            Problem(
                "vllm_profile",
                f"no profile {groupvars.display(path)}; {hint}known profiles: {_known_text(directory)}",
                repr(settings.vllm_profile),
            )
        )
        return None
    try:
        return load_profile(path)
    except ProfileError as exc:
        problems += [Problem(key, message, value, file=groupvars.display(path)) for key, message, value in exc.problems]
        return None


def _image(
    settings: HostSettings, profile: Profile | None, directory: Path, data: dict[str, Any], problems: list[Problem]
) -> Image | None:
    overrides = {
        "repository": settings.vllm_image_repository,
        "tag": settings.vllm_image_tag,
        "digest": settings.vllm_image_digest,
    }
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


def _instances(settings: HostSettings, profile: Profile | None) -> list[Instance]:
    """``vllm_instances``, else the profile's layout (``profile`` is then not ``None``), each with its
    internal ports from ``vllm_internal_port_base`` by position (:func:`rocmfleet.domain.ports.block`)."""
    base = settings.vllm_internal_port_base
    if settings.vllm_instances is not None:
        named = [(i.name, i.port, tuple(i.gpus)) for i in settings.vllm_instances]
    else:
        assert profile is not None
        if profile.instance_gpus is not None:
            groups = [tuple(g) for g in profile.instance_gpus]
        else:
            n = profile.gpus_per_instance or 1
            groups = [tuple(range(i * n, (i + 1) * n)) for i in range(profile.instances_per_host)]
        named = [(f"{profile.name}-{i}", port, groups[i]) for i, port in enumerate(profile.ports)]
    return [Instance(name, port, gpus, ports.block(base, i).first) for i, (name, port, gpus) in enumerate(named)]


def instance_problems(
    instances: list[Instance], profile: Profile | None = None, gpu_count: int = 8, key: str = "vllm_instances"
) -> list[Problem]:
    """Rules on a host's instances: unique names and ports; GPUs unique and below ``gpu_count``; TP divides the GPUs.

    Args:
        instances: the host's instances (``vllm_instances`` or the profile's layout).
        profile: the host's profile, for ``tensor_parallel_size``; None when it is invalid
            (the rules that need it are skipped).
        gpu_count: the host's GPUs (``vllm_gpu_count``; the deploy checks the real topology).
        key: the key the instances come from, for the messages.
    """
    problems = []
    for attr, what in (("name", "name"), ("port", "port")):
        values = [getattr(i, attr) for i in instances]
        for dup in sorted({v for v in values if values.count(v) > 1}, key=str):
            owners = [i.name for i in instances if getattr(i, attr) == dup]
            problems.append(Problem(key, f"{what} {dup} used by more than one instance: {owners}"))
    claims: dict[int, list[str]] = {}
    for instance in instances:
        outside = [gpu for gpu in instance.gpus if not 0 <= gpu < gpu_count]
        if outside:
            problems.append(
                Problem(
                    key,
                    f"instance {instance.name}: GPU index(es) {outside} out of range: the host has {gpu_count} GPUs "
                    f"(0 to {gpu_count - 1}; vllm_gpu_count)",
                )
            )
        for gpu in instance.gpus:
            claims.setdefault(gpu, []).append(instance.name)
        if profile is not None and (world := world_problem(profile.tensor_parallel_size, len(instance.gpus))):
            problems.append(
                Problem(key, f"instance {instance.name} (GPUs {list(instance.gpus)}, profile {profile.name}): {world}")
            )
    for gpu, owners in sorted(claims.items()):
        if len(owners) > 1:
            problems.append(Problem(key, f"GPU {gpu} claimed by more than one instance: {owners}"))
    return problems
