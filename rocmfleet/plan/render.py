"""``rocmfleet plan``'s text (pure): per service its replicas, per host what the deploy leaves.

Deterministic: the same plan gives the same bytes, so ``diff`` of two checkouts' output reviews a
change. With ``files``, each file is printed whole after a header line::

    --- file lab-1 /etc/docker/daemon.json (mode 644, owner root:root, role docker, sha256 3f2a0c1d9e8b, 123 bytes)

followed by exactly that many bytes of content and a newline: a reader can cut the output there.
The file lines of the text and the headers name the content's SHA-256 (its first 12 hex digits),
so a change of content shows in a ``diff`` of two outputs as the lines naming its host and file,
even when its size stays (``diff -u -F '^host \\|^--- file '`` names them in each hunk of ``--files``).
A secrets file shows its variables' names, never a value; a file the deploy fetches says from where.
"""

from __future__ import annotations

import functools
import hashlib
import shlex

from rocmfleet.plan.model import FilePlan, FleetPlan, HostPlan, RolloutPlan, ServicePlan

#: The start of a file's header line under ``--files``.
FILE_HEADER = "--- file "


def _owner(item: FilePlan) -> str:
    return f"{item.user or '-'}:{item.group or '-'}"


@functools.lru_cache(maxsize=4096)
def short_sha256(content: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``content`` (UTF-8): what the text names a file's
    content by (48 bits: a chance collision among a site's few dozen texts is negligible)."""
    return hashlib.sha256(content.encode()).hexdigest()[:12]


def file_header(host: str, item: FilePlan) -> str:
    """The header line of ``item`` under ``--files`` (without the newline); its size comes last."""
    size = len(item.content.encode()) if item.content is not None else 0
    digest = f"sha256 {short_sha256(item.content)}, " if item.content is not None else ""
    what = f"mode {item.mode or '-'}, owner {_owner(item)}, role {item.role}, {digest}{size} bytes"
    return f"{FILE_HEADER}{host} {item.path} ({what})"


def _file_line(item: FilePlan) -> str:
    content = item.content or ""
    rendered = f"{len(content.encode())} bytes, sha256 {short_sha256(content)}"
    what = {"rendered": rendered, "secret": "secret"}.get(item.source, item.source)
    names = f": {', '.join(item.secret_names) or '(no variable)'} (values not shown)" if item.source == "secret" else ""
    return f"    {item.path} (mode {item.mode or '-'}, owner {_owner(item)}, {item.role}; {what}{names})"


def host_text(host: HostPlan, files: bool = False) -> str:
    """One host's part of the text: instances and their ``vllm serve`` lines, files (whole with
    ``files``), directories, packages, units, removals, reboot reasons and the values checks expect."""
    lines = [f"host {host.name} (groups {', '.join(host.groups) or '-'})", f"  topology: {host.topology_source}"]
    if host.assumed:
        lines.append(f"  assumed: {', '.join(host.assumed)} (not recorded: defaults, see rocmfleet.plan.sources)")
    if host.problem:
        lines.append("  problem: " + host.problem.replace("\n", "\n    "))
    for i in host.instances:
        cpus = f"cpus {i.cpuset_cpus} mems {i.cpuset_mems}" if i.cpuset_cpus else "no CPU binding"
        gpus = ",".join(map(str, i.gpus))
        lines.append(
            f"  instance {i.name} ({i.service}): port {i.port}, internal {i.internal_ports}, gpus {gpus}, {cpus}"
        )
        lines.append(f"    {shlex.join(i.serve_argv)}")
    lines.append("  files:")
    lines += [_file_line(f) for f in host.files]
    lines.append("  directories:")
    lines += [
        f"    {d.path} (mode {d.mode or '-'}, owner {d.user or '-'}:{d.group or '-'}, {d.role})"
        for d in host.directories
    ]
    lines.append("  packages:")
    lines += [f"    {p.name} {p.version}{' (held)' if p.held else ''} ({p.role})" for p in host.packages]
    lines.append("  units:")
    for u in host.units:
        state = {True: "running", False: "stopped", None: "state left alone"}[u.running]
        lines.append(f"    {u.unit}: {state}, {'enabled' if u.enabled else 'disabled'} ({u.role})")
    if host.removals:
        lines.append("  absent:")
        lines += [f"    {r.path} ({r.role}: {r.why})" for r in host.removals]
    if host.reboot_reasons:
        lines.append("  reboots when:")
        lines += [f"    {reason}" for reason in host.reboot_reasons]
    lines.append(f"  ports: {', '.join(map(str, host.ports)) or '-'}")
    lines.append("  checks expect:")
    lines += [f"    {key}: {value}" for key, value in host.expect]
    text = "\n".join(lines) + "\n"
    if files:
        for item in host.files:
            if item.content is None:
                continue
            text += f"{file_header(host.name, item)}\n{item.content}\n"
    return text


def service_text(service: ServicePlan) -> str:
    """One service's part of the text: its replicas and hosts; its profile and image when every
    replica runs the same, else a ``replicas differ`` line counting each profile and image; the
    images per group when there are several (which hosts run which); a replica that spans hosts with
    its ranks (head first); then a line per host with its one-host replicas (its instances), naming
    their profile and image when the service's replicas differ::

        service qwen3-235b-a22b: 16 replica(s) on 16 host(s)
          replicas differ: profile qwen3-235b-a22b (16); image registry.example/vllm:0.33.0-r1@sha256:... (6), ...
          image registry.example/vllm:0.33.0-r1@sha256:... on 6 host(s) (group rack_a): ra-01, ...
          on ra-01: 1 replica(s): qwen3-235b-a22b-0 (profile qwen3-235b-a22b, image registry.example/...)
    """
    hosts = list(dict.fromkeys(r.host for replica in service.replicas for r in replica.ranks))
    lines = [f"service {service.name}: {len(service.replicas)} replica(s) on {len(hosts)} host(s)"]
    same = len(service.profiles) == 1 and len(service.images) == 1
    if same:
        lines.append(f"  profile {service.profiles[0]}, image {service.images[0].image}")
    else:
        # replicas of one service that differ (a TP-2 profile beside a TP-1 one, a rack on its own
        # pin): each says its own, so that the service line hides none
        lines.append(
            f"  replicas differ: {_counted('profile', [r.profile for r in service.replicas])}; "
            f"{_counted('image', [r.image for r in service.replicas])}"
        )
    if len(service.images) > 1:
        for used in service.images:
            groups = f"group {', '.join(used.groups)}" if used.groups else "no group holds exactly these hosts"
            lines.append(f"  image {used.image} on {len(used.hosts)} host(s) ({groups}): {', '.join(used.hosts)}")
    on_host: dict[str, list[str]] = {}  # one-rank replicas by host: a line per host
    for replica in service.replicas:
        own = "" if same else f" (profile {replica.profile}, image {replica.image})"
        if len(replica.ranks) == 1:
            on_host.setdefault(replica.ranks[0].host, []).append(replica.ranks[0].instance + own)
        else:
            ranks = ", ".join(f"{rank.host} (rank {rank.rank}, {rank.instance})" for rank in replica.ranks)
            lines.append(f"  replica {replica.id}{own} on {ranks}")
    lines += [f"  on {host}: {len(names)} replica(s): {', '.join(names)}" for host, names in on_host.items()]
    return "\n".join(lines) + "\n"


def _counted(what: str, values: list[str]) -> str:
    """``profile a (3), b (1)``: each distinct value of ``values``, sorted, with how many have it."""
    return f"{what} " + ", ".join(f"{v} ({values.count(v)})" for v in sorted(set(values)))


def rollout_text(rollout: RolloutPlan) -> str:
    """The rollout's part of the text (``rocmfleet plan --image``): the image and the file that
    would pin it, then the plan's lines exactly as ``rollout --dry`` prints them."""
    where = f"group {rollout.group}'s pin" if rollout.group else "the fleet-wide pin"
    lines = [
        f"rollout of {rollout.image} (digest {rollout.digest})",
        f"  pins it in {rollout.pin_file} ({where}); {len(rollout.hosts)} host(s) switch "
        "(what a host runs now is not known offline)",
        *(f"  {line}" for line in rollout.lines),
    ]
    return "\n".join(lines) + "\n"


def plan_text(plan: FleetPlan, files: bool = False) -> str:
    """The whole text: services (:func:`service_text`), the rollout when planned
    (:func:`rollout_text`), then each host (:func:`host_text`)."""
    parts = [service_text(service) for service in plan.services]
    if plan.rollout is not None:
        parts.append(rollout_text(plan.rollout))
    parts += [host_text(host, files) for host in plan.hosts]
    return "".join(parts)


def summary(plan: FleetPlan, of_hosts: int | None = None) -> str:
    """The closing line: hosts (``of_hosts``: of how many in the inventory, when ``--limit`` or
    ``--exclude`` left fewer), services, replicas, problems, and that nothing was connected to."""
    replicas = sum(len(s.replicas) for s in plan.services)
    hosts = f"{len(plan.hosts)} host(s)"
    if of_hosts is not None and of_hosts != len(plan.hosts):
        hosts = f"{len(plan.hosts)} of {of_hosts} host(s) (--limit/--exclude)"
    problems = [h.name for h in plan.hosts if h.problem]
    said = f"; not placed or not supported: {', '.join(problems)}" if problems else ""
    if plan.rollout is not None:
        said += f"; rollout of {plan.rollout.image} in {len(plan.rollout.batches)} batch(es)"
    return (
        f"rocmfleet plan: {hosts}, {len(plan.services)} service(s), {replicas} replica(s){said}; "
        "planned offline (no host or registry was contacted)"
    )
