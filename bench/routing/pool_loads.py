#!/usr/bin/env python3
"""pool_loads.py - the doorbell pool's residency (`--expert-cache N --doorbell`, moe_block.c) on a
routing trace replayed over a model's layers as `--route-replay` replays it (layer l at step p is
the trace's layer l mod L at pass p mod P): the slot book's hit rate with unlimited loads (the
cache with `--cpu-misses`) and with the pool's budget of loads in place of others a step (empty
slots fill freely), the step's layers served from layer 0 every step (the engine before
2026-12-08) or from a first layer that moves one a step (moe_block.c's pm_first). A run of the
same length as `strata bench -n T` (T + 1 passes with the warm-up) from empty slots.

    python3 bench/routing/pool_loads.py TRACE.jsonl [--layers 48] [--slots 1536,3072]
        [--tokens 257,1024] [--budgets 4,8,16,32]
"""
import argparse
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("placement_sim",
                                               Path(__file__).resolve().parent.parent / "placement_sim.py")
ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ps)
rs = ps.rs  # routing_stats, as placement_sim loads it


def replayed(steps, n_layer, n_tok):
    """The calls of n_tok passes over n_layer layers as placement_sim takes them: (layer, ids),
    layer l of pass p the trace's layer l mod its layers at its pass p mod its passes."""
    return [(layer, steps[p % len(steps)][layer % len(steps[0])]) for p in range(n_tok) for layer in range(n_layer)]


def hit_rate(calls, slots, budget=None, rotate=True):
    miss = ps.misses_by_cache(calls, lambda layer: True, slots, budget, rotate)
    looks = sum(len(ex) for _, ex in calls)
    return 1.0 - sum(miss) / max(1, looks)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--slots", default="1536,3072")
    ap.add_argument("--tokens", default="257,1024")
    ap.add_argument("--budgets", default="4,8,16,32")
    a = ap.parse_args(argv)
    head, recs = rs.read_trace(a.trace)
    _, steps = rs.replay_steps(recs)
    budgets = [int(b) for b in a.budgets.split(",")]
    print(f"{a.trace}: {len(steps)} passes of {len(steps[0])} layers replayed over {a.layers}")
    print("| slots | tokens | cache | " + " | ".join(f"pool {b} from layer 0 | pool {b} rotating" for b in budgets) + " |")
    print("|---:|---:|---:|" + "---:|---:|" * len(budgets))
    for slots in (int(x) for x in a.slots.split(",")):
        for n_tok in (int(x) for x in a.tokens.split(",")):
            calls = replayed(steps, a.layers, n_tok)
            cells = [f"{hit_rate(calls, slots):.1%}"]
            for b in budgets:
                for rot in (False, True):
                    cells.append(f"{hit_rate(calls, slots, b, rot):.1%}")
            print(f"| {slots} | {n_tok} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
