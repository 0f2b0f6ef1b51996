#!/usr/bin/env bash
# device_attn_q.sh - same-build A/B rows on the qwen3 file device_gpu.sh wrote (/tmp/q3.gguf),
# alternating, one process each: the prompt attention with the queries only split (attn_tc 3)
# against the default (queries and probabilities split) and single f16, pp512 at depth 16K and
# 0; --cpu-moe decode with and without --no-cpu-warm; a --cpu-moe --profile row. Run after
# device_gpu.sh in the same call.
set -u
cd "$(dirname "$0")/.."
[ -f /tmp/q3.done ] || { echo "no /tmp/q3.gguf"; exit 1; }
row() { grep -oE "(pp|tg)[0-9]+[^|]*\| [0-9.]+" | grep -oE "[0-9.]+$" | tr '\n' ' '; }
for rep in 1 2; do
    for mode in split split-q 1; do
        for d in 16384 0; do
            echo "attn_tc=$mode d=$d rep=$rep pp512 $(STRATA_ATTN_TC=$mode timeout 100 ./strata bench -m /tmp/q3.gguf \
                -p 512 -n 0 -d $d -r 1 --gpu 2>/dev/null | row)"
        done
    done
done
for rep in 1 2 3; do
    for w in 1 0; do
        echo "cpu_warm=$w rep=$rep --cpu-moe tg64 $(STRATA_CPU_WARM=$w timeout 100 ./strata bench -m /tmp/q3.gguf \
            -p 0 -n 64 -r 1 --gpu --cpu-moe -t 16 2>/dev/null | row)"
    done
done
for w in 1 0; do
    echo "cpu_warm=$w olmoe --cpu-moe tg64 $(STRATA_CPU_WARM=$w timeout 100 ./strata bench -m /tmp/olmoe.gguf \
        -p 0 -n 64 -r 2 --gpu --cpu-moe -t 16 2>/dev/null | row)"
done
# where a qwen3 --cpu-moe decode step's time goes (each phase waits for the GPU), warm on
timeout 100 ./strata -m /tmp/q3.gguf -p "Once upon a time" -n 24 --temp 0 --ignore-eos --no-echo --gpu --cpu-moe \
    -t 16 --profile 2>&1 >/dev/null | grep -E "profile|PROF" | cut -c1-400
