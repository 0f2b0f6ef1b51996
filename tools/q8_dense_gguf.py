#!/usr/bin/env python3
"""q8_dense_gguf.py - a copy of a GGUF model whose dense projections and output head are Q8_0:
attention q/k/v/o (and the fused / low-rank forms), dense FFN layers, shared experts and
output.weight, requantized from whatever type they have (gguf.quants dequantizes, gguf.quants
quantizes to Q8_0). Routed experts (ffn_*_exps), the router (ffn_gate_inp), norms, token
embeddings and every 1-D tensor are left as they are, byte for byte, at the same file offsets.

Layout of an output file:
  - the header, key/value block and tensor-info block keep their byte length: only the type and
    data-offset fields of the converted tensors change (both fixed-width), so the data section
    starts where it did and every other tensor keeps its absolute file offset (the routed experts
    can be mmapped or streamed from the offsets the original had);
  - a converted tensor's Q8_0 data goes where its old data was when it fits there (F16 / F32 in),
    else (K- and i-quants in: Q8_0 is larger) it is appended after the data section, aligned to
    general.alignment, and the old bytes are left unreferenced.
  Strata reads such a file (its reader checks bounds and overlaps, not order); llama.cpp's loader
  wants the tensors packed in info order and refuses one with appended tensors.

Split models (NAME-00001-of-00003.gguf, as c/format/gguf_split.c names them; any shard may be
named): every shard holding a tensor to convert is rewritten, the others are hard-linked into the
output set (--copy copies them; so does a file system without the link); OUT must then be a
split name with the same shard count.

Error bound, checked per 32-weight block: Q8_0 rounds w / d with d = max|w| / 127 and stores d as
f16, so |w_q8 - w| <= d / 2 + 127 |f16(d) - d|: at most 1/254 of the block's max |w| plus the f16
rounding of its scale (at most 2^-11 of the block max while d is a normal f16, i.e. block max above
127 * 2^-14). A block past its bound (or not finite) refuses the conversion: non-zero exit, no
output written. Per tensor it prints max |w_q8 - w| as a share of the tensor's max |w|.

    python3 tools/q8_dense_gguf.py IN.gguf OUT.gguf [--copy] [--force]

Needs numpy and the `gguf` package (pip install gguf)."""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import struct
import sys

import numpy as np

SPLIT_RE = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")
Q8_BLOCK, Q8_BYTES, Q8_TYPE = 32, 34, 8  # GGMLQuantizationType.Q8_0
# blk.N.<kind>.weight of a dense projection (attention, dense FFN, shared expert)
DENSE_KINDS = {
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv",
    "attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_kv_b", "attn_k_b", "attn_v_b",
    "ffn_gate", "ffn_up", "ffn_down",
    "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp",
}
ROWS_PER_CHUNK_ELEMS = 1 << 24  # weights dequantized at a time


class Refused(Exception):
    """A clear, user-facing reason to stop (exit status 1, no output left behind)."""


def is_dense(name: str, n_dims: int) -> bool:
    if n_dims < 2:
        return False
    if name == "output.weight":
        return True
    m = re.fullmatch(r"blk\.\d+\.([a-z_]+)\.weight", name)
    return bool(m) and m.group(1) in DENSE_KINDS


def shard_paths(path: str) -> list[str]:
    """Every shard of the model path names (one path for a single file)."""
    m = SPLIT_RE.match(path)
    if not m or int(m.group(3)) <= 1:
        return [path]
    prefix, count = m.group(1), int(m.group(3))
    if not 1 <= int(m.group(2)) <= count:
        raise Refused(f"{path}: shard number {int(m.group(2))} outside 1..{count}")
    paths = [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise Refused(f"{path} is shard {int(m.group(2))} of {count}, but {', '.join(missing)} "
                      f"{'is' if len(missing) == 1 else 'are'} missing")
    return paths


def output_paths(out: str, n_shards: int) -> list[str]:
    if n_shards == 1:
        if SPLIT_RE.match(out) and int(SPLIT_RE.match(out).group(3)) > 1:
            raise Refused(f"{out}: the input is one file, so the output must not have a split name")
        return [out]
    m = SPLIT_RE.match(out)
    if not m or int(m.group(3)) != n_shards:
        raise Refused(f"the input is split into {n_shards} shards: name the output "
                      f"NAME-00001-of-{n_shards:05d}.gguf (got {out})")
    return [f"{m.group(1)}-{i:05d}-of-{n_shards:05d}.gguf" for i in range(1, n_shards + 1)]


def open_gguf(path: str):
    import gguf
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise Refused(f"{path}: cannot read: {e.strerror}")
    if magic != b"GGUF":
        raise Refused(f"{path}: not a GGUF file (starts with {magic!r}, not b'GGUF')")
    try:
        r = gguf.GGUFReader(path)
    except ValueError as e:  # e.g. a tensor type id gguf-py does not know
        raise Refused(f"{path}: gguf-py cannot read it: {e}")
    except Exception as e:  # noqa: BLE001 - truncated or malformed: say so, whatever gguf-py raised
        raise Refused(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})")
    if r.byte_order != "I":
        raise Refused(f"{path}: a big-endian GGUF; only little-endian files are supported")
    return r


def field_positions(t) -> tuple[int, int]:
    """File positions of a tensor-info entry's type (u32) and data-offset (u64) fields."""
    parts = t.field.parts  # name length, name, n_dims, dims, type, offset
    pos = t.field.offset + sum(int(p.nbytes) for p in parts[:4])
    return pos, pos + 4


def rows_of(t) -> np.ndarray:
    """The tensor's stored data as rows (one row per ne[0] weights)."""
    a = np.asarray(t.data)
    return a.reshape(-1, a.shape[-1])


def requantize(t) -> tuple[bytes, float, float, float]:
    """Q8_0 bytes of tensor t, the largest |w_q8 - w| / max|w| over the tensor, the largest
    block error as a share of its block's max, and the tensor's max |w|. Raises Refused when a
    block exceeds the Q8_0 bound or a value is not finite."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    rows = rows_of(t)
    n_cols = int(t.shape[0])
    step = max(1, ROWS_PER_CHUNK_ELEMS // n_cols)
    out, err_max, share_max, w_max = [], 0.0, 0.0, 0.0
    for i in range(0, rows.shape[0], step):
        try:
            w = gguf.quants.dequantize(np.ascontiguousarray(rows[i:i + step]), t.tensor_type)
        except NotImplementedError:
            raise Refused(f"{t.name}: gguf-py cannot dequantize {t.tensor_type.name}")
        w = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, n_cols)
        if not np.isfinite(w).all():
            raise Refused(f"{t.name}: holds non-finite weights (rows {i}..{i + len(w) - 1})")
        with np.errstate(over="ignore", invalid="ignore"):  # f16 overflow: refused below
            q = gguf.quants.quantize(w, Q.Q8_0)
            wq = gguf.quants.dequantize(q, Q.Q8_0)
            d = (np.abs(w.reshape(-1, Q8_BLOCK)).max(axis=1) / np.float32(127)).astype(np.float64)
            d16 = d.astype(np.float16).astype(np.float64)
        wb, qb = w.reshape(-1, Q8_BLOCK).astype(np.float64), wq.reshape(-1, Q8_BLOCK).astype(np.float64)
        amax = np.abs(wb).max(axis=1)
        # half a step + 127 x the f16 rounding of the scale, + float32 arithmetic slack
        bound = d / 2 + 127 * np.abs(d16 - d) + amax * 2.0 ** -20
        err = np.abs(qb - wb).max(axis=1)
        if not np.isfinite(d16).all():
            b = int(np.argmax(~np.isfinite(d16)))
            raise Refused(f"{t.name}: block {b} of rows {i}.. has max |w| {amax[b]:.6g}: its Q8_0 "
                          f"scale overflows f16; refusing to write")
        bad = ~(err <= bound)
        if bad.any():
            b = int(np.argmax(bad))
            raise Refused(f"{t.name}: block {b} of rows {i}.. has max |w_q8 - w| = {err[b]:.6g}, over "
                          f"the Q8_0 bound {bound[b]:.6g} (1/254 of its max |w| {amax[b]:.6g} plus the "
                          f"f16 rounding of its scale); refusing to write")
        nz = amax > 0
        if nz.any():
            share_max = max(share_max, float((err[nz] / amax[nz]).max()))
        err_max, w_max = max(err_max, float(err.max())), max(w_max, float(amax.max()))
        out.append(q.tobytes())
    return b"".join(out), (err_max / w_max if w_max > 0 else 0.0), share_max, w_max


def plan_shard(r) -> list:
    """The tensors of one opened shard to convert, with a line for each kept dense tensor."""
    from gguf import GGMLQuantizationType as Q
    todo = []
    for t in r.tensors:
        if not is_dense(t.name, len(t.shape)):
            continue
        if t.tensor_type == Q.Q8_0:
            print(f"  {t.name}: already Q8_0, kept")
        elif int(t.shape[0]) % Q8_BLOCK:
            print(f"  {t.name}: rows of {int(t.shape[0])} weights, not a multiple of 32: kept as "
                  f"{t.tensor_type.name}")
        else:
            todo.append(t)
    return todo


def write_shard(src: str, tmp: str, r, todo) -> int:
    """Writes tmp as src with the tensors of todo requantized, then checks it; returns how many
    tensors were converted."""
    align = int(r.alignment)
    data_start = int(r.data_offset)
    done = []
    shutil.copyfile(src, tmp)
    with open(tmp, "r+b") as f:
        for t in todo:
            q, share, block_share, w_max = requantize(t)
            old_off = int(t.data_offset) - data_start
            if len(q) <= int(t.n_bytes):
                off, where = old_off, "in place"
                f.seek(data_start + off)
                f.write(q + bytes(int(t.n_bytes) - len(q)))
            else:
                end = f.seek(0, os.SEEK_END)
                pad = (-(end - data_start)) % align
                f.write(bytes(pad))
                off, where = end + pad - data_start, "appended"
                f.write(q)
            type_pos, _ = field_positions(t)
            f.seek(type_pos)
            if struct.unpack("<IQ", f.read(12)) != (int(t.tensor_type), old_off):
                raise Refused(f"{src}: {t.name}: tensor-info fields not where expected")
            f.seek(type_pos)
            f.write(struct.pack("<IQ", Q8_TYPE, off))
            print(f"  {t.name}: {t.tensor_type.name} -> Q8_0, {where} ({len(q)} bytes, was "
                  f"{int(t.n_bytes)}); max |w_q8 - w| = {share:.3g} of max |w| {w_max:.4g} "
                  f"(worst block {block_share:.4g} of its max)")
            done.append((t, off, hashlib.sha256(q).hexdigest()))
        end = f.seek(0, os.SEEK_END)
        f.write(bytes((-(end - data_start)) % align))  # the file ends aligned, as writers do
    verify(src, tmp, r, done)
    return len(done)


def verify(src: str, out: str, r, done) -> None:
    """The written file reads back: same header bytes but the changed fields, untouched tensors
    at their offsets with their types, converted ones Q8_0, aligned, holding the bytes written."""
    ro = open_gguf(out)
    data_start = int(r.data_offset)
    if int(ro.data_offset) != data_start:
        raise Refused(f"{out}: data section moved ({ro.data_offset} != {data_start})")
    with open(src, "rb") as f:
        want = bytearray(f.read(data_start))
    for t, off, _ in done:
        pos, _ = field_positions(t)
        want[pos:pos + 12] = struct.pack("<IQ", Q8_TYPE, off)
    with open(out, "rb") as f:
        if f.read(data_start) != bytes(want):
            raise Refused(f"{out}: header bytes differ from the input beyond the changed fields")
    changed = {t.name: (off, h) for t, off, h in done}
    for a, b in zip(r.tensors, ro.tensors):
        if a.name != b.name:
            raise Refused(f"{out}: tensor order changed ({a.name} / {b.name})")
        if a.name in changed:
            off, h = changed[a.name]
            rel = int(b.data_offset) - data_start
            ok = (int(b.tensor_type) == Q8_TYPE and rel == off and rel % int(r.alignment) == 0
                  and hashlib.sha256(np.asarray(b.data).tobytes()).hexdigest() == h)
        else:
            ok = int(b.data_offset) == int(a.data_offset) and b.tensor_type == a.tensor_type
        if not ok:
            raise Refused(f"{out}: tensor {a.name} did not read back as written")


def place(src: str, dst: str, copy: bool) -> str:
    """dst as a hard link to src (a copy with copy, or where src's file system refuses the link:
    another file system, no link support); returns what was done."""
    if not copy:
        try:
            os.link(src, dst)
            return "hard-linked"
        except OSError as e:
            why = e.strerror
        shutil.copyfile(src, dst)
        return f"copied (no hard link: {why})"
    shutil.copyfile(src, dst)
    return "copied"


def convert(inp: str, out: str, copy: bool = False, force: bool = False) -> int:
    """Writes the output set (every file first under a temporary name, renamed once all are
    written and checked); returns the number of tensors converted."""
    ins = shard_paths(inp)
    outs = output_paths(out, len(ins))
    real_ins = {os.path.realpath(s) for s in ins}
    for d in outs:
        if os.path.realpath(d) in real_ins:
            raise Refused(f"{d} is an input file; write the output elsewhere")
        if os.path.lexists(d) and not force:
            raise Refused(f"{d} exists (pass --force to replace it)")
    readers = [open_gguf(s) for s in ins]
    plans = []
    for s, r in zip(ins, readers):
        print(f"{s}:")
        plans.append(plan_shard(r))
    tmps, n = [], 0
    try:
        for s, d, r, todo in zip(ins, outs, readers, plans):
            tmp = d + ".q8dense-tmp"
            if os.path.lexists(tmp):
                os.unlink(tmp)
            tmps.append(tmp)
            if todo:
                print(f"writing {d}")
                n += write_shard(s, tmp, r, todo)
            else:
                print(f"{d}: nothing to convert, {place(s, tmp, copy)}")
        for tmp, d in zip(tmps, outs):
            os.replace(tmp, d)
    finally:
        for tmp in tmps:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="model.gguf, or any shard of a split model")
    ap.add_argument("output", help="out.gguf (a split input: OUT-00001-of-0000M.gguf)")
    ap.add_argument("--copy", action="store_true", help="copy the unchanged shards (default: hard links)")
    ap.add_argument("--force", action="store_true", help="replace output files that exist")
    a = ap.parse_args(argv)
    try:
        n = convert(a.input, a.output, a.copy, a.force)
    except Refused as e:
        print(f"q8_dense_gguf: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"q8_dense_gguf: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"done: {n} tensors converted to Q8_0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
