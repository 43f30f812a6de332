#!/bin/bash
# The issue-15 lab measurement, end to end, on one lab host (default lab-3), from the repository root:
#   base image cold (caches emptied before each start) x RUNS, bake, deploy the baked image,
#   baked x RUNS, put the host back on the base image, print the table.
# Run it on a converged lab that nothing else uses meanwhile (the timings are the lab's 2 cores):
#   ./dev lab && measure/cache_bake_lab.sh lab-3 5
# Results: measure/results/cache_bake_{cold,baked}.json, the bake's output and the table beside them.
set -euo pipefail

host=${1:-lab-3}
runs=${2:-5}
out=measure/results
py=.venv/bin/python
mkdir -p "$out"
export PYINFRA_PROGRESS=off

deploy() { .venv/bin/pyinfra -y --limit "$host" "$@" inventories/lab.py deploy.py >"$out/cache_bake_deploy.log" 2>&1; }

echo "== $(date +%T) cold: the base image, caches emptied before each start"
$py measure/cache_bake.py inventories/lab.py --host "$host" --label cold --cold --runs "$runs" --out "$out/cache_bake_cold.json"

echo "== $(date +%T) bake on $host"
.venv/bin/rocmfleet cache bake inventories/lab.py --host "$host" -y | tee "$out/cache_bake_bake.txt"
ref=$(grep -E -- '-rfcache-[0-9a-f]{12}@sha256:[0-9a-f]{64}$' "$out/cache_bake_bake.txt" | tail -n 1)
tag=${ref%@*}
tag=${tag##*:}
digest=${ref#*@}

restore() {
    echo "== $(date +%T) $host back on the base image"
    deploy || echo "the deploy back to the base image failed: see $out/cache_bake_deploy.log" >&2
}
trap restore EXIT

echo "== $(date +%T) deploy $tag on $host"
deploy --data "vllm_image_tag=$tag" --data "vllm_image_digest=$digest"

echo "== $(date +%T) baked: the baked image, nothing mounted over its caches"
$py measure/cache_bake.py inventories/lab.py --host "$host" --label baked --runs "$runs" --out "$out/cache_bake_baked.json"

$py measure/cache_bake.py --compare "$out/cache_bake_cold.json" "$out/cache_bake_baked.json" | tee "$out/cache_bake_table.txt" || true
