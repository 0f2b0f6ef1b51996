#!/usr/bin/env bash
# device_q8t.sh - the Q8_0 tile copy (q8_tiles, cuda_mmq.h) in one device call: builds this tree,
# runs test_cuda_mmv (the copy's layout and the same bits as the GGUF-block tiles on every Q8_0
# tile case), test_cuda_session and mmq_check (the prompt shapes' tiles timed with and without the
# copy), then qwen3-30b-a3b and olmoe-1b-7b prompt rows alternating the default (copy on) with
# --no-q8-tiles in one binary, REPS passes, and a decode row of each (unchanged kernels).
#   run(command="bash bench/device/device_q8t.sh", carry=[".whl", ".devdata"])   (~300 s)
# env: REPS (default 2), TEST=0 (skip the tests). Log: $OUT/device_q8t.log; JSON rows tarred to
# $OUT/q8t/bench.tar.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start q8t
dev_build strata build/tests/test_cuda_mmv build/tests/test_cuda_session
nvcc $DEV_NVCC c/cuda/dev/mmq_check.cu build/libstrata.a -lpthread -ldl -lrt -o /tmp/mmq_check 2> "$J/mmq_check_build.log" &&
    { timeout 120 /tmp/mmq_check "attn" > "$O/mmq_check.txt" 2>&1; timeout 60 /tmp/mmq_check "q8_0 ffn" >> "$O/mmq_check.txt" 2>&1;
      echo "mmq_check rc=$?:"; grep -E "Q8_0" "$O/mmq_check.txt" | cut -c1-200; }
[ "${TEST:-1}" = 1 ] && dev_tests build test_cuda_mmv test_cuda_session:150
dev_wait_files
row() { # name flag file args...: one bench process (JSON tagged "tiles" for the default)
    local n=$1 f=$2 m=$3; shift 3
    DEV_JSON_TAG=${f:-tiles} dev_bench_row ./strata "${f:-q8-tiles}" "$n" "$m" "$@" --gpu $f
}
for p in $(seq ${REPS:-2}); do
    for f in "" --no-q8-tiles; do row q3_pp_d0 "$f" /tmp/q3.gguf -p 512 -n 0 -r 3; done
    for f in "" --no-q8-tiles; do row q3_pp_d16k "$f" /tmp/q3.gguf -p 512 -n 0 -d 16384 -r 1; done
    for f in "" --no-q8-tiles; do row olmoe_pp_d0 "$f" /tmp/olmoe.gguf -p 512 -n 0 -r 3; done
    echo "(pass $p at $(el)s)"
done
for f in "" --no-q8-tiles; do row q3_tg_d0 "$f" /tmp/q3.gguf -p 0 -n 128 -r 2; done
echo "all done at $(el)s"
