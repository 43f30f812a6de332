"""What ``rocmfleet check`` compares a host's live answers with: part of the host's plan (pure data).

:class:`CheckValues` is :attr:`rocmfleet.plan.model.HostPlan.checks`, made by
:func:`rocmfleet.plan.checkvalues.check_values` from the host's data; each value is one of its data
(no secret: the instances' secrets are their secrets file's names), so a check process needs the
plan only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckInstance:
    """One vLLM instance of a host as ``rocmfleet check`` looks at it, placed or not (its checks run
    either way: an instance that cannot be placed fails ``vllm::instance_files_as_wanted``).

    Attributes:
        name, port, internal_ports: the instance, its API port and its internal port block (``start-end``).
        unit, container, env_file, unit_path, secrets_file: its names and paths on the host.
    """

    name: str
    port: int
    internal_ports: str
    unit: str
    container: str
    env_file: str
    unit_path: str
    secrets_file: str


@dataclass(frozen=True)
class CheckValues:
    """What ``rocmfleet check`` compares a host's live answers with, beyond the plan's items: each a
    value of the host's data, so that the check process needs the plan only (never the configuration).

    Attributes:
        instances: every vLLM instance of the host (:class:`CheckInstance`), placed or not.
        gpu_count: GPUs the host must show (``vllm_gpu_count``).
        ecc_correctable_max: correctable ECC errors per GPU since boot a GPU may have (``gpu_ecc_correctable_max``).
        docker_version: ``docker_version`` (``None``: Docker is not pinned).
        image: the image's reference; ``image_pinned``: ``repository@digest``, what the containers run.
        baked: the image's tag names a cache key (``rocmfleet cache bake``).
        cache_key: for a baked image, the key its instances compile with on the plan's GPUs (canonical
            JSON, :class:`rocmfleet.domain.cachekey.CacheKey`, whose image facts, read from the image's
            label, are empty here); ``None``: not baked, or the plan's GPUs have no one architecture.
        cache_arch: the GPU architecture ``cache_key`` was made for (``""``: none).
        profile, served_model, vllm_version: the profile's name, served model name and vLLM version.
        compute_partition, memory_partition, tp_on_one_gpu: the profile's partition policy.
        ready_probe: the profile's known-answer request (``ReadyProbe`` fields; ``None``: none).
        numa_balancing_off, disable_c2, transparent_hugepage, cpu_governor, kernel_params: the tuning
            role's settings the live checks compare with (``tuning_*``).
        rocm: the rocm role's settings (``rocm_*``, as JSON), which its live rule
            (:func:`rocmfleet.plan.rocmplan.differs`: AMD's keys, the repositories' versions, DKMS) takes.
        metrics: the exporter role's settings (``metrics_*``, as JSON), for its package's rule
            (:func:`rocmfleet.plan.exporterplan.package_problem`) and the exporter's port.
    """

    instances: tuple[CheckInstance, ...]
    gpu_count: int
    ecc_correctable_max: int
    docker_version: str | None
    image: str
    image_pinned: str
    baked: bool
    cache_key: str | None
    cache_arch: str
    profile: str
    served_model: str
    vllm_version: str
    compute_partition: str
    memory_partition: str
    tp_on_one_gpu: bool
    ready_probe: dict[str, object] | None
    numa_balancing_off: bool
    disable_c2: bool
    transparent_hugepage: str | None
    cpu_governor: str | None
    kernel_params: tuple[str, ...]
    rocm: dict[str, object]
    metrics: dict[str, object]
