#!/usr/bin/env bash
# device_all.sh - one H200 call for a session short of device time: the GPU tests (CUDA build, every
# test_cuda_* and test_isa* binary, as `make cuda-check` runs them), then the CPU inference benchmark
# (bench/device/device_cpu_infer.sh: default model and the Qwen3-30B-A3B shape at 1 and 16 threads).
#   run(command="bash bench/device/device_all.sh", carry=[".whl", ".devdata"])
# $OUT may take back only 8 files: the three logs are written there as the steps run (so a run cut
# off by its time limit still returns what it did), the benchmark tables are packed into one tar.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
FINAL="${OUT:-/tmp/strata-out}"
mkdir -p "$FINAL"
export OUT=/tmp/strata-raw
rm -rf "$OUT"; mkdir -p "$OUT"
pack() { tar -C "$OUT" -cf "$FINAL/results.tar" . 2>/dev/null; }
trap pack EXIT
trap 'exit 143' TERM INT
dev_log all "$FINAL"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
B=build-device
if timeout 240 make -j16 CUDA=1 BUILD=$B OUTDIR=$B -k all $B/libstrata.a \
        $(ls c/tests/test_cuda_*.c c/tests/test_isa*.c | sed "s|c/tests/\(.*\)\.c|$B/tests/\1|") \
        > "$FINAL/gpu_build.log" 2>&1; then
    echo "gpu build: ok ($(el)s)"
else
    echo "gpu build: FAILED"; grep -E "error|Error" "$FINAL/gpu_build.log" | head -20
fi
for t in $B/tests/test_cuda_* $B/tests/test_isa*; do
    [ -x "$t" ] || continue
    echo "== $t"
    timeout ${TEST_TIMEOUT:-60} "$t" 2>&1
    echo "rc=$?"
done > "$FINAL/cuda_check.log" 2>&1
grep -E "^== |passed|FAIL|^rc=[^0]" "$FINAL/cuda_check.log" | head -80
echo "gpu tests done at $(el)s"
[ "${SKIP_CPU:-0}" = 1 ] || bash bench/device/device_cpu_infer.sh
echo "all done at $(el)s"
