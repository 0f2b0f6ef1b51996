#!/usr/bin/env bash
# device_place.sh - issue 30 on one GPU machine: decode (tg64) of the spread-routing qwen3-30b-a3b
# file with none, a quarter and half of its expert bytes on the GPU, every placement Strata has
# for that memory beside llama-bench's -ncmoe in the same call: the static split (host hand-off
# and doorbell), the expert cache with demand loads, with the cost-model split (--cpu-misses) and
# with the doorbell's pool computing the misses, each of the last two with and without
# --cache-admit. Each Strata row gives the cache's hits and misses and the PCIe bytes a token
# (JSON). STAGES "strata" runs those; "llama" builds llama-bench (about 5 minutes; nothing is
# timed meanwhile, the build takes every core) and runs its -ncmoe 36 / 24 / 48 rows, each beside
# the Strata rows of the same memory (interleaved; with the olmoe file's rows too when "olmoe" is
# in STAGES). "fix": test_cuda_degrade and test_cuda_spec, then the rows the fixes of 2026-12-06
# changed (--n-cpu-moe 24's staging, --gpu-mem's static split, --cpu-moe), with test_cuda_session
# first. "degrade":
# DEGRADE_ZERO with real misses: the quality table with a 48-slot cache on the default model
# (bench/cpu/degrade_quality.sh) and decode speed against tau with 1,536 slots on the qwen3 file.
# "prompt": prompts with experts off the GPU (pp512 at 25% / 50%, pp2048 --cpu-moe), staged by
# the cost model, with --stage-split and with --stage-ahead, and llama-bench's rows beside them
# when it is built.
# "defer" (issue 32): --cpu-moe and --n-cpu-moe 24 with --doorbell, plain, every CPU row deferred
# and the default split at 0.1, three interleaved rounds of tg200 at depth 200 (round 1 also at
# depth 30000); "deferq": its quality table on the default
# model (teacher-forced logprobs through the windows, KL by position bucket, tools/kl.py).
# "poolpcie" (issue 30): test_cuda_session and test_cuda_spec (the self-draft with CPU layers), then --expert-cache 1536 / 3072 --doorbell with and
# without --pool-pcie (auto, 3) beside --n-cpu-moe 36 / 24, two interleaved rounds (NGEN=256 lets
# the pool's residency settle: its rows are tg$NGEN).
# "replay" (issue 30): the same placements as "poolpcie" and --expert-cache 1536 --cpu-misses, each
# with --route-replay .devdata/replay/t128_$REPLAY.replay (REPLAY: gpl3, the default; heldout,
# generated): the trained 128-expert model's routing (bench/device/device_train128.sh, run23-s19;
# `bench/routing_stats.py TRACE --replay-out`) on the qwen3 file's experts, two interleaved rounds
# of tg$NGEN (carry .devdata/replay).
# "deferspeed" (issue 32): bench/defer_bench.py's prompts through strata serve with DEFER_PLACE
# (default --cpu-moe), unset / every row / 0.1 interleaved (about a whole call for one placement).
# "server" (issue 33): bench/server_bench.py on the qwen3 file with --cpu-moe. "olmoe": the olmoe-1b-7b file's Strata rows. "sweep" (after llama-bench is built): the
# offloading sweep, 0..100% of the expert bytes on the GPU, the cache, the static split and
# llama-bench's -ncmoe at each share in the same run (bench/cpu/offload_sweep.py --llama), for
# qwen3 and, with "olmoe", olmoe. Two calls on one warm machine keep the files.
#   run(command="bash bench/device/device_place.sh", carry=[".whl", ".devdata/synth_moe.py",
#       ".devdata/ggml-vocab-gpt-2.gguf", ".peer"], timeout_s=600)
# Knobs: STAGES (default "strata llama"; also "fix degrade prompt olmoe sweep"), BUDGET (seconds after which no new row starts, default
# 530), R (repetitions, default 2), NGEN (the decode rows' tokens, default 64).
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
dev_build strata build/tests/test_cuda_session build/tests/test_cuda_degrade build/tests/test_cuda_spec
dev_wait_files
M=/tmp/q3.gguf
# one Strata row: tg64 and the cache / PCIe figures of its stats
srow() { # tag args...
    local tag=$1
    shift
    late "strata $tag" && return
    timeout 150 ./strata bench -m $M -p 0 -n "${NGEN:-64}" -r "$R" --gpu -t 16 "$@" --json "$J/s_$tag.json" \
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
# one Strata prompt row: bench ppP (no decode)
prow() { # tag P args...
    local tag=$1 pp=$2
    shift 2
    late "strata $tag" && return
    timeout 200 ./strata bench -m $M -p "$pp" -n 0 -r "$R" --gpu -t 16 "$@" --json "$J/p_$tag.json" \
        > "$J/p_$tag.md" 2> "$J/p_$tag.err"
    echo "strata $tag: $(python3 -c "import json,sys; print('%.1f' % json.load(open(sys.argv[1]))['rows'][0]['tok_s'])" \
        "$J/p_$tag.json" 2>/dev/null || echo failed) tok/s at $(el)s"
}
# one strata run row (-n 128, --stats-json): decode tok/s and DEGRADE_ZERO's tally
drow() { # tag args...
    local tag=$1
    shift
    late "strata run $tag" && return
    timeout 150 ./strata run -m $M -f LICENSE -n 128 --temp 0 --ignore-eos --no-echo -c 2048 --gpu -t 16 "$@" \
        --stats-json "$J/d_$tag.json" > /dev/null 2> "$J/d_$tag.err"
    python3 -c "import json,sys; s=json.load(open(sys.argv[1])); z=s.get('degrade_zeroed',0); n=s.get('degrade_slots',0); print(f'strata run {sys.argv[2]}: {s[\"gen_tok_s\"]:.1f} tok/s, zeroed {z} of {n} decode slots ({100*z/max(n,1):.1f}%)')" "$J/d_$tag.json" "$tag" 2>/dev/null || echo "strata run $tag: failed"
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
if have poolpcie; then # --pool-pcie: its exact test, then the pool's cache with the GPU's own share of
    # the misses beside the static split of the same memory, two interleaved rounds (NGEN tokens a
    # row: the pool's residency fills its empty slots, then moves 4 experts a step)
    OO=$O; O=$J; DEV_TEST_SHOW="FAIL|pool misses|self-draft|defer" dev_tests build test_cuda_session:150 \
        test_cuda_spec:200; O=$OO
    for r in 1 2; do
        srow zc_ncmoe36_$r --n-cpu-moe 36
        srow zc_bell1536_$r --expert-cache 1536 --doorbell
        srow zc_auto1536_$r --expert-cache 1536 --doorbell --pool-pcie auto
        srow zc_n3_1536_$r --expert-cache 1536 --doorbell --pool-pcie 3
        srow zc_ncmoe24_$r --n-cpu-moe 24
        srow zc_auto3072_$r --expert-cache 3072 --doorbell --pool-pcie auto
    done
    grep -h "pool_pcie\|pool-pcie" "$J"/s_zc_*.err | sort | uniq -c | head -5
fi
if have replay; then # the placements on a trained model's routing (a benchmark mode: the text
    # is not the model's; the cache's hit rates and the CPU's share are the trained routing's)
    RP=.devdata/replay/t128_${REPLAY:-gpl3}.replay
    if [ -f "$RP" ]; then
        for r in 1 2; do
            srow rp_ncmoe36_$r --n-cpu-moe 36 --route-replay $RP
            srow rp_cache1536_$r --expert-cache 1536 --cpu-misses --route-replay $RP
            srow rp_bell1536_$r --expert-cache 1536 --doorbell --route-replay $RP
            srow rp_auto1536_$r --expert-cache 1536 --doorbell --pool-pcie auto --route-replay $RP
            srow rp_ncmoe24_$r --n-cpu-moe 24 --route-replay $RP
            srow rp_bell3072_$r --expert-cache 3072 --doorbell --route-replay $RP
            srow rp_cache3072_$r --expert-cache 3072 --cpu-misses --route-replay $RP
        done
    else
        echo "replay: $RP not carried (carry .devdata/replay)"
    fi
fi
if have fix; then # the 2026-12-06 fixes, unmeasured when they landed
    OO=$O; O=$J; DEV_TEST_SHOW="FAIL|tau|match|stage-split" dev_tests build test_cuda_session:150 test_cuda_degrade:120 test_cuda_spec:200; O=$OO
    srow ncmoe24_fix --n-cpu-moe 24
    srow gpumem6g --gpu-mem 6G
    srow gpumem10g --gpu-mem 10G
    srow ncmoe24_fix2 --n-cpu-moe 24
    srow cpumoe_fix --cpu-moe
    grep -h "gpu-mem\|routed experts of layers\|expected decode" "$J"/s_gpumem*.err | head -8
fi
if have degrade; then # DEGRADE_ZERO with real misses
    late "degrade quality" || MODE="--gpu --expert-cache 48 --degrade-zero" OUT="$J/degrade_quality_gpu.json" \
        STRATA=./strata TAUS="0.01 0.03 0.05 0.1" CTX=512 timeout 200 bash bench/cpu/degrade_quality.sh \
        models/strata-tiny-moe-q8_0.gguf LICENSE > "$J/degrade_quality_gpu.md" 2>&1
    tail -6 "$J/degrade_quality_gpu.md"
    drow nodegrade --expert-cache 1536
    for t in 0.01 0.03 0.05 0.1; do drow tau$t --expert-cache 1536 --degrade-zero --degrade-tau $t; done
fi
if have prompt; then # prompts with experts off the GPU: staging, --stage-split, --stage-ahead
    for rep in 1 2; do
        prow pp512_ncmoe36_$rep 512 --n-cpu-moe 36
        prow pp512_ncmoe36_split_$rep 512 --n-cpu-moe 36 --stage-split
        [ $rep = 1 ] || continue
        prow pp512_ncmoe36_ahead_$rep 512 --n-cpu-moe 36 --stage-ahead
        prow pp512_ncmoe24_$rep 512 --n-cpu-moe 24
        prow pp512_ncmoe24_split_$rep 512 --n-cpu-moe 24 --stage-split
        prow pp2048_cpumoe_$rep 2048 --cpu-moe
        prow pp2048_cpumoe_split_$rep 2048 --cpu-moe --stage-split
        prow pp2048_cpumoe_ahead_$rep 2048 --cpu-moe --stage-ahead
    done
    grep -h "stage auto\|split\|staged" "$J"/p_pp512_ncmoe36_split_1.err | head -4
    if [ -f /tmp/llama.done ]; then
        for x in "512 36" "512 24" "2048 48"; do
            set -- $x
            late "llama pp$1" && continue
            timeout 200 bash .peer/llama_bench.sh run -m $M -ngl 99 -fa 1 -p $1 -n 0 -r "$R" -ncmoe $2 -t 16 \
                > "$J/l_pp$1_ncmoe$2.md" 2> "$J/l_pp$1_ncmoe$2.err"
            echo "llama pp$1 -ncmoe $2: $(grep -E "pp$1" "$J/l_pp$1_ncmoe$2.md" | awk -F'|' '{print $(NF-1)}') at $(el)s"
        done
    fi
fi
if have defer; then # issue 32: the pool's CPU layers deferred; arms interleaved, three rounds
    drow2() { # tag args...: tg200 at depth 200 (low context) and, round 1, at depth 30000
        local tag=$1 d=200
        shift
        late "defer $tag" && return
        [ "${tag%_1}" != "$tag" ] && d=200,30000
        timeout 240 ./strata bench -m $M -p 0 -n 200 -d $d -r 1 --gpu -t 16 -c 32768 "$@" --json "$J/f_$tag.json" \
            > "$J/f_$tag.md" 2> "$J/f_$tag.err"
        echo "defer $tag: $(python3 -c "import json,sys; print(' '.join('d%d %.1f' % (r['depth'], r['tok_s']) for r in json.load(open(sys.argv[1]))['rows']))" \
            "$J/f_$tag.json" 2>/dev/null || echo failed) tok/s at $(el)s"
    }
    for rep in 1 2 3; do
        for pl in "cpumoe --cpu-moe" "ncmoe24 --n-cpu-moe 24"; do
            set -- $pl
            tag=$1
            shift
            drow2 ${tag}_bell_$rep "$@" --doorbell
            drow2 ${tag}_defer_all_$rep "$@" --doorbell --defer-cpu 1 --defer-cpu-below 1
            drow2 ${tag}_defer01_$rep "$@" --doorbell --defer-cpu 1
        done
    done
    grep -h "DEFER" "$J"/f_cpumoe_defer01_1.err | head -3
fi
if have deferspeed; then # issue 32's speed protocol with real prompts through strata serve
    # (bench/defer_bench.py: 12 prompts x 200 tokens, 3 rounds, and 3 prompts of ~30K tokens; each
    # arm a server of its own, interleaved): DEFER_PLACE (default "--cpu-moe"; "--n-cpu-moe 24")
    late "deferspeed" || timeout $((BUDGET - $(el) + 60)) python3 bench/defer_bench.py -m $M \
        --args "--gpu ${DEFER_PLACE:---cpu-moe} --doorbell -t 16" --out "$J/defer_bench.json" 2>&1 |
        grep -vE "^\[|^strata: (running|serve)" | tail -30
fi
if have deferq; then # issue 32's quality table: teacher-forced logprobs through the windows (of 8
    # rows, --draft-max 7: the pool serves at most ST_POOL_T = 8 rows, and a window it does not
    # serve is not deferred)
    cat docs/EXPERTS.md docs/SPECULATIVE.md | head -c 9000 > /tmp/deferq.txt
    qrow() { # tag args...
        local tag=$1
        shift
        timeout 120 ./strata run -m models/strata-tiny-moe-q8_0.gguf -f /tmp/deferq.txt -n 0 -c 4096 \
            --short-read 100000 --draft-max 7 --logpos "$J/q_$tag.jsonl" --gpu --n-cpu-moe 3 --doorbell -t 16 "$@" \
            > /dev/null 2> "$J/q_$tag.err" || echo "deferq $tag failed: $(tail -2 "$J/q_$tag.err")"
    }
    qrow unset
    qrow unset2
    qrow check --defer-cpu check
    qrow all --defer-cpu 1 --defer-cpu-below 1
    qrow d01 --defer-cpu 1
    qrow scale --route-tail-skip 0.1
    for t in unset2 check scale all d01; do
        python3 tools/kl.py "$J/q_unset.jsonl" "$J/q_$t.jsonl" > "$J/q_kl_$t.txt" 2>&1 # by position bucket
        echo "deferq $t against unset: $(tail -3 "$J/q_kl_$t.txt" | tr '\n' ' ')"
        grep -hE "CPU-layer calls|hand-off|DEFER|deferred" "$J/q_$t.err" | head -3
    done
fi
if have server; then # issue 33: time to first token with and without the slot's cache, 4 streams;
    # llama-server beside it when llama.cpp's tree is there (the llama stage unpacked and built it)
    LS=
    if [ -d /tmp/llama.cpp/build ] && ! late "llama-server build"; then
        cmake -S /tmp/llama.cpp -B /tmp/llama.cpp/build -DLLAMA_BUILD_SERVER=ON > "$J/llama_server_cmake.log" 2>&1 &&
            cmake --build /tmp/llama.cpp/build -j16 --target llama-server > "$J/llama_server_build.log" 2>&1 &&
            LS="--llama-server /tmp/llama.cpp/build/bin/llama-server"
        echo "llama-server: ${LS:-not built (see llama_server_build.log)} at $(el)s"
    fi
    late "server" || timeout 560 python3 bench/server_bench.py -m $M --strata ./strata --args "--gpu --cpu-moe -t 16" \
        --history 2048,8192,30000 --out "$J/server_cpumoe.json" $LS --llama-args "-ngl 99 -ncmoe 48 -t 16 -fa on" \
        2>&1 | grep -v "^strata:" | tail -12
fi
if have olmoe && [ -f /tmp/olmoe.done ]; then
    M=/tmp/olmoe.gguf
    srow olmoe_gpu
    srow olmoe_cpumoe --cpu-moe
    srow olmoe_ncmoe8 --n-cpu-moe 8
    srow olmoe_cache --expert-cache 512 --doorbell
    M=/tmp/q3.gguf
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
        if have olmoe && [ -f /tmp/olmoe.done ]; then
            M=/tmp/olmoe.gguf
            lrow olmoe_gpu
            lrow olmoe_ncmoe16 -ncmoe 16 -t 16
            srow olmoe_cpumoe_b --cpu-moe
            lrow olmoe_ncmoe8 -ncmoe 8 -t 16
            srow olmoe_ncmoe8_b --n-cpu-moe 8
            M=/tmp/q3.gguf
        fi
    fi
fi
if have sweep && [ -f /tmp/llama.done ]; then
    for f in q3 olmoe; do
        [ $f = q3 ] || { have olmoe && [ -f /tmp/olmoe.done ]; } || continue
        late "sweep $f" && continue
        timeout 400 python3 bench/cpu/offload_sweep.py /tmp/$f.gguf --tier gpu --static --shares 0,25,50,75,100 \
            -n 64 -r 1 --llama "bash .peer/llama_bench.sh run" --llama-args "-t 16" --args "-t 16" \
            --out "$J/sweep_${f}_gpu" 2>&1 | tail -12
    done
fi
echo "done at $(el)s"
