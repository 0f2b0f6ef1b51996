#!/usr/bin/env python3
"""offload_sweep.py - decode speed against the share of expert bytes the fast tier may hold.

  --tier gpu: a GPU session with an expert cache of share x (all routed experts) slots
              (--expert-cache; 0% is --cpu-moe, 100% is every expert resident); llama.cpp's
              `-ncmoe 36` / `-ncmoe 24` (ANCHORS.md) are the 25% / 50% points of the same budget.
  --tier ram: a CPU session with a RAM budget of share x the expert bytes (--ram-budget; 0% is the
              smallest budget, k experts; 100% is no budget), experts beyond it read from disk.

For each share it runs `strata bench -p 0 -n N -r R [-d D]` (and the same with --pipe for --tier
ram when --pipe is given; with --static, --tier gpu also runs llama.cpp's static placement,
--n-cpu-moe, at the same share), and writes a markdown table, JSON and, where matplotlib is
installed, a PNG plot; --anchors "0:43.6,25:48.6,..." adds llama.cpp's figures (ANCHORS.md) as a
column and a line; --llama CMD measures them instead, in the same run: at each share of the gpu
tier, after Strata's rows, `CMD -m MODEL -ngl 99 -fa 1 -p 0 -n N -r R -ncmoe X` (X the layers
whose experts that share leaves on the CPU; --llama-args adds e.g. "-t 16"):

  python3 bench/cpu/offload_sweep.py MODEL.gguf --tier ram --shares 0,25,50,100 -n 16 --args "-t 16"
  python3 bench/cpu/offload_sweep.py q3.gguf --tier gpu --static -d 16384 \
      --anchors "0:43.6,25:48.6,50:76.0,100:282.6" --args "-t 16 --pin-experts --gpu-prefetch"
  python3 bench/cpu/offload_sweep.py q3.gguf --tier gpu --static --llama "bash .peer/llama_bench.sh run" \
      --llama-args "-t 16" --args "-t 16"
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def expert_layout(model: Path):
    """(n_layer, n_expert, n_expert_used, total routed-expert bytes, largest expert bytes)."""
    import gguf
    r = gguf.GGUFReader(str(model))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    def u32(key):
        f = r.fields[f"{arch}.{key}"]
        return int(f.parts[f.data[0]][0])
    n_layer, n_expert, n_used = u32("block_count"), u32("expert_count"), u32("expert_used_count")
    total = 0
    per_expert = {}
    for t in r.tensors:
        if "_exps." in t.name:
            total += int(t.n_bytes)
            layer = int(t.name.split(".")[1])
            per_expert[layer] = per_expert.get(layer, 0) + int(t.n_bytes) // n_expert
    return n_layer, n_expert, n_used, total, max(per_expert.values())


def bench(strata: Path, model: Path, n: int, reps: int, depth: int, extra: list[str],
          out_json: Path) -> float:
    cmd = [str(strata), "bench", "-m", str(model), "-p", "0", "-n", str(n), "-r", str(reps),
           "--json", str(out_json), *extra]
    if depth > 0:
        cmd += ["-d", str(depth)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"  failed: {' '.join(cmd)}\n  {p.stderr.strip()[-400:]}", file=sys.stderr)
        return float("nan")
    rows = json.loads(out_json.read_text())["rows"]
    return float(rows[0]["tok_s"])


def llama_bench(cmd: str, model: Path, n: int, reps: int, depth: int, ncmoe: int, extra: str) -> float:
    """llama-bench's tgN tok/s for -ncmoe ncmoe (nan when it fails)."""
    args = shlex.split(cmd) + ["-m", str(model), "-ngl", "99", "-fa", "1", "-p", "0", "-n", str(n),
                               "-r", str(reps), *shlex.split(extra)]
    if ncmoe > 0:
        args += ["-ncmoe", str(ncmoe)]
    if depth > 0:
        args += ["-d", str(depth)]
    p = subprocess.run(args, capture_output=True, text=True)
    m = re.search(r"\|\s*tg\d+(?:\s*@\s*d\d+)?\s*\|\s*([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        print(f"  llama-bench failed: {' '.join(args)}\n  {p.stderr.strip()[-400:]}", file=sys.stderr)
        return float("nan")
    return float(m.group(1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--tier", choices=["gpu", "ram"], required=True)
    ap.add_argument("--shares", default="0,25,50,100", help="percent of the expert bytes")
    ap.add_argument("-n", type=int, default=64, help="tokens decoded per run")
    ap.add_argument("-r", type=int, default=1, help="repetitions")
    ap.add_argument("--pipe", action="store_true", help="ram tier: also with --pipe")
    ap.add_argument("--strata", type=Path, default=REPO / "strata")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "offload_sweep")
    ap.add_argument("--args", default="", help="more strata options, one string (e.g. '-t 16')")
    ap.add_argument("-d", "--depth", type=int, default=0, help="KV depth before the decode (bench -d)")
    ap.add_argument("--static", action="store_true",
                    help="gpu tier: also --n-cpu-moe at each share (llama.cpp's -ncmoe placement)")
    ap.add_argument("--anchors", default="", help="share:tok_s pairs of llama.cpp's figures")
    ap.add_argument("--llama", default="", help="gpu tier: llama-bench's command, run at each share")
    ap.add_argument("--llama-args", default="", help="more llama-bench options (e.g. '-t 16')")
    a = ap.parse_args(argv)
    a.extra = shlex.split(a.args)
    n_layer, n_expert, n_used, total, largest = expert_layout(a.model)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(".run.json")
    rows = []
    measured = {}  # share -> llama.cpp's tok/s in this run (--llama)
    for share in [int(x) for x in a.shares.split(",")]:
        variants = [("", [])]
        if a.tier == "gpu":
            slots = n_layer * n_expert * share // 100
            if share == 0:
                variants = [("--cpu-moe", ["--gpu", "--cpu-moe"])]
            elif share >= 100:
                variants = [("resident", ["--gpu"])]
            else:
                variants = [(f"--expert-cache {max(slots, n_expert)}",
                             ["--gpu", "--expert-cache", str(max(slots, n_expert))])]
                if a.static:
                    on_cpu = n_layer - n_layer * share // 100
                    variants.append((f"--n-cpu-moe {on_cpu}", ["--gpu", "--n-cpu-moe", str(on_cpu)]))
        else:
            budget = total * share // 100
            budget = max(budget, n_used * (largest + 4096))
            if share >= 100:
                variants = [("no budget", ["--cpu"])]
            else:
                variants = [(f"--ram-budget {budget}", ["--cpu", "--ram-budget", str(budget)])]
                if a.pipe:
                    variants.append((f"--ram-budget {budget} --pipe",
                                     ["--cpu", "--ram-budget", str(budget), "--pipe"]))
        for label, args in variants:
            tps = bench(a.strata, a.model, a.n, a.r, a.depth, args + a.extra, tmp)
            rows.append(dict(share=share, setting=label, tok_s=tps))
            print(f"  {share:3d}%  {label:40s} {tps:9.2f} tok/s", flush=True)
        if a.llama and a.tier == "gpu":
            ncmoe = n_layer - n_layer * share // 100
            measured[share] = llama_bench(a.llama, a.model, a.n, a.r, a.depth, ncmoe, a.llama_args)
            print(f"  {share:3d}%  {'llama.cpp -ncmoe ' + str(ncmoe):40s} {measured[share]:9.2f} tok/s", flush=True)
    tmp.unlink(missing_ok=True)
    anchors = {int(k): float(v) for k, v in (p.split(":") for p in a.anchors.split(",") if p)}
    anchors.update(measured)
    anchor_label = "llama.cpp (same run)" if measured else "llama.cpp (ANCHORS.md)"
    md = [f"model {a.model.name}: {n_layer} layers x {n_expert} experts (top-{n_used}), "
          f"{total / 2**30:.2f} GiB of routed experts; tier {a.tier}; tg{a.n}"
          f"{f' at depth {a.depth}' if a.depth else ''}; options: {a.args or '-'}", ""]
    if anchors:
        def anchor_cols(r):
            ref = anchors.get(r["share"])
            return ("-", "-") if ref is None else (f"{ref:.1f}", f"{r['tok_s'] / ref:.2f}x")
        md += ["| expert bytes in the fast tier | setting | decode tok/s | llama.cpp | ratio |",
               "|---:|---|---:|---:|---:|"]
        md += ["| {}% | {} | {:.2f} | {} | {} |".format(r["share"], r["setting"], r["tok_s"], *anchor_cols(r))
               for r in rows]
    else:
        md += ["| expert bytes in the fast tier | setting | decode tok/s |", "|---:|---|---:|"]
        md += [f"| {r['share']}% | {r['setting']} | {r['tok_s']:.2f} |" for r in rows]
    a.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    a.out.with_suffix(".json").write_text(json.dumps(dict(model=str(a.model), tier=a.tier, n=a.n,
                                                          depth=a.depth, args=a.args, anchors=anchors,
                                                          llama_same_run=bool(measured), rows=rows), indent=1))
    print("\n".join(md))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return 0
    fig, ax = plt.subplots(figsize=(6, 4))
    def kind(setting):
        return "pipe" if "--pipe" in setting else "static" if "--n-cpu-moe" in setting else ""
    for tag in sorted({kind(r["setting"]) for r in rows}):
        pts = [(r["share"], r["tok_s"]) for r in rows
               if kind(r["setting"]) == tag or (tag == "static" and r["share"] in (0, 100))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"Strata {a.tier}{' --pipe' if tag == 'pipe' else ' --n-cpu-moe' if tag == 'static' else ''}")
    if anchors:
        ks = sorted(anchors)
        ax.plot(ks, [anchors[k] for k in ks], marker="s", linestyle="--", label=anchor_label)
    ax.set_xlabel("share of expert bytes in the fast tier (%)")
    ax.set_ylabel(f"decode tok/s (tg{a.n})")
    ax.set_title(a.model.name)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out.with_suffix(".png"), dpi=120)
    print(f"plot: {a.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
