"""What a no-op converge, a dry run, ``rocmfleet check`` and ``rocmfleet validate`` cost at fleet size (issue 16).

Not a test: a measurement on the converged lab. Inventories of N names over the lab's hosts
(``measure/lab_names.py``; pyinfra treats each name as its own host) are timed for each N::

    # as root, after `./dev lab` (the lab up and converged); nothing else using the lab:
    .venv/bin/python measure/converge.py --names 1,10,50,100 --commands converge,dry,validate \
        --repeat 3 --label s5-after
    .venv/bin/python measure/converge.py --names 1,10,100 --commands check --repeat 3 --label s5-check-after
    .venv/bin/python measure/converge.py --compare measure/results/converge-before.json \
        measure/results/converge-s5-after.json

Per N and command: the median wall time and its spread (min..max) over ``--repeat`` runs, and the
control side's CPU (user + system of the command and its children, from ``getrusage``) per host.
Commands per host come from one extra converge with pyinfra's ``--debug`` (its
``Running command on HOST`` lines), attributed to the fact being gathered or the operation being
run ("by source": what to cut first), and for ``check`` from one extra run with
``ROCMFLEET_COMMAND_LOG`` (``rocmfleet.fleet.connect`` logs each command; :func:`count_check_commands`).
``rocmfleet validate`` runs on ``--validate-names`` generated hosts (1,000 by default; no
connection). Before the runs, sshd on each lab host is given ``MaxStartups``/``MaxSessions``
for this many connections (as ``tests/lab/rootfs.py`` gives new lab hosts).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

INVENTORY = "measure/lab_names.py"
RESULTS = ROOT / "measure" / "results"
#: The issue's targets (issue 16): per host commands and CPU, and wall times at 100 / 1,000 names.
TARGETS = {
    "commands_per_host": 20,
    "cpu_s_per_host": 0.15,
    "converge_100_s": 25,
    "check_100_s": 60,
    "validate_1000_s": 10,
}
SSHD_BENCH = "MaxStartups 400:30:800\nMaxSessions 400\n"


def _python() -> str:
    venv = ROOT / ".venv" / "bin"
    return str(venv / "python") if (venv / "python").exists() else sys.executable


#: Extra ``rocmfleet check`` options (``--check-args``), e.g. ``--parallel 20``.
CHECK_ARGS: list[str] = []


def _commands(kind: str, names: int, out: Path) -> list[str]:
    py = _python()
    pyinfra = [py, "-m", "pyinfra"]
    return {
        "converge": [*pyinfra, "-y", INVENTORY, "deploy.py"],
        "dry": [*pyinfra, "-y", "--dry", INVENTORY, "deploy.py"],
        "check": [py, "-m", "rocmfleet.entry", "check", INVENTORY, "--json", str(out / f"check-{names}.json")]
        + CHECK_ARGS,
        "validate": [py, "-m", "rocmfleet.entry", "validate", INVENTORY],
    }[kind]


def _run(argv: list[str], names: int, log: Path | None = None, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, ROCMFLEET_BENCH_NAMES=str(names), PYINFRA_PROGRESS="off", **(env_extra or {}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if log:
        log.write_text(proc.stdout + proc.stderr)
    return {"rc": proc.returncode, "wall_s": wall, "cpu_s": cpu, "output": proc.stdout + proc.stderr}


_RUNNING = re.compile(r"Running command on (\S+): ")
_FACT = re.compile(r"Getting fact: (\S+)")
_OP = re.compile(r"Starting operation \[?'?(.*?)'?\]? on (\S+)$")
_CHANGES = re.compile(r"Changed\s*\|.*")


def count_commands(debug_output: str) -> dict:
    """Commands per host from ``pyinfra --debug`` output, and by source (the fact or operation).

    A command is attributed to the last ``Starting operation`` seen for its host, or, before
    any operation of that host ran, to the last ``Getting fact`` line (pyinfra prepares hosts
    one at a time, so that line belongs to the host whose command follows).
    """
    per_host: collections.Counter = collections.Counter()
    by_source: collections.Counter = collections.Counter()
    last_fact = "?"
    last_op: dict[str, str] = {}
    for line in debug_output.splitlines():
        if m := _FACT.search(line):
            last_fact = "fact " + m.group(1)
        elif m := _OP.search(line):
            last_op[m.group(2)] = "op " + m.group(1)
        elif m := _RUNNING.search(line):
            host = m.group(1)
            per_host[host] += 1
            by_source[last_op.get(host, last_fact) if host in last_op else last_fact] += 1
    return {"per_host": dict(per_host), "by_source": dict(by_source.most_common())}


def count_check_commands(kind: str, names: int, out: Path) -> dict:
    """Commands per host of one more ``rocmfleet check`` run, from the command log that
    ``rocmfleet.fleet.connect`` writes with ``ROCMFLEET_COMMAND_LOG`` (one JSON line per command, with
    its SSH session). The log names addresses, not inventory names (N names share the lab's
    3), so per host is the mean: all commands over ``names`` (each name's reachability probe and
    checks); ``commands_per_session_max`` is the largest one session ran (one host's checks)."""
    log = out / f"check-{names}-commands.jsonl"
    log.unlink(missing_ok=True)
    _run(_commands(kind, names, out), names, out / f"check-{names}-counted.log", {"ROCMFLEET_COMMAND_LOG": str(log)})
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    sessions = collections.Counter(line["session"] for line in lines)
    return {
        "commands_per_host_mean": round(len(lines) / names, 1),
        "commands_per_session_max": max(sessions.values(), default=0),
    }


def raise_sshd_limits() -> None:
    """Give each lab host's sshd room for this many connections (lab only)."""
    from tests.lab.config import LabState

    state = LabState.load()
    script = (
        f"printf '%s' '{SSHD_BENCH}' > /etc/ssh/sshd_config.d/20-bench.conf && "
        "(systemctl reload ssh || systemctl reload sshd)"
    )
    for address in state.hosts.values():
        subprocess.run(
            [
                "ssh",
                "-i",
                state.ssh_key,
                "-o",
                f"UserKnownHostsFile={state.known_hosts}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                f"root@{address}",
                script,
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )


def _summary(runs: list[dict], names: int) -> dict:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] for r in runs]
    return {
        "names": names,
        "runs": len(runs),
        "rc": [r["rc"] for r in runs],
        "wall_median_s": round(statistics.median(walls), 2),
        "wall_min_s": round(min(walls), 2),
        "wall_max_s": round(max(walls), 2),
        "cpu_per_host_s": round(statistics.median(cpus) / names, 3),
    }


def measure(
    sizes: list[int], kinds: list[str], repeat: int, validate_names: int, label: str, debug_sizes: list[int], warm: bool
) -> dict:
    out = RESULTS / f"converge-{label}"
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"label": label, "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "targets": TARGETS, "rows": []}
    if CHECK_ARGS and "check" in kinds:
        result["check_args"] = CHECK_ARGS
    if any(k != "validate" for k in kinds):
        raise_sshd_limits()
    if warm:  # converge the lab with this tree's deploy.py first, so that every timed converge is a no-op
        warmup = _run([_python(), "-m", "pyinfra", "-y", "inventories/lab.py", "deploy.py"], 1, out / "warm.log")
        print(f"  warm-up converge: {warmup['wall_s']:.1f} s rc={warmup['rc']}", file=sys.stderr, flush=True)
    for kind in kinds:
        for names in [validate_names] if kind == "validate" else sizes:
            runs = []
            for i in range(repeat):
                runs.append(_run(_commands(kind, names, out), names, out / f"{kind}-{names}-{i}.log"))
                print(f"  {kind} {names}: {runs[-1]['wall_s']:.1f} s rc={runs[-1]['rc']}", file=sys.stderr, flush=True)
            row = {"command": kind, **_summary(runs, names)}
            if kind == "converge" and names in debug_sizes:
                debug = _run([*_commands(kind, names, out), "--debug"], names, out / f"converge-{names}-debug.log")
                counts = count_commands(debug["output"])
                per_host = list(counts["per_host"].values())
                row["commands_per_host_max"] = max(per_host) if per_host else 0
                row["commands_per_host_median"] = statistics.median(per_host) if per_host else 0
                row["commands_by_source"] = counts["by_source"] if names == min(debug_sizes) else {}
                changed = [ln for ln in runs[-1]["output"].splitlines() if "Changed" in ln or "changed" in ln]
                row["changes_line"] = changed[-3:]
            if kind == "check" and names in debug_sizes:
                row.update(count_check_commands(kind, names, out))
            result["rows"].append(row)
    path = RESULTS / f"converge-{label}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return result


def table(result: dict) -> str:
    lines = [
        f"{result['label']} ({result['when']})",
        f"{'command':9} {'names':>5} {'median s':>9} {'min..max s':>13} {'CPU s/host':>10} {'cmds/host':>9} rc",
    ]
    for r in result["rows"]:
        cmds = str(r.get("commands_per_host_max", r.get("commands_per_host_mean", "")))
        lines.append(
            f"{r['command']:9} {r['names']:>5} {r['wall_median_s']:>9.2f} "
            f"{r['wall_min_s']:>6.2f}..{r['wall_max_s']:<6.2f} {r['cpu_per_host_s']:>10.3f} {cmds:>9} {r['rc']}"
        )
    for r in result["rows"]:
        if r.get("commands_by_source"):
            lines.append(f"commands by source, {r['names']} name(s) (all hosts together):")
            lines.extend(f"  {n:4} {src}" for src, n in r["commands_by_source"].items())
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0].replace("``", "`"), formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--names", default="1,10,50,100", help="inventory sizes (comma-separated)")
    p.add_argument("--commands", default="converge,dry,check,validate", help="which to time (comma-separated)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each command and size (median and spread)")
    p.add_argument("--validate-names", type=int, default=1000, help="generated hosts for validate")
    p.add_argument("--label", default="run", help="names measure/results/converge-LABEL.json and its log folder")
    p.add_argument(
        "--debug-names",
        default="1,10",
        help="sizes whose commands are counted (one more converge with --debug, or check with the command log)",
    )
    p.add_argument("--no-warm", action="store_true", help="skip the converge of inventories/lab.py before timing")
    p.add_argument("--check-args", default="", help="extra `rocmfleet check` options, e.g. '--parallel 20'")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="print the tables of earlier runs")
    args = p.parse_args()
    if args.compare:
        for path in args.compare:
            print(table(json.loads(Path(path).read_text())) + "\n")
        return 0
    CHECK_ARGS[:] = args.check_args.split()
    result = measure(
        [int(n) for n in args.names.split(",")],
        args.commands.split(","),
        args.repeat,
        args.validate_names,
        args.label,
        [int(n) for n in args.debug_names.split(",")],
        not args.no_warm,
    )
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
