"""Where one vLLM instance lives on a host: its unit, container and file names (:func:`layout`, the one place
they are spelled) and its unit's timeouts and restart policy (:func:`unit_timings`)."""

from __future__ import annotations

from dataclasses import dataclass

from rocmfleet.domain import cachedirs

#: Where the deploy keeps per-instance files on the host.
CONFIG_DIR = "/etc/rocmfleet/vllm"


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


def unit_timings(grace: int) -> UnitTimings:
    """:class:`UnitTimings` from the grace period ``grace`` (``vllm_stop_grace_s``, seconds)."""
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


def files_of(instance: cachedirs.NamedInstance) -> InstanceFiles:
    """Unit, container and file names of ``instance`` (:func:`layout` of its name)."""
    return layout(instance.name)
