#!/bin/sh
# rocmfleet: warm a ready vLLM server's compilers up before it takes traffic.
#
#   vllm-warmup.sh PORT MODEL STEP...
#       for each STEP "ISL:OSL:CONCURRENCY:REQUESTS", send REQUESTS completions of ISL prompt
#       tokens asking for exactly OSL tokens (ignore_eos), CONCURRENCY at a time, to
#       http://127.0.0.1:PORT/v1/completions for MODEL (the served name, JSON-quoted), and wait for all of them.
#       A step of CONCURRENCY c with c requests makes the engine run a batch of c: the batch
#       sizes vLLM captures CUDA/HIP graphs for, and the smoke benchmark's shapes
#       (rocmfleet/domain/warmup.py plans them). The prompt is token ids (vLLM's completions API accepts
#       a list of ints), so its length is exact whatever the tokenizer.
#       Prints one line per step (its wall time); exits 1 if any request failed.
set -u

port=$1 model=$2
shift 2
url="http://127.0.0.1:$port/v1/completions"
failed=0
for step in "$@"; do
    isl=${step%%:*} rest=${step#*:}
    osl=${rest%%:*} rest=${rest#*:}
    conc=${rest%%:*} n=${rest#*:}
    ids=$(printf '100,%.0s' $(seq "$isl"))
    body=$(printf '{"model":%s,"prompt":[%s],"max_tokens":%s,"min_tokens":%s,"ignore_eos":true,"temperature":0}' \
        "$model" "${ids%,}" "$osl" "$osl")
    start=$(date +%s)
    bad=$(seq "$n" | xargs -P "$conc" -I{} curl -fsS -m 600 -o /dev/null -w '%{http_code}\n' \
        -H 'content-type: application/json' -d "$body" "$url" 2>&1 | grep -cv '^200$')
    echo "warm-up $isl:$osl x$n at $conc: $(($(date +%s) - start)) s, $bad failed"
    [ "$bad" -eq 0 ] || failed=1
done
exit "$failed"
