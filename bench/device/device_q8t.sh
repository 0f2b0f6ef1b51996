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
make -j16 CUDA=1 strata build/tests/test_cuda_mmv build/tests/test_cuda_session > "$J/build.log" 2>&1 ||
    { echo "BUILD FAILED"; grep error "$J/build.log" | head; exit 1; }
echo "build ok at $(el)s"
nvcc $DEV_NVCC c/cuda/dev/mmq_check.cu build/libstrata.a -lpthread -ldl -lrt -o /tmp/mmq_check 2> "$J/mmq_check_build.log" &&
    { timeout 120 /tmp/mmq_check "attn" > "$O/mmq_check.txt" 2>&1; timeout 60 /tmp/mmq_check "q8_0 ffn" >> "$O/mmq_check.txt" 2>&1;
      echo "mmq_check rc=$?:"; grep -E "Q8_0" "$O/mmq_check.txt" | cut -c1-200; }
if [ "${TEST:-1}" = 1 ]; then
    timeout 200 build/tests/test_cuda_mmv > "$O/test_cuda_mmv.log" 2>&1
    echo "test_cuda_mmv rc=$? at $(el)s: $(grep -E "passed, " "$O/test_cuda_mmv.log" | tail -1)"
    grep -E "FAIL" "$O/test_cuda_mmv.log" | head -5
    timeout 150 build/tests/test_cuda_session > "$O/test_cuda_session.log" 2>&1
    echo "test_cuda_session rc=$? at $(el)s: $(grep -E "passed, " "$O/test_cuda_session.log" | tail -1)"
    grep -E "FAIL" "$O/test_cuda_session.log" | head -5
fi
for i in $(seq 150); do [ -f /tmp/q3.done ] && break; sleep 2; done
echo "files at $(el)s"
row() { # name flag file args...: one bench process
    local n=$1 f=$2 m=$3; shift 3
    local x
    x=$(timeout 120 ./strata bench -m "$m" "$@" --gpu $f --json "$J/bench_${n}_${f:-tiles}_$p.json" 2>/dev/null |
        grep -E "^\|.*(pp|tg)[0-9]" | awk -F'|' '{gsub(/ /,"",$6); gsub(/ /,"",$7); printf "%s %s  ", $6, $7}')
    echo "${f:-q8-tiles} $n: $x"
}
for p in $(seq ${REPS:-2}); do
    for f in "" --no-q8-tiles; do row q3_pp_d0 "$f" /tmp/q3.gguf -p 512 -n 0 -r 3; done
    for f in "" --no-q8-tiles; do row q3_pp_d16k "$f" /tmp/q3.gguf -p 512 -n 0 -d 16384 -r 1; done
    for f in "" --no-q8-tiles; do row olmoe_pp_d0 "$f" /tmp/olmoe.gguf -p 512 -n 0 -r 3; done
    echo "(pass $p at $(el)s)"
done
for f in "" --no-q8-tiles; do row q3_tg_d0 "$f" /tmp/q3.gguf -p 0 -n 128 -r 2; done
echo "all done at $(el)s"
