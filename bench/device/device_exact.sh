#!/usr/bin/env bash
# device_exact.sh - the CPU-exact split (c/cuda/moe_exact.cu) in one device call: builds, runs
# test_ops and test_session on the host's CPU (AVX-512 + AMX there), test_cuda_moe (each type's
# GPU rows bit for bit against the CPU's) and test_cuda_session (every share of the split gives
# the CPU-only bits), checks end to end that qwen3 --cpu-moe greedy text is the same with the
# split off, auto (the default) and --pcie-frac 1, then times the decode rows through
# device_split.sh (QROWS / OROWS as there; default: off, auto, a fixed share).
#   run(command="bash bench/device/device_exact.sh", carry=[".whl", ".devdata"])   (~400 s)
# env: TESTS=0 (skip the tests), REPS / OREPS (device_split.sh's passes, default 3 / 2).
# $OUT: device_exact.log, device_split.log / .jsonl, test logs.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_log exact
nvidia-smi --query-gpu=name --format=csv,noheader
dev_wheels
dev_synth_files /tmp
DEV_LOG=/tmp/build.log dev_build all build/tests/test_dot build/tests/test_ops build/tests/test_session \
    build/tests/test_cuda_moe build/tests/test_cuda_session build/bench_moe_step
if [ "${TESTS:-1}" = 1 ]; then
    O="${OUT:-/tmp}" DEV_TEST_SHOW="FAIL|exact rows .*(FAIL)|split mode|CPU-only bits|st_det_expf" DEV_TEST_SHOW_N=20 \
        dev_tests build test_dot test_ops test_session test_cuda_moe test_cuda_session
    grep -E "exact rows" "${OUT:-/tmp}/test_cuda_moe.log" | cut -c1-160 | head -30
fi
dev_wait_files "q3 file"
# greedy text end to end: split off, auto, every expert of the decode steps over PCIe
i=0
for f in "--no-cpu-misses" "" "--cpu-misses --pcie-frac 1" "--cpu-misses --pcie-frac 0.5"; do
    timeout 90 ./strata -m /tmp/q3.gguf -p "Once upon a time" -n 48 --temp 0 --ignore-eos --no-echo --gpu \
        --cpu-moe -t 16 $f > "/tmp/greedy_$i.txt" 2> /tmp/greedy.err
    echo "q3 --cpu-moe ${f:-(auto)}: $(grep -oE "[0-9.]+ tok/s" /tmp/greedy.err | tail -1), $(grep -E "cpu-misses" /tmp/greedy.err | head -1 | cut -c1-220)"
    [ $i -gt 0 ] && { cmp -s /tmp/greedy_0.txt "/tmp/greedy_$i.txt" && echo "  text equal to --no-cpu-misses" ||
        echo "  TEXT DIFFERS from --no-cpu-misses"; }
    i=$((i + 1))
done
echo "e2e at $(el)s"
PREV=0 TEST=0 HUGE=" " STEPS=${STEPS:-50} REPS=${REPS:-3} OREPS=${OREPS:-2} \
    QROWS=${QROWS:-"new:--no-cpu-misses new: new:--cpu-misses,--pcie-frac,0.25"} \
    OROWS=${OROWS:-"new:--no-cpu-misses new:"} bash bench/device/device_split.sh
echo "all done at $(el)s"
