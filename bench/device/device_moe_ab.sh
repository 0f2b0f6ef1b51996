#!/usr/bin/env bash
# device_moe_ab.sh - an A/B of the grouped expert GEMVs' build switches (c/cuda/moe.cu) in one
# device call: builds this tree (base) and one variant per AB1 / AB2 / AB3 (nvcc flags; defaults
# below) from a copy of its objects with only moe.o recompiled, runs each build's test_cuda_moe and
# test_cuda_moe_lowbit (every type's FFN and the mixed low-bit pairs against the CPU and the exact
# FFN, repeatability; with TEST_CUDA_MOE_TYPES set, those types' cases alone) and
# c/cuda/dev/moe_check at the narrow K-quant shapes (GLM-4.5-Air Q3_K/Q5_0, its shared expert,
# Qwen3-Next, DeepSeek-V2-Lite: GB/s of the routed weights against the copy rate; the "decode" lines
# are the engine's one-token call), then with MODEL (a GGUF on the machine, e.g. device_ds2.sh's
# /dev/shm/ds2_air.gguf from an earlier call on the warm machine) tg64 rows alternating the builds,
# REPS passes.
#   run(command="bash bench/device/device_moe_ab.sh", carry=[".whl"], timeout_s=600)
#   (or PREBUILT=build-pre with variants ab1..ab3 packed by bench/device/prebuild.sh's VARIANTS,
#   as many as a call's carry holds: nothing is built on the device)
# Both switches are on by default since 2026-12-07 (run13), so the variants turn them off:
# AB1=-DSTRATA_MOE_DP4A_EXT=0 (Q3_K, Q5_0, Q4_1, Q5_1, IQ4_NL experts back on the f32 fallback),
# AB2=-DSTRATA_MOE_F32_SMEM=0 (the fallback's x row from global memory: the same bits), AB3 both. AB2= (empty) drops a variant. env: TEST=0 (skip the tests), CHECK=0 (skip
# moe_check), CASES (moe_check's model names), MODEL, REPS (default 2). Log: $OUT/device_moe_ab.log;
# test and check outputs in $OUT/moe_ab/.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
O="${OUT:-/tmp}/moe_ab"; J=/tmp/moe_ab_json; rm -rf "$J"; mkdir -p "$O" "$J"
trap 'tar -C "$J" -cf "$O/bench.tar" . 2>/dev/null' EXIT
dev_log moe_ab
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
AB1=${AB1--DSTRATA_MOE_DP4A_EXT=0}
AB2=${AB2--DSTRATA_MOE_F32_SMEM=0}
AB3=${AB3--DSTRATA_MOE_DP4A_EXT=0 -DSTRATA_MOE_F32_SMEM=0}
dev_build strata build/libstrata.a build/tests/test_cuda_moe build/tests/test_cuda_moe_lowbit
dev_variants "c/cuda/moe.o" libstrata.a tests/test_cuda_moe tests/test_cuda_moe_lowbit
for b in $builds; do
    echo "== $b: $(dev_ab_flags $b)"
    if [ "${TEST:-1}" = 1 ]; then
        for t in test_cuda_moe test_cuda_moe_lowbit; do
            timeout 300 "$(dev_ab_dir $b)/tests/$t" > "$O/${t}_$b.log" 2>&1
            echo "$t rc=$?: $(grep -E "passed, " "$O/${t}_$b.log" | tail -1)"
            grep -E "FAIL" "$O/${t}_$b.log" | head -5
        done
    fi
    if [ "${CHECK:-1}" = 1 ] && mc=$(dev_check moe_check $b) && [ -n "$mc" ]; then
        for c in ${CASES:-glm-4.5-air air-shexp qwen3-next deepseek-v2-lite v2-lite-shexp}; do
            timeout 120 $mc "$c" >> "$O/moe_check_$b.txt" 2>&1
        done
        grep -E "GB/s|device" "$O/moe_check_$b.txt" | grep -v router | cut -c1-160
    elif [ "${CHECK:-1}" = 1 ]; then
        echo "moe_check ($b): BUILD FAILED"; head -5 "$J/moe_check_build_$b.log"
    fi
done
[ -n "${MODEL:-}" ] && [ -f "$MODEL" ] || { echo "done at $(el)s (no MODEL rows)"; exit 0; }
for p in $(seq ${REPS:-2}); do
    for b in $builds; do dev_bench_row "$(dev_ab_cli $b)" $b tg64 "$MODEL" -p 0 -n 64 -r 2 --gpu; done
    echo "(pass $p at $(el)s)"
done
echo "all done at $(el)s"
