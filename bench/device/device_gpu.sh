#!/usr/bin/env bash
# device_gpu.sh - the CUDA backend's checks and first speed in one H200 call, for a session short
# of device time: builds with CUDA, runs every GPU test (`make cuda-check`: kernel families against
# their CPU references, the GPU session against the CPU session on the default model and on every
# architecture, the AVX-512 kernels on the host), checks GPU against CPU end to end through the CLI
# (64 greedy tokens, teacher-forced logprob dumps compared with tools/kl.py), then `strata bench`
# on the synthetic olmoe-1b-7b and qwen3-30b-a3b files (written by synth_moe.py while the build and
# tests run), GPU first, as long as BUDGET seconds allow.
#   run(command="bash bench/device/device_gpu.sh", carry=[".whl", ".devdata"], timeout_s=...)
# env: BUDGET (seconds for the benchmarks), CHECK=0 (skip the tests, the check-and-time programs
# and the end-to-end checks: a speed-only run), TESTS="test_cuda_attn ..." (only those GPU tests),
# E2E=0 (skip the CLI GPU-vs-CPU and HF parity checks), NCU=1 (per-kernel times of a decode step from ncu), SWEEP=0 (no depth-0 offloading sweep), OFFLOAD=0 (skip the expert-offloading rows and the
# sweep), GPUROWS=0 (skip the all-GPU rows and the profile), CPU=0 (skip the host CPU rows), MMQ=0 / ATTN=0 (skip c/cuda/dev/mmq_check /
# attn_check), NOGRAPHS=0 (skip
# the rows without CUDA graphs), DISK=1 (the disk O_DIRECT expert read rate), NCU_MMQ=1 (ncu sections of
# the int8 tiles), NCU_ATTN=1 (of the tensor-core attention at depth 16K), AB_NVCC="-D..." / AB2_NVCC (AB_D=1: with depth rows),
# MOE_STEP=1 (bench_moe_step on the host: the CPU expert step in one dispatch, in three stages, warmed)
# (pp512/tg128 rows from a second build with those nvcc flags), DEPTH_SWEEP=1 (the offloading
# sweep at depth 16K), NCU_PP=1 (per-kernel times of a qwen3 pp512 pass), NCU_SECT=regex (ncu sections of those decode
# kernels), ROWS=regex (only the benchmark rows whose names match).
# .whl: the gguf, cffi and pycparser wheels for the device's Python 3.12, e.g.
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 cffi pycparser
# .devdata: synth_moe.py and ggml-vocab-gpt-2.gguf (see device_cpu_infer.sh).
# $OUT gets device_gpu.log (everything below), gpu_build.log, cuda_check.log and results.tar.
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
FINAL="${OUT:-/tmp/strata-out}"
mkdir -p "$FINAL"
R=/tmp/strata-results
rm -rf "$R"; mkdir -p "$R"
trap 'tar -C "$R" -cf "$FINAL/results.tar" . 2>/dev/null' EXIT
trap 'exit 143' TERM INT
dev_log gpu "$FINAL"
BUDGET=${BUDGET:-400}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader
echo "cpu: $(nproc) x$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

dev_wheels
# the benchmark files, written while the build and the tests run (kept from an earlier script of
# the same call when it left them)
dev_synth_files "$R"

DEV_LOG="$FINAL/gpu_build.log" DEV_ERRS=20 dev_build all
# the A/B variants (AB_NVCC, AB2_NVCC), built alongside the tests
[ -n "${AB_NVCC:-}" ] && dev_flag_build ab "$AB_NVCC" 8 "$R/build_ab.log"
[ -n "${AB2_NVCC:-}" ] && dev_flag_build ab2 "$AB2_NVCC" 8 "$R/build_ab2.log"
# the previous landing's sources (.devdata/prev: `git archive <rev> Makefile c`), built alongside
# for same-run baseline rows (bench_*_prev; PREV=0: not built)
dev_prev_build 8 "$R/prev_build.log"
if [ "${CHECK:-1}" = 1 ]; then
if [ -n "${TESTS:-}" ]; then # only these GPU tests (TESTS="test_cuda_attn test_cuda_session")
    make -j16 CUDA=1 TEST_TIMEOUT=150 cuda-check CUDA_TEST_BINS="$(for t in $TESTS; do printf 'build/tests/%s ' $t; done)" \
        > "$FINAL/cuda_check.log" 2>&1
else
    make -j16 CUDA=1 TEST_TIMEOUT=150 cuda-check > "$FINAL/cuda_check.log" 2>&1
fi
echo "cuda-check rc=$? at $(el)s"
grep -E "^== |passed, |FAIL|^GPU|default model|max\|gpu|!!|CUDA graphs" "$FINAL/cuda_check.log" | head -80
# the prefill tiles against the GEMV, timed (c/cuda/dev/mmq_check.cu)
# the attention kernels' plans and the tensor-core prefill kernel, timed (c/cuda/dev/attn_check.cu)
[ "${ATTN:-1}" = 1 ] && nvcc $DEV_NVCC c/cuda/dev/attn_check.cu \
    build/libstrata.a -lpthread -ldl -lrt -o /tmp/attn_check && timeout 150 /tmp/attn_check 2>&1 | tee "$R/attn_check.txt" | tail -40
# the decode calls at shorter depths (where the tensor-core decode kernel starts to pay)
[ "${ATTN:-1}" = 1 ] && [ -x /tmp/attn_check ] && for c in ${ATTN_DEC_CTX:-1024 4096}; do
    timeout 60 /tmp/attn_check $c decode 2>&1 | grep -E "^(qwen3|olmoe)" | tee -a "$R/attn_check_dec.txt" | grep -E " (default|fma|fma-dec|dtc) "; done
# where the tensor-core prompt attention's time goes at depth 16K (NCU_ATTN=1): one launch of
# attn_check's qwen3 512 x 16,896 "tc-split" row (each plan runs 56 times; the T = 8, 64 and
# 512 x 512 rows' three tensor-core plans and this case's "tensor" and "tensor-1p" come first);
# NCU_ATTN_K=regex, NCU_ATTN_SKIP=n, NCU_ATTN_C=count pick other launches (the qwen3 T = 1 row's
# decode kernel and its combine: NCU_ATTN_K='st_k_attn_dtc|st_k_attn_combine' NCU_ATTN_SKIP=20 NCU_ATTN_C=2)
if [ "${NCU_ATTN:-0}" = 1 ] && [ -x /tmp/attn_check ]; then
    NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    [ -n "$NC" ] && timeout 200 "$NC" -k "regex:${NCU_ATTN_K:-st_k_attn_tc}" --launch-skip ${NCU_ATTN_SKIP:-616} \
        -c ${NCU_ATTN_C:-1} --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section MemoryWorkloadAnalysis /tmp/attn_check > "$R/ncu_attn.txt" 2>&1
    grep -E "st_k_attn|Duration|Throughput|Issue Slots|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|est. speedup" \
        "$R/ncu_attn.txt" | cut -c1-200 | head -30
fi
[ "${MMQ:-1}" = 1 ] && nvcc $DEV_NVCC c/cuda/dev/mmq_check.cu build/libstrata.a \
    -lpthread -ldl -lrt -o /tmp/mmq_check && timeout 240 /tmp/mmq_check 2>&1 | tee "$R/mmq_check.txt"
echo "mmq_check done at $(el)s"
# where the int8 tiles' time goes (NCU_MMQ=1): Nsight Compute's warp-state and scheduler sections
# for the first gate/up and down tile launches of mmq_check's "16 hot" experts case
if [ "${NCU_MMQ:-0}" = 1 ]; then
    NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    [ -n "$NC" ] && timeout 200 "$NC" -k regex:st_k_mmq_i8 -c 2 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section LaunchStats --section InstructionStats \
        /tmp/mmq_check "16 hot" > "$R/ncu_mmq.txt" 2>&1
    grep -E "st_k_mmq_i8|Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Ipc|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Stall|est. speedup" \
        "$R/ncu_mmq.txt" | cut -c1-200 | head -60
    echo "(ncu mmq done at $(el)s)"
fi
fi # CHECK (the tests and the check-and-time programs)

# ---- end to end through the CLI: the default model, GPU vs CPU ----
if [ "${CHECK:-1}" = 1 ] && [ "${E2E:-1}" = 1 ]; then # E2E=0: no CLI and HF checks
M=models/strata-tiny-moe-q8_0.gguf
P="Dictionary, n. A malevolent literary device for cramping the growth of a language."
./strata -m $M -p "$P" -n 64 --temp 0 --ignore-eos --no-echo --gpu > "$R/greedy_gpu.txt" 2> "$R/greedy_gpu.err"
./strata -m $M -p "$P" -n 64 --temp 0 --ignore-eos --no-echo --cpu > "$R/greedy_cpu.txt" 2> "$R/greedy_cpu.err"
./strata -m $M -p "$P" -n 64 --temp 0 --ignore-eos --no-echo --gpu > "$R/greedy_gpu2.txt" 2>/dev/null
cmp -s "$R/greedy_gpu.txt" "$R/greedy_cpu.txt" && echo "e2e greedy 64: GPU == CPU" || echo "e2e greedy 64: GPU != CPU"
cmp -s "$R/greedy_gpu.txt" "$R/greedy_gpu2.txt" && echo "e2e greedy 64: two GPU runs equal" || echo "e2e greedy: GPU runs DIFFER"
tail -2 "$R/greedy_gpu.err"
head -c 3000 LICENSE > /tmp/text.txt
./strata -m $M -f /tmp/text.txt -n 0 --logpos "$R/lp_cpu.jsonl" --cpu -c 1024 2>/dev/null
./strata -m $M -f /tmp/text.txt -n 0 --logpos "$R/lp_gpu.jsonl" --gpu -c 1024 2>/dev/null
python3 tools/kl.py "$R/lp_cpu.jsonl" "$R/lp_gpu.jsonl" 2>&1 | tee "$R/kl_cpu_gpu.txt" | head -20
./strata bench -m $M -p 512 -n 128 -r 3 --gpu --json "$R/bench_tiny_gpu.json"
./strata bench -m $M -p 512 -n 128 -r 3 --cpu -t 16 --json "$R/bench_tiny_cpu.json"
echo "e2e done at $(el)s"
# ---- reference parity on the GPU: the HF zoo with head_dim 64 (torch and transformers are there) ----
STRATA_LIB=$PWD/libstrata.so STRATA_CLI=$PWD/strata PYTHONPATH=$PWD/python:$PYTHONPATH \
    timeout 240 python3 -m pytest -q -p no:cacheprovider python/tests/test_hf_parity_gpu.py \
    > "$R/hf_parity_gpu.log" 2>&1
echo "hf parity on the GPU: rc=$? $(tail -1 "$R/hf_parity_gpu.log") at $(el)s"
fi # CHECK

# ---- first speed on the synthetic files ----
bench() { # name file args...
    local name=$1 f=$2; shift 2
    [ -z "${ROWS:-}" ] || echo "$name" | grep -Eq "$ROWS" || return 0
    [ "$(el)" -lt "$BUDGET" ] || { echo "skip $name: budget"; return; }
    timeout $(( BUDGET + 60 - $(el) )) ./strata bench -m "$f" "$@" --json "$R/bench_$name.json" \
        2> "$R/bench_$name.err" || { echo "bench $name rc=$?"; tail -3 "$R/bench_$name.err"; }
    echo "($name done at $(el)s)"
}
while [ ! -f /tmp/olmoe.done ] && [ "$(el)" -lt "$BUDGET" ]; do sleep 2; done
echo "olmoe file ready at $(el)s: $(du -h /tmp/olmoe.gguf 2>/dev/null | cut -f1)"
if [ "${GPUROWS:-1}" = 1 ]; then # the all-GPU rows (GPUROWS=0: only the later sections)
bench olmoe_gpu /tmp/olmoe.gguf -p 512 -n 128 -r 3 --gpu
[ "${NOGRAPHS:-1}" = 1 ] && bench olmoe_gpu_nographs /tmp/olmoe.gguf -p 0 -n 128 -r 3 --gpu --no-cuda-graphs
fi # GPUROWS
while [ ! -f /tmp/q3.done ] && [ "$(el)" -lt "$BUDGET" ]; do sleep 2; done
echo "qwen3 file ready at $(el)s: $(du -h /tmp/q3.gguf 2>/dev/null | cut -f1)"
if [ "${GPUROWS:-1}" = 1 ]; then
bench q3_gpu /tmp/q3.gguf -p 512 -n 128 -r 3 --gpu
[ "${NOGRAPHS:-1}" = 1 ] && bench q3_gpu_nographs /tmp/q3.gguf -p 0 -n 128 -r 3 --gpu --no-cuda-graphs
# programmatic dependent launch off (--no-pdl) and for prompt batches too (--pdl-all; the default
# has it for calls of up to 8 tokens): what the overlapped launches give, same build
bench q3_gpu_nopdl /tmp/q3.gguf -p 512 -n 128 -r 3 --gpu --no-pdl
bench olmoe_gpu_nopdl /tmp/olmoe.gguf -p 512 -n 128 -r 3 --gpu --no-pdl
bench q3_gpu_pdlall /tmp/q3.gguf -p 512 -n 0 -r 3 --gpu --pdl-all
bench olmoe_gpu_pdlall /tmp/olmoe.gguf -p 512 -n 0 -r 3 --gpu --pdl-all
bench q3_gpu_d16k /tmp/q3.gguf -p 512 -n 128 -d 16384 -r 1 --gpu
# decode at depth 2,048: the FMA attention's range (below 4,096 positions), its chunk merge
bench q3_gpu_d2k /tmp/q3.gguf -p 0 -n 64 -d 2048 -r 3 --gpu
# decode at depth with the attention on the FMA units (the decode kernel before st_k_attn_dtc)
bench q3_gpu_d16k_attnfma /tmp/q3.gguf -p 0 -n 128 -d 16384 -r 1 --gpu --no-attn-tc
# the same prompt rows from the previous landing's build (same run, same file)
# (the previous build may still be compiling: wait for it while the budget allows)
while [ -f .devdata/prev/Makefile ] && [ "${PREV:-1}" = 1 ] && [ ! -f /tmp/prev.done ] && [ "$(el)" -lt "$BUDGET" ] &&
      ! grep -q "Error [0-9]" "$R/prev_build.log" 2>/dev/null; do
    sleep 2
done
if [ -f /tmp/prev.done ]; then
    for row in "q3_gpu_d16k_prev /tmp/q3.gguf -p 512 -n 128 -d 16384 -r 1" "q3_gpu_prev /tmp/q3.gguf -p 512 -n 128 -r 3" \
               "q3_gpu_d2k_prev /tmp/q3.gguf -p 0 -n 64 -d 2048 -r 3" \
               "olmoe_gpu_prev /tmp/olmoe.gguf -p 512 -n 128 -r 3" \
               "q3_cpumoe_prev /tmp/q3.gguf -p 0 -n 64 -r 1 --cpu-moe -t 16"; do
        set -- $row; name=$1; shift
        [ -z "${ROWS:-}" ] || echo "$name" | grep -Eq "$ROWS" || continue
        [ "$(el)" -lt "$BUDGET" ] || break
        timeout 120 .devdata/prev/strata bench -m "$@" --gpu --json "$R/bench_$name.json" 2> "$R/bench_$name.err"
        echo "($name done at $(el)s)"
    done
else echo "no previous build: $(tail -2 "$R/prev_build.log" 2>/dev/null)"; fi
bench olmoe_gpu_d16k /tmp/olmoe.gguf -p 512 -n 0 -d 16384 -r 1 --gpu
# prompt attention: the default (tensor cores, split f16 operands) against single f16 operands
# (--attn-tc) and the FMA kernel (--no-attn-tc)
bench q3_gpu_attntc1 /tmp/q3.gguf -p 512 -n 0 -r 3 --gpu --attn-tc
bench q3_gpu_attnfma /tmp/q3.gguf -p 512 -n 0 -r 3 --gpu --no-attn-tc
fi # GPUROWS
# A/B against build variants (AB_NVCC="-DNAME=V ...", AB2_NVCC): the same pp512 and tg128 rows
# from a second (third) build with those nvcc flags, run right after the default's rows; AB_D=1:
# also qwen3's decode rows at depth 2,048 and 16,384
ab_rows() { # dir flags tag
    local dir=$1 flags=$2 tag=$3
    for f in q3 olmoe; do
        [ "$(el)" -lt "$BUDGET" ] || break
        echo "AB ($flags) $f:"
        timeout 90 ./$dir/strata bench -m /tmp/$f.gguf -p 512 -n 128 -r 3 --gpu \
            --json "$R/bench_${f}_$tag.json" 2>/dev/null | tail -2
    done
    if [ "${AB_D:-0}" = 1 ]; then
        for row in "d2k -p 0 -n 64 -d 2048 -r 3" "d16k -p 0 -n 128 -d 16384 -r 1"; do
            set -- $row; name=$1; shift
            [ "$(el)" -lt "$BUDGET" ] || break
            echo "AB ($flags) q3 $name:"
            timeout 120 ./$dir/strata bench -m /tmp/q3.gguf "$@" --gpu --json "$R/bench_q3_${name}_$tag.json" \
                2>/dev/null | tail -1
        done
    fi
}
for v in 1 2; do
    [ $v = 1 ] && flags=${AB_NVCC:-} dir=build-ab tag=ab done_f=/tmp/ab.done log="$R/build_ab.log"
    [ $v = 2 ] && flags=${AB2_NVCC:-} dir=build-ab2 tag=ab2 done_f=/tmp/ab2.done log="$R/build_ab2.log"
    [ -n "$flags" ] || continue
    while [ ! -f $done_f ] && [ "$(el)" -lt "$BUDGET" ] && ! grep -q "Error [0-9]" "$log"; do sleep 2; done
    if [ -f $done_f ]; then ab_rows $dir "$flags" $tag
    else echo "AB build ($flags) failed"; tail -5 "$log"; fi
done
# per-kernel GPU time of one decode step (NCU=1, Nsight Compute): each kernel of the third
# decode step of a short run timed alone (boost clocks, warm caches), summed by name
if [ "${NCU:-0}" = 1 ]; then
    NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ -n "$NC" ]; then
        # kernels per step: count them in a 1-token and a 2-token run's launch totals
        timeout 240 "$NC" --metrics gpu__time_duration.sum --cache-control none --clock-control none \
            --csv --print-units base -f -o /tmp/ncu_dec ./strata -m /tmp/q3.gguf -p "Once upon a time" \
            -n 4 --temp 0 --ignore-eos --no-echo --gpu --no-cuda-graphs > "$R/ncu.log" 2>&1
        timeout 120 "$NC" -i /tmp/ncu_dec.ncu-rep --csv --print-units base --page raw \
            --metrics gpu__time_duration.sum > "$R/ncu_decode.csv" 2>> "$R/ncu.log"
        python3 bench/device/ncu_split.py "$R/ncu_decode.csv" --layers 48 | tee "$R/ncu_decode_split.txt"
        echo "(ncu done at $(el)s)"
    else echo "no ncu here"; fi
fi
# where chosen decode kernels' time goes (NCU_SECT=regex of kernel names): Nsight Compute's
# sections for four launches of the matches in a short qwen3 decode run, after NCU_SECT_SKIP
# matching launches (the skip counts every match together; the prompt pass comes first: with
# three kernels of ~48-97 launches a pass, 1,000 lands in a decode step)
if [ -n "${NCU_SECT:-}" ]; then
    NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    [ -n "$NC" ] && timeout 200 "$NC" -k "regex:$NCU_SECT" --launch-skip "${NCU_SECT_SKIP:-1000}" -c 4 --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
        ./strata -m /tmp/q3.gguf -p "Once upon a time" -n 16 --temp 0 --ignore-eos --no-echo --gpu --no-cuda-graphs \
        > "$R/ncu_sect.txt" 2>&1
    grep -E "^  [a-z_]+.*\(|Duration|Issue Slots|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Stall|est. speedup|Grid Size|Block Size" \
        "$R/ncu_sect.txt" | cut -c1-180 | head -60
    echo "(ncu sections done at $(el)s)"
fi
# per-kernel GPU time of one qwen3 prompt pass of 512 tokens (NCU_PP=1)
if [ "${NCU_PP:-0}" = 1 ]; then
    NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ -n "$NC" ]; then
        timeout 300 "$NC" --metrics gpu__time_duration.sum --cache-control none --clock-control none \
            -f -o /tmp/ncu_pp ./strata bench -m /tmp/q3.gguf -p 512 -n 0 -r 1 --no-warmup --gpu > "$R/ncu_pp.log" 2>&1
        timeout 120 "$NC" -i /tmp/ncu_pp.ncu-rep --csv --print-units base --page raw \
            --metrics gpu__time_duration.sum > "$R/ncu_pp.csv" 2>> "$R/ncu_pp.log"
        python3 bench/device/ncu_split.py "$R/ncu_pp.csv" --whole --layers 48 | tee "$R/ncu_pp_split.txt" | head -40
        echo "(ncu pp done at $(el)s)"
    fi
fi
# the time split of a decode step (each phase waits for the GPU: slower than the rows above)
if [ "${GPUROWS:-1}" = 1 ]; then
bench q3_gpu_profile /tmp/q3.gguf -p 512 -n 32 -r 1 --gpu --profile
grep "profile" "$R/bench_q3_gpu_profile.err" || true
fi
if [ "${OFFLOAD:-1}" = 1 ]; then
# experts in RAM, computed by the CPU (llama.cpp's --cpu-moe / -ncmoe 36 / -ncmoe 24 in ANCHORS.md),
# with the defaults: the experts kept in RAM pinned when they fit (pin_experts auto), prompt
# batches staged to the GPU when the cost model says so (stage_experts auto)
bench q3_cpumoe /tmp/q3.gguf -p 2048 -n 64 -r 1 --gpu --cpu-moe -t 16
bench q3_cpumoe_stage256 /tmp/q3.gguf -p 2048 -n 0 -r 1 --gpu --cpu-moe --stage-experts 256 -t 16
bench q3_cpumoe_nopin /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --no-pin-experts -t 16
bench q3_ncmoe36 /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --n-cpu-moe 36 -t 16
# the file image in transparent huge pages (read, not mapped) and locked, the CPU reading it
# directly (no pinned copy): against q3_cpumoe_nopin
bench q3_cpumoe_nopin_huge /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --no-pin-experts --no-mmap --hugepages --mlock -t 16
# the CPU layers of decode steps handed to the expert pool through host-mapped memory
bench q3_cpumoe_doorbell /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --doorbell -t 16
bench q3_ncmoe36_doorbell /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --n-cpu-moe 36 --doorbell -t 16
# the doorbell's decode steps replayed as CUDA graphs (--doorbell-graphs; the rows above launch
# them kernel by kernel)
bench q3_cpumoe_doorbell_graphs /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --doorbell --doorbell-graphs -t 16
bench q3_ncmoe36_doorbell_graphs /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --n-cpu-moe 36 --doorbell --doorbell-graphs -t 16
bench olmoe_cpumoe_doorbell /tmp/olmoe.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --doorbell -t 16
bench q3_ncmoe24 /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --n-cpu-moe 24 -t 16
bench olmoe_cpumoe /tmp/olmoe.gguf -p 512 -n 64 -r 1 --gpu --cpu-moe -t 16
# the GPU expert cache at 25% and 50% of the expert bytes (6144 experts): demand loads over PCIe
bench q3_cache25 /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536
bench q3_cache50 /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 3072
bench q3_cache25_nopin /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536 --no-pin-experts
bench q3_cache25_pf /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536 --gpu-prefetch
bench q3_cache25_split /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536 --cpu-misses -t 16
# --cpu-moe / --n-cpu-moe with --cpu-misses: decode steps copy a share of each CPU layer's experts
# over PCIe to the GPU (the cost model's, or --pcie-frac F) while the CPU computes the rest
bench q3_cpumoe_split /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --cpu-misses -t 16
bench q3_cpumoe_split38 /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --pcie-frac 0.375 -t 16
bench q3_cpumoe_split50 /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --pcie-frac 0.5 -t 16
bench q3_ncmoe36_split /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --n-cpu-moe 36 --cpu-misses -t 16
bench q3_ncmoe24_split /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --n-cpu-moe 24 --cpu-misses -t 16
bench olmoe_cpumoe_split /tmp/olmoe.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --cpu-misses -t 16
# the cache's misses computed by the expert pool while the GPU computes the hits (--doorbell with
# --expert-cache: split on the device, no routing round trip)
bench q3_cache25_poolmiss /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536 --doorbell -t 16
bench q3_cache50_poolmiss /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 3072 --doorbell -t 16
# past a RAM budget (8 GiB of the 15.2 GiB of experts in pinned RAM slots, the rest read from the
# file with O_DIRECT when routed): the GPU cache and the CPU layers load from the RAM tier
bench q3_cache25_ram8g /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536 --ram-budget 8G
bench q3_cpumoe_ram8g /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --ram-budget 8G -t 16
# the same with the RAM tier reading the next layer's predicted experts ahead (--pipe)
bench q3_cache25_ram8g_pipe /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --expert-cache 1536 --ram-budget 8G --pipe
bench q3_cpumoe_ram8g_pipe /tmp/q3.gguf -p 0 -n 64 -r 1 --gpu --cpu-moe --ram-budget 8G --pipe -t 16
for f in "$R"/bench_q3_c*.err "$R"/bench_q3_n*.err "$R"/bench_olmoe_cpumoe*.err; do
    [ -f "$f" ] && echo "$(basename "$f" .err): $(grep -h -E "expert rows|cpu-misses" "$f" | cut -c1-250 | tr '\n' ' ')"; done
fi # OFFLOAD
# ---- the CPU layers' split (--cpu-misses with --cpu-moe / --n-cpu-moe) against the plain hand-off,
# interleaved and repeated (SPLIT_AB=1; 2: without the -ncmoe 24 rows; this host's CPU-computed rows move by up to 40% between
# processes, so one pair says little) ----
if [ "${SPLIT_AB:-0}" != 0 ]; then
    for rep in 1 2; do
        bench q3_cpumoe_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe -t 16
        bench q3_cpumoe_split_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe --cpu-misses -t 16
        bench q3_cpumoe_split50_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe --pcie-frac 0.5 -t 16
        bench q3_cpumoe_split38_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe --pcie-frac 0.375 -t 16
        bench q3_cpumoe_split25_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe --pcie-frac 0.25 -t 16
        bench olmoe_cpumoe_ab$rep /tmp/olmoe.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe -t 16
        bench olmoe_cpumoe_split_ab$rep /tmp/olmoe.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe --cpu-misses -t 16
        bench olmoe_cpumoe_split38_ab$rep /tmp/olmoe.gguf -p 0 -n 64 -r 3 --gpu --cpu-moe --pcie-frac 0.375 -t 16
        bench q3_ncmoe36_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --n-cpu-moe 36 -t 16
        bench q3_ncmoe36_split_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --n-cpu-moe 36 --cpu-misses -t 16
        [ "${SPLIT_AB:-0}" = 2 ] && continue # 2: the --cpu-moe rows only
        bench q3_ncmoe24_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --n-cpu-moe 24 -t 16
        bench q3_ncmoe24_split_ab$rep /tmp/q3.gguf -p 0 -n 64 -r 3 --gpu --n-cpu-moe 24 --cpu-misses -t 16
    done
    grep -h -E "cpu-misses" "$R"/bench_*split_ab1.err 2>/dev/null | cut -c1-200 | sort | uniq | head -8
    python3 - "$R" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*_ab[12].json"))):
    try: rows = json.load(open(f))
    except Exception as e: print(os.path.basename(f), "unreadable", e); continue
    for r in rows.get("rows", []):
        print(f"{os.path.basename(f)[6:-5]:28s} {r['test']}{r['n']:<5d} {r['tok_s']:8.2f} +- {r['sd']:.2f}"
              f"  rows GPU/CPU {r['experts']['rows_gpu']}/{r['experts']['rows_cpu']}")
PY
fi
# ---- CPU inference on the host (issue 3's table): default model and the Qwen3 shape, 1 and 16 threads ----
if [ "${CPU:-1}" = 1 ] && [ "$(el)" -lt "$BUDGET" ]; then
    THREADS="1 16" NPROMPT=512 NGEN=128 REPS=1 timeout 120 bash bench/cpu/bench_cpu.sh \
        models/strata-tiny-moe-q8_0.gguf "$R/cpu-tiny" > /dev/null 2>&1; echo "(cpu tiny at $(el)s)"
    THREADS="16" NPROMPT=512 NGEN=64 REPS=1 timeout 150 bash bench/cpu/bench_cpu.sh /tmp/q3.gguf "$R/cpu-qwen3-16t" \
        > /dev/null 2>&1; echo "(cpu qwen3 16t at $(el)s)"
    THREADS="1" NPROMPT=64 NGEN=16 REPS=1 timeout 150 bash bench/cpu/bench_cpu.sh /tmp/q3.gguf "$R/cpu-qwen3-1t" \
        > /dev/null 2>&1; echo "(cpu qwen3 1t at $(el)s)"
    cat "$R"/cpu-*.md 2>/dev/null
fi
# ---- one token's CPU expert step, one dispatch against three stages (MOE_STEP=1; bench_moe_step:
# random qwen3-shaped Q4_K experts from DRAM, 16 threads held through a 40 us gap, as in a
# --cpu-moe decode step's CPU layer) ----
if [ "${MOE_STEP:-0}" = 1 ] && make -j16 CUDA=1 build/bench_moe_step > /dev/null 2>&1; then
    ./build/bench_moe_step 16 128 300 60 2>&1 | tee "$R/bench_moe_step.txt"
fi
# ---- the disk's expert read rate (O_DIRECT, the streamed tier's bound; DISK=1) ----
if [ "${DISK:-0}" = 1 ] && [ "$(el)" -lt "$BUDGET" ] && make -j16 CUDA=1 bench > /dev/null 2>&1; then
    df -h /tmp | tail -1
    timeout 60 ./build/bench_stream /tmp/q3.gguf --seconds 2 2>&1 | tee "$R/bench_stream.txt" | tail -8
fi
# the offloading sweep (table, JSON, PNG where matplotlib is there) for docs/PERFORMANCE.md
if [ "${OFFLOAD:-1}" = 1 ] && [ "${SWEEP:-1}" = 1 ] && [ "$(el)" -lt "$BUDGET" ]; then
    timeout $(( BUDGET + 90 - $(el) )) python3 bench/cpu/offload_sweep.py /tmp/q3.gguf --tier gpu \
        --shares 0,25,50,100 -n 32 --static --anchors "0:43.6,25:48.6,50:76.0,100:282.6" \
        --args "-t 16" --out "$R/sweep_q3_gpu" 2>&1 | tail -10
fi
# the same sweep at depth 16K (DEPTH_SWEEP=1; llama.cpp has no offloaded figures at depth)
if [ "${DEPTH_SWEEP:-0}" = 1 ] && [ "$(el)" -lt "$BUDGET" ]; then
    timeout $(( BUDGET + 150 - $(el) )) python3 bench/cpu/offload_sweep.py /tmp/q3.gguf --tier gpu \
        --shares 0,25,50,100 -n 32 -d 16384 --static --args "-t 16" --out "$R/sweep_q3_gpu_d16k" 2>&1 | tail -10
fi
echo "all done at $(el)s"
