#!/usr/bin/env bash
# device_older.sh - issue 34's older-GPU work on one GPU (docs/OLDER_GPUS.md): the SM60 Q8_0 decode
# GEMV (--q8-sm60 / STRATA_Q8_SM60=1) checked and timed (tools/q8_sm60_check.cu) in the normal
# build (dp4a) and in one with -DSTRATA_NO_DP4A=1 (its form for cards without dp4a, here on an
# H100/H200), test_cuda_mmv in both, test_cuda_session (its q8_sm60 KL check), then on the default
# model a decode bench with and without --q8-sm60 and the KL of --q8-sm60 against the exact kernels
# and against the CPU (tools/kl.py over LICENSE, batches of 8 so that every matrix takes the decode
# GEMV), and the same bench on the synthetic qwen3-30b-a3b file when it is ready in time. Logs
# and dumps in $OUT/older.
# The IQ3 codebooks staged in shared memory against the read-only cache (c/cuda/dev/moe_check.cu's
# iq3 cases: same bits, time a grouped call) too.
#   run(command="bash bench/device/device_older.sh", timeout_s=600)
# or with a carried build (PREBUILT=build-pre, bench/device/prebuild.sh with
#   VARIANTS="nodp4a c/cuda/q8_sm60.o -DSTRATA_NO_DP4A=1"; the check programs are linked here).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
O="${OUT:-/tmp}/older"
J=/tmp/older_json
mkdir -p "$O" "$J"
dev_log older "$O"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,compute_cap --format=csv,noheader
dev_wheels
[ "${OLDER_Q3:-1}" = 1 ] && dev_synth_files /tmp # OLDER_Q3=0: no qwen3 file (beside another script's)
DEV_LOG="$O/build.log" dev_build strata build/tests/test_cuda_mmv build/tests/test_cuda_session build/q8_sm60_check
dev_variant nodp4a "-DSTRATA_NO_DP4A=1" "c/cuda/q8_sm60.o" tests/test_cuda_mmv q8_sm60_check &&
    echo "nodp4a build ok at $(el)s"

# ---- the kernel against its CPU reference, then timed (both builds) ----
q8c() { # the check program of build $1 (base, nodp4a): built by make, else dev_check's (prebuilt trees)
    local d; d=$(dev_ab_dir "$1")
    [ -x "$d/q8_sm60_check" ] && echo "$d/q8_sm60_check" || dev_check q8_sm60_check "$1"
}
timeout 200 "$(q8c base)" 50 > "$O/q8_sm60_check.log" 2>&1
echo "q8_sm60_check rc=$? at $(el)s: $(tail -1 "$O/q8_sm60_check.log")"
grep -E "FAIL|error|output" "$O/q8_sm60_check.log" | head -20
Q8N=; [ -d build-nodp4a ] && Q8N=$(q8c nodp4a)
if [ -n "$Q8N" ] && [ -x "$Q8N" ]; then
    timeout 200 "$Q8N" 20 > "$O/q8_sm60_check_nodp4a.log" 2>&1
    echo "q8_sm60_check (STRATA_NO_DP4A) rc=$? at $(el)s: $(tail -1 "$O/q8_sm60_check_nodp4a.log")"
    grep -E "FAIL|error|output" "$O/q8_sm60_check_nodp4a.log" | head -20
fi

# ---- the IQ3 codebooks staged in shared memory (--iq-stage-tables): same bits, time a call ----
MC=$(dev_check moe_check base)
if [ -n "$MC" ]; then
    timeout 120 "$MC" iq3 > "$O/moe_check_iq3.log" 2>&1
    echo "moe_check iq3 rc=$? at $(el)s"
    grep -E "IQ3 tables|us/call" "$O/moe_check_iq3.log" | grep -v decode | head -12
fi

# ---- the GPU tests ----
DEV_TEST_SHOW="FAIL|q8_sm60" DEV_TEST_SHOW_N=40 dev_tests build test_cuda_mmv:300
if [ -x build-nodp4a/tests/test_cuda_mmv ]; then
    (O="$O/nodp4a"; mkdir -p "$O"; DEV_TEST_SHOW="FAIL|q8_sm60 .*ncols=8|swiglu" DEV_TEST_SHOW_N=20 \
        dev_tests build-nodp4a test_cuda_mmv:300)
fi
DEV_TEST_SHOW="FAIL|q8_sm60|default model, " DEV_TEST_SHOW_N=10 dev_tests build test_cuda_session:300

# ---- the default model: decode speed and KL ----
M=models/strata-tiny-moe-q8_0.gguf
for p in 1 2; do
    for v in exact sm60; do
        x=""; [ $v = sm60 ] && x="--q8-sm60"
        echo "tiny $v pass $p: $(timeout 120 ./strata bench -m $M -p 0 -n 128 -r 3 --gpu $x \
            --json "$J/bench_tiny_${v}_$p.json" 2>/dev/null | dev_rates)"
    done
done
head -c 3000 LICENSE > /tmp/older_text.txt
./strata -m $M -f /tmp/older_text.txt -n 0 -b 8 -c 1024 --cpu --logpos "$O/lp_cpu.jsonl" 2>/dev/null
./strata -m $M -f /tmp/older_text.txt -n 0 -b 8 -c 1024 --gpu --logpos "$O/lp_gpu.jsonl" 2>/dev/null
./strata -m $M -f /tmp/older_text.txt -n 0 -b 8 -c 1024 --gpu --q8-sm60 --logpos "$O/lp_sm60.jsonl" \
    2> "$O/lp_sm60.err"
grep -E "Q8_SM60" "$O/lp_sm60.err"
echo "KL(gpu exact || gpu q8_sm60):"
python3 tools/kl.py "$O/lp_gpu.jsonl" "$O/lp_sm60.jsonl" 2>&1 | tee "$O/kl_gpu_sm60.txt" | head -12
echo "KL(cpu || gpu q8_sm60), then KL(cpu || gpu exact) for scale:"
python3 tools/kl.py "$O/lp_cpu.jsonl" "$O/lp_sm60.jsonl" 2>&1 | tee "$O/kl_cpu_sm60.txt" | grep -E "all|first"
python3 tools/kl.py "$O/lp_cpu.jsonl" "$O/lp_gpu.jsonl" 2>&1 | tee "$O/kl_cpu_gpu.txt" | grep -E "all|first"
echo "tiny done at $(el)s"

# ---- the synthetic qwen3-30b-a3b file (the real shapes), if written in time ----
[ "${OLDER_Q3:-1}" = 1 ] && dev_wait_files
if [ "${OLDER_Q3:-1}" = 1 ] && [ -f /tmp/q3.done ] && [ "$(el)" -lt 480 ]; then
    for v in exact sm60; do
        x=""; [ $v = sm60 ] && x="--q8-sm60"
        echo "q3 $v: $(timeout 90 ./strata bench -m /tmp/q3.gguf -p 0 -n 64 -r 2 --gpu $x \
            --json "$J/bench_q3_$v.json" 2>/dev/null | dev_rates)"
    done
fi
tar -C "$J" -cf "$O/bench.tar" . 2>/dev/null
echo "done at $(el)s"
