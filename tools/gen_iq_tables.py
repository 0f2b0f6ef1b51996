#!/usr/bin/env python3
"""gen_iq_tables.py - writes c/format/quant/iq_tables.c, the lookup tables of the non-linear (IQ)
block formats and MXFP4, from the arrays of the `gguf` Python package (gguf.quants), and
c/cuda/iq_grids.cuh, the same grids as device arrays for the CUDA kernels.

Tables written (declared in c/format/quant/quant.h):
  st_kvalues_iq4nl[16]    the 16 IQ4_NL / IQ4_XS levels (int8)
  st_iq3xxs_grid[256]     IQ3_XXS grid: 4 magnitudes per entry, byte k = element k (u32, LE)
  st_iq3s_grid[512]       IQ3_S grid, same packing
  st_ksigns_iq2xs[128]    7 sign bits -> 8 sign bits with even parity (bit 7 = parity)
  st_kmask_iq2xs[8]       1 << i
  st_iq2xxs_grid[256]     IQ2_XXS grid: 8 magnitudes per entry, byte k = element k (u64, LE)
  st_iq2xs_grid[512]      IQ2_XS grid, same packing
  st_iq2s_grid[1024]      IQ2_S grid, same packing
  st_iq1s_grid[2048]      IQ1_S / IQ1_M grid: 8 values in {-1, 0, 1} as int8 bytes (u64, LE)
  st_kvalues_mxfp4[16]    MXFP4 (E2M1) code -> twice its value (int8)

Rerun after a gguf package update (from the repository root):
    python3 tools/gen_iq_tables.py            # rewrites both files
    python3 tools/gen_iq_tables.py --check    # exits 1 if a committed file is stale
"""
import argparse
import os
import sys

import numpy as np
import gguf.quants as gq

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "c", "format", "quant", "iq_tables.c")
OUT_CUH = os.path.join(ROOT, "c", "cuda", "iq_grids.cuh")


def grid_u32(cls, rows):
    """The package's decoded float grid -> one u32 per row, element k in byte k."""
    cls.init_grid()
    g = np.asarray(cls.grid).reshape(rows, 4)
    vals = g.astype(np.int64)
    if not np.array_equal(vals.astype(g.dtype), g) or vals.min() < 0 or vals.max() > 255:
        sys.exit(f"{cls.__name__}: grid values are not bytes")
    out = vals[:, 0] | (vals[:, 1] << 8) | (vals[:, 2] << 16) | (vals[:, 3] << 24)
    return [int(v) for v in out]


def grid_u64(cls, rows, signed=False):
    """The package's decoded float grid -> one u64 per row, element k in byte k (int8 bytes when
    signed)."""
    cls.init_grid()
    g = np.asarray(cls.grid).reshape(rows, 8)
    vals = g.astype(np.int64)
    lo, hi = (-128, 127) if signed else (0, 255)
    if not np.array_equal(vals.astype(g.dtype), g) or vals.min() < lo or vals.max() > hi:
        sys.exit(f"{cls.__name__}: grid values are not {'int8' if signed else 'bytes'}")
    vals = vals & 0xFF
    out = np.zeros(rows, dtype=np.uint64)
    for k in range(8):
        out |= vals[:, k].astype(np.uint64) << np.uint64(8 * k)
    return [int(v) for v in out]


def tables():
    """Every table, by C name: (C type, values, per line, formatter)."""
    kvalues = [int(v) for v in gq.IQ4_NL.kvalues]
    ksigns = list(gq.IQ2_XXS.ksigns)
    mx = [int(v) for v in gq.MXFP4.kvalues]
    if len(kvalues) != 16 or len(ksigns) != 128 or len(mx) != 16:
        sys.exit("unexpected table sizes in gguf.quants")
    # Sanity: ksigns[i] is i with bit 7 set when i has an odd number of bits.
    for i, s in enumerate(ksigns):
        if s != (i | ((bin(i).count("1") & 1) << 7)):
            sys.exit(f"ksigns[{i}] = {s:#x} breaks the parity rule")
    if gq.IQ1_S.delta != 0.125 or gq.IQ1_M.delta != 0.125:
        sys.exit("IQ1 delta changed: update ST_IQ1S_DELTA / ST_IQ1M_DELTA in quant.h")
    gq.IQ1_M.init_grid()
    gq.IQ1_S.init_grid()
    if not np.array_equal(np.asarray(gq.IQ1_M.grid), np.asarray(gq.IQ1_S.grid)):
        sys.exit("IQ1_M's grid differs from IQ1_S's")
    hx32 = lambda v: f"0x{v:08x}"
    hx64 = lambda v: f"0x{v:016x}"
    hx8 = lambda v: f"0x{v:02x}"
    return {
        "st_kvalues_iq4nl": ("int8_t", kvalues, 16, str),
        "st_iq3xxs_grid": ("uint32_t", grid_u32(gq.IQ3_XXS, 256), 8, hx32),
        "st_iq3s_grid": ("uint32_t", grid_u32(gq.IQ3_S, 512), 8, hx32),
        "st_ksigns_iq2xs": ("uint8_t", ksigns, 16, hx8),
        "st_kmask_iq2xs": ("uint8_t", [1 << i for i in range(8)], 8, hx8),
        "st_iq2xxs_grid": ("uint64_t", grid_u64(gq.IQ2_XXS, 256), 4, hx64),
        "st_iq2xs_grid": ("uint64_t", grid_u64(gq.IQ2_XS, 512), 4, hx64),
        "st_iq2s_grid": ("uint64_t", grid_u64(gq.IQ2_S, 1024), 4, hx64),
        "st_iq1s_grid": ("uint64_t", grid_u64(gq.IQ1_S, 2048, signed=True), 4, hx64),
        "st_kvalues_mxfp4": ("int8_t", mx, 16, str),
    }


COMMENTS = {
    "st_kvalues_iq4nl": "IQ4_NL / IQ4_XS: the 16 non-uniform levels.",
    "st_iq3xxs_grid": "IQ3_XXS grid: 256 entries of 4 magnitudes, element k in byte k.",
    "st_iq3s_grid": "IQ3_S grid: 512 entries of 4 magnitudes, element k in byte k.",
    "st_ksigns_iq2xs": "7 stored sign bits -> 8 sign bits, the 8th making the parity even.",
    "st_kmask_iq2xs": "Bit i.",
    "st_iq2xxs_grid": "IQ2_XXS grid: 256 entries of 8 magnitudes, element k in byte k.",
    "st_iq2xs_grid": "IQ2_XS grid: 512 entries of 8 magnitudes, element k in byte k.",
    "st_iq2s_grid": "IQ2_S grid: 1024 entries of 8 magnitudes, element k in byte k.",
    "st_iq1s_grid": "IQ1_S / IQ1_M grid: 2048 entries of 8 values in {-1, 0, 1} (int8 bytes), element k in\n * byte k.",
    "st_kvalues_mxfp4": "MXFP4: E2M1 code -> twice its value (the E8M0 scale is halved to match).",
}

# The grids the CUDA kernels read (c/cuda/iq_grids.cuh): C name -> (macro, device array).
CUDA_GRIDS = [
    ("st_iq3xxs_grid", "ST_IQ3XXS_GRID_DATA", "st_dev_iq3xxs_grid"),
    ("st_iq3s_grid", "ST_IQ3S_GRID_DATA", "st_dev_iq3s_grid"),
    ("st_iq2xxs_grid", "ST_IQ2XXS_GRID_DATA", "st_dev_iq2xxs_grid"),
    ("st_iq2xs_grid", "ST_IQ2XS_GRID_DATA", "st_dev_iq2xs_grid"),
    ("st_iq2s_grid", "ST_IQ2S_GRID_DATA", "st_dev_iq2s_grid"),
    ("st_iq1s_grid", "ST_IQ1S_GRID_DATA", "st_dev_iq1s_grid"),
    ("st_ksigns_iq2xs", "ST_KSIGNS_IQ2XS_DATA", "st_dev_ksigns_iq2xs"),
    ("st_kvalues_mxfp4", "ST_KVALUES_MXFP4_DATA", "st_dev_kvalues_mxfp4"),
]


def fmt_rows(values, per_line, fmt):
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt(v) for v in values[i:i + per_line]) + ",")
    return "\n".join(lines)


def render():
    parts = ["""/* iq_tables.c - lookup tables of the non-linear (IQ) block formats and MXFP4.
 * GENERATED by tools/gen_iq_tables.py from the gguf Python package's arrays; do not edit.
 * Rerun: python3 tools/gen_iq_tables.py */
#include "quant.h"
"""]
    for name, (ctype, values, per, fmt) in tables().items():
        parts.append(f"""
/* {COMMENTS[name]} */
const {ctype} {name}[{len(values)}] = {{
{fmt_rows(values, per, fmt)}
}};
""")
    return "".join(parts)


def render_cuh():
    t = tables()
    parts = ["""/* iq_grids.cuh - the IQ grids, sign table and MXFP4 levels as device arrays, for the kernels
 * that decode these formats (c/cuda/mmv.cuh, dequant.cuh, the grouped expert kernels).
 * GENERATED by tools/gen_iq_tables.py with c/format/quant/iq_tables.c; do not edit.
 * st_cuda_mmv_tables_check (mmv.cu, run by c/tests/test_cuda_mmv.c without a GPU) compares the
 * ST_*_DATA lists with that file entry by entry. Grid entries hold 4 (u32) or 8 (u64) values,
 * element j in byte j.
 *
 * static: each .cu that includes this gets its own copy: no relocatable device code and no
 * run-time upload (which would not mix with stream capture). Read through the L1 cache: lanes
 * index different entries, which __constant__ memory would serialize. */
#ifndef STRATA_CUDA_IQ_GRIDS_CUH
#define STRATA_CUDA_IQ_GRIDS_CUH

#include <stdint.h>
"""]
    for name, macro, _ in CUDA_GRIDS:
        ctype, values, per, fmt = t[name]
        if ctype == "int8_t":
            fmt = str
        body = fmt_rows(values, per, fmt).replace(",\n", ", \\\n")
        body = body.rstrip(",")
        parts.append(f"""
/* {len(values)} entries ({ctype}) */
#define {macro} \\
{body}
""")
    parts.append("\n")
    for name, macro, dev in CUDA_GRIDS:
        ctype, values = t[name][0], t[name][1]
        parts.append(f"static __device__ const {ctype} {dev}[{len(values)}] = {{{macro}}};\n")
    parts.append("\n#endif /* STRATA_CUDA_IQ_GRIDS_CUH */\n")
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the files instead of writing")
    args = ap.parse_args()
    stale = 0
    for path, text in ((OUT, render()), (OUT_CUH, render_cuh())):
        name = os.path.basename(path)
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    same = f.read() == text
            except OSError:
                same = False
            print(f"{name} is up to date" if same else f"{name} is STALE: rerun the script")
            stale += not same
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"wrote {os.path.normpath(path)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
