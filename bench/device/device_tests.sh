#!/usr/bin/env bash
# device_tests.sh - the GPU tests alone, for a short device call: the CUDA build of the three
# session-level GPU tests (test_cuda_session: placements, staging and its split, deferral, the
# route tail skip, admission; test_cuda_degrade; test_cuda_spec) and their tallies, no synthetic
# files, no benchmark rows. Logs in $OUT/tests.
#   run(command="bash bench/device/device_tests.sh", timeout_s=420)
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
O="${OUT:-/tmp}/tests"
J=/tmp/tests_json
mkdir -p "$O" "$J"
dev_log tests
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
DEV_LOG="$O/build.log" dev_build build/tests/test_cuda_session build/tests/test_cuda_degrade build/tests/test_cuda_spec
DEV_TEST_SHOW="FAIL|stage-split|defer_cpu|route tail|admission" DEV_TEST_SHOW_N=12 \
    dev_tests build test_cuda_session:200 test_cuda_degrade:100 test_cuda_spec:150
echo "done at $(el)s"
