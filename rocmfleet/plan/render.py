"""``rocmfleet plan``'s text (pure): per service its replicas, per host what the deploy leaves.

Deterministic: the same plan gives the same bytes, so ``diff`` of two checkouts' output reviews a
change. With ``files``, each file is printed whole after a header line::

    --- file lab-1 /etc/docker/daemon.json (mode 644, owner root:root, role docker, 123 bytes)

followed by exactly that many bytes of content and a newline: a reader can cut the output there.
A secrets file shows its variables' names, never a value; a file the deploy fetches says from where.
"""

from __future__ import annotations

import shlex

from rocmfleet.plan.model import FilePlan, FleetPlan, HostPlan

#: The start of a file's header line under ``--files``.
FILE_HEADER = "--- file "


def _owner(item: FilePlan) -> str:
    return f"{item.user or '-'}:{item.group or '-'}"


def file_header(host: str, item: FilePlan) -> str:
    """The header line of ``item`` under ``--files`` (without the newline)."""
    size = len(item.content.encode()) if item.content is not None else 0
    what = f"mode {item.mode or '-'}, owner {_owner(item)}, role {item.role}, {size} bytes"
    return f"{FILE_HEADER}{host} {item.path} ({what})"


def _file_line(item: FilePlan) -> str:
    what = {"rendered": f"{len((item.content or '').encode())} bytes", "secret": "secret"}.get(item.source, item.source)
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


def plan_text(plan: FleetPlan, files: bool = False) -> str:
    """The whole text: services, then each host (:func:`host_text`)."""
    parts = []
    for service in plan.services:
        hosts = sorted({r.host for replica in service.replicas for r in replica.ranks})
        head = f"service {service.name}: {len(service.replicas)} replica(s) on {len(hosts)} host(s)"
        if len(service.profiles) == 1 and len(service.images) == 1:
            parts.append(f"{head}\n  profile {service.profiles[0]}, image {service.images[0]}\n")
            parts.append("".join(f"  replica {r.id}\n" for r in service.replicas))
            continue
        # replicas of one service that differ (a TP-2 profile beside a TP-1 one, a rack on its own
        # pin): each replica says its own, so that the service line hides none
        parts.append(f"{head}\n  replicas differ: {_counted('profile', [r.profile for r in service.replicas])}; "
                     f"{_counted('image', [r.image for r in service.replicas])}\n")  # fmt: skip
        parts.append("".join(f"  replica {r.id} (profile {r.profile}, image {r.image})\n" for r in service.replicas))
    parts += [host_text(host, files) for host in plan.hosts]
    return "".join(parts)


def _counted(what: str, values: list[str]) -> str:
    """``profile a (3), b (1)``: each distinct value of ``values``, sorted, with how many have it."""
    return f"{what} " + ", ".join(f"{v} ({values.count(v)})" for v in sorted(set(values)))


def summary(plan: FleetPlan) -> str:
    """The closing line: hosts, services, replicas, problems, and that nothing was connected to."""
    replicas = sum(len(s.replicas) for s in plan.services)
    problems = [h.name for h in plan.hosts if h.problem]
    said = f"; not placed or not supported: {', '.join(problems)}" if problems else ""
    return (
        f"rocmfleet plan: {len(plan.hosts)} host(s), {len(plan.services)} service(s), {replicas} replica(s){said}; "
        "planned offline (no host or registry was contacted)"
    )
