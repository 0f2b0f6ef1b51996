#!/usr/bin/env bash
# device_spec.sh - verify windows (issue 31) on one GPU machine: the window tests on the GPU
# (test_cuda_spec: rows of windows against one-token steps' bits per placement; test_speculate on
# the host CPU), then, per placement, the window-cost curve (`strata bench -w 1..9`) on the
# synthetic qwen3-30b-a3b file (spread routing) and the trained default model, and end-to-end
# decode with speculation against without: the oracle drafter at chosen acceptance (fixed
# windows and the draft policy), prompt lookup, the policy on prompt lookup, the self-draft with
# an expert cache; the verify profile of one oracle run a placement. One process a row.
#   run(command="bash bench/device/device_spec.sh", carry=[".whl", ".devdata"], timeout_s=600)
# Knobs: STAGES (default "tests curve e2e"; "pairs": the policy against plain, interleaved, PAIRS
# rounds (default 4), the split fixed), PLACES (qwen3 placements of the curve and e2e rows,
# default "gpu cpumoe cache1536 ncmoe24"), N (tokens a run generates, default 128), BUDGET
# (seconds after which no new row starts, default 560). $OUT: device_spec.log and spec/bench.tar
# (the test logs, every row's JSON and stderr).
set -u
cd "$(dirname "$0")/../.."
. bench/device/device_common.sh
dev_start spec
STAGES=${STAGES:-tests curve e2e}
PLACES=${PLACES:-gpu cpumoe cache1536 ncmoe24}
N=${N:-128}
BUDGET=${BUDGET:-560}
have() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
late() { [ "$(el)" -ge "$BUDGET" ] && { echo "budget reached at $(el)s: $1 skipped"; return 0; }; return 1; }
place_args() { # a placement's session options
    case $1 in
        gpu) echo "--gpu" ;;
        cpumoe) echo "--gpu --cpu-moe -t 16" ;;
        ncmoe24) echo "--gpu --n-cpu-moe 24 -t 16" ;;
        cache1536) echo "--gpu --expert-cache 1536 -t 16" ;;
        *) echo "--gpu" ;;
    esac
}
TINY=models/strata-tiny-moe-q8_0.gguf
# prompts: prose (the license's head) and a repetitive one (prompt lookup's case)
head -c 1200 LICENSE > /tmp/spec_prose.txt
python3 -c "print(' '.join(['The cat sat on the mat, and the dog sat on the log.'] * 12))" > /tmp/spec_rep.txt

dev_build strata build/tests/test_cuda_spec build/tests/test_speculate build/tests/test_cuda_degrade

if have tests; then # the logs go into the archive ($O stays where the EXIT trap writes it)
    OO=$O; O=$J/logs; mkdir -p "$O"
    dev_tests build test_cuda_spec:200 test_speculate:120 test_cuda_degrade:120
    grep -E "equal to|DIFFER|match" "$O/test_cuda_spec.log" | head -10
    O=$OO
fi

# the window-cost curve: wN rows (one decode call of N rows, rolled back) at depth 256
curve() { # tag model args...
    local tag=$1 m=$2
    shift 2
    late "curve $tag" && return
    timeout 120 ./strata bench -m "$m" -p 0 -n 32 -w 1,2,3,4,5,6,7,8,9 -d 256 -r 5 "$@" \
        --json "$J/curve_$tag.json" > "$J/curve_$tag.md" 2> "$J/curve_$tag.err"
    echo "curve $tag (rc $?) at $(el)s: $(grep -oE '\| (tg32|w[0-9]) @ d256 \| [0-9.]+' "$J/curve_$tag.md" | awk '{printf "%s %s  ", $2, $6}')"
}
# one end-to-end run: tokens/s of decode and what the windows did
row() { # tag model prompt-file args...
    local tag=$1 m=$2 f=$3
    shift 3
    late "row $tag" && return
    timeout 120 ./strata run -m "$m" -f "$f" -n "$N" --temp 0 --ignore-eos --no-echo -c 2048 "$@" \
        --stats-json "$J/e2e_$tag.json" > "$J/e2e_$tag.txt" 2> "$J/e2e_$tag.err"
    local rc=$?
    python3 - "$J/e2e_$tag.json" "$tag" "$rc" "$(el)" <<'E'
import json, sys
p, tag, rc, t = sys.argv[1:]
try:
    s = json.load(open(p))
except Exception as e:
    print(f"{tag}: rc {rc}, no stats ({e}) at {t}s"); sys.exit()
w = s.get("spec_windows", 0)
acc = s["spec_accepted"] / s["spec_drafted"] if s.get("spec_drafted") else 0
pol = f", policy {s['policy_windows']} windows / {s['policy_plain_steps']} plain, break-even {s['policy_break_even']:.2f}" if "policy_windows" in s else ""
print(f"{tag}: {s['gen_tok_s']:.1f} tok/s, {w} windows, acceptance {acc:.3f}, "
      f"{s['spec_emitted'] / w if w else 0:.2f} tokens a window{pol} at {t}s")
E
}
if have tests; then # the prompt read as windows (--short-read) against one-token steps (-b 1):
    # the decode path's bits (the batch path, -b 512, is other kernels: shown, not required)
    for p in gpu cpumoe; do
        ./strata -m $TINY -f /tmp/spec_prose.txt -n 0 --logpos "$J/lp_${p}_prompt.jsonl" $(place_args $p) > /dev/null 2>&1
        ./strata -m $TINY -f /tmp/spec_prose.txt -n 0 --logpos "$J/lp_${p}_steps.jsonl" -b 1 $(place_args $p) > /dev/null 2>&1
        ./strata -m $TINY -f /tmp/spec_prose.txt -n 0 --logpos "$J/lp_${p}_windows.jsonl" --short-read 4096 $(place_args $p) > /dev/null 2>&1
        if [ -s "$J/lp_${p}_steps.jsonl" ] && cmp -s "$J/lp_${p}_steps.jsonl" "$J/lp_${p}_windows.jsonl"; then
            echo "short-read $p: identical to one-token steps ($(wc -l < "$J/lp_${p}_steps.jsonl") rows)"
        else echo "short-read $p: DIFFERENT from one-token steps, or missing"; fi
        cmp -s "$J/lp_${p}_prompt.jsonl" "$J/lp_${p}_windows.jsonl" && echo "short-read $p: the batch path too"
    done
fi
if have curve; then
    curve tiny_gpu $TINY --gpu
    curve tiny_cpumoe $TINY --gpu --cpu-moe -t 16
fi
if have e2e; then # the trained default model: real text, its routing
    for p in gpu cpumoe; do
        a=$(place_args $p)
        row tiny_${p}_plain $TINY /tmp/spec_prose.txt $a
        for k in 1 2 4 8; do row tiny_${p}_oracle1_k$k $TINY /tmp/spec_prose.txt $a --spec oracle --draft-max $k; done
        row tiny_${p}_rep_plain $TINY /tmp/spec_rep.txt $a
        row tiny_${p}_rep_ngram $TINY /tmp/spec_rep.txt $a --spec ngram
        row tiny_${p}_rep_auto $TINY /tmp/spec_rep.txt $a --spec auto
    done
    row tiny_cache48_plain $TINY /tmp/spec_prose.txt --gpu --expert-cache 48
    for k in 2 4; do row tiny_cache48_self_k$k $TINY /tmp/spec_prose.txt --gpu --expert-cache 48 --spec self --draft-max $k; done
fi

if have curve || have e2e; then dev_wait_files; fi
Q3=/tmp/q3.gguf
if have curve; then
    for p in $PLACES; do curve q3_$p $Q3 $(place_args $p); done
fi
if have e2e; then # the rows that matter most for every placement first, then the rest
    for p in $PLACES; do
        a=$(place_args $p)
        row q3_${p}_plain $Q3 /tmp/spec_prose.txt $a
        row q3_${p}_oracle1_k4 $Q3 /tmp/spec_prose.txt $a --spec oracle --draft-max 4
        row q3_${p}_oracle0.6_k4 $Q3 /tmp/spec_prose.txt $a --spec oracle --oracle-rate 0.6 --draft-max 4
        for r in 0.9 0.3; do row q3_${p}_auto_oracle$r $Q3 /tmp/spec_prose.txt $a --spec auto --oracle-rate $r; done
        case $p in cache*) row q3_${p}_self_k4 $Q3 /tmp/spec_prose.txt $a --spec self --draft-max 4 ;; esac
        row q3_${p}_plain2 $Q3 /tmp/spec_prose.txt $a
    done
    for p in $PLACES; do
        a=$(place_args $p)
        row q3_${p}_oracle0.8_k4 $Q3 /tmp/spec_prose.txt $a --spec oracle --oracle-rate 0.8 --draft-max 4
        row q3_${p}_auto_oracle0.6 $Q3 /tmp/spec_prose.txt $a --spec auto --oracle-rate 0.6
        row q3_${p}_vprofile $Q3 /tmp/spec_prose.txt $a --spec oracle --oracle-rate 0.8 --draft-max 4 --verify-profile
        grep -E '^[|] (plain|[0-9]|all) ' "$J/e2e_q3_${p}_vprofile.err"
        row q3_${p}_rep_plain $Q3 /tmp/spec_rep.txt $a
        row q3_${p}_rep_ngram $Q3 /tmp/spec_rep.txt $a --spec ngram
        row q3_${p}_rep_auto $Q3 /tmp/spec_rep.txt $a --spec auto
        case $p in cache*) row q3_${p}_self_k2 $Q3 /tmp/spec_prose.txt $a --spec self --draft-max 2 ;; esac
    done
fi
if have pairs; then # the policy's 3% bound with experts off the GPU: plain and --spec auto
    # interleaved, PAIRS rounds, the split's share fixed (--pcie-frac) so that no start-up timing
    # moves it between processes; then the combined drafters (prompt lookup + the self-draft)
    for i in $(seq "${PAIRS:-4}"); do
        for p in $PLACES; do
            a="$(place_args $p) --pcie-frac 0.375"
            case $p in gpu) a=$(place_args $p) ;; esac
            row q3_${p}_pair${i}_plain $Q3 /tmp/spec_prose.txt $a
            row q3_${p}_pair${i}_auto0.3 $Q3 /tmp/spec_prose.txt $a --spec auto --oracle-rate 0.3
            row q3_${p}_pair${i}_auto0.7 $Q3 /tmp/spec_prose.txt $a --spec auto --oracle-rate 0.7
        done
    done
    row q3_cache1536_auto_self $Q3 /tmp/spec_prose.txt $(place_args cache1536) --spec auto
    row tiny_cache48_auto_self $TINY /tmp/spec_prose.txt --gpu --expert-cache 48 --spec auto
fi
echo "all done at $(el)s"
