#!/usr/bin/env python3
"""synth_arch.py - random-weight GGUF files with the exact per-layer shapes of real models of the
architectures issue 35 adds, for timing runs: `deepseek2` (DeepSeek-V2-Lite, DeepSeek-V3 / R1,
Kimi-K2), `glm4moe` (GLM-4.5-Air, GLM-4.5, with their MTP layer), `gpt-oss` (gpt-oss-20b,
gpt-oss-120b) and `qwen3next` (Qwen3-Next-80B-A3B: gated DeltaNet layers with gated full attention
every 4th, 512 experts top-10 and a gated shared expert; its MTP layer is not written, as
tools/convert_hf.py does not convert it). Same recipe as synth_moe.py: well-formed quant blocks, every weight zero-mean (so
each token routes to its own experts), norms F32 ones, the router F32 N(0, s), the tokenizer
copied from a vocab-only GGUF (--vocab) and its vocabulary size kept (the real vocab_size only
with --pad-vocab, which appends unused tokens).

What it takes from elsewhere, loaded from paths: synth_moe.py (--synth; default
../shared/bench/synth_moe.py beside the repository, else .devdata/synth_moe.py) for its Q8_0
scales of token_embd and output, and bench/synth_lowbit.py's Blocks, which writes synth_moe.py's
zero-mean Q8_0 / Q4_K blocks (and Q3_K, Q5_K, Q6_K, MXFP4) at a target spread. Q2_K, Q4_0, Q5_0
and Q5_1 blocks are written here. The tokenizer copy is synth_lowbit.py's copy_tokenizer
(synth_moe.py's loop, which lives inside its main()), padded with --pad-vocab.

Types (--experts-type; the preset's default): q4_k (deepseek2's), q8_0, q3_k, q2_k or mxfp4
(gpt-oss's; llama.cpp's MOSTLY_MXFP4_MOE) put the routed experts in that type and every other
matrix in Q8_0 (the real gpt-oss GGUFs of ggml-org keep attention, embedding and head in Q8_0;
OpenAI's checkpoint has them in bf16). q3_k_m (glm4moe's) is llama.cpp's Q3_K_M mix for a model
of more than 8 experts (llama-quant.cpp's llama_tensor_get_type): Q3_K for q, k, every gate / up
(routed, shared, dense), the token embedding and the MTP eh_proj; Q4_K for attention output; attn_v
Q5_K in the first two layers, else Q4_K; every down projection Q5_K in the first block_count / 16
layers, else Q4_K; the head Q6_K. qwen3next's attn_qkv (its DeltaNet layers' q/k/v) counts as an
attn_v (llama.cpp's attn_v branch takes ATTENTION_QKV before its own rule does, with one counter in
layer order): Q5_K in layers 0 and 1, whichever kind they are, else Q4_K; llama-quant.cpp has no rule
for attn_gate, ssm_ba or ssm_out, so they take the mix's Q3_K (Q8_0 in the single-type mixes) and it
never quantizes ssm_conv1d. Norms, biases, sinks, routers, expert bias, qwen3next's ssm_conv1d,
ssm_a, ssm_dt and shared-expert gate (ffn_gate_inp_shexp, one row) stay F32. Rows that
a 256-block type does not divide (GLM-4.5-Air's n_ff_exp 1408 and n_ff 10944, V2-Lite's 1408,
gpt-oss's 2880) take llama.cpp's quantizer's fallback: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
Q3_K / Q2_K -> Q4_0. So GLM-4.5-Air at q3_k_m has Q3_K gate/up experts and Q5_0 down experts
(Q5_1 in layers 0-1), GLM-4.5 Q3_K and Q4_K (Q5_K in layers 0-4).

Spreads (weight std; a Q8_0 quant's rms is ~73, so scale = std / 73): every projection whose
input is an RMSNorm output (rms 1) gets std 1/sqrt(fan-in), so its output has rms 1 - q, k, v,
the latent c and k_pe (attn_kv_a_mqa), gate/up of every FFN, the MTP layer's eh_proj (its input
is two normed halves, fan-in 2 n_embd); attention's and every FFN's output projection gets
0.1/sqrt(fan-in), so each block adds rms ~0.1 or less to the hidden state, whose rms stays ~1
(token_embd's) as in synth_moe.py. The routed experts follow the same rule (their blocks'
d rescaled): synth_moe.py's fixed d would give width-7168 layers an output of rms ~3 each. F32
N(0, s): routers s = 0.05 sqrt(2048 / n_embd) (logits as spread as synth_moe.py's at width 2048),
the selection bias (exp_probs_b) and gpt-oss's router bias 0.01, q/k/v biases and gpt-oss's
gate/up expert biases 0.02 (against outputs of rms 1), gpt-oss's attention-output and down-expert
biases 0.01 (added to the residual, like the outputs of rms ~0.1), gpt-oss's attention sinks 0.1.
qwen3next: attn_qkv, attn_gate, ssm_ba and attn_q (query and output gate) read the normed hidden
state, std 1/sqrt(n_embd); ssm_out and attn_output 0.1/sqrt(fan-in); the shared-expert gate N(0, s)
as the router; conv1d taps N(0, 0.5) (four taps over inputs of rms 1: rms ~1); ssm_a =
-exp(N(0, 0.5)) (negative, as the converter's -exp(A_log)); ssm_dt.bias ones (transformers' init).
The DeltaNet's output passes its per-head RMSNorm before ssm_out, so its recurrent state cannot
carry a growth into the hidden state.

--layers N keeps the real per-layer shapes with fewer layers (--dense D of them dense; llama.cpp
takes a file without q_lora_rank for V2-Lite only at 26 or 27 layers; for qwen3next N should be a
multiple of full_attention_interval, 4, so the file holds whole periods of 3 DeltaNet layers and
one attention layer, as the model does). glm4moe presets write their
MTP layer after the trunk (blk.N: a whole MoE layer plus blk.N.nextn.eh_proj / enorm / hnorm /
shared_head_norm, as the checkpoints have it: no nextn.embed_tokens or shared_head_head; counted in
block_count, nextn_predict_layers 1); --no-mtp drops it. --dry-run prints the tensor table, the
byte totals and the routed-expert bytes one token reads, and writes nothing (no --vocab needed).
Blocks are made by --jobs processes (each chunk from its own seed, so the bytes do not depend on
the count).

--dry-run of qwen3-next-80b (the default Q3_K_M mix, vocab 151936):

| layers | weights | routed experts | expert bytes per token | other weights per token |
|---|---|---|---|---|
| 48 | 38272064512 (35.64 GiB) | 3.812 bits a weight (Q3_K 67%, Q4_K 31%, Q5_K 2%) | 719585280 (686.2 MiB) | 1295595376 (1235.6 MiB) |
| 12 | 9812455168 (9.14 GiB) | 3.792 bits a weight (Q3_K 67%, Q4_K 33%) | 178913280 (170.6 MiB) | 518392432 (494.4 MiB) |

(at 12 layers block_count / 16 is 0, so no layer keeps Q5_K down projections, as llama.cpp would
quantize a 12-layer file)

usage: synth_arch.py PRESET OUT.gguf --vocab VOCAB.gguf [--experts-type T] [--layers N]
       [--dense D] [--no-mtp] [--pad-vocab] [--synth PATH] [--seed N] [--jobs N] [--dry-run]
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

# From the models' config.json. deepseek2: n_dense leading dense layers; nope/rope/v the MLA head
# widths; gating 1 softmax, 2 sigmoid (the sigmoid models carry exp_probs_b); groups (count, used);
# yarn (factor, original context, mscale_all_dim). glm4moe: head_dim, rope = head_dim *
# partial_rotary_factor, qk_norm (use_qk_norm), mtp (num_nextn_predict_layers). gpt-oss: swa
# (sliding_window), yarn (factor, original context, beta_fast, beta_slow). qwen3next: n_ff_shexp
# (shared_expert_intermediate_size), interval (full_attention_interval), conv
# (linear_conv_kernel_dim), nk / nv (linear_num_key_heads / linear_num_value_heads), ssm_head
# (linear_key_head_dim, equal to linear_value_head_dim). layers/dense: what is written by default;
# etype: the default --experts-type.
DS2 = dict(arch="deepseek2", etype="q4_k", eps=1e-6, mtp=0)
GLM = dict(arch="glm4moe", etype="q3_k_m", eps=1e-5, gating=2, groups=(1, 1), n_shared=1)
OSS = dict(arch="gpt-oss", etype="mxfp4", eps=1e-5, mtp=0, n_dense=0, dense=0, n_ff=0,
           rope_base=150000.0, yarn=(32.0, 4096, 32.0, 1.0), swa=128, vocab=201088, ctx=131072)
QN = dict(arch="qwen3next", etype="q3_k_m", eps=1e-6, mtp=0, n_dense=0, dense=0, n_shared=1,
          gating=1, norm=True, conv=4)
PRESETS = {
    "deepseek-v2-lite": dict(DS2, n_layer=27, n_embd=2048, n_head=16, q_lora=0, kv_lora=512, nope=128,
                             rope=64, v=128, n_ff=10944, n_dense=1, n_expert=64, n_shared=2,
                             n_used=6, n_ff_exp=1408, gating=1, norm=False, scale=1.0, groups=(1, 1),
                             yarn=(40.0, 4096, 0.707), rope_base=10000.0, vocab=102400, ctx=163840,
                             layers=27, dense=1),
    "deepseek-v3": dict(DS2, n_layer=61, n_embd=7168, n_head=128, q_lora=1536, kv_lora=512, nope=128,
                        rope=64, v=128, n_ff=18432, n_dense=3, n_expert=256, n_shared=1, n_used=8,
                        n_ff_exp=2048, gating=2, norm=True, scale=2.5, groups=(8, 4),
                        yarn=(40.0, 4096, 1.0), rope_base=10000.0, vocab=129280, ctx=163840,
                        layers=4, dense=1),
    "kimi-k2": dict(DS2, n_layer=61, n_embd=7168, n_head=64, q_lora=1536, kv_lora=512, nope=128, rope=64,
                    v=128, n_ff=18432, n_dense=1, n_expert=384, n_shared=1, n_used=8, n_ff_exp=2048,
                    gating=2, norm=True, scale=2.827, groups=(1, 1), yarn=(32.0, 4096, 1.0),
                    rope_base=50000.0, vocab=163840, ctx=131072, layers=4, dense=1),
    "glm-4.5-air": dict(GLM, n_layer=46, n_embd=4096, n_head=96, n_kv=8, head_dim=128, rope=64,
                        qk_norm=False, n_ff=10944, n_dense=1, n_expert=128, n_used=8, n_ff_exp=1408,
                        norm=True, scale=1.0, rope_base=1e6, vocab=151552, ctx=131072, mtp=1,
                        layers=46, dense=1),
    "glm-4.5": dict(GLM, n_layer=92, n_embd=5120, n_head=96, n_kv=8, head_dim=128, rope=64,
                    qk_norm=True, n_ff=12288, n_dense=3, n_expert=160, n_used=8, n_ff_exp=1536,
                    norm=True, scale=2.5, rope_base=1e6, vocab=151552, ctx=131072, mtp=1,
                    layers=4, dense=1),
    "gpt-oss-20b": dict(OSS, n_layer=24, n_embd=2880, n_head=64, n_kv=8, head_dim=64, n_expert=32,
                        n_used=4, n_ff_exp=2880, layers=24),
    "gpt-oss-120b": dict(OSS, n_layer=36, n_embd=2880, n_head=64, n_kv=8, head_dim=64, n_expert=128,
                         n_used=4, n_ff_exp=2880, layers=4),
    "qwen3-next-80b": dict(QN, n_layer=48, n_embd=2048, n_head=16, n_kv=2, head_dim=256, rope=64,
                           rope_base=1e7, n_ff=5120, n_expert=512, n_used=10, n_ff_exp=512,
                           n_ff_shexp=512, interval=4, nk=16, nv=32, ssm_head=128, vocab=151936,
                           ctx=262144, layers=48),
    # small widths for tests: V3-style (q_lora, sigmoid + bias, groups) and V2-Lite-style (with
    # n_ff_exp, like V2-Lite's 1408, not a multiple of 256: its down experts take the fallback type)
    "deepseek2-tiny": dict(DS2, n_layer=3, n_embd=256, n_head=4, q_lora=128, kv_lora=64, nope=32, rope=16,
                           v=32, n_ff=512, n_dense=1, n_expert=16, n_shared=1, n_used=4,
                           n_ff_exp=256, gating=2, norm=True, scale=2.5, groups=(4, 2),
                           yarn=(40.0, 4096, 1.0), rope_base=10000.0, vocab=600, ctx=4096,
                           layers=3, dense=1),
    "deepseek2-lite-tiny": dict(DS2, n_layer=3, n_embd=256, n_head=4, q_lora=0, kv_lora=64, nope=32,
                                rope=16, v=32, n_ff=512, n_dense=1, n_expert=16, n_shared=2,
                                n_used=4, n_ff_exp=352, gating=1, norm=False, scale=1.0,
                                groups=(1, 1), yarn=(40.0, 4096, 0.707), rope_base=10000.0,
                                vocab=600, ctx=4096, layers=3, dense=1),
    # GLM-4.5-Air-style (no q/k norm; n_ff and n_ff_exp, like 10944 and 1408, not multiples of
    # 256) and GLM-4.5-style (q/k norms, 2 dense layers, 20 experts)
    "glm4moe-air-tiny": dict(GLM, n_layer=3, n_embd=256, n_head=4, n_kv=2, head_dim=64, rope=32,
                             qk_norm=False, n_ff=544, n_dense=1, n_expert=16, n_used=4, n_ff_exp=352,
                             norm=True, scale=1.0, rope_base=1e6, vocab=600, ctx=4096, mtp=1,
                             layers=3, dense=1),
    "glm4moe-tiny": dict(GLM, n_layer=4, n_embd=256, n_head=4, n_kv=2, head_dim=64, rope=32,
                         qk_norm=True, n_ff=512, n_dense=2, n_expert=20, n_used=4, n_ff_exp=256,
                         norm=True, scale=2.5, rope_base=1e6, vocab=600, ctx=4096, mtp=1,
                         layers=4, dense=2),
    # gpt-oss-style: a width (192) no 256-block type divides, like 2880
    "gpt-oss-tiny": dict(OSS, n_layer=3, n_embd=192, n_head=4, n_kv=2, head_dim=32, n_expert=16,
                         n_used=4, n_ff_exp=160, swa=16, vocab=600, ctx=4096, layers=3),
    # Qwen3-Next-style with attention every 2nd layer, so 4 layers hold both kinds twice
    "qwen3next-tiny": dict(QN, n_layer=4, n_embd=256, n_head=4, n_kv=2, head_dim=64, rope=16,
                           rope_base=1e7, n_ff=512, n_expert=16, n_used=4, n_ff_exp=256,
                           n_ff_shexp=256, interval=2, nk=2, nv=4, ssm_head=64, vocab=600,
                           ctx=4096, layers=4),
}
# --experts-type: (the routed experts' type, or None for the whole-file mix; the file type)
EXPERT_TYPES = {"q4_k": (Q.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M),
                "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
                "q3_k": (Q.Q3_K, gguf.LlamaFileType.MOSTLY_Q3_K_M),
                "q2_k": (Q.Q2_K, gguf.LlamaFileType.MOSTLY_Q2_K),
                "mxfp4": (Q.MXFP4, gguf.LlamaFileType.MOSTLY_MXFP4_MOE),
                "q3_k_m": (None, gguf.LlamaFileType.MOSTLY_Q3_K_M)}
# llama.cpp's quantizer's type for rows that its blocks do not divide (V2-Lite's n_ff_exp 1408)
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}
CHUNK_BYTES = 256 << 20  # blocks are made and written this many bytes at a time
# F32 N(0, s) spreads (see the docstring)
BIAS_QKV, BIAS_OUT, BIAS_SEL, SINKS = 0.02, 0.01, 0.01, 0.1
# qwen3next's gated DeltaNet: conv1d taps N(0, CONV_TAP) (the depthwise causal conv over `conv`
# positions of rms-1 inputs keeps rms ~1); ssm_a = -exp(N(0, A_LOG)) (see deltanet_plan)
CONV_TAP, A_LOG = 0.5, 0.5


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


def q5_1_rows(rng, n_rows, cols, std):
    """Zero-mean Q5_1 rows: w = d q + m, q uniform in 0..31 (mean 15.5), m = -15.5 d."""
    nb = n_rows * (cols // 32)
    q = rng.integers(0, 32, size=(nb, 32), dtype=np.uint8)
    d = np.float16(std / np.sqrt((32 ** 2 - 1) / 12))
    dm = np.broadcast_to(np.concatenate([f16_u8(d), f16_u8(-15.5 * np.float32(d))]), (nb, 4))
    qs = (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)
    qh = np.packbits((q >> 4) & 1, axis=1, bitorder="little")
    return np.concatenate([dm, qh, qs], axis=1).reshape(n_rows, -1)


def fit_type(qtype, cols):
    """qtype, or llama.cpp's fallback where rows of cols weights do not split into its blocks."""
    if qtype != Q.F32 and cols % gguf.GGML_QUANT_SIZES[qtype][0]:
        qtype = FALLBACK.get(qtype, qtype)
    if cols % gguf.GGML_QUANT_SIZES[qtype][0]:
        sys.exit(f"synth_arch: rows of {cols} weights do not split into {qtype.name} blocks")
    return qtype


def q3_k_m_type(name, n_layer_all):
    """llama.cpp's llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q3_K_M and a model of other than 8
    experts, before the fallback: its counters i_attention_wv (attn_v tensors so far, in layer
    order: one a layer) and the layer of a down projection against n_ffn_down = block_count.
    attn_qkv (qwen3next's DeltaNet layers) falls in the attn_v branch (category_is_attn_v, tested
    before the ATTENTION_QKV one) and shares its counter, so with attn_v it is one a layer too."""
    if name == "output.weight":
        return Q.Q6_K
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if name.endswith(("attn_v.weight", "attn_qkv.weight")):
        return Q.Q5_K if layer < 2 else Q.Q4_K
    if name.endswith("attn_output.weight"):
        return Q.Q4_K
    if "ffn_down" in name:
        return Q.Q5_K if layer < n_layer_all // 16 else Q.Q4_K
    return Q.Q3_K


class Tensor:
    """One planned tensor: rows x cols weights (cols the row length), `outer` times (experts or
    heads); kind 'q' (quantized at std; the default), 'ones' (F32; the default for F32), 'normal'
    (F32 N(0, std)) or 'negexp' (F32 -exp(N(0, std))); two_d keeps a single row's ne [cols, 1]."""

    def __init__(self, name, qtype, rows, cols, outer=None, std=1.0, kind=None, two_d=False):
        self.name, self.rows, self.cols, self.outer = name, rows, cols, outer
        self.qtype = fit_type(qtype, cols)
        self.std, self.kind = std, kind or ("ones" if qtype == Q.F32 else "q")
        self.two_d = two_d

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
        return (self.cols,) + ((self.rows,) if self.rows > 1 or self.outer or self.two_d else ()) + \
            ((self.outer,) if self.outer else ())


class Maker:
    """Makes the planned tensors of one file: matrices in the type the --experts-type mix gives
    their name, F32 ones (norms) and F32 N(0, std) (routers, biases, sinks)."""

    def __init__(self, etype, n_layer_all):
        self.etype, self.n_all = etype, n_layer_all

    def qtype(self, name):
        et = EXPERT_TYPES[self.etype][0]
        if et is None:
            return q3_k_m_type(name, self.n_all)
        return et if name.endswith("_exps.weight") else Q.Q8_0

    def w(self, name, rows, cols, outer=None, std=1.0):
        return Tensor(name, self.qtype(name), rows, cols, outer, std)

    @staticmethod
    def ones(name, n):
        return Tensor(name, Q.F32, 1, n)

    @staticmethod
    def normal(name, rows, cols, std, two_d=False):
        return Tensor(name, Q.F32, rows, cols, std=std, kind="normal", two_d=two_d)


def mla_attention_plan(p, b, mk):
    """deepseek2: one layer's MLA tensors (prefix b), with their spreads."""
    e, nh, qk = p["n_embd"], p["n_head"], p["nope"] + p["rope"]
    t = [mk.ones(b + "attn_norm.weight", e)]
    if p["q_lora"]:
        t += [mk.w(b + "attn_q_a.weight", p["q_lora"], e, std=e ** -0.5),
              mk.ones(b + "attn_q_a_norm.weight", p["q_lora"]),
              mk.w(b + "attn_q_b.weight", nh * qk, p["q_lora"], std=p["q_lora"] ** -0.5)]
    else:
        t.append(mk.w(b + "attn_q.weight", nh * qk, e, std=e ** -0.5))
    kv = p["kv_lora"]
    t += [mk.w(b + "attn_kv_a_mqa.weight", kv + p["rope"], e, std=e ** -0.5),
          mk.ones(b + "attn_kv_a_norm.weight", kv),
          # k_b rows are nope long and sum over nope (q absorbed); the decompressed key
          # k_nope = k_b^T c sums over kv_lora, so std 1/sqrt(kv_lora) gives it rms 1
          mk.w(b + "attn_k_b.weight", kv, p["nope"], nh, std=kv ** -0.5),
          mk.w(b + "attn_v_b.weight", p["v"], kv, nh, std=kv ** -0.5),
          mk.w(b + "attn_output.weight", e, nh * p["v"], std=0.1 * (nh * p["v"]) ** -0.5),
          mk.ones(b + "ffn_norm.weight", e)]
    return t


def gqa_attention_plan(p, b, mk):
    """glm4moe / gpt-oss: one layer's attention: q/k/v with biases, the output projection (with a
    bias and the sinks for gpt-oss), glm4moe's per-head q/k norms where the model has them, and the
    FFN's norm (post_attention_norm, llama.cpp's name for HF's post_attention_layernorm)."""
    e, nh, nkv, hd = p["n_embd"], p["n_head"], p["n_kv"], p["head_dim"]
    oss = p["arch"] == "gpt-oss"
    t = [mk.ones(b + "attn_norm.weight", e)]
    for name, rows in (("attn_q", nh * hd), ("attn_k", nkv * hd), ("attn_v", nkv * hd)):
        t += [mk.w(b + name + ".weight", rows, e, std=e ** -0.5),
              mk.normal(b + name + ".bias", 1, rows, BIAS_QKV)]
    t.append(mk.w(b + "attn_output.weight", e, nh * hd, std=0.1 * (nh * hd) ** -0.5))
    if oss:
        t += [mk.normal(b + "attn_output.bias", 1, e, BIAS_OUT),
              mk.normal(b + "attn_sinks.weight", 1, nh, SINKS)]
    if p.get("qk_norm"):
        t += [mk.ones(b + "attn_q_norm.weight", hd), mk.ones(b + "attn_k_norm.weight", hd)]
    t.append(mk.ones(b + "post_attention_norm.weight", e))
    return t


def router(p, b, e, n):
    # N(0, 0.05 sqrt(2048 / n_embd)): logits as spread as synth_moe.py's at width 2048
    return Maker.normal(b + "ffn_gate_inp.weight", n, e, 0.05 * (2048 / e) ** 0.5)


def ffn_plan(p, b, dense, mk):
    """deepseek2 / glm4moe: one layer's FFN tensors: dense SwiGLU, or router (+ selection bias),
    routed and shared experts."""
    e = p["n_embd"]
    if dense:
        f = p["n_ff"]
        return [mk.w(b + "ffn_gate.weight", f, e, std=e ** -0.5),
                mk.w(b + "ffn_up.weight", f, e, std=e ** -0.5),
                mk.w(b + "ffn_down.weight", e, f, std=0.1 * f ** -0.5)]
    n, f, fs = p["n_expert"], p["n_ff_exp"], p["n_ff_exp"] * p["n_shared"]
    t = [router(p, b, e, n)]
    if p["gating"] == 2:
        t.append(mk.normal(b + "exp_probs_b.bias", 1, n, BIAS_SEL))
    t += [mk.w(b + "ffn_gate_exps.weight", f, e, n, std=e ** -0.5),
          mk.w(b + "ffn_up_exps.weight", f, e, n, std=e ** -0.5),
          mk.w(b + "ffn_down_exps.weight", e, f, n, std=0.1 * f ** -0.5),
          mk.w(b + "ffn_gate_shexp.weight", fs, e, std=e ** -0.5),
          mk.w(b + "ffn_up_shexp.weight", fs, e, std=e ** -0.5),
          mk.w(b + "ffn_down_shexp.weight", e, fs, std=0.1 * fs ** -0.5)]
    return t


def oss_ffn_plan(p, b, mk):
    """gpt-oss: the router with its bias, the routed experts with theirs."""
    e, n, f = p["n_embd"], p["n_expert"], p["n_ff_exp"]
    return [router(p, b, e, n), mk.normal(b + "ffn_gate_inp.bias", 1, n, BIAS_SEL),
            mk.w(b + "ffn_gate_exps.weight", f, e, n, std=e ** -0.5),
            mk.normal(b + "ffn_gate_exps.bias", n, f, BIAS_QKV),
            mk.w(b + "ffn_up_exps.weight", f, e, n, std=e ** -0.5),
            mk.normal(b + "ffn_up_exps.bias", n, f, BIAS_QKV),
            mk.w(b + "ffn_down_exps.weight", e, f, n, std=0.1 * f ** -0.5),
            mk.normal(b + "ffn_down_exps.bias", n, e, BIAS_OUT)]


def deltanet_plan(p, b, mk):
    """qwen3next: one gated DeltaNet layer's token mixer in llama.cpp's form (q/k/v in attn_qkv, the
    output gate z in attn_gate, beta/alpha in ssm_ba, A as ssm_a = -exp(A_log), dt_bias, the
    depthwise conv over q/k/v, the gated per-head norm and the output projection)."""
    e, nk, nv, d = p["n_embd"], p["nk"], p["nv"], p["ssm_head"]
    conv, inner = 2 * nk * d + nv * d, nv * d
    return [mk.ones(b + "attn_norm.weight", e),
            # negative like the converter's -exp(A_log); magnitudes around 1 give each head a decay
            # exp(A softplus(alpha + dt_bias)) between forgetting at once and never
            Tensor(b + "ssm_a", Q.F32, 1, nv, std=A_LOG, kind="negexp"),
            mk.normal(b + "ssm_conv1d.weight", conv, p["conv"], CONV_TAP),
            mk.ones(b + "ssm_dt.bias", nv),  # transformers' init: ones
            mk.w(b + "ssm_ba.weight", 2 * nv, e, std=e ** -0.5),
            mk.w(b + "attn_qkv.weight", conv, e, std=e ** -0.5),
            mk.w(b + "attn_gate.weight", inner, e, std=e ** -0.5),
            mk.ones(b + "ssm_norm.weight", d),
            mk.w(b + "ssm_out.weight", e, inner, std=0.1 * inner ** -0.5)]


def gated_attention_plan(p, b, mk):
    """qwen3next: one full-attention layer: attn_q holds each head's query and output gate (2 x
    n_head x head_dim rows), no biases, per-head q/k norms."""
    e, nh, nkv, hd = p["n_embd"], p["n_head"], p["n_kv"], p["head_dim"]
    return [mk.ones(b + "attn_norm.weight", e),
            mk.w(b + "attn_q.weight", 2 * nh * hd, e, std=e ** -0.5),
            mk.w(b + "attn_k.weight", nkv * hd, e, std=e ** -0.5),
            mk.w(b + "attn_v.weight", nkv * hd, e, std=e ** -0.5),
            mk.w(b + "attn_output.weight", e, nh * hd, std=0.1 * (nh * hd) ** -0.5),
            mk.ones(b + "attn_q_norm.weight", hd), mk.ones(b + "attn_k_norm.weight", hd)]


def qwen3next_ffn_plan(p, b, mk):
    """qwen3next: the FFN norm, router, routed experts, the shared expert and its sigmoid gate
    (ffn_gate_inp_shexp, ne [n_embd, 1] as the converter writes it; N(0, s) like the router)."""
    e, n, f, fs = p["n_embd"], p["n_expert"], p["n_ff_exp"], p["n_ff_shexp"]
    r = router(p, b, e, n)
    return [mk.ones(b + "post_attention_norm.weight", e), r,
            mk.w(b + "ffn_gate_exps.weight", f, e, n, std=e ** -0.5),
            mk.w(b + "ffn_up_exps.weight", f, e, n, std=e ** -0.5),
            mk.w(b + "ffn_down_exps.weight", e, f, n, std=0.1 * f ** -0.5),
            mk.w(b + "ffn_gate_shexp.weight", fs, e, std=e ** -0.5),
            mk.w(b + "ffn_up_shexp.weight", fs, e, std=e ** -0.5),
            mk.w(b + "ffn_down_shexp.weight", e, fs, std=0.1 * fs ** -0.5),
            mk.normal(b + "ffn_gate_inp_shexp.weight", 1, e, r.std, two_d=True)]


def full_attention(p, layer):
    """qwen3next: whether layer attends (every interval-th, llama.cpp's (il + 1) % interval == 0)."""
    return (layer + 1) % p["interval"] == 0


def layer_plan(p, b, dense, mk):
    if p["arch"] == "qwen3next":
        layer = int(b.split(".")[1])
        mixer = gated_attention_plan if full_attention(p, layer) else deltanet_plan
        return mixer(p, b, mk) + qwen3next_ffn_plan(p, b, mk)
    if p["arch"] == "deepseek2":
        return mla_attention_plan(p, b, mk) + ffn_plan(p, b, dense, mk)
    if p["arch"] == "glm4moe":
        return gqa_attention_plan(p, b, mk) + ffn_plan(p, b, dense, mk)
    return gqa_attention_plan(p, b, mk) + oss_ffn_plan(p, b, mk)


def nextn_plan(p, b, mk):
    """An MTP layer's own parts (glm4moe's checkpoints: no embed_tokens / shared_head.head)."""
    e = p["n_embd"]
    return [mk.w(b + "nextn.eh_proj.weight", e, 2 * e, std=(2 * e) ** -0.5),
            mk.ones(b + "nextn.enorm.weight", e), mk.ones(b + "nextn.hnorm.weight", e),
            mk.ones(b + "nextn.shared_head_norm.weight", e)]


def tensor_plan(p, n_layer, n_dense, n_vocab, etype, n_mtp=0, sm=None):
    """Every tensor of the file in order; token_embd / output at synth_moe.py's Q8_0 scales."""
    mk = Maker(etype, n_layer + n_mtp)
    q8_rms = np.sqrt(np.sum(np.arange(-127, 128, dtype=np.float64) ** 2) / 256)
    embd = sm.q8_scale("token_embd.weight", p["n_embd"]) * q8_rms if sm else 1.0
    head = sm.q8_scale("output.weight", p["n_embd"]) * q8_rms if sm else 1e-3 * q8_rms
    plan = [mk.w("token_embd.weight", n_vocab, p["n_embd"], std=embd)]
    for layer in range(n_layer + n_mtp):
        b = f"blk.{layer}."
        plan += layer_plan(p, b, layer < n_dense, mk)
        if layer >= n_layer:
            plan += nextn_plan(p, b, mk)
    plan += [mk.ones("output_norm.weight", p["n_embd"]),
             mk.w("output.weight", n_vocab, p["n_embd"], std=head)]
    for i, t in enumerate(plan):
        t.index = i
    return plan


def add_metadata(w, p, name, n_layer, n_dense, n_vocab, ftype, n_mtp):
    """The keys llama.cpp's converter (and tools/convert_hf.py) writes for the architecture."""
    w.add_name(name)
    w.add_block_count(n_layer + n_mtp)
    w.add_context_length(p["ctx"])
    w.add_embedding_length(p["n_embd"])
    w.add_feed_forward_length(p["n_ff"] or p["n_ff_exp"])
    w.add_head_count(p["n_head"])
    w.add_layer_norm_rms_eps(p["eps"])
    w.add_rope_freq_base(p["rope_base"])
    w.add_expert_count(p["n_expert"])
    w.add_expert_used_count(p["n_used"])
    w.add_expert_feed_forward_length(p["n_ff_exp"])
    w.add_file_type(int(ftype))
    if p["arch"] == "deepseek2":
        add_metadata_deepseek2(w, p)
    else:
        w.add_head_count_kv(p["n_kv"])
        w.add_key_length(p["head_dim"])
        w.add_value_length(p["head_dim"])
    if p["arch"] == "gpt-oss":
        factor, orig, beta_fast, beta_slow = p["yarn"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(factor)
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_yarn_beta_fast(beta_fast)
        w.add_rope_scaling_yarn_beta_slow(beta_slow)
        w.add_sliding_window(p["swa"])
        w.add_rope_dimension_count(p["head_dim"])
        return
    if p["arch"] == "qwen3next":
        add_metadata_qwen3next(w, p)
        return
    if p["arch"] == "glm4moe":
        w.add_rope_dimension_count(p["rope"])
    w.add_leading_dense_block_count(n_dense)
    w.add_expert_shared_count(p["n_shared"])
    w.add_expert_weights_scale(p["scale"])
    w.add_expert_weights_norm(p["norm"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType(p["gating"]))
    if p["groups"][0] > 1:
        w.add_expert_group_count(p["groups"][0])
        w.add_expert_group_used_count(p["groups"][1])
    w.add_vocab_size(n_vocab)
    if n_mtp:
        w.add_nextn_predict_layers(n_mtp)


def add_metadata_qwen3next(w, p):
    """The shared expert's width, the gated DeltaNet's keys and the partial rope (tools/convert_hf.py's
    write_hparams_qwen3next, after llama.cpp's Qwen3NextModel)."""
    w.add_expert_shared_feed_forward_length(p["n_ff_shexp"])
    w.add_ssm_conv_kernel(p["conv"])
    w.add_ssm_state_size(p["ssm_head"])
    w.add_ssm_group_count(p["nk"])
    w.add_ssm_time_step_rank(p["nv"])
    w.add_ssm_inner_size(p["nv"] * p["ssm_head"])
    w.add_full_attention_interval(p["interval"])
    w.add_rope_dimension_count(p["rope"])


def add_metadata_deepseek2(w, p):
    """The latent attention's widths and DeepSeek's YaRN."""
    w.add_head_count_kv(1)
    if p["q_lora"]:
        w.add_q_lora_rank(p["q_lora"])
    w.add_kv_lora_rank(p["kv_lora"])
    w.add_key_length(p["kv_lora"] + p["rope"])
    w.add_value_length(p["kv_lora"])
    w.add_key_length_mla(p["nope"] + p["rope"])
    w.add_value_length_mla(p["v"])
    w.add_rope_dimension_count(p["rope"])
    factor, orig, mscale_all = p["yarn"]
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(factor)
    w.add_rope_scaling_orig_ctx_len(orig)
    w.add_rope_scaling_yarn_log_mul(0.1 * mscale_all)


def read_tokenizer(path):
    voc = gguf.GGUFReader(path)
    f = voc.fields["tokenizer.ggml.tokens"]
    return voc, [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]


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
        if t.kind == "negexp":
            return (-np.exp(rng.standard_normal(shape) * t.std)).astype(np.float32)
        return (rng.standard_normal(shape) * t.std).astype(np.float32)
    if t.qtype == Q.Q2_K:
        return q2k_blocks(rng, n, t.cols, t.std)
    if t.qtype in (Q.Q4_0, Q.Q5_0):
        return small_block_rows(rng, n, t.cols, t.std, 4 if t.qtype == Q.Q4_0 else 5)
    if t.qtype == Q.Q5_1:
        return q5_1_rows(rng, n, t.cols, t.std)
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
    w = gguf.GGUFWriter(args.out, p["arch"])
    add_metadata(w, p, *meta)
    _HELPERS[1].copy_tokenizer(w, voc, tokens, meta[3])
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


def per_token(p, plan, n_layer, n_dense):
    """(routed-expert bytes one token reads in the trunk: n_used / n_expert of every *_exps
    tensor of its MoE layers; one expert's bytes in the first; every other trunk weight's bytes,
    with one embedding row)."""
    routed, rest, expert = 0, 0, None
    for t in plan:
        layer = int(t.name.split(".")[1]) if t.name.startswith("blk.") else -1
        if layer >= n_layer:
            continue  # the MTP layers: not read by a plain decode
        if "_exps." in t.name:
            routed += p["n_used"] * t.nbytes // p["n_expert"]
            if layer == n_dense and t.name.endswith(".weight"):
                expert = (expert or 0) + t.nbytes // p["n_expert"]
        elif t.name == "token_embd.weight":
            rest += t.row_bytes
        else:
            rest += t.nbytes
    return routed, expert or 0, rest


def qwen3next_lines(name, p, n_layer, n_vocab):
    """qwen3next's shape in two lines."""
    n_full = sum(full_attention(p, i) for i in range(n_layer))
    return [f"{name}: {n_layer} layers ({n_full} gated attention + {n_layer - n_full} gated DeltaNet, "
            f"1 layer in {p['interval']} attends; the model has {p['n_layer']}), n_embd {p['n_embd']}, "
            f"{p['n_head']} heads / {p['n_kv']} KV, head_dim {p['head_dim']}, rope {p['rope']}; "
            f"DeltaNet {p['nk']} key / {p['nv']} value heads of {p['ssm_head']}, conv {p['conv']}; "
            f"n_ff {p['n_ff']}",
            f"  experts {p['n_expert']} + 1 shared (n_ff {p['n_ff_shexp']}, sigmoid gate), "
            f"top-{p['n_used']}, n_ff_exp {p['n_ff_exp']}, softmax, norm {p['norm']}, vocab {n_vocab} "
            f"(the model's {p['vocab']})"]


def shape_lines(name, p, n_layer, n_dense, n_mtp, n_vocab):
    """The architecture's shape in two lines."""
    if p["arch"] == "qwen3next":
        return qwen3next_lines(name, p, n_layer, n_vocab)
    moe = f"{n_layer} layers ({n_dense} dense + {n_layer - n_dense} MoE; the model has {p['n_layer']})"
    moe += f" + {n_mtp} MTP" if n_mtp else ""
    if p["arch"] == "deepseek2":
        q = f"q_lora {p['q_lora']}" if p["q_lora"] else "no q_lora"
        att = (f"{p['n_head']} heads, {q}, kv_lora {p['kv_lora']}, qk {p['nope']}+{p['rope']}, "
               f"v {p['v']}")
    else:
        att = (f"{p['n_head']} heads / {p['n_kv']} KV, head_dim {p['head_dim']}, rope "
               f"{p.get('rope', p['head_dim'])}")
        att += f", sliding window {p['swa']} (even layers)" if p["arch"] == "gpt-oss" else \
            f", q/k norm {p['qk_norm']}"
    first = f"{name}: {moe}, n_embd {p['n_embd']}, {att}" + (f", n_ff {p['n_ff']}" if p["n_ff"] else "")
    if p["arch"] == "gpt-oss":
        route = "router bias, softmax over the top-k logits"
    else:
        groups = f", groups {p['groups'][0]}/{p['groups'][1]}" if p["groups"][0] > 1 else ""
        route = (f"{'sigmoid + bias' if p['gating'] == 2 else 'softmax'}{groups}, norm {p['norm']}, "
                 f"scale {p['scale']}")
    shared = f" + {p['n_shared']} shared" if p.get("n_shared") else ""
    return [first, f"  experts {p['n_expert']}{shared}, top-{p['n_used']}, n_ff_exp {p['n_ff_exp']}, "
                   f"{route}, vocab {n_vocab} (the model's {p['vocab']})"]


def summary(name, p, plan, full_plan, n_layer, n_dense, n_mtp, n_vocab):
    """The shape lines, the byte totals and the bytes one token reads, as lines of text."""
    routed, expert, rest = per_token(p, plan, n_layer, n_dense)
    total, full = sum(t.nbytes for t in plan), sum(t.nbytes for t in full_plan)
    n_moe = n_layer - n_dense
    mtp = sum(t.nbytes for t in plan if t.name.startswith(f"blk.{n_layer}."))
    mtp_gib = f"; the MTP layer {mtp / 2**30:.2f} GiB" if n_mtp else ""
    types = collections.Counter()
    for t in plan:
        if "_exps.weight" in t.name:
            types[t.qtype.name] += t.n_rows * t.cols
    bits = sum(t.nbytes * 8 for t in plan if "_exps.weight" in t.name) / max(1, sum(types.values()))
    mix = ", ".join(f"{k} {v / sum(types.values()):.0%}" for k, v in types.most_common())
    return shape_lines(name, p, n_layer, n_dense, n_mtp, n_vocab) + [
        f"  weights {total} bytes ({total / 2**30:.2f} GiB{mtp_gib}); "
        f"the full model at these types ({p['n_layer']} layers{' + MTP' if n_mtp else ''}, vocab "
        f"{p['vocab']}): {full / 2**30:.2f} GiB",
        f"  routed experts {bits:.3f} bits a weight ({mix})",
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
    ap.add_argument("--experts-type", choices=sorted(EXPERT_TYPES),
                    help="the routed experts' type, or q3_k_m for llama.cpp's whole-file mix "
                         "(default: the preset's)")
    ap.add_argument("--layers", type=int, help="layers to write (default: the preset's)")
    ap.add_argument("--dense", type=int, help="of them, leading dense layers")
    ap.add_argument("--no-mtp", action="store_true", help="leave out the MTP layer (glm4moe presets)")
    ap.add_argument("--pad-vocab", action="store_true",
                    help="append unused tokens up to the model's vocab_size (embedding and head at full size)")
    ap.add_argument("--synth", help="synth_moe.py to take token_embd / output scales and the blocks from")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="processes making blocks (the bytes do not depend on it)")
    ap.add_argument("--dry-run", action="store_true", help="print the tensor table and totals; write nothing")
    args = ap.parse_intermixed_args()  # OUT may follow the options
    p = PRESETS[args.preset]
    etype = args.experts_type or p["etype"]
    ftype = EXPERT_TYPES[etype][1]
    n_layer, n_dense = layer_counts(args, p)
    n_mtp = 0 if args.no_mtp else p["mtp"]
    if not args.dry_run and not (args.out and args.vocab):
        ap.error("OUT.gguf and --vocab are needed unless --dry-run")
    voc_tokens = read_tokenizer(args.vocab) if args.vocab else None
    if voc_tokens:
        n_vocab = max(len(voc_tokens[1]), p["vocab"]) if args.pad_vocab else len(voc_tokens[1])
    else:
        n_vocab = p["vocab"]
    global _HELPERS
    sm, lowbit = _HELPERS = load_helpers(args.synth)
    plan = tensor_plan(p, n_layer, n_dense, n_vocab, etype, n_mtp, sm)
    full = tensor_plan(p, p["n_layer"], p["n_dense"], p["vocab"], etype, n_mtp, sm)
    lines = summary(args.preset, p, plan, full, n_layer, n_dense, n_mtp, n_vocab)
    if args.dry_run:
        for t in plan:
            print(f"{t.name:40s} {t.qtype.name:5s} {str(list(t.ne)):24s} {t.nbytes}")
        print("\n".join(lines))
        return
    meta = (f"synthetic {args.preset}", n_layer, n_dense, n_vocab, ftype, n_mtp)
    seen = write_file(args, p, plan, meta, voc_tokens)
    print(f"wrote {args.out}: {len(plan)} tensors, experts {etype}", file=sys.stderr)
    print("\n".join(lines), file=sys.stderr)
    for (kind, tname), r in sorted(seen.items()):
        r = np.array(r)
        print(f"  {kind:16s} {tname:5s} x{len(r):<3d} std/target {r[:, 0].min():.3f}..{r[:, 0].max():.3f}, "
              f"|mean|/target <= {np.abs(r[:, 1]).max():.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
