#!/usr/bin/env python3
"""synth_arch.py - random-weight GGUF files with the exact per-layer shapes of real models of the
architectures issue 35 adds (first `deepseek2`: DeepSeek-V2-Lite, DeepSeek-V3 / R1, Kimi-K2), for
timing runs. Same recipe as synth_moe.py: well-formed quant blocks, every weight zero-mean (so
each token routes to its own experts), norms F32 ones, the router F32 N(0, s), the tokenizer
copied from a vocab-only GGUF (--vocab) and its vocabulary size kept (the real vocab_size only
with --pad-vocab, which appends unused tokens).

What it takes from elsewhere, loaded from paths: synth_moe.py (--synth; default
../shared/bench/synth_moe.py beside the repository, else .devdata/synth_moe.py) for its Q8_0
scales of token_embd and output, and bench/synth_lowbit.py's Blocks, which writes synth_moe.py's
zero-mean Q8_0 / Q4_K blocks (and Q3_K) at a target spread. Q2_K, Q4_0 and Q5_0 blocks are
written here. The tokenizer copy is synth_moe.py's loop, copied (it lives inside its main()).

Types: experts --experts-type (Q4_K default; Q8_0, Q3_K, Q2_K), everything else Q8_0 (attn_k_b's
rows are qk_nope = 128 long: a 32-block type), norms, router and expert bias F32. Rows that a
256-block type does not divide (V2-Lite's n_ff_exp 1408, so its ffn_down_exps) take llama.cpp's
quantizer's fallback: Q4_K -> Q5_0, Q3_K / Q2_K -> Q4_0.

Spreads (weight std; a Q8_0 quant's rms is ~73, so scale = std / 73): every projection whose
input is an RMSNorm output (rms 1) gets std 1/sqrt(fan-in), so its output has rms 1 - q, the
latent c and k_pe (attn_kv_a_mqa), gate/up of every FFN; attention's and every FFN's output
projection gets 0.1/sqrt(fan-in), so each block adds rms ~0.1 or less to the hidden state, whose
rms stays ~1 (token_embd's) as in synth_moe.py. The routed experts follow the same rule (their
Q4_K d rescaled): synth_moe.py's fixed d would give width-7168 layers an output of rms ~3 each.

--layers N keeps the real per-layer shapes with fewer layers (--dense D of them dense; llama.cpp
takes a file without q_lora_rank for V2-Lite only at 26 or 27 layers); --dry-run prints the
tensor table and the byte totals and writes nothing (no --vocab needed). Blocks are made by --jobs
processes (each chunk from its own seed, so the bytes do not depend on the count).

usage: synth_arch.py PRESET OUT.gguf --vocab VOCAB.gguf [--experts-type q4_k] [--layers N]
       [--dense D] [--pad-vocab] [--synth PATH] [--seed N] [--jobs N] [--dry-run]
"""
import argparse
import collections
import importlib.util
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

HERE = Path(__file__).resolve().parent

# From the models' config.json. n_dense: leading dense layers; nope/rope/v: the MLA head widths;
# gating 1 softmax, 2 sigmoid (the sigmoid models carry exp_probs_b); groups: (count, used);
# yarn: (factor, original context, mscale_all_dim); layers/dense: what is written by default.
PRESETS = {
    "deepseek-v2-lite": dict(n_layer=27, n_embd=2048, n_head=16, q_lora=0, kv_lora=512, nope=128,
                             rope=64, v=128, n_ff=10944, n_dense=1, n_expert=64, n_shared=2,
                             n_used=6, n_ff_exp=1408, gating=1, norm=False, scale=1.0, groups=(1, 1),
                             yarn=(40.0, 4096, 0.707), rope_base=10000.0, vocab=102400, ctx=163840,
                             layers=27, dense=1),
    "deepseek-v3": dict(n_layer=61, n_embd=7168, n_head=128, q_lora=1536, kv_lora=512, nope=128,
                        rope=64, v=128, n_ff=18432, n_dense=3, n_expert=256, n_shared=1, n_used=8,
                        n_ff_exp=2048, gating=2, norm=True, scale=2.5, groups=(8, 4),
                        yarn=(40.0, 4096, 1.0), rope_base=10000.0, vocab=129280, ctx=163840,
                        layers=4, dense=1),
    "kimi-k2": dict(n_layer=61, n_embd=7168, n_head=64, q_lora=1536, kv_lora=512, nope=128, rope=64,
                    v=128, n_ff=18432, n_dense=1, n_expert=384, n_shared=1, n_used=8, n_ff_exp=2048,
                    gating=2, norm=True, scale=2.827, groups=(1, 1), yarn=(32.0, 4096, 1.0),
                    rope_base=50000.0, vocab=163840, ctx=131072, layers=4, dense=1),
    # small widths for tests: V3-style (q_lora, sigmoid + bias, groups) and V2-Lite-style (with
    # n_ff_exp, like V2-Lite's 1408, not a multiple of 256: its down experts take the fallback type)
    "deepseek2-tiny": dict(n_layer=3, n_embd=256, n_head=4, q_lora=128, kv_lora=64, nope=32, rope=16,
                           v=32, n_ff=512, n_dense=1, n_expert=16, n_shared=1, n_used=4,
                           n_ff_exp=256, gating=2, norm=True, scale=2.5, groups=(4, 2),
                           yarn=(40.0, 4096, 1.0), rope_base=10000.0, vocab=600, ctx=4096,
                           layers=3, dense=1),
    "deepseek2-lite-tiny": dict(n_layer=3, n_embd=256, n_head=4, q_lora=0, kv_lora=64, nope=32,
                                rope=16, v=32, n_ff=512, n_dense=1, n_expert=16, n_shared=2,
                                n_used=4, n_ff_exp=352, gating=1, norm=False, scale=1.0,
                                groups=(1, 1), yarn=(40.0, 4096, 0.707), rope_base=10000.0,
                                vocab=600, ctx=4096, layers=3, dense=1),
}
EXPERT_TYPES = {"q4_k": (Q.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M),
                "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
                "q3_k": (Q.Q3_K, gguf.LlamaFileType.MOSTLY_Q3_K_M),
                "q2_k": (Q.Q2_K, gguf.LlamaFileType.MOSTLY_Q2_K)}
# llama.cpp's quantizer's type for rows that its blocks do not divide (V2-Lite's n_ff_exp 1408)
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.Q6_K: Q.Q8_0}
CHUNK_BYTES = 256 << 20  # blocks are made and written this many bytes at a time


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def f16_u8(x):
    return np.frombuffer(np.float16(x).tobytes(), dtype=np.uint8)


def q2k_blocks(rng, n_rows, cols, std):
    """Zero-mean Q2_K rows: w = d sc q - dmin m, q in 0..3 (mean 1.5), d == dmin, m = 1.5 sc."""
    nb = n_rows * (cols // 256)
    raw = rng.integers(0, 256, size=(nb, 84), dtype=np.uint8)
    sc = np.array([2, 4, 6, 8], dtype=np.uint8)[raw[:, 0:16] & 3]
    raw[:, 0:16] = sc | (((sc * 3) // 2) << 4)
    unit = np.sqrt(np.mean(np.array([2, 4, 6, 8], dtype=np.float64) ** 2) * (4 ** 2 - 1) / 12)
    raw[:, 80:82] = raw[:, 82:84] = f16_u8(std / unit)
    return raw.reshape(n_rows, -1)


def small_block_rows(rng, n_rows, cols, std, bits):
    """Zero-mean Q4_0 (bits 4) or Q5_0 (bits 5) rows: w = d (q - 2^(bits-1)), q uniform with 0
    replaced by 2^(bits-1), so q - 2^(bits-1) is symmetric about 0 (as synth_moe.py's Q8_0)."""
    half = 1 << (bits - 1)
    nb = n_rows * (cols // 32)
    q = rng.integers(0, 2 * half, size=(nb, 32), dtype=np.uint8)
    q[q == 0] = half
    ms = 2 * np.sum(np.arange(1, half) ** 2.0) / (2 * half)
    d = np.broadcast_to(f16_u8(std / np.sqrt(ms)), (nb, 2))
    qs = (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)
    if bits == 4:
        return np.concatenate([d, qs], axis=1).reshape(n_rows, -1)
    qh = np.packbits((q >> 4) & 1, axis=1, bitorder="little")  # bit j of a little-endian u32
    return np.concatenate([d, qh, qs], axis=1).reshape(n_rows, -1)


def fit_type(qtype, cols):
    """qtype, or llama.cpp's fallback where rows of cols weights do not split into its blocks."""
    if qtype != Q.F32 and cols % gguf.GGML_QUANT_SIZES[qtype][0]:
        qtype = FALLBACK.get(qtype, qtype)
    if cols % gguf.GGML_QUANT_SIZES[qtype][0]:
        sys.exit(f"synth_arch: rows of {cols} weights do not split into {qtype.name} blocks")
    return qtype


class Tensor:
    """One planned tensor: rows x cols weights (cols the row length), `outer` times (experts or
    heads); kind 'q' (quantized at std; the default), 'ones' (F32; the default for F32) or
    'normal' (F32 N(0, std))."""

    def __init__(self, name, qtype, rows, cols, outer=None, std=1.0, kind=None):
        self.name, self.rows, self.cols, self.outer = name, rows, cols, outer
        self.qtype = fit_type(qtype, cols)
        self.std, self.kind = std, kind or ("ones" if qtype == Q.F32 else "q")

    @property
    def n_rows(self):
        return (self.outer or 1) * self.rows

    @property
    def row_bytes(self):
        per, size = gguf.GGML_QUANT_SIZES[self.qtype]
        return self.cols // per * size

    @property
    def nbytes(self):
        return self.n_rows * self.row_bytes

    @property
    def ne(self):  # GGUF order: row length first
        return (self.cols,) + ((self.rows,) if self.rows > 1 or self.outer else ()) + \
            ((self.outer,) if self.outer else ())


def attention_plan(p, b):
    """One layer's MLA tensors (prefix b), with their spreads."""
    e, nh, qk = p["n_embd"], p["n_head"], p["nope"] + p["rope"]
    t = [Tensor(b + "attn_norm.weight", Q.F32, 1, e)]
    if p["q_lora"]:
        t += [Tensor(b + "attn_q_a.weight", Q.Q8_0, p["q_lora"], e, std=e ** -0.5),
              Tensor(b + "attn_q_a_norm.weight", Q.F32, 1, p["q_lora"]),
              Tensor(b + "attn_q_b.weight", Q.Q8_0, nh * qk, p["q_lora"], std=p["q_lora"] ** -0.5)]
    else:
        t.append(Tensor(b + "attn_q.weight", Q.Q8_0, nh * qk, e, std=e ** -0.5))
    kv = p["kv_lora"]
    t += [Tensor(b + "attn_kv_a_mqa.weight", Q.Q8_0, kv + p["rope"], e, std=e ** -0.5),
          Tensor(b + "attn_kv_a_norm.weight", Q.F32, 1, kv),
          # k_b rows are nope long and sum over nope (q absorbed); the decompressed key
          # k_nope = k_b^T c sums over kv_lora, so std 1/sqrt(kv_lora) gives it rms 1
          Tensor(b + "attn_k_b.weight", Q.Q8_0, kv, p["nope"], nh, std=kv ** -0.5),
          Tensor(b + "attn_v_b.weight", Q.Q8_0, p["v"], kv, nh, std=kv ** -0.5),
          Tensor(b + "attn_output.weight", Q.Q8_0, e, nh * p["v"], std=0.1 * (nh * p["v"]) ** -0.5),
          Tensor(b + "ffn_norm.weight", Q.F32, 1, e)]
    return t


def ffn_plan(p, b, dense, et):
    """One layer's FFN tensors: dense SwiGLU, or router (+ bias), routed and shared experts."""
    e = p["n_embd"]
    if dense:
        f = p["n_ff"]
        return [Tensor(b + "ffn_gate.weight", Q.Q8_0, f, e, std=e ** -0.5),
                Tensor(b + "ffn_up.weight", Q.Q8_0, f, e, std=e ** -0.5),
                Tensor(b + "ffn_down.weight", Q.Q8_0, e, f, std=0.1 * f ** -0.5)]
    n, f, fs = p["n_expert"], p["n_ff_exp"], p["n_ff_exp"] * p["n_shared"]
    # router N(0, 0.05 sqrt(2048 / n_embd)): logits as spread as synth_moe.py's at width 2048
    t = [Tensor(b + "ffn_gate_inp.weight", Q.F32, n, e, std=0.05 * (2048 / e) ** 0.5, kind="normal")]
    if p["gating"] == 2:
        t.append(Tensor(b + "exp_probs_b.bias", Q.F32, 1, n, std=0.01, kind="normal"))
    t += [Tensor(b + "ffn_gate_exps.weight", et, f, e, n, std=e ** -0.5),
          Tensor(b + "ffn_up_exps.weight", et, f, e, n, std=e ** -0.5),
          Tensor(b + "ffn_down_exps.weight", et, e, f, n, std=0.1 * f ** -0.5),
          Tensor(b + "ffn_gate_shexp.weight", Q.Q8_0, fs, e, std=e ** -0.5),
          Tensor(b + "ffn_up_shexp.weight", Q.Q8_0, fs, e, std=e ** -0.5),
          Tensor(b + "ffn_down_shexp.weight", Q.Q8_0, e, fs, std=0.1 * fs ** -0.5)]
    return t


def tensor_plan(p, n_layer, n_dense, n_vocab, et, sm=None):
    """Every tensor of the file in order; token_embd / output at synth_moe.py's Q8_0 scales."""
    q8_rms = np.sqrt(np.sum(np.arange(-127, 128, dtype=np.float64) ** 2) / 256)
    embd = sm.q8_scale("token_embd.weight", p["n_embd"]) * q8_rms if sm else 1.0
    head = sm.q8_scale("output.weight", p["n_embd"]) * q8_rms if sm else 1e-3 * q8_rms
    plan = [Tensor("token_embd.weight", Q.Q8_0, n_vocab, p["n_embd"], std=embd)]
    for layer in range(n_layer):
        b = f"blk.{layer}."
        plan += attention_plan(p, b) + ffn_plan(p, b, layer < n_dense, et)
    plan += [Tensor("output_norm.weight", Q.F32, 1, p["n_embd"]),
             Tensor("output.weight", Q.Q8_0, n_vocab, p["n_embd"], std=head)]
    for i, t in enumerate(plan):
        t.index = i
    return plan


def add_metadata(w, p, name, n_layer, n_dense, n_vocab, ftype):
    """The deepseek2 keys llama.cpp's converter writes for DeepseekV2/V3ForCausalLM."""
    w.add_name(name)
    w.add_block_count(n_layer)
    w.add_context_length(p["ctx"])
    w.add_embedding_length(p["n_embd"])
    w.add_feed_forward_length(p["n_ff"])
    w.add_head_count(p["n_head"])
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    if p["q_lora"]:
        w.add_q_lora_rank(p["q_lora"])
    w.add_kv_lora_rank(p["kv_lora"])
    w.add_key_length(p["kv_lora"] + p["rope"])
    w.add_value_length(p["kv_lora"])
    w.add_key_length_mla(p["nope"] + p["rope"])
    w.add_value_length_mla(p["v"])
    w.add_rope_dimension_count(p["rope"])
    w.add_rope_freq_base(p["rope_base"])
    factor, orig, mscale_all = p["yarn"]
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(factor)
    w.add_rope_scaling_orig_ctx_len(orig)
    w.add_rope_scaling_yarn_log_mul(0.1 * mscale_all)
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_count(p["n_expert"])
    w.add_expert_used_count(p["n_used"])
    w.add_expert_shared_count(p["n_shared"])
    w.add_expert_feed_forward_length(p["n_ff_exp"])
    w.add_expert_weights_scale(p["scale"])
    w.add_expert_weights_norm(p["norm"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType(p["gating"]))
    if p["groups"][0] > 1:
        w.add_expert_group_count(p["groups"][0])
        w.add_expert_group_used_count(p["groups"][1])
    w.add_vocab_size(n_vocab)
    w.add_file_type(int(ftype))


def read_tokenizer(path):
    voc = gguf.GGUFReader(path)
    f = voc.fields["tokenizer.ggml.tokens"]
    return voc, [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]


def copy_tokenizer(w, voc, tokens, n_vocab):
    """synth_moe.py's tokenizer copy; tokens past the vocab file's own are unused placeholders."""
    pad = n_vocab - len(tokens)
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


def load_helpers(synth_path):
    """synth_moe.py (from --synth or its default places) and bench/synth_lowbit.py beside this file."""
    lowbit = load_module("synth_lowbit", HERE / "synth_lowbit.py")
    return lowbit.load_synth(synth_path), lowbit


def make_rows(t, n, blocks, rng):
    """n rows of t's data (uint8 blocks, or F32)."""
    if t.qtype == Q.F32:
        shape = (n, t.cols) if t.rows > 1 else (t.cols,)
        if t.kind == "ones":
            return np.ones(shape, dtype=np.float32)
        return (rng.standard_normal(shape) * t.std).astype(np.float32)
    if t.qtype == Q.Q2_K:
        return q2k_blocks(rng, n, t.cols, t.std)
    if t.qtype in (Q.Q4_0, Q.Q5_0):
        return small_block_rows(rng, n, t.cols, t.std, 4 if t.qtype == Q.Q4_0 else 5)
    return blocks.make(t.qtype, n, t.cols, t.std)


_HELPERS = None  # (synth_moe, synth_lowbit) for make_chunk, set before the worker processes fork


def make_chunk(job):
    """One chunk's rows from its own seed (seed, tensor, first row): the same bytes whichever
    process makes it. synth_moe.py's module-level generator is reseeded too (Blocks uses it)."""
    t, start, n, seed = job
    sm, lowbit = _HELPERS
    rng = np.random.default_rng([seed, t.index, start])
    sm.rng = np.random.default_rng([seed, t.index, start, 1])
    return make_rows(t, n, lowbit.Blocks(sm, rng), rng)


def chunks(plan, seed):
    for t in plan:
        step = t.n_rows if t.qtype == Q.F32 else max(1, CHUNK_BYTES // t.row_bytes)
        for start in range(0, t.n_rows, step):
            yield t, start, min(step, t.n_rows - start), seed


def made_in_order(plan, seed, jobs):
    """(job, data) for every chunk in file order, made by `jobs` processes, a few ahead."""
    if jobs <= 1:
        for job in chunks(plan, seed):
            yield job, make_chunk(job)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        window = collections.deque()
        for job in chunks(plan, seed):
            window.append((job, pool.apply_async(make_chunk, (job,))))
            if len(window) >= 2 * jobs:
                j, r = window.popleft()
                yield j, r.get()
        while window:
            j, r = window.popleft()
            yield j, r.get()


def write_file(args, p, plan, meta, voc_tokens):
    """Header, metadata, tokenizer, then every tensor, CHUNK_BYTES at a time.
    Returns {(kind, type): [(std / target, mean / target)]} from a dequantized sample of each."""
    voc, tokens = voc_tokens
    w = gguf.GGUFWriter(args.out, "deepseek2")
    add_metadata(w, p, *meta)
    copy_tokenizer(w, voc, tokens, meta[3])
    for t in plan:
        if t.qtype == Q.F32:
            w.add_tensor_info(t.name, tuple(reversed(t.ne)), np.dtype(np.float32), t.nbytes)
        else:
            bshape = ((t.outer,) if t.outer else ()) + (t.rows, t.row_bytes)
            w.add_tensor_info(t.name, bshape, np.dtype(np.uint8), t.nbytes, raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout, seen = w.fout[0], {}
    for (t, start, n, _), data in made_in_order(plan, args.seed, args.jobs):
        if start == 0:
            w.write_padding(fout, fout.tell())
            if t.kind == "q":
                x = gguf.quants.dequantize(data[:64], t.qtype).astype(np.float64)
                key = (t.name.split(".")[-2], t.qtype.name)
                seen.setdefault(key, []).append((x.std() / t.std, x.mean() / t.std))
        data.tofile(fout)
    w.write_padding(fout, fout.tell())
    w.close()
    return seen


def summary(name, p, plan, full_plan, n_layer, n_dense, n_vocab):
    """The shape line and the bytes one token reads, as lines of text."""
    by = {t.name: t for t in plan}
    n_moe = n_layer - n_dense
    b = f"blk.{n_dense}."
    expert = sum(by[b + k].nbytes // p["n_expert"] for k in
                 ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight")) if n_moe else 0
    routed = p["n_used"] * expert * n_moe
    rest = sum(t.nbytes for t in plan if not t.name.endswith("_exps.weight")
               and t.name != "token_embd.weight") + by["token_embd.weight"].row_bytes
    total, full = sum(t.nbytes for t in plan), sum(t.nbytes for t in full_plan)
    q = f"q_lora {p['q_lora']}" if p["q_lora"] else "no q_lora"
    groups = f", groups {p['groups'][0]}/{p['groups'][1]}" if p["groups"][0] > 1 else ""
    return [f"{name}: {n_layer} layers ({n_dense} dense + {n_moe} MoE; the model has {p['n_layer']}), "
            f"n_embd {p['n_embd']}, {p['n_head']} heads, {q}, kv_lora {p['kv_lora']}, "
            f"qk {p['nope']}+{p['rope']}, v {p['v']}, n_ff {p['n_ff']}",
            f"  experts {p['n_expert']} + {p['n_shared']} shared, top-{p['n_used']}, n_ff_exp "
            f"{p['n_ff_exp']}, {'sigmoid + bias' if p['gating'] == 2 else 'softmax'}"
            f"{groups}, norm {p['norm']}, scale {p['scale']}, vocab {n_vocab} (the model's {p['vocab']})",
            f"  weights {total} bytes ({total / 2**30:.2f} GiB); the full model at these types "
            f"({p['n_layer']} layers, vocab {p['vocab']}): {full / 2**30:.2f} GiB",
            f"  expert bytes per token {routed} ({p['n_used']} x {expert} x {n_moe} MoE layers, "
            f"{routed / 2**20:.1f} MiB); other weights per token {rest} ({rest / 2**20:.1f} MiB)"]


def layer_counts(args, p):
    n_layer = args.layers or p["layers"]
    if args.dense is not None:
        n_dense = args.dense
    else:
        n_dense = p["n_dense"] if n_layer >= p["n_layer"] else min(p["dense"], p["n_dense"])
    if not 1 <= n_layer or not 0 <= n_dense <= min(p["n_dense"], n_layer - 1):
        sys.exit(f"synth_arch: --layers {n_layer} --dense {n_dense}: need 0 <= dense <= "
                 f"{p['n_dense']} (the model's) and at least one MoE layer")
    return n_layer, n_dense


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("out", nargs="?")
    ap.add_argument("--vocab", help="a vocab-only GGUF whose tokenizer keys are copied")
    ap.add_argument("--experts-type", default="q4_k", choices=sorted(EXPERT_TYPES))
    ap.add_argument("--layers", type=int, help="layers to write (default: the preset's)")
    ap.add_argument("--dense", type=int, help="of them, leading dense layers")
    ap.add_argument("--pad-vocab", action="store_true",
                    help="append unused tokens up to the model's vocab_size (embedding and head at full size)")
    ap.add_argument("--synth", help="synth_moe.py to take token_embd / output scales and the blocks from")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes making blocks (the bytes do not depend on it)")
    ap.add_argument("--dry-run", action="store_true", help="print the tensor table and totals; write nothing")
    args = ap.parse_args()
    p = PRESETS[args.preset]
    et, ftype = EXPERT_TYPES[args.experts_type]
    n_layer, n_dense = layer_counts(args, p)
    if not args.dry_run and not (args.out and args.vocab):
        ap.error("OUT.gguf and --vocab are needed unless --dry-run")
    voc_tokens = read_tokenizer(args.vocab) if args.vocab else None
    if voc_tokens:
        n_vocab = max(len(voc_tokens[1]), p["vocab"]) if args.pad_vocab else len(voc_tokens[1])
    else:
        n_vocab = p["vocab"]
    global _HELPERS
    sm, lowbit = _HELPERS = load_helpers(args.synth)
    plan = tensor_plan(p, n_layer, n_dense, n_vocab, et, sm)
    full = tensor_plan(p, p["n_layer"], p["n_dense"], p["vocab"], et, sm)
    lines = summary(args.preset, p, plan, full, n_layer, n_dense, n_vocab)
    if args.dry_run:
        for t in plan:
            print(f"{t.name:36s} {t.qtype.name:5s} {str(list(t.ne)):24s} {t.nbytes}")
        print("\n".join(lines))
        return
    meta = (f"synthetic {args.preset}", n_layer, n_dense, n_vocab, ftype)
    seen = write_file(args, p, plan, meta, voc_tokens)
    print(f"wrote {args.out}: {len(plan)} tensors, experts {et.name}", file=sys.stderr)
    print("\n".join(lines), file=sys.stderr)
    for (kind, tname), r in sorted(seen.items()):
        r = np.array(r)
        print(f"  {kind:16s} {tname:5s} x{len(r):<3d} std/target {r[:, 0].min():.3f}..{r[:, 0].max():.3f}, "
              f"|mean|/target <= {np.abs(r[:, 1]).max():.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
