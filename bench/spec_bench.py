#!/usr/bin/env python3
"""spec_bench.py - speculative decoding against plain decoding, same file, same flags, interleaved.

For each text (repetitive, code-like, prose: the prompt, then greedy generation of -n tokens with
--ignore-eos) and each mode (plain; --spec ngram; --draft-model F for each --draft given; each of
those drafters under --spec auto's draft policy; the target as its own draft with
--self-as-draft, the upper bound of acceptance) it runs
`strata run ... --temp 0 --stats-json` R times, modes interleaved within each round, and reports
the median decode tok/s, the ratio to plain in the same rounds, the per-token acceptance
(accepted / drafted), tokens per verify window, and whether the text equals plain's (it must:
greedy speculation keeps the text). Prints a markdown table and writes JSON:

  python3 bench/spec_bench.py models/strata-tiny-moe-q8_0.gguf --draft /tmp/tiny-q4_0.gguf \\
      --self-as-draft -n 128 -r 3 --args "-t 4" --json spec.json
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TEXTS = {
    "repetitive": "The cat sat on the mat. The dog sat on the log. " * 6 + "The cat sat on",
    "code": ("static int sum(const int *a, int n) {\n    int s = 0;\n    for (int i = 0; i < n; i++)\n"
             "        s += a[i];\n    return s;\n}\n\nstatic int max(const int *a, int n) {\n"
             "    int m = a[0];\n    for (int i = 1; i < n; i++)\n"),
    "prose": "Dictionary, n. A malevolent literary device for cramping the growth of a language",
}


def run_once(cli: Path, model: Path, text: str, n: int, extra: list[str], args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as td:
        stats = Path(td) / "s.json"
        cmd = [str(cli), "run", "-m", str(model), "-p", text, "-n", str(n), "--temp", "0",
               "--ignore-eos", "--no-echo", "--quiet", "--stats-json", str(stats), *args, *extra]
        p = subprocess.run(cmd, capture_output=True, timeout=1800)
        if p.returncode != 0:
            sys.exit(f"spec_bench: {shlex.join(cmd)} failed ({p.returncode}):\n"
                     f"{p.stderr.decode(errors='replace')[-2000:]}")
        s = json.loads(stats.read_text())
        s["text"] = p.stdout.decode(errors="replace")
        return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--draft", type=Path, action="append", default=[], help="a draft model (repeatable)")
    ap.add_argument("--self-as-draft", action="store_true", help="also the target as its own draft")
    ap.add_argument("--oracle", default="", help="oracle rates, comma-separated: modes 'oracle R' "
                    "(fixed windows) and 'auto (oracle R)' (the draft policy over it); benchmarks only")
    ap.add_argument("--self", action="store_true", help="also --spec self (needs --args with "
                    "--ram-budget on the CPU or --expert-cache on the GPU)")
    ap.add_argument("-n", type=int, default=128, help="tokens generated a run")
    ap.add_argument("-r", type=int, default=3, help="rounds (modes interleaved in each)")
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--texts", default=",".join(TEXTS), help="which texts: " + ",".join(TEXTS))
    ap.add_argument("--args", default="", help="more strata run options for every mode")
    ap.add_argument("--cli", type=Path, default=REPO / "strata")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()

    dm = ["--draft-max", str(a.draft_max)]
    modes = {"plain": [], "ngram": ["--spec", "ngram", *dm], "auto (ngram)": ["--spec", "auto", *dm]}
    for d in a.draft:
        modes[f"draft {d.name}"] = ["--draft-model", str(d), *dm]
        modes[f"auto (draft {d.name})"] = ["--spec", "auto", "--draft-model", str(d), *dm]
    if a.self_as_draft:
        modes["draft = target"] = ["--draft-model", str(a.model), *dm]
    for r in filter(None, a.oracle.split(",")):
        modes[f"oracle {r}"] = ["--spec", "oracle", "--oracle-rate", r, *dm]
        modes[f"auto (oracle {r})"] = ["--spec", "auto", "--oracle-rate", r, *dm]
    if a.self:
        modes["self"] = ["--spec", "self", *dm]
    extra = shlex.split(a.args)
    rows = []
    for tname in a.texts.split(","):
        text = TEXTS[tname]
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(a.r):
            for m, flags in modes.items():
                runs[m].append(run_once(a.cli, a.model, text, a.n, flags, extra))
        base = statistics.median(r["gen_tok_s"] for r in runs["plain"])
        for m, rs in runs.items():
            tps = statistics.median(r["gen_tok_s"] for r in rs)
            r0 = rs[0]
            drafted, acc = r0.get("spec_drafted", 0), r0.get("spec_accepted", 0)
            win = r0.get("spec_windows", 0)
            rows.append({"text": tname, "mode": m, "tok_s": tps, "ratio": tps / base if base else 0.0,
                         "acceptance": acc / drafted if drafted else None,
                         "tokens_per_window": r0.get("spec_emitted", 0) / win if win else None,
                         "windows": win, "drafted": drafted, "accepted": acc,
                         "policy_plain_steps": r0.get("policy_plain_steps"),
                         "policy_break_even": r0.get("policy_break_even"),
                         "same_text": all(r["text"] == runs["plain"][0]["text"] for r in rs),
                         "all_tok_s": [r["gen_tok_s"] for r in rs]})
    print(f"model {a.model}, -n {a.n}, {a.r} rounds, args '{a.args}', backend {r0['backend']}\n")
    print("| text | mode | decode tok/s | vs plain | acceptance | tokens/window | windows / plain steps | same text |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{100 * r['acceptance']:.1f}%"
        tpw = "-" if r["tokens_per_window"] is None else f"{r['tokens_per_window']:.2f}"
        steps = "-" if r["policy_plain_steps"] is None else f"{r['windows']} / {r['policy_plain_steps']}"
        print(f"| {r['text']} | {r['mode']} | {r['tok_s']:.1f} | {r['ratio']:.2f}x | {acc} | {tpw} | "
              f"{steps} | {'yes' if r['same_text'] else 'NO'} |")
    if a.json:
        a.json.write_text(json.dumps({"model": str(a.model), "n": a.n, "rounds": a.r, "args": a.args,
                                      "backend": r0["backend"], "rows": rows}, indent=1) + "\n")
    if not all(r["same_text"] for r in rows):
        sys.exit("spec_bench: a speculative run's text differs from plain greedy's")


if __name__ == "__main__":
    main()
