#!/usr/bin/env python3
"""synth_lowbit.py - synth_moe.py's random-weight MoE files in the low-bit type mixes real
downloads have (unsloth / bartowski IQ2_XXS, IQ2_S, IQ1_M, IQ3_XXS, gpt-oss's MXFP4), for timing
the i-quant and MXFP4 kernels at a real model's shape.

What it shares with synth_moe.py, loaded from a path (--synth; default ../shared/bench/synth_moe.py
beside the repository, else .devdata/synth_moe.py inside it, where the GPU machine has it): the
shape table (SHAPES), the tensor list, the metadata, and each tensor's target spread: the standard
deviation of that tensor in a synth_moe.py file (measured by dequantizing a sample of its own
blocks: Q8_0 at q8_scale(name) for the dense tensors, its Q4_K blocks for the experts). Every
weight is zero-mean, so tokens route to their own experts as in synth_moe.py's files.

How the blocks are made: gguf.quants cannot quantize the i-quants or the K-quants, so every block
is written directly: random grid indices / quants and random sign bits (zero mean), sub-block
scales drawn at random (symmetric where they carry a sign), and the block's f16 scale set so the
dequantized weights have the target spread, from the mean square of the grid values (gguf.quants'
own grids) times that of the sub-block scale factors. MXFP4's scale is a power of two (e8m0), so
its blocks mix two neighbouring exponents in the share that lands on the target. Q8_0 and Q4_K
blocks are synth_moe.py's own (quant_blocks), rescaled. At the end a sample of every tensor is
dequantized with gguf.quants and the achieved spread per tensor type printed against the target.

Mixes (--mix; attention q/k, attention v/o, token embedding, head, experts gate/up, experts down):
  iq2_xxs  Q4_K, Q5_K, Q4_K, Q6_K, IQ2_XXS, IQ3_XXS   (UD-IQ2_XXS-like; the default)
  iq2_s    Q4_K, Q5_K, Q4_K, Q6_K, IQ2_S,   Q3_K      (Q2_K_XL / IQ2_M-like)
  iq1_m    Q4_K, Q5_K, Q4_K, Q6_K, IQ1_M,   IQ2_XXS   (UD-IQ1_M-like)
  iq3_xxs  Q4_K, Q5_K, Q4_K, Q6_K, IQ3_XXS, IQ4_XS    (UD-IQ3_XXS-like)
  mxfp4    Q8_0, Q8_0, Q8_0, Q8_0, MXFP4,   MXFP4     (gpt-oss-like)
Norms stay F32 ones and the router F32, as in synth_moe.py. (synth_moe.py's shapes have no shared
expert; real low-bit files keep theirs in Q8_0.)

usage: synth_lowbit.py SHAPE OUT.gguf --vocab VOCAB.gguf [--mix iq2_xxs] [--synth PATH]
       [--seed N]
"""
import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

REPO = Path(__file__).resolve().parent.parent
SYNTH_DEFAULTS = [REPO.parent / "shared" / "bench" / "synth_moe.py", REPO / ".devdata" / "synth_moe.py"]

# role -> type: q/k, v/o, embd, head, gate/up experts, down experts, and the file type to declare
MIXES = {
    "iq2_xxs": (Q.Q4_K, Q.Q5_K, Q.Q4_K, Q.Q6_K, Q.IQ2_XXS, Q.IQ3_XXS, gguf.LlamaFileType.MOSTLY_IQ2_XXS),
    "iq2_s": (Q.Q4_K, Q.Q5_K, Q.Q4_K, Q.Q6_K, Q.IQ2_S, Q.Q3_K, gguf.LlamaFileType.MOSTLY_IQ2_S),
    "iq1_m": (Q.Q4_K, Q.Q5_K, Q.Q4_K, Q.Q6_K, Q.IQ1_M, Q.IQ2_XXS, gguf.LlamaFileType.MOSTLY_IQ1_M),
    "iq3_xxs": (Q.Q4_K, Q.Q5_K, Q.Q4_K, Q.Q6_K, Q.IQ3_XXS, Q.IQ4_XS, gguf.LlamaFileType.MOSTLY_IQ3_XXS),
    "mxfp4": (Q.Q8_0, Q.Q8_0, Q.Q8_0, Q.Q8_0, Q.MXFP4, Q.MXFP4, gguf.LlamaFileType.MOSTLY_MXFP4_MOE),
}
U16_SCALE_MS = float(np.mean((np.arange(16) + 0.5) ** 2))  # 4-bit sub-block scales (0.5 + s)


def load_synth(path=None):
    cands = [Path(path)] if path else SYNTH_DEFAULTS
    for p in cands:
        if p.is_file():
            spec = importlib.util.spec_from_file_location("synth_moe", p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    sys.exit(f"synth_lowbit: synth_moe.py not found at {', '.join(map(str, cands))} (pass --synth PATH)")


def f16_u8(x):
    return np.frombuffer(np.float16(x).tobytes(), dtype=np.uint8)


def grid_ms(cls) -> float:
    """Mean square of an i-quant's grid values (gguf.quants' own table)."""
    if cls.grid is None:
        cls.init_grid()
    return float(np.mean(cls.grid.astype(np.float64) ** 2))


def pack6(v):
    """IQ4_XS-style 6-bit sub-block scales [..., 8] -> (u16 high bits, low nibbles [..., 4])."""
    lo = (v[..., 0::2] & 15) | ((v[..., 1::2] & 15) << 4)
    hi = np.zeros(v.shape[:-1], dtype=np.uint16)
    for s in range(v.shape[-1]):
        hi |= ((v[..., s].astype(np.uint16) >> 4) & 3) << (2 * s)
    return hi, lo.astype(np.uint8)


def q3k_scales(v):
    """16 six-bit Q3_K scales [..., 16] -> the 12 packed bytes."""
    out = np.zeros(v.shape[:-1] + (12,), dtype=np.uint8)
    out[..., 0:8] = (v[..., 0:8] & 15) | ((v[..., 8:16] & 15) << 4)
    for s in range(16):
        out[..., 8 + s % 4] |= ((v[..., s] >> 4) & 3) << (2 * (s // 4))
    return out


def sym6(rng, shape):
    """Random 6-bit stored scales whose value (stored - 32) is symmetric: -31..31."""
    return rng.integers(1, 64, size=shape, dtype=np.uint8)


class Blocks:
    """Random zero-mean blocks of each type, their spread set to a target (uint8 [rows, bytes])."""

    def __init__(self, sm, rng):
        self.sm, self.rng = sm, rng

    def make(self, qtype, n_rows, cols, std):
        per, size = gguf.GGML_QUANT_SIZES[qtype]
        nb = n_rows * (cols // per)
        raw = self.rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
        getattr(self, "_" + qtype.name.lower())(raw, std)
        return raw.reshape(n_rows, -1)

    def _q8_0(self, raw, std):  # synth_moe.py's blocks: int8 quants with 128 -> 0
        raw[:] = self.sm.quant_blocks(Q.Q8_0, raw.shape[0], 32, False, 1.0).reshape(raw.shape)
        raw[:, 0:2] = f16_u8(std / np.sqrt(np.mean(np.where(np.arange(256) == 128, 0,
                                                             np.arange(256).astype(np.int8)) ** 2.0)))

    def _q4_k(self, raw, std):  # synth_moe.py's blocks: d == dmin, m = 7.5 sc, zero mean
        raw[:] = self.sm.quant_blocks(Q.Q4_K, raw.shape[0], 256, False).reshape(raw.shape)
        unit = np.sqrt(np.mean(self.sm.Q4K_SC.astype(np.float64) ** 2) * (16 ** 2 - 1) / 12)
        raw[:, 0:2] = raw[:, 2:4] = f16_u8(std / unit)

    def _q5_k(self, raw, std):  # 5-bit quants, mean 15.5: d == dmin, m = 15.5 sc with sc in {2, 4}
        sc = np.array([2, 4], dtype=np.uint8)[self.rng.integers(0, 2, size=(raw.shape[0], 8))]
        raw[:, 4:16] = self.sm.q4k_scale_bytes(sc, (sc * 31) // 2)
        unit = np.sqrt(10.0 * (32 ** 2 - 1) / 12)  # E[sc^2] = (4 + 16) / 2
        raw[:, 0:2] = raw[:, 2:4] = f16_u8(std / unit)

    def _q6_k(self, raw, std):  # int8 sub-block scales +-1..32: zero mean
        mag = self.rng.integers(1, 33, size=(raw.shape[0], 16))
        sign = np.where(self.rng.integers(0, 2, size=mag.shape) == 0, -1, 1)
        raw[:, 192:208] = (mag * sign).astype(np.int8).view(np.uint8)
        q_ms = np.mean((np.arange(64) - 32.0) ** 2)
        sc_ms = np.mean(np.arange(1, 33) ** 2.0)
        raw[:, 208:210] = f16_u8(std / np.sqrt(q_ms * sc_ms))

    def _q3_k(self, raw, std):  # quants -4..3 (hmask + 2 bits), scales -31..31
        raw[:, 96:108] = q3k_scales(sym6(self.rng, (raw.shape[0], 16)))
        q_ms = np.mean(np.arange(-4, 4) ** 2.0)
        sc_ms = np.mean(np.arange(-31, 32) ** 2.0)
        raw[:, 108:110] = f16_u8(std / np.sqrt(q_ms * sc_ms))

    def _iq4_xs(self, raw, std):  # non-linear 4-bit values, scales -31..31
        hi, lo = pack6(sym6(self.rng, (raw.shape[0], 8)))
        raw[:, 2:4] = hi.reshape(-1, 1).view(np.uint8)
        raw[:, 4:8] = lo
        kv_ms = np.mean(np.array(gguf.quants.IQ4_NL.kvalues, dtype=np.float64) ** 2)
        raw[:, 0:2] = f16_u8(std / np.sqrt(kv_ms * np.mean(np.arange(-31, 32) ** 2.0)))

    # i-quants: random grid indices, sign bits and 4-bit scales; db = d (0.5 + s) / 4 (IQ2) or / 2
    def _iq2_xxs(self, raw, std):
        raw[:, 0:2] = f16_u8(std / np.sqrt(U16_SCALE_MS / 16 * grid_ms(gguf.quants.IQ2_XXS)))

    def _iq2_s(self, raw, std):
        raw[:, 0:2] = f16_u8(std / np.sqrt(U16_SCALE_MS / 16 * grid_ms(gguf.quants.IQ2_S)))

    def _iq3_xxs(self, raw, std):
        raw[:, 0:2] = f16_u8(std / np.sqrt(U16_SCALE_MS / 4 * grid_ms(gguf.quants.IQ3_XXS)))

    def _iq1_m(self, raw, std):  # (2 s + 1) sub-scales, grid values -1..1 plus a +-1/8 shift
        g = gguf.quants.IQ1_M
        ms = np.mean((2 * np.arange(8) + 1) ** 2.0) * (grid_ms(g) + float(g.delta) ** 2)
        d = int(np.float16(std / np.sqrt(ms)).view(np.uint16))
        sc = raw[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)  # four u16, d in their top nibbles
        for k in range(4):
            sc[:, k] |= np.uint16(((d >> (4 * k)) & 0xF) << 12)
        raw[:, 48:56] = sc.view(np.uint8)

    def _mxfp4(self, raw, std):  # e8m0 scale 2^(e - 128) x doubled e2m1 values; two exponents mixed
        kv_ms = np.mean(np.array(gguf.quants.MXFP4.kvalues, dtype=np.float64) ** 2)
        e0 = int(np.floor(np.log2(std / np.sqrt(kv_ms)))) + 128
        d0_ms = 2.0 ** (2 * (e0 - 128)) * kv_ms
        p = (std ** 2 / d0_ms - 1) / 3  # share of blocks at e0 + 1 (4x the mean square)
        raw[:, 0] = e0 + (self.rng.random(raw.shape[0]) < p)


def target_std(sm, cache, name, cols):
    """The spread this tensor has in a synth_moe.py file (a dequantized sample of its blocks)."""
    kind = name.split(".")[-2]
    key = (kind, cols)
    if key not in cache:
        if kind.endswith("_exps"):
            b = sm.quant_blocks(Q.Q4_K, 256, cols)
            cache[key] = float(gguf.quants.dequantize(b, Q.Q4_K).std())
        else:
            b = sm.quant_blocks(Q.Q8_0, 256, cols, False, sm.q8_scale(name, cols))
            cache[key] = float(gguf.quants.dequantize(b, Q.Q8_0).std())
    return cache[key]


def role_type(mix, name):
    qk, vo, embd, head, gu, down, _ = MIXES[mix]
    kind = name.split(".")[-2]
    return {"attn_q": qk, "attn_k": qk, "attn_v": vo, "attn_output": vo, "token_embd": embd,
            "output": head, "ffn_gate_exps": gu, "ffn_up_exps": gu, "ffn_down_exps": down}[kind]


def copy_tokenizer(w, voc, tokens, n_vocab=None):
    """synth_moe.py's tokenizer copy from the vocab file voc (tokens: its token strings); with
    n_vocab above their count the rest are unused placeholders (synth_arch.py's --pad-vocab)."""
    pad = (n_vocab or len(tokens)) - len(tokens)
    for key, field in voc.fields.items():
        if key == "tokenizer.ggml.tokens":
            w.add_token_list(tokens + [f"<|synth_unused_{i}|>" for i in range(pad)])
        elif key == "tokenizer.ggml.merges":
            w.add_token_merges([bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data])
        elif key == "tokenizer.ggml.token_type":
            w.add_token_types([int(field.parts[i][0]) for i in field.data] + [5] * pad)
        elif key == "tokenizer.ggml.model":
            w.add_tokenizer_model(bytes(field.parts[-1]).decode())
        elif key == "tokenizer.ggml.pre":
            w.add_tokenizer_pre(bytes(field.parts[-1]).decode())
        elif key == "tokenizer.ggml.bos_token_id":
            w.add_bos_token_id(int(field.parts[-1][0]))
        elif key == "tokenizer.ggml.eos_token_id":
            w.add_eos_token_id(int(field.parts[-1][0]))


def writer_with_metadata(sm, args, shape):
    """A GGUFWriter holding synth_moe.py's metadata for shape and the vocab file's tokenizer."""
    arch, n_layer, n_embd, n_head, n_kv, hd, n_exp, n_used, n_ff, norm_topk = shape
    voc = gguf.GGUFReader(args.vocab)
    tokens = [bytes(voc.fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8", "replace")
              for i in voc.fields["tokenizer.ggml.tokens"].data]
    w = gguf.GGUFWriter(args.out, arch)
    w.add_name(f"synthetic {args.shape} {args.mix}")
    w.add_block_count(n_layer)
    w.add_context_length(32768)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(n_exp)
    w.add_expert_used_count(n_used)
    w.add_expert_feed_forward_length(n_ff)
    w.add_expert_weights_norm(norm_topk)
    w.add_file_type(int(MIXES[args.mix][-1]))
    copy_tokenizer(w, voc, tokens)
    return w, len(tokens)


def tensor_plan(shape, n_vocab):
    """(name, rows, cols, experts) in synth_moe.py's order; rows 1 for 1-D tensors."""
    arch, n_layer, n_embd, n_head, n_kv, hd, n_exp, n_used, n_ff, norm_topk = shape
    plan = [("token_embd.weight", n_vocab, n_embd, None)]
    for l in range(n_layer):
        b = f"blk.{l}."
        qk_w = hd if arch == "qwen3moe" else None
        plan += [(b + "attn_norm.weight", 1, n_embd, None),
                 (b + "attn_q.weight", n_head * hd, n_embd, None),
                 (b + "attn_k.weight", n_kv * hd, n_embd, None),
                 (b + "attn_v.weight", n_kv * hd, n_embd, None),
                 (b + "attn_output.weight", n_embd, n_head * hd, None),
                 (b + "attn_q_norm.weight", 1, qk_w or n_head * hd, None),
                 (b + "attn_k_norm.weight", 1, qk_w or n_kv * hd, None),
                 (b + "ffn_norm.weight", 1, n_embd, None),
                 (b + "ffn_gate_inp.weight", n_exp, n_embd, None),
                 (b + "ffn_gate_exps.weight", n_ff, n_embd, n_exp),
                 (b + "ffn_up_exps.weight", n_ff, n_embd, n_exp),
                 (b + "ffn_down_exps.weight", n_embd, n_ff, n_exp)]
    plan += [("output_norm.weight", 1, n_embd, None), ("output.weight", n_vocab, n_embd, None)]
    return plan


def is_f32(name):
    return name.endswith("norm.weight") or "gate_inp" in name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape")
    ap.add_argument("out")
    ap.add_argument("--vocab", required=True, help="a vocab-only GGUF whose tokenizer keys are copied")
    ap.add_argument("--mix", default="iq2_xxs", choices=sorted(MIXES))
    ap.add_argument("--synth", help="synth_moe.py to take the shapes and spreads from")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    sm = load_synth(args.synth)
    if args.shape not in sm.SHAPES:
        sys.exit(f"synth_lowbit: unknown shape {args.shape!r} (synth_moe.py has {', '.join(sorted(sm.SHAPES))})")
    shape = sm.SHAPES[args.shape]
    rng = np.random.default_rng(args.seed)
    blocks, cache = Blocks(sm, rng), {}
    w, n_vocab = writer_with_metadata(sm, args, shape)
    plan = tensor_plan(shape, n_vocab)
    for name, rows, cols, experts in plan:
        n = (experts or 1) * rows
        if is_f32(name):
            w.add_tensor_info(name, (rows, cols) if rows > 1 else (cols,), np.dtype(np.float32), n * cols * 4)
            continue
        qt = role_type(args.mix, name)
        per, size = gguf.GGML_QUANT_SIZES[qt]
        if cols % per:
            sys.exit(f"synth_lowbit: {name}: rows of {cols} weights do not split into {qt.name} blocks of {per}")
        bshape = ((experts,) if experts else ()) + (rows, cols // per * size)
        w.add_tensor_info(name, bshape, np.dtype(np.uint8), n * (cols // per) * size, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total, seen = 0, {}
    for name, rows, cols, experts in plan:
        n = (experts or 1) * rows
        if is_f32(name):
            data = ((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32) if "gate_inp" in name
                    else np.ones((rows, cols) if rows > 1 else (cols,), dtype=np.float32))
        else:
            qt, std = role_type(args.mix, name), target_std(sm, cache, name, cols)
            data = blocks.make(qt, n, cols, std)
            sample = gguf.quants.dequantize(data[:min(n, 64)], qt).astype(np.float64)
            seen.setdefault((qt.name, name.split(".")[-2].replace("blk", "")), []).append(
                (sample.std() / std, sample.mean() / std))
            if experts:
                data = data.reshape(experts, rows, -1)
        w.write_tensor_data(data)
        total += data.nbytes
    w.close()
    print(f"wrote {args.out}: {len(plan)} tensors, {total / 2**30:.2f} GiB, vocab {n_vocab}, mix {args.mix}",
          file=sys.stderr)
    for (tname, kind), r in sorted(seen.items()):
        r = np.array(r)
        print(f"  {kind:14s} {tname:8s} x{len(r):<3d} std/target {r[:, 0].min():.3f}..{r[:, 0].max():.3f}, "
              f"|mean|/target <= {np.abs(r[:, 1]).max():.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
