#!/usr/bin/env bash
# device_confirm.sh - issue 6's rows in one device call (meant for the H200 of ANCHORS.md): the
# GPU tests that cover the default paths, the all-GPU rows (qwen3 pp512 / tg128 at depth 0 and
# 16K, olmoe pp512 / tg128 and pp512 @ 16K) through device_gpu.sh, then the `--cpu-moe` decode
# rows, the split off against the default (auto), and the greedy-text identity of the shares
# through device_exact.sh (its tests skipped: test_cuda_moe and test_cuda_session ran first).
#   run(command="bash bench/device/device_confirm.sh", carry=[".whl", ".devdata"], timeout_s=600)   (~400 s)
# $OUT: device_gpu.log, cuda_check.log, results.tar, device_exact.log, device_split.log / .jsonl.
set -u
cd "$(dirname "$0")/../.."
BUDGET=${BUDGET:-260} CHECK=1 TESTS="test_cuda_session test_cuda_moe test_cuda_moe_lowbit" ATTN=0 MMQ=0 E2E=0 PREV=0 NOGRAPHS=0 \
    OFFLOAD=0 CPU=0 ROWS='^(q3_gpu|q3_gpu_d16k|olmoe_gpu|olmoe_gpu_d16k)$' bash bench/device/device_gpu.sh |
    grep -E "^(NVIDIA|build|cuda-check|[0-9]+ passed|\| (q3|olmoe))|n_cpu_moe -1, cpu_misses"
TESTS=0 REPS=${REPS:-3} OREPS=${OREPS:-2} QROWS="new:--no-cpu-misses new:" OROWS="new:--no-cpu-misses new:" \
    bash bench/device/device_exact.sh | grep -vE "^\(pass"
