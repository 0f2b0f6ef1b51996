#!/usr/bin/env python3
"""convert_hf.py - Hugging Face checkpoint directory -> GGUF, in llama.cpp's layout.

Owns: reading a transformers checkpoint (config.json, *.safetensors, tokenizer files when present)
of the architectures Strata runs, and writing one GGUF file with the gguf package's GGUFWriter
whose tensor names, tensor layouts and metadata keys are the ones llama.cpp's convert_hf_to_gguf.py
produces, so a file made here loads in llama.cpp and a file made there loads in Strata.

This file is the entry point, the driver and the generic per-tensor mapping and
hyperparameters; the architecture-specific parts are in convert_hf_arch.py, the tokenizer in
convert_hf_vocab.py and what they all share in convert_hf_base.py (tools/, beside this file).
Their public names are attributes of this module too (tests load it alone, by path).

    python3 tools/convert_hf.py MODEL_DIR --outfile OUT.gguf [--outtype f32|f16|bf16|q8_0]
                                [--expert-type f32|f16|bf16|q8_0|mxfp4]

Supported (config.json "architectures"[0] -> general.architecture):
    LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM      -> llama
    OlmoeForCausalLM                                               -> olmoe
    Qwen2MoeForCausalLM / Qwen3MoeForCausalLM                      -> qwen2moe / qwen3moe
    GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM             -> granitemoe
    Qwen2ForCausalLM / Qwen3ForCausalLM                            -> qwen2 / qwen3
    DeepseekV2ForCausalLM, DeepseekV3ForCausalLM                   -> deepseek2
    Glm4MoeForCausalLM (GLM-4.5, 4.5-Air, 4.6)                     -> glm4moe
    GptOssForCausalLM                                              -> gpt-oss
    Qwen3NextForCausalLM (Qwen3-Next-80B-A3B)                      -> qwen3next

What llama.cpp does, and therefore this tool does:
  * llama and granitemoe: q_proj/k_proj rows are permuted from HF's rotate-half order to the
    interleaved pairs llama.cpp's normal RoPE rotates (per head: rows [0..d/2) and [d/2..d) are
    interleaved). The qwen*/olmoe families keep HF's order (NEOX RoPE); so does deepseek2, whose
    rope part is already in the interleaved pairs of llama.cpp's normal RoPE, and so does glm4moe
    (NEOX RoPE on the first head_dim * partial_rotary_factor dimensions of each head).
  * Experts are stacked into blk.N.ffn_{gate,up,down}_exps of shape (n_expert, rows, cols); the
    transformers-5 fused layout (experts.gate_up_proj, experts.down_proj) is split the same way.
    Granite's merged input_linear (E, 2*ff, d) is split into gate (first ff rows) and up.
  * Types: 1-D tensors, *_norm.weight, routers (ffn_gate_inp, ffn_gate_inp_shexp) and biases
    stay F32; everything else gets --outtype (Q8_0 via gguf.quants.quantize; a tensor whose row
    does not fit Q8_0 blocks falls back to F16), except the routed experts' weights under
    --expert-type (e.g. mxfp4: gguf.quants' MXFP4; general.file_type is then MOSTLY_MXFP4_MOE,
    as for a repacked MXFP4 checkpoint).
  * Hyperparameters: llama.cpp's TextModel.set_gguf_parameters plus each model class's additions
    (llama: vocab_size, rope.dimension_count; qwen*moe: expert_feed_forward_length,
    expert_shared_feed_forward_length; olmoe: layer_norm_rms_epsilon forced to 1e-5; granite:
    multipliers as attention.scale, embedding_scale, residual_scale, logit_scale, no
    key_length/value_length; deepseek2: head_count_kv 1, MLA ranks and head sizes, dense lead
    count, shared expert count, expert_weights_scale/norm, gating function (sigmoid for V3),
    expert groups for group-limited routing, rope.scaling.yarn_log_multiplier = 0.1 *
    mscale_all_dim; glm4moe: key/value length head_dim, rope.dimension_count head_dim *
    partial_rotary_factor, dense lead count, expert sizes and counts, sigmoid gating,
    expert_weights_scale/norm, vocab_size; gpt-oss: attention.sliding_window,
    expert_feed_forward_length = intermediate_size, rope.dimension_count = head_dim). llama.cpp
    writes no expert_weights_norm for the other architectures (the runtime's per-architecture
    default applies), so neither does this tool.
  * Per architecture (deepseek2, glm4moe, gpt-oss, qwen3next): convert_hf_arch.py's opening
    comment; the tokenizer (byte-level BPE, SentencePiece): convert_hf_vocab.py's.

Needs numpy, gguf, safetensors and torch (bf16 checkpoints); transformers for tokenizers and for
reading the config with its defaults (as llama.cpp does; plain config.json otherwise);
sentencepiece for tokenizer.model.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

import numpy as np

import gguf

# the siblings are imported by name from this file's folder, however it runs: as a script from
# any folder, or loaded by path (python/tests' convert_hf())
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)

from convert_hf_base import ConvertError, _find, rope_params  # noqa: E402
from convert_hf_arch import (  # noqa: E402,F401 - GPT_OSS_SWIGLU and the like are handed on
    GPT_OSS_SWIGLU, LEGACY_KV_B, GptOssTensors, Packed, deepseek2_base_hp, deepseek2_routing,
    deepseek2_split_kv_b, glm4moe_base_hp, glm4moe_head_dim, glm4moe_rope_dim, glm4moe_routing,
    gpt_oss_check, mtp_arch_tensor, mxfp4_repack, qwen3next_interval, qwen3next_mtp_tensor,
    qwen3next_tensor, write_hparams_deepseek2, write_hparams_glm4moe, write_hparams_gpt_oss,
    write_hparams_qwen3next)
from convert_hf_vocab import (  # noqa: E402,F401 - CHECK_TEXT and the like are handed on
    CHECK_TEXT, GLM4_SPECIALS, GPT2_SPLIT, LLAMA3_SPLIT, O200K_SPLIT, PRE_BY_HASH, SPLIT_PRES,
    load_sentencepiece, spm_normalizer_spec, write_vocab, write_vocab_spm)

log = logging.getLogger("convert_hf")

# =================================================================================================
# Architecture table
# =================================================================================================

# HF class -> (gguf MODEL_ARCH, permute q/k for normal RoPE)
ARCHES = {
    "LlamaForCausalLM": (gguf.MODEL_ARCH.LLAMA, True),
    "MistralForCausalLM": (gguf.MODEL_ARCH.LLAMA, True),
    "MixtralForCausalLM": (gguf.MODEL_ARCH.LLAMA, True),
    "OlmoeForCausalLM": (gguf.MODEL_ARCH.OLMOE, False),
    "Qwen2MoeForCausalLM": (gguf.MODEL_ARCH.QWEN2MOE, False),
    "Qwen3MoeForCausalLM": (gguf.MODEL_ARCH.QWEN3MOE, False),
    "GraniteMoeForCausalLM": (gguf.MODEL_ARCH.GRANITE_MOE, True),
    "GraniteMoeSharedForCausalLM": (gguf.MODEL_ARCH.GRANITE_MOE, True),
    "Qwen2ForCausalLM": (gguf.MODEL_ARCH.QWEN2, False),
    "Qwen3ForCausalLM": (gguf.MODEL_ARCH.QWEN3, False),
    "DeepseekV2ForCausalLM": (gguf.MODEL_ARCH.DEEPSEEK2, False),
    "DeepseekV3ForCausalLM": (gguf.MODEL_ARCH.DEEPSEEK2, False),
    "Glm4MoeForCausalLM": (gguf.MODEL_ARCH.GLM4_MOE, False),
    "GptOssForCausalLM": (gguf.MODEL_ARCH.GPT_OSS, False),
    "Qwen3NextForCausalLM": (gguf.MODEL_ARCH.QWEN3NEXT, False),
}

# architectures whose multi-token-prediction layers (num_nextn_predict_layers, after the trunk)
# are converted in llama.cpp's blk.N + blk.N.nextn.* layout
MTP_ARCHES = (gguf.MODEL_ARCH.DEEPSEEK2, gguf.MODEL_ARCH.GLM4_MOE)

OUTTYPES = {
    "f32": (gguf.LlamaFileType.ALL_F32, gguf.GGMLQuantizationType.F32),
    "f16": (gguf.LlamaFileType.MOSTLY_F16, gguf.GGMLQuantizationType.F16),
    "bf16": (gguf.LlamaFileType.MOSTLY_BF16, gguf.GGMLQuantizationType.BF16),
    "q8_0": (gguf.LlamaFileType.MOSTLY_Q8_0, gguf.GGMLQuantizationType.Q8_0),
}
# --expert-type: the stored type of the routed experts' weights (ffn_{gate,up,down}_exps.weight)
EXPERT_TYPES = {**{k: v[1] for k, v in OUTTYPES.items()}, "mxfp4": gguf.GGMLQuantizationType.MXFP4}
_EXPS_WEIGHT = re.compile(r"^blk\.\d+\.ffn_(gate|up|down)_exps\.weight$")


# =================================================================================================
# Reading the checkpoint
# =================================================================================================

def load_config(model_dir: Path) -> dict:
    """config.json as transformers reads it (defaults filled in), like llama.cpp's load_hparams;
    the plain file when transformers is missing or does not know the model."""
    try:
        from transformers import AutoConfig
        cfg = AutoConfig.from_pretrained(model_dir, trust_remote_code=False).to_dict()
    except Exception as e:  # noqa: BLE001 - any failure: fall back to the file itself
        log.debug("AutoConfig failed (%s); reading config.json", e)
        with open(model_dir / "config.json", encoding="utf-8") as f:
            cfg = json.load(f)
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def iter_safetensors(model_dir: Path):
    """(name, float32-or-float16 numpy array) for every tensor of every model*.safetensors."""
    parts = sorted(p for p in model_dir.iterdir()
                   if p.name.startswith("model") and p.name.endswith(".safetensors"))
    if not parts:
        raise ConvertError(f"{model_dir}: no model*.safetensors files")
    try:
        import torch
        from safetensors import safe_open
    except ImportError as e:
        raise ConvertError(f"needs torch and safetensors ({e})") from e
    for part in parts:
        with safe_open(str(part), framework="pt", device="cpu") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                if (t.dtype not in (torch.float16, torch.float32)
                        and not name.endswith(("_blocks", "_scales"))):  # MXFP4 kept as bytes
                    t = t.to(torch.float32)
                yield name, t.numpy()


def safetensors_names(model_dir: Path) -> set[str]:
    """Every tensor name of the checkpoint (the files' headers only)."""
    from safetensors import safe_open
    names: set[str] = set()
    for part in model_dir.glob("model*.safetensors"):
        with safe_open(str(part), framework="pt", device="cpu") as f:
            names.update(f.keys())
    return names


# =================================================================================================
# Tensor transformations
# =================================================================================================

def permute_qk(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """HF rotate-half row order -> llama.cpp's interleaved pairs, per head (llama.cpp's
    LlamaModel.permute semantics; applies to weights (rows, cols) and biases (rows,))."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ConvertError(f"cannot permute {rows} rows into {n_head} heads")
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
             .swapaxes(1, 2).reshape(w.shape))


_EXPERT_RE = re.compile(r"^(?P<pre>.*\.layers\.(?P<bid>\d+)\.(?:mlp|block_sparse_moe))\.experts\."
                        r"(?P<xid>\d+)\.(?P<w>gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")
# merged per-layer names the gguf tensor map knows
_MERGED = {"gate_proj": "mlp.experts.gate_proj", "up_proj": "mlp.experts.up_proj",
           "down_proj": "mlp.experts.down_proj",
           "w1": "mlp.experts.gate_proj", "w3": "mlp.experts.up_proj", "w2": "mlp.experts.down_proj"}


class TensorConverter:
    """Turns the checkpoint's (name, array) stream into (gguf name, array) pairs."""

    def __init__(self, arch: gguf.MODEL_ARCH, hp: dict, permute: bool, keep_mtp: bool = True):
        self.arch = arch
        self.hp = hp
        self.permute = permute
        self.n_layer = hp["num_hidden_layers"]
        # MTP layers (num_nextn_predict_layers, MTP_ARCHES; qwen3next's mtp_num_hidden_layers)
        # follow the trunk's: kept unless told
        self.n_nextn = (hp.get("num_nextn_predict_layers") or hp.get("mtp_num_hidden_layers") or 0
                        if keep_mtp else 0)
        self.mtp_bids: set[int] = set()
        self.n_head = hp["num_attention_heads"]
        self.n_head_kv = hp.get("num_key_value_heads") or self.n_head
        self.n_expert = (hp.get("num_local_experts") or hp.get("num_experts")
                         or hp.get("n_routed_experts") or 0)
        self.tmap = gguf.get_tensor_name_map(arch, self.n_layer + self.n_nextn)
        self.pending: dict[tuple[int, str], dict[int, np.ndarray]] = {}
        self.gpt_oss = GptOssTensors(self) if arch == gguf.MODEL_ARCH.GPT_OSS else None

    def name(self, hf_name: str) -> str:
        new = self.tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ConvertError(f"tensor {hf_name!r}: no GGUF name for architecture "
                               f"{gguf.MODEL_ARCH_NAMES[self.arch]}")
        return new

    def fmt(self, key: gguf.MODEL_TENSOR, bid: int) -> str:
        return gguf.TENSOR_NAMES[key].format(bid=bid) + ".weight"

    def convert(self, name: str, data: np.ndarray):
        if name.endswith((".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")):
            return
        if self.permute:
            if name.endswith(("q_proj.weight", "q_proj.bias")):
                data = permute_qk(data, self.n_head, self.n_head)
            elif name.endswith(("k_proj.weight", "k_proj.bias")):
                data = permute_qk(data, self.n_head, self.n_head_kv)

        m = re.search(r"\.layers\.(\d+)\.", name)
        bid = int(m.group(1)) if m else None
        if self.gpt_oss is not None:
            yield from self.gpt_oss.convert(name, data, bid)
            return
        if self.arch == gguf.MODEL_ARCH.QWEN3NEXT:
            if name.startswith("mtp."):
                yield from qwen3next_mtp_tensor(self, name, data)
                return
            done = yield from qwen3next_tensor(self, name, data, bid)
            if done:
                return
            if name.endswith("norm.weight") and ".linear_attn." not in name:  # scales by (1 + w)
                data = data + 1

        if self.arch in MTP_ARCHES:
            done = yield from mtp_arch_tensor(self, name, data, bid)
            if done:
                return

        # granite: JetMoe-style merged experts and shared MLP
        if name.endswith("block_sparse_moe.input_linear.weight"):
            ff = self.hp["intermediate_size"]
            if data.shape[-2] != 2 * ff:
                raise ConvertError(f"tensor {name!r}: shape {data.shape}, expected (E, {2 * ff}, d)")
            yield self.fmt(gguf.MODEL_TENSOR.FFN_GATE_EXP, bid), data[..., :ff, :]
            yield self.fmt(gguf.MODEL_TENSOR.FFN_UP_EXP, bid), data[..., ff:, :]
            return
        if name.endswith("shared_mlp.input_linear.weight"):
            ff = self.hp["shared_intermediate_size"]
            if data.shape[-2] != 2 * ff:
                raise ConvertError(f"tensor {name!r}: shape {data.shape}, expected ({2 * ff}, d)")
            if self.n_expert:
                yield self.fmt(gguf.MODEL_TENSOR.FFN_GATE_SHEXP, bid), data[:ff]
                yield self.fmt(gguf.MODEL_TENSOR.FFN_UP_SHEXP, bid), data[ff:]
            else:
                yield self.fmt(gguf.MODEL_TENSOR.FFN_GATE, bid), data[:ff]
                yield self.fmt(gguf.MODEL_TENSOR.FFN_UP, bid), data[ff:]
            return
        if name.endswith("shared_mlp.output_linear.weight") and not self.n_expert:
            yield self.fmt(gguf.MODEL_TENSOR.FFN_DOWN, bid), data
            return

        # transformers-5 fused expert tensors
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.gate_up_proj.weight")):
            if data.ndim != 3 or data.shape[-2] % 2:
                raise ConvertError(f"tensor {name!r}: unexpected shape {data.shape}")
            ff = data.shape[-2] // 2
            yield self.fmt(gguf.MODEL_TENSOR.FFN_GATE_EXP, bid), data[:, :ff, :]
            yield self.fmt(gguf.MODEL_TENSOR.FFN_UP_EXP, bid), data[:, ff:, :]
            return
        if name.endswith(("mlp.experts.down_proj", "mlp.experts.down_proj.weight")):
            yield self.fmt(gguf.MODEL_TENSOR.FFN_DOWN_EXP, bid), data
            return

        # one expert's matrix: buffer until all experts of this (layer, matrix) are in
        m = _EXPERT_RE.match(name)
        if m:
            if not self.n_expert:
                raise ConvertError(f"tensor {name!r}: expert tensor but the config has no experts")
            key = (int(m.group("bid")), m.group("w"))
            slot = self.pending.setdefault(key, {})
            slot[int(m.group("xid"))] = data
            if len(slot) == self.n_expert:
                del self.pending[key]
                if sorted(slot) != list(range(self.n_expert)):
                    raise ConvertError(f"layer {key[0]} {key[1]}: expert ids {sorted(slot)}")
                merged = np.stack([slot[e] for e in range(self.n_expert)], axis=0)
                yield self.name(f"model.layers.{key[0]}.{_MERGED[key[1]]}.weight"), merged
            return

        yield self.name(name), data

    def finish(self):
        if self.gpt_oss is not None:
            self.gpt_oss.finish()
        if self.pending:
            left = ", ".join(f"layer {b} {w}: {len(s)}/{self.n_expert}"
                             for (b, w), s in sorted(self.pending.items()))
            raise ConvertError(f"incomplete experts ({left})")


def target_type(gname: str, data: np.ndarray, out: gguf.GGMLQuantizationType):
    """llama.cpp's prepare_tensors rule for the stored type of one tensor."""
    if data.ndim <= 1 or gname.endswith("_norm.weight"):
        return gguf.GGMLQuantizationType.F32
    base = re.sub(r"^blk\.\d+\.", "", gname)
    if (base in ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight", "ssm_conv1d.weight")
            or not gname.endswith(".weight")):
        return gguf.GGMLQuantizationType.F32
    return out


def encode(data: np.ndarray, qtype: gguf.GGMLQuantizationType):
    data = np.ascontiguousarray(data, dtype=np.float32)
    try:
        return gguf.quants.quantize(data, qtype), qtype
    except gguf.QuantError as e:
        log.warning("%s, falling back to F16", e)
        return gguf.quants.quantize(data, gguf.GGMLQuantizationType.F16), gguf.GGMLQuantizationType.F16


# =================================================================================================
# Hyperparameters
# =================================================================================================

def write_hparams(w: gguf.GGUFWriter, hf_arch: str, arch: gguf.MODEL_ARCH, hp: dict,
                  ftype: gguf.LlamaFileType, routing: dict | None = None):
    """routing: deepseek2_routing's answer for deepseek2, glm4moe_routing's for glm4moe."""
    is_llama = arch in (gguf.MODEL_ARCH.LLAMA, gguf.MODEL_ARCH.GRANITE_MOE)
    is_granite = arch == gguf.MODEL_ARCH.GRANITE_MOE
    hp = dict(hp)
    full_hp = hp
    if arch == gguf.MODEL_ARCH.DEEPSEEK2:
        hp = deepseek2_base_hp(hp)
    if arch == gguf.MODEL_ARCH.GLM4_MOE:
        hp = glm4moe_base_hp(hp)
    if is_granite and hp.get("head_dim"):
        log.warning("ignoring head_dim (%s) from config for Granite, as llama.cpp does", hp["head_dim"])
        hp.pop("head_dim")

    # ---- TextModel.set_gguf_parameters ----
    w.add_block_count(hp["num_hidden_layers"])
    if (v := _find(hp, ["max_position_embeddings", "n_ctx", "n_positions", "max_length",
                        "max_sequence_length", "model_max_length"])) is not None:
        w.add_context_length(v)
    if (v := _find(hp, ["hidden_size", "n_embd", "dim"])) is not None:
        w.add_embedding_length(v)
    if (v := _find(hp, ["intermediate_size", "n_inner", "hidden_dim"])) is not None:
        w.add_feed_forward_length(v)
    if (v := _find(hp, ["num_attention_heads", "n_head", "n_heads"])) is not None:
        w.add_head_count(v)
    if (v := _find(hp, ["num_key_value_heads", "n_kv_heads"])) is not None:
        w.add_head_count_kv(v)
    rp = rope_params(hp)
    rtype = rp.get("rope_type")
    if rtype is not None:
        factor = rp.get("factor")
        if rtype == "linear" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(factor)
        elif rtype == "yarn" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(factor)
            w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
            if (v := rp.get("extrapolation_factor")) is not None:
                w.add_rope_scaling_yarn_ext_factor(v)
            if (v := rp.get("attention_factor", rp.get("attn_factor"))) is not None:
                w.add_rope_scaling_yarn_attn_factor(v)
            if (v := rp.get("beta_fast")) is not None:
                w.add_rope_scaling_yarn_beta_fast(v)
            if (v := rp.get("beta_slow")) is not None:
                w.add_rope_scaling_yarn_beta_slow(v)
        elif rtype != "default":
            log.warning("RoPE type %r is not converted", rtype)
    if (v := rp.get("rope_theta")) is not None:
        w.add_rope_freq_base(v)
    if (v := _find(hp, ["rms_norm_eps", "norm_eps"])) is not None:
        w.add_layer_norm_rms_eps(v)
    if (v := _find(hp, ["num_local_experts", "num_experts"])) is not None:
        w.add_expert_count(v)
    if (v := _find(hp, ["num_experts_per_tok", "num_experts_per_token", "top_k_experts"])) is not None:
        w.add_expert_used_count(v)
    if (v := _find(hp, ["score_function", "scoring_func", "score_func", "moe_router_activation",
                        "moe_router_activation_func"])) is not None:
        if v not in ("softmax", "sigmoid"):
            raise ConvertError(f"config: unsupported expert score function {v!r}")
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v == "sigmoid"
                                 else gguf.ExpertGatingFuncType.SOFTMAX)
    if (v := hp.get("head_dim")) is not None:
        w.add_key_length(v)
        w.add_value_length(v)
    w.add_file_type(ftype)

    # ---- per model class ----
    if is_llama:  # LlamaModel
        w.add_vocab_size(hp["vocab_size"])
        rope_dim = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
        w.add_rope_dimension_count(rope_dim)
    if is_granite:  # GraniteModel, GraniteMoeModel
        if v := hp.get("attention_multiplier"):
            w.add_attention_scale(v)
        if v := hp.get("embedding_multiplier"):
            w.add_embedding_scale(v)
        if v := hp.get("residual_multiplier"):
            w.add_residual_scale(v)
        if v := hp.get("logits_scaling"):
            w.add_logit_scale(v)
        if v := hp.get("shared_intermediate_size"):
            w.add_expert_shared_feed_forward_length(v)
    if arch in (gguf.MODEL_ARCH.QWEN2MOE, gguf.MODEL_ARCH.QWEN3MOE, gguf.MODEL_ARCH.QWEN3NEXT):
        if (v := hp.get("moe_intermediate_size")) is not None:
            w.add_expert_feed_forward_length(v)
        if (v := hp.get("shared_expert_intermediate_size")) is not None:
            w.add_expert_shared_feed_forward_length(v)
    if arch == gguf.MODEL_ARCH.OLMOE:  # OlmoeModel overrides the epsilon
        if hp.get("rms_norm_eps") not in (None, 1e-5):
            log.warning("OLMoE rms_norm_eps %s: llama.cpp's converter writes 1e-5 regardless",
                        hp.get("rms_norm_eps"))
        w.add_layer_norm_rms_eps(1e-5)
    if arch == gguf.MODEL_ARCH.DEEPSEEK2:  # DeepseekV2Model
        write_hparams_deepseek2(w, full_hp, routing)
    if arch == gguf.MODEL_ARCH.GLM4_MOE:  # Glm4MoeModel
        write_hparams_glm4moe(w, full_hp, routing)
    if arch == gguf.MODEL_ARCH.GPT_OSS:  # GptOssModel
        write_hparams_gpt_oss(w, hp)
    if arch == gguf.MODEL_ARCH.QWEN3NEXT:  # Qwen3NextModel(Qwen2MoeModel)
        write_hparams_qwen3next(w, hp)


# =================================================================================================
# Driver
# =================================================================================================

def convert(model_dir: str | Path, outfile: str | Path, outtype: str = "f16",
            pre: str | None = None, name: str | None = None, keep_mtp: bool = True,
            expert_type: str | None = None, legacy_kv_b: bool = False) -> Path:
    """Converts model_dir to outfile; returns the output path. Raises ConvertError.
    expert_type: a type for the routed experts' weights other than outtype (EXPERT_TYPES).
    legacy_kv_b: deepseek2 in the layout before llama.cpp's MLA split (one attn_kv_b per layer,
    the trained key/value lengths, no *_mla keys), as older GGUF files have it."""
    model_dir, outfile = Path(model_dir), Path(outfile)
    if outtype not in OUTTYPES:
        raise ConvertError(f"--outtype {outtype!r}: one of {', '.join(OUTTYPES)}")
    if expert_type is not None and expert_type not in EXPERT_TYPES:
        raise ConvertError(f"--expert-type {expert_type!r}: one of {', '.join(EXPERT_TYPES)}")
    ftype, qtype = OUTTYPES[outtype]
    hp = load_config(model_dir)
    hf_arch = (hp.get("architectures") or [None])[0]
    if hf_arch not in ARCHES:
        raise ConvertError(f"config.json architectures {hp.get('architectures')!r}: not supported "
                           f"({', '.join(ARCHES)})")
    arch, permute = ARCHES[hf_arch]
    if arch == gguf.MODEL_ARCH.GPT_OSS:
        gpt_oss_check(hp)
    if arch == gguf.MODEL_ARCH.QWEN3NEXT:  # the trunk's pattern: block_count may count MTP layers
        hp = dict(hp, full_attention_interval=qwen3next_interval(hp), layer_types=None)
    if legacy_kv_b:
        if arch != gguf.MODEL_ARCH.DEEPSEEK2:
            raise ConvertError("--legacy-kv-b is for deepseek2 checkpoints only")
        hp = dict(hp, **{LEGACY_KV_B: True})
    routing = (deepseek2_routing(hf_arch, hp) if arch == gguf.MODEL_ARCH.DEEPSEEK2
               else glm4moe_routing(hp) if arch == gguf.MODEL_ARCH.GLM4_MOE else None)
    if keep_mtp and arch in MTP_ARCHES:  # only layers that are MTP layers
        keep_mtp = f"model.layers.{hp['num_hidden_layers']}.eh_proj.weight" in safetensors_names(model_dir)
    elif keep_mtp and arch == gguf.MODEL_ARCH.QWEN3NEXT:
        keep_mtp = "mtp.fc.weight" in safetensors_names(model_dir)
    tc = TensorConverter(arch, hp, permute, keep_mtp)
    w = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[arch])

    n_mxfp4_exps = 0
    for hf_name, data in iter_safetensors(model_dir):
        for gname, arr in tc.convert(hf_name, data):
            if isinstance(arr, Packed):  # already quantized (gpt-oss's MXFP4 experts)
                enc, t, dtype = arr.raw, arr.qtype, "packed"
            else:
                t = target_type(gname, arr, qtype)
                if expert_type is not None and _EXPS_WEIGHT.match(gname):
                    t = EXPERT_TYPES[expert_type]
                enc, t = encode(arr, t)
                dtype = str(arr.dtype)
            if t == gguf.GGMLQuantizationType.MXFP4 and _EXPS_WEIGHT.match(gname):
                n_mxfp4_exps += 1
            log.info("%-32s %-10s -> %-5s %s", gname, dtype, t.name, tuple(reversed(arr.shape)))
            w.add_tensor(gname, enc, raw_dtype=t)
    tc.finish()
    if n_mxfp4_exps:  # llama.cpp's name for a file whose experts are MXFP4
        ftype = gguf.LlamaFileType.MOSTLY_MXFP4_MOE

    # metadata in llama.cpp's order: general.*, hyperparameters, tokenizer, quantization version
    w.add_type(gguf.GGUFType.MODEL)
    total, shared, expert, n_exp = w.get_total_parameter_count()
    meta = gguf.Metadata.load(None, model_dir, name, total)
    if meta.name is None:
        meta.name = model_dir.name
    if meta.size_label is None and total > 0:
        meta.size_label = gguf.size_label(total, shared, expert, n_exp)
    meta.set_gguf_meta_model(w)
    n_mtp = len(tc.mtp_bids)
    if n_mtp:  # block_count counts the MTP layers (llama.cpp's n_layer_all)
        if tc.mtp_bids != set(range(tc.n_layer, tc.n_layer + n_mtp)):
            raise ConvertError(f"MTP layers {sorted(tc.mtp_bids)}: expected {tc.n_layer}..")
        hp = dict(hp, num_hidden_layers=tc.n_layer + n_mtp)
    write_hparams(w, hf_arch, arch, hp, ftype, routing)
    if n_mtp:
        w.add_nextn_predict_layers(n_mtp)
    write_vocab(w, model_dir, hp, pre)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    outfile.parent.mkdir(parents=True, exist_ok=True)
    w.write_header_to_file(path=outfile)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return outfile


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Convert a Hugging Face checkpoint to GGUF "
                                 "(llama.cpp's layout)")
    ap.add_argument("model", help="checkpoint directory (config.json, *.safetensors)")
    ap.add_argument("--outfile", "-o", required=True, help="output .gguf path")
    ap.add_argument("--outtype", default="f16", choices=list(OUTTYPES))
    ap.add_argument("--expert-type", default=None, choices=list(EXPERT_TYPES),
                    help="stored type of the routed experts' weights (default: --outtype; "
                    "gpt-oss's MXFP4 checkpoints are always repacked as MXFP4)")
    ap.add_argument("--pre", default=None, help="tokenizer.ggml.pre when the hash is unknown")
    ap.add_argument("--name", default=None, help="general.name (default: from the model card or "
                    "the directory name)")
    ap.add_argument("--no-mtp", action="store_true", help="drop the multi-token-prediction "
                    "layers (deepseek2's and glm4moe's num_nextn_predict_layers, qwen3next's "
                    "mtp.*; kept by default)")
    ap.add_argument("--legacy-kv-b", action="store_true", help="deepseek2: write the layout "
                    "before llama.cpp's MLA split (one attn_kv_b per layer), as older files have it")
    ap.add_argument("--verbose", "-v", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(levelname)s: %(message)s")
    try:
        out = convert(a.model, a.outfile, a.outtype, a.pre, a.name, keep_mtp=not a.no_mtp,
                      expert_type=a.expert_type, legacy_kv_b=a.legacy_kv_b)
    except (ConvertError, OSError, KeyError) as e:
        print(f"convert_hf: error: {e}", file=sys.stderr)
        return 1
    print(f"convert_hf: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
