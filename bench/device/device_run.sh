#!/usr/bin/env bash
# device_run.sh - everything to run on a GPU machine (the H200) in one call, from the repository
# root: CUDA build, `make cuda-check`, the full C test suite, the dequantize check-and-time program
# (c/cuda/dev/dequant_check.cu), and the CPU dot micro-benchmark when bench/micro/bench_dot.c exists.
# Logs and JSON results go to $OUT (default /tmp/strata-out), at most 8 files:
#   summary.txt build.log cuda_check.log test_c.log dequant_check.log dequant_check.json
#   bench.log bench_dot.json
# Each step is time-bounded; the whole script stays well under 8 minutes on the H200 machine
# (16 cores). Exit status 0 only if every step that ran passed. Needs: make, cc, nvcc; no network.
#
#   bash bench/device/device_run.sh            # or: OUT=/some/dir JOBS=8 bash bench/device/device_run.sh
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/strata-out}"
JOBS="${JOBS:-16}"
BUILD_DIR="${BUILD_DIR:-build-device}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
T0=$(date +%s)
overall=0

say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LOG LIMIT_S CMD...: runs CMD with a time limit, output to LOG, records the verdict.
step() {
    local name="$1" log="$2" limit="$3"
    shift 3
    local t=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
    local rc=$?
    local verdict=PASS
    [ $rc -ne 0 ] && verdict="FAIL (rc $rc$([ $rc -eq 124 ] && echo ", timed out after ${limit}s"))" && overall=1
    say "$(printf '%-16s %-28s %4ss  %s' "$name" "$verdict" "$(( $(date +%s) - t ))" "$(basename "$log")")"
    return $rc
}

say "strata device run: $(date -u +%FT%TZ) on $(hostname)"
say "git: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | wc -l | tr -d ' ') changed files"
if command -v nvidia-smi >/dev/null 2>&1; then
    say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -4 | tr '\n' ';')"
else
    say "gpu: nvidia-smi not found"
fi
say "nvcc: $(nvcc --version 2>&1 | grep -o 'release [0-9.]*' || echo 'not found')"
say "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
say ""

MK=(make -j"$JOBS" CUDA=1 BUILD="$BUILD_DIR" OUTDIR="$BUILD_DIR")

# 1. Build (library, CLI, every test binary).
if step build "$OUT/build.log" 300 "${MK[@]}" -k all "$BUILD_DIR/libstrata.a" \
        $(ls c/tests/test_*.c | sed "s|c/tests/\(.*\)\.c|$BUILD_DIR/tests/\1|"); then
    if ldd "$BUILD_DIR/libstrata.so" 2>/dev/null | grep -q libcudart; then
        say "  WARNING: libstrata.so links libcudart dynamically"
    fi
fi

# 2. GPU tests (test_cuda_*, test_isa*). A skip here means the GPU was not usable: flag it.
step cuda-check "$OUT/cuda_check.log" 120 "${MK[@]}" cuda-check
grep -E '^[0-9]+ passed' "$OUT/cuda_check.log" | sed 's/^/  /' | tee -a "$SUMMARY"
grep -h '^skip ' "$OUT/cuda_check.log" | sed 's/^/  /' | tee -a "$SUMMARY"
grep -q 'CUDA unavailable' "$OUT/cuda_check.log" && { say "  FAIL: the GPU tests skipped on a GPU machine"; overall=1; }
grep -h '^FAIL ' "$OUT/cuda_check.log" | head -20 | sed 's/^/  /' | tee -a "$SUMMARY"

# 3. The full C suite.
step test-c "$OUT/test_c.log" 180 "${MK[@]}" test-c
grep -E '^(!! |[0-9]+ passed, [1-9])' "$OUT/test_c.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 4. Dequantize check-and-time program over 1 GiB of Q8_0.
DQ="$BUILD_DIR/dequant_check"
if step dequant-build "$OUT/dequant_check.log" 180 nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include \
        -Ic/core -Ic/format/quant -Ic/cuda c/cuda/dev/dequant_check.cu -o "$DQ"; then
    mv "$OUT/dequant_check.log" "$OUT/dequant_build.tmp"
    step dequant-check "$OUT/dequant_check.log" 180 "$DQ" "$OUT/dequant_check.json" 1
    cat "$OUT/dequant_build.tmp" >> "$OUT/dequant_check.log"; rm -f "$OUT/dequant_build.tmp"
    sed -n '/^variant/,/^RESULT/p' "$OUT/dequant_check.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi

# 5. CPU dot micro-benchmark (written separately; skipped when absent).
if [ -f bench/micro/bench_dot.c ]; then
    # 512 MiB of rows: larger than the host's 300 MiB L3, so the figures are DRAM-streaming rates.
    step bench "$OUT/bench.log" 300 bash -c "${MK[*]} $BUILD_DIR/bench_dot && \
        $BUILD_DIR/bench_dot --mib 512 --json $OUT/bench_dot.json"
else
    say "bench            SKIP (bench/micro/bench_dot.c absent)"
fi

say ""
say "total $(( $(date +%s) - T0 ))s: $([ $overall -eq 0 ] && echo 'ALL PASSED' || echo 'SOME STEPS FAILED')"
say "files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $overall
