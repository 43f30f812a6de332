"""One vLLM instance as the deploy leaves it on a host: where it runs and its files (pure).

:func:`place_host` places a host's instances on the topology it shows, and :func:`instance_files`
renders one instance's environment file and unit from that placement: the one renderer, called
by the deploy while it prepares (:mod:`rocmfleet.plan.vllmplan`), by the operation that writes the
files when it executes (:func:`rocmfleet.operations.vllm.instance_files`, on a bare host once its
driver's reboot shows the GPUs) and by ``rocmfleet check`` (``fleet/check/test_vllm.py``). Their
paths are :func:`rocmfleet.domain.vllmfiles.layout`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rocmfleet.config.hostsettings import HostSettings
from rocmfleet.config.instances import Instance
from rocmfleet.config.profiles import Image, Profile
from rocmfleet.config.vault import Secret
from rocmfleet.domain import cachedirs, lastgood, readiness, vllm, vllmfiles, vllmplace
from rocmfleet.domain.partitionmodes import PartitionPolicy
from rocmfleet.domain.placement import Placement, PlacementError
from rocmfleet.domain.rocm import RocmSettings
from rocmfleet.domain.topology import Topology
from rocmfleet.plan import hoststate
from rocmfleet.plan.hoststate import WantedFile

#: Why a host that shows no KFD topology when the vllm role runs (after any reboot) fails.
NO_KFD = (
    "no GPUs in /sys/class/kfd after the driver install and reboot: amdgpu is not loaded or found no GPU "
    "(see `dmesg | grep -i amdgpu` and `dkms status`); no vLLM instance was placed"
)
ENV_TEMPLATE = "templates/vllm/vllm.env.j2"
UNIT_TEMPLATE = "templates/vllm/vllm.service.j2"


class InstanceHost(Protocol):
    """What an instance's settings and files are made of, of a host's validated configuration
    (``rocmfleet.config.settings.HostConfig`` has it): its ``vllm_*`` settings, profile, image, ROCm
    version and instances. Taken by its fields, so that the deploy's and the plan's vLLM modules do
    not stack on the configuration's validation."""

    @property
    def settings(self) -> HostSettings: ...
    @property
    def profile(self) -> Profile: ...
    @property
    def image(self) -> Image: ...
    @property
    def rocm(self) -> RocmSettings: ...
    def instances(self) -> list[Instance]: ...


def vllm_settings(config: InstanceHost) -> vllm.VllmSettings:
    """The values :mod:`rocmfleet.domain.vllm` reads, from the host's validated configuration: its image,
    profile (name, model, rendered flags, partition modes, TP size), ``vllm_*`` host settings, instances
    and their compiler cache directories (:mod:`rocmfleet.domain.cachedirs`)."""
    profile, settings = config.profile, config.settings
    instances = tuple(config.instances())
    return vllm.VllmSettings(
        image=config.image.reference,
        image_tag=config.image.tag,
        profile=profile.name,
        model=profile.model,
        served_model_name=profile.served_model_name,
        flags=tuple(profile.render().args),
        env_profile=profile,
        vllm_env=settings.vllm_env,
        ready_timeout_s=settings.vllm_ready_timeout_s,
        stop_grace_s=settings.vllm_stop_grace_s,
        shm_size_gib=settings.vllm_shm_size_gib,
        hf_cache_dir=settings.vllm_hf_cache_dir,
        secret_env=tuple(settings.vllm_secret_env),
        instances=instances,
        cache_mounts={i.name: tuple(cachedirs.mounts(config, i)) for i in instances},
        aiter_seed_dirs={i.name: cachedirs.aiter_seed_dir(config, i) for i in instances},
        cache_prepared={i.name: cachedirs.prepared(config, i) for i in instances},
        tensor_parallel_size=profile.tensor_parallel_size,
        attention_heads=profile.attention_heads,
        partition_policy=PartitionPolicy(profile.compute_partition, profile.memory_partition, profile.tp_on_one_gpu),
        automatic_gpus=settings.vllm_instances is None and profile.instance_gpus is None,
        fit_profile=profile,
        gpu_count=settings.vllm_gpu_count,
        rocm_version=config.rocm.rocm_version,
        watchdog=settings.vllm_watchdog,
        probe_request=readiness.probe_args(profile.served_model_name or profile.model, profile.ready_probe)[1],
        revision=profile.revision,
    )


@dataclass(frozen=True)
class HostPlacement:
    """Where each instance of a host runs, from the topology the host shows.

    Attributes:
        placements: ``{instance name: Placement}`` (:func:`rocmfleet.domain.vllmplace.placements`).
        device_gids: numeric group ids owning ``/dev/kfd`` and the render nodes (``DeviceGroupIds``).
        gpu_bdfs: ``{instance name: PCI addresses of its GPUs}``, for the unit's GPU memory check.
    """

    placements: dict[str, Placement]
    device_gids: list[int]
    gpu_bdfs: dict[str, list[str]]


def place_host(
    config: InstanceHost, topology: Topology | None, device_gids: list[int], host_name: str = ""
) -> HostPlacement | str:
    """Place ``config``'s instances on ``topology``.

    Args:
        config: the host's validated configuration.
        topology: the ``GpuTopology`` fact (``None``: the host shows no KFD).
        device_gids: the ``DeviceGroupIds`` fact (or the same from a ``HostState`` read).
        host_name: for the placement messages.

    Returns:
        the :class:`HostPlacement`, or the one line (``rocmfleet: ...``) the host fails with: no
        KFD topology, or instances that do not fit its GPUs. Never raises for a host's problem.
    """
    if topology is None:
        return f"rocmfleet: {NO_KFD}"
    try:
        placements = vllmplace.placements(vllm_settings(config), topology, host_name)
    except PlacementError as exc:
        return f"rocmfleet: placement: {exc}"
    by_index = {g.index: g.pci_address for g in topology.gpus}
    bdfs = {name: [by_index[i] for i in p.gpus if i in by_index] for name, p in placements.items()}
    return HostPlacement(placements, list(device_gids), bdfs)


@dataclass(frozen=True)
class RenderedFiles:
    """One instance's environment file and unit as the deploy writes them.

    Attributes:
        env: ``<CONFIG_DIR>/<name>.env``, root's, 0600.
        unit: ``/etc/systemd/system/vllm-<name>.service``, 0644 (owner left alone).
    """

    env: WantedFile
    unit: WantedFile

    @property
    def files(self) -> tuple[WantedFile, WantedFile]:
        """``(env, unit)``."""
        return self.env, self.unit


def instance_files(config: InstanceHost, instance: Instance, placed: HostPlacement) -> RenderedFiles:
    """Render ``instance``'s environment file and unit (``templates/vllm/``) from its placement.

    Args:
        config: the host's validated configuration.
        instance: one of ``config.instances()``.
        placed: the host's placement (:func:`place_host`).

    Raises:
        KeyError: ``placed`` has no placement for ``instance``.
    """
    names = vllmfiles.files_of(instance)
    placement = placed.placements[instance.name]
    service = vllm_settings(config)
    env = hoststate.render(
        ENV_TEMPLATE,
        instance=instance.name,
        env_lines=vllm.env_lines(vllm.container_env(service, placement)).rstrip("\n"),
    )
    unit = hoststate.render(
        UNIT_TEMPLATE,
        **vllm.unit_template_vars(
            service, instance, placement, placed.device_gids, placed.gpu_bdfs.get(instance.name, [])
        ),
    )
    return RenderedFiles(
        env=WantedFile(names.env_file, env.encode(), "600", "root", "root"),
        unit=WantedFile(names.unit_path, unit.encode(), "644"),
    )


def secrets_content(config: InstanceHost) -> Secret:
    """The secrets file of every instance (``vllm_secret_env`` as ``NAME=value`` lines)."""
    return Secret(vllm.env_lines(_secret_values(config)))


def _secret_values(config: InstanceHost) -> dict[str, str]:
    return {name: secret.reveal() for name, secret in config.settings.vllm_secret_env.items()}


def stage_env_content(config: InstanceHost) -> Secret:
    """The environment file of the model's staging container (``rocmfleet/scripts/model-stage.sh
    --env-file``): the secrets (the token), plus ``HF_ENDPOINT`` when ``vllm_hf_endpoint`` names a
    mirror (huggingface_hub reads it, ``huggingface_hub/constants.py`` ``ENDPOINT``)."""
    values = _secret_values(config)
    if config.settings.vllm_hf_endpoint:
        values["HF_ENDPOINT"] = config.settings.vllm_hf_endpoint
    return Secret(vllm.env_lines(values))


def last_good_of(name: str) -> lastgood.LastGoodFiles:
    """The live files of the instance called ``name`` and its last good directory
    (:func:`rocmfleet.domain.vllmfiles.layout`)."""
    names = vllmfiles.layout(name)
    return lastgood.LastGoodFiles(
        directory=names.last_good_dir,
        live={"unit": names.unit_path, "env": names.env_file, "secrets": names.secrets_file},
    )


def serve_record(config: InstanceHost, instance: Instance, placement: Placement) -> str:
    """What the instance runs: its last good version's ``serve.json``
    (:func:`rocmfleet.domain.lastgood.serve_record`)."""
    service = vllm_settings(config)
    return lastgood.serve_record(
        service.image, vllm.serve_args(service, instance), vllm.container_env(service, placement)
    )
