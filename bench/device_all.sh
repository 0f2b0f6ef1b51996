#!/usr/bin/env bash
# device_all.sh - one H200 call for a session short of device time: the GPU tests (CUDA build,
# `make cuda-check`, which includes the AVX-512 kernel test on the host CPU), then the CPU inference
# benchmark (bench/device_cpu_infer.sh: default model and the Qwen3-30B-A3B shape at 1 and 16
# threads). Logs and tables land in $OUT.
#   run(command="bash bench/device_all.sh", carry=[".whl", ".devdata"])
set -u
cd "$(dirname "$0")/.."
# $OUT may take back only 8 files: the steps write into a scratch folder, packed into one tar.
FINAL="${OUT:-/tmp/strata-out}"
export OUT=/tmp/strata-raw
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL"
trap 'tar -C "$OUT" -cf "$FINAL/results.tar" . ; cp "$OUT"/*.md "$FINAL"/ 2>/dev/null' EXIT
t0=$(date +%s)
B=build-device
if timeout 300 make -j16 CUDA=1 BUILD=$B OUTDIR=$B -k all $B/libstrata.a \
        $(ls c/tests/test_cuda_*.c c/tests/test_isa*.c | sed "s|c/tests/\(.*\)\.c|$B/tests/\1|") \
        > "$OUT/gpu_build.log" 2>&1; then
    echo "gpu build: ok ($(( $(date +%s) - t0 ))s)"
else
    echo "gpu build: FAILED"; grep -E "error|Error" "$OUT/gpu_build.log" | head -20
fi
for t in $B/tests/test_cuda_* $B/tests/test_isa*; do
    [ -x "$t" ] || continue
    echo "== $t"
    timeout 120 "$t" 2>&1
done > "$OUT/cuda_check.log" 2>&1
grep -E "^== |passed|FAIL" "$OUT/cuda_check.log" | head -60
echo "gpu tests done at $(( $(date +%s) - t0 ))s"
bash bench/device_cpu_infer.sh
echo "all done at $(( $(date +%s) - t0 ))s"
