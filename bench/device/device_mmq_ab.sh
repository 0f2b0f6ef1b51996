#!/usr/bin/env bash
# device_mmq_ab.sh - an A/B of the prompt tiles (c/cuda/mmq.cu) in one device call: builds this
# tree (base) and a copy with only mmq.o recompiled with AB (nvcc flags, e.g.
# AB='-DST_MMQ_Q4K_PAIRS=0'), runs test_cuda_mmv, test_cuda_moe and test_cuda_moe_lowbit on base,
# mmq_check's expert and attention rows on both, then qwen3-30b-a3b and olmoe-1b-7b prompt rows
# alternating the builds, REPS passes, and one decode row each.
#   run(command="AB='-D...' bash bench/device/device_mmq_ab.sh", carry=[".whl", ".devdata"])   (~330 s)
# env: AB (required), REPS (default 2), TEST=0 (skip the tests). Log: $OUT/device_mmq_ab.log;
# mmq_check output and JSON rows under $OUT/mmq_ab/.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start mmq_ab
dev_build strata build/tests/test_cuda_mmv build/tests/test_cuda_moe build/tests/test_cuda_moe_lowbit \
    build/tests/test_cuda_session
dev_variant ab "${AB:?AB: the nvcc flags of the variant}" c/cuda/mmq.o || exit 1
echo "ab ($AB) built at $(el)s"
for b in base ab; do
    d=build; [ $b = ab ] && d=build-ab
    nvcc $DEV_NVCC $([ $b = ab ] && echo "$AB") c/cuda/dev/mmq_check.cu $d/libstrata.a -lpthread -ldl -lrt -o /tmp/mmq_check_$b \
        2> "$J/mmq_check_build_$b.log" || { echo "mmq_check $b: BUILD FAILED"; continue; }
    { timeout 90 /tmp/mmq_check_$b "experts"; timeout 40 /tmp/mmq_check_$b "attn_qkv"; } > "$O/mmq_check_$b.txt" 2>&1
    echo "mmq_check $b at $(el)s:"; grep -vE "^NVIDIA|f16 tiles|GLU fused" "$O/mmq_check_$b.txt" | cut -c1-150
done
[ "${TEST:-1}" = 1 ] && dev_tests build test_cuda_mmv test_cuda_moe test_cuda_moe_lowbit test_cuda_session
dev_wait_files
row() { dev_bench_row "$([ "$1" = ab ] && echo build-ab/strata || echo ./strata)" "$@" --gpu; } # build name file args...
for p in $(seq ${REPS:-2}); do
    for b in base ab; do row $b q3_pp_d0 /tmp/q3.gguf -p 512 -n 0 -r 3; done
    for b in base ab; do row $b olmoe_pp_d0 /tmp/olmoe.gguf -p 512 -n 0 -r 3; done
    for b in base ab; do row $b q3_pp_d16k /tmp/q3.gguf -p 512 -n 0 -d 16384 -r 1; done
    echo "(pass $p at $(el)s)"
done
p=tg; for b in base ab; do row $b q3_tg_d0 /tmp/q3.gguf -p 0 -n 128 -r 2; done
row base q3_cpumoe_pp2048 /tmp/q3.gguf -p 2048 -n 0 -r 1 --cpu-moe
echo "all done at $(el)s"
