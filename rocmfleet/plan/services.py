"""Which service a host's instances serve (pure): the fleet's unit of availability.

A *service* is one served model: the name clients put in a request's ``model`` field, which is the
profile's ``served_model_name`` or, when that is empty, its ``model`` (vLLM's ``--served-model-name``
default: ``vllm/entrypoints/openai/cli_args.py``, "defaults to the model name"). Every instance of a
host is one *replica* of its profile's service (a replica that spans hosts is a later extension:
``rocmfleet.plan.model.ReplicaPlan`` carries ranks). :func:`plan_services` gives the fleet's
services; :func:`replica_counts` what each host holds of them, which both ``rocmfleet plan`` and
``rocmfleet rollout`` cut batches from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rocmfleet.config.instances import Instance
from rocmfleet.config.profiles import Image, Profile
from rocmfleet.plan.model import Rank, ReplicaPlan, ServiceImage, ServicePlan


class ServiceHost(Protocol):
    """What the services read of a host's configuration
    (:class:`rocmfleet.config.settings.HostConfig` has each)."""

    @property
    def profile(self) -> Profile: ...

    @property
    def image(self) -> Image: ...

    def instances(self) -> list[Instance]:
        """The host's vLLM instances."""
        ...


def service_name(config: ServiceHost) -> str:
    """The service the instances of ``config`` serve: ``served_model_name`` or, if empty, ``model``
    of the host's profile (e.g. ``"meta-llama/Llama-3.3-70B-Instruct"``)."""
    profile = config.profile
    return profile.served_model_name or profile.model


def replicas(config: ServiceHost) -> list[tuple[str, str]]:
    """``(service, instance name)`` of every instance of ``config``, in the host's instance order:
    each instance is one replica of its service."""
    service = service_name(config)
    return [(service, instance.name) for instance in config.instances()]


def _images(hosts: Sequence[tuple[str, str, Sequence[str]]]) -> tuple[ServiceImage, ...]:
    """A service's images from ``(host, image, groups)`` of each of its hosts (inventory order): per
    image its hosts and, when there are several, the groups holding exactly those of the service's hosts."""
    by_image: dict[str, list[str]] = {}
    for host, image, _groups in hosts:
        by_image.setdefault(image, []).append(host)
    if len(by_image) == 1:
        image, names = next(iter(by_image.items()))
        return (ServiceImage(image, tuple(names)),)
    members: dict[str, set[str]] = {}
    for host, _image, groups in hosts:
        for group in groups:
            members.setdefault(group, set()).add(host)
    return tuple(
        ServiceImage(image, tuple(names), tuple(sorted(g for g, held in members.items() if held == set(names))))
        for image, names in by_image.items()
    )


def plan_services(hosts: Sequence[tuple[str, ServiceHost, Sequence[str]]]) -> tuple[ServicePlan, ...]:
    """The services ``hosts`` serve, sorted by name: each with its profiles (sorted, each once), its
    images (:class:`~rocmfleet.plan.model.ServiceImage`, in order of first host) and its replicas in
    host then instance order, one rank each, with their host's profile and image (each instance is
    one replica, :func:`replicas`): a service's hosts may differ in either, and the service lists each.

    Args:
        hosts: ``(name, validated configuration, inventory groups)`` per host, in inventory order.
    """
    found: dict[str, list[ReplicaPlan]] = {}
    images: dict[str, list[tuple[str, str, Sequence[str]]]] = {}
    for name, config, groups in hosts:
        profile, image = config.profile.name, config.image.reference
        for service, instance in replicas(config):
            ranks = (Rank(name, instance, 0),)
            found.setdefault(service, []).append(ReplicaPlan(service, f"{name}/{instance}", ranks, profile, image))
            held = images.setdefault(service, [])
            if not held or held[-1][0] != name:
                held.append((name, image, groups))
    return tuple(
        ServicePlan(s, tuple(sorted({r.profile for r in found[s]})), _images(images[s]), tuple(found[s]))
        for s in sorted(found)
    )


def replica_counts(services: Sequence[ServicePlan], order: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{host: {service: replicas}}`` of ``services``' replicas (a replica counts on each host it
    has a rank on), every host of ``order`` in that order (``{}``: it serves none): what a host
    takes out of service when it switches (:mod:`rocmfleet.fleet.rollout.batches`)."""
    counts: dict[str, dict[str, int]] = {name: {} for name in order}
    for service in services:
        for replica in service.replicas:
            for host in dict.fromkeys(rank.host for rank in replica.ranks):
                if host in counts:
                    counts[host][service.name] = counts[host].get(service.name, 0) + 1
    return counts
