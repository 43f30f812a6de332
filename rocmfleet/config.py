"""The data a deploy reads from inventory and ``group_vars/``, validated with pydantic.

Keys are flat (``docker_source``, ``vllm_image_tag``) so that pyinfra's precedence (host over
group over ``all``) applies key by key; units are in the names (``*_s``, ``*_gib``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: Key prefixes that belong to rocmfleet; other host data (``ssh_*``, pyinfra's own) is not ours.
OWN_PREFIXES = ("apt_", "base_", "docker_", "vllm_")

_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"


class ConfigError(ValueError):
    """Host data that cannot be deployed; the message names the host, each key, value and rule."""


class VllmInstance(BaseModel):
    """One vLLM server on a host: a systemd unit ``vllm-<name>.service`` and a container."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_NAME, description="Instance name; unit `vllm-<name>.service`, container `vllm-<name>`.")
    port: int = Field(ge=1, le=65535, description="TCP port of the OpenAI-compatible API on the host.")


class DeploySettings(BaseModel):
    """Everything the ``base``, ``docker`` and ``vllm`` roles read for one host."""

    model_config = ConfigDict(extra="forbid")

    apt_proxy: str | None = Field(
        default=None, description="HTTP(S) proxy for apt, e.g. `http://10.0.0.1:3128`; null for none."
    )
    base_packages: list[str] = Field(
        default=["ca-certificates", "curl", "gnupg"], description="Debian packages every host gets."
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
    docker_daemon: dict[str, Any] = Field(
        default_factory=dict, description="Extra keys for `/etc/docker/daemon.json`, merged over rocmfleet's."
    )
    docker_insecure_registries: list[str] = Field(
        default_factory=list, description="`host:port` registries Docker may use over plain HTTP."
    )

    vllm_image_repository: str = Field(description="Image repository, e.g. `docker.io/vllm/vllm-openai-rocm`.")
    vllm_image_tag: str = Field(pattern=r"^[\w][\w.-]{0,127}$", description="Image tag, e.g. `v0.33.0`.")
    vllm_image_digest: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="Manifest digest the tag must resolve to; the unit runs it."
    )
    vllm_model: str = Field(description="`vllm serve` model: a Hugging Face id or a path inside the container.")
    vllm_served_model_name: str = Field(description="Model name clients send; checked by readiness.")
    vllm_args: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra `vllm serve` flags without leading dashes; `true` gives a bare flag, `false` omits it.",
    )
    vllm_env: dict[str, str] = Field(default_factory=dict, description="Container environment (not secrets).")
    vllm_instances: list[VllmInstance] = Field(min_length=1, description="vLLM servers on this host.")
    vllm_shm_size_gib: int = Field(default=16, ge=1, description="Container `/dev/shm` size (AMD MAD uses 16G).")
    vllm_ready_timeout_s: int = Field(
        default=1800, ge=10, description="How long the deploy waits for a new container to be ready."
    )
    vllm_cache_dir: str = Field(
        default="/var/cache/vllm", description="Host directory mounted as the container's `/root/.cache/vllm`."
    )
    vllm_hf_cache_dir: str = Field(
        default="/var/cache/huggingface", description="Host directory mounted as `/root/.cache/huggingface`."
    )

    @field_validator("vllm_env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        bad = [name for name in env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
        if bad:
            raise ValueError(f"not environment variable names: {', '.join(bad)}")
        return env

    @model_validator(mode="after")
    def _unique_instances(self) -> DeploySettings:
        for attr in ("name", "port"):
            values = [getattr(i, attr) for i in self.vllm_instances]
            dupes = sorted({str(v) for v in values if values.count(v) > 1})
            if dupes:
                raise ValueError(f"vllm_instances: {attr} used more than once: {', '.join(dupes)}")
        return self

    @property
    def image_reference(self) -> str:
        """``repository:tag@digest``: Docker pulls and runs the digest; the tag says what it is."""
        return f"{self.vllm_image_repository}:{self.vllm_image_tag}@{self.vllm_image_digest}"


def settings_for(host_name: str, data: dict[str, Any]) -> DeploySettings:
    """Validate one host's merged data (``host.data.dict()``) into :class:`DeploySettings`.

    Keys that do not start with one of :data:`OWN_PREFIXES` (``ssh_*``, pyinfra's) are ignored;
    unknown keys that do are errors.

    Raises:
        ConfigError: one line per problem: host, key path, bad value, what is allowed.
    """
    own = {k: v for k, v in data.items() if k.startswith(OWN_PREFIXES)}
    try:
        return DeploySettings.model_validate(own)
    except ValidationError as exc:
        lines = [f"host {host_name}: invalid configuration ({exc.error_count()} problem(s)):"]
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            value = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
            lines.append(f"  {key}: {err['msg']}{value}")
        raise ConfigError("\n".join(lines)) from None
