#!/usr/bin/env python3
"""defer_bench.py - issue 32's speed protocol for the deferral of CPU expert rows (docs/DEFERRAL.md):
real prompts through `strata serve`, each arm (unset, every CPU row deferred, the default split at
0.1) a server of its own with the same placement, the arms interleaved round by round.

  low context: N_SHORT prompts (default 12) of about SHORT tokens (default 200), each read whole
               (a distinct start, so no slot reuse) and answered with GEN tokens (default 200),
               ROUNDS rounds (default 3); per round the decode rate over all prompts (tokens after
               the first over the time from the first streamed token to the last) and the prompt
               read rate (prompt tokens over the time to the first token); the median of rounds;
  long context: N_LONG prompts (default 3) of about LONG tokens (default 30000) read from 0, GEN
               tokens each, one round (--long 0: none).

Decode tok/s and its ratio to unset, prompt tok/s (the reads take the host hand-off and never
defer: they should not move). Prints a table, writes JSON. Only the standard library (and
server_bench.py beside it).

    python3 bench/defer_bench.py -m MODEL.gguf [--strata ./strata]
        [--args "--gpu --cpu-moe --doorbell -t 16"] [--rounds 3] [--short 200] [--n-short 12]
        [--long 30000] [--n-long 3] [--gen 200] [--out FILE.json]
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_bench import Server, text_of  # noqa: E402

ARMS = [("unset", ""), ("every_row", "--defer-cpu 1 --defer-cpu-below 1"), ("split_0.1", "--defer-cpu 1")]


def complete(srv, prompt, gen):
    """One streamed completion: (prompt tokens, generated tokens, seconds to the first token,
    seconds from the first token to the last)."""
    first, last, _, usage = srv.stream(prompt, gen)
    if first is None:
        raise SystemExit("a completion streamed no text")
    usage = usage or {}
    return usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), first, last - first


def run_prompts(srv, prompts, gen):
    """Decode tok/s over the prompts (tokens after each one's first over the time after it) and
    prompt tok/s (prompt tokens over the times to the first token)."""
    ptok = gtok = 0
    pt = gt = 0.0
    for p in prompts:
        n_p, n_g, t_first, t_rest = complete(srv, p, gen)
        ptok, pt = ptok + n_p, pt + t_first
        gtok, gt = gtok + max(n_g - 1, 0), gt + t_rest
    return {"decode_tok_s": gtok / gt if gt > 0 else 0.0, "prompt_tok_s": ptok / pt if pt > 0 else 0.0,
            "prompt_tokens": ptok, "decode_tokens": gtok}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--args", default="--gpu --cpu-moe --doorbell -t 16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short", type=int, default=200)
    ap.add_argument("--n-short", type=int, default=12)
    ap.add_argument("--long", type=int, default=30000)
    ap.add_argument("--n-long", type=int, default=3)
    ap.add_argument("--gen", type=int, default=200)
    ap.add_argument("--out", default="bench/results/defer_bench.json")
    a = ap.parse_args()
    ctx = max(a.short, a.long) + a.gen + 256
    res = {"model": a.model, "args": a.args, "gen": a.gen, "short": [], "long": []}
    prompts = None
    for rnd in range(1, a.rounds + 1):
        for arm, flags in ARMS:  # interleaved: every arm once per round
            srv = Server(a.strata, a.model, f"{a.args} {flags}", ctx, 1)
            try:
                if prompts is None:  # the same texts for every arm and round
                    prompts = [text_of(srv, a.short, f"prompt {i}") for i in range(a.n_short)]
                complete(srv, text_of(srv, 32, "warm-up"), 8)
                row = {"arm": arm, "round": rnd, **run_prompts(srv, prompts, a.gen)}
                res["short"].append(row)
                print(f"short round {rnd} {arm}: decode {row['decode_tok_s']:.1f} tok/s ({row['decode_tokens']} "
                      f"tokens), prompts {row['prompt_tok_s']:.0f} tok/s", flush=True)
                if rnd == 1 and a.long > 0 and a.n_long > 0:
                    longs = [text_of(srv, a.long, f"long {i}") for i in range(a.n_long)]
                    lrow = {"arm": arm, **run_prompts(srv, longs, a.gen)}
                    res["long"].append(lrow)
                    print(f"long {arm}: decode {lrow['decode_tok_s']:.1f} tok/s ({lrow['decode_tokens']} tokens), "
                          f"prompts {lrow['prompt_tok_s']:.0f} tok/s ({lrow['prompt_tokens']} tokens)", flush=True)
            finally:
                srv.stop()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    med = {arm: statistics.median(r["decode_tok_s"] for r in res["short"] if r["arm"] == arm) for arm, _ in ARMS}
    pmed = {arm: statistics.median(r["prompt_tok_s"] for r in res["short"] if r["arm"] == arm) for arm, _ in ARMS}
    lng = {r["arm"]: r for r in res["long"]}
    print(f"\n{a.args}: {a.n_short} prompts of ~{a.short} tokens, {a.gen} generated each, median of "
          f"{a.rounds} rounds; long: {a.n_long} x ~{a.long} tokens")
    print("| arm | decode tok/s | vs unset | prompt tok/s | long decode tok/s | vs unset | long prompt tok/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for arm, _ in ARMS:
        lr, lu = lng.get(arm), lng.get("unset")
        long_cells = (f"{lr['decode_tok_s']:.1f} | {lr['decode_tok_s'] / lu['decode_tok_s']:.3f}x | "
                      f"{lr['prompt_tok_s']:.0f}" if lr and lu and lu["decode_tok_s"] > 0 else " | | ")
        print(f"| {arm} | {med[arm]:.1f} | {med[arm] / med['unset']:.3f}x | {pmed[arm]:.0f} | {long_cells} |")


if __name__ == "__main__":
    main()
