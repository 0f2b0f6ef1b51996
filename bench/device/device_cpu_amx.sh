#!/usr/bin/env bash
# device_cpu_amx.sh - the CPU kernels for several activation rows on the GPU machine's host (16
# Sapphire Rapids cores with AMX): the AMX tile kernels' tests (test_isa_amx: bit-identical to the
# AVX-512 kernels), the CPU tests, the untested GPU tests of the last landing (TESTS), bench_tiles
# (several-row AVX-512 kernel against the tiles), bench_dot (the single-row kernels: decode), and
# `strata bench` on the synthetic files: CPU-only prompt and decode with the tiles, without them
# (--no-amx) and from the previous landing's build (.devdata/prev, same run), `--cpu-moe` decode
# (the single-row kernel under the GPU), and the logprobs of a CPU prompt with and without tiles.
#   run(command="bash bench/device/device_cpu_amx.sh", carry=[".whl", ".devdata"], timeout_s=...)
# env: BUDGET (seconds for the benchmarks, default 420), TESTS (GPU tests also run), CPUMOE=0 (no
# --cpu-moe rows), LINES_LP (lines of the logprob prompt, default 40), AGAIN=1 (a
# second call on the same warm machine: the files, builds and tests of the first are reused).
# $OUT gets device_cpu_amx.log and results.tgz (the JSON and logs: the device returns few files).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
FINAL="${OUT:-/tmp/strata-out}"
mkdir -p "$FINAL"
R=/tmp/amx-results
mkdir -p "$R"
trap 'tar -C "$R" -czf "$FINAL/results.tgz" . 2>/dev/null' EXIT
dev_log cpu_amx "$FINAL"
BUDGET=${BUDGET:-420}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "cpu: $(nproc) x$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); amx: $(grep -o -m1 'amx_int8' /proc/cpuinfo)"
if [ "${AGAIN:-0}" != 1 ]; then
dev_wheels
dev_synth_files "$R"
DEV_LOG="$R/build.log" DEV_ERRS=20 dev_build all build/bench_tiles build/bench_dot build/bench_moe_step
fi # AGAIN
dev_prev_build 8 "$R/prev_build.log" strata build/bench_dot
T="test_isa_amx test_isa_avx512 test_dot test_ops test_session ${TESTS:-}"
# test_session's checks need the tiny model (batch == token by token: the Q8_0 tiles on AMX hosts)
mkdir -p /tmp/shared && ln -sfn "$PWD/models" /tmp/shared/models && export STRATA_SHARED=/tmp/shared
make -j16 CUDA=1 TEST_TIMEOUT=150 cuda-check CUDA_TEST_BINS="$(for t in $T; do printf 'build/tests/%s ' $t; done)" \
    > "$R/check.log" 2>&1
echo "tests rc=$? at $(el)s"
grep -E "^== |passed, |FAIL|!!|skip" "$R/check.log" | head -60

echo "---- bench_tiles (one thread) at $(el)s"
./build/bench_tiles --json "$R/tiles_q4K_gate.json"
./build/bench_tiles --rows 2048 --n 768 --json "$R/tiles_q4K_down.json" | tail -n +3
./build/bench_tiles --type q5_K --json "$R/tiles_q5K_gate.json" | tail -n +3
./build/bench_tiles --type q8_0 --rows 2048 --json "$R/tiles_q80.json" | tail -n +3
echo "---- bench_moe_step (16 threads: one token's expert step, one dispatch against three stages) at $(el)s"
./build/bench_moe_step 16 128 400 40 2>&1 | tee "$R/moe_step.txt"
while [ ! -f /tmp/prev.done ] && [ "$(el)" -lt 400 ] && ! grep -q "Error [0-9]" "$R/prev_build.log"; do sleep 2; done
echo "---- bench_dot q4_K/q5_K/q8_0, 512 MiB, this build then the previous landing's, at $(el)s"
./build/bench_dot --mib 512 --types q4_K,q5_K,q8_0 --json "$R/dot_new.json" | grep -E "^\| (q|type)"
[ -f /tmp/prev.done ] && .devdata/prev/build/bench_dot --mib 512 --types q4_K,q5_K,q8_0 --json "$R/dot_prev.json" | grep -E "^\| (q|type)"

bench() { # name binary file args...
    local name=$1 bin=$2 f=$3; shift 3
    [ "$(el)" -lt "$BUDGET" ] || { echo "skip $name: budget"; return; }
    timeout 150 $bin bench -m "$f" "$@" --json "$R/bench_$name.json" 2> "$R/bench_$name.err" | grep -E "^\|" | tail -n +3 \
        | sed "s/^/$name /" || { echo "bench $name rc=$?"; tail -3 "$R/bench_$name.err"; }
}
while [ ! -f /tmp/olmoe.done ] && [ "$(el)" -lt "$BUDGET" ]; do sleep 2; done
echo "---- CPU-only rows at $(el)s"
bench olmoe_cpu ./strata /tmp/olmoe.gguf -p 512 -n 32 -r 2 --cpu -t 16
bench olmoe_cpu_noamx ./strata /tmp/olmoe.gguf -p 512 -n 32 -r 2 --cpu -t 16 --no-amx
[ -f /tmp/prev.done ] && bench olmoe_cpu_prev .devdata/prev/strata /tmp/olmoe.gguf -p 512 -n 32 -r 2 --cpu -t 16
while [ ! -f /tmp/q3.done ] && [ "$(el)" -lt "$BUDGET" ]; do sleep 2; done
bench q3_cpu ./strata /tmp/q3.gguf -p 512 -n 32 -r 1 --cpu -t 16
bench q3_cpu_noamx ./strata /tmp/q3.gguf -p 512 -n 32 -r 1 --cpu -t 16 --no-amx
[ -f /tmp/prev.done ] && bench q3_cpu_prev .devdata/prev/strata /tmp/q3.gguf -p 512 -n 32 -r 1 --cpu -t 16
if [ "${CPUMOE:-1}" = 1 ]; then
echo "---- --cpu-moe decode (the single-row kernel) at $(el)s"
bench q3_cpumoe ./strata /tmp/q3.gguf -p 0 -n 64 -r 2 --gpu --cpu-moe -t 16
[ -f /tmp/prev.done ] && bench q3_cpumoe_prev .devdata/prev/strata /tmp/q3.gguf -p 0 -n 64 -r 2 --gpu --cpu-moe -t 16
bench q3_cpumoe_b ./strata /tmp/q3.gguf -p 0 -n 64 -r 2 --gpu --cpu-moe -t 16
fi
echo "---- CPU logprobs of a prompt: tiles against --no-amx against -b 1, at $(el)s"
for i in $(seq ${LINES_LP:-40}); do echo "The quick brown fox jumps over the lazy dog number $i."; done > /tmp/text.txt
./strata -m /tmp/q3.gguf -f /tmp/text.txt -n 0 --logpos /tmp/lp_amx.jsonl --cpu -c 1024 -t 16 >/dev/null 2>&1
./strata -m /tmp/q3.gguf -f /tmp/text.txt -n 0 --logpos /tmp/lp_noamx.jsonl --cpu -c 1024 -t 16 --no-amx >/dev/null 2>&1
cmp -s /tmp/lp_amx.jsonl /tmp/lp_noamx.jsonl && echo "logprobs: tiles == --no-amx (bit for bit)" || echo "logprobs: tiles != --no-amx"
timeout 120 ./strata -m /tmp/q3.gguf -f /tmp/text.txt -n 0 --logpos /tmp/lp_b1.jsonl --cpu -c 1024 -t 16 -b 1 >/dev/null 2>&1
cmp -s /tmp/lp_amx.jsonl /tmp/lp_b1.jsonl && echo "logprobs: tiles == one token at a time (bit for bit)" || echo "logprobs: tiles != -b 1"
wc -l /tmp/lp_amx.jsonl
echo "done at $(el)s"
