#!/usr/bin/env bash
# device_mmv_ab.sh - an A/B of the decode GEMV (c/cuda/mmv.cu) in one device call: builds this
# tree (base) and a copy with only mmv.o recompiled with AB (nvcc flags, e.g.
# AB='-DST_MMV_Q8_SMEM=0': Q8_0 rows without the shared-memory kernel), runs test_cuda_mmv and
# test_cuda_session on base, mmv_check's Q8_0 rows (base), then qwen3-30b-a3b and olmoe-1b-7b
# decode rows alternating the builds, REPS passes, one qwen3 decode row at depth 16K and one
# prompt row each. (2026-12-06: the GEMV on the Q8_0 tile copy, f86b34a, against the blocks:
# bench/results/h100-2026-12-06/run13-mmv-tiles.)
#   run(command="AB='-D...' bash bench/device_mmv_ab.sh", carry=[".whl", ".devdata"])   (~300 s)
# env: AB (required), REPS (default 3), TEST=0 (skip the tests). Log: $OUT/device_mmv_ab.log; mmv_check
# output, test logs and JSON rows under $OUT/mmv_ab/.
set -u
cd "$(dirname "$0")/.."
. bench/device_common.sh
dev_start mmv_ab
AB=${AB:?AB: the nvcc flags of the variant}
make -j16 CUDA=1 strata build/tests/test_cuda_mmv build/tests/test_cuda_session > "$J/build.log" 2>&1 ||
    { echo "BUILD FAILED"; grep error "$J/build.log" | head; exit 1; }
echo "build ok at $(el)s"
rm -rf build-ab && cp -r build build-ab && rm -f build-ab/c/cuda/mmv.o
make -j16 CUDA=1 BUILD=build-ab OUTDIR=build-ab NVCC_EXTRA="$AB" build-ab/strata \
    > "$J/build_ab.log" 2>&1 || { echo "ab: BUILD FAILED"; grep error "$J/build_ab.log" | head -5; exit 1; }
echo "ab ($AB) built at $(el)s"
if [ "${TEST:-1}" = 1 ]; then
    for t in test_cuda_mmv test_cuda_session; do
        timeout 200 build/tests/$t > "$O/$t.log" 2>&1
        echo "$t rc=$? at $(el)s: $(grep -E "passed, " "$O/$t.log" | tail -1)"
        grep -E "FAIL" "$O/$t.log" | head -5
    done
fi
nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format/quant -Ic/cuda c/cuda/dev/mmv_check.cu \
    build/libstrata.a -o /tmp/mmv_check -lpthread -ldl -lrt 2> "$J/mmv_check_build.log" &&
    timeout 100 /tmp/mmv_check q8_0 > "$O/mmv_check.txt" 2>&1
echo "mmv_check at $(el)s:"; grep -E "ncols=1 |FAIL" "$O/mmv_check.txt" | cut -c1-150
for i in $(seq 150); do [ -f /tmp/q3.done ] && break; sleep 2; done
echo "files at $(el)s"
row() { # build name file args...: one bench process
    local b=$1 n=$2 m=$3; shift 3
    local x c=./strata
    [ $b = ab ] && c=build-ab/strata
    x=$(timeout 120 $c bench -m "$m" "$@" --gpu --json "$J/bench_${n}_${b}_$p.json" 2>/dev/null |
        grep -E "^\|.*(pp|tg)[0-9]" | awk -F'|' '{gsub(/ /,"",$6); gsub(/ /,"",$7); printf "%s %s  ", $6, $7}')
    echo "$b $n: $x"
}
for p in $(seq ${REPS:-3}); do
    for b in base ab; do row $b q3_tg_d0 /tmp/q3.gguf -p 0 -n 128 -r 3; done
    for b in base ab; do row $b olmoe_tg_d0 /tmp/olmoe.gguf -p 0 -n 128 -r 3; done
    echo "(pass $p at $(el)s)"
done
p=d16k; for b in base ab; do row $b q3_tg_d16k /tmp/q3.gguf -p 0 -n 128 -d 16384 -r 1; done
p=pp; for b in base ab; do row $b q3_pp_d0 /tmp/q3.gguf -p 512 -n 0 -r 3; done
echo "all done at $(el)s"
