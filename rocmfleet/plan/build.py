"""Build the fleet plan from validated host data and host facts (pure; no connection).

:func:`plan_host` is the one reader of a host's :class:`~rocmfleet.config.settings.HostConfig` in
the plan: it hands each role's own settings to :mod:`rocmfleet.plan.roleitems` and plans the vLLM
instances with the deploy's own placement and renderer (:func:`rocmfleet.plan.instance.place_host`,
:func:`~rocmfleet.plan.instance.instance_files`). :func:`plan_fleet` gathers the hosts' plans and
their services (:func:`rocmfleet.plan.services.service_name`).

Example::

    configs, problems = validate_inventory("inventories/prod.py")
    plan = plan_fleet([(name, config, groups[name]) for name, config in configs.items()], {})
    print(to_json(plan))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import readiness, vllm, vllmfiles
from rocmfleet.plan import services, vllmitems
from rocmfleet.plan.checkvalues import check_values
from rocmfleet.plan.instance import HostPlacement, instance_files, place_host, vllm_settings
from rocmfleet.plan.model import (
    ContainerPlan,
    DirectoryPlan,
    FilePlan,
    FleetPlan,
    HostPlan,
    InstancePlan,
    ReadyTarget,
    UnitPlan,
)
from rocmfleet.plan.roleitems import Items, base_items, docker_items, exporter_items, rocm_items, tuning_items
from rocmfleet.plan.sources import HostFacts, default_facts


def _vllm_items(name: str, config: HostConfig, facts: HostFacts) -> tuple[Items, list[InstancePlan], str]:
    """The vllm role's directories, scripts, secrets files and units; the placed instances; the
    placement's problem (``""``: placed)."""
    items = Items()
    for path, mode, user, group in vllmitems.directories(config):
        items.directories.append(DirectoryPlan(path, "vllm", mode, user, group))
    for script in vllmitems.script_files():
        items.file("vllm", script)
    service = services.service_name(config)
    settings = vllm_settings(config)
    secret_names = tuple(sorted(config.settings.vllm_secret_env))
    placed = place_host(config, facts.topology, list(facts.device_gids), name)
    instances: list[InstancePlan] = []
    for instance in config.instances():
        names = vllmfiles.files_of(instance)
        items.ports.append(instance.port)
        if isinstance(placed, HostPlacement):
            rendered = instance_files(config, instance, placed)
            items.file("vllm", rendered.env)
            items.file("vllm", rendered.unit)
            p = placed.placements[instance.name]
            instances.append(
                InstancePlan(
                    name=instance.name,
                    service=service,
                    port=instance.port,
                    internal_ports=instance.internal_ports.spec(),
                    gpus=tuple(p.gpus),
                    render_nodes=tuple(p.render_nodes),
                    cpuset_cpus=p.cpuset_cpus,
                    cpuset_mems=p.cpuset_mems,
                    unit=names.unit,
                    unit_path=names.unit_path,
                    container=names.container,
                    env_file=names.env_file,
                    secrets_file=names.secrets_file,
                    unit_text=rendered.unit.content.decode(),
                    env_text=rendered.env.content.decode(),
                    serve_argv=("vllm", "serve", *vllm.serve_args(settings, instance)),
                    notes=tuple(p.notes),
                )
            )
        items.files.append(FilePlan(names.secrets_file, "vllm", "600", "root", "root", None, "secret", secret_names))
        items.units.append(UnitPlan(names.unit, "vllm", True, True))
    items.expect["image"] = config.image.reference
    if staged := vllmitems.staging(config):
        items.expect["model staged"] = f"{staged.model}@{staged.revision} in {staged.cache_dir}"
    if isinstance(placed, str):  # the deploy's own line, said of the topology the plan took
        return items, instances, f"{placed.removeprefix('rocmfleet: ')} (on the topology {facts.source})"
    return items, instances, ""


def plan_host(name: str, config: HostConfig, facts: HostFacts | None = None, groups: Sequence[str] = ()) -> HostPlan:
    """Everything the deploy would leave on host ``name``, every role.

    Args:
        name: the inventory's host name.
        config: its validated configuration (``rocmfleet.config.validate.validate_inventory``).
        facts: its topology, device group ids and OS (:func:`rocmfleet.plan.sources.load`);
            ``None``: the part's default (:func:`rocmfleet.plan.sources.default_facts`).
        groups: its inventory groups.

    Returns:
        the :class:`HostPlan`; a host whose instances cannot be placed on ``facts``' topology, or
        whose OS AMD's repositories do not support, has ``problem`` set and no instances (its
        other items are planned). Never raises for a host's problem.
    """
    facts = facts if facts is not None else default_facts()
    items = Items()
    items.extend(base_items(config.settings))
    items.extend(rocm_items(config.rocm, facts))
    items.extend(tuning_items(config.tuning, facts))
    items.extend(exporter_items(config.metrics, facts))
    items.extend(docker_items(config.settings))
    vllm_part, instances, problem = _vllm_items(name, config, facts)
    items.extend(vllm_part)
    probe = readiness.probe_args(services.service_name(config), config.profile.ready_probe)
    return HostPlan(
        name=name,
        groups=tuple(sorted(groups)),
        topology_source=facts.source,
        assumed=facts.assumed,
        problem="; ".join([*items.problems, *([problem] if problem else [])]),
        files=tuple(items.files),
        directories=tuple(items.directories),
        packages=tuple(items.packages),
        units=tuple(items.units),
        containers=tuple(ContainerPlan(i.container, config.image.reference, i.name) for i in instances),
        instances=tuple(instances),
        ports=tuple(sorted(set(items.ports))),
        removals=tuple(items.removals),
        reboot_reasons=tuple(items.reboot_reasons),
        readiness=tuple(ReadyTarget(i.name, i.port, i.container, tuple(probe)) for i in instances),
        expect=tuple(sorted(items.expect.items())),
        checks=check_values(config, facts),
    )


def plan_fleet(
    hosts: Sequence[tuple[str, HostConfig, Sequence[str]]],
    topologies: Mapping[str, HostFacts] | HostFacts | None = None,
) -> FleetPlan:
    """The plan of every host of ``hosts`` and the services they serve.

    Args:
        hosts: ``(name, validated configuration, groups)`` per host, in inventory order.
        topologies: facts per host name, or one :class:`HostFacts` for every host; a host without
            any gets the part's default.

    Returns:
        the :class:`FleetPlan`: services sorted by name, each with its replicas in host order
        (one rank each today, with its host's profile and image: a service's hosts may differ in
        either, and the service lists each; :func:`rocmfleet.plan.services.plan_services`), and the
        hosts' plans in the order given; no rollout (``rocmfleet plan --image`` adds it).
    """
    default = default_facts()
    plans: list[HostPlan] = []
    # Hosts of one kind (the same data, on the same facts) have the same plan but for their name
    # and groups: planned once per kind. ``repr`` of a configuration shows every value of it (a
    # secret as *MASKED*: the plan holds secret names only); a plan with a problem, whose text
    # may name the host, is not shared.
    planned: dict[tuple[str, int], HostPlan] = {}
    for name, config, groups in hosts:
        facts = topologies if isinstance(topologies, HostFacts) else (topologies or {}).get(name, default)
        key = (repr(config), id(facts))
        if (same := planned.get(key)) is not None:
            plans.append(dataclasses.replace(same, name=name, groups=tuple(sorted(groups))))
        else:
            plans.append(plan_host(name, config, facts, groups))
            if not plans[-1].problem:
                planned[key] = plans[-1]
    return FleetPlan(services=services.plan_services(hosts), hosts=tuple(plans))
