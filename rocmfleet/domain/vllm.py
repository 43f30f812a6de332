"""The vLLM service: container command line, environment files and unit names per instance.

Docker flags follow AMD's and vLLM's ROCm documentation (``../shared/reference/mi300x.md``
§3.1): ``--device /dev/kfd`` plus the instance's own render nodes (§3.2: real isolation;
minors from KFD ``drm_render_minor``, never ``128+i``), ``--ipc=host``, ``--group-add`` with
the numeric GIDs owning those device files, ``--security-opt seccomp=unconfined``,
``--cap-add=SYS_PTRACE``, a large ``--shm-size``, and ``--cpuset-cpus``/``--cpuset-mems`` from
the GPUs' NUMA nodes (§7). The official image's entrypoint is ``vllm serve``
(vllm-project/vllm ``docker/Dockerfile.rocm``), so arguments after the image are
``vllm serve`` arguments, rendered for the image's vLLM version by :mod:`rocmfleet.domain.flags`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from rocmfleet.config.settings import HostConfig, HostSettings, Instance
from rocmfleet.domain import cachedirs, envpolicy, partitionmodes, partitions
from rocmfleet.domain.placement import InstanceShape, Placement, PlacementError, place
from rocmfleet.domain.systemd import exec_line
from rocmfleet.domain.topology import Gpu, Topology

#: Where the deploy keeps per-instance files on the host.
CONFIG_DIR = "/etc/rocmfleet/vllm"
KFD = "/dev/kfd"

#: Where the deploy installs what the units run (``rocmfleet/scripts/vllm-unit.sh`` and the GPU
#: memory check ``gpu_free.py`` beside it).
SCRIPT_DIR = "/usr/local/lib/rocmfleet"
UNIT_SCRIPT = f"{SCRIPT_DIR}/vllm-unit.sh"
#: Scripts the role installs there: ``{name in rocmfleet/scripts: mode}``.
UNIT_SCRIPTS = {"vllm-unit.sh": "755", "gpu_free.py": "644"}
#: Exit status of ``vllm-unit.sh run`` when another process holds the GPUs (``gpu_free.HELD_EXIT``).
GPU_HELD_EXIT = 75


@dataclass(frozen=True)
class UnitTimings:
    """The unit's timeouts and restart policy, in seconds (``templates/vllm/vllm.service.j2``).

    Attributes:
        stop_grace_s: ``docker stop --time`` and the container's ``--stop-timeout``: vLLM gets
            SIGTERM (through ``--init``) and this long to finish in-flight requests before SIGKILL.
        timeout_start_s: ``TimeoutStartSec``. The unit is ``Type=exec``: the start job is over once
            the main process runs, so this bounds ``ExecStartPre`` only, which stops a container left
            running (up to its grace period) and removes it. The model load is bounded by vLLM's
            ``VLLM_ENGINE_READY_TIMEOUT_S`` and the deploy's ``vllm_ready_timeout_s``, not by systemd.
        timeout_stop_s: ``TimeoutStopSec``: the grace period, ``docker stop``'s SIGKILL, a margin.
        restart_s: ``RestartSec``: back-off before a crashed container is replaced.
        start_limit_burst, start_limit_interval_s: that many starts within the interval and the
            next is refused: the unit stays failed and its journal says "Start request repeated too
            quickly" (systemd.unit(5)); its ``Result`` stays the first failure's (``exit-code``
            after a crash), ``start-limit-hit`` only when the last run had ended cleanly.
            Three crashes, each within a few minutes of its start, fit in the interval.
    """

    stop_grace_s: int
    timeout_start_s: int
    timeout_stop_s: int
    restart_s: int = 20
    start_limit_burst: int = 3
    start_limit_interval_s: int = 900


#: Margin over the grace period for ``docker stop``'s own SIGKILL and ``docker rm``.
STOP_MARGIN_S = 30


def unit_timings(settings: HostSettings) -> UnitTimings:
    """:class:`UnitTimings` from ``vllm_stop_grace_s``."""
    grace = settings.vllm_stop_grace_s
    return UnitTimings(stop_grace_s=grace, timeout_start_s=grace + STOP_MARGIN_S, timeout_stop_s=grace + STOP_MARGIN_S)


#: Where the instances' systemd units are.
UNIT_DIR = "/etc/systemd/system"


@dataclass(frozen=True)
class InstanceFiles:
    """Names and paths of one instance on the host: the one place they are spelled.

    Attributes:
        unit: ``vllm-<name>.service``.
        container: ``vllm-<name>``.
        env_file: the container environment, ``<CONFIG_DIR>/<name>.env`` (0600).
        secrets_file: the systemd EnvironmentFile with the secret values, ``<CONFIG_DIR>/<name>.secrets`` (0600).
        unit_path: ``<UNIT_DIR>/vllm-<name>.service`` (0644).
        last_good_dir: ``<CONFIG_DIR>/<name>.last-good``, the copies of the last version found ready.
    """

    unit: str
    container: str
    env_file: str
    secrets_file: str
    unit_path: str
    last_good_dir: str


def layout(name: str) -> InstanceFiles:
    """Unit, container and file names of the instance called ``name`` (also one the data no longer lists)."""
    return InstanceFiles(
        unit=f"vllm-{name}.service",
        container=f"vllm-{name}",
        env_file=f"{CONFIG_DIR}/{name}.env",
        secrets_file=f"{CONFIG_DIR}/{name}.secrets",
        unit_path=f"{UNIT_DIR}/vllm-{name}.service",
        last_good_dir=f"{CONFIG_DIR}/{name}.last-good",
    )


def instance_of_unit(path: str) -> str:
    """The instance name of a unit :func:`layout` named, from its name or path
    (``/etc/systemd/system/vllm-a.service`` -> ``a``)."""
    return path.rsplit("/", 1)[-1].removesuffix(".service").removeprefix("vllm-")


def files_of(instance: Instance) -> InstanceFiles:
    """Unit, container and file names of ``instance`` (:func:`layout` of its name)."""
    return layout(instance.name)


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
    """Container environment: the profile's rendered variables, its named sets and the safe values for
    the placement's GPU architecture, then ``vllm_env``, then ``VLLM_ENGINE_READY_TIMEOUT_S`` from
    ``vllm_ready_timeout_s`` (vLLM >= 0.14), then visible devices
    (:func:`rocmfleet.domain.envpolicy.container_env`), then the compiler cache paths
    (:func:`rocmfleet.domain.cachedirs.env`)."""
    env = envpolicy.container_env(
        config.profile, config.settings.vllm_env, placement, config.settings.vllm_ready_timeout_s
    )
    return {**env, **cachedirs.env()}


def docker_run_argv(
    config: HostConfig,
    instance: Instance,
    placement: Placement,
    device_gids: list[int],
    cache_mounts: list[cachedirs.Mount] | None = None,
) -> list[str]:
    """The full ``docker run`` command of ``instance``'s unit.

    Args:
        config: validated host configuration.
        instance: the instance to run.
        placement: its render nodes and NUMA binding (:func:`rocmfleet.domain.placement.place`).
        device_gids: numeric group ids owning the GPU device files on the host (the
            ``DeviceGroupIds`` fact); numeric because the image's ``/etc/group`` may lack
            ``render`` or number it differently.
        cache_mounts: the compiler cache mounts; default :func:`rocmfleet.domain.cachedirs.mounts`
            (the instance's own directories, or none for a baked image). ``rocmfleet cache bake``
            passes its empty bake directories.

    Returns:
        argv, starting with ``/usr/bin/docker run --detach``; the image is pinned by digest, secrets
        appear only as ``--env NAME`` (their values come from the unit's EnvironmentFile).

    The container is created detached and is Docker's (``--restart no``: the unit restarts it):
    with ``live-restore`` it outlives a dockerd restart. ``--init`` runs Docker's init as PID 1,
    which forwards ``docker stop``'s SIGTERM to ``vllm serve`` and reaps its workers;
    ``--stop-timeout`` gives the same grace period to a ``docker stop`` made without ``--time``.
    The container is not ``--rm``: after a crash its log stays readable (``docker logs``) until
    the next start removes it (``vllm-unit.sh clear``).
    """
    files = files_of(instance)
    settings = config.settings
    argv = [
        "/usr/bin/docker", "run", "--detach", "--init",
        "--restart", "no",
        "--stop-timeout", str(settings.vllm_stop_grace_s),
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
        *(a for m in (cachedirs.mounts(config, instance) if cache_mounts is None else cache_mounts)
          for a in ("--volume", m.arg())),
        "--volume", f"{settings.vllm_hf_cache_dir}:/root/.cache/huggingface",
        "--label", f"org.rocmfleet.instance={instance.name}",
        "--label", f"org.rocmfleet.profile={config.profile.name}",
        "--label", f"org.rocmfleet.image-tag={config.image.tag}",
        config.image.reference,
    ]  # fmt: skip
    return argv + serve_args(config, instance)


def unit_exec_start(
    config: HostConfig, instance: Instance, placement: Placement, device_gids: list[int], gpu_bdfs: list[str]
) -> list[str]:
    """The unit's ``ExecStart`` argv: ``vllm-unit.sh run CONTAINER INSTANCE BDFS -- <docker run argv>``.

    Args:
        gpu_bdfs: PCI addresses (``0000:05:00.0``) of the instance's GPUs, for the GPU memory check
            (``amd-smi process --gpu``); empty: no check.
    """
    files = files_of(instance)
    return [
        UNIT_SCRIPT, "run", files.container, instance.name, ",".join(gpu_bdfs), "--",
        *docker_run_argv(config, instance, placement, device_gids),
    ]  # fmt: skip


def unit_template_vars(
    config: HostConfig, instance: Instance, placement: Placement, device_gids: list[int], gpu_bdfs: list[str]
) -> dict[str, object]:
    """What ``templates/vllm/vllm.service.j2`` is rendered with for ``instance`` (arguments as
    :func:`unit_exec_start`): names, the quoted ``ExecStart``, the ``ExecStartPre`` that seeds the
    instance's AITER JIT directory (:func:`rocmfleet.domain.cachedirs.aiter_seed_dir`; empty for a baked
    image) and :func:`unit_timings`."""
    files = files_of(instance)
    seed = cachedirs.aiter_seed_dir(config, instance)
    return {
        "instance": instance.name,
        # Description= expands systemd specifiers: a literal % is %% (systemd.unit(5), "Specifiers").
        "model": config.profile.served_model_name.replace("%", "%%"),
        "port": instance.port,
        "image": config.image.reference,
        "container": files.container,
        "secrets_file": files.secrets_file,
        "notes": placement.notes,
        "script": UNIT_SCRIPT,
        "seed_aiter": exec_line([UNIT_SCRIPT, "seed-aiter", config.image.reference, seed]) if seed else "",
        "exec_start": exec_line(unit_exec_start(config, instance, placement, device_gids, gpu_bdfs)),
        "gpu_held_exit": GPU_HELD_EXIT,
        **asdict(unit_timings(config.settings)),
    }


def env_lines(env: dict[str, str]) -> str:
    """``NAME=value`` lines, sorted, for Docker's ``--env-file`` or systemd's EnvironmentFile."""
    return "".join(f"{name}={value}\n" for name, value in sorted(env.items()))


def instance_shapes(config: HostConfig, topology: Topology | None = None) -> list[InstanceShape]:
    """What each of the host's instances asks of placement: GPUs, TP size, attention heads.

    With ``topology`` and a profile in a partitioned compute mode (``compute_partition`` other than
    SPX) whose instances come from ``gpus_per_instance``, the GPUs are chosen on the topology by
    :func:`rocmfleet.domain.partitions.spread` (distinct physical GPUs per TP group, instances spread
    over GPUs and NUMA nodes); otherwise they are the configured indices.

    Raises:
        PlacementError: the partitions cannot be spread as the profile asks.
    """
    tp, heads = config.profile.tensor_parallel_size, config.profile.attention_heads
    instances = config.instances()
    gpus = [i.gpus for i in instances]
    policy = partition_policy(config)
    automatic = config.settings.vllm_instances is None and config.profile.instance_gpus is None
    if topology is not None and policy.partitioned and automatic:
        gpus, problems = partitions.spread([i.name for i in instances], [len(g) for g in gpus], topology, policy)
        if problems:
            raise PlacementError(problems)
    return [InstanceShape(i.name, i.port, g, tp, heads) for i, g in zip(instances, gpus, strict=True)]


def partition_policy(config: HostConfig) -> partitionmodes.PartitionPolicy:
    """The profile's compute and memory partition modes (:mod:`rocmfleet.domain.partitions`)."""
    p = config.profile
    return partitionmodes.PartitionPolicy(p.compute_partition, p.memory_partition, p.tp_on_one_gpu)


def placements(config: HostConfig, topology: Topology, host: str = "") -> dict[str, Placement]:
    """Each instance's placement on ``topology`` (the ``GpuTopology`` fact), by instance name.

    The host's GPUs must be in the profile's partition modes (SPX/NPS1 unless it says otherwise),
    and no TP group may share a physical GPU unless the profile allows it.

    Args:
        host: the host's name, for the messages.

    Raises:
        PlacementError: GPUs in another partition mode (naming the host, the mode found and the
            ``amd-smi`` command that changes it), or instances that do not fit this host's GPUs
            (:func:`rocmfleet.domain.placement.place`).
    """
    policy = partition_policy(config)
    problems = partitions.mode_problems(topology, policy, host, config.profile.name)
    if problems:
        raise PlacementError(problems)
    shapes = instance_shapes(config, topology)
    by_index = {g.index: g for g in topology.gpus}
    tp = config.profile.tensor_parallel_size
    problems = [
        p
        for s in shapes
        for p in partitions.tp_group_problems(s.name, [by_index[i] for i in s.gpus if i in by_index], policy, tp)
    ]
    if problems:
        raise PlacementError(problems)
    placed = place(shapes, topology)
    if policy.partitioned:
        placed = [replace(p, notes=(*p.notes, _partition_note(p, by_index, policy))) for p in placed]
    return {p.name: p for p in placed}


def _partition_note(placement: Placement, by_index: dict[int, Gpu], policy: partitionmodes.PartitionPolicy) -> str:
    """``compute partition CPX: GPUs 0,8 are partitions of physical GPUs 0000:05:00.0, 0000:27:00.0``."""
    physical = list(dict.fromkeys(by_index[i].physical for i in placement.gpus))
    return (
        f"compute partition {policy.compute}: GPU(s) {','.join(map(str, placement.gpus))} are partitions of "
        f"physical GPU(s) {', '.join(physical)}"
    )
