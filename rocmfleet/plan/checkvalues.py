"""What ``rocmfleet check`` compares a host's live answers with, from its data (pure).

:func:`check_values` is read by :func:`rocmfleet.plan.build.plan_host` only: the values land in the
host's plan (:class:`rocmfleet.plan.model.CheckValues`), which is all a check process receives
(``rocmfleet/fleet/check/``): it never reads or rebuilds the configuration. No secret is among them
(the instances' secrets are the secrets file's :attr:`~rocmfleet.plan.model.FilePlan.secret_names`).
"""

from __future__ import annotations

from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import cachedirs, cachekey, vllmfiles
from rocmfleet.plan.checkmodel import CheckInstance, CheckValues
from rocmfleet.plan.sources import HostFacts


def _cache_key(config: HostConfig, facts: HostFacts) -> tuple[str | None, str]:
    """The baked image's wanted key on the facts' GPUs (image facts empty: the label's are used) and
    their architecture; ``(None, "")`` when not baked or the GPUs have no one architecture."""
    archs = {g.gfx_arch for g in facts.topology.gpus} if facts.topology is not None else set()
    if not cachedirs.is_baked(config) or len(archs) != 1:
        return None, ""
    arch = archs.pop()
    image = cachekey.ImageFacts.model_construct(
        base_digest="", rocm_version="", vllm_version=config.profile.vllm_version
    )
    return cachekey.instance_key(config, arch, image).canonical(), arch


def check_values(config: HostConfig, facts: HostFacts) -> CheckValues:
    """The :class:`CheckValues` of a host.

    Args:
        config: its validated configuration.
        facts: what its plan is made on (the GPUs' architecture for a baked image's key).
    """
    profile, settings, tuning = config.profile, config.settings, config.tuning
    instances = []
    for instance in config.instances():
        names = vllmfiles.files_of(instance)
        instances.append(
            CheckInstance(
                name=instance.name,
                port=instance.port,
                internal_ports=instance.internal_ports.spec(),
                unit=names.unit,
                container=names.container,
                env_file=names.env_file,
                unit_path=names.unit_path,
                secrets_file=names.secrets_file,
            )
        )
    key, arch = _cache_key(config, facts)
    return CheckValues(
        instances=tuple(instances),
        gpu_count=settings.vllm_gpu_count,
        ecc_correctable_max=settings.gpu_ecc_correctable_max,
        docker_version=settings.docker_version,
        image=config.image.reference,
        image_pinned=f"{config.image.repository}@{config.image.digest}",
        baked=cachedirs.is_baked(config),
        cache_key=key,
        cache_arch=arch,
        profile=profile.name,
        served_model=profile.served_model_name,
        vllm_version=profile.vllm_version,
        compute_partition=profile.compute_partition,
        memory_partition=profile.memory_partition,
        tp_on_one_gpu=profile.tp_on_one_gpu,
        ready_probe=profile.ready_probe.model_dump(mode="json") if profile.ready_probe else None,
        numa_balancing_off=tuning.tuning_numa_balancing_off,
        disable_c2=tuning.tuning_disable_c2,
        transparent_hugepage=tuning.tuning_transparent_hugepage,
        cpu_governor=tuning.tuning_cpu_governor,
        kernel_params=tuple(tuning.kernel_params),
        rocm=config.rocm.model_dump(mode="json"),
        metrics=config.metrics.model_dump(mode="json"),
    )
