"""Validate a whole pyinfra inventory before any host is contacted.

``rocmfleet validate INVENTORY`` runs :func:`validate_inventory`; inventory files call
:func:`check_on_load` as their last statement, so ``pyinfra INVENTORY deploy.py`` stops with the
same report (exit status 2) before it connects to anything. Problems are grouped: one line per
file, key, message and value, listing the hosts it applies to.
"""

from __future__ import annotations

import ipaddress
import sys
from collections import Counter
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from rocmfleet.config import groupvars
from rocmfleet.config.connection import address_problem
from rocmfleet.config.errors import ConfigError, Problem
from rocmfleet.config.profiles import profile_path
from rocmfleet.config.settings import HostConfig, host_config
from rocmfleet.domain import names

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory

#: Exit status for invalid configuration (``rocmfleet validate``, and pyinfra through
#: :func:`check_on_load`); 1 stays "hosts failed".
EXIT_INVALID = 2

_loading = False  # True while validate_inventory executes an inventory file

#: What :func:`check_on_load` validated in this process: ``{host name: (its data, its config)}``.
#: ``deploy.py`` takes a host's config from here when its data is the same (no ``--data``
#: override changed it), so a host is validated once per run (issue 16).
_VALIDATED: dict[str, tuple[dict[str, Any], HostConfig]] = {}
#: Modules an inventory imported that read group files (``from inventories.common import ...``):
#: dropped from Python's module cache before the next load, or that load would find them cached,
#: skip their ``load_group_vars`` calls and record none of their files (``rocmfleet rollout
#: --image`` then found no group file to pin the image in).
_READERS: set[str] = set()


class InventoryError(ValueError):
    """The inventory itself cannot be loaded (syntax error, not UTF-8, no hosts)."""


def _load(inventory: str, overrides: dict[str, Any] | None = None) -> tuple[Inventory, dict[str, Any]]:
    """pyinfra's inventory for ``inventory``, and the groups as the file wrote them (before pyinfra merges them)."""
    import pyinfra_cli.inventory as cli_inventory
    from pyinfra.api.state import State
    from pyinfra.context import ctx_state

    global _loading
    if str(Path.cwd()) not in sys.path:  # as pyinfra's CLI: the inventory may import local modules
        sys.path.append(str(Path.cwd()))
    raw: dict[str, Any] = {}
    original = cli_inventory._get_groups_from_filename

    def capture(filename: str) -> Any:  # pyinfra 3.10's own (untyped) helper, wrapped to see duplicate hosts
        groups = original(filename)
        raw.update(groups)
        return groups

    for name in _READERS:
        sys.modules.pop(name, None)
    imported = set(sys.modules)
    _loading = True
    cli_inventory._get_groups_from_filename = capture
    try:
        with ctx_state.use(State()):
            loaded = cli_inventory.make_inventory(inventory, override_data=overrides, cwd=str(Path.cwd()))
        callers = {g.caller_file for g in groupvars.LOADED if g.caller_file}
        _READERS.update(n for n in set(sys.modules) - imported if getattr(sys.modules[n], "__file__", None) in callers)
        return loaded, raw
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{inventory}: not UTF-8 text (byte offset {exc.start}): save the file as UTF-8") from None
    except SystemExit as exc:  # the inventory's own sys.exit(): the command still ends with its summary
        raise InventoryError(f"{inventory}: exited while loading (sys.exit({exc.code!r})); {INVENTORY_HINT}") from None
    except Exception as exc:  # noqa: BLE001 - pyinfra wraps errors in user code (UnexpectedExternalError)
        cause = getattr(exc, "exception", exc)
        raise InventoryError(
            f"{inventory}: cannot load the inventory: {type(cause).__name__}: {cause}; {INVENTORY_HINT}"
        ) from None
    finally:
        _loading = False
        cli_inventory._get_groups_from_filename = original


#: What an inventory is, said when the file given is not one (a deploy file, a group file).
INVENTORY_HINT = "an inventory is pyinfra's Python file of hosts and groups, e.g. inventories/prod.py"


def _names(hosts: list[Any]) -> list[Any]:  # pyinfra's group lists: names or (name, data)
    return [h[0] if isinstance(h, tuple) else h for h in hosts]


def inventory_problems(raw: dict[str, Any], inventory: str) -> list[Problem]:
    """Rules on the inventory's own lists: no host listed twice in a group; host names without white space.

    pyinfra merges a host listed twice (its second entry's data wins), and a name with a space
    is used as the SSH target: both are refused here.
    """
    problems: list[Problem] = []
    seen_bad: set[str] = set()
    groups = {group: _names(value[0] if isinstance(value, tuple) else value) for group, value in raw.items()}
    for group, members in groups.items():
        counts = Counter(n for n in members if isinstance(n, Hashable))
        for name in sorted((n for n, k in counts.items() if k > 1), key=str):
            problems.append(
                Problem(
                    "(host)",
                    f"listed {counts[name]} times in group {group}: pyinfra keeps one entry; list it once",
                    "",
                    inventory,
                    [str(name)],
                )
            )
        for name in members:
            if not isinstance(name, str) or name in seen_bad:
                continue
            if not name or any(c.isspace() for c in name):
                seen_bad.add(name)
                problems.append(
                    Problem(
                        "(host)",
                        "host name holds white space: pyinfra would use it as the SSH target",
                        repr(name),
                        inventory,
                    )
                )
    if "all" in groups:  # pyinfra: an `all` group that lists hosts is the whole inventory
        every = {n for n in groups["all"] if isinstance(n, Hashable)}
        for group, members in groups.items():
            missing = sorted(str(n) for n in members if isinstance(n, Hashable) and n not in every)
            if group != "all" and missing:
                problems.append(
                    Problem(
                        "(host)",
                        f"in group {group} but not in `all`: pyinfra takes `all`'s list as every host there is, "
                        "so these are left out of every run; add them to `all`",
                        "",
                        inventory,
                        missing,
                    )
                )
    return problems


def _unreadable_groups() -> set[str] | None:
    """The inventory groups whose group file could not be read at all (:attr:`GroupFile.fatal`);
    ``None`` when such a file's groups are not known (loaded outside an assignment): every host's
    data is then unknown."""
    found: set[str] = set()
    for loaded in groupvars.LOADED:
        if loaded.fatal:
            if not (names := groupvars.assigned_to(loaded)):
                return None
            found.update(names)
    return found


@overload
def validate_inventory(
    inventory: str, with_hosts: Literal[False] = False, overrides: dict[str, Any] | None = None
) -> tuple[dict[str, HostConfig], list[Problem]]: ...
@overload
def validate_inventory(
    inventory: str, with_hosts: Literal[True], overrides: dict[str, Any] | None = None
) -> tuple[dict[str, HostConfig], list[Problem], list[Host]]: ...
def validate_inventory(
    inventory: str, with_hosts: bool = False, overrides: dict[str, Any] | None = None
) -> tuple[dict[str, HostConfig], list[Problem]] | tuple[dict[str, HostConfig], list[Problem], list[Host]]:
    """Load ``inventory`` as pyinfra does (``overrides`` as its ``--data``) and validate every host's data.

    Every problem is reported at once: the group files' own (not UTF-8, invalid YAML, a key
    given twice, a YAML 1.1 scalar, a vault value that does not decrypt, a missing file), the
    inventory's (a host listed twice, a name with white space), and each host's settings,
    profile, image and instances, each against the file and key it comes from. When a group
    file cannot be read at all, the hosts of its groups are not validated further (their data is
    unknown); the other hosts are.

    Returns:
        The valid hosts' configurations by host name, and every problem, grouped across hosts;
        with ``with_hosts``, also pyinfra's ``Host`` objects (for their ``ssh_*`` data), in
        inventory order.

    Raises:
        InventoryError: the inventory file cannot be loaded at all, or has no hosts.
    """
    if not Path(inventory).is_file():
        raise InventoryError(f"{inventory}: no such inventory file")
    groupvars.reset()
    inv, raw = _load(inventory, overrides)
    configs: dict[str, HostConfig] = {}
    grouped: dict[tuple[str, str, str, str], Problem] = {}

    def add(problem: Problem, host: str | None = None) -> None:
        key = (problem.file, problem.key, problem.message, problem.value)
        entry = grouped.setdefault(key, Problem(problem.key, problem.message, problem.value, problem.file))
        for name in problem.hosts if host is None else [host]:
            if name not in entry.hosts:
                entry.hosts.append(name)

    for problem in groupvars.problems() + inventory_problems(raw, inventory) + unloaded_problems(raw, inventory):
        add(problem)
    hosts = list(inv)
    if not hosts:
        raise InventoryError(f"{inventory}: no hosts; {INVENTORY_HINT}")
    unreadable = _unreadable_groups()
    for host in hosts:
        data = host.data.dict()
        if bad_name := _host_name_problem(host.name, data):
            add(Problem("(host)", bad_name, repr(host.name), inventory), host.name)
        if not [group for group in host.groups if group != Path(inventory).stem]:
            stem = Path(inventory).stem
            why = (
                f"is in no group but `{stem}`, which pyinfra gives every host of {stem}.py (its file name): "
                "add it to a group of another name, such as gpu_nodes"
            )
            add(Problem("(host)", why, "", inventory), host.name)
            continue
        if unreadable is None or "all" in unreadable or unreadable & set(host.groups):
            continue  # its data is unknown: a file of one of its groups cannot be read
        try:
            configs[host.name] = host_config(data, groupvars.profiles_dir())
            _VALIDATED[host.name] = (data, configs[host.name])
        except ConfigError as exc:
            for problem in exc.problems:
                top = problem.key.split(".")[0]
                if problem.file:
                    file, message = problem.file, problem.message
                elif overrides and top in overrides:
                    file, message = "--data", problem.message
                else:
                    file, message = _blame(top, problem.message, host, inv, inventory)
                add(Problem(problem.key, message, problem.value, file), host.name)
    for problem in shared_address_problems(hosts, inventory):
        add(problem)
    for problem in targets_file_problems(configs, inventory) + service_name_problems(configs):
        add(problem)
    if with_hosts:
        return configs, list(grouped.values()), hosts
    return configs, list(grouped.values())


def _ssh_address(name: str, data: dict[str, Any]) -> tuple[str, int] | None:
    """``(address, port)`` SSH connects a host to, normalised: an IP address in its compressed form
    (brackets dropped, an IPv4-mapped IPv6 address as its IPv4 one), a name in lower case without a
    trailing dot; ``None`` for pyinfra's ``@`` connectors and values that are not a string and an
    integer (their own problems)."""
    address, port = data.get("ssh_hostname") or name, data.get("ssh_port") or 22
    if not isinstance(address, str) or address.startswith("@") or not isinstance(port, int):
        return None
    try:
        ip = ipaddress.ip_address(address.removeprefix("[").removesuffix("]"))
    except ValueError:
        return address.lower().rstrip("."), port
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).compressed, port


def shared_address_problems(hosts: list[Host], inventory: str) -> list[Problem]:
    """Hosts that SSH would reach at one address and port: one machine under two names, which a
    deploy or a rollout would change twice at once (apt and dpkg locks, two units started on one
    port). One problem per address, naming every host at it. Names mapped by ``~/.ssh/config``
    (no ``ssh_hostname``) are compared as written."""
    at: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for host in hosts:
        data = host.data.dict()
        if (where := _ssh_address(host.name, data)) is not None:
            at.setdefault(where, []).append((host.name, str(data.get("ssh_hostname") or host.name)))
    problems = []
    for (address, port), found in at.items():
        if len(found) > 1:
            names_at = [name for name, _written in found]
            written = list(dict.fromkeys(w for _name, w in found))
            problem = Problem(
                "(host)",
                f"{len(names_at)} hosts have the SSH address {address} port {port}: one machine under "
                f"{len(names_at)} names would be deployed twice at once; keep one name, or give each host its own "
                "ssh_hostname",
                ", ".join(written),
                inventory,
            )
            problem.hosts.extend(names_at)
            problems.append(problem)
    return problems


def targets_file_problems(configs: dict[str, HostConfig], inventory: str) -> list[Problem]:
    """``metrics_targets_file`` with more than one value across the inventory (unset counts as one):
    a deploy writes the whole inventory's targets to one file on the control machine. One problem
    naming each value's hosts."""
    files: dict[str | None, list[str]] = {}
    for name, config in configs.items():
        files.setdefault(config.metrics.metrics_targets_file, []).append(name)
    if len(files) < 2:
        return []
    said = "; ".join(f"{path or 'unset'} for {', '.join(names)}" for path, names in files.items())
    problem = Problem(
        "metrics_targets_file",
        f"one file holds the whole inventory's scrape targets, but the hosts disagree ({said}); set it once "
        "(group_vars/all.yml)",
        "",
        inventory,
    )
    problem.hosts.extend(configs)  # inventory order
    return [problem]


def service_name_problems(configs: dict[str, HostConfig]) -> list[Problem]:
    """Profiles of different models that give one ``served_model_name`` (or whose empty one falls back
    to the same ``model``, vLLM's default), across every host: the fleet's services are named by it
    (``rocmfleet.plan.services``), so two models would be one service and a client asking for that
    name would get either. Profiles of one model may share it (a TP-2 profile beside a TP-1 one).
    One problem per name, naming each profile's file, its model and its hosts."""
    served: dict[str, dict[str, dict[str, list[str]]]] = {}  # name -> model -> profile -> hosts
    for host, config in configs.items():
        profile = config.profile
        name = profile.served_model_name or profile.model
        served.setdefault(name, {}).setdefault(profile.model, {}).setdefault(profile.name, []).append(host)
    problems = []
    for name, models in served.items():
        if len(models) < 2:
            continue
        profiles = {p: (model, hosts) for model, named in models.items() for p, hosts in named.items()}
        files = [groupvars.display(profile_path(p, groupvars.profiles_dir())) for p in profiles]
        said = "; ".join(f"profile {p} serves {model} (hosts {', '.join(h)})" for p, (model, h) in profiles.items())
        problem = Problem(
            "served_model_name",
            f"{len(models)} models are served under one name, so they would be one service: {said}; give each "
            "model its own served_model_name (profiles may share one only when they serve the same model)",
            name,
            ", ".join(dict.fromkeys(files)),
        )
        problem.hosts.extend(h for _model, hosts in profiles.values() for h in hosts)
        problems.append(problem)
    return problems


def unloaded_problems(raw: dict[str, Any], inventory: str) -> list[Problem]:
    """A group whose own file ``group_vars/<group>.yml`` exists beside the inventory but is not loaded.

    Ansible (``group_vars/<group>.yml``) and pyinfra (``group_data/<group>.py``) match group files
    to groups by name; rocmfleet's inventories name the file they load (``_load("gpu_nodes")``), so
    a group that an operator wrote as Ansible would (``mi300x = [...]`` beside
    ``group_vars/mi300x.yml``) would get none of its settings, and then ``vllm_profile: Field
    required`` with no hint.
    """
    loaded = {g.path.resolve() for g in groupvars.LOADED}
    problems = []
    for group in raw:
        for directory in groupvars.search_dirs(inventory)[:2]:  # beside the inventory, then its parent
            path = directory / f"{group}.yml"
            if path.is_file() and path.resolve() not in loaded:
                problems.append(
                    Problem(
                        "(group)",
                        f"group {group}: {groupvars.display(path)} exists but the inventory does not load it; "
                        f"give the group its data: {group} = (hosts, load_group_vars({group!r}))",
                        "",
                        inventory,
                    )
                )
                break
    return problems


def _host_name_problem(name: str, data: dict[str, Any]) -> str | None:
    """Why a host's inventory name is refused: a results directory cannot be named after it, it has
    invisible or look-alike characters (:func:`rocmfleet.domain.names.host_name_problem`), or, with
    no ``ssh_hostname`` (the name is then what SSH connects to, unless ``~/.ssh/config`` maps it),
    it is not an RFC 1123 host name or an IP address. pyinfra's connector names (``@local``,
    ``@docker/...``) are not addresses. A name with white space is :func:`inventory_problems`' own."""
    if not isinstance(name, str) or any(c.isspace() for c in name) or name.startswith("@"):
        return None  # white space: inventory_problems'; `@docker/...`: a pyinfra connector's own name
    if problem := names.host_name_problem(name):
        return problem
    if data.get("ssh_hostname") is None and (why := address_problem(name)):
        return f"is the SSH address (no ssh_hostname): it {why}"
    return None


def _blame(key: str, message: str, host: Host, inv: Inventory, inventory: str) -> tuple[str, str]:
    """The file that gives ``key`` to ``host`` (pyinfra's precedence), and the message to say there.

    Host data is the inventory's; then the groups, the last one first, then ``all``: the group
    file holding the key, else the inventory (inline group data). A missing key is blamed on
    the most specific group file the host reads, saying so when that file is empty.
    """
    if key in inv.get_host_data(host.name):
        return inventory, message
    groups = [g for g in reversed(list(host.groups)) if g != "all"] + ["all"]
    for group in groups:
        group_data = inv.get_data() if group == "all" else inv.get_group_data(group)
        if key in group_data:
            files = [f for f in groupvars.files_of_group(group, group_data) if key in f.data]
            return (groupvars.display(files[-1].path), message) if files else (inventory, message)
    for group in groups:  # not given anywhere: the most specific group file this host reads
        group_data = inv.get_data() if group == "all" else inv.get_group_data(group)
        files = groupvars.files_of_group(group, group_data)
        if files:
            loaded = files[-1]
            if loaded.empty:
                message += " (this file is empty or holds only comments)"
            return groupvars.display(loaded.path), message
    return inventory, message


def validated_config(name: str, data: dict[str, Any]) -> HostConfig | None:
    """The config the inventory's own validation (:func:`check_on_load`) made for host ``name``
    from exactly ``data`` (pyinfra's ``host.data.dict()``), or ``None``: validate it then."""
    seen = _VALIDATED.get(name)
    return seen[1] if seen is not None and seen[0] == data else None


def validated_on_load(name: str) -> HostConfig | None:
    """The config the inventory's own validation (:func:`check_on_load`) made for host ``name``, from
    the inventory's data without pyinfra's ``--data`` overrides; ``None`` when it made none."""
    seen = _VALIDATED.get(name)
    return seen[1] if seen is not None else None


def report(problems: list[Problem]) -> str:
    """The text people read: one line per problem."""
    return f"invalid configuration ({len(problems)} problem(s)):\n" + "\n".join(f"  {p}" for p in problems)


def check_on_load(inventory_file: str) -> None:
    """Validate the inventory being loaded; print the report and exit 2 if it is invalid.

    Call it as the last statement of an inventory file (``check_on_load(__file__)``), so that
    pyinfra stops before it connects to any host. A no-op while this module loads the file.
    It also stops, with the same exit status, a deploy started while a rollout of this
    inventory is recorded as in progress (:func:`rocmfleet.fleet.rollout.state.deploy_refusal`),
    unless it is that rollout's own deploy.
    """
    if _loading:
        return
    # Under pyinfra the inventory was executed before this call: a module it imported that reads
    # group files (``from inventories.common import ...``) is cached by now, and the validation's
    # own load would record none of its files (then "group all: ... does not load it").
    # The inventory itself is no such module (``runpy.run_path`` lists it as ``<run_path>`` meanwhile).
    path = Path(inventory_file).resolve()
    callers = {g.caller_file for g in groupvars.LOADED if g.caller_file and Path(g.caller_file).resolve() != path}
    _READERS.update(n for n, m in list(sys.modules.items()) if getattr(m, "__file__", None) in callers)
    from rocmfleet.fleet.rollout.state import deploy_refusal

    if path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())
    refusal = deploy_refusal(path)
    if refusal:  # a rollout is recorded: only its own deploys may run (rocmfleet.fleet.rollout.state)
        print(f"rocmfleet: {refusal}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    try:
        configs, problems = validate_inventory(str(path))
    except InventoryError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    if problems:
        print(f"rocmfleet: {report(problems)}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)
    if warning := placeholder_warning(configs):
        print(f"rocmfleet: warning: {warning}", file=sys.stderr)


#: The digest the shipped profiles carry until an operator pins a real one.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


def placeholder_warning(configs: dict[str, HostConfig]) -> str | None:
    """Which profiles' hosts would pull the placeholder digest, and where a real one goes; or ``None``."""
    stale = sorted({c.profile.name for c in configs.values() if c.image.digest == PLACEHOLDER_DIGEST})
    if not stale:
        return None
    return (
        f"{', '.join(stale)}: the image digest is the placeholder {PLACEHOLDER_DIGEST[:15]}...; pin the real one "
        "(vllm_image_tag and vllm_image_digest in a group file; skopeo inspect docker://IMAGE:TAG prints it) "
        "before deploying: no host can pull the placeholder"
    )
