#!/usr/bin/env bash
# device_attn_p.sh - the prompt attention with the probabilities only split (attn_tc 3,
# --attn-tc-split-p) against the default (queries and probabilities split), on the
# qwen3 file device_gpu.sh wrote (/tmp/q3.gguf): pp512 at depth 16K (the tensor-core prefill
# kernel serves batches from 1,024 positions), alternating, one process each; when build-ab/strata exists (built with NVCC_EXTRA=-DST_ATTN_TC_MINB_P=3: the
# single-query kernels held to 170 registers for 3 blocks an SM) its attn_tc 3 rows too. Run
# after device_gpu.sh in the same call (about 100 s). Log: $OUT/device_attn_p.log.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
[ -f /tmp/q3.done ] || { echo "no /tmp/q3.gguf"; exit 1; }
dev_log attn_p
for i in $(seq 60); do [ -f /tmp/ab.done ] && break; sleep 2; done
cfgs="./strata:split ./strata:split-p"
[ -x build-ab/strata ] && cfgs="$cfgs build-ab/strata:split-p"
for rep in 1 2; do
    for d in 16384; do
        for c in $cfgs; do
            b=${c%%:*} mode=${c#*:}
            echo "$b attn_tc=$mode d=$d rep=$rep pp512 $(STRATA_ATTN_TC=$mode timeout 100 $b bench -m /tmp/q3.gguf \
                -p 512 -n 0 -d $d -r 1 --gpu 2>/dev/null | dev_rates)"
        done
    done
done
