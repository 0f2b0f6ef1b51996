#!/usr/bin/env python3
"""kl.py - compares two teacher-forced logprob dumps of the same text (strata --logpos or
strata perplexity --kl-base; JSONL, docs/GENERATION.md): mean top-K KL(A||B) by position bucket
(0-7, 8-63, 64-639, 640+, all), top-1 agreement, and the first position where the top-1 differs.

    python3 tools/kl.py A.jsonl B.jsonl [--json]

The estimate, per position, over A's top-K ids i with probabilities a_i:
    b_i  = B's probability of i: exact when i is in B's top-K; otherwise (m of A's ids missing
           from B's list) min(B's smallest listed probability, B's tail mass / m), where the tail
           mass is 1 - sum of B's top-K probabilities: the most an unlisted id can have
    KL   = sum_i a_i (log a_i - log b_i) + r_a log(r_a / r_b),   r_a = 1 - sum a_i, r_b = 1 - sum b_i
i.e. the KL of the two distributions coarsened to (A's K ids, everything else). It is >= 0, a lower
bound of the full-vocabulary KL when the b_i are exact, and exact when A's whole support fits in
its top K and those ids are listed in B. With estimated b_i it is an approximation that leans low
(an unlisted id gets the largest probability it can have). Measured on the tiny model (Q8_0 vs Q4_0,
4590 positions, K = 20) it gave 0.01156 where B's exact logprobs give 0.01187; spreading the tail
uniformly over the unlisted ids instead gave 0.0508, four times too high.
Positions are matched by "pos"; those in only one dump are counted and reported, not compared.
Only the standard library is used.
"""
from __future__ import annotations

import argparse
import json
import math
import sys

BUCKETS = [("0-7", 0, 8), ("8-63", 8, 64), ("64-639", 64, 640), ("640+", 640, None)]
TAIL_FLOOR = 1e-30


# ------------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------------

class Dump:
    """One dump: header fields and, per position, (token, [(id, logprob), ...])."""

    def __init__(self, header: dict, rows: dict):
        self.header = header
        self.rows = rows
        self.n_vocab = int(header["n_vocab"])
        self.top_k = int(header["top_k"])


def load_dump(path: str) -> Dump:
    header = None
    rows = {}
    with open(path, "r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON ({e})") from None
            if header is None:
                if obj.get("strata_logpos") != 1 or "n_vocab" not in obj or "top_k" not in obj:
                    raise ValueError(f"{path}:{lineno}: not a strata logpos header")
                header = obj
                continue
            try:
                pos = int(obj["pos"])
                top = [(int(i), float(lp)) for i, lp in obj["top"]]
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path}:{lineno}: not a position line") from None
            if not top:
                raise ValueError(f"{path}:{lineno}: empty top list")
            rows[pos] = (obj.get("token"), top)
    if header is None:
        raise ValueError(f"{path}: empty file")
    return Dump(header, rows)


# ------------------------------------------------------------------------------------------------
# The estimate
# ------------------------------------------------------------------------------------------------

def kl_topk(top_a, top_b, n_vocab: int) -> float:
    """Top-K KL(A||B) at one position; top_a/top_b are [(id, logprob), ...] (see the module doc)."""
    b = dict(top_b)
    pb_listed = [math.exp(lp) for _, lp in top_b]
    tail_b = max(1.0 - sum(pb_listed), 0.0)
    n_missing = sum(1 for i, _ in top_a if i not in b)
    missing = 0.0
    if n_missing and n_vocab > len(top_b):
        missing = min(min(pb_listed), tail_b / n_missing)
    lp_missing = math.log(max(missing, TAIL_FLOOR))
    kl = sa = sb = 0.0
    for i, lpa in top_a:
        lpb = b.get(i, lp_missing)
        pa = math.exp(lpa)
        sa += pa
        sb += math.exp(lpb)
        kl += pa * (lpa - lpb)
    ra, rb = 1.0 - sa, 1.0 - sb
    if ra > 1e-12:
        kl += ra * (math.log(ra) - math.log(max(rb, TAIL_FLOOR)))
    return max(kl, 0.0)


def bucket_of(pos: int) -> str:
    for name, lo, hi in BUCKETS:
        if pos >= lo and (hi is None or pos < hi):
            return name
    raise ValueError(pos)


def compare(a: Dump, b: Dump) -> dict:
    if a.n_vocab != b.n_vocab:
        raise ValueError(f"n_vocab differs: {a.n_vocab} vs {b.n_vocab}")
    common = sorted(set(a.rows) & set(b.rows))
    if not common:
        raise ValueError(f"the dumps have no position in common ({len(a.rows)} and "
                         f"{len(b.rows)} positions)")
    acc = {name: [0.0, 0, 0] for name, _, _ in BUCKETS}  # kl sum, count, same top-1
    acc_all = [0.0, 0, 0]
    kls = []
    first_diff = None
    tokens_differ = 0
    for pos in common:
        tok_a, top_a = a.rows[pos]
        tok_b, top_b = b.rows[pos]
        if tok_a != tok_b:
            tokens_differ += 1
        kl = kl_topk(top_a, top_b, a.n_vocab)
        same = top_a[0][0] == top_b[0][0]
        if not same and first_diff is None:
            first_diff = pos
        for t in (acc[bucket_of(pos)], acc_all):
            t[0] += kl
            t[1] += 1
            t[2] += same
        kls.append(kl)
    buckets = {}
    for name, _, _ in BUCKETS + [("all", 0, None)]:
        s, n, same = acc_all if name == "all" else acc[name]
        buckets[name] = {"n": n, "mean_kl": s / n if n else None,
                         "top1_agree": same / n if n else None}
    kls.sort()
    return {
        "a": a.header.get("model"), "b": b.header.get("model"),
        "n_vocab": a.n_vocab, "top_k_a": a.top_k, "top_k_b": b.top_k,
        "n_common": len(common), "only_a": len(set(a.rows) - set(b.rows)),
        "only_b": len(set(b.rows) - set(a.rows)),
        "tokens_differ": tokens_differ,
        "buckets": buckets,
        "median_kl": (kls[(len(kls) - 1) // 2] + kls[len(kls) // 2]) / 2 if kls else None,
        "max_kl": kls[-1] if kls else None,
        "first_top1_diff": first_diff,
    }


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def format_report(r: dict) -> str:
    lines = [f"A: {r['a']}", f"B: {r['b']}",
             f"positions compared: {r['n_common']} (only in A: {r['only_a']}, only in B: "
             f"{r['only_b']}); top-K {r['top_k_a']} vs {r['top_k_b']}, n_vocab {r['n_vocab']}"]
    if r["tokens_differ"]:
        lines.append(f"warning: the next-token ids differ at {r['tokens_differ']} positions "
                     f"(not the same text?)")
    lines.append(f"{'bucket':>8} {'n':>8} {'mean KL':>12} {'top-1 agree':>12}")
    for name, b in r["buckets"].items():
        if b["n"]:
            lines.append(f"{name:>8} {b['n']:>8} {b['mean_kl']:>12.6f} {100 * b['top1_agree']:>11.2f}%")
        else:
            lines.append(f"{name:>8} {0:>8} {'-':>12} {'-':>12}")
    if r["median_kl"] is not None:
        lines.append(f"median KL {r['median_kl']:.6f}, max KL {r['max_kl']:.6f}")
    fd = r["first_top1_diff"]
    lines.append("first top-1 difference: " + ("none" if fd is None else f"position {fd}"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="reference dump (A)")
    ap.add_argument("b", help="dump compared with it (B)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    try:
        r = compare(load_dump(args.a), load_dump(args.b))
    except (OSError, ValueError) as e:
        print(f"kl.py: {e}", file=sys.stderr)
        return 1
    print(json.dumps(r, indent=1) if args.json else format_report(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
