"""Every role's drift on one host: its :class:`~rocmfleet.plan.model.HostPlan`, planned on what the
host's own read shows, against that read (pure).

``rocmfleet status``, the deploy's ``--dry`` and ``rocmfleet check``'s ``drift`` module all use it:

1. :func:`read_query`: the ``HostState`` items of the host's plan (:func:`rocmfleet.plan.drift.query`)
   and the facts the plan needs (the OS and kernel, the GPU topology script, the device nodes), to
   merge into the one read the command already makes;
2. :func:`host_plan`: the host's planner (:func:`rocmfleet.plan.build.plan_host`, which the caller
   passes in as ``planner``, so that this module does not stack on the whole plan's build) on the
   facts that read holds (:func:`read_facts`), not on an offline topology;
3. :func:`role_drift`: :func:`rocmfleet.plan.drift.drift` of each role's items (empty: as wanted);
   :func:`lines` says it, one line per item.

Example::

    got = host.get_fact(HostState, **hoststate.merge_queries(..., read_query(config, planner=plan_host)))
    for line in lines(role_drift(host_plan(name, config, got, planner=plan_host), got)):
        print(line)            # "tuning: /etc/sysctl.d/60-rocmfleet-mi300x.conf: content 3a.., want 9f.."
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import vllm, vllmfiles
from rocmfleet.domain.topology import Topology
from rocmfleet.facts.state import Gathered
from rocmfleet.facts.topology import SCRIPT as TOPOLOGY_SCRIPT
from rocmfleet.plan import drift as drift_rule
from rocmfleet.plan import sources, vllmplan
from rocmfleet.plan.model import HostPlan, Role
from rocmfleet.plan.sources import HostFacts

#: The roles in the deploy's order (``rocmfleet.plan.model.Role``).
ROLES: tuple[Role, ...] = get_args(Role)
#: ``HostFacts.source`` of a plan made on a host's read.
READ_SOURCE = sources.READ_SOURCE
#: Packages named after the running kernel, asked for by pattern (the roles' own queries do the
#: same: ``roles/rocm``'s ``linux-headers-*`` and ``linux-modules-extra-*``, ``roles/tuning``'s
#: ``linux-tools-*``): the read's query is made before the kernel is known.
KERNEL_PATTERNS = ("linux-modules-extra-*", "linux-tools-common", "linux-tools-*")

#: A host's planner, ``(name, config, facts) -> HostPlan``: :func:`rocmfleet.plan.build.plan_host`,
#: passed in by the caller (``converge``, ``rocmfleet status``, the tests).
Planner = Callable[[str, HostConfig, HostFacts], HostPlan]


def read_query(config: HostConfig, *, planner: Planner) -> dict[str, object]:
    """``HostState`` keyword arguments reading every item of the host's plan and the facts it is
    planned on: the plan's paths, packages and units (:func:`rocmfleet.plan.drift.query` of a plan
    whose kernel is ``*``, so kernel packages are asked for by pattern, with :data:`KERNEL_PATTERNS`),
    the OS, the GPU topology script and the device nodes (``/dev/kfd``, ``/dev/dri/renderD*``).

    Args:
        config: the host's validated configuration.
        planner: the host's planner (:data:`Planner`).

    Returns:
        arguments for :func:`rocmfleet.plan.hoststate.merge_queries` and ``HostState``.
    """
    # No topology: the instances are not placed, but their files' paths and units are the same.
    shape = planner("", config, HostFacts("query", None, kernel="*"))
    asked = drift_rule.query(shape)
    paths = list(asked["paths"])
    for instance in config.instances():
        names = vllmfiles.files_of(instance)
        paths += [p for p in (names.env_file, names.unit_path) if p not in paths]
    return {
        **asked,
        "paths": [*paths, vllm.KFD],
        "packages": [*asked["packages"], *KERNEL_PATTERNS],
        "globs": [vllmplan.DEVICE_GLOB],
        "os": True,
        "runs": [(vllmplan.TOPOLOGY_RUN, TOPOLOGY_SCRIPT)],
    }


def read_facts(got: Gathered) -> HostFacts:
    """The :class:`HostFacts` a read with :func:`read_query`'s items shows
    (:func:`rocmfleet.plan.sources.from_read`: its GPU topology, the device nodes' group ids, its OS
    and running kernel, each default named in ``assumed``)."""
    return sources.from_read(got)


def host_plan(name: str, config: HostConfig, got: Gathered, *, planner: Planner) -> HostPlan:
    """The plan of host ``name`` by ``planner`` (:data:`Planner`) on what its read ``got`` shows
    (:func:`read_facts`); never raises for a host's problem (``HostPlan.problem`` says it)."""
    return planner(name, config, read_facts(got))


def vllm_plan(
    name: str, config: HostConfig, topology: Topology | None, got: Gathered, *, planner: Planner
) -> vllmplan.VllmPlan:
    """What the vllm role would do on host ``name``: its items of the host's plan on ``topology``
    and ``got``'s device nodes (:func:`rocmfleet.plan.vllmplan.read_facts`) against ``got``
    (:func:`rocmfleet.plan.vllmplan.plan`), as the role decides when it runs (``roles/vllm``).

    Args:
        name: the inventory's host name (placement messages).
        config: its validated configuration.
        topology: its GPU topology (``None``: no KFD).
        got: a ``HostState`` read with (at least) :func:`rocmfleet.plan.vllmplan.query`'s items.
        planner: the host's planner (:data:`Planner`).
    """
    items = role_items(planner(name, config, vllmplan.read_facts(topology, got)), "vllm")
    return vllmplan.plan(config, items, topology, got, name)


def instance_drift(config: HostConfig, got: Gathered, host_name: str = "", *, planner: Planner) -> dict[str, list[str]]:
    """Per instance of ``config``, why it is not as wanted: :func:`vllm_plan`'s reasons (``VllmPlan.why``)
    from ``got`` and the GPU topology it holds (``rocmfleet status``'s ``drift``).

    Args:
        config: the host's validated configuration.
        got: a ``HostState`` read with (at least) :func:`rocmfleet.plan.vllmplan.query`'s items.
        host_name: for placement messages.
        planner: the host's planner (:data:`Planner`).

    Returns:
        ``{instance: [reasons]}`` for every instance of ``config``, in its order; an empty list:
        as wanted.

    Raises:
        ValueError: the read holds no usable GPU topology (:func:`rocmfleet.plan.vllmplan.topology_of`
            is ``"unknown"``: the topology script did not run, failed, or printed what the parser refuses).
    """
    topology = vllmplan.topology_of(got)
    if topology == "unknown":
        ran = got.runs.get(vllmplan.TOPOLOGY_RUN)
        if ran is None:
            raise ValueError("the read holds no run of the GPU topology script")
        if ran[0] != 0:
            raise ValueError(f"the GPU topology script exited {ran[0]}")
        raise ValueError("the GPU topology script printed what the GpuTopology parser refuses")
    todo = vllm_plan(host_name, config, topology, got, planner=planner)
    return {i.name: list(todo.why.get(i.name, [])) for i in config.instances()}


#: ``plan`` with only one role's items (:func:`rocmfleet.plan.drift.role_items`).
role_items = drift_rule.role_items


def role_drift(plan: HostPlan, got: Gathered) -> dict[Role, list[drift_rule.Drift]]:
    """Per role (all of :data:`ROLES`, in order), how ``got`` differs from ``plan``'s items of that
    role (:func:`rocmfleet.plan.drift.drift`; empty: as wanted).

    Args:
        plan: the host's plan (:func:`host_plan`).
        got: a ``HostState`` read with (at least) :func:`read_query`'s items.
    """
    return {role: drift_rule.drift(drift_rule.plan_wanted(role_items(plan, role)), got) for role in ROLES}


def said(item: drift_rule.Drift) -> str:
    """One drift as people read it: a SHA-256 shortened to 12 digits (``content 3a1f..., want 9b2c...``)."""
    if item.field == "content":
        return f"{item.item}: content {item.found[:12] or '(none)'}..., want {item.want[:12]}..."
    return str(item)


def lines(drifts: dict[Role, list[drift_rule.Drift]], problem: str = "") -> list[str]:
    """``ROLE: ITEM: why`` per drift item, in role order; first ``plan: PROBLEM`` when the plan has one
    (an instance that cannot be placed, an OS AMD's repositories do not support)."""
    out = [f"plan: {problem}"] if problem else []
    return out + [f"{role}: {said(d)}" for role, found in drifts.items() for d in found]


def as_dict(drifts: dict[Role, list[drift_rule.Drift]]) -> dict[str, list[str]]:
    """``{role: [said(drift)...]}`` for JSON (every role; an empty list: as wanted)."""
    return {role: [said(d) for d in found] for role, found in drifts.items()}


def dry_lines(name: str, config: HostConfig, got: Gathered, *, planner: Planner) -> list[str]:
    """What the deploy's ``--dry`` prints of every role for host ``name`` (pyinfra's ``[name]``
    prefix added by the deploy): ``drift ROLE: ITEM: why`` per drift item of its plan on ``got``
    (:func:`host_plan`, :func:`role_drift`, :func:`lines`); none on a host as wanted.

    Args:
        name: the inventory's host name.
        config: its validated configuration.
        got: the deploy's ``HostState`` read, with :func:`read_query`'s items merged in.
        planner: the host's planner (:data:`Planner`).
    """
    plan = host_plan(name, config, got, planner=planner)
    return [f"drift {line}" for line in lines(role_drift(plan, got), plan.problem)]
