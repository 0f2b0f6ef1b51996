#!/usr/bin/env bash
# bench_cpu.sh - CPU prefill and decode speed of one model with ./strata, at 1 thread and at all
# cores: a prompt of about NPROMPT tokens (default 512) then NGEN generated tokens (default 128,
# greedy, --ignore-eos), timed by the CLI's own stats (--stats-json). Writes OUT.md (a markdown
# table) and OUT.json, with the weight bytes one decoded token must read (dense tensors whole,
# expert tensors n_expert_used / n_expert of them) and the bandwidth that implies.
#
#   bench/cpu/bench_cpu.sh MODEL.gguf [OUT_PREFIX]        (default OUT_PREFIX bench/results/cpu-NAME)
#   env: STRATA=./strata  THREADS="1 $(nproc)"  NPROMPT=512  NGEN=128  REPS=1 (best of REPS)
#        TEXT=/usr/share/common-licenses/GPL-3 (the prompt source)  KV=f16
# Needs python3 with numpy and cffi (the repository's python/strata package, for the prompt and the
# byte count) and a built libstrata.so (STRATA_LIB, else the repository's).
set -euo pipefail
cd "$(dirname "$0")/../.."

MODEL=${1:?usage: bench/cpu/bench_cpu.sh MODEL.gguf [OUT_PREFIX]}
OUT=${2:-bench/results/cpu-$(basename "$MODEL" .gguf)}
STRATA=${STRATA:-./strata}
THREADS=${THREADS:-"1 $(nproc)"}
NPROMPT=${NPROMPT:-512}
NGEN=${NGEN:-128}
REPS=${REPS:-1}
TEXT=${TEXT:-/usr/share/common-licenses/GPL-3}
KV=${KV:-f16}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$(dirname "$OUT")"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# a prompt of NPROMPT tokens of real text (repeated if the file is short)
python3 - "$MODEL" "$TEXT" "$NPROMPT" > "$TMP/prompt.txt" <<'EOF'
import sys, strata
model, text, n = sys.argv[1], open(sys.argv[2], encoding="utf-8", errors="replace").read(), int(sys.argv[3])
with strata.Model(model, vocab_only=True) as m:
    ids = m.tokenize(text, add_special=False)
    while len(ids) < n:
        ids += ids
    sys.stdout.write(m.detokenize(ids[:n]))
EOF

for T in $THREADS; do
    for r in $(seq 1 "$REPS"); do
        "$STRATA" -m "$MODEL" -f "$TMP/prompt.txt" -n "$NGEN" -t "$T" -c $((NPROMPT + NGEN + 64)) \
            --cpu --temp 0 --ignore-eos --no-echo --quiet --kv-type "$KV" \
            --stats-json "$TMP/t$T-r$r.json" > /dev/null
    done
done

python3 - "$MODEL" "$OUT" "$TMP" "$THREADS" "$REPS" <<'EOF'
import glob, json, os, platform, sys
import strata
model, out, tmp, threads, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), int(sys.argv[5])

# weight bytes one decoded token reads: every tensor once, expert tensors only top-k of n_expert
with strata.GGUF(model) as g:
    arch = g.metadata["general.architecture"]
    n_exp = int(g.metadata.get(f"{arch}.expert_count", 0) or 0)
    n_used = int(g.metadata.get(f"{arch}.expert_used_count", 0) or 0)
    per_tok = 0
    for t in g.tensors:
        if "_exps" in t.name and n_exp:
            per_tok += t.n_bytes * n_used // n_exp
        elif t.name == "token_embd.weight":
            per_tok += t.n_bytes // max(t.shape[1] if len(t.shape) > 1 else 1, 1)  # one row
        else:
            per_tok += t.n_bytes

rows = []
for T in threads:
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(tmp, f"t{T}-r*.json")))]
    best_p = max(runs, key=lambda s: s["prompt_tok_s"])
    best_g = max(runs, key=lambda s: s["gen_tok_s"])
    rows.append({"threads": int(T), "n_prompt": best_p["n_prompt"], "prompt_tok_s": best_p["prompt_tok_s"],
                 "n_gen": best_g["n_gen"], "gen_tok_s": best_g["gen_tok_s"], "ttft_s": best_p["ttft_s"],
                 "load_s": best_p["load_s"], "peak_rss_bytes": max(s["peak_rss_bytes"] for s in runs),
                 "decode_gb_s": per_tok * best_g["gen_tok_s"] / 1e9})
res = {"model": model, "arch": arch, "bytes_per_token": per_tok, "host": platform.node(),
       "cpu": platform.processor() or platform.machine(), "nproc": os.cpu_count(), "reps": reps,
       "rows": rows}
with open(out + ".json", "w") as f:
    json.dump(res, f, indent=1)
md = [f"# CPU speed: {os.path.basename(model)} ({arch})", "",
      f"host {res['host']}, {res['nproc']} CPUs; weight bytes read per decoded token "
      f"{per_tok / 2**20:.1f} MiB; best of {reps}", "",
      "| threads | prompt tokens | prefill tok/s | first token s | generated | decode tok/s | decode GB/s | peak RSS MiB |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    md.append(f"| {r['threads']} | {r['n_prompt']} | {r['prompt_tok_s']:.1f} | {r['ttft_s']:.3f} | "
              f"{r['n_gen']} | {r['gen_tok_s']:.2f} | {r['decode_gb_s']:.2f} | "
              f"{r['peak_rss_bytes'] / 2**20:.0f} |")
with open(out + ".md", "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))
print(f"\nwrote {out}.md and {out}.json")
EOF
