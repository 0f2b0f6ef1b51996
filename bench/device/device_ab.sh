#!/usr/bin/env bash
# device_ab.sh - A/B rows on the files device_gpu.sh wrote (/tmp/q3.gguf, /tmp/olmoe.gguf),
# alternating, one process each: --cpu-moe decode of the previous landing (when device_gpu.sh
# built .devdata/prev) and of this build, plain and with --cpu-warm / --cpu-misses (qwen3 twice,
# olmoe once), then where a qwen3 --cpu-moe decode token's time goes (the [PROF] footer's
# hand-off figures: the host's wait for each CPU layer and its CPU step). Run after device_gpu.sh
# in the same call (about 250 s).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
[ -f /tmp/q3.done ] || { echo "no /tmp/q3.gguf"; exit 1; }
dev_log ab
# the previous landing may still be compiling (device_gpu.sh starts it): a build beside the CPU
# expert step takes its cores and DRAM (2026-12-06: qwen3 rows 54-64 tok/s during it, 80-86 after)
for i in $(seq 120); do [ ! -f .devdata/prev/Makefile ] || [ -f /tmp/prev.done ] || \
    grep -q "Error [0-9]" /tmp/strata-results/prev_build.log 2>/dev/null && break; sleep 2; done
# configurations (binary:flags): the previous landing's build (.devdata/prev/strata, when
# device_gpu.sh built it) and this build, plain, with --cpu-warm, with --cpu-misses and both
cfgs="new: new:--cpu-warm new:--cpu-misses new:--cpu-misses,--cpu-warm new:--cpu-misses,--pcie-frac,0.375"
[ -x .devdata/prev/strata ] && cfgs="prev: $cfgs prev:--cpu-misses"
bin() { [ "$1" = prev ] && echo .devdata/prev/strata || echo ./strata; }
for rep in 1 2; do
    for c in $cfgs; do
        b=${c%%:*} f=${c#*:}
        echo "$b ${f:-plain} rep=$rep qwen3 --cpu-moe tg64 $(timeout 60 $(bin $b) bench -m /tmp/q3.gguf -p 0 -n 64 \
            -r 1 --gpu --cpu-moe -t 16 ${f//,/ } 2>/dev/null | dev_rates)"
    done
done
for c in prev: new: prev:--cpu-misses new:--cpu-misses; do
    b=${c%%:*} f=${c#*:}
    echo "$b ${f:-plain} olmoe --cpu-moe tg64 $(timeout 60 $(bin $b) bench -m /tmp/olmoe.gguf -p 0 -n 64 -r 2 \
        --gpu --cpu-moe -t 16 ${f//,/ } 2>/dev/null | dev_rates)"
done
# where a qwen3 --cpu-moe decode token's time goes (no --profile, whose waits would move it): the
# host's wait for each CPU layer's hand-down and its time in the CPU step, from the [PROF] footer
for f in "" --cpu-warm --cpu-misses; do
    echo "hand-offs ${f:-plain}: $(timeout 60 ./strata -m /tmp/q3.gguf -p "Once upon a time" -n 64 --temp 0 \
        --ignore-eos --no-echo --gpu --cpu-moe -t 16 $f 2>&1 >/dev/null | grep -oE "generated [^|]*|[0-9]+ CPU hand-offs[^|]*|CPU warm [^|]*" | tr '\n' ' ')"
done
