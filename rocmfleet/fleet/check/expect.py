"""What the checks expect of each host under check: its plan, as the parent ``rocmfleet check`` made it.

``rocmfleet check`` loads and validates the inventory once, in its own process, plans each host
there on the facts read from it (:mod:`rocmfleet.fleet.check.hostplan`) and gives each of its
pytest processes one JSON file (``ROCMFLEET_CHECK_FILE``, mode 0600 in a 0700 directory) holding
the SSH settings and the :class:`~rocmfleet.plan.model.HostPlan` of the hosts that process checks,
and only those (:func:`rocmfleet.fleet.check.checkfile.check_input`): a check process never loads
the inventory, nor reads or rebuilds a host's configuration. The checks look their host's plan up
by inventory name (``host.backend.hostname``, :func:`host_name`), loaded back with the plan's own
loader (:func:`rocmfleet.plan.model.host_from_dict`): its items (the drift rule's), and under
``checks`` (:class:`~rocmfleet.plan.model.CheckValues`) what the live checks compare with. Secret
values never leave the parent: the plan names them only. Without the file (testinfra run by
hand) the checks that need a plan skip; the ROCm checks expect AMD's defaults, and there are no
vLLM instances.

What the host has is read here too, once per host and process (:func:`once`): the files, units,
packages, sysctl, OS and small commands of every check in one ``state.sh`` command
(:func:`gathered`, the deploy's own composite read), and the ``docker`` answers several checks
share (:func:`container_inspect`, :func:`docker_info`). What a check could not read is an error
(:class:`rocmfleet.domain.tooloutput.CannotCheck`), never an empty answer that a check could pass on.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

from rocmfleet import scripts
from rocmfleet.domain import rocm, tuning
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.domain.rocm import RocmSettings
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.facts.state import Gathered, PathState, UnitState, parse_state, state_args
from rocmfleet.fleet.check.checkfile import FILE_ENV, ExpectationError, host_name
from rocmfleet.fleet.check.checkfile import entry as _entry
from rocmfleet.plan import exporterplan, rocmplan
from rocmfleet.plan.checkmodel import CheckInstance, CheckValues
from rocmfleet.plan.drift import WantedPackage, drift
from rocmfleet.plan.model import HostPlan, host_from_dict


@functools.cache
def _plan(name: str) -> HostPlan | None:
    entry = _entry(name)
    if entry is None:
        return None
    try:
        return host_from_dict(entry["plan"], f"{os.environ.get(FILE_ENV)}: host {name}: plan")
    except (KeyError, TypeError, ValueError) as exc:
        raise ExpectationError(f"{os.environ.get(FILE_ENV)}: not a rocmfleet check file: {exc}") from None


def host_plan(host: Any) -> HostPlan | None:
    """The plan of ``host`` (a name or testinfra ``Host``); ``None`` without a file.

    Raises:
        ExpectationError: the file does not name this host, or its plan is not a host plan's JSON.
    """
    return _plan(host_name(host))


def check_values(host: Any) -> CheckValues | None:
    """What the live checks of ``host`` compare with (its plan's ``checks``); ``None`` without a file.

    Raises:
        ExpectationError: as :func:`host_plan`, or a plan made without them.
    """
    plan = host_plan(host)
    if plan is None:
        return None
    if plan.checks is None:
        raise ExpectationError(f"{os.environ.get(FILE_ENV)}: the plan of {plan.name} has no check values")
    return plan.checks


def instances_of(host: Any) -> list[CheckInstance]:
    """The vLLM instances ``host`` runs, placed or not (:attr:`CheckValues.instances`); none without a file."""
    values = check_values(host)
    return list(values.instances) if values else []


def rocm_settings(host: Any) -> RocmSettings:
    """The ``rocm_*`` settings of ``host``'s plan (:attr:`CheckValues.rocm`; AMD's defaults without a file)."""
    values = check_values(host)
    return RocmSettings.model_validate(values.rocm) if values else RocmSettings()


def metrics_settings(host: Any) -> MetricsSettings:
    """The ``metrics_*`` settings of ``host``'s plan (:attr:`CheckValues.metrics`; the defaults without a file)."""
    values = check_values(host)
    return MetricsSettings.model_validate(values.metrics) if values else MetricsSettings()


_memo: dict[tuple[str, str], Any] = {}


def once(host: Any, what: str, read: Callable[[], Any]) -> Any:
    """``read()`` the first time ``what`` is asked of ``host`` in this process, the same value after.

    For what several check modules need and does not change during a run (the topology, whether
    Docker runs, a container host): read once per host, not once per module. An exception is not
    remembered (the next module reads again, and reports its own error).
    """
    key = (host_name(host), what)
    if key not in _memo:
        _memo[key] = read()
    return _memo[key]


def container_inspect(host: Any, container: str) -> Any:
    """``docker inspect --type container CONTAINER`` (testinfra's result: ``rc``, ``stdout``,
    ``stderr``), run once per host and container in this process: the vllm checks of one
    instance and the cache check all read it (a ``docker`` command costs the host about 40 ms of
    CPU; issue 16)."""
    return once(host, f"docker inspect {container}", lambda: host.run(f"docker inspect --type container {container}"))


def docker_server(host: Any) -> tuple[str, bool]:
    """The running dockerd's version and whether live-restore is on, from :func:`docker_info`
    (``docker info``'s ``ServerVersion`` is ``docker version``'s ``Server.Version``: one command).

    Raises:
        CannotCheck: ``docker info`` failed or printed another format.
    """
    info = docker_info(host)
    fields = info.stdout.split()
    if info.rc != 0 or len(fields) != 2 or fields[1] not in ("true", "false"):
        raise CannotCheck(
            f"docker info gave {info.stdout.strip()[:200]!r} (exit {info.rc}: {info.stderr.strip()[-200:]}), "
            "not a server version and true or false"
        )
    return fields[0], fields[1] == "true"


def render_gid(host: Any) -> int | None:
    """The ``render`` group's GID (``None``: no such group), from :func:`gathered`'s ``getent``.

    Raises:
        CannotCheck: ``getent`` failed otherwise or printed another format.
    """
    rc, lines = ran(host, "render")  # render:x:GID:members; exit 2: no such group
    if rc == 2:
        return None
    fields = lines[0].split(":") if len(lines) == 1 else []
    if rc != 0 or len(fields) < 3 or not fields[2].isdigit():
        raise CannotCheck(f"getent group render: exit {rc}, {' '.join(lines)[:200]!r}")
    return int(fields[2])


def docker_info(host: Any) -> Any:
    """``docker info`` as ``SERVER_VERSION LIVE_RESTORE`` (testinfra's result), once per host."""
    return once(
        host, "docker info", lambda: host.run("docker info --format '{{.ServerVersion}} {{.LiveRestoreEnabled}}'")
    )


def in_container(host: Any) -> bool:
    """True on a container host: it shares another machine's kernel, CPUs and boot."""
    return ran(host, "virt")[0] == 0


# -- one read of what the checks look at (issue 16) -----------------------------------------

DOCKER_UNIT = "docker.service"
DAEMON_JSON = "/etc/docker/daemon.json"
GRUB_CFG = "/boot/grub/grub.cfg"
#: Files the checks read whole (:func:`gathered`): to parse them, or to say what a differing one holds.
#: (The roles' files are compared by their SHA-256, by the drift rule: ``drift::role_as_wanted``.)
TEXTS = (
    tuning.SYSCTL_FILE,
    tuning.GRUB_DEFAULTS,
    GRUB_CFG,
    "/proc/cmdline",
    tuning.CPU_UNIT_PATH,
    DAEMON_JSON,
)
#: Paths whose type and mode the checks test (and those of :data:`TEXTS`).
PATHS = (*TEXTS, rocm.LEGACY_KEYRING, rocm.CURRENT_KEYRING, "/sys/module/amdgpu", "/dev/kfd", "/run/udev/control")
#: Glob of the GPUs' render nodes, whose modes the device-access check tests.
RENDER_NODES = "/dev/dri/renderD*"
#: Small commands whose exit status and output :func:`gathered` carries (``state.sh``'s ``run``):
#: ``systemd-detect-virt --container`` exits 0 in a container; ``getent`` exits 2 for no such group.
RUNS = (("virt", "systemd-detect-virt --container"), ("render", "getent group render"))
#: SHA-256 of an empty file (a keyring of 0 bytes is no keyring).
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def check_query(packages: list[str], instances: list[CheckInstance]) -> dict[str, Any]:
    """The ``state.sh`` items of one host's checks (:func:`rocmfleet.facts.state.state_args`'
    keyword arguments): the OS, :data:`PATHS`, each instance's environment, unit and secrets
    files, :data:`TEXTS`, Docker's, the CPU tuning unit's and each instance's unit, ``packages``,
    ``kernel.numa_balancing`` and :data:`RUNS`.

    Args:
        packages: the ROCm driver and userspace packages to ask dpkg about (:func:`rocm_packages`).
        instances: the host's vLLM instances (:func:`instances_of`), for their files and units.
    """
    return {
        "os": True,
        "paths": [*PATHS, *(p for i in instances for p in (i.env_file, i.unit_path, i.secrets_file))],
        "globs": [RENDER_NODES],
        "texts": list(TEXTS),
        "units": [DOCKER_UNIT, tuning.CPU_UNIT, *(i.unit for i in instances)],
        "packages": list(dict.fromkeys(packages)),
        "sysctls": ["kernel.numa_balancing"],
        "runs": list(RUNS),
    }


def rocm_packages(settings: RocmSettings) -> list[str]:
    """The driver packages, then the userspace ones, each once (what :func:`installed` is asked of)."""
    return list(dict.fromkeys([*settings.rocm_driver_packages, *settings.userspace_packages]))


def read_state(host: Any, key: str, query: Callable[[], dict[str, Any]]) -> Gathered:
    """One ``state.sh`` command on ``host`` asking ``query()``'s items (:func:`state_args`'
    keyword arguments), parsed; run once per host and process under ``key`` (a failure too: one
    read per host, not one per check).

    Raises:
        CannotCheck: the command failed or its output was cut short or unknown (every check that
            needs it is then an error, never a pass).
    """

    def read() -> Gathered | CannotCheck:
        try:
            result = host.run(scripts.command("state.sh", *state_args(**query())))
        except CannotCheck as exc:  # sudo refused, the host's budget spent
            return exc
        if result.rc != 0:
            return CannotCheck(f"state.sh exited {result.rc}: {result.stderr.strip()[-300:]}")
        try:  # a file's stray byte is one U+FFFD in its own text, not every check's error
            return parse_state(result.stdout_bytes.decode("utf-8", "replace").splitlines())
        except ValueError as exc:
            return CannotCheck(str(exc))

    found: Gathered | CannotCheck = once(host, key, read)
    if isinstance(found, CannotCheck):
        raise found
    return found


def gathered(host: Any) -> Gathered:
    """What :func:`check_query` asks of ``host``, read in one ``state.sh`` command (the deploy's own
    composite read, :class:`rocmfleet.facts.state.HostState`), once per host and process: the
    checks used to run one command per file, unit and package, about 35 of a host's 60 (issue 16).

    Raises:
        CannotCheck: the command failed or its output was cut short or unknown.
    """
    return read_state(host, "state", lambda: check_query(rocm_packages(rocm_settings(host)), instances_of(host)))


def rocm_gathered(host: Any) -> Gathered:
    """What the deploy's rocm role reads (:func:`rocmfleet.plan.rocmplan.query`: its files, packages
    and facts as runs, AMD's keys downloaded), in one ``state.sh`` command of its own, once per host
    and process: only ``rocm::rocm_role_as_wanted`` asks for it, so ``rocmfleet check --select vllm``
    (a rollout's gate) neither downloads keys nor runs ``dkms status``.

    Raises:
        CannotCheck: the command failed or its output was cut short or unknown.
    """
    return read_state(host, "rocm-state", lambda: rocmplan.query(rocm_settings(host)))


def exporter_gathered(host: Any) -> tuple[MetricsSettings, Gathered]:
    """The host's metrics settings and what the deploy's exporter role reads
    (:func:`rocmfleet.plan.exporterplan.query`: its files, package, units, what apt offers), in one
    ``state.sh`` command of its own, once per host and process (only ``rocm::metrics_exporter_as_wanted``
    asks for it).

    Raises:
        CannotCheck: the command failed or its output was cut short or unknown.
    """
    settings = metrics_settings(host)
    return settings, read_state(host, "exporter-state", lambda: exporterplan.query(settings))


def path_state(host: Any, path: str) -> PathState:
    """``path``'s type (``file``, ``dir``, ``link``, ``other``, ``missing``), mode and SHA-256, from :func:`gathered`.

    Raises:
        CannotCheck: ``state.sh`` did not report it (not one of :data:`PATHS`, or the read failed).
    """
    found = gathered(host).paths.get(path)
    if found is None:
        raise CannotCheck(f"state.sh did not report {path}")
    return found


def exists(host: Any, path: str) -> bool:
    """Whether ``path`` (one of :data:`PATHS`) exists: a dangling link counts, as for ``test -L``."""
    return path_state(host, path).type != "missing"


def text(host: Any, path: str) -> str | None:
    """The content of ``path`` (one of :data:`TEXTS`): its lines, each ending in a newline (as
    ``state.sh`` reads them: control characters but tabs dropped, a stray byte U+FFFD); ``None``
    for a missing path, ``""`` for an empty file.

    Raises:
        CannotCheck: as :func:`path_state`; a directory or another non-file; or a file (or link)
            with no line whose content is not empty: it could not be read (never an empty text
            that a "does not contain" check passes on).
    """
    found = path_state(host, path)
    if found.type == "missing":
        return None
    if found.type in ("dir", "other"):
        raise CannotCheck(f"{path} is not a file ({found.type})")
    lines = gathered(host).texts.get(path)
    if lines is None:
        # no line: an empty file (its SHA-256 says so), or one the read could not open
        if found.type == "link" or (found.type == "file" and found.sha256 != EMPTY_SHA256):
            raise CannotCheck(f"{path} could not be read")
        return ""
    return "".join(line + "\n" for line in lines)


def installed(host: Any, name: str) -> bool:
    """Whether dpkg has ``name`` installed (status ``ii`` or ``hi``, the drift rule's:
    :func:`rocmfleet.plan.drift.drift` of a :class:`~rocmfleet.plan.drift.WantedPackage`), from
    :func:`gathered`. ``name`` may carry an
    architecture (``rocm-core:amd64``: dpkg reports the bare name) or be a dpkg pattern
    (``amdrocm*``: any installed package it matches).

    Raises:
        CannotCheck: dpkg reported none of the packages asked for (``dpkg-query`` failed, and
            "none installed" would pass a check that wants them absent).
    """
    got = gathered(host)
    if not got.packages:
        raise CannotCheck("dpkg-query reported none of the ROCm packages asked for")
    bare = name.split(":", 1)[0]
    return any(not drift([WantedPackage(n)], got) for n in got.packages if fnmatchcase(n, bare))


def device_nodes(host: Any) -> dict[str, PathState]:
    """``/dev/kfd`` and every render node (:data:`RENDER_NODES`) that exists, by path, from :func:`gathered`."""
    found = gathered(host).paths
    return {path: found[path] for path in sorted(found) if path == "/dev/kfd" or fnmatchcase(path, RENDER_NODES)}


#: ``ActiveState`` values of a running unit: ``systemctl is-active`` exits 0 for both (a unit
#: being reloaded keeps running).
RUNNING = ("active", "reloading")


def running(host: Any, unit: str) -> bool:
    """Whether ``unit`` runs (:data:`RUNNING`), from :func:`unit_state`."""
    return unit_state(host, unit).active in RUNNING


def unit_state(host: Any, unit: str) -> UnitState:
    """``unit``'s ``ActiveState`` and ``UnitFileState`` (``active``, ``enabled``) from :func:`gathered`.
    Enabled is ``enabled``, the drift rule's (:func:`rocmfleet.plan.drift.drift`): a unit
    the deploy enables is never ``static`` or ``indirect``, which ``systemctl is-enabled`` would
    also accept.

    Raises:
        CannotCheck: ``systemctl show`` did not report it (no systemd, or the read failed).
    """
    found = gathered(host).units.get(unit)
    if found is None:
        raise CannotCheck(f"systemctl show did not report {unit}")
    return found


def ran(host: Any, name: str) -> tuple[int, list[str]]:
    """Exit status and output lines of the :data:`RUNS` command ``name``, from :func:`gathered`.

    Raises:
        CannotCheck: it did not run (the read failed).
    """
    found = gathered(host).runs.get(name)
    if found is None:
        raise CannotCheck(f"state.sh did not run {name}")
    return found
