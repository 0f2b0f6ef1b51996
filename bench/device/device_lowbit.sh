#!/usr/bin/env bash
# device_lowbit.sh - issue 34 on one GPU machine: the low-bit types on the GPU. First the GPU tests
# of every IQ type and MXFP4 (test_cuda_dequant, test_cuda_mmv, test_cuda_moe, test_cuda_moe_lowbit,
# and python/tests/test_iq_gpu.py: the default model requantized to each low-bit mix, GPU sessions
# against the CPU's; test_cuda_session with STAGES "session"), then synthetic qwen3-30b-a3b files in
# low-bit mixes (bench/synth_lowbit.py, zero-mean weights: each token routes to its own experts)
# timed all resident and with --cpu-moe (pp512 and tg64; the mxfp4 mix, whose dense matrices are
# Q8_0, also all resident with --q8-sm60), each beside llama-bench on the same file
# in the same call when .peer is carried (llama-bench's build takes about 5 minutes, in the
# background while the tests run). Every Strata row's JSON gives decode bytes per token and their
# share of the copy rate.
#   run(command="bash bench/device/device_lowbit.sh", carry=[".whl", ".devdata/synth_moe.py",
#       ".devdata/ggml-vocab-gpt-2.gguf", ".peer"], timeout_s=600)
# Knobs: STAGES (default "tests iq2_xxs mxfp4"; mixes: iq2_xxs iq2_s iq1_m iq3_xxs mxfp4; "session";
# "prep": only the mixes' files and llama-bench's build, waited for, then exit: run beside another
# script in one call, e.g. `STAGES="prep iq2_xxs mxfp4" bash ...device_lowbit.sh & bash
# ...device_older.sh`, then the rows in the same call (a file or build under way is waited for,
# not started again) or the next one on the warm machine, which keeps both),
# BUDGET (seconds after which no new row starts, default 540), R (repetitions, default 2).
# $OUT: device_lowbit.log, the test logs and lowbit/bench.tar (every row's JSON and stderr).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
O="${OUT:-/tmp}/lowbit"; J=/tmp/lowbit_json; rm -rf "$J"; mkdir -p "$O" "$J"
trap 'tar -C "$J" -cf "$O/bench.tar" . 2>/dev/null' EXIT
dev_log lowbit
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
dev_wheels
BUDGET=${BUDGET:-540}
R=${R:-2}
STAGES=${STAGES:-tests iq2_xxs mxfp4}
have() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
late() { [ "$(el)" -ge "$BUDGET" ] && { echo "budget reached at $(el)s: $1 skipped"; return 0; }; return 1; }
MIXES=""
for m in iq2_xxs iq2_s iq1_m iq3_xxs mxfp4; do have $m && MIXES="$MIXES $m"; done
# the files, one after another in the background (the first is timed while the next is written)
(
    for m in $MIXES; do
        # written, or being written, by an earlier script on this machine
        { [ -f /tmp/q3_$m.done ] || [ -f /tmp/q3_$m.writing ]; } && continue
        touch /tmp/q3_$m.writing
        python3 bench/synth_lowbit.py qwen3-30b-a3b /tmp/q3_$m.gguf --mix $m --synth .devdata/synth_moe.py \
            --vocab .devdata/ggml-vocab-gpt-2.gguf > "/tmp/lowbit_synth_$m.log" 2>&1 && echo ok > /tmp/q3_$m.done
    done
) &
LL=0
if [ -f /tmp/llama.done ] || [ -f /tmp/llama.building ]; then LL=1 # built (being built) by an earlier script
elif [ -f .peer/llama_bench.sh ] && [ -n "$MIXES" ]; then
    touch /tmp/llama.building
    ( bash .peer/llama_bench.sh build > "$J/llama_build.log" 2>&1 && echo ok > /tmp/llama.done ) &
    LL=1
fi
if have prep; then # only the files and llama-bench, for a later call on this warm machine
    while [ "$(el)" -lt "$BUDGET" ]; do
        n=0; for m in $MIXES; do [ -f /tmp/q3_$m.done ] && n=$((n + 1)); done
        [ $n -eq $(echo $MIXES | wc -w) ] && { [ $LL = 0 ] || [ -f /tmp/llama.done ]; } && break
        sleep 5
    done
    echo "prep at $(el)s: files $(ls /tmp/q3_*.done 2>/dev/null | tr '\n' ' '), llama-bench $([ -f /tmp/llama.done ] && echo built || echo no)"
    exit 0
fi
DEV_JOBS=12 dev_build strata libstrata.so build/tests/test_cuda_dequant build/tests/test_cuda_mmv build/tests/test_cuda_moe \
    build/tests/test_cuda_moe_lowbit build/tests/test_cuda_session
if have tests; then
    DEV_TEST_SHOW="FAIL|SKIP" DEV_TEST_SHOW_N=12 dev_tests build test_cuda_dequant:120 test_cuda_mmv:200 test_cuda_moe:200 \
        test_cuda_moe_lowbit:150
fi
if have tests; then # the default model requantized to each low-bit mix: GPU against CPU sessions
    STRATA_LIB=$PWD/libstrata.so STRATA_CLI=$PWD/strata PYTHONPATH=$PWD/python:$PYTHONPATH \
        timeout 240 python3 -m pytest -q -p no:cacheprovider python/tests/test_iq_gpu.py > "$O/test_iq_gpu.log" 2>&1
    echo "test_iq_gpu rc=$? at $(el)s: $(tail -1 "$O/test_iq_gpu.log")"
    grep -E "^FAILED|Error" "$O/test_iq_gpu.log" | head -8
fi
if have tests; then # the host CPU's IQ kernels per ISA level (the AVX-512 level's choice, dot.c):
    # a CPU-only build of its own (a carried prebuilt build/ has no objects to build it from)
    make -j12 CUDA=0 BUILD=build-bd OUTDIR=build-bd build-bd/bench_dot > "$J/bench_dot_build.log" 2>&1 &&
        ./build-bd/bench_dot --threads 1 --time 0.5 --mib 64 --json "$J/bench_dot.json" \
            --types q4_K,iq4_xs,iq3_xxs,iq3_s,iq2_xxs,iq2_xs,iq2_s,iq1_s,iq1_m,mxfp4 | grep "^|"
fi
if have session; then
    DEV_TEST_SHOW="FAIL" DEV_TEST_SHOW_N=8 dev_tests build test_cuda_session:200
fi
# one Strata row: pp512 + tg64 with ARGS; "tag: rates, decode bytes/token, share of the copy rate"
srow() { # file tag args...
    local f=$1 tag=$2
    shift 2
    late "strata $tag" && return
    timeout 200 ./strata bench -m "$f" -p 512 -n 64 -r "$R" --gpu -t 16 "$@" --json "$J/s_$tag.json" \
        > "$J/s_$tag.md" 2> "$J/s_$tag.err"
    echo "strata $tag (rc $?): $(dev_rates < "$J/s_$tag.md")at $(el)s"
    grep -E "^\|.*tg64" "$J/s_$tag.md" | awk -F'|' '{print "    decode bytes/token" $8 ", GB/s" $9 ", of copy rate" $10}'
}
lrow() { # file tag args...
    local f=$1 tag=$2
    shift 2
    [ -f /tmp/llama.done ] || return 0
    late "llama $tag" && return
    timeout 200 bash .peer/llama_bench.sh run -m "$f" -ngl 99 -fa 1 -p 512 -n 64 -r "$R" "$@" \
        > "$J/l_$tag.md" 2> "$J/l_$tag.err"
    echo "llama $tag (rc $?): $(grep -E 'pp512|tg64' "$J/l_$tag.md" | awk -F'|' '{printf "%s ", $(NF-1)}')at $(el)s"
}
for m in $MIXES; do
    for i in $(seq 200); do [ -f /tmp/q3_$m.done ] && break; sleep 2; done
    [ -f /tmp/q3_$m.done ] || { echo "q3_$m: not written (synth_$m.log: $(tail -2 "/tmp/lowbit_synth_$m.log"))"; continue; }
    echo "q3_$m written at $(el)s: $(du -h /tmp/q3_$m.gguf | cut -f1); $(grep -ci "spread\|std" "/tmp/lowbit_synth_$m.log") spread lines"
    grep -iE "std|spread" "/tmp/lowbit_synth_$m.log" | head -8
    cp "/tmp/lowbit_synth_$m.log" "$J/synth_$m.log" # (outside $J while written: a later run clears $J)
    F=/tmp/q3_$m.gguf
    if [ "$LL" = 1 ] && [ ! -f /tmp/llama.done ]; then # llama's build: wait, at most to 60% of the budget
        while [ ! -f /tmp/llama.done ] && [ "$(el)" -lt $((BUDGET * 6 / 10)) ]; do sleep 5; done
        echo "llama-bench built: $([ -f /tmp/llama.done ] && echo yes || echo no) at $(el)s"
    fi
    for p in 1 2; do # interleaved rounds
        srow $F ${m}_gpu_$p
        lrow $F ${m}_gpu_$p
        srow $F ${m}_cpumoe_$p --cpu-moe
        lrow $F ${m}_cpumoe_$p -ncmoe 48 -t 16
        # the mxfp4 mix's dense parts are Q8_0: the SM60 GEMV (--q8-sm60) on a real shape
        [ $m = mxfp4 ] && srow $F ${m}_gpu_sm60_$p --q8-sm60
    done
    rm -f $F # the disk holds one or two at a time
done
echo "done at $(el)s"
