"""Validate a whole pyinfra inventory before any host is contacted.

``rocmfleet validate INVENTORY`` runs :func:`validate_inventory`; inventory files call
:func:`check_on_load` as their last statement, so ``pyinfra INVENTORY deploy.py`` stops with the
same report (exit status 2) before it connects to anything. Problems are grouped: one line per
file, key, message and value, listing the hosts it applies to.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rocmfleet import groupvars
from rocmfleet.settings import ConfigError, HostConfig, Problem, host_config

#: Exit status for invalid configuration (``rocmfleet validate``, and pyinfra through
#: :func:`check_on_load`); 1 stays "hosts failed".
EXIT_INVALID = 2

_loading = False  # True while validate_inventory executes an inventory file


class InventoryError(ValueError):
    """The inventory itself cannot be loaded (syntax error, bad group data file, no hosts)."""


def _load(inventory: str, overrides: dict | None = None):
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    global _loading
    if str(Path.cwd()) not in sys.path:  # as pyinfra's CLI: the inventory may import local modules
        sys.path.append(str(Path.cwd()))
    _loading, groupvars.EXIT_ON_ERROR = True, False
    try:
        with ctx_state.use(State()):
            return make_inventory(inventory, override_data=overrides, cwd=str(Path.cwd()))
    except Exception as exc:  # noqa: BLE001 - pyinfra wraps errors in user code (UnexpectedExternalError)
        cause = getattr(exc, "exception", exc)
        if isinstance(cause, groupvars.GroupVarsError):
            raise InventoryError(str(cause)) from None
        raise InventoryError(f"{inventory}: cannot load the inventory: {type(cause).__name__}: {cause}") from None
    finally:
        _loading, groupvars.EXIT_ON_ERROR = False, True


def validate_inventory(inventory: str, with_hosts: bool = False, overrides: dict | None = None):
    """Load ``inventory`` as pyinfra does (``overrides`` as its ``--data``) and validate every host's data.

    Returns:
        The valid hosts' configurations by host name, and every problem, grouped across hosts;
        with ``with_hosts``, also pyinfra's ``Host`` objects (for their ``ssh_*`` data), in
        inventory order.

    Raises:
        InventoryError: the inventory file or a group file cannot be loaded at all.
    """
    if not Path(inventory).is_file():
        raise InventoryError(f"{inventory}: no such inventory file")
    groupvars.LOADED.clear()
    inv = _load(inventory, overrides)
    configs: dict[str, HostConfig] = {}
    grouped: dict[tuple[str, str, str, str], Problem] = {}
    hosts = list(inv)
    if not hosts:
        raise InventoryError(f"{inventory}: no hosts")
    for host in hosts:
        data = host.data.dict()
        if not [group for group in host.groups if group != Path(inventory).stem]:
            problem = Problem("(host)", "is in no group: add it to a group such as gpu_nodes", "", inventory)
            grouped.setdefault(("", "(host)", problem.message, ""), problem).hosts.append(host.name)
            continue
        try:
            configs[host.name] = host_config(data, groupvars.profiles_dir())
        except ConfigError as exc:
            for problem in exc.problems:
                top = problem.key.split(".")[0]
                if overrides and top in overrides:
                    file = "--data"
                else:
                    file = problem.file or groupvars.source_of(top, ["all", *host.groups], inventory)
                key = (file, problem.key, problem.message, problem.value)
                grouped.setdefault(key, Problem(problem.key, problem.message, problem.value, file)).hosts.append(
                    host.name
                )
    if with_hosts:
        return configs, list(grouped.values()), hosts
    return configs, list(grouped.values())


def report(problems: list[Problem]) -> str:
    """The text people read: one line per problem."""
    return f"invalid configuration ({len(problems)} problem(s)):\n" + "\n".join(f"  {p}" for p in problems)


def check_on_load(inventory_file: str) -> None:
    """Validate the inventory being loaded; print the report and exit 2 if it is invalid.

    Call it as the last statement of an inventory file (``check_on_load(__file__)``), so that
    pyinfra stops before it connects to any host. A no-op while this module loads the file.
    It also stops, with the same exit status, a deploy started while a rollout of this
    inventory is recorded as in progress (:func:`rocmfleet.fleetrollout.deploy_refusal`),
    unless it is that rollout's own deploy.
    """
    if _loading:
        return
    from rocmfleet.fleetrollout import deploy_refusal

    path = Path(inventory_file).resolve()
    if path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())
    refusal = deploy_refusal(path)
    if refusal:  # a rollout is recorded: only its own deploys may run (rocmfleet.fleetrollout)
        print(f"rocmfleet: {refusal}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    try:
        _configs, problems = validate_inventory(str(path))
    except InventoryError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    if problems:
        print(f"rocmfleet: {report(problems)}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
