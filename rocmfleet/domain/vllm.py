"""The vLLM service: container command line, environment files and unit names per instance.

Docker flags follow AMD's and vLLM's ROCm documentation (``../shared/reference/mi300x.md``
§3.1): ``--device /dev/kfd`` plus the instance's own render nodes (§3.2: real isolation;
minors from KFD ``drm_render_minor``, never ``128+i``), ``--ipc=host``, ``--group-add`` with
the numeric GIDs owning those device files, ``--security-opt seccomp=unconfined``,
``--cap-add=SYS_PTRACE``, a large ``--shm-size``, and ``--cpuset-cpus``/``--cpuset-mems`` from
the GPUs' NUMA nodes (§7). The official image's entrypoint is ``vllm serve``
(vllm-project/vllm ``docker/Dockerfile.rocm``), so arguments after the image are
``vllm serve`` arguments, rendered for the image's vLLM version by :mod:`rocmfleet.domain.flags`.

This module reads no host configuration: it takes :class:`VllmSettings`, the values it needs,
which the plan layer builds from a host's validated configuration
(:func:`rocmfleet.plan.instance.vllm_settings`), and instances shaped as :class:`ServedInstance`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Protocol

from rocmfleet.domain import cachedirs, cacheproof, envpolicy, hfmodel, lastgood, memfit, ports
from rocmfleet.domain.partitionmodes import PartitionPolicy
from rocmfleet.domain.placement import Placement
from rocmfleet.domain.systemd import exec_line
from rocmfleet.domain.vllmfiles import CONFIG_DIR, files_of, unit_timings
from rocmfleet.domain.watchdog import GAVE_UP_EXIT, WatchdogSettings, watch_args

KFD = "/dev/kfd"

#: Where the deploy installs what the units run (``rocmfleet/scripts/vllm-unit.sh`` and the GPU
#: memory check ``gpu_free.py`` beside it).
SCRIPT_DIR = "/usr/local/lib/rocmfleet"
UNIT_SCRIPT = f"{SCRIPT_DIR}/vllm-unit.sh"
#: Scripts the role installs there: ``{name in rocmfleet/scripts: mode}``.
UNIT_SCRIPTS = {"vllm-unit.sh": "755", "gpu_free.py": "644"}
#: Exit status of ``vllm-unit.sh run`` when another process holds the GPUs (``gpu_free.HELD_EXIT``).
GPU_HELD_EXIT = 75


class ServedInstance(Protocol):
    """One vLLM server of a host, as this module reads it (``rocmfleet.config.instances.Instance`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def gpus(self) -> tuple[int, ...]: ...
    @property
    def internal_port(self) -> int: ...


@dataclass(frozen=True)
class VllmSettings:
    """What the vLLM service of one host is made of: every value this module reads, built from the
    host's validated configuration by :func:`rocmfleet.plan.instance.vllm_settings`.

    Attributes:
        image: the image reference, pinned by digest (``repository:tag@sha256:...``).
        image_tag: the image's tag (label ``org.rocmfleet.image-tag``).
        profile: the profile's name (label ``org.rocmfleet.profile``).
        model: the profile's model (path or id): the first ``vllm serve`` argument.
        served_model_name: the name the API serves it under.
        flags: the profile's ``vllm serve`` flags for its vLLM version (``Profile.render().args``).
        env_profile: what the container environment is rendered from (the profile, as
            :class:`rocmfleet.domain.envpolicy.EnvProfile`).
        vllm_env: host data's ``vllm_env`` (no secrets).
        ready_timeout_s: ``vllm_ready_timeout_s``, seconds.
        stop_grace_s: ``vllm_stop_grace_s``, seconds (:class:`UnitTimings`).
        shm_size_gib: ``vllm_shm_size_gib``.
        hf_cache_dir: ``vllm_hf_cache_dir``, the host's Hugging Face cache.
        secret_env: the names of ``vllm_secret_env`` (never their values).
        instances: the host's instances (``HostConfig.instances()``), in order.
        cache_mounts: ``{instance name: its compiler cache mounts}`` (:func:`rocmfleet.domain.cachedirs.mounts`).
        aiter_seed_dirs: ``{instance name: the directory its unit seeds with AITER modules, or None}``
            (:func:`rocmfleet.domain.cachedirs.aiter_seed_dir`).
        cache_prepared: ``{instance name: (its cache root, the image's namespace), or None}``
            (:func:`rocmfleet.domain.cachedirs.prepared`): what its unit prepares before each start.
        tensor_parallel_size: the profile's TP size.
        attention_heads: the model's attention heads (the profile's; ``None``: unknown).
        partition_policy: the profile's compute and memory partition modes.
        automatic_gpus: the instances' GPUs come from the profile's ``gpus_per_instance`` (neither
            ``vllm_instances`` nor the profile's ``instance_gpus`` lists them), so that in a partitioned
            mode they are chosen on the topology (:func:`instance_shapes`).
        fit_profile: what the memory fit reads of the profile (:mod:`rocmfleet.domain.memfit`),
            checked again with the memory of the host's part.
        gpu_count: ``vllm_gpu_count``: the GPUs (KFD nodes) the host should show.
        rocm_version: the host's ``rocm_version``.
        watchdog: ``vllm_watchdog`` (:mod:`rocmfleet.domain.watchdog`).
        probe_request: the JSON body of the instance's known-answer completion, which the watchdog
            sends (:func:`rocmfleet.domain.readiness.probe_args`); empty: no watchdog.
        revision: the profile's model revision (``--revision``, the snapshot staged on the host:
            :mod:`rocmfleet.domain.hfmodel`); ``None``: a local path or an unpinned model.
    """

    image: str
    image_tag: str
    profile: str
    model: str
    served_model_name: str
    flags: tuple[str, ...]
    env_profile: envpolicy.EnvProfile
    vllm_env: Mapping[str, str]
    ready_timeout_s: int | None
    stop_grace_s: int
    shm_size_gib: int
    hf_cache_dir: str
    secret_env: tuple[str, ...]
    instances: tuple[ServedInstance, ...]
    cache_mounts: Mapping[str, tuple[cachedirs.Mount, ...]]
    aiter_seed_dirs: Mapping[str, str | None]
    cache_prepared: Mapping[str, tuple[str, str] | None]
    tensor_parallel_size: int
    attention_heads: int | None
    partition_policy: PartitionPolicy
    automatic_gpus: bool
    fit_profile: memfit.FitSettings
    gpu_count: int = 8
    rocm_version: str = ""
    watchdog: WatchdogSettings = field(default_factory=WatchdogSettings)
    probe_request: str = ""
    revision: str | None = None


def serve_args(service: VllmSettings, instance: ServedInstance) -> list[str]:
    """``vllm serve`` arguments: model, its ``--revision`` when pinned, served name, address, then the
    profile's flags for its vLLM."""
    return [
        service.model,
        *(["--revision", service.revision] if service.revision else []),
        "--served-model-name", service.served_model_name,
        "--host", "0.0.0.0",
        "--port", str(instance.port),
        *service.flags,
    ]  # fmt: skip


def container_env(service: VllmSettings, placement: Placement) -> dict[str, str]:
    """Container environment: the profile's rendered variables, its named sets and the safe values for
    the placement's GPU architecture, then ``vllm_env``, then ``VLLM_ENGINE_READY_TIMEOUT_S`` from
    ``vllm_ready_timeout_s`` (vLLM >= 0.14), then visible devices
    (:func:`rocmfleet.domain.envpolicy.container_env`), then the compiler cache paths
    (:func:`rocmfleet.domain.cachedirs.env`), then the Hugging Face cache offline
    (:func:`rocmfleet.domain.hfmodel.offline_env`: ``HF_HUB_OFFLINE=1``), then ``VLLM_PORT``, the first
    of the instance's internal ports (:func:`rocmfleet.domain.ports.env`; ``vllm_env`` may set neither),
    then, for a baked image (its tag ``...-rfcache-<key>``), vLLM's strict AOT load mode where it takes
    effect (:func:`rocmfleet.domain.cacheproof.strict_env`: a cache miss fails the start instead of compiling).

    Raises:
        KeyError: ``service.instances`` has no instance named ``placement.name``.
    """
    env = envpolicy.container_env(service.env_profile, service.vllm_env, placement, service.ready_timeout_s)
    instance = {i.name: i for i in service.instances}[placement.name]
    env = {**env, **cachedirs.env(), **hfmodel.offline_env(), **ports.env(instance.internal_port)}
    if cachedirs.baked_key_of(service.image_tag) is not None:
        env.update(cacheproof.strict_env(service.env_profile.vllm_version, env))
    return env


def docker_run_argv(
    service: VllmSettings,
    instance: ServedInstance,
    placement: Placement,
    device_gids: list[int],
    cache_mounts: list[cachedirs.Mount] | None = None,
) -> list[str]:
    """The full ``docker run`` command of ``instance``'s unit.

    Args:
        service: the host's vLLM settings (:class:`VllmSettings`).
        instance: the instance to run, one of ``service.instances``.
        placement: its render nodes and NUMA binding (:func:`rocmfleet.domain.placement.place`).
        device_gids: numeric group ids owning the GPU device files on the host (the
            ``DeviceGroupIds`` fact); numeric because the image's ``/etc/group`` may lack
            ``render`` or number it differently.
        cache_mounts: the compiler cache mounts; default the instance's ``service.cache_mounts``
            (:func:`rocmfleet.domain.cachedirs.mounts`: its own directories, or none for a baked image).
            ``rocmfleet cache bake`` passes its empty bake directories.

    Returns:
        argv, starting with ``/usr/bin/docker run --detach``; the image is pinned by digest, secrets
        appear only as ``--env NAME`` (their values come from the unit's EnvironmentFile); the host's
        Hugging Face cache is mounted read-only (the model is staged before: :mod:`rocmfleet.domain.hfmodel`).

    Raises:
        KeyError: ``cache_mounts`` is not given and ``service.cache_mounts`` has no entry for ``instance``.

    The container is created detached and is Docker's (``--restart no``: the unit restarts it):
    with ``live-restore`` it outlives a dockerd restart. ``--init`` runs Docker's init as PID 1,
    which forwards ``docker stop``'s SIGTERM to ``vllm serve`` and reaps its workers;
    ``--stop-timeout`` gives the same grace period to a ``docker stop`` made without ``--time``.
    The container is not ``--rm``: after a crash its log stays readable (``docker logs``) until
    the next start removes it (``vllm-unit.sh clear``).
    """
    files = files_of(instance)
    mounts = service.cache_mounts[instance.name] if cache_mounts is None else cache_mounts
    argv = [
        "/usr/bin/docker", "run", "--detach", "--init",
        "--restart", "no",
        "--stop-timeout", str(service.stop_grace_s),
        "--name", files.container,
        "--network=host",
        "--ipc=host",
        "--shm-size", f"{service.shm_size_gib}g",
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
    for name in sorted(service.secret_env):
        argv += ["--env", name]
    argv += [
        *(a for m in mounts for a in ("--volume", m.arg())),
        # Read-only: the model was staged before the unit started (rocmfleet.domain.hfmodel).
        "--volume", hfmodel.cache_volume(service.hf_cache_dir),
        "--label", f"org.rocmfleet.instance={instance.name}",
        "--label", f"org.rocmfleet.profile={service.profile}",
        "--label", f"org.rocmfleet.image-tag={service.image_tag}",
        service.image,
    ]  # fmt: skip
    return argv + serve_args(service, instance)


def unit_exec_start(
    service: VllmSettings, instance: ServedInstance, placement: Placement, device_gids: list[int], gpu_bdfs: list[str]
) -> list[str]:
    """The unit's ``ExecStart`` argv: ``vllm-unit.sh run CONTAINER INSTANCE BDFS [--watch-* ...] --
    <docker run argv>``, the watchdog's options (:func:`rocmfleet.domain.watchdog.watch_args`)
    when it is enabled and the service has a probe request.

    Args:
        service, instance, placement, device_gids: as :func:`docker_run_argv`.
        gpu_bdfs: PCI addresses (``0000:05:00.0``) of the instance's GPUs, for the GPU memory check
            (``amd-smi process --gpu``); empty: no check.
    """
    files = files_of(instance)
    start_s = service.ready_timeout_s or 1800
    watch = watch_args(service.watchdog, instance.port, service.probe_request, start_s) if service.probe_request else []
    return [
        UNIT_SCRIPT, "run", files.container, instance.name, ",".join(gpu_bdfs), *watch, "--",
        *docker_run_argv(service, instance, placement, device_gids),
    ]  # fmt: skip


def prepare_cache_argv(service: VllmSettings, instance: ServedInstance) -> list[str]:
    """``vllm-unit.sh prepare-cache ROOT NAMESPACE SERVE_JSON`` for ``instance``'s ``ExecStartPre``,
    after ``clear`` (its container gone) and before ``seed-aiter``: under ``ROOT``
    (``<vllm_cache_dir>/<instance>``) it removes the namespaces that neither ``NAMESPACE`` (the image
    it starts, :func:`rocmfleet.domain.cachedirs.namespace`) nor the image in ``SERVE_JSON`` (the
    instance's last good version, :attr:`rocmfleet.domain.lastgood.LastGoodFiles.serve_json`) uses,
    then the lock files in ``ROOT/NAMESPACE`` that no process holds open. Empty for a baked image.

    Raises:
        KeyError: ``service.cache_prepared`` has no entry for ``instance``.
    """
    prepared = service.cache_prepared[instance.name]
    if prepared is None:
        return []
    root, namespace = prepared
    files = files_of(instance)
    serve_json = lastgood.last_good_files(
        CONFIG_DIR, instance.name, files.unit_path, files.env_file, files.secrets_file
    ).serve_json
    return [UNIT_SCRIPT, "prepare-cache", root, namespace, serve_json]


def unit_template_vars(
    service: VllmSettings, instance: ServedInstance, placement: Placement, device_gids: list[int], gpu_bdfs: list[str]
) -> dict[str, object]:
    """What ``templates/vllm/vllm.service.j2`` is rendered with for ``instance`` (arguments as
    :func:`unit_exec_start`): names, the API port and the internal ports (``FIRST-LAST``), the quoted
    ``ExecStart``, the ``ExecStartPre`` lines that prepare the instance's cache root
    (:func:`prepare_cache_argv`) and seed its AITER JIT directory
    (:func:`rocmfleet.domain.cachedirs.aiter_seed_dir`), both empty for a baked image, and
    :func:`unit_timings`.

    Raises:
        KeyError: ``service.aiter_seed_dirs``, ``service.cache_prepared`` or ``service.cache_mounts``
            has no entry for ``instance``.
    """
    files = files_of(instance)
    seed = service.aiter_seed_dirs[instance.name]
    prepare = prepare_cache_argv(service, instance)
    return {
        "instance": instance.name,
        # Description= expands systemd specifiers: a literal % is %% (systemd.unit(5), "Specifiers").
        "model": service.served_model_name.replace("%", "%%"),
        "port": instance.port,
        "internal_ports": ports.Block(instance.internal_port).spec(),
        "image": service.image,
        "container": files.container,
        "secrets_file": files.secrets_file,
        "notes": placement.notes,
        "script": UNIT_SCRIPT,
        "prepare_cache": exec_line(prepare) if prepare else "",
        "seed_aiter": exec_line([UNIT_SCRIPT, "seed-aiter", service.image, seed]) if seed else "",
        "exec_start": exec_line(unit_exec_start(service, instance, placement, device_gids, gpu_bdfs)),
        "gpu_held_exit": GPU_HELD_EXIT,
        "gave_up_exit": GAVE_UP_EXIT,
        **asdict(unit_timings(service.stop_grace_s)),
    }


def env_lines(env: dict[str, str]) -> str:
    """``NAME=value`` lines, sorted, for Docker's ``--env-file`` or systemd's EnvironmentFile."""
    return "".join(f"{name}={value}\n" for name, value in sorted(env.items()))
