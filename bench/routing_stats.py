#!/usr/bin/env python3
"""routing_stats.py - what a routing trace says about placing a model's experts.

Reads a trace written by `strata ... --route-trace FILE` (JSON lines: a header with n_layer,
n_expert and k, then one line per layer and forward pass with each token's experts, their gate
weights and the experts the previous layer predicted) and prints:

  - popularity: per layer, how many experts were touched and how many cover 50% / 90% of the
    routed slots (the published measure: Qwen3-30B-A3B needs 65 of its 128 for 90%);
  - reuse: for decode steps, how often a layer's expert was used by the step before, and the
    median distance in steps between two uses;
  - the hit rate of an expert cache of 5%..100% of all experts (one cache for every layer, as
    Strata's GPU tier), for LRU, LFU, the slot book's policy before 2026-12-06 (LRU with a
    frequency-pinned hot set of up to half the slots), Strata's slot book now (the fewest decayed
    uses go, ties to the least recent) and Belady's optimum (the bound no policy beats): a
    forward pass's layer looks up each distinct expert it routes once;
  - how well the next-layer prediction did: the share of routed slots whose expert the previous
    layer predicted.

--replay-out FILE also writes the trace's decode steps as a route replay file (every MoE layer's
k experts a step; `strata --route-replay FILE` replays them in place of another model's router:
docs/EXPERTS.md).

Usage: bench/routing_stats.py TRACE [--decode-only] [--json OUT.json] [--svg OUT.svg]
       [--png OUT.png (needs matplotlib)] [--sizes 5,10,25,50,75,100] [--replay-out FILE]
A user sizes --expert-cache from the hit-rate table: slots = share x n_layer x n_expert."""
from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import OrderedDict, defaultdict

# ------------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------------


def read_trace(path: str):
    """(header, records): records in file order, each with layer, pos, n, ids (n lists of k)
    and pred (the same shape, or None)."""
    with open(path, encoding="utf-8") as f:
        head = json.loads(f.readline())
        if head.get("strata_route_trace") != 1:
            raise SystemExit(f"{path}: not a strata route trace (no strata_route_trace header)")
        k = head["k"]
        recs = []
        for line in f:
            r = json.loads(line)
            n = r["n"]
            ids = [r["ids"][t * k:(t + 1) * k] for t in range(n)]
            pred = r.get("pred")
            recs.append({"layer": r["layer"], "pos": r["pos"], "n": n, "ids": ids,
                         "pred": None if pred is None else [pred[t * k:(t + 1) * k] for t in range(n)]})
    return head, recs


def lookups(recs, decode_only: bool = False, calls: list | None = None):
    """The expert look-ups in the order a session makes them: per forward pass, layer by layer,
    each distinct expert the layer routes once, as (layer, expert). calls, when given, gets the
    index of each look-up's layer call (a tier holds a call's experts until the call is done)."""
    out = []
    for c, r in enumerate(recs):
        if decode_only and r["n"] != 1:
            continue
        seen = []
        for tok in r["ids"]:
            for e in tok:
                if e >= 0 and e not in seen:
                    seen.append(e)
        out.extend((r["layer"], e) for e in seen)
        if calls is not None:
            calls.extend([c] * len(seen))
    return out


# ------------------------------------------------------------------------------------------------
# Statistics
# ------------------------------------------------------------------------------------------------


def popularity(head, recs):
    """Per layer: experts touched, and how many cover 50% and 90% of the routed slots."""
    counts = defaultdict(lambda: defaultdict(int))
    for r in recs:
        for tok in r["ids"]:
            for e in tok:
                if e >= 0:
                    counts[r["layer"]][e] += 1
    rows = []
    for layer in range(head["n_layer"]):
        c = sorted(counts[layer].values(), reverse=True)
        total = sum(c)
        cover = {}
        for share in (0.5, 0.9):
            acc, need = 0, 0
            for v in c:
                if total and acc >= share * total:
                    break
                acc += v
                need += 1
            cover[share] = need
        rows.append({"layer": layer, "slots": total, "touched": len(c),
                     "cover50": cover[0.5], "cover90": cover[0.9]})
    return rows


def reuse(head, recs):
    """Decode steps (n == 1): the share of a layer's routed experts the same layer also used in
    the step before, and the median distance in steps between two uses of an expert."""
    last = {}  # (layer, expert) -> step of its last use
    step_of = defaultdict(int)  # layer -> decode steps seen
    dists, again, total = [], 0, 0
    for r in recs:
        if r["n"] != 1:
            continue
        layer = r["layer"]
        s = step_of[layer]
        step_of[layer] += 1
        for e in r["ids"][0]:
            if e < 0:
                continue
            total += 1
            if (layer, e) in last:
                d = s - last[(layer, e)]
                dists.append(d)
                again += d == 1
            last[(layer, e)] = s
    dists.sort()
    return {"slots": total, "reused_next_step": again / total if total else 0.0,
            "median_distance": dists[len(dists) // 2] if dists else None,
            "never_reused": (total - len(dists)) / total if total else 0.0}


def prediction(recs):
    """The share of routed slots whose expert the previous layer predicted for that token."""
    hit = slots = 0
    for r in recs:
        if r["pred"] is None:
            continue
        for tok, pred in zip(r["ids"], r["pred"]):
            p = set(pred)
            for e in tok:
                slots += 1
                hit += e in p
    return {"slots": slots, "hit_rate": hit / slots if slots else 0.0}


# ------------------------------------------------------------------------------------------------
# Cache policies (one cache of n slots for every layer's experts)
# ------------------------------------------------------------------------------------------------


def sim_lru(seq, n):
    cache, hits = OrderedDict(), 0
    for key in seq:
        if key in cache:
            hits += 1
            cache.move_to_end(key)
            continue
        if len(cache) >= n:
            cache.popitem(last=False)
        cache[key] = True
    return hits


def sim_lfu(seq, n):
    """Least frequently used (counts over the whole trace so far), ties to the least recent."""
    count, resident, heap, hits, clock = defaultdict(int), {}, [], 0, 0
    for key in seq:
        clock += 1
        count[key] += 1
        if key in resident:
            hits += 1
        elif len(resident) >= n:
            while True:  # lazy heap: skip stale entries
                c, t, victim = heapq.heappop(heap)
                if victim in resident and resident[victim] == (c, t):
                    del resident[victim]
                    break
        resident[key] = (count[key], clock)
        heapq.heappush(heap, (count[key], clock, key))
    return hits


def sim_slot_book(seq, n, decay=None, calls=None, admit=False, flags=None, steps=None, evictions=None):
    """Strata's slot book (c/experts/slot_book.c): the resident expert with the fewest uses goes,
    the least recently used among equals; every look-up of an expert counts one use, and all
    counts halve every `decay` look-ups (st_book_decay_for: 16 x n). With calls (the layer call of
    each look-up), the experts the current call already holds are not evicted, as in the tiers.
    admit: a missed expert takes a slot only if it has at least as many uses as the expert it
    would evict (TinyLFU's admission); otherwise it is served without a slot (on the GPU: computed
    by the CPU or from a scratch copy) and the resident one stays. flags, when given, gets each
    look-up's outcome (True: a hit). steps and evictions (the doorbell pool's loads): steps[i] is
    the decode step of look-up i, and a step evicts at most `evictions` experts (EMPTY slots fill
    freely); a miss past that is served without a slot."""
    decay = decay or 16 * max(n, 1)
    uses, last, resident, heap, hits, clock = defaultdict(int), {}, {}, [], 0, 0
    held_call, held = None, set()
    cur_step, evicted = None, 0
    for i, key in enumerate(seq):
        clock += 1
        if steps is not None and steps[i] != cur_step:
            cur_step, evicted = steps[i], 0
        if calls is not None and calls[i] != held_call:
            held_call, held = calls[i], set()
        uses[key] += 1
        if clock % decay == 0:
            for kk in list(uses):
                uses[kk] >>= 1
            heap = [(uses[r], last[r], r) for r in resident]  # the keys changed: rebuild
            heapq.heapify(heap)
        if flags is not None:
            flags.append(key in resident)
        if key in resident:
            hits += 1
        elif len(resident) >= n:
            if evictions is not None and evicted >= evictions:  # this step's loads are spent
                continue
            skipped = []
            while heap:  # lazy heap: an entry is current when it matches the resident's key
                u, t, victim = heapq.heappop(heap)
                if victim not in resident:
                    continue
                if (uses[victim], last[victim]) != (u, t):  # stale: its current key goes back
                    heapq.heappush(heap, (uses[victim], last[victim], victim))
                    continue
                if victim in held:
                    skipped.append((u, t, victim))
                    continue
                if admit and uses[key] < u:  # not worth the slot: served without one
                    skipped.append((u, t, victim))
                    break
                del resident[victim]
                evicted += 1
                break
            for x in skipped:
                heapq.heappush(heap, x)
            if len(resident) >= n:  # every slot held by this call (or not admitted): a miss
                continue
        last[key] = clock
        resident[key] = True
        if calls is not None:
            held.add(key)
        heapq.heappush(heap, (uses[key], clock, key))
    return hits


def sim_lru_hot(seq, n, rebalance=4096):
    """The slot book's policy until 2026-12-06: LRU among the slots outside a hot set of up to
    n // 2 experts, the ones with the highest use counts at each rebalance (every `rebalance`
    look-ups; counts halve)."""
    pin = n // 2
    uses, hot, resident, hits, clock = defaultdict(int), set(), OrderedDict(), 0, 0
    for key in seq:
        clock += 1
        uses[key] += 1
        if clock % rebalance == 0:
            ranked = sorted(uses.items(), key=lambda kv: -kv[1])
            thr = ranked[min(pin, len(ranked)) - 1][1] if pin and ranked else 0
            thr = max(thr, 1)
            hot = set()
            for want in (lambda v: v > thr, lambda v: v == thr):
                for kk, v in ranked:
                    if len(hot) >= pin:
                        break
                    if want(v):
                        hot.add(kk)
            for kk in list(uses):
                uses[kk] >>= 1
        if key in resident:
            hits += 1
            resident.move_to_end(key)
            continue
        if len(resident) >= n:
            victim = next((r for r in resident if r not in hot), None)  # the least recent unpinned
            if victim is None:  # every slot pinned: the book refuses; a miss, the set kept
                continue
            del resident[victim]
        resident[key] = True
    return hits


def sim_belady(seq, n):
    """Belady's MIN: evict the resident expert used again furthest in the future."""
    nxt, where = [0] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = where.get(seq[i], float("inf"))
        where[seq[i]] = i
    resident, heap, hits = {}, [], 0
    for i, key in enumerate(seq):
        if key in resident:
            hits += 1
        elif len(resident) >= n:
            while True:
                negnext, victim = heapq.heappop(heap)
                if resident.get(victim) == -negnext:
                    del resident[victim]
                    break
        resident[key] = nxt[i]
        heapq.heappush(heap, (-nxt[i], key))
    return hits


def sim_slot_book_admit(seq, n, calls=None):
    """The slot book with admission (sim_slot_book's admit)."""
    return sim_slot_book(seq, n, calls=calls, admit=True)


POLICIES = {"LRU": sim_lru, "LFU": sim_lfu, "LRU + hot set": sim_lru_hot, "slot book": sim_slot_book,
            "slot book + admission": sim_slot_book_admit, "Belady": sim_belady}


def hit_rates(head, seq, sizes, calls=None):
    total = head["n_layer"] * head["n_expert"]
    rows = []
    for pct in sizes:
        n = max(1, round(total * pct / 100))
        row = {"percent": pct, "slots": n}
        for name, fn in POLICIES.items():
            hits = fn(seq, n, calls=calls) if name.startswith("slot book") else fn(seq, n)
            row[name] = hits / len(seq) if seq else 0.0
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------


def svg_plot(rows, title):
    """A dependency-free line plot of hit rate against cache size, one line per policy."""
    w, h, m = 640, 400, 60
    x = lambda p: m + (w - 2 * m) * p / 100
    y = lambda r: h - m - (h - 2 * m) * r
    colors = {"LRU": "#1f77b4", "LFU": "#ff7f0e", "LRU + hot set": "#9467bd", "slot book": "#2ca02c",
              "Belady": "#7f7f7f"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{w / 2}" y="20" text-anchor="middle">{title}</text>',
           f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 20}" text-anchor="middle">cache size (% of all experts)</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">hit rate</text>']
    for t in (0, 25, 50, 75, 100):
        out.append(f'<text x="{x(t)}" y="{h - m + 15}" text-anchor="middle">{t}</text>')
        out.append(f'<text x="{m - 8}" y="{y(t / 100) + 4}" text-anchor="end">{t / 100:.2f}</text>')
    for i, (name, col) in enumerate(colors.items()):
        pts = " ".join(f"{x(r['percent']):.1f},{y(r[name]):.1f}" for r in rows)
        dash = ' stroke-dasharray="4,3"' if name == "Belady" else ""
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="2"{dash} points="{pts}"/>')
        out.append(f'<text x="{w - m - 90}" y="{m + 15 * i + 10}" fill="{col}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def report(head, recs, sizes, decode_only):
    calls = []
    seq = lookups(recs, decode_only, calls)
    pop = popularity(head, recs)
    return {"model": head.get("model"), "arch": head.get("arch"), "n_layer": head["n_layer"],
            "n_expert": head["n_expert"], "k": head["k"], "forward_passes": len(recs) // max(head["n_layer"], 1),
            "tokens": sum(r["n"] for r in recs if r["layer"] == 0), "lookups": len(seq),
            "decode_only": decode_only, "popularity": pop, "reuse": reuse(head, recs),
            "prediction": prediction(recs), "hit_rates": hit_rates(head, seq, sizes, calls)}


def print_report(rep):
    print(f"# {rep['model']} ({rep['arch']}): {rep['n_layer']} layers x {rep['n_expert']} experts, "
          f"top-{rep['k']}; {rep['tokens']} tokens, {rep['lookups']} look-ups"
          f"{' (decode steps only)' if rep['decode_only'] else ''}\n")
    pop = rep["popularity"]
    mean = lambda key: sum(r[key] for r in pop) / len(pop)
    print(f"Popularity (mean over layers): {mean('touched'):.1f} experts touched; {mean('cover50'):.1f} "
          f"cover 50% of the routed slots, {mean('cover90'):.1f} cover 90% "
          f"(of {rep['n_expert']}; spread evenly: {0.5 * rep['n_expert']:.0f} and {0.9 * rep['n_expert']:.0f})")
    ru = rep["reuse"]
    if ru["slots"]:
        print(f"Reuse (decode steps): {100 * ru['reused_next_step']:.1f}% of a layer's experts were used "
              f"by the step before; median distance {ru['median_distance']} steps; "
              f"{100 * ru['never_reused']:.1f}% never used again in the trace")
    pr = rep["prediction"]
    if pr["slots"]:
        print(f"Next-layer prediction: {100 * pr['hit_rate']:.1f}% of {pr['slots']} routed slots predicted "
              f"(by chance: {100 * rep['k'] / rep['n_expert']:.1f}%)")
    print("\n| cache (% of experts) | slots | LRU | LFU | LRU + hot set (before) | slot book | "
          "slot book + admission | Belady (bound) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rep["hit_rates"]:
        print(f"| {r['percent']} | {r['slots']} | {100 * r['LRU']:.1f}% | {100 * r['LFU']:.1f}% | "
              f"{100 * r['LRU + hot set']:.1f}% | {100 * r['slot book']:.1f}% | "
              f"{100 * r['slot book + admission']:.1f}% | {100 * r['Belady']:.1f}% |")


def replay_steps(recs):
    """The trace's MoE layers (in order) and its decode passes as [pass][layer][k ids] (-1: no
    expert); a pass that lacks one of the layers (a trace cut short) is left out."""
    layers = sorted({r["layer"] for r in recs})
    passes, cur, prev = [], {}, None
    for r in recs:
        if r["n"] != 1:
            continue
        if prev is not None and r["layer"] <= prev:  # the next pass
            passes.append(cur)
            cur = {}
        cur[r["layer"]] = list(r["ids"][0])
        prev = r["layer"]
    if cur:
        passes.append(cur)
    return layers, [[p[layer] for layer in layers] for p in passes if all(layer in p for layer in layers)]


def write_replay(head, recs, path):
    """The route replay file of the trace's decode passes (c/experts/replay.h's format); returns
    (layers, steps)."""
    layers, steps = replay_steps(recs)
    if not steps:
        raise ValueError("the trace has no complete decode pass to replay")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"strata-route-replay 1 {len(layers)} {head['n_expert']} {head['k']} {len(steps)}\n")
        for step in steps:
            f.write(" ".join(str(e) for ids in step for e in ids) + "\n")
    return len(layers), len(steps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--decode-only", action="store_true", help="only decode steps' look-ups")
    ap.add_argument("--sizes", default="5,10,25,50,75,100", help="cache sizes, %% of all experts")
    ap.add_argument("--json", help="write the report as JSON")
    ap.add_argument("--svg", help="write the hit-rate plot as SVG")
    ap.add_argument("--png", help="write the hit-rate plot as PNG (needs matplotlib)")
    ap.add_argument("--replay-out", help="write the decode steps as a route replay file (strata --route-replay)")
    a = ap.parse_args(argv)
    head, recs = read_trace(a.trace)
    if a.replay_out:
        n_layer, n_steps = write_replay(head, recs, a.replay_out)
        print(f"{a.replay_out}: {n_steps} decode steps of {n_layer} layers x top-{head['k']} of "
              f"{head['n_expert']} experts", file=sys.stderr)
    sizes = [float(s) for s in a.sizes.split(",")]
    rep = report(head, recs, sizes, a.decode_only)
    print_report(rep)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=1)
    title = f"{rep['arch']}: {rep['n_layer']} x {rep['n_expert']} experts, top-{rep['k']}"
    if a.svg:
        with open(a.svg, "w", encoding="utf-8") as f:
            f.write(svg_plot(rep["hit_rates"], title))
    if a.png:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("--png needs matplotlib (not installed); --svg needs nothing", file=sys.stderr)
            return 2
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for name in POLICIES:
            ax.plot([r["percent"] for r in rep["hit_rates"]], [r[name] for r in rep["hit_rates"]],
                    label=name, linestyle="--" if name == "Belady" else "-")
        ax.set_xlabel("cache size (% of all experts)")
        ax.set_ylabel("hit rate")
        ax.set_title(title)
        ax.legend()
        fig.savefig(a.png, dpi=100, bbox_inches="tight")
    return 0


if __name__ == "__main__":
    sys.exit(main())
