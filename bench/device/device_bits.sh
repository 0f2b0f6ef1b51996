#!/usr/bin/env bash
# device_bits.sh - which side moved: the CPU and GPU logits of the default model on the test
# text from this tree and from the previous landing (.devdata/prev), AMX on and off, compared
# byte for byte (strata --logpos, 9 digits); the CPU kernel tests on this host. PREV_TEST=1:
# also the previous landing's test_cuda_session and this tree's on the same host.
#   run(command="bash bench/device/device_bits.sh", carry=[".whl", ".devdata"])
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
O="${OUT:-/tmp/strata-out}"; mkdir -p "$O"
dev_log bits "$O"
nvidia-smi --query-gpu=name --format=csv,noheader; grep -m1 'model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512[a-z0-9_]*|amx[a-z0-9_]*|avx_vnni' | sort -u | tr '\n' ' '; echo
PT=; [ "${PREV_TEST:-0}" = 1 ] && PT=build/tests/test_cuda_session
( cd .devdata/prev && make -j8 CUDA=1 strata $PT > /tmp/prev_build.log 2>&1 ) &
prev_pid=$!
make -j8 CUDA=1 strata build/tests/test_dot build/tests/test_ops build/tests/test_isa_amx build/tests/test_isa_avx512 \
    $PT > /tmp/build.log 2>&1 || { echo BUILD FAILED; tail /tmp/build.log; }
# the previous build only: a bare `wait` also waits for the tee of `exec > >(tee ...)`, which
# never ends (the 2026-12-05 run 18 call spent its last minutes there)
wait "$prev_pid"
./strata --version
for t in test_dot test_ops test_isa_amx test_isa_avx512; do echo "== $t: $(build/tests/$t 2>&1 | tail -1)"; done
python3 - <<'E'
import re
s = open('c/tests/test_cuda_session.c').read()
m = re.search(r'static const char \*TEXT =\s*((?:"[^"]*"\s*)+);', s)
open('/tmp/text.txt', 'w').write(''.join(re.findall(r'"([^"]*)"', m.group(1))))
E
M=models/strata-tiny-moe-q8_0.gguf
for be in cpu gpu; do for amx in 1 0; do for b in head prev; do
    bin=./strata; [ $b = prev ] && bin=.devdata/prev/strata
    STRATA_AMX=$amx $bin -m $M -f /tmp/text.txt -n 0 -b 64 -t 2 --$be -c 1024 --logpos /tmp/lp_${be}_${amx}_$b.jsonl > /dev/null 2>&1
done
cmp -s /tmp/lp_${be}_${amx}_head.jsonl /tmp/lp_${be}_${amx}_prev.jsonl && s=same || s=DIFFER
echo "$be amx=$amx head vs prev: $s"; done; done
for b in head prev; do echo "cpu $b amx on vs off: $(cmp -s /tmp/lp_cpu_1_$b.jsonl /tmp/lp_cpu_0_$b.jsonl && echo same || echo DIFFER)"; done
export PYTHONPATH=
python3 tools/kl.py /tmp/lp_cpu_1_prev.jsonl /tmp/lp_cpu_1_head.jsonl | tail -3
python3 tools/kl.py /tmp/lp_gpu_1_prev.jsonl /tmp/lp_gpu_1_head.jsonl | tail -3
if [ -n "$PT" ]; then
    echo "== prev test_cuda_session:"; .devdata/prev/build/tests/test_cuda_session 2>&1 | grep -E "default model|FAIL|passed"
    echo "== head test_cuda_session:"; build/tests/test_cuda_session 2>&1 | grep -E "default model|FAIL|passed"
fi
tar -C /tmp -cf "$O/lp.tar" $(cd /tmp && ls lp_*.jsonl)
