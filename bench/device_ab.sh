#!/usr/bin/env bash
# device_ab.sh - same-build A/B rows on the files device_gpu.sh wrote (/tmp/q3.gguf,
# /tmp/olmoe.gguf), alternating, one process each: --cpu-moe decode with and without --cpu-warm
# (qwen3 twice, olmoe once), then where a qwen3 --cpu-moe decode step's time goes (--profile,
# each phase waits for the GPU) with the warm's [PROF] figures. Run after device_gpu.sh in the
# same call (about 90 s).
set -u
cd "$(dirname "$0")/.."
[ -f /tmp/q3.done ] || { echo "no /tmp/q3.gguf"; exit 1; }
exec > >(tee "${OUT:-/tmp}/device_ab.log") 2>&1
row() { grep -oE "(pp|tg)[0-9]+[^|]*\| [0-9.]+" | grep -oE "[0-9.]+$" | tr '\n' ' '; }
for rep in 1 2; do
    for w in 1 0; do
        echo "cpu_warm=$w rep=$rep qwen3 --cpu-moe tg64 $(STRATA_CPU_WARM=$w timeout 60 ./strata bench \
            -m /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe -t 16 2>/dev/null | row)"
    done
done
for w in 1 0; do
    echo "cpu_warm=$w olmoe --cpu-moe tg64 $(STRATA_CPU_WARM=$w timeout 60 ./strata bench -m /tmp/olmoe.gguf \
        -p 0 -n 64 -r 2 --gpu --cpu-moe -t 16 2>/dev/null | row)"
done
timeout 60 ./strata -m /tmp/q3.gguf -p "Once upon a time" -n 24 --temp 0 --ignore-eos --no-echo --gpu --cpu-moe \
    --cpu-warm -t 16 --profile 2>&1 >/dev/null | grep -E "profile|PROF" | cut -c1-400
