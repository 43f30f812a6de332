"""The control side of ``rocmfleet check``: the facts each host's plan is made on, and the check processes' input.

A check process never reads or rebuilds a host's configuration: ``rocmfleet check`` plans each host
in its own process (:data:`Planner`: :func:`rocmfleet.plan.build.plan_host`, the one reader of a
host's validated configuration) on the
facts read from the host itself (:func:`read_facts`: its GPU topology, the device nodes'
group ids, its OS and kernel, in one ``state.sh`` command over the connection that proves it
reachable); :class:`HostPlanning` is what the command hands :mod:`rocmfleet.fleet.check.compliance`
(the read and the planning), which gives each process one JSON file
(:func:`rocmfleet.fleet.check.checkfile.check_input`) holding, per host, its SSH
settings and its :class:`~rocmfleet.plan.model.HostPlan` (``to_dict``: files by SHA-256 under
``contents``, secrets by name only, what the live checks compare with under ``checks``). The checks
read it back with :func:`rocmfleet.plan.model.host_from_dict` (:mod:`rocmfleet.fleet.check.expect`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rocmfleet import scripts
from rocmfleet.config.connection import SshSettings
from rocmfleet.config.settings import HostConfig
from rocmfleet.facts.state import parse_state, state_args
from rocmfleet.facts.topology import SCRIPT as TOPOLOGY_SCRIPT
from rocmfleet.fleet.check.checkfile import UNREAD
from rocmfleet.fleet.connect import CommandTimeout, ConnectError, Session
from rocmfleet.fleet.target import Target
from rocmfleet.plan import sources
from rocmfleet.plan.model import HostPlan
from rocmfleet.plan.sources import HostFacts


def facts_command() -> str:
    """What the plan is made on, read in one ``state.sh`` command (:func:`rocmfleet.plan.sources.from_read`
    reads it): the OS and kernel, ``/dev/kfd`` and the render nodes for their group ids, the GPU
    topology script (the ``GpuTopology`` fact's, as the deploy places instances)."""
    runs = [(sources.TOPOLOGY_RUN, TOPOLOGY_SCRIPT)]
    return scripts.command(
        "state.sh", *state_args(os=True, paths=[sources.KFD], globs=[sources.RENDER_GLOB], runs=runs)
    )


#: Seconds the facts' read may take (the topology script reads sysfs: well under a second on a
#: lab host; a host that takes longer has its plan made on no topology, said in its checks).
FACTS_TIMEOUT_S = 60


def unread(why: str) -> HostFacts:
    """The facts of a host whose read failed: no topology (no instance is placed), every fact assumed."""
    return HostFacts(f"{UNREAD}: {why}", None, assumed=("topology", "device_gids", "os"))


def read_facts(session: Session, timeout_s: float = FACTS_TIMEOUT_S) -> HostFacts:
    """The host's facts (:func:`facts_command`) over ``session``, with the inventory's sudo settings;
    :func:`unread` saying why when the command fails, times out or prints what the parser refuses
    (never raises for the host's answer)."""
    try:
        result = session.run(facts_command(), timeout_s=timeout_s)
    except CommandTimeout as exc:
        return unread(str(exc))
    if result.exit_status != 0:
        return unread(f"state.sh exited {result.exit_status}: {result.stderr.strip()[-300:]}")
    try:
        got = parse_state(result.stdout_bytes.decode("utf-8", "replace").splitlines())
    except ValueError as exc:
        return unread(str(exc))
    return sources.from_read(got)


def reach_and_read(settings: SshSettings, timeout_s: float) -> tuple[str | None, HostFacts]:
    """One connection: ``true`` without sudo (``None``: reachable; else why not, one line, as
    :func:`rocmfleet.fleet.connect.reachable` says it), then the host's facts (:func:`read_facts`)."""
    try:
        with Session.open(settings) as session:
            result = session.run("true", timeout_s=timeout_s, sudo=False)
            if result.exit_status != 0:
                why = f"{settings.where}: `true` exited {result.exit_status}: {result.stderr.strip()}"
                return why, unread(why)
            return None, read_facts(session)
    except (ConnectError, CommandTimeout) as exc:
        return str(exc), unread(str(exc))
    except Exception as exc:  # noqa: BLE001 - the connection broke after it opened
        why = f"{settings.where}: {type(exc).__name__}: {exc}"
        return why, unread(why)


#: How the caller plans a host on its facts: :func:`rocmfleet.plan.build.plan_host` (name, validated
#: configuration, facts), given by ``cli/check.py`` and ``cli/rollout.py`` in a :class:`HostPlanning`,
#: so that the fleet's modules need no import of the planning (``plan.build`` sits deep in the
#: import graph; ``docs/layout.md``'s chain of at most 8).
Planner = Callable[[str, HostConfig, HostFacts], HostPlan]


def facts_of(target: Target[HostConfig]) -> HostFacts:
    """The facts of ``target`` read over a connection of its own (:func:`reach_and_read`), for a
    check run without the reachability probe that reads them."""
    return reach_and_read(target.ssh, FACTS_TIMEOUT_S)[1]


@dataclass(frozen=True)
class HostPlanning:
    """The control side's reads and planning, as :class:`rocmfleet.fleet.check.compliance.Planning`
    asks them: :func:`reach_and_read`, :func:`facts_of`, and ``planner`` of a target's name and
    configuration on the facts read.

    Args:
        planner: :func:`rocmfleet.plan.build.plan_host`, passed by the command.
    """

    planner: Planner

    def reach(self, settings: SshSettings, timeout_s: float) -> tuple[str | None, HostFacts]:
        """:func:`reach_and_read`."""
        return reach_and_read(settings, timeout_s)

    def facts(self, target: Target[HostConfig]) -> HostFacts:
        """:func:`facts_of`."""
        return facts_of(target)

    def plan(self, target: Target[HostConfig], facts: HostFacts) -> HostPlan:
        """``target``'s plan on ``facts`` (``planner`` of its name and configuration)."""
        return self.planner(target.name, target.config, facts)
