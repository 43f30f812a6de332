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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from rocmfleet.config import groupvars
from rocmfleet.config.connection import ConnectionSettings
from rocmfleet.config.errors import ConfigError, Problem, shown
from rocmfleet.config.hostsettings import OWN_PREFIXES, PYINFRA_KEYS, PYINFRA_PREFIXES, HostSettings
from rocmfleet.config.instances import Instance, instance_problems, instances_of, port_problems
from rocmfleet.config.keys import did_you_mean, model_keys
from rocmfleet.config.profiles import (
    Image,
    Profile,
    image_of,
    profile_of,
)
from rocmfleet.config.vault import Secret
from rocmfleet.domain import docker, hostenv
from rocmfleet.domain.metrics import PREFIX as METRICS_PREFIX
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.domain.rocm import PREFIX as ROCM_PREFIX
from rocmfleet.domain.rocm import RocmSettings
from rocmfleet.domain.tuning import PREFIX as TUNING_PREFIX
from rocmfleet.domain.tuning import TuningSettings


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
        return instances_of(self.settings, self.profile)


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
    profile = profile_of(settings.vllm_profile, directory, problems) if settings else None
    image = None
    if settings:
        overrides: dict[str, str | None] = {
            "repository": settings.vllm_image_repository,
            "tag": settings.vllm_image_tag,
            "digest": settings.vllm_image_digest,
        }
        image = image_of(overrides, profile, directory, data, problems)
    instances: list[Instance] | None = None
    if settings and (settings.vllm_instances is not None or profile is not None):
        instances = instances_of(settings, profile)
    if instances is not None and settings is not None:
        key = "vllm_instances" if settings.vllm_instances is not None else "vllm_profile"
        problems += instance_problems(instances, profile, settings.vllm_gpu_count, key)
        connection = validated["connection"]
        ssh_port = connection.ssh_port if connection is not None and connection.ssh_port else 22
        problems += port_problems(instances, settings, key, validated["metrics"], ssh_port)
    if settings is not None and profile is not None:
        problems += [Problem(*p) for p in hostenv.host_problems(profile, settings.vllm_env)]
    if settings is not None:
        problems += [Problem(*p) for p in docker.daemon_problems(settings)]
    if problems:
        raise ConfigError(problems)
    assert settings is not None and profile is not None and image is not None
    return HostConfig(settings, profile, image, validated["rocm"], validated["tuning"], validated["metrics"])
