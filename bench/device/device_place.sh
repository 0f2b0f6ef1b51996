#!/usr/bin/env bash
# device_place.sh - issue 30 on one GPU machine: decode (tg64) of the spread-routing qwen3-30b-a3b
# file with none, a quarter and half of its expert bytes on the GPU, every placement Strata has
# for that memory beside llama-bench's -ncmoe in the same call: the static split (host hand-off
# and doorbell), the expert cache with demand loads, with the cost-model split (--cpu-misses) and
# with the doorbell's pool computing the misses, each of the last two with and without
# --cache-admit. Each Strata row gives the cache's hits and misses and the PCIe bytes a token
# (JSON). STAGES "strata" runs those; "llama" builds llama-bench (about 5 minutes; nothing is
# timed meanwhile, the build takes every core) and runs its -ncmoe 36 / 24 / 48 rows, each beside
# the Strata rows of the same memory (interleaved). Two calls on one warm machine keep the file.
#   run(command="bash bench/device/device_place.sh", carry=[".whl", ".devdata/synth_moe.py",
#       ".devdata/ggml-vocab-gpt-2.gguf", ".peer"], timeout_s=600)
# Knobs: STAGES (default "strata llama"), BUDGET (seconds after which no new row starts, default
# 530), R (repetitions, default 2).
# $OUT: device_place.log and place/bench.tar (every row's JSON and stderr).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start place
BUDGET=${BUDGET:-530}
R=${R:-2}
STAGES=${STAGES:-strata llama}
have() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
late() { [ "$(el)" -ge "$BUDGET" ] && { echo "budget reached at $(el)s: $1 skipped"; return 0; }; return 1; }
dev_build strata build/tests/test_cuda_session build/tests/test_cuda_degrade
dev_wait_files
M=/tmp/q3.gguf
# one Strata row: tg64 and the cache / PCIe figures of its stats
srow() { # tag args...
    local tag=$1
    shift
    late "strata $tag" && return
    timeout 150 ./strata bench -m $M -p 0 -n 64 -r "$R" --gpu -t 16 "$@" --json "$J/s_$tag.json" \
        > "$J/s_$tag.md" 2> "$J/s_$tag.err"
    local rc=$?
    python3 - "$J/s_$tag.json" "$tag" "$rc" "$(el)" <<'E'
import json, sys
p, tag, rc, t = sys.argv[1:]
try:
    j = json.load(open(p))
except Exception as e:
    print(f"strata {tag}: rc {rc}, no JSON ({e}) at {t}s"); sys.exit()
rows = j if isinstance(j, list) else j.get("results", j.get("rows", [j]))
for r in rows:
    x = r.get("experts", {})
    h, m = x.get("cache_hits", 0), x.get("cache_misses", 0)
    tok = r.get("n_gen", 64) * r.get("reps", 1) or 1
    print(f"strata {tag}: {r.get('tok_s', r.get('avg_ts', 0)):.1f} tok/s"
          + (f", cache hit {100 * h / (h + m):.1f}%" if h + m else "")
          + f", PCIe {x.get('pcie_bytes', 0) / 1e6:.0f} MB, rows gpu/cpu {x.get('rows_gpu', 0)}/{x.get('rows_cpu', 0)} at {t}s")
E
}
lrow() { # tag args...
    local tag=$1
    shift
    late "llama $tag" && return
    timeout 150 bash .peer/llama_bench.sh run -m $M -ngl 99 -fa 1 -p 0 -n 64 -r "$R" "$@" > "$J/l_$tag.md" 2> "$J/l_$tag.err"
    echo "llama $tag (rc $?): $(grep -E 'tg64' "$J/l_$tag.md" | awk -F'|' '{print $(NF-1)}') at $(el)s"
}
quarter() {
    srow ncmoe36 --n-cpu-moe 36
    srow ncmoe36_bell --n-cpu-moe 36 --doorbell
    srow cache1536 --expert-cache 1536
    srow cache1536_split --expert-cache 1536 --cpu-misses
    srow cache1536_split_admit --expert-cache 1536 --cpu-misses --cache-admit
    srow cache1536_bell --expert-cache 1536 --doorbell
    srow cache1536_bell_admit --expert-cache 1536 --doorbell --cache-admit
}
if have strata; then
    quarter
    srow ncmoe24 --n-cpu-moe 24
    srow ncmoe24_bell --n-cpu-moe 24 --doorbell
    srow cache3072_split_admit --expert-cache 3072 --cpu-misses --cache-admit
    srow cache3072_bell_admit --expert-cache 3072 --doorbell --cache-admit
    srow cpumoe --cpu-moe
    srow cpumoe_bell --cpu-moe --doorbell
    OO=$O; O=$J; DEV_TEST_SHOW="FAIL|admission|tau" dev_tests build test_cuda_session:150 test_cuda_degrade:120; O=$OO
fi
if have llama && [ -f .peer/llama_bench.sh ]; then
    [ -f /tmp/llama.done ] || { bash .peer/llama_bench.sh build > "$J/llama_build.log" 2>&1 && echo ok > /tmp/llama.done; }
    echo "llama-bench built: $([ -f /tmp/llama.done ] && echo yes || tail -3 "$J/llama_build.log") at $(el)s"
    if [ -f /tmp/llama.done ]; then
        lrow ncmoe36 -ncmoe 36 -t 16
        srow ncmoe36_b --n-cpu-moe 36
        srow cache1536_best_b ${BEST25:---expert-cache 1536 --doorbell --cache-admit}
        lrow ncmoe24 -ncmoe 24 -t 16
        srow ncmoe24_b --n-cpu-moe 24
        lrow ncmoe48 -ncmoe 48 -t 16
        srow cpumoe_b --cpu-moe
        lrow ncmoe36_again -ncmoe 36 -t 16
    fi
fi
echo "done at $(el)s"
