#!/usr/bin/env bash
# device_split.sh - where a `--cpu-moe` decode token's time goes, in one device call: builds this
# tree (./strata), optionally the same tree with other nvcc flags (AB_NVCC="-D...": build-ab) and
# the previous landing (.devdata/prev, when there; PREV=0: not built), writes the synthetic
# qwen3-30b-a3b and olmoe-1b-7b files meanwhile, then runs 64-token greedy decodes with the
# experts on the CPU, one process each, alternating builds and options, REPS passes: plain, and
# with `--cpu-misses` at the cost model's share and at fixed `--pcie-frac` shares. Each row prints
# the decode rate and the [PROF] footer's figures (slot-rows each side, the host's wait per CPU
# layer and its CPU step). Then a running process's page counts (HUGE="new ab": which builds) and
# bench_moe_step (the CPU step alone, malloc'd experts) for the CPU step's rate outside the engine.
#   run(command="bash bench/device/device_split.sh", carry=[".whl", ".devdata"])   (~250 s)
# env: REPS (default 3), OREPS (default 2), QROWS / OROWS (the qwen3 / olmoe configurations,
# "build:flag,flag ..." with build prev, ab or new), TEST=0 (skip test_cuda_session), STEPS
# (bench_moe_step's steps). A second call on the same warm machine finds the files and builds
# (carry only .whl then, so that .devdata/prev's build stays). Log: $OUT/device_split.log.
# Rows also as JSON lines: $OUT/device_split.jsonl. (bench/results/h100-2026-12-06 has what it
# measured.)
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_log split
: > "${OUT:-/tmp}/device_split.jsonl"
nvidia-smi --query-gpu=name --format=csv,noheader
echo "cpu: $(nproc) x$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
dev_wheels
dev_synth_files /tmp
[ -n "${AB_NVCC:-}" ] && dev_flag_build ab "$AB_NVCC" 6 /tmp/ab.log
dev_prev_build 4 /tmp/prev.log
DEV_LOG=/tmp/build.log DEV_JOBS=8 dev_build strata build/bench_moe_step build/tests/test_cuda_session
# the GPU session's checks (the pinned copy on huge pages among them) while the others build
if [ "${TEST:-1}" = 1 ]; then
    timeout 120 build/tests/test_cuda_session > /tmp/test_cuda_session.log 2>&1
    echo "test_cuda_session rc=$? at $(el)s: $(grep -E "passed, " /tmp/test_cuda_session.log | tr '\n' ' ')"
    grep -E "FAIL" /tmp/test_cuda_session.log | head -5
fi
# (no bare `wait`: it would wait for the log's tee too)
for i in $(seq 150); do [ -f /tmp/q3.done ] && { [ -f /tmp/ab.done ] || [ -z "${AB_NVCC:-}" ]; } && { [ -f /tmp/prev.done ] || [ "${PREV:-1}" != 1 ] || [ ! -f .devdata/prev/Makefile ]; } && break; sleep 2; done
echo "files and builds at $(el)s: q3 $([ -f /tmp/q3.done ] && echo ok) ab $([ -f /tmp/ab.done ] && echo ok) prev $([ -f /tmp/prev.done ] && echo ok)"
bin() { case $1 in prev) echo .devdata/prev/strata ;; ab) echo build-ab/strata ;; *) echo ./strata ;; esac; }
one() { # build, flags (comma-separated), file: one decode, its rate and footer figures
    local b=$1 f=$2 m=$3 x
    [ -x "$(bin $b)" ] || { echo "$b ${f:-plain}: no binary"; return; }
    x=$(timeout 60 $(bin $b) -m $m -p "Once upon a time" -n 64 --temp 0 --ignore-eos --no-echo --gpu --cpu-moe \
        -t 16 ${f//,/ } 2>&1 >/dev/null)
    # the figures once (empty where the footer lacks one), then as a log line and a JSON line
    local tps gs cs wu cu
    tps=$(echo "$x" | grep -oE "[0-9.]+ tok/s" | tail -1 | grep -oE "^[0-9.]+")
    gs=$(echo "$x" | grep -oE "[0-9]+ slot-rows from GPU memory" | grep -oE "^[0-9]+")
    cs=$(echo "$x" | grep -oE "[0-9]+ on the CPU \(" | grep -oE "^[0-9]+")
    wu=$(echo "$x" | grep -oE "[0-9.]+ us waited" | grep -oE "^[0-9.]+")
    cu=$(echo "$x" | grep -oE "[0-9.]+ us computed" | grep -oE "^[0-9.]+")
    echo "$b ${f:-plain} $(basename $m .gguf): ${tps:-?} tok/s | slot-rows GPU ${gs:-?} CPU ${cs:-?} |" \
         "a CPU layer ${wu:-?} us waited + ${cu:-?} us computed |" \
         "$(echo "$x" | grep -oE "CPU [0-9]+ us \+ [0-9]+ us (per row|an expert)|PCIe [0-9.]+ GB/s \([0-9]+ us a copy\)" | head -3 | tr '\n' ' ')"
    printf '{"build": "%s", "flags": "%s", "model": "%s", "decode_tok_s": %s, "slot_rows_gpu": %s, "slot_rows_cpu": %s, "hand_wait_us": %s, "cpu_step_us": %s}\n' \
        "$b" "${f//,/ }" "$(basename $m .gguf)" "${tps:-null}" "${gs:-null}" "${cs:-null}" "${wu:-null}" "${cu:-null}" \
        >> "${OUT:-/tmp}/device_split.jsonl"
}
QROWS=${QROWS:-"prev: new: new:--cpu-warm new:--doorbell new:--cpu-pin new:--cpu-misses new:--cpu-misses,--pcie-frac,0.25"}
OROWS=${OROWS:-"prev: new: new:--cpu-warm new:--doorbell prev:--cpu-misses new:--cpu-misses"}
for rep in $(seq ${REPS:-3}); do
    for c in $QROWS; do one "${c%%:*}" "${c#*:}" /tmp/q3.gguf; done
    echo "(pass $rep at $(el)s)"
done
for rep in $(seq ${OREPS:-2}); do for c in $OROWS; do one "${c%%:*}" "${c#*:}" /tmp/olmoe.gguf; done; done
echo "olmoe at $(el)s"
# a running process's resident, huge and locked pages (the pinned copy's pages as granted)
for b in ${HUGE:-new}; do
    $(bin $b) -m /tmp/q3.gguf -p "Once upon a time" -n 4000 --temp 0 --ignore-eos --no-echo --gpu --cpu-moe -t 16 \
        > /dev/null 2>&1 &
    p=$!; sleep 10 # (loaded and decoding by then; 4,000 tokens outlast it)
    echo "$b: $(grep -E "^(Rss|AnonHugePages|Locked)" /proc/$p/smaps_rollup 2>/dev/null | tr -s ' ' | tr '\n' ' ')"
    kill $p 2>/dev/null; wait $p 2>/dev/null
done
# the CPU step outside the engine (malloc'd experts, the workers held spinning, 40 us gaps)
timeout 60 build/bench_moe_step 16 128 ${STEPS:-300} 40 8 6 2>&1 | tail -4
echo "all done at $(el)s"
