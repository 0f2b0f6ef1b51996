#!/usr/bin/env bash
# device_cpu_infer.sh - CPU inference speed on the H200 machine's host CPU, in one call: builds,
# writes the Qwen3-30B-A3B-shaped synthetic model (shared/bench/synth_moe.py, Q4_K experts), and
# runs bench/cpu/bench_cpu.sh on the embedded default model and on that file at 1 and 16 threads.
# Results (markdown + JSON) go to $OUT.
#
# The device has no network and no gguf/cffi packages: carry them as wheels in .whl/ and the
# generator and its vocabulary in .devdata/ (synth_moe.py, ggml-vocab-gpt-2.gguf):
#   run(command="bash bench/device/device_cpu_infer.sh", carry=[".whl", ".devdata"])
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
OUT="${OUT:-/tmp/strata-out}"
mkdir -p "$OUT"
LOG="$OUT/cpu_infer.log"
exec > >(tee "$LOG") 2>&1
t0=$(date +%s)
echo "cpu: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

dev_wheels || exit 1

make -j16 CUDA=0 all > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 ))s"

# 1. the embedded default model: 512-token prompt, 128 generated tokens
THREADS="1 16" NPROMPT=${TINY_NPROMPT:-512} NGEN=${TINY_NGEN:-128} REPS=${TINY_REPS:-2} bash bench/cpu/bench_cpu.sh \
    models/strata-tiny-moe-q8_0.gguf "$OUT/cpu-tiny"

# 2. Qwen3-30B-A3B shape (16.3 GiB): written to local disk, read through the page cache.
Q3=/tmp/qwen3-30b-a3b-q4_k.gguf
t1=$(date +%s)
python3 .devdata/synth_moe.py qwen3-30b-a3b "$Q3" --vocab .devdata/ggml-vocab-gpt-2.gguf \
    > "$OUT/synth.log" 2>&1 || { echo "synth_moe failed"; tail "$OUT/synth.log"; exit 1; }
echo "synth_moe wrote $(du -h "$Q3" | cut -f1) in $(( $(date +%s) - t1 ))s"
cat "$Q3" > /dev/null   # into the page cache, so the first timed run does not read the disk
THREADS="16" NPROMPT=${Q3_NPROMPT:-512} NGEN=${Q3_NGEN:-64} REPS=1 bash bench/cpu/bench_cpu.sh "$Q3" "$OUT/cpu-qwen3-16t"
THREADS="1" NPROMPT=${Q3_1T_NPROMPT:-64} NGEN=${Q3_1T_NGEN:-16} REPS=1 bash bench/cpu/bench_cpu.sh "$Q3" "$OUT/cpu-qwen3-1t"

echo "total $(( $(date +%s) - t0 ))s"
cat "$OUT"/cpu-*.md
