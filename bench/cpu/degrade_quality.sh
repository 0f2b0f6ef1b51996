#!/usr/bin/env bash
# degrade_quality.sh - the quality table of DEGRADE_ZERO (docs/DEGRADE_ZERO.md): perplexity and
# KL against the unapproximated run, per tau, in the deterministic evaluation mode
# (STRATA_DEGRADE_EVAL: every routed slot counts as missed, the worst case). The scored half of each
# chunk is read as teacher-forced decode steps in every run, the base included (tau 0 drops nothing
# and is bit-identical to the approximation being off), so only the drops differ.
#   bash bench/cpu/degrade_quality.sh [MODEL] [TEXT]    (defaults: the embedded model, GPL-3 text)
# Prints a markdown table; writes bench/results/degrade_quality.json (OUT=FILE: elsewhere).
# MODE (default "--cpu --degrade-eval") is the session: MODE="--gpu --expert-cache 48
# --degrade-zero" measures real misses of a GPU expert cache instead (timing-free there too: a
# cache miss is a miss whatever the clock says).
set -eu
cd "$(dirname "$0")/../.."
MODEL=${1:-models/strata-tiny-moe-q8_0.gguf}
TEXT=${2:-/usr/share/common-licenses/GPL-3}
TAUS=${TAUS:-"0.01 0.02 0.03 0.05"}
CTX=${CTX:-512}
STRATA=${STRATA:-./strata}
OUTD=bench/results; mkdir -p "$OUTD"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
run() { # tau extra-args... -> stdout+stderr in $TMP/run.txt
    "$STRATA" perplexity -m "$MODEL" -f "$TEXT" -c "$CTX" ${MODE:---cpu --degrade-eval} --degrade-tau "$@" \
        > "$TMP/run.txt" 2>&1
}
run 0 --kl-base "$TMP/base.jsonl"
base_ppl=$(grep -o 'PPL = [0-9.]*' "$TMP/run.txt" | cut -d' ' -f3)
echo "model $MODEL, text $TEXT ($(wc -c < "$TEXT") bytes), -c $CTX, base PPL $base_ppl"
echo
echo "| tau | PPL | PPL change | mean KL | median KL | 99.9% KL | same top-1 | zeroed slots | per layer min..max |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
json="{\"model\": \"$MODEL\", \"text\": \"$TEXT\", \"ctx\": $CTX, \"base_ppl\": $base_ppl, \"rows\": ["
sep=""
for t in $TAUS; do
    run "$t" --kl "$TMP/base.jsonl"
    ppl=$(grep -o 'PPL = [0-9.]*' "$TMP/run.txt" | cut -d' ' -f3)
    line=$(python3 - "$TMP/run.txt" "$ppl" "$base_ppl" "$t" <<'PY'
import re, sys, json
txt = open(sys.argv[1]).read()
ppl, base, tau = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
def num(pat):
    m = re.search(pat, txt)
    return float(m.group(1)) if m else float("nan")
mean = num(r"mean ([0-9.eE+-]+) \+/-")
med = num(r"median ([0-9.eE+-]+)")
p999 = num(r"99\.9% ([0-9.eE+-]+)")
same = num(r"same top-1: ([0-9.]+) %")
z = re.search(r"zeroed (\d+) of (\d+) decode slots \(([0-9.]+)%\), per layer ([0-9.]+)%\.\.([0-9.]+)%", txt)
zs, zt, share, lmin, lmax = (int(z.group(1)), int(z.group(2)), float(z.group(3)),
                             float(z.group(4)), float(z.group(5))) if z else (0, 0, 0, 0, 0)
row = dict(tau=tau, ppl=ppl, ppl_change=ppl / base - 1, mean_kl=mean, median_kl=med,
           p999_kl=p999, same_top1=same, zeroed=zs, slots=zt, zeroed_share=share / 100,
           layer_min=lmin / 100, layer_max=lmax / 100)
print(json.dumps(row))
PY
)
    python3 -c "
import json,sys; r=json.loads(sys.argv[1])
print('| %g | %.4f | %+.2f%% | %.5f | %.5f | %.4f | %.2f%% | %.1f%% | %.1f%%..%.1f%% |' % (r['tau'], r['ppl'], 100*r['ppl_change'], r['mean_kl'], r['median_kl'], r['p999_kl'], r['same_top1'], 100*r['zeroed_share'], 100*r['layer_min'], 100*r['layer_max']))" "$line"
    json="$json$sep$line"; sep=", "
done
echo "$json]}" > "${OUT:-$OUTD/degrade_quality.json}"
