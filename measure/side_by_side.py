"""The no-op converge next to a plain 4-operation pyinfra deploy, on the same names (issue 24).

Not a test: a measurement on the converged lab. Both deploys run on the same N-name inventory
(``measure/lab_names.py``), alternately (plain, converge, plain, converge...) after one warm-up
of each, so that load from other work on the machine falls on both alike::

    # as root, the lab up and converged; nothing else converging it:
    .venv/bin/python measure/side_by_side.py --names 100 --repeat 3 --label after

Prints the median wall time and control CPU per host (user + system of pyinfra and its children,
from ``getrusage``) of each, their spread (min..max: the noise), and the ratios converge/plain,
against issue 43's targets (CPU at most 1.0x, wall at most 2.0x); writes
``measure/results/side-by-side-LABEL.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure.converge import INVENTORY, RESULTS, _python, _run  # noqa: E402

PLAIN = "measure/plain_deploy.py"
TARGETS = {"cpu_ratio_max": 1.0, "wall_ratio_max": 2.0}  # issue 43 (issue 24 asked for 1.5 and 2.5)


def _argv(kind: str) -> list[str]:
    deploy = {"plain": PLAIN, "converge": "deploy.py"}[kind]
    return [_python(), "-m", "pyinfra", "-y", INVENTORY, deploy]


def _stats(runs: list[dict], names: int) -> dict:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] / names for r in runs]
    return {
        "rc": [r["rc"] for r in runs],
        "wall_s": [round(w, 2) for w in walls],
        "cpu_per_host_s": [round(c, 4) for c in cpus],
        "wall_median_s": round(statistics.median(walls), 2),
        "cpu_per_host_median_s": round(statistics.median(cpus), 4),
    }


def _changed(output: str) -> bool:
    """Whether pyinfra's results table counts any change (its ``Grand total`` row)."""
    for line in output.splitlines():
        if line.strip().startswith("Grand total"):
            cols = line.split()
            # Grand total  N  Success  Error  NoChange: "-" or a number in the Success column
            return len(cols) > 3 and cols[3] not in ("-", "0")
    return True


def measure(names: int, repeat: int, label: str) -> dict:
    out = RESULTS / f"side-by-side-{label}"
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict]] = {"plain": [], "converge": []}
    for kind in runs:  # warm-up: page cache, .pyc files, sshd; not counted
        r = _run(_argv(kind), names, out / f"{kind}-warm.log")
        print(f"  warm-up {kind}: {r['wall_s']:.1f} s rc={r['rc']}", file=sys.stderr, flush=True)
    for i in range(repeat):
        for kind in runs:
            r = _run(_argv(kind), names, out / f"{kind}-{i}.log")
            r["changed"] = _changed(r["output"])
            runs[kind].append(r)
            print(
                f"  {kind} {i}: {r['wall_s']:.1f} s, {r['cpu_s']:.1f} s CPU, rc={r['rc']}, changed={r['changed']}",
                file=sys.stderr,
                flush=True,
            )
    rows = {kind: {**_stats(rs, names), "changed": [r["changed"] for r in rs]} for kind, rs in runs.items()}
    plain, conv = rows["plain"], rows["converge"]
    result = {
        "label": label,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "names": names,
        "repeat": repeat,
        "commands": {kind: " ".join(_argv(kind)[1:]) for kind in runs},
        "targets": TARGETS,
        "rows": rows,
        "cpu_ratio": round(conv["cpu_per_host_median_s"] / plain["cpu_per_host_median_s"], 2),
        "wall_ratio": round(conv["wall_median_s"] / plain["wall_median_s"], 2),
    }
    path = RESULTS / f"side-by-side-{label}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return result


def table(result: dict) -> str:
    lines = [
        f"{result['label']} ({result['when']}), {result['names']} names, {result['repeat']} alternating runs each",
        f"{'deploy':9} {'wall median s':>13} {'wall min..max':>14} {'CPU/host ms':>11} {'CPU min..max':>14} changed rc",
    ]
    for kind, r in result["rows"].items():
        cpu = [c * 1000 for c in r["cpu_per_host_s"]]
        lines.append(
            f"{kind:9} {r['wall_median_s']:>13.2f} {min(r['wall_s']):>6.2f}..{max(r['wall_s']):<6.2f} "
            f"{r['cpu_per_host_median_s'] * 1000:>11.1f} {min(cpu):>6.1f}..{max(cpu):<6.1f} "
            f"{any(r['changed'])!s:7} {r['rc']}"
        )
    t = result["targets"]
    lines.append(
        f"ratio converge/plain: CPU per host {result['cpu_ratio']:.2f}x (target <= {t['cpu_ratio_max']}x), "
        f"wall {result['wall_ratio']:.2f}x (target <= {t['wall_ratio_max']}x)"
    )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0].replace("``", "`"), formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--names", type=int, default=100, help="inventory size (measure/lab_names.py)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each deploy, alternating")
    p.add_argument("--label", default="run", help="names measure/results/side-by-side-LABEL.json")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="print the tables of earlier runs")
    args = p.parse_args()
    if args.compare:
        for path in args.compare:
            print(table(json.loads(Path(path).read_text())) + "\n")
        return 0
    print(table(measure(args.names, args.repeat, args.label)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
