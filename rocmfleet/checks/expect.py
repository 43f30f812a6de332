"""What the checks expect of the host under check, as the parent ``rocmfleet check`` validated it.

``rocmfleet check`` loads and validates the inventory once, in its own process, and gives each
host's pytest process one JSON file (``ROCMFLEET_CHECK_FILE``, mode 0600 in a 0700 directory)
holding that host's SSH settings and validated configuration (:func:`expectations_json`): a
host process reads its own data only, it never loads the inventory again. Secret values never
leave the parent: the file holds the secrets' names (``vllm_secret_env`` keys, registry
user names) with empty values, which is all the checks compare. Without the file (testinfra
run by hand) the checks expect a default deploy: AMD's defaults for the ROCm and tuning keys,
and no vLLM instances.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from rocmfleet.connect import SshSettings
from rocmfleet.profiles import Image, Profile
from rocmfleet.rocm import RocmSettings
from rocmfleet.settings import HostConfig, HostSettings
from rocmfleet.tuning import TuningSettings
from rocmfleet.vault import Secret

FILE_ENV = "ROCMFLEET_CHECK_FILE"


class ExpectationError(RuntimeError):
    """The expectations file is missing, unreadable or not what :func:`expectations_json` writes."""


def expectations_json(name: str, ssh: SshSettings, config: HostConfig) -> str:
    """One host's expectations: ``{"host", "ssh", "config"}``, secrets reduced to their names."""
    settings = config.settings.model_dump(mode="json")
    settings["vllm_secret_env"] = dict.fromkeys(settings["vllm_secret_env"], "")
    for auth in settings["docker_registry_auth"]:
        auth["password"] = ""
    return json.dumps(
        {
            "host": name,
            "ssh": ssh.to_dict(),
            "config": {
                "settings": settings,
                "profile": config.profile.model_dump(mode="json"),
                "image": config.image.model_dump(mode="json"),
                "rocm": config.rocm.model_dump(mode="json"),
                "tuning": config.tuning.model_dump(mode="json"),
            },
        }
    )


def config_from_dict(data: dict[str, Any]) -> HostConfig:
    """The :class:`HostConfig` of :func:`expectations_json`'s ``config`` (secrets empty).

    Raises:
        pydantic.ValidationError, KeyError: ``data`` is not what :func:`expectations_json` wrote.
    """
    settings = dict(data["settings"])
    settings["vllm_secret_env"] = {k: Secret("") for k in settings.get("vllm_secret_env", {})}
    settings["docker_registry_auth"] = [
        {**auth, "password": Secret("")} for auth in settings.get("docker_registry_auth", [])
    ]
    return HostConfig(
        HostSettings.model_validate(settings),
        Profile.model_validate(data["profile"]),
        Image.model_validate(data["image"]),
        RocmSettings.model_validate(data["rocm"]),
        TuningSettings.model_validate(data["tuning"]),
    )


@functools.cache
def _load() -> dict[str, Any] | None:
    path = os.environ.get(FILE_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as exc:
        raise ExpectationError(f"{FILE_ENV}={path}: {exc}") from None


def ssh_settings() -> SshSettings | None:
    """The host's SSH settings from the expectations file; ``None`` without one."""
    data = _load()
    return SshSettings.from_dict(data["ssh"]) if data else None


@functools.cache
def host_config() -> HostConfig | None:
    """The validated configuration of the host under check; ``None`` without an expectations file.

    Raises:
        ExpectationError: the file is not what :func:`expectations_json` writes.
    """
    data = _load()
    if data is None:
        return None
    try:
        return config_from_dict(data["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ExpectationError(f"{os.environ.get(FILE_ENV)}: not a rocmfleet expectations file: {exc}") from None


def rocm_settings() -> RocmSettings:
    """The host's ``rocm_*`` settings (AMD's defaults without an inventory)."""
    config = host_config()
    return config.rocm if config else RocmSettings()


def tuning_settings() -> TuningSettings:
    """The host's ``tuning_*`` settings (AMD's defaults without an inventory)."""
    config = host_config()
    return config.tuning if config else TuningSettings()


def in_container(host) -> bool:
    """True on a container host: it shares another machine's kernel, CPUs and boot."""
    return host.run("systemd-detect-virt --container").rc == 0
