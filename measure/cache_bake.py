"""Start-to-ready and first-request latency of one vLLM instance, cold versus baked (issue 15).

Not a test: a measurement for the lab (or any fleet), through rocmfleet's own SSH layer. Each run
stops the instance's unit, optionally empties its per-instance compiler caches (``--cold``),
starts the unit, polls the readiness probe (``rocmfleet/scripts/vllm-probe.sh ready``) until it
passes, then times the first completion and five more (steady state)::

    # 1. the base image, every start cold (caches emptied before each start)
    python measure/cache_bake.py inventories/lab.py --host lab-1 --label cold --cold --out cold.json
    # 2. bake, deploy the baked image (rocmfleet cache bake ... --write ...; pyinfra deploy), then
    python measure/cache_bake.py inventories/lab.py --host lab-1 --label baked --out baked.json
    # 3. the table: medians and min..max, and the issue's bars (ready >= 25% faster; first request
    #    within 1.5x of a steady one)
    python measure/cache_bake.py --compare cold.json baked.json

Times are the host's clock (``date +%s.%N``) around ``systemctl start`` and the probe, so the
SSH round trip does not count; the poll interval (``--interval-s``, default 0.5 s) bounds the
resolution of time-to-ready.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rocmfleet.domain import cachedirs, readiness, vllm  # noqa: E402
from rocmfleet.fleet.connect import Session  # noqa: E402
from rocmfleet.fleet.inventory import load_fleet  # noqa: E402

STEADY = 5


def _now(session) -> float:
    return float(session.run("date +%s.%N").stdout.strip())


def _completion_s(session, port: int, model: str) -> float:
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 16, "temperature": 0})
    result = session.run(
        f"curl -fsS -m 600 -o /dev/null -w '%{{time_total}}' -H 'content-type: application/json' "
        f"-d '{body}' http://127.0.0.1:{port}/v1/completions",
        timeout_s=620,
    )
    if result.exit_status != 0:
        raise RuntimeError(f"completion failed: {result.stderr.strip()}")
    return float(result.stdout.strip())


def measure(inventory: str, host: str, runs: int, cold: bool, interval_s: float, timeout_s: float) -> list[dict]:
    """``runs`` starts of the host's first instance; per run: ready_s, first_s, steady_s."""
    target = load_fleet(inventory, [host])[0]
    config = target.config
    instance = config.instances()[0]
    names = vllm.files_of(instance)
    probe = readiness.probe_script(instance.port, config.profile.served_model_name, names.container)
    results = []
    with Session.open(target.ssh) as session:
        for run in range(runs):
            session.run(f"systemctl stop {names.unit}", timeout_s=300)
            if cold:
                if cachedirs.is_baked(config):
                    raise SystemExit("--cold with a baked image: deploy the base image for the cold runs")
                session.run(f"rm -rf {cachedirs.instance_root(config, instance)}", timeout_s=300)
            # Five quick restarts exceed the unit's StartLimitBurst (3 within its interval, on purpose:
            # templates/vllm/vllm.service.j2); a measurement resets the counter, it is not a crash loop.
            session.run(f"systemctl reset-failed {names.unit}", timeout_s=60)
            start = _now(session)
            started = session.run(f"systemctl start {names.unit}", timeout_s=300)
            if started.exit_status != 0:
                raise SystemExit(f"run {run}: systemctl start {names.unit} failed: {started.stderr.strip()}")
            while session.run(probe, timeout_s=120).exit_status != 0:
                if _now(session) - start > timeout_s:
                    raise SystemExit(f"run {run}: not ready after {timeout_s} s")
                time.sleep(interval_s)
            ready = _now(session) - start
            first = _completion_s(session, instance.port, config.profile.served_model_name)
            steady = [_completion_s(session, instance.port, config.profile.served_model_name) for _ in range(STEADY)]
            results.append({"ready_s": ready, "first_s": first, "steady_s": statistics.median(steady)})
            print(
                f"run {run}: ready {ready:.1f} s, first request {first:.3f} s, steady {results[-1]['steady_s']:.3f} s"
            )
    return results


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} ({min(values):.2f}..{max(values):.2f})"


def compare(cold_file: str, baked_file: str) -> int:
    """Print the table of two result files and whether the issue's bars are met; 0 when they are."""
    cold, baked = (json.loads(Path(f).read_text()) for f in (cold_file, baked_file))
    print(f"{'':<22}{cold['label']:>28}{baked['label']:>28}")
    for key, what in (
        ("ready_s", "start -> ready, s"),
        ("first_s", "first request, s"),
        ("steady_s", "steady request, s"),
    ):
        print(f"{what:<22}{_stats([r[key] for r in cold['runs']]):>28}{_stats([r[key] for r in baked['runs']]):>28}")
    cold_ready = statistics.median(r["ready_s"] for r in cold["runs"])
    baked_ready = statistics.median(r["ready_s"] for r in baked["runs"])
    gain = 1 - baked_ready / cold_ready
    ratio = statistics.median(r["first_s"] for r in baked["runs"]) / statistics.median(
        r["steady_s"] for r in baked["runs"]
    )
    print(f"ready faster by {gain:.0%} (bar: 25%); baked first request {ratio:.2f}x a steady one (bar: 1.5x)")
    return 0 if gain >= 0.25 and ratio <= 1.5 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("inventory", nargs="?")
    parser.add_argument("--host")
    parser.add_argument("--label", default="run")
    parser.add_argument("--cold", action="store_true", help="empty the instance's compiler caches before each start")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=0.5)
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--compare", nargs=2, metavar=("COLD_JSON", "BAKED_JSON"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.inventory or not args.host:
        parser.error("INVENTORY and --host are needed (or --compare)")
    runs = measure(args.inventory, args.host, args.runs, args.cold, args.interval_s, args.timeout_s)
    report = {"label": args.label, "host": args.host, "cold": args.cold, "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"{args.label}: ready {_stats([r['ready_s'] for r in runs])}, first {_stats([r['first_s'] for r in runs])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
