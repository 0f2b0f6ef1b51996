#!/usr/bin/env bash
# device_refactor.sh - a change meant to keep behaviour (issue 29's redesign) against the previous
# landing, on one GPU machine: this tree's GPU tests, the --logpos dumps of both builds compared
# byte for byte (the default model and the synthetic qwen3-30b-a3b file: all resident, --cpu-moe,
# --expert-cache), then strata bench rows of both builds interleaved, one process a row.
#   run(command="bash bench/device/device_refactor.sh", carry=[".whl", ".devdata"], timeout_s=600)
# .devdata/prev: `git archive <previous landing> Makefile c | tar -x -C .devdata/prev`, and the
# commit's name in .devdata/prev/REV.
# STAGES (default "verify tests dumps speed") picks the parts, so a second call on the warm machine
# can take what the first had no time for (builds and the synthetic files are kept); verify runs
# .verify/run.sh when it was carried (a harness of placement setups with launch traces, built
# elsewhere). REPS: passes of the speed rows (default 2). $OUT: device_refactor.log and
# refactor/all.tar (the test logs, both sides' dumps, the rows' JSON), which a call brings back
# as one file.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start refactor
OO=$O O=$J/logs
mkdir -p "$O"
trap 'tar -C "$J" -cf "$OO/all.tar" . 2>/dev/null' EXIT
STAGES=${STAGES:-verify tests dumps speed}
# the tests' tiny model (../shared does not travel): the repository's copy
mkdir -p /tmp/shared && ln -sfn "$PWD/models" /tmp/shared/models && export STRATA_SHARED=/tmp/shared
CUDA_TESTS="test_cuda_session test_cuda_moe test_cuda_moe_lowbit test_cuda_mmv test_cuda_ops test_cuda_attn test_cuda_dequant"
dev_prev_build 8 "$J/prev_build.log" strata
have() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
if have verify && [ -f .verify/run.sh ]; then # on the GPU while this tree builds on the CPUs
    ( OUT=$J bash .verify/run.sh > "$J/verify.log" 2>&1; echo "verify done, rc $?" >> "$J/verify.log" ) &
    VPID=$!
fi
dev_build strata $(for t in $CUDA_TESTS test_session test_lib_messages; do echo build/tests/$t; done)
if [ -n "${VPID:-}" ]; then
    wait "$VPID"
    grep -E "^== |SAME|DIFF|rc " "$J/verify.log" | head -40
fi
wait_prev() {
    local i
    for i in $(seq 150); do [ -f /tmp/prev.done ] && break; sleep 2; done
    [ -f /tmp/prev.done ] || { echo "previous landing: BUILD FAILED"; tail -5 "$J/prev_build.log"; exit 1; }
    echo "previous landing built at $(el)s"
}

if have tests; then
    dev_tests build test_cuda_session:300 test_cuda_moe:200 test_cuda_moe_lowbit test_cuda_mmv test_cuda_ops test_cuda_attn \
        test_cuda_dequant test_session test_lib_messages
fi

# --logpos of both builds: the same bytes (the dumps carry no timings)
TINY=models/strata-tiny-moe-q8_0.gguf
dump_pair() { # name model args...: both sides' dumps, compared
    local n=$1 m=$2 a b
    shift 2
    a="$J/dumps/prev_$n.jsonl" b="$J/dumps/new_$n.jsonl"
    timeout 200 .devdata/prev/strata -m "$m" -f /tmp/refactor_prompt.txt -n 0 --logpos "$a" "$@" > /dev/null 2> "$J/dumps/prev_$n.err"
    timeout 200 ./strata -m "$m" -f /tmp/refactor_prompt.txt -n 0 --logpos "$b" "$@" > /dev/null 2> "$J/dumps/new_$n.err"
    if [ -s "$a" ] && cmp -s "$a" "$b"; then echo "dump $n: identical ($(wc -l < "$b") lines) at $(el)s"
    else echo "dump $n: DIFFERENT or missing at $(el)s"; tail -2 "$J/dumps/new_$n.err"; fi
}
if have dumps; then
    wait_prev
    mkdir -p "$J/dumps"
    head -c 1500 LICENSE > /tmp/refactor_prompt.txt
    dump_pair tiny_gpu $TINY --gpu -c 1024
    dump_pair tiny_cpu_moe $TINY --gpu --cpu-moe -c 1024 -t 16
    dump_pair tiny_cache $TINY --gpu --expert-cache 64 -c 1024
    dump_pair tiny_cpu $TINY --cpu -c 1024 -t 16
    dev_wait_files
    dump_pair q3_gpu /tmp/q3.gguf --gpu -c 1024
    dump_pair q3_cpu_moe /tmp/q3.gguf --gpu --cpu-moe -c 1024 -t 16
    dump_pair q3_cache /tmp/q3.gguf --gpu --expert-cache 1536 -c 1024 -t 16
    [ -f .devdata/prev/REV ] && echo "previous landing: $(cat .devdata/prev/REV)"
fi

if have speed; then
    wait_prev
    dev_wait_files
    for p in $(seq "${REPS:-2}"); do
        for side in prev new; do
            b=./strata; [ $side = prev ] && b=.devdata/prev/strata
            dev_bench_row $b $side q3_tg128 /tmp/q3.gguf -p 0 -n 128 -r 3 --gpu
            dev_bench_row $b $side q3_pp512 /tmp/q3.gguf -p 512 -n 0 -r 3 --gpu
            dev_bench_row $b $side q3_cpumoe_tg64 /tmp/q3.gguf -p 0 -n 64 -r 2 --gpu --cpu-moe -t 16
            dev_bench_row $b $side q3_cache1536_tg64 /tmp/q3.gguf -p 0 -n 64 -r 2 --gpu --expert-cache 1536 -t 16
        done
        echo "(pass $p at $(el)s)"
    done
fi
echo "all done at $(el)s"
