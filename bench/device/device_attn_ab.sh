#!/usr/bin/env bash
# device_attn_ab.sh - an A/B of the attention kernels' build-time geometry in one device call:
# builds this tree, then one variant per AB1 / AB2 / AB3 (nvcc flags, e.g. "-DST_ATTN_TC_BM=128")
# from a copy of its objects with only the attention's recompiled (c/cuda/attn.cu and attn_tc.cu:
# the only sources that read those macros), runs each build's test_cuda_attn (the kernels against
# the CPU, determinism) and c/cuda/dev/attn_check (timed plans, 512 x 16,896 among them), then
# `strata bench` rows alternating builds, REPS passes (default 2): qwen3-30b-a3b pp512 and tg128
# at depth 16,384, olmoe-1b-7b pp512 at depth 16,384 and qwen3 pp512 at depth 0.
#   run(command="AB1='-DST_ATTN_TC_BM=128' bash bench/device/device_attn_ab.sh", carry=[".whl", ".devdata"])
# env: AB1..AB3, REPS, TEST=0 (skip test_cuda_attn), CHECK=0 (skip attn_check), ROWS=regex (bench
# rows by name: q3_pp_d16k q3_tg_d16k olmoe_pp_d16k q3_pp_d0). Log: $OUT/device_attn_ab.log; the
# check outputs in $OUT/attn_ab/, the bench JSON in $OUT/attn_ab/bench.tar (a call brings back a
# few files only). bench/results/h200-2026-12-06/run1-attn-bm128 has what it measured.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start attn_ab
dev_build strata build/tests/test_cuda_attn
dev_variants "c/cuda/attn.o c/cuda/attn_tc.o" tests/test_cuda_attn
for b in $builds; do
    echo "== $b: $(dev_ab_flags $b)"
    if [ "${TEST:-1}" = 1 ]; then
        timeout 150 $(dev_ab_dir $b)/tests/test_cuda_attn > "$O/test_cuda_attn_$b.log" 2>&1
        echo "test_cuda_attn rc=$?: $(grep -E "passed, " "$O/test_cuda_attn_$b.log" | tail -1)"
        grep -E "FAIL" "$O/test_cuda_attn_$b.log" | head -5
    fi
    if [ "${CHECK:-1}" = 1 ] && nvcc $DEV_NVCC $(dev_ab_flags $b) c/cuda/dev/attn_check.cu $(dev_ab_dir $b)/libstrata.a -lpthread -ldl -lrt \
        -o /tmp/attn_check_$b 2> "$J/attn_check_build_$b.log"; then
        timeout 120 /tmp/attn_check_$b 16384 prefill > "$O/attn_check_$b.txt" 2>&1
        echo "attn_check rc=$? (T, positions, plan, chunks, us, nmse, TFLOP/s):"
        grep -E "^(qwen3|olmoe)" "$O/attn_check_$b.txt" | awk '{print "  " $1, $2, $3, $4, $5, $7, $10, $11}'
    fi
done
echo "checks done at $(el)s"
dev_wait_files
row() { dev_bench_row "$(dev_ab_cli "$1")" "$@" --gpu; } # build name file args...
for p in $(seq ${REPS:-2}); do
    for b in $builds; do row $b q3_pp_d16k /tmp/q3.gguf -p 512 -n 0 -d 16384 -r 1; done
    for b in $builds; do row $b olmoe_pp_d16k /tmp/olmoe.gguf -p 512 -n 0 -d 16384 -r 1; done
    for b in $builds; do row $b q3_pp_d0 /tmp/q3.gguf -p 512 -n 0 -r 3; done
    echo "(pass $p at $(el)s)"
done
for b in $builds; do row $b q3_tg_d16k /tmp/q3.gguf -p 0 -n 128 -d 16384 -r 1; done
echo "all done at $(el)s"
