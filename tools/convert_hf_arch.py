"""convert_hf_arch.py - the architecture-specific parts of tools/convert_hf.py.

Owns: what deepseek2 (DeepSeek-V2/V3), glm4moe, gpt-oss and qwen3next need beyond the generic
per-tensor mapping and hyperparameters of convert_hf.py: the config checks that refuse what
llama.cpp would run differently from transformers, the tensors they reshape or rename (MLA's
kv_b split and --legacy-kv-b, the MTP layers' own parts, gpt-oss's experts and MXFP4 repack,
the gated DeltaNet's tensors and Qwen3-Next's MTP block) and their hyperparameter keys.
convert_hf.py calls these through its TensorConverter, write_hparams and convert.

What llama.cpp does, and therefore this module does:
  * deepseek2 (MLA): kv_b_proj is split per head into attn_k_b (transposed, ne (qk_nope,
    kv_lora, n_head)) and attn_v_b (ne (kv_lora, v_head, n_head)); the router's
    e_score_correction_bias becomes blk.N.exp_probs_b.bias; the multi-token-prediction layers
    (num_nextn_predict_layers of them after the trunk) are kept as blk.N with their own parts in
    blk.N.nextn.* and counted in block_count (llama.cpp's layout), or dropped with --no-mtp.
    Configs llama.cpp's deepseek2 would run differently from transformers (unknown topk_method,
    groups that do not divide the experts, V3 without rope_interleave, YaRN mscale !=
    mscale_all_dim) are refused.
  * glm4moe: plain GQA attention with q/k/v biases and optional per-head q/k norms; the HF
    post_attention_layernorm (the FFN's input norm) becomes blk.N.post_attention_norm (llama.cpp's
    ATTN_POST_NORM); sigmoid routing with e_score_correction_bias (blk.N.exp_probs_b.bias); MTP
    layers kept or dropped as for deepseek2. Expert groups are written only when they select
    (n_group > 1 and topk_group < n_group); configs whose routing transformers and llama.cpp
    would compute differently are refused.
  * gpt-oss: attention sinks, post_attention_norm (the FFN's input norm), router and expert
    biases; the experts' (E, in, out) matrices transposed and the fused gate_up_proj's
    interleaved columns split (even: gate, odd: up); OpenAI's MXFP4 checkpoints (*_blocks,
    *_scales) repacked into GGML MXFP4 without requantizing (see the gpt-oss section). Configs
    llama.cpp's gpt-oss would run differently (other SwiGLU constants, no biases, another
    sliding/full layer pattern, no YaRN or a truncated YaRN range) are refused.
  * qwen3next: the gated-DeltaNet layers' in_proj_qkvz (per key head [q, k, v, z]) is split
    into blk.N.attn_qkv (every q head, every k head, every v head: the conv's channel order) and
    blk.N.attn_gate (z), in_proj_ba kept as blk.N.ssm_ba, A_log written as ssm_a = -exp(A_log),
    dt_bias as ssm_dt.bias, the conv1d weight squeezed to (channels, kernel) and stored F32; the
    (1 + w) RMSNorms (all but linear_attn.norm) get 1 added; post_attention_layernorm becomes
    blk.N.post_attention_norm; the MTP block (mtp.*, mtp_num_hidden_layers) is kept as blk.N:
    mtp.fc, mtp.pre_fc_norm_embedding / _hidden and mtp.norm become blk.N.nextn.eh_proj, enorm /
    hnorm and shared_head_norm (1 added: they scale by 1 + w too), mtp.layers.0 a gated
    full-attention layer as the trunk's (dropped with --no-mtp). Configs llama.cpp runs
    differently (key/value head dims differing, norm_topk_prob false, dense layers, attention
    biases, a layer pattern that is not every full_attention_interval-th layer) are refused.
"""
from __future__ import annotations

import logging
import re

import numpy as np

import gguf

from convert_hf_base import ConvertError, rope_params

log = logging.getLogger("convert_hf")

# ---- deepseek2 and glm4moe: the tensors the generic mapping does not name ------------------------

# hp key set by convert(legacy_kv_b=True): deepseek2 written as llama.cpp's converters did before
# splitting attn_kv_b into attn_k_b / attn_v_b (kept to test loaders of such files)
LEGACY_KV_B = "_strata_legacy_kv_b"

# an MTP layer's own parts: HF name after model.layers.N. -> llama.cpp's blk.N.nextn.<name>
_NEXTN = {"eh_proj.weight": "eh_proj", "enorm.weight": "enorm", "hnorm.weight": "hnorm",
          "embed_tokens.weight": "embed_tokens", "shared_head.head.weight": "shared_head_head",
          "shared_head.norm.weight": "shared_head_norm"}


def mtp_arch_tensor(tc, name: str, data: np.ndarray, bid: int | None):
    """The tensors of deepseek2 and glm4moe (MTP_ARCHES) that the generic mapping does not name
    (yields them and returns True; False for every other tensor): an MTP layer's own parts
    (blk.N.nextn.*; a layer past the kept ones is dropped), deepseek2's kv_b_proj and the
    router's e_score_correction_bias. tc: the TensorConverter."""
    if bid is not None and bid >= tc.n_layer:  # a multi-token-prediction layer
        if bid >= tc.n_layer + tc.n_nextn:
            return True  # dropped (--no-mtp, or more than the config declares)
        tc.mtp_bids.add(bid)
        part = name.split(f".layers.{bid}.", 1)[1]
        if part in _NEXTN:
            yield f"blk.{bid}.nextn.{_NEXTN[part]}.weight", data
            return True
    is_mla = tc.arch == gguf.MODEL_ARCH.DEEPSEEK2
    if is_mla and name.endswith("self_attn.kv_b_proj.weight"):
        if tc.hp.get(LEGACY_KV_B):  # the layout before llama.cpp's split: one attn_kv_b
            yield tc.fmt(gguf.MODEL_TENSOR.ATTN_KV_B, bid), data
        else:
            yield from deepseek2_split_kv_b(tc, name, data, bid)
        return True
    if name.endswith("mlp.gate.e_score_correction_bias"):
        probs_b = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_EXP_PROBS_B].format(bid=bid)
        yield probs_b + ".bias", data
        return True
    return False


def deepseek2_split_kv_b(tc, name: str, data: np.ndarray, bid: int):
    """MLA's kv_b_proj (n_head * (qk_nope + v_head), kv_lora) -> attn_k_b, per head transposed
    to (kv_lora, qk_nope) rows x cols, and attn_v_b, per head (v_head, kv_lora)."""
    nope, vd = tc.hp["qk_nope_head_dim"], tc.hp["v_head_dim"]
    if data.ndim != 2 or data.shape[0] != tc.n_head * (nope + vd):
        raise ConvertError(f"tensor {name!r}: shape {data.shape}, expected "
                           f"({tc.n_head * (nope + vd)}, kv_lora_rank)")
    kv_b = data.reshape(tc.n_head, nope + vd, data.shape[1])
    yield tc.fmt(gguf.MODEL_TENSOR.ATTN_K_B, bid), kv_b[:, :nope, :].transpose(0, 2, 1)
    yield tc.fmt(gguf.MODEL_TENSOR.ATTN_V_B, bid), kv_b[:, nope:, :]


# ---- deepseek2 -----------------------------------------------------------------------------------

_DS2_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                 "n_routed_experts", "n_shared_experts", "moe_intermediate_size",
                 "num_experts_per_tok", "first_k_dense_replace", "routed_scaling_factor")


def deepseek2_routing(hf_arch: str, hp: dict) -> dict:
    """Checks a DeepSeek-V2/V3 config against what llama.cpp's deepseek2 runs as transformers does;
    returns {"sigmoid": bool, "groups": (n_group, topk_group) or None}. Raises ConvertError."""
    v3 = hf_arch == "DeepseekV3ForCausalLM"
    missing = [k for k in _DS2_REQUIRED if hp.get(k) is None]
    if missing:
        raise ConvertError(f"{hf_arch} config lacks {', '.join(missing)}")
    known = ("noaux_tc",) if v3 else ("greedy", "group_limited_greedy")
    method = hp.get("topk_method") or known[0]
    if method not in known:
        raise ConvertError(f"config topk_method {method!r}: {hf_arch} routes with "
                           f"{' or '.join(known)} only")
    score = hp.get("scoring_func")
    if score not in (None, "softmax", "sigmoid"):
        raise ConvertError(f"config scoring_func {score!r}: softmax or sigmoid only")
    if v3 and score == "softmax":
        raise ConvertError("config scoring_func 'softmax': DeepseekV3 routes with sigmoid scores")
    n_exp, top_k = hp["n_routed_experts"], hp["num_experts_per_tok"]
    if not 0 < top_k <= n_exp:
        raise ConvertError(f"config num_experts_per_tok {top_k} with {n_exp} routed experts")
    n_group, topk_group = hp.get("n_group") or 1, hp.get("topk_group")
    groups = None
    if n_group > 1 and method != "greedy":
        if n_exp % n_group:
            raise ConvertError(f"config n_routed_experts {n_exp} not divisible by "
                               f"n_group {n_group}")
        per = n_exp // n_group
        if topk_group is None or not 0 < topk_group <= n_group:
            raise ConvertError(f"config topk_group {topk_group!r} with n_group {n_group}")
        if method == "noaux_tc" and per < 2:
            raise ConvertError(f"config n_group {n_group}: noaux_tc ranks groups by their top two "
                               f"experts, {n_exp} experts leave {per} per group")
        if top_k > topk_group * per:
            raise ConvertError(f"config num_experts_per_tok {top_k} > the {topk_group * per} "
                               "experts of the selected groups")
        if method == "group_limited_greedy":
            log.warning("topk_method group_limited_greedy ranks groups by their best expert; "
                        "llama.cpp's deepseek2 ranks them by the sum of their best two")
        groups = (n_group, topk_group)
    if v3 and hp.get("rope_interleave") is False:
        raise ConvertError("config rope_interleave false: the rope dimensions are not in the "
                           "interleaved pairs llama.cpp's deepseek2 rotates")
    rp = rope_params(hp)
    if rp.get("rope_type") == "yarn":
        ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
        if rp.get("attention_factor") is not None or (msa and ms != msa):
            raise ConvertError(f"config YaRN mscale {ms!r}, mscale_all_dim {msa!r}, "
                               f"attention_factor {rp.get('attention_factor')!r}: llama.cpp's "
                               "deepseek2 assumes mscale == mscale_all_dim and derives the "
                               "attention factor itself")
    return {"sigmoid": v3 or score == "sigmoid", "groups": groups}


def deepseek2_base_hp(hp: dict) -> dict:
    """The config as DeepseekV2Model hands it to TextModel.set_gguf_parameters: MLA written as MQA
    (one KV head); head_dim and the score function are written by write_hparams_deepseek2. The
    legacy layout (--legacy-kv-b) keeps the config's KV heads, as converters before the split did."""
    legacy = hp.get(LEGACY_KV_B)
    hp = {k: v for k, v in hp.items() if k not in ("head_dim", "scoring_func", LEGACY_KV_B)}
    if not legacy:
        hp["num_key_value_heads"] = 1
    return hp


def write_hparams_deepseek2(w: gguf.GGUFWriter, hp: dict, routing: dict):
    """llama.cpp's DeepseekV2Model.set_gguf_parameters additions (plus the gating function for V3
    and the expert groups of group-limited routing)."""
    kv_lora, rope = hp["kv_lora_rank"], hp["qk_rope_head_dim"]
    w.add_leading_dense_block_count(hp["first_k_dense_replace"])
    w.add_vocab_size(hp["vocab_size"])
    if hp.get("q_lora_rank") is not None:
        w.add_q_lora_rank(hp["q_lora_rank"])
    w.add_kv_lora_rank(kv_lora)
    if hp.get(LEGACY_KV_B):  # before the split: the trained head sizes, no *_mla keys
        w.add_key_length(hp["qk_nope_head_dim"] + rope)
        w.add_value_length(hp["v_head_dim"])
    else:
        w.add_key_length(kv_lora + rope)
        w.add_value_length(kv_lora)
        w.add_key_length_mla(hp["qk_nope_head_dim"] + rope)
        w.add_value_length_mla(hp["v_head_dim"])
    w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
    w.add_expert_count(hp["n_routed_experts"])
    w.add_expert_shared_count(hp["n_shared_experts"])
    w.add_expert_weights_scale(hp["routed_scaling_factor"])
    w.add_expert_weights_norm(bool(hp.get("norm_topk_prob") or False))
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if routing["sigmoid"]
                             else gguf.ExpertGatingFuncType.SOFTMAX)
    if routing["groups"] is not None:
        w.add_expert_group_count(routing["groups"][0])
        w.add_expert_group_used_count(routing["groups"][1])
    w.add_rope_dimension_count(rope)
    if (v := rope_params(hp).get("mscale_all_dim")) is not None:
        # llama.cpp's deepseek2 loader divides this key by 0.1 again
        w.add_rope_scaling_yarn_log_mul(0.1 * v)


# ---- glm4moe -------------------------------------------------------------------------------------

_GLM4MOE_REQUIRED = ("n_routed_experts", "n_shared_experts", "moe_intermediate_size",
                     "num_experts_per_tok", "first_k_dense_replace", "routed_scaling_factor",
                     "intermediate_size")


def glm4moe_head_dim(hp: dict) -> int:
    """transformers' Glm4MoeAttention.head_dim: the config's, else hidden_size / heads."""
    return hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]


def glm4moe_rope_dim(hp: dict) -> int:
    """int(head_dim * partial_rotary_factor): the config's factor (in rope_parameters with
    transformers 5, at the top level in the checkpoints' config.json), 0.5 when neither has one
    (Glm4MoeConfig's default)."""
    rp = rope_params(hp)
    f = rp.get("partial_rotary_factor", hp.get("partial_rotary_factor"))
    return int(glm4moe_head_dim(hp) * (0.5 if f is None else f))


def glm4moe_routing(hp: dict) -> dict:
    """Checks a Glm4Moe config against what llama.cpp's glm4moe computes as transformers'
    Glm4MoeTopkRouter does (sigmoid scores plus selection bias, groups ranked by the sum of their
    best two, top-k within the chosen groups); returns {"groups": (n_group, topk_group) or None}.
    Groups are written only when they select: with topk_group == n_group every expert stays
    eligible, and llama.cpp's loader wants fewer groups used than there are. Raises ConvertError."""
    missing = [k for k in _GLM4MOE_REQUIRED if hp.get(k) is None]
    if missing:
        raise ConvertError(f"Glm4MoeForCausalLM config lacks {', '.join(missing)}")
    n_exp, top_k = hp["n_routed_experts"], hp["num_experts_per_tok"]
    if not 0 < top_k <= n_exp:
        raise ConvertError(f"config num_experts_per_tok {top_k} with {n_exp} routed experts")
    n_group, topk_group = hp.get("n_group") or 1, hp.get("topk_group") or 1
    if n_exp % n_group:
        raise ConvertError(f"config n_routed_experts {n_exp} not divisible by n_group {n_group}")
    per = n_exp // n_group
    if per < 2:
        raise ConvertError(f"config n_group {n_group}: transformers ranks groups by their top two "
                           f"experts, {n_exp} experts leave {per} per group")
    if not 0 < topk_group <= n_group:
        raise ConvertError(f"config topk_group {topk_group} with n_group {n_group}")
    if top_k > topk_group * per:
        raise ConvertError(f"config num_experts_per_tok {top_k} > the {topk_group * per} experts "
                           "of the selected groups")
    score = hp.get("scoring_func")
    if score not in (None, "sigmoid"):
        raise ConvertError(f"config scoring_func {score!r}: Glm4Moe routes with sigmoid scores")
    n_rot, hd = glm4moe_rope_dim(hp), glm4moe_head_dim(hp)
    if n_rot % 2 or not 0 < n_rot <= hd:
        raise ConvertError(f"config partial_rotary_factor: {n_rot} rotary dimensions of a "
                           f"{hd}-wide head (rotate-half needs an even count, at most head_dim)")
    return {"groups": (n_group, topk_group) if topk_group < n_group else None}


def glm4moe_base_hp(hp: dict) -> dict:
    """The config as Glm4MoeModel hands it to TextModel.set_gguf_parameters; head_dim, the expert
    count and the score function are written by write_hparams_glm4moe."""
    return {k: v for k, v in hp.items()
            if k not in ("head_dim", "scoring_func", "num_local_experts", "num_experts")}


def write_hparams_glm4moe(w: gguf.GGUFWriter, hp: dict, routing: dict):
    """llama.cpp's Glm4MoeModel.set_gguf_parameters additions (plus key/value length from
    transformers' head_dim when the config has none, vocab_size and the expert groups)."""
    hd = glm4moe_head_dim(hp)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(glm4moe_rope_dim(hp))
    w.add_expert_count(hp["n_routed_experts"])
    w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
    w.add_expert_shared_count(hp["n_shared_experts"])
    w.add_leading_dense_block_count(hp["first_k_dense_replace"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(hp["routed_scaling_factor"])
    w.add_expert_weights_norm(bool(hp.get("norm_topk_prob") or False))
    if routing["groups"] is not None:
        w.add_expert_group_count(routing["groups"][0])
        w.add_expert_group_used_count(routing["groups"][1])
    w.add_vocab_size(hp["vocab_size"])


# =================================================================================================
# gpt-oss (GptOssForCausalLM -> gpt-oss), as llama.cpp's GptOssModel converts it
# =================================================================================================
#
# Tensors: self_attn.sinks -> blk.N.attn_sinks.weight (n_head, F32); post_attention_layernorm ->
# blk.N.post_attention_norm (llama.cpp's ATTN_POST_NORM, the FFN's input norm); mlp.router ->
# ffn_gate_inp weight + bias. The experts are stored (E, in, out) (x @ W), the fused gate_up with
# gate and up in alternate output columns ([..., 0::2] gate, [..., 1::2] up): each becomes
# (E, out, in) rows x cols, i.e. ggml ne (n_embd, n_ff_exp, E) for gate/up and (n_ff_exp, n_embd,
# E) for down; the biases (E, 2 ff) split the same way. OpenAI's MXFP4 checkpoints
# (*_blocks/*_scales, stored (E, out, in/32, 16)) are repacked to GGML's MXFP4 blocks without
# requantizing. No q/k permutation: HF rotates halves (NEOX), as llama.cpp's gpt-oss does.

# llama.cpp's build_moe_ffn runs gpt-oss's clamped SwiGLU with these constants
GPT_OSS_SWIGLU = (1.702, 7.0)
_GPT_OSS_EXPERTS = re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?$")


class Packed:
    """A tensor already in a quantized GGML layout: raw (rows, bytes per row) uint8 data and the
    shape in elements (numpy order) it stands for."""

    def __init__(self, raw: np.ndarray, qtype: gguf.GGMLQuantizationType, shape: tuple):
        self.raw, self.qtype, self.shape = np.ascontiguousarray(raw), qtype, tuple(shape)


def mxfp4_repack(blocks: np.ndarray, scales: np.ndarray) -> Packed:
    """OpenAI's MXFP4 (blocks (..., rows, n_blk, 16) uint8 with element 2i in the low nibble of
    byte i and 2i+1 in its high nibble; scales (..., rows, n_blk) E8M0) -> GGML's block_mxfp4
    (e, then qs[16] with element j in the low nibble of qs[j] and j+16 in its high nibble). Same
    E2M1 codes and exponents: lossless."""
    if (blocks.dtype != np.uint8 or scales.dtype != np.uint8 or blocks.shape[-1] != 16
            or blocks.shape[:-1] != scales.shape):
        raise ConvertError(f"MXFP4 blocks {blocks.shape} {blocks.dtype} / scales {scales.shape} "
                           f"{scales.dtype}: expected uint8 (..., n, 16) and (..., n)")
    v = np.empty(blocks.shape[:-1] + (32,), dtype=np.uint8)
    v[..., 0::2] = blocks & 0x0F
    v[..., 1::2] = blocks >> 4
    qs = v[..., :16] | (v[..., 16:] << 4)
    raw = np.concatenate([scales[..., None], qs], axis=-1)
    lead = blocks.shape[:-2]
    return Packed(raw.reshape(*lead, -1), gguf.GGMLQuantizationType.MXFP4,
                  (*lead, blocks.shape[-2] * 32))


class GptOssTensors:
    """The gpt-oss part of TensorConverter: names, expert layouts, MXFP4 block/scale pairs."""

    def __init__(self, tc: "TensorConverter"):
        self.tc = tc
        self.halves: dict[tuple[int, str], dict[str, np.ndarray]] = {}

    def convert(self, name: str, data: np.ndarray, bid: int | None):
        if name.endswith("self_attn.sinks"):
            yield self.tc.fmt(gguf.MODEL_TENSOR.ATTN_SINKS, bid), data
            return
        m = _GPT_OSS_EXPERTS.search(name)
        if m is None:
            yield self.tc.name(name), data
            return
        which, kind = m.group(1), m.group(2) or ""
        gate, up, down = (gguf.TENSOR_NAMES[k].format(bid=bid) for k in (
            gguf.MODEL_TENSOR.FFN_GATE_EXP, gguf.MODEL_TENSOR.FFN_UP_EXP,
            gguf.MODEL_TENSOR.FFN_DOWN_EXP))
        if kind == "_bias":  # (E, 2 ff) interleaved, or (E, n_embd)
            if which == "gate_up_proj":
                yield gate + ".bias", data[..., 0::2]
                yield up + ".bias", data[..., 1::2]
            else:
                yield down + ".bias", data
        elif kind == "":  # (E, in, out) -> (E, out, in)
            if data.ndim != 3:
                raise ConvertError(f"tensor {name!r}: shape {data.shape}, expected (E, in, out)")
            t = data.transpose(0, 2, 1)
            if which == "gate_up_proj":
                yield gate + ".weight", t[:, 0::2]
                yield up + ".weight", t[:, 1::2]
            else:
                yield down + ".weight", t
        else:  # MXFP4: wait for both halves, (E, out, in/32, 16) blocks and (E, out, in/32)
            slot = self.halves.setdefault((bid, which), {})
            slot[kind] = data
            if len(slot) < 2:
                return
            del self.halves[(bid, which)]
            blocks, scales = slot["_blocks"], slot["_scales"]
            if which == "gate_up_proj":
                yield gate + ".weight", mxfp4_repack(blocks[:, 0::2], scales[:, 0::2])
                yield up + ".weight", mxfp4_repack(blocks[:, 1::2], scales[:, 1::2])
            else:
                yield down + ".weight", mxfp4_repack(blocks, scales)

    def finish(self):
        if self.halves:
            left = ", ".join(f"layer {b} {w}: only {', '.join(s)}" for (b, w), s in self.halves.items())
            raise ConvertError(f"MXFP4 tensors without their other half ({left})")


def gpt_oss_check(hp: dict):
    """Raises ConvertError for a GptOss config that llama.cpp's gpt-oss (and Strata's) would run
    differently from transformers."""
    swiglu = (hp.get("swiglu_alpha", GPT_OSS_SWIGLU[0]), hp.get("swiglu_limit", GPT_OSS_SWIGLU[1]))
    if tuple(float(x) for x in swiglu) != GPT_OSS_SWIGLU:
        raise ConvertError(f"config swiglu_alpha/swiglu_limit {swiglu}: llama.cpp's gpt-oss uses "
                           f"{GPT_OSS_SWIGLU}")
    if hp.get("attention_bias") is False:
        raise ConvertError("config attention_bias false: llama.cpp's gpt-oss needs the biases")
    n = hp["num_hidden_layers"]
    pattern = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if hp.get("layer_types") not in (None, pattern):
        raise ConvertError(f"config layer_types {hp.get('layer_types')}: llama.cpp's gpt-oss "
                           "alternates sliding (even layers) and full attention")
    if not hp.get("sliding_window"):
        raise ConvertError("config sliding_window missing")
    rp = rope_params(hp)
    if rp.get("rope_type") != "yarn" or rp.get("factor") is None:
        raise ConvertError(f"config rope {rp}: gpt-oss is converted with YaRN scaling only")
    if any(rp.get(k) is not None for k in ("attention_factor", "attn_factor", "mscale",
                                           "mscale_all_dim")):
        raise ConvertError(f"config rope {rp}: YaRN attention factor / mscale are not converted "
                           "for gpt-oss (llama.cpp derives 1 + 0.1 ln(factor))")
    if rp.get("truncate", True) is not False:
        # transformers floors/ceils the YaRN correction range unless truncate is false; gpt-oss
        # (and Strata's gpt-oss, as OpenAI's reference) does not, and no GGUF key says which
        raise ConvertError("config rope truncate is not false: gpt-oss's YaRN is converted for "
                           "the untruncated correction range only")


def write_hparams_gpt_oss(w: gguf.GGUFWriter, hp: dict):
    """llama.cpp's GptOssModel.set_gguf_parameters additions (and rope.dimension_count, which
    llama.cpp defaults to key_length)."""
    w.add_sliding_window(hp["sliding_window"])
    w.add_expert_feed_forward_length(hp["intermediate_size"])
    w.add_rope_dimension_count(hp["head_dim"])


# ---- qwen3next -----------------------------------------------------------------------------------

def qwen3next_interval(hp: dict) -> int:
    """The full-attention interval of a Qwen3-Next config (every interval-th layer attends, the
    others are gated DeltaNet layers); raises ConvertError for a config llama.cpp's qwen3next would
    run differently from transformers."""
    n = hp["num_hidden_layers"]
    if hp["linear_key_head_dim"] != hp["linear_value_head_dim"]:
        raise ConvertError("config linear_key_head_dim != linear_value_head_dim: llama.cpp's "
                           "qwen3next takes one head size (ssm.state_size) for both")
    if hp["linear_num_value_heads"] % hp["linear_num_key_heads"]:
        raise ConvertError("config linear_num_value_heads is not a multiple of linear_num_key_heads")
    if hp.get("norm_topk_prob") is False:
        raise ConvertError("config norm_topk_prob false: llama.cpp's qwen3next renormalizes the top-k")
    if hp.get("mlp_only_layers") or hp.get("decoder_sparse_step", 1) != 1:
        raise ConvertError("config mlp_only_layers / decoder_sparse_step: dense layers are not "
                           "converted for qwen3next")
    if hp.get("attention_bias"):
        raise ConvertError("config attention_bias: llama.cpp's qwen3next has no attention biases")
    interval = hp.get("full_attention_interval")
    types = hp.get("layer_types")
    if interval is None and types:
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        interval = full[0] + 1 if full else n + 1
    interval = interval or 4
    pattern = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    if types not in (None, pattern):
        raise ConvertError(f"config layer_types {types}: not full attention on every {interval}-th layer alone")
    return interval


def qwen3next_tensor(tc: "TensorConverter", name: str, data: np.ndarray, bid: int | None):
    """The gated-DeltaNet tensors llama.cpp's converter reshapes or renames (yields them and
    returns True); False for every other tensor."""
    hp = tc.hp
    if ".linear_attn." not in name:
        return False
    if name.endswith(".A_log"):
        yield f"blk.{bid}.ssm_a", -np.exp(data.astype(np.float32))
    elif name.endswith(".dt_bias"):
        yield f"blk.{bid}.ssm_dt.bias", data
    elif name.endswith(".conv1d.weight"):
        yield tc.fmt(gguf.MODEL_TENSOR.SSM_CONV1D, bid), data.reshape(data.shape[0], data.shape[-1])
    elif name.endswith(".in_proj_qkvz.weight"):
        nk, dk = hp["linear_num_key_heads"], hp["linear_key_head_dim"]
        rv = hp["linear_num_value_heads"] // nk * hp["linear_value_head_dim"]
        if data.shape[0] != nk * (2 * dk + 2 * rv):
            raise ConvertError(f"tensor {name!r}: shape {data.shape}, expected ({nk * (2 * dk + 2 * rv)}, d)")
        g = data.reshape(nk, 2 * dk + 2 * rv, data.shape[1])
        q, k, v, z = g[:, :dk], g[:, dk:2 * dk], g[:, 2 * dk:2 * dk + rv], g[:, 2 * dk + rv:]
        flat = [x.reshape(-1, data.shape[1]) for x in (q, k, v)]
        yield tc.fmt(gguf.MODEL_TENSOR.ATTN_QKV, bid), np.concatenate(flat, axis=0)
        yield tc.fmt(gguf.MODEL_TENSOR.ATTN_GATE, bid), z.reshape(-1, data.shape[1])
    else:
        return False
    return True


# qwen3next's MTP parts outside mtp.layers.K: HF name -> (llama.cpp's blk.N.nextn.<name>, (1 + w)?)
_QWEN3NEXT_NEXTN = {"mtp.fc.weight": ("eh_proj", False),
                    "mtp.pre_fc_norm_embedding.weight": ("enorm", True),
                    "mtp.pre_fc_norm_hidden.weight": ("hnorm", True),
                    "mtp.norm.weight": ("shared_head_norm", True)}


def qwen3next_mtp_tensor(tc: "TensorConverter", name: str, data: np.ndarray):
    """A tensor of Qwen3-Next's MTP block (mtp.*): fc, the two pre-fc norms and the final norm
    become blk.N.nextn.{eh_proj, enorm, hnorm, shared_head_norm} (N = the trunk's layer count; the
    norms (1 + w) get 1 added, as in HF's Qwen3NextRMSNorm); mtp.layers.K.* is a gated
    full-attention decoder layer converted as trunk layer N + K would be. Dropped with --no-mtp or
    beyond the declared count."""
    n = tc.n_layer
    if tc.n_nextn == 0:
        return
    if name in _QWEN3NEXT_NEXTN:
        part, plus_one = _QWEN3NEXT_NEXTN[name]
        tc.mtp_bids.add(n)
        yield f"blk.{n}.nextn.{part}.weight", data + 1 if plus_one else data
        return
    m = re.match(r"mtp\.layers\.(\d+)\.(.+)$", name)
    if not m:
        raise ConvertError(f"tensor {name!r}: not a part of Qwen3-Next's MTP block")
    bid = n + int(m.group(1))
    if bid >= n + tc.n_nextn:
        return
    tc.mtp_bids.add(bid)
    yield from tc.convert(f"model.layers.{bid}.{m.group(2)}", data)


def write_hparams_qwen3next(w: gguf.GGUFWriter, hp: dict):
    """llama.cpp's Qwen3NextModel.set_gguf_parameters additions."""
    w.add_ssm_conv_kernel(hp["linear_conv_kernel_dim"])
    w.add_ssm_state_size(hp["linear_key_head_dim"])
    w.add_ssm_group_count(hp["linear_num_key_heads"])
    w.add_ssm_time_step_rank(hp["linear_num_value_heads"])
    w.add_ssm_inner_size(hp["linear_value_head_dim"] * hp["linear_num_value_heads"])
    w.add_full_attention_interval(qwen3next_interval(hp))
    head = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
    prf = rope_params(hp).get("partial_rotary_factor", hp.get("partial_rotary_factor", 0.25))
    w.add_rope_dimension_count(int(head * prf))
