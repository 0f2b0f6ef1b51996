#!/usr/bin/env bash
# device_train128.sh - issue 30, item 3 (traces of a trained model at qwen3's expert count) in one
# call: trains bench/routing/train_moe128.py's MoE on the GPU for TRAIN_S seconds (olmoe
# architecture as the default model, but 12 layers x 128 experts, top-8; n_embd 256, expert FFN
# 128, context 1024, the default model's 8192-token vocabulary: 159 M parameters) on English
# technical text from Debian documentation packages, checks it against transformers'
# OlmoeForCausalLM, writes it as an F16 GGUF and Q8_0 with `strata quantize` (as the default
# model's Q8_0), then records its routing with the CPU session (`--route-trace`, one token a pass,
# THREADS threads; a CUDA session refuses traces) on docs/EXPERTS.md's "Routing traces" workloads
# and runs bench/routing_stats.py on each (table, JSON, SVG):
#   heldout    the Python 3.11 tutorial's reST sources (never trained on), the first TRACE_BYTES
#   gpl3       the first 6,000 bytes of the GPL-3 text (the qwen3-narrow row's text)
#   generated  its own sampled text: -p "Dictionary, n." -n GEN_N --temp 0.8 --seed 11 --ignore-eos
# A text longer than the context is read as pieces of at most PIECE_TOKENS tokens (cut at
# paragraphs), one process each, their traces joined in order under one header.
#   run(command="bash bench/device/device_train128.sh", carry=[".whl", ".devdata/train128"], timeout_s=600)
# (~6.5 minutes: TRAIN_S 240 of training, ~25 s of encoding and start, ~30 s of checks and export,
# ~30 s of traces and stats). Carry .devdata/train128 alone, not all of .devdata: the tree that
# travels (37 MiB of tracked files, the default model among them) must stay under 64 MiB.
# .whl: the gguf wheel (dev_wheels; device_gpu.sh's header has the pip download line).
# .devdata/train128 (git-ignored, ~16 MiB): the texts as xz, made on a machine with Debian's apt
# by `PREP=1 bash bench/device/device_train128.sh` (MANIFEST.txt there lists packages and sizes):
# gcide.txt.xz (dict-gcide's 1913 Webster), linux-doc.txt.xz (linux-doc-6.1's reST sources),
# perl-doc.txt.xz (perl-doc's pods): the training text, 73 MB; heldout-python.txt.xz (python3.11-doc's
# reST sources in sorted order, the first ~2 MB: held-out perplexity), tutorial-python.txt.xz (its
# tutorial/: the heldout trace), gpl-3.txt.
# env: TRAIN_S (seconds of training, default 240), BATCH (sequences of 1024 a step, default 32; the
# train script halves it if a step at the expert cap does not fit), TRAIN_EXTRA (more arguments
# of train_moe128.py, e.g. "--lr 3e-3 --cap 8"), TRACE_BYTES (default 16000),
# PIECE_TOKENS (default 1000), GEN_N (default 900), THREADS (default 16), CUDA (default 1: built
# with CUDA, and step 5 measures this model as a speculative target on the GPU; 0: CPU only), PY (default python3), GGUF_MAX (bytes: the
# Q8_0 file comes back when smaller; default 15 MiB), SMOKE=1 (the whole chain on a CPU machine:
# 3 steps of 2 x 128 tokens on 300 KB of each text, short traces, the real config's shapes; 70 s
# on the 2-core dev box with `SMOKE=1 PY=build/venv/bin/python`), PREP=1 (make .devdata/train128,
# then stop).
# $OUT/train128/ gets device_train128.log (everything below), train_log.json, stats_heldout.txt,
# stats_gpl3.txt, stats_generated.txt, placement_*.txt (bench/placement_sim.py on each trace) and results.tar (training output, the stats as JSON and
# SVG, the traces as xz, the trace texts, the generated text, strata info, the GGUFs' sha256 and
# sizes; the Q8_0 GGUF when under GGUF_MAX).
set -u
cd "$(dirname "$0")/../.."
D=.devdata/train128

if [ "${PREP:-0}" = 1 ]; then # on a dev box with apt: the packages, their texts, xz
    P=${PREP_DIR:-/tmp/train128-prep}
    rm -rf "$P" && mkdir -p "$P/x" "$D" || exit 1
    (cd "$P" && apt-get download dict-gcide linux-doc-6.1 perl-doc python3.11-doc) || exit 1
    for f in "$P"/*.deb; do dpkg-deb -x "$f" "$P/x" || exit 1; done
    python3 - "$P/x/usr/share" "$P" <<'EOF' || exit 1
import glob, gzip, sys
src, out = sys.argv[1:3]
def cat(files, name, limit=None):  # documents joined by a blank-line triple (the train script's split)
    n = 0
    with open(f"{out}/{name}", "w", encoding="utf-8") as o:
        for f in files:
            op = gzip.open if f.endswith(".dz") else open
            with op(f, "rt", encoding="utf-8", errors="replace") as fh:
                t = fh.read().strip("\n")
            if limit and n + len(t) > limit and n:
                break
            o.write(t + "\n\n\n")
            n += len(t) + 3
    print(name, len(files), "files", n, "chars")
cat([f"{src}/dictd/gcide.dict.dz"], "gcide.txt")
cat(sorted(glob.glob(f"{src}/doc/linux-doc-6.1/html/_sources/**/*.txt", recursive=True)), "linux-doc.txt")
cat(sorted(glob.glob(f"{src}/perl/**/*.pod", recursive=True)), "perl-doc.txt")
py = sorted(glob.glob(f"{src}/doc/python3.11/html/_sources/**/*.txt", recursive=True))
cat(py, "heldout-python.txt", limit=2_000_000)
cat([f for f in py if "/_sources/tutorial/" in f], "tutorial-python.txt")
EOF
    rm -f "$D"/*.xz
    for f in gcide linux-doc perl-doc heldout-python tutorial-python; do
        xz -9 -T1 -c "$P/$f.txt" > "$D/$f.txt.xz" || exit 1
    done
    cp /usr/share/common-licenses/GPL-3 "$D/gpl-3.txt" || exit 1
    {
        echo "# .devdata/train128: made by PREP=1 bash bench/device/device_train128.sh on $(date -u +%F)"
        for f in "$P"/*.deb; do echo "package $(dpkg-deb -f "$f" Package) $(dpkg-deb -f "$f" Version)"; done
        for f in gcide linux-doc perl-doc heldout-python tutorial-python; do
            echo "$f.txt $(stat -c %s "$P/$f.txt") bytes, $f.txt.xz $(stat -c %s "$D/$f.txt.xz") bytes"
        done
        echo "gpl-3.txt $(stat -c %s "$D/gpl-3.txt") bytes (/usr/share/common-licenses/GPL-3)"
        (cd "$D" && sha256sum ./*.xz gpl-3.txt)
    } > "$D/MANIFEST.txt"
    cat "$D/MANIFEST.txt"
    du -sh "$D"
    exit 0
fi

. bench/device/device_common.sh
OUT="${OUT:-/tmp/strata-out}"
O="$OUT/train128"
R=/tmp/train128_results   # everything tarred into $O/results.tar at exit
W=/tmp/train128_work      # the model files (F16 ~318 MB, Q8_0 ~169 MB)
rm -rf "$R" "$W"; mkdir -p "$O" "$R" "$W"
trap 'tar -C "$R" -cf "$O/results.tar" . 2>/dev/null' EXIT
trap 'exit 143' TERM INT
dev_log train128 "$O"
SMOKE=${SMOKE:-0}
PY=${PY:-python3}
THREADS=${THREADS:-16}
JOBS=16
TRAIN_ARGS=(--seconds "${TRAIN_S:-240}" --batch "${BATCH:-32}")
read -r -a EXTRA <<< "${TRAIN_EXTRA:-}"
TRACE_BYTES=${TRACE_BYTES:-16000}
PIECE_TOKENS=${PIECE_TOKENS:-1000}
GEN_N=${GEN_N:-900}
if [ "$SMOKE" = 1 ]; then # a CPU machine: the whole chain, tiny
    JOBS=$(nproc); THREADS=${THREADS_SMOKE:-$(nproc)}
    TRAIN_ARGS=(--seconds 600 --steps 3 --batch 2 --seq 128 --max-chars 300000 --eval-chunks 2 --warmup 2)
    TRACE_BYTES=2500; PIECE_TOKENS=400; GEN_N=32
fi
echo "train128: SMOKE=$SMOKE, ${TRAIN_ARGS[*]} ${TRAIN_EXTRA:-}, trace $TRACE_BYTES bytes in pieces of $PIECE_TOKENS tokens, $GEN_N generated, $THREADS threads"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
echo "cpu: $(nproc) x$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for f in gcide linux-doc perl-doc heldout-python tutorial-python; do
    [ -f "$D/$f.txt.xz" ] || { echo "missing $D/$f.txt.xz: carry .devdata/train128 (PREP=1 makes it)"; exit 1; }
done
if ! $PY -c "import gguf" 2> /dev/null; then dev_wheels || { echo "no gguf package: carry .whl"; exit 1; }; fi
$PY -c "import torch, transformers, tokenizers, gguf; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), \
'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)" || exit 1

# the CLI, built while the text is encoded and the model trains (the CPU session is all it needs)
rm -f /tmp/train128_build.done
( make -j"$JOBS" CUDA="${CUDA:-1}" BUILD=build-t128 OUTDIR=build-t128 build-t128/strata > "$R/build.log" 2>&1 &&
    echo ok > /tmp/train128_build.done ) &
BUILD_PID=$!
S=build-t128/strata

# 1. training (stdout also in $R/train.log)
PYTHONUNBUFFERED=1 $PY bench/routing/train_moe128.py --train "$D/gcide.txt.xz" "$D/linux-doc.txt.xz" \
    "$D/perl-doc.txt.xz" --heldout "$D/heldout-python.txt.xz" --vocab-gguf models/strata-tiny-moe-q8_0.gguf \
    --out "$W" --name strata-moe128 "${TRAIN_ARGS[@]}" ${EXTRA[@]+"${EXTRA[@]}"} 2>&1 | tee "$R/train.log"
rc=${PIPESTATUS[0]}
echo "train rc=$rc at $(el)s"
[ -f "$W/strata-moe128-f16.gguf" ] || { echo "no GGUF written"; exit 1; }
cp "$W/train_log.json" "$O/"; cp "$W/train_log.json" "$W/config.json" "$W/tokenizer.json" "$R/"
wait "$BUILD_PID"
[ -f /tmp/train128_build.done ] || { echo "BUILD FAILED"; grep -E "error|Error" "$R/build.log" | head -10; exit 1; }
echo "build ok at $(el)s"

# 2. Q8_0 as the default model's (norms and routers F32), what the file holds, sha256
Q8="$W/strata-moe128-q8_0.gguf"
$S quantize "$W/strata-moe128-f16.gguf" "$Q8" --type q8_0 -t "$THREADS" > "$R/quantize.log" 2>&1 ||
    { echo "quantize failed"; tail -5 "$R/quantize.log"; exit 1; }
$S info "$Q8" > "$R/info.txt" 2>&1
head -30 "$R/info.txt"
(cd "$W" && for f in strata-moe128-f16.gguf strata-moe128-q8_0.gguf; do
    echo "$(sha256sum "$f" | cut -d' ' -f1)  $(stat -c %s "$f")  $f"; done) | tee "$R/gguf.sha256"
[ "$(stat -c %s "$Q8")" -lt "${GGUF_MAX:-15728640}" ] && cp "$Q8" "$O/"
# the same greedy continuation as the train log's last sample, through Strata (Q8_0, CPU)
echo "strata greedy (Q8_0, CPU): $($S run -m "$Q8" -p "Dictionary, n." -n 40 --temp 0 --cpu -t "$THREADS" 2> /dev/null |
    tr '\n' ' ' | cut -c1-300)"
echo "quantized at $(el)s"

# 3. the traces
python3 -c "import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" \
    "$D/tutorial-python.txt.xz" | head -c "$TRACE_BYTES" > "$R/text_heldout.txt"
head -c "$([ "$SMOKE" = 1 ] && echo 2500 || echo 6000)" "$D/gpl-3.txt" > "$R/text_gpl3.txt"
trace_text() { # NAME TEXT: one strata process a piece, one token a pass; $R/trace_NAME.jsonl
    local n=$1 p k=0 d=/tmp/train128_$1
    rm -rf "$d"; mkdir -p "$d"
    $PY - "$W/tokenizer.json" "$2" "$d" "$PIECE_TOKENS" <<'EOF' || return 1
import sys
from tokenizers import Tokenizer
tok, text, d, cap = Tokenizer.from_file(sys.argv[1]), open(sys.argv[2], encoding="utf-8", errors="replace").read(), sys.argv[3], int(sys.argv[4])
pieces, start = [], 0
while start < len(text):  # the longest run of paragraphs under cap tokens (a line, else cap tokens, when none fits)
    rest = text[start:]
    enc = tok.encode(rest)
    if len(enc.ids) <= cap:
        pieces.append(rest); break
    lim = enc.offsets[cap - 1][1]
    cut = rest.rfind("\n\n", 0, lim)
    cut = cut + 2 if cut > 0 else (rest.rfind("\n", 0, lim) + 1 or lim)
    pieces.append(rest[:cut]); start += cut
for i, p in enumerate(pieces):
    open(f"{d}/piece_{i:03d}.txt", "w", encoding="utf-8").write(p)
print(f"{len(pieces)} pieces of {[len(tok.encode(p).ids) for p in pieces]} tokens")
EOF
    for p in "$d"/piece_*.txt; do
        $S run -m "$Q8" -f "$p" -n 0 -b 1 -c 1024 --cpu -t "$THREADS" --route-trace "${p%.txt}.jsonl" \
            > /dev/null 2>> "$R/trace_$n.err" || { echo "trace $n: strata failed on $p"; tail -3 "$R/trace_$n.err"; return 1; }
    done
    { head -1 "$d/piece_000.jsonl"; for p in "$d"/piece_*.jsonl; do tail -n +2 "$p"; done; } > "$R/trace_$n.jsonl"
}
t1=$(el)
trace_text heldout "$R/text_heldout.txt" && echo "trace heldout at $(el)s"
trace_text gpl3 "$R/text_gpl3.txt" && echo "trace gpl3 at $(el)s"
$S run -m "$Q8" -p "Dictionary, n." -n "$GEN_N" --temp 0.8 --seed 11 --ignore-eos -c 1024 --cpu -t "$THREADS" \
    --route-trace "$R/trace_generated.jsonl" > "$R/text_generated.txt" 2> "$R/trace_generated.err" &&
    echo "trace generated at $(el)s: $(grep -iE "tok/s|decode" "$R/trace_generated.err" | head -2 | tr '\n' ' ')"
echo "traces: $(( $(el) - t1 ))s"

# 4. what they say: routing_stats.py on each (three at once; waited for by pid: dev_log's tee)
pids=()
for n in heldout gpl3 generated; do
    [ -s "$R/trace_$n.jsonl" ] || { echo "no trace $n"; continue; }
    python3 bench/routing_stats.py "$R/trace_$n.jsonl" --json "$R/stats_$n.json" --svg "$R/stats_$n.svg" \
        > "$O/stats_$n.txt" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for n in heldout gpl3 generated; do
    [ -f "$O/stats_$n.txt" ] || continue
    echo "== $n"; cat "$O/stats_$n.txt"; cp "$O/stats_$n.txt" "$R/"
    # the placements priced on this routing with qwen3-30b-a3b's costs (48 layers' worth)
    python3 bench/placement_sim.py "$R/trace_$n.jsonl" --shares 0.25,0.5 --layers 48 \
        --json "$R/placement_$n.json" > "$O/placement_$n.txt" 2>&1 && grep -E "^\| [0-9]" "$O/placement_$n.txt"
done
for n in heldout gpl3 generated; do # xz, or Python's lzma where the machine has no xz
    f="$R/trace_$n.jsonl"
    [ -f "$f" ] || continue
    if command -v xz > /dev/null; then xz -6 -T"$THREADS" "$f"
    else python3 -c "import lzma, sys; lzma.open(sys.argv[1] + '.xz', 'wb', preset=6).write(open(sys.argv[1], 'rb').read())" "$f" && rm "$f"; fi
done
du -b "$R"/trace_*.jsonl.xz 2> /dev/null

# 5. a trained target / draft pair on the GPU (issue 31; CUDA=1 builds): this model as the target,
# the default model (the same vocabulary, 6 layers x 32 experts) as its draft, on held-out text;
# greedy, one process a row: plain, the draft model (fixed windows and the policy), the oracle, and
# with a quarter of the experts in an expert cache, plain against the self-draft
if [ "${CUDA:-1}" = 1 ] && [ "$SMOKE" != 1 ]; then
    head -c 3000 "$R/text_heldout.txt" > /tmp/train128_prompt.txt
    spec_row() { # tag args...
        local tag=$1
        shift
        timeout 100 $S run -m "$Q8" -f /tmp/train128_prompt.txt -n 128 --temp 0 --ignore-eos --no-echo -c 1024 --gpu \
            "$@" --stats-json "$R/spec_$tag.json" > /dev/null 2> "$R/spec_$tag.err"
        python3 - "$R/spec_$tag.json" "$tag" "$(el)" <<'EOF'
import json, sys
p, tag, t = sys.argv[1:]
try:
    s = json.load(open(p))
except Exception as e:
    print(f"spec {tag}: no stats ({e})"); sys.exit()
d = s.get("spec_drafted", 0)
print(f"spec {tag}: {s['gen_tok_s']:.1f} tok/s, {s.get('spec_windows', 0)} windows, acceptance "
      f"{s['spec_accepted'] / d if d else 0:.3f}, {s['spec_emitted'] / s['spec_windows'] if s.get('spec_windows') else 0:.2f} tokens a window at {t}s")
EOF
    }
    TINY=models/strata-tiny-moe-q8_0.gguf
    for pass in 1 2; do
        spec_row plain$pass
        spec_row draft_k4_$pass --draft-model $TINY --draft-max 4
        spec_row draft_auto_$pass --spec auto --draft-model $TINY
        spec_row oracle_k4_$pass --spec oracle --draft-max 4
        spec_row cache384_plain$pass --expert-cache 384 -t "$THREADS"
        spec_row cache384_self_k4_$pass --expert-cache 384 -t "$THREADS" --spec self --draft-max 4
    done
fi
echo "all done at $(el)s"
