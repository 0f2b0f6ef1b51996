#!/usr/bin/env python3
"""ncu_split.py - the per-kernel time split of a decode step from an Nsight Compute CSV.

Input: `ncu -i REP --csv --page raw --metrics gpu__time_duration.sum` of a greedy run
(bench/device/device_gpu.sh NCU=1: `strata -p ... -n N --temp 0 --gpu --no-cuda-graphs` under ncu). Each
greedy step ends with one `st_k_argmax`, so the launches between two of them are one forward
pass; the first (the prompt's) is left out and the decode passes are averaged. Prints, per kernel
(template arguments folded), launches per step, microseconds per step and share, then the sum: the
GPU time of a step's kernels, each timed alone (ncu serializes them), against which a measured
step time shows what launch gaps and waiting cost.

    python3 bench/device/ncu_split.py ncu_decode.csv [--layers 48] [--step-ms 4.19] [--json out.json]

--whole: every kernel of the capture is one pass (a `strata bench -p 512 -n 0 -r 1 --no-warmup`
run under ncu: the prompt pass's split; device_gpu.sh NCU_PP=1).
"""
import argparse
import csv
import json
import re
import sys
from collections import OrderedDict


def short_name(name):
    """'void st_k_mmv_q<st_w_q8_0, 1>(const unsigned char *, ...)' -> 'st_k_mmv_q<st_w_q8_0, 1>'."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth, out = 0, []
    for ch in name:  # cut at the parameter list's parenthesis (outside template brackets)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        out.append(ch)
    name = "".join(out)
    return re.sub(r"\s+", " ", name)


def read_rows(path):
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu prints ==PROF== lines before the CSV
    rd = csv.reader(lines)
    header = next(rd)
    try:
        ki = next(i for i, h in enumerate(header) if h in ("Kernel Name", "Function Name"))
        ti = next(i for i, h in enumerate(header) if h.startswith("gpu__time_duration"))
    except StopIteration:
        sys.exit("ncu_split: no kernel name / gpu__time_duration column in " + path)
    rows = []
    for r in rd:
        if len(r) <= max(ki, ti):
            continue
        try:
            ns = float(r[ti].replace(",", ""))
        except ValueError:
            continue  # the units row
        rows.append((short_name(r[ki]), ns))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--layers", type=int, default=0, help="layers of the model: per-layer figures")
    ap.add_argument("--step-ms", type=float, default=0.0, help="a measured decode step, ms")
    ap.add_argument("--json", default="")
    ap.add_argument("--whole", action="store_true", help="all kernels are one pass (a prompt)")
    a = ap.parse_args()
    rows = read_rows(a.csv)
    if a.whole:
        steps = [rows]
    else:
        ends = [i for i, (n, _) in enumerate(rows) if n.startswith("st_k_argmax")]
        if len(ends) < 2:
            sys.exit(f"ncu_split: {len(rows)} kernels, {len(ends)} argmax launches: need 2 or more steps")
        steps = [rows[ends[j] + 1:ends[j + 1] + 1] for j in range(len(ends) - 1)]
    per = OrderedDict()
    for st in steps:
        for n, ns in st:
            c, t = per.get(n, (0, 0.0))
            per[n] = (c + 1, t + ns)
    k = len(steps)
    total_us = sum(t for _, t in per.values()) / k / 1000.0
    launches = sum(c for c, _ in per.values()) / k
    print(f"{'passes' if a.whole else 'decode steps'} averaged: {k}; kernels per step: {launches:.0f}; "
          f"GPU time of a step's kernels (each timed alone): {total_us:.1f} us")
    print(f"| kernel | launches/step | us/step | share | us/launch |")
    print(f"|---|---:|---:|---:|---:|")
    out = []
    for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        us = t / k / 1000.0
        print(f"| `{n}` | {c / k:.0f} | {us:.1f} | {100.0 * us / total_us:.1f}% | {t / c / 1000.0:.2f} |")
        out.append({"kernel": n, "launches": c / k, "us": us})
    if a.layers:
        print(f"per layer: {launches / a.layers:.1f} kernels, {total_us / a.layers:.2f} us of kernel time")
    if a.step_ms > 0:
        gap = a.step_ms * 1000.0 - total_us
        print(f"measured step {a.step_ms * 1000.0:.0f} us: kernels {total_us:.0f} us "
              f"({100.0 * total_us / (a.step_ms * 1000.0):.0f}%), the rest {gap:.0f} us "
              f"({gap / launches:.2f} us per launch) between and around them")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": k, "launches": launches, "kernel_us": total_us, "kernels": out}, f, indent=1)


if __name__ == "__main__":
    main()
