#!/usr/bin/env bash
# device_mmv_ab.sh - an A/B of the decode GEMV (c/cuda/mmv.cu) in one device call: builds this
# tree (base) and a copy with only mmv.o recompiled with AB (nvcc flags, e.g.
# AB='-DST_MMV_Q8_SMEM=0': Q8_0 rows without the shared-memory kernel), runs test_cuda_mmv and
# test_cuda_session on base, mmv_check's Q8_0 rows (base), then qwen3-30b-a3b and olmoe-1b-7b
# decode rows alternating the builds, REPS passes, one qwen3 decode row at depth 16K and one
# prompt row each. (2026-12-06: the GEMV on the Q8_0 tile copy, f86b34a, against the blocks:
# bench/results/h100-2026-12-06/run13-mmv-tiles.)
#   run(command="AB='-D...' bash bench/device/device_mmv_ab.sh", carry=[".whl", ".devdata"])   (~300 s)
# env: AB (required), REPS (default 3), TEST=0 (skip the tests). Log: $OUT/device_mmv_ab.log; mmv_check
# output, test logs and JSON rows under $OUT/mmv_ab/.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start mmv_ab
AB=${AB:?AB: the nvcc flags of the variant}
dev_build strata build/tests/test_cuda_mmv build/tests/test_cuda_session
dev_variant ab "$AB" c/cuda/mmv.o || exit 1
echo "ab ($AB) built at $(el)s"
[ "${TEST:-1}" = 1 ] && dev_tests build test_cuda_mmv test_cuda_session
nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format/quant -Ic/cuda c/cuda/dev/mmv_check.cu \
    build/libstrata.a -o /tmp/mmv_check -lpthread -ldl -lrt 2> "$J/mmv_check_build.log" &&
    timeout 100 /tmp/mmv_check q8_0 > "$O/mmv_check.txt" 2>&1
echo "mmv_check at $(el)s:"; grep -E "ncols=1 |FAIL" "$O/mmv_check.txt" | cut -c1-150
dev_wait_files
row() { dev_bench_row "$([ "$1" = ab ] && echo build-ab/strata || echo ./strata)" "$@" --gpu; } # build name file args...
for p in $(seq ${REPS:-3}); do
    for b in base ab; do row $b q3_tg_d0 /tmp/q3.gguf -p 0 -n 128 -r 3; done
    for b in base ab; do row $b olmoe_tg_d0 /tmp/olmoe.gguf -p 0 -n 128 -r 3; done
    echo "(pass $p at $(el)s)"
done
p=d16k; for b in base ab; do row $b q3_tg_d16k /tmp/q3.gguf -p 0 -n 128 -d 16384 -r 1; done
p=pp; for b in base ab; do row $b q3_pp_d0 /tmp/q3.gguf -p 512 -n 0 -r 3; done
echo "all done at $(el)s"
