"""Planning at scale: ``rocmfleet validate`` and ``rocmfleet plan --json`` of a generated site (issue 43).

Not a test: a measurement on this machine, no lab needed. It writes a site of ``--hosts`` hosts
serving ``--services`` services (:func:`measure.site.write_site`: racks, a ``canary`` group, one
profile per service), then runs, alternately after one warm-up of each (so that load from other
work on the machine falls on all alike), each as a whole process as an operator runs it:

- ``anchor``: ``rocmfleet --version`` (the interpreter, the CLI's imports, nothing of the site);
- ``validate``: ``rocmfleet validate SITE``;
- ``plan``: ``rocmfleet plan SITE --json``, when ``rocmfleet plan --help`` exits 0 (else the row
  says "unavailable"); its output's SHA-256 per run shows whether two runs print the same bytes;
- ``render``: until ``plan`` exists, a stand-in for its dearest part: validate the site in one
  process and render every instance's unit and env file (:func:`rocmfleet.plan.instance.instance_files`)
  on a stand-in 8-GPU topology (``python measure/plan_scale.py --render SITE``).

::

    .venv/bin/python measure/plan_scale.py --hosts 2000 --services 20 --repeat 3 --label now

Prints the median wall time and CPU (user + system of the process and its children, from
``getrusage``) of each and their spread (min..max: the noise), against the issue's target
(``plan --json`` of 2,000 hosts / 20 services in at most 10 s); writes
``measure/results/plan-scale-LABEL.json``. ``--profile`` adds one ``validate`` under cProfile
(``measure/results/plan-scale-LABEL-validate.prof.txt``, sorted by cumulative time).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure.site import write_site  # noqa: E402

RESULTS = ROOT / "measure" / "results"
#: The issue's target (issue 43, "Must be true at the end"): plan --json of 2,000 hosts / 20 services.
TARGETS = {"plan_2000_hosts_20_services_s": 10.0}


def _python() -> str:
    venv = ROOT / ".venv" / "bin"
    return str(venv / "python") if (venv / "python").exists() else sys.executable


def _rocmfleet() -> list[str]:
    """The CLI as an operator runs it: the console script of this checkout's venv, else the module."""
    script = Path(_python()).parent / "rocmfleet"
    return [str(script)] if script.exists() else [_python(), "-m", "rocmfleet.entry"]


def plan_available() -> bool:
    """Whether this checkout has ``rocmfleet plan`` (its ``--help`` exits 0)."""
    proc = subprocess.run([*_rocmfleet(), "plan", "--help"], cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.returncode == 0


def commands(inventory: Path, with_plan: bool) -> dict[str, list[str]]:
    """The argv of each measured command, in the order they alternate."""
    cli = _rocmfleet()
    found = {
        "anchor": [*cli, "--version"],
        "validate": [*cli, "validate", str(inventory)],
        "plan": [*cli, "plan", str(inventory), "--json"],
        "render": [_python(), str(Path(__file__).resolve()), "--render", str(inventory)],
    }
    if not with_plan:
        del found["plan"]
    return found


def _run(argv: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ), capture_output=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "rc": proc.returncode,
        "wall_s": wall,
        "cpu_s": cpu,
        "stdout_bytes": len(proc.stdout),
        "stdout_sha256": hashlib.sha256(proc.stdout).hexdigest(),
        "stderr_tail": proc.stderr.decode(errors="replace")[-400:],
    }


def _short(word: str) -> str:
    """An argv word as the result file says it: paths under the checkout relative to it."""
    path = Path(word)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else word


def _stats(runs: list[dict]) -> dict:
    walls, cpus = [r["wall_s"] for r in runs], [r["cpu_s"] for r in runs]
    return {
        "rc": [r["rc"] for r in runs],
        "wall_s": [round(w, 2) for w in walls],
        "cpu_s": [round(c, 2) for c in cpus],
        "wall_median_s": round(statistics.median(walls), 2),
        "cpu_median_s": round(statistics.median(cpus), 2),
        "stdout_bytes": runs[-1]["stdout_bytes"],
        "same_output": len({r["stdout_sha256"] for r in runs}) == 1,
        "stderr_tail": runs[-1]["stderr_tail"] if any(r["rc"] for r in runs) else "",
    }


def measure(hosts: int, services: int, repeat: int, label: str, site: Path, profile: bool) -> dict:
    """Write the site, run every command ``repeat`` times alternately, write and return the result."""
    load_before = round(os.getloadavg()[0], 2)  # other work on the machine: it inflates the wall times
    inventory = write_site(site, hosts, services)
    with_plan = plan_available()
    argvs = commands(inventory, with_plan)
    runs: dict[str, list[dict]] = {kind: [] for kind in argvs}
    for kind, argv in argvs.items():  # warm-up: page cache, .pyc files; not counted
        r = _run(argv)
        print(f"  warm-up {kind}: {r['wall_s']:.2f} s rc={r['rc']}", file=sys.stderr, flush=True)
    for i in range(repeat):
        for kind, argv in argvs.items():
            r = _run(argv)
            runs[kind].append(r)
            print(
                f"  {kind} {i}: {r['wall_s']:.2f} s, {r['cpu_s']:.2f} s CPU, rc={r['rc']}", file=sys.stderr, flush=True
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    if profile:
        prof = RESULTS / f"plan-scale-{label}-validate.prof.txt"
        proc = subprocess.run(
            [_python(), "-m", "cProfile", "-s", "cumtime", "-m", "rocmfleet.entry", "validate", str(inventory)],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        head = [line for line in proc.stdout.splitlines() if ": ok (" not in line][:80]
        prof.write_text("\n".join(head) + "\n")
        print(f"wrote {prof}", file=sys.stderr)
    result = {
        "label": label,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "load_1m_before": load_before},
        "hosts": hosts,
        "services": services,
        "repeat": repeat,
        "site": "measure/site.py write_site(hosts, services)",
        "commands": {kind: " ".join(_short(a) for a in argv) for kind, argv in argvs.items()},
        "plan": "measured" if with_plan else "unavailable: `rocmfleet plan --help` does not exit 0 in this checkout",
        "targets": TARGETS,
        "rows": {kind: _stats(rs) for kind, rs in runs.items()},
    }
    result["machine"]["load_1m_after"] = round(os.getloadavg()[0], 2)
    path = RESULTS / f"plan-scale-{label}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return result


def table(result: dict) -> str:
    """The result as people read it."""
    lines = [
        f"{result['label']} ({result['when']}), {result['hosts']} hosts, {result['services']} services, "
        f"{result['repeat']} alternating runs each, {result['machine']['cpus']} CPUs, load "
        f"{result['machine']['load_1m_before']}..{result['machine'].get('load_1m_after', '?')}",
        f"{'command':9} {'wall median s':>13} {'wall min..max':>14} {'CPU median s':>12} {'CPU min..max':>14} "
        f"{'stdout':>9} same rc",
    ]
    for kind, r in result["rows"].items():
        lines.append(
            f"{kind:9} {r['wall_median_s']:>13.2f} {min(r['wall_s']):>6.2f}..{max(r['wall_s']):<6.2f} "
            f"{r['cpu_median_s']:>12.2f} {min(r['cpu_s']):>6.2f}..{max(r['cpu_s']):<6.2f} "
            f"{r['stdout_bytes']:>9} {r['same_output']!s:4} {r['rc']}"
        )
    target = result["targets"]["plan_2000_hosts_20_services_s"]
    if "plan" in result["rows"]:
        plan = result["rows"]["plan"]
        lines.append(f"plan --json: {plan['wall_median_s']:.2f} s wall median (target <= {target} s)")
    else:
        lines.append(f"plan: {result['plan']} (target <= {target} s)")
    anchor = result["rows"]["anchor"]["wall_median_s"]
    for kind in ("validate", "plan", "render"):
        if kind in result["rows"] and anchor:
            lines.append(f"{kind} / anchor wall: {result['rows'][kind]['wall_median_s'] / anchor:.1f}x")
    return "\n".join(lines)


def render(inventory: str) -> int:
    """Validate ``inventory`` and render every instance's unit and env file on a stand-in topology.

    A stand-in for ``rocmfleet plan``'s dearest part until it exists: 8 GPUs (device id 0x74a1,
    gfx 90402: an MI300X as the recorded fixtures show it) on two NUMA nodes of 48 CPUs, SPX.
    Prints the hosts, instances and bytes rendered; exit 1 when a host has problems or cannot be placed.
    """
    from rocmfleet.config.validate import validate_inventory
    from rocmfleet.domain.topology import Gpu, NumaNode, Topology
    from rocmfleet.plan.instance import instance_files, place_host

    topology = Topology(
        gpus=tuple(
            Gpu(i, f"0000:{0x05 + i * 0x10:02x}:00.0", i + 2, 128 + i, i // 4, "SPX", 0x74A1, 90402) for i in range(8)
        ),
        numa_nodes=(NumaNode(0, tuple(range(0, 48)), 1024), NumaNode(1, tuple(range(48, 96)), 1024)),
    )
    configs, problems = validate_inventory(inventory)
    if problems:
        print(f"{len(problems)} problem(s): {problems[0]}", file=sys.stderr)
        return 1
    count, size = 0, 0
    for name, config in configs.items():
        placed = place_host(config, topology, [44, 993], name)
        if isinstance(placed, str):
            print(f"{name}: {placed}", file=sys.stderr)
            return 1
        for instance in config.instances():
            files = instance_files(config, instance, placed)
            count, size = count + 1, size + len(files.env.content) + len(files.unit.content)
    print(f"{len(configs)} hosts, {count} instances, {size} bytes rendered")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n")[0].replace("``", "`"),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--hosts", type=int, default=2000, help="hosts of the generated site")
    p.add_argument("--services", type=int, default=20, help="services (profiles) of the generated site")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each command, alternating")
    p.add_argument("--label", default="run", help="names measure/results/plan-scale-LABEL.json")
    p.add_argument("--site", type=Path, help="where to write the site (default: a directory under the temp dir)")
    p.add_argument("--profile", action="store_true", help="also one validate under cProfile")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="print the tables of earlier runs")
    p.add_argument("--render", metavar="INVENTORY", help=argparse.SUPPRESS)  # the `render` row's own process
    args = p.parse_args()
    if args.render:
        return render(args.render)
    if args.compare:
        for path in args.compare:
            print(table(json.loads(Path(path).read_text())) + "\n")
        return 0
    site = args.site or Path(tempfile.gettempdir()) / f"rocmfleet-plan-scale-{os.getuid()}-{args.hosts}x{args.services}"
    print(table(measure(args.hosts, args.services, args.repeat, args.label, site, args.profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
