"""What the vllm role creates whatever the host: its directories, the scripts its units run, the model
it stages (pure; no placement, so :mod:`rocmfleet.plan.build` and :mod:`rocmfleet.plan.vllmplan` share
them without the plan importing the deploy's comparison)."""

from __future__ import annotations

from typing import Protocol

from rocmfleet.config.hostsettings import HostSettings
from rocmfleet.config.profiles import Image, Profile
from rocmfleet.domain import hfmodel, vllm, vllmfiles
from rocmfleet.plan.hoststate import WantedFile
from rocmfleet.scripts import DIR as SCRIPTS_DIR


class VllmHost(Protocol):
    """What these items read of a host's validated configuration (``rocmfleet.config.settings.HostConfig``
    has it; taken by its fields so that the plan's vllm items do not stack on the configuration's validation)."""

    @property
    def settings(self) -> HostSettings: ...
    @property
    def profile(self) -> Profile: ...
    @property
    def image(self) -> Image: ...


def directories(config: VllmHost) -> list[tuple[str, str, str | None, str | None]]:
    """``(path, mode, user, group)`` of the directories the role creates, in order."""
    settings = config.settings
    return [
        (vllmfiles.CONFIG_DIR, "700", "root", "root"),
        (settings.vllm_cache_dir, "755", None, None),
        (settings.vllm_hf_cache_dir, "755", None, None),
        (vllm.SCRIPT_DIR, "755", "root", "root"),
    ]


def script_files() -> list[WantedFile]:
    """The scripts the units run, as ``files.put`` installs them (``rocmfleet.domain.vllm.UNIT_SCRIPTS``)."""
    return [
        WantedFile(f"{vllm.SCRIPT_DIR}/{name}", (SCRIPTS_DIR / name).read_bytes(), mode, "root", "root")
        for name, mode in vllm.UNIT_SCRIPTS.items()
    ]


def staging(config: VllmHost) -> hfmodel.Staged | None:
    """The model the host stages before its instances start (:mod:`rocmfleet.domain.hfmodel`): the
    profile's hub model at its revision, into ``vllm_hf_cache_dir``, with the instances' image; ``None``
    for a model given as a path in the container."""
    profile = config.profile
    return hfmodel.staged(profile.model, profile.revision, config.settings.vllm_hf_cache_dir, config.image.reference)
