"""The vLLM service: container command line, environment files and unit names per instance.

Docker flags follow AMD's and vLLM's ROCm documentation (``../shared/reference/mi300x.md``
§3.1): ``--device /dev/kfd`` plus the instance's own render nodes (§3.2: real isolation;
minors from KFD ``drm_render_minor``, never ``128+i``), ``--ipc=host``, ``--group-add`` with
the numeric GIDs owning those device files, ``--security-opt seccomp=unconfined``,
``--cap-add=SYS_PTRACE``, a large ``--shm-size``, and ``--cpuset-cpus``/``--cpuset-mems`` from
the GPUs' NUMA nodes (§7). The official image's entrypoint is ``vllm serve``
(vllm-project/vllm ``docker/Dockerfile.rocm``), so arguments after the image are
``vllm serve`` arguments, rendered for the image's vLLM version by :mod:`rocmfleet.flags`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmfleet.placement import InstanceShape, Placement, place
from rocmfleet.settings import HostConfig, Instance
from rocmfleet.topology import Topology

#: Where the deploy keeps per-instance files on the host.
CONFIG_DIR = "/etc/rocmfleet/vllm"
KFD = "/dev/kfd"


@dataclass(frozen=True)
class InstanceFiles:
    """Names and paths of one instance on the host."""

    unit: str  # vllm-<name>.service
    container: str  # vllm-<name>
    env_file: str  # container environment (0600)
    secrets_file: str  # systemd EnvironmentFile with the secret values (0600)


def files_of(instance: Instance) -> InstanceFiles:
    """Unit, container and file names of ``instance``."""
    return InstanceFiles(
        unit=f"vllm-{instance.name}.service",
        container=f"vllm-{instance.name}",
        env_file=f"{CONFIG_DIR}/{instance.name}.env",
        secrets_file=f"{CONFIG_DIR}/{instance.name}.secrets",
    )


def serve_args(config: HostConfig, instance: Instance) -> list[str]:
    """``vllm serve`` arguments: model, served name, address, then the profile's flags for its vLLM."""
    profile = config.profile
    return [
        profile.model,
        "--served-model-name", profile.served_model_name,
        "--host", "0.0.0.0",
        "--port", str(instance.port),
        *profile.render().args,
    ]  # fmt: skip


def container_env(config: HostConfig, placement: Placement) -> dict[str, str]:
    """Container environment: the profile's rendered variables, ``vllm_env``, visible devices."""
    return {**config.profile.render().env, **config.settings.vllm_env, **placement.visible_devices_env}


def docker_run_argv(config: HostConfig, instance: Instance, placement: Placement, device_gids: list[int]) -> list[str]:
    """The full ``docker run`` command of ``instance``'s unit.

    Args:
        config: validated host configuration.
        instance: the instance to run.
        placement: its render nodes and NUMA binding (:func:`rocmfleet.placement.place`).
        device_gids: numeric group ids owning the GPU device files on the host (the
            ``DeviceGroupIds`` fact); numeric because the image's ``/etc/group`` may lack
            ``render`` or number it differently.

    Returns:
        argv, starting with ``/usr/bin/docker run``; the image is pinned by digest, secrets
        appear only as ``-e NAME`` (their values come from the unit's EnvironmentFile).
    """
    files = files_of(instance)
    settings = config.settings
    argv = [
        "/usr/bin/docker", "run", "--rm",
        "--name", files.container,
        "--network=host",
        "--ipc=host",
        "--shm-size", f"{settings.vllm_shm_size_gib}g",
        "--security-opt", "seccomp=unconfined",
        "--cap-add=SYS_PTRACE",
        "--device", KFD,
    ]  # fmt: skip
    for node in placement.render_nodes:
        argv += ["--device", node]
    for gid in sorted(set(device_gids)):
        argv += ["--group-add", str(gid)]
    if placement.cpuset_cpus:
        argv += ["--cpuset-cpus", placement.cpuset_cpus, "--cpuset-mems", placement.cpuset_mems]
    argv += ["--env-file", files.env_file]
    for name in sorted(settings.vllm_secret_env):
        argv += ["--env", name]
    argv += [
        "--volume", f"{settings.vllm_cache_dir}:/root/.cache/vllm",
        "--volume", f"{settings.vllm_hf_cache_dir}:/root/.cache/huggingface",
        "--label", f"org.rocmfleet.instance={instance.name}",
        "--label", f"org.rocmfleet.profile={config.profile.name}",
        "--label", f"org.rocmfleet.image-tag={config.image.tag}",
        config.image.reference,
    ]  # fmt: skip
    return argv + serve_args(config, instance)


def env_lines(env: dict[str, str]) -> str:
    """``NAME=value`` lines, sorted, for Docker's ``--env-file`` or systemd's EnvironmentFile."""
    return "".join(f"{name}={value}\n" for name, value in sorted(env.items()))


def instance_shapes(config: HostConfig) -> list[InstanceShape]:
    """What each of the host's instances asks of placement: GPUs, TP size, attention heads."""
    tp, heads = config.profile.tensor_parallel_size, config.profile.attention_heads
    return [InstanceShape(i.name, i.port, i.gpus, tp, heads) for i in config.instances()]


def placements(config: HostConfig, topology: Topology) -> dict[str, Placement]:
    """Each instance's placement on ``topology`` (the ``GpuTopology`` fact), by instance name.

    Raises:
        PlacementError: the instances do not fit this host's GPUs (:func:`rocmfleet.placement.place`).
    """
    return {p.name: p for p in place(instance_shapes(config), topology)}
