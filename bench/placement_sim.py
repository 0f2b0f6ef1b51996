#!/usr/bin/env python3
"""placement_sim.py - decode time of expert placements from a routing trace and a cost model.

Issue 30 asks for a dynamic placement never slower than the best static split of the same GPU
memory. This script says, for a trace (`strata ... --route-trace FILE`) and one set of measured
costs, what a decode token would cost under three placements of the same memory (a share of all
routed experts):

  static   the last layers' experts resident, the first ones on the CPU (--n-cpu-moe);
  cache    one expert cache over every layer (the slot book's policy, --expert-cache with
           --cpu-misses): every layer's routing comes down and its misses are split;
  hybrid   d layers fewer resident than static, their memory (d x n_expert slots) a cache over
           the CPU layers' experts only (the slot book, look-ups of the CPU layers alone);
  pool     the cache with --doorbell: the split made on the device, no host round trip, every
           miss computed by the pool (`bell` a layer, then cpu0 + M cpu1); its residency loads
           at most 4 experts a step in place of others, as the tier does (ST_POOL_LOADS_PER_STEP),
           from a first layer that moves one a step;
  pool_pcie  the same with --pool-pcie auto: the GPU reads some misses from the pinned copy
           itself (`bell` a layer, then the cost model's split of M with `zc` an expert read in
           place, not `pcie`).

A layer's time (microseconds, one token a pass): resident layers `gpu`; a layer whose routing
comes down (a CPU layer, a cache layer) `gpu + trip + extra` plus its M missed experts split
between the CPU and PCIe as the cost model does (j copied, M - j on the CPU: the least of
max(cpu0 + (M - j) cpu1, j pcie)); `extra` is `cache_extra` in the cache placement's layers and
`hybrid_extra` in the hybrid's CPU layers (their slot look-ups and the hits' pointer table); the
pool placements pay `bell` instead of `trip + extra` (the publish kernel and the flag wait). The
GPU's hits run beside the split and are not counted. What the model leaves out: the slot loads'
own cost (a miss copied over PCIe is counted once, whether or not it takes a slot; the pool
modes pay their 4 loads a step, `4 pcie`, every step), prompts and prefetch.

Defaults: the spread-routing qwen3-30b-a3b file on one H100 (docs/PERFORMANCE.md, 2026-12-07):
gpu = 2.79 ms / 48 layers; one expert 2.64 MB over PCIe at 51.4 GB/s plus 8 us; the CPU's step 33
us plus 34 us an expert; trip 26 us, fitted so that --cpu-moe gives the measured ~72 tok/s;
cache_extra 35 us, fitted so that the 1536-slot cache with --cpu-misses gives its ~70 tok/s;
hybrid_extra 5 us (an estimate: the host has the CPU layer's routing already); bell 12 us, fitted
so that the 1536-slot cache with --doorbell gives its ~69 tok/s (H100) at 28% hits; zc 180 us (an
expert read in place from the pinned copy by the grouped kernel, about 15 GB/s), fitted so that
--pool-pcie auto with a 3072-slot cache gives its measured 87-91 tok/s (H100, run22-s19) at 52%
hits. `--check` prints the model's figures for the measured rows beside them.

Usage: bench/placement_sim.py TRACE [--shares 0.25,0.5] [--max-d 4] [--json OUT]
       [--gpu US] [--trip US] [--cpu0 US] [--cpu1 US] [--pcie US] [--cache-extra US]
       [--hybrid-extra US] [--bell US] [--zc US] [--layers N (the model's depth the costs are for; default the
       trace's)] [--check]
The trace's routing drives hits and misses; the costs say what they are worth. A trace of another
model than the costs' is a routing pattern on the costs' model: say so where its figures go."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

_spec = importlib.util.spec_from_file_location(
    "routing_stats", os.path.join(os.path.dirname(os.path.abspath(__file__)), "routing_stats.py"))
rs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rs)

# H100, spread-routing qwen3-30b-a3b (docs/PERFORMANCE.md, 2026-12-07); microseconds
DEFAULTS = dict(gpu=2790.0 / 48, trip=26.0, cpu0=33.0, cpu1=34.0, pcie=8.0 + 2.64e6 / 51.4e3,
                cache_extra=35.0, hybrid_extra=5.0, bell=12.0, zc=180.0)
POOL_LOADS = 4  # ST_POOL_LOADS_PER_STEP (moe_block.c): the pool's loads in place of others a step

# measured decode rows the --check compares with: (what, placement, share, tok/s low, high, the
# cache's hit rate in those runs (tg64: a short run, the pool's residency moving 4 experts a step)
MEASURED = [("--cpu-moe", "static", 0.0, 71.0, 74.2, None), ("--n-cpu-moe 36", "static", 0.25, 96.6, 96.6, None),
            ("--n-cpu-moe 24", "static", 0.5, 122.5, 129.3, None),
            ("--expert-cache 1536 --cpu-misses", "cache", 0.25, 66.5, 72.3, 0.276),
            ("--expert-cache 1536 --doorbell", "pool", 0.25, 65.5, 70.0, 0.284),
            ("--expert-cache 1536 --doorbell (tg256, run22-s19)", "pool", 0.25, 50.0, 77.0, 0.262),
            ("--expert-cache 1536 --doorbell --pool-pcie auto", "pool_pcie", 0.25, 55.9, 72.5, 0.262),
            ("--expert-cache 3072 --doorbell --pool-pcie auto", "pool_pcie", 0.5, 87.2, 90.7, 0.518)]


def layer_us(kind: str, m: float, c: dict, slots: int = 1) -> float:
    """One layer whose routing comes down (or is split on the device) with m misses (fractional m:
    the mean of its floor and ceiling's costs)."""
    lo = int(m)
    if m > lo:
        return (lo + 1 - m) * layer_us(kind, lo, c, slots) + (m - lo) * layer_us(kind, lo + 1, c, slots)
    if kind == "pool":
        return c["gpu"] + c["bell"] + (c["cpu0"] + m * c["cpu1"] if m else 0.0)
    if kind == "pool_pcie":
        return c["gpu"] + c["bell"] + split_us(lo, c, c["zc"])
    extra = c["cache_extra"] if kind == "cache" else (c["hybrid_extra"] if slots > 0 else 0.0)
    return c["gpu"] + c["trip"] + extra + split_us(lo, c)


def split_us(m: int, c: dict, pcie: float | None = None) -> float:
    """The cost model's split of m missed experts (one row each) between the CPU and PCIe (pcie:
    one expert's cost over it, c["pcie"] unless given)."""
    if m <= 0:
        return 0.0
    one = c["pcie"] if pcie is None else pcie
    return min(max((c["cpu0"] + (m - j) * c["cpu1"]) if m - j > 0 else 0.0, j * one) for j in range(m + 1))


def calls_of(recs):
    """Decode-sized forward passes as per-layer lists of distinct experts: [(layer, [experts])]
    in the order a session makes them (one-token passes only; routing_stats.lookups's order)."""
    idx = []
    by_call = {}
    for (_, e), c in zip(rs.lookups(recs, decode_only=True, calls=idx), idx):
        by_call.setdefault(c, []).append(e)
    return [(r["layer"], by_call.get(c, [])) for c, r in enumerate(recs) if r["n"] == 1]


def misses_by_cache(calls, keep, slots, evictions=None, rotate=True):
    """Per call (in order): the misses of a slot book of `slots` over the calls whose layer passes
    keep(layer); None for the others. evictions: at most that many loads in place of a resident
    expert a decode step (the doorbell pool's ST_POOL_LOADS_PER_STEP), the step's layers served
    from its first one on, which moves one layer a step (moe_block.c's pm_first; rotate False:
    from the pass's first layer every step, as the engine did before 2026-12-08)."""
    steps, prev = [], None
    for i, (layer, _) in enumerate(calls):
        if prev is None or layer <= prev:  # the next pass
            steps.append([])
        prev = layer
        steps[-1].append(i)
    seq, owner, step_of = [], [], []
    for step, idx in enumerate(steps):
        if evictions is not None and rotate and idx:
            r = step % len(idx)
            idx = idx[r:] + idx[:r]
        for i in idx:
            layer, ex = calls[i]
            if keep(layer):
                seq.extend((layer, e) for e in ex)
                owner.extend([i] * len(ex))
                step_of.extend([step] * len(ex))
    flags = []
    if slots > 0:
        rs.sim_slot_book(seq, slots, calls=owner, flags=flags, steps=step_of if evictions else None,
                         evictions=evictions)
    else:
        flags = [False] * len(seq)
    miss = [None] * len(calls)
    for i, (layer, ex) in enumerate(calls):
        if keep(layer):
            miss[i] = 0
    for i, hit in zip(owner, flags):
        miss[i] += not hit
    return miss


def token_us(calls, n_layer, place: dict, c: dict, layers_scale: float):
    """Mean microseconds a token (a pass over every layer) and the routed look-ups' hit share
    (resident layers count as hits) for one placement."""
    kind, n_cpu, slots = place["kind"], place["n_cpu"], place["slots"]
    if kind in ("pool", "pool_pcie"):  # its residency moves POOL_LOADS experts a step past the empty slots
        miss = misses_by_cache(calls, lambda l: True, slots, POOL_LOADS)
    elif kind == "cache":
        miss = misses_by_cache(calls, lambda l: True, slots)
    else:
        miss = misses_by_cache(calls, lambda l: l < n_cpu, slots)
    total, looks, hits = 0.0, 0, 0
    for (layer, ex), m in zip(calls, miss):
        looks += len(ex)
        if m is None:  # resident
            total += c["gpu"]
            hits += len(ex)
            continue
        total += layer_us(kind, m, c, slots)
        hits += len(ex) - m
    passes = max(1, len(calls) // max(1, n_layer))
    # the pool's loads between steps (synchronous copies): its budget, spent every step once the
    # slots are full (the steady state), not scaled with the depth
    loads = POOL_LOADS * c["pcie"] if kind in ("pool", "pool_pcie") else 0.0
    return total / passes * layers_scale + loads, hits / max(1, looks)


def placements(n_layer, n_expert, share, max_d):
    """static, cache and hybrid(d) for the memory of `share` of all experts."""
    n_gpu = int(share * n_layer + 1e-9)
    slots = int(share * n_layer * n_expert + 1e-9)
    out = [dict(name=f"static ({n_layer - n_gpu} CPU layers)", kind="static", n_cpu=n_layer - n_gpu, slots=0)]
    if slots >= n_expert:
        out.append(dict(name=f"cache ({slots} slots, every layer)", kind="cache", n_cpu=0, slots=slots))
        out.append(dict(name=f"cache, --doorbell ({slots} slots)", kind="pool", n_cpu=0, slots=slots))
        out.append(dict(name=f"cache, --doorbell --pool-pcie auto ({slots} slots)", kind="pool_pcie", n_cpu=0,
                        slots=slots))
    for d in range(1, min(max_d, n_gpu) + 1):
        out.append(dict(name=f"hybrid d={d} ({n_layer - n_gpu + d} CPU layers, {d * n_expert} slots)",
                        kind="hybrid", n_cpu=n_layer - n_gpu + d, slots=d * n_expert))
    return out


def simulate(head, recs, shares, max_d, c, depth=None):
    n_layer, n_expert = head["n_layer"], head["n_expert"]
    calls = calls_of(recs)
    scale = (depth / n_layer) if depth else 1.0
    rows = []
    for share in shares:
        for p in placements(n_layer, n_expert, share, max_d):
            us, hit = token_us(calls, n_layer, p, c, scale)
            rows.append(dict(share=share, placement=p["name"], kind=p["kind"], us=us, tok_s=1e6 / us, hit=hit))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--shares", default="0.25,0.5")
    ap.add_argument("--max-d", type=int, default=4)
    ap.add_argument("--layers", type=int, help="the model's depth the costs are for")
    ap.add_argument("--json")
    ap.add_argument("--check", action="store_true", help="the model's figures for the measured rows")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=v)
    a = ap.parse_args(argv)
    c = {k: getattr(a, k) for k in DEFAULTS}
    head, recs = rs.read_trace(a.trace)
    shares = [float(x) for x in a.shares.split(",") if x]
    rows = simulate(head, recs, shares, a.max_d, c, a.layers)
    print(f"{a.trace}: {head['n_layer']} layers x {head['n_expert']} experts, top-{head['k']}; "
          f"costs (us): " + ", ".join(f"{k} {v:.1f}" for k, v in c.items()))
    print(f"| share | placement | token (us) | tok/s | look-ups on the GPU |\n|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['share']:.0%} | {r['placement']} | {r['us']:.0f} | {r['tok_s']:.1f} | {r['hit']:.1%} |")
    if a.check:
        print("\nmeasured (H100 / H200, docs/PERFORMANCE.md) against the model on this trace, and at the "
              "runs' own hit rate (k experts a layer, every layer alike):")
        n_layer, n_expert, k = head["n_layer"], head["n_expert"], head["k"]
        depth = a.layers or n_layer
        for what, kind, share, lo, hi, hits in MEASURED:
            p = [q for q in placements(n_layer, n_expert, share, 0) if q["kind"] == kind][0]
            us, hit = token_us(calls_of(recs), n_layer, p, c, depth / n_layer)
            at = ""
            if hits is not None:
                loads = POOL_LOADS * c["pcie"] if kind in ("pool", "pool_pcie") else 0.0
                at = f", at {hits:.1%} hits {1e6 / (depth * layer_us(kind, k * (1 - hits), c) + loads):.1f}"
            print(f"  {what}: measured {lo:.1f}-{hi:.1f} tok/s, model {1e6 / us:.1f} (trace hits {hit:.1%}){at}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"trace": a.trace, "costs": c, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
