"""A host's vLLM instances (:class:`Instance`) from ``vllm_instances`` or its profile's layout, their rules,
and the host's one port map."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rocmfleet.config.errors import Problem
from rocmfleet.domain import ports
from rocmfleet.domain.docker import DockerDaemon
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.domain.placement import world_problem


class Layout(Protocol):
    """What the instances read of a profile (:class:`rocmfleet.config.profiles.Profile` has it): its name, ports,
    GPUs per instance or their lists, instances per host, and its tensor parallel size."""

    @property
    def name(self) -> str: ...
    @property
    def ports(self) -> Sequence[int]: ...
    @property
    def instance_gpus(self) -> Sequence[Sequence[int]] | None: ...
    @property
    def gpus_per_instance(self) -> int | None: ...
    @property
    def instances_per_host(self) -> int: ...
    @property
    def tensor_parallel_size(self) -> int: ...


class NamedGpus(Protocol):
    """An explicit instance of host data (``vllm_instances``,
    :class:`rocmfleet.config.hostsettings.InstanceOverride`)."""

    @property
    def name(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def gpus(self) -> list[int]: ...


class InstanceKeys(Protocol):
    """The keys of host data the instances and the port map read (:class:`rocmfleet.config.hostsettings.HostSettings`
    has them)."""

    @property
    def vllm_instances(self) -> Sequence[NamedGpus] | None: ...
    @property
    def vllm_internal_port_base(self) -> int: ...
    @property
    def docker_daemon(self) -> DockerDaemon: ...


@dataclass(frozen=True)
class Instance:
    """One vLLM server of a host: unit ``vllm-<name>.service``, container ``vllm-<name>``.

    Attributes:
        name: the instance's name.
        port: its API port (``--port``).
        gpus: its host GPU indices (KFD order).
        internal_port: the first of its internal ports, ``VLLM_PORT`` (:func:`rocmfleet.domain.ports.block`
            of ``vllm_internal_port_base`` and its position on the host).
    """

    name: str
    port: int
    gpus: tuple[int, ...]
    internal_port: int

    @property
    def internal_ports(self) -> ports.Block:
        """The ports vLLM may open besides ``port`` (:mod:`rocmfleet.domain.ports`)."""
        return ports.Block(self.internal_port)


def port_problems(
    instances: list[Instance],
    settings: InstanceKeys,
    key: str,
    metering: MetricsSettings | None = None,
    ssh_port: int = 22,
) -> list[Problem]:
    """The host's one port map: every TCP port rocmfleet makes something listen on, each owned once.

    vLLM serves on ``0.0.0.0:<port>`` (``rocmfleet.domain.vllm.serve_args``), so it takes the port
    on every address; Docker's ``metrics-addr`` listens on its own. Two owners of one port: the
    second to start dies with ``EADDRINUSE`` (vLLM at start, dockerd at start-up). The instances'
    own duplicates are :func:`instance_problems`'. Each instance's internal ports (``VLLM_PORT``
    and the block after it, :mod:`rocmfleet.domain.ports`) miss every API port, the metrics port
    and each other, and stay in 1024-32767 (:func:`rocmfleet.domain.ports.problems`), reported
    under ``vllm_internal_port_base``. The exporter's port misses Docker's ``metrics-addr`` port
    too: a listener on every address and one on a single address of the same port cannot both
    bind it (``bind(2)``, ``EADDRINUSE``), whichever address ``metrics-addr`` names.

    Args:
        instances: the host's instances; ``key`` is where they come from, for the message.
        settings: the host's settings (``docker_daemon.metrics-addr``).
        metering: the host's metrics settings (the exporter's ``metrics_exporter_port``, when it is on).
        ssh_port: the port the host's sshd listens on (``ssh_port``, 22 by default): an instance on it
            (``--network=host``) would never bind, or would take SSH from the host if sshd restarted.
    """
    problems = [
        Problem(
            key,
            f"port {i.port} of instance {i.name} is the host's SSH port (ssh_port {ssh_port}): the instance "
            "would not bind it, or would take SSH from the host; give the instance another port",
            repr(i.port),
        )
        for i in instances
        if i.port == ssh_port
    ]
    api_ports = "their port in vllm_instances" if key == "vllm_instances" else "the profile's base_port"
    metrics = settings.docker_daemon.metrics_addr
    port_text = metrics.rpartition(":")[2] if metrics else ""
    others = [(int(port_text), "Docker's metrics-addr (docker_daemon)")] if port_text.isdigit() else []
    if metering is not None and metering.metrics_exporter:
        others.append((metering.metrics_exporter_port, "AMD's exporter (metrics_exporter_port)"))
        for instance in instances:
            if instance.port == metering.metrics_exporter_port:
                problems.append(
                    Problem(
                        "metrics_exporter_port",
                        f"port {instance.port} is also instance {instance.name}'s ({key}): give the exporter "
                        "another port, or set metrics_exporter: false",
                        repr(metering.metrics_exporter_port),
                    )
                )
        if port_text.isdigit() and int(port_text) == metering.metrics_exporter_port:
            problems.append(
                Problem(
                    "metrics_exporter_port",
                    f"port {metering.metrics_exporter_port} is also Docker's metrics-addr (docker_daemon): one of "
                    "them cannot start; give one another port, or set metrics_exporter: false",
                    repr(metering.metrics_exporter_port),
                )
            )
    problems += [
        Problem(
            "vllm_internal_port_base",
            f"{p}; give vllm_internal_port_base another value (instance i takes {ports.STRIDE} ports from "
            f"base + {ports.STRIDE} * i), or move the API ports ({api_ports})",
            repr(settings.vllm_internal_port_base),
        )
        for p in ports.problems(instances, others)
    ]
    if port_text.isdigit():
        for instance in instances:
            if instance.port == int(port_text):
                problems.append(
                    Problem(
                        "docker_daemon.metrics-addr",
                        f"port {instance.port} is also instance {instance.name}'s ({key}): vLLM listens on every "
                        "address, so one of them cannot start; give one another port",
                        repr(metrics),
                    )
                )
    return problems


def instances_of(settings: InstanceKeys, profile: Layout | None) -> list[Instance]:
    """``vllm_instances``, else the profile's layout (``profile`` is then not ``None``), each with its
    internal ports from ``vllm_internal_port_base`` by position (:func:`rocmfleet.domain.ports.block`)."""
    base = settings.vllm_internal_port_base
    if settings.vllm_instances is not None:
        named = [(i.name, i.port, tuple(i.gpus)) for i in settings.vllm_instances]
    else:
        assert profile is not None
        if profile.instance_gpus is not None:
            groups = [tuple(g) for g in profile.instance_gpus]
        else:
            n = profile.gpus_per_instance or 1
            groups = [tuple(range(i * n, (i + 1) * n)) for i in range(profile.instances_per_host)]
        named = [(f"{profile.name}-{i}", port, groups[i]) for i, port in enumerate(profile.ports)]
    return [Instance(name, port, gpus, ports.block(base, i).first) for i, (name, port, gpus) in enumerate(named)]


def instance_problems(
    instances: list[Instance], profile: Layout | None = None, gpu_count: int = 8, key: str = "vllm_instances"
) -> list[Problem]:
    """Rules on a host's instances: unique names and ports; GPUs unique and below ``gpu_count``; TP divides the GPUs.

    Args:
        instances: the host's instances (``vllm_instances`` or the profile's layout).
        profile: the host's profile, for ``tensor_parallel_size``; None when it is invalid
            (the rules that need it are skipped).
        gpu_count: the host's GPUs (``vllm_gpu_count``; the deploy checks the real topology).
        key: the key the instances come from, for the messages.
    """
    problems = []
    for attr, what in (("name", "name"), ("port", "port")):
        values = [getattr(i, attr) for i in instances]
        for dup in sorted({v for v in values if values.count(v) > 1}, key=str):
            owners = [i.name for i in instances if getattr(i, attr) == dup]
            problems.append(Problem(key, f"{what} {dup} used by more than one instance: {owners}"))
    claims: dict[int, list[str]] = {}
    for instance in instances:
        outside = [gpu for gpu in instance.gpus if not 0 <= gpu < gpu_count]
        if outside:
            problems.append(
                Problem(
                    key,
                    f"instance {instance.name}: GPU index(es) {outside} out of range: the host has {gpu_count} GPUs "
                    f"(0 to {gpu_count - 1}; vllm_gpu_count)",
                )
            )
        for gpu in instance.gpus:
            claims.setdefault(gpu, []).append(instance.name)
        if profile is not None and (world := world_problem(profile.tensor_parallel_size, len(instance.gpus))):
            problems.append(
                Problem(key, f"instance {instance.name} (GPUs {list(instance.gpus)}, profile {profile.name}): {world}")
            )
    for gpu, owners in sorted(claims.items()):
        if len(owners) > 1:
            problems.append(Problem(key, f"GPU {gpu} claimed by more than one instance: {owners}"))
    return problems
