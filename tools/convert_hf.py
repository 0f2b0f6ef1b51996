#!/usr/bin/env python3
"""convert_hf.py - Hugging Face checkpoint directory -> GGUF, in llama.cpp's layout.

Owns: reading a transformers checkpoint (config.json, *.safetensors, tokenizer files when present)
of the architectures Strata runs, and writing one GGUF file with the gguf package's GGUFWriter
whose tensor names, tensor layouts and metadata keys are the ones llama.cpp's convert_hf_to_gguf.py
produces, so a file made here loads in llama.cpp and a file made there loads in Strata.

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
  * Experts are stacked into blk.N.ffn_{gate,up,down}_exps of shape (n_expert, rows, cols); the
    transformers-5 fused layout (experts.gate_up_proj, experts.down_proj) is split the same way.
    Granite's merged input_linear (E, 2*ff, d) is split into gate (first ff rows) and up.
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
  * Tokenizer: byte-level BPE ("gpt2") from tokenizer.json through transformers' AutoTokenizer,
    token types, merges, special ids, add_bos/add_eos, chat template (gguf.SpecialVocab), and
    tokenizer.ggml.pre from the hash of llama.cpp's check text (a small table below), else from
    tokenizer.json's Split regex (GPT-2's: gpt-2; o200k's, gpt-oss's o200k_harmony: gpt-4o). Without
    tokenizer files the file gets tokenizer.ggml.model = "none", as llama.cpp does for
    vocabulary-less models, and a warning.
  * SentencePiece: a tokenizer.model that is a SentencePiece model (llama, Mistral, Mixtral) is
    preferred over tokenizer.json, as llama.cpp's LlamaModel.set_vocab prefers it, unless
    tokenizer.json is byte-level. tokenizer.ggml.model = "llama", pre "default", pieces, scores
    and types as _create_vocab_sentencepiece makes them (normal 1, unknown 2, control 3, unused 5,
    byte 6 from the model; added tokens from added_tokens.json, tokenizer_config.json's
    added_tokens_decoder and tokenizer.json's added_tokens: control 3 when special or
    special-looking, else user_defined 4 with U+2581 written as a space; score -1000), padded with
    [PADi] (unused, -10000) to config.json's vocab_size; special ids and add_bos/add_eos through
    gguf.SpecialVocab, ids it does not find taken from the model's own bos/eos/unk/pad ids; and
    tokenizer.ggml.add_space_prefix = the model's normalizer_spec.add_dummy_prefix. llama.cpp's
    SPM tokenizer neither normalizes (NFKC) nor collapses whitespace, so a model whose normalizer
    does either gets a warning (its tokenization then differs on such text).

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
from hashlib import sha256
from pathlib import Path

import numpy as np

import gguf

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

# sha256 of str(tokenizer.encode(CHECK_TEXT)) -> tokenizer.ggml.pre; entries from llama.cpp's
# get_vocab_base_pre (the subset of pre-tokenizers Strata implements).
CHECK_TEXT = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis '
              'concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 '
              'កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български '
              '\'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you '
              'sure? \'M not sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL')
PRE_BY_HASH = {
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",
    "049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754": "deepseek-llm",
    "877081d19cf6996e2c4ff0e1236341e9b7bde288f5311a56a937f0afbbb3aeb5": "deepseek-v3",
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166": "olmo",  # also mpt's
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",
    "9ca2dd618e8afaf09731a7cf6e2105b373ba6a1821559f258b272fe83e6eb902": "glm4",  # GLM-4.5, 4.6
    "cdf5f35325780597efd76153d4d1c16778f766173908894c04afc20108536267": "glm4",  # GLM-4.7-Flash
    "a1336059768a55c99a734006ffb02203cd450fed003e9a71886c88acf24fdbc2": "glm4",  # glm-4-9b-hf
}

# GPT-2's pre-tokenizer regex, as tokenizers' ByteLevel(use_regex=True) applies it: a tokenizer.json
# whose only pre-tokenizer is that gets "gpt-2" when its hash is not in the table.
GPT2_SPLIT = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
# o200k's (GPT-4o, gpt-oss's o200k_harmony) Split regex before a regex-less ByteLevel: "gpt-4o"
O200K_SPLIT = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
               "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
               "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# Llama 3's Split regex, which GLM-4.5's tokenizer.json uses too: "glm4" for glm4moe checkpoints
# (llama.cpp's "llama-bpe" adds a BOS; GLM's has none)
LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
                "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
SPLIT_PRES = {GPT2_SPLIT: "gpt-2", O200K_SPLIT: "gpt-4o"}
# GLM-4.5's special tokens as llama.cpp's Glm4MoeModel.set_vocab sets them (bos [gMASK]; eot
# <|user|> and eom <|observation|>, so both end generation; unk <|endoftext|>)
GLM4_SPECIALS = (("bos", "[gMASK]"), ("eot", "<|user|>"), ("unk", "<|endoftext|>"),
                 ("eom", "<|observation|>"))


# hp key set by convert(legacy_kv_b=True): deepseek2 written as llama.cpp's converters did before
# splitting attn_kv_b into attn_k_b / attn_v_b (kept to test loaders of such files)
LEGACY_KV_B = "_strata_legacy_kv_b"


class ConvertError(Exception):
    pass


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


# an MTP layer's own parts: HF name after model.layers.N. -> llama.cpp's blk.N.nextn.<name>
_NEXTN = {"eh_proj.weight": "eh_proj", "enorm.weight": "enorm", "hnorm.weight": "hnorm",
          "embed_tokens.weight": "embed_tokens", "shared_head.head.weight": "shared_head_head",
          "shared_head.norm.weight": "shared_head_norm"}


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
            if bid is not None and bid >= self.n_layer:  # a multi-token-prediction layer
                if bid >= self.n_layer + self.n_nextn:
                    return  # dropped (--no-mtp, or more than the config declares)
                self.mtp_bids.add(bid)
                part = name.split(f".layers.{bid}.", 1)[1]
                if part in _NEXTN:
                    yield f"blk.{bid}.nextn.{_NEXTN[part]}.weight", data
                    return
            is_mla = self.arch == gguf.MODEL_ARCH.DEEPSEEK2
            if is_mla and name.endswith("self_attn.kv_b_proj.weight"):
                if self.hp.get(LEGACY_KV_B):  # the layout before llama.cpp's split: one attn_kv_b
                    yield self.fmt(gguf.MODEL_TENSOR.ATTN_KV_B, bid), data
                else:
                    yield from self.split_kv_b(name, data, bid)
                return
            if name.endswith("mlp.gate.e_score_correction_bias"):
                probs_b = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_EXP_PROBS_B].format(bid=bid)
                yield probs_b + ".bias", data
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

    def split_kv_b(self, name: str, data: np.ndarray, bid: int):
        """MLA's kv_b_proj (n_head * (qk_nope + v_head), kv_lora) -> attn_k_b, per head transposed
        to (kv_lora, qk_nope) rows x cols, and attn_v_b, per head (v_head, kv_lora)."""
        nope, vd = self.hp["qk_nope_head_dim"], self.hp["v_head_dim"]
        if data.ndim != 2 or data.shape[0] != self.n_head * (nope + vd):
            raise ConvertError(f"tensor {name!r}: shape {data.shape}, expected "
                               f"({self.n_head * (nope + vd)}, kv_lora_rank)")
        kv_b = data.reshape(self.n_head, nope + vd, data.shape[1])
        yield self.fmt(gguf.MODEL_TENSOR.ATTN_K_B, bid), kv_b[:, :nope, :].transpose(0, 2, 1)
        yield self.fmt(gguf.MODEL_TENSOR.ATTN_V_B, bid), kv_b[:, nope:, :]

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

def _find(hp: dict, keys):
    for k in keys:
        if k in hp:
            return hp[k]
    return None


def rope_params(hp: dict) -> dict:
    """llama.cpp's TextModel.rope_parameters: rope_parameters (transformers 5) or rope_scaling,
    with rope_theta and rope_type mirrored into it."""
    rp = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    theta = _find(hp, ["global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta",
                       "rotary_emb_base"])
    if "rope_theta" not in rp and theta is not None:
        rp["rope_theta"] = theta
    if "rope_type" not in rp and rp.get("type") is not None:
        rp["rope_type"] = rp["type"]
    return rp


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


# =================================================================================================
# Tokenizer
# =================================================================================================

def _pre_from_tokenizer_json(model_dir: Path, glm: bool = False) -> str | None:
    """'gpt-2' when tokenizer.json pre-tokenizes exactly like GPT-2 (ByteLevel with its regex);
    'gpt-2' or 'gpt-4o' for a Split by one of SPLIT_PRES's regexes before a regex-less ByteLevel;
    'glm4' for Llama 3's Split there when glm (a glm4moe checkpoint)."""
    p = model_dir / "tokenizer.json"
    if not p.is_file():
        return None
    pre = json.load(open(p, encoding="utf-8")).get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    if pre.get("type") == "Sequence":
        subs = pre.get("pretokenizers") or []
        pres = dict(SPLIT_PRES, **({LLAMA3_SPLIT: "glm4"} if glm else {}))
        if (len(subs) == 2 and subs[0].get("type") == "Split"
                and subs[0].get("pattern", {}).get("Regex") in pres
                and subs[1].get("type") == "ByteLevel" and not subs[1].get("use_regex", True)):
            return pres[subs[0]["pattern"]["Regex"]]
    return None


# ---- SentencePiece (tokenizer.model) ------------------------------------------------------------

def _pb_fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message: ints for varints and fixed
    fields, bytes for length-delimited ones. Enough of the wire format to read a SentencePiece
    ModelProto's specs without the protobuf package."""
    i, n = 0, len(buf)

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            if i >= n:
                raise ValueError("truncated varint")
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < n:
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            yield num, wt, varint()
        elif wt == 1 or wt == 5:
            k = 8 if wt == 1 else 4
            if i + k > n:
                raise ValueError("truncated fixed field")
            yield num, wt, int.from_bytes(buf[i:i + k], "little")
            i += k
        elif wt == 2:
            k = varint()
            if i + k > n:
                raise ValueError("truncated length-delimited field")
            yield num, wt, buf[i:i + k]
            i += k
        else:
            raise ValueError(f"protobuf wire type {wt} not expected")


def spm_normalizer_spec(proto: bytes) -> dict:
    """ModelProto.normalizer_spec (field 3) of a serialized SentencePiece model: name,
    add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces (proto2 defaults when absent);
    plus trainer_spec.model_type (1 unigram, 2 bpe, 3 word, 4 char; 1 when absent)."""
    spec = {"name": None, "add_dummy_prefix": True, "remove_extra_whitespaces": True,
            "escape_whitespaces": True, "model_type": 1}
    for num, wt, val in _pb_fields(proto):
        if num == 3 and wt == 2:
            for f, fwt, v in _pb_fields(val):
                if f == 1 and fwt == 2:
                    spec["name"] = v.decode("utf-8", "replace")
                elif f in (3, 4, 5) and fwt == 0:
                    spec[{3: "add_dummy_prefix", 4: "remove_extra_whitespaces",
                          5: "escape_whitespaces"}[f]] = bool(v)
        elif num == 2 and wt == 2:
            for f, fwt, v in _pb_fields(val):
                if f == 3 and fwt == 0:
                    spec["model_type"] = v
    return spec


def _tokenizer_json(model_dir: Path) -> dict | None:
    p = model_dir / "tokenizer.json"
    return json.load(open(p, encoding="utf-8")) if p.is_file() else None


def _is_byte_level(tj: dict | None) -> bool:
    """tokenizer.json pre-tokenizes or decodes byte-level (a GPT-2 style BPE)."""
    def has(node):
        if not isinstance(node, dict):
            return False
        if node.get("type") == "ByteLevel":
            return True
        return any(has(x) for k in ("pretokenizers", "decoders") for x in node.get(k) or [])
    return tj is not None and (has(tj.get("pre_tokenizer")) or has(tj.get("decoder")))


def load_sentencepiece(model_dir: Path):
    """(SentencePieceProcessor, serialized model) for model_dir/tokenizer.model when it is a
    SentencePiece model that should be converted, else None (no such file; a byte-level
    tokenizer.json next to it; a tokenizer.model in another format, e.g. tiktoken's)."""
    path = model_dir / "tokenizer.model"
    if not path.is_file():
        return None
    if _is_byte_level(_tokenizer_json(model_dir)):
        log.info("tokenizer.json is byte-level BPE: ignoring tokenizer.model")
        return None
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError as e:
        raise ConvertError(f"{path} needs the sentencepiece package ({e}); "
                           "pip install sentencepiece") from e
    proto = path.read_bytes()
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(proto)
        spm_normalizer_spec(proto)
    except (RuntimeError, OSError, ValueError) as e:
        log.warning("%s is not a SentencePiece model (%s)", path, e)
        return None
    return sp, proto


def _looks_special(t: str) -> bool:
    """llama.cpp's does_token_look_special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<｜") and t.endswith("｜>"))
            or (t.startswith("<unused") and t.endswith(">")))


def _added_tokens(model_dir: Path) -> list[tuple[int, str, bool]]:
    """(id, content, special) of the added tokens: tokenizer.json's added_tokens, then
    tokenizer_config.json's added_tokens_decoder (the later source wins for an id)."""
    out: dict[int, tuple[str, bool]] = {}
    tj = _tokenizer_json(model_dir)
    for t in (tj or {}).get("added_tokens") or []:
        out[int(t["id"])] = (t["content"], bool(t.get("special")))
    p = model_dir / "tokenizer_config.json"
    if p.is_file():
        dec = json.load(open(p, encoding="utf-8")).get("added_tokens_decoder") or {}
        for i, t in dec.items():
            out[int(i)] = (t["content"], bool(t.get("special")))
    return [(i, c, s) for i, (c, s) in sorted(out.items())]


def write_vocab_spm(w: gguf.GGUFWriter, model_dir: Path, hp: dict, sp, proto: bytes):
    """tokenizer.ggml.model = "llama" from a SentencePiece model, as llama.cpp's
    _set_vocab_sentencepiece writes it (plus add_space_prefix from the model's normalizer)."""
    TT = gguf.TokenType
    n_sp = sp.vocab_size()
    n_vocab = hp.get("vocab_size") or n_sp
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    scores = [-10000.0] * n_vocab
    types = [TT.UNUSED] * n_vocab
    if n_sp > n_vocab:
        log.warning("ignoring SentencePiece pieces from id %d: vocab_size is %d", n_vocab, n_vocab)
    for i in range(min(n_sp, n_vocab)):
        t = TT.NORMAL
        if sp.IsUnknown(i):
            t = TT.UNKNOWN
        elif sp.IsControl(i):
            t = TT.CONTROL
        elif sp.IsUnused(i):
            t = TT.UNUSED
        elif sp.IsByte(i):
            t = TT.BYTE
        tokens[i] = sp.IdToPiece(i)
        scores[i] = sp.GetScore(i)
        types[i] = t

    p = model_dir / "added_tokens.json"
    if p.is_file():
        for text, i in json.load(open(p, encoding="utf-8")).items():
            if i >= n_vocab:
                log.warning("ignoring added token %r: id %d >= vocab_size %d", text, i, n_vocab)
                continue
            tokens[i], scores[i], types[i] = text, -1000.0, TT.USER_DEFINED
    for i, text, special in _added_tokens(model_dir):
        if i >= n_vocab:
            log.warning("ignoring added token %r: id %d >= vocab_size %d", text, i, n_vocab)
            continue
        if types[i] != TT.UNUSED and tokens[i] != text:
            log.warning("replacing token %d: %r -> %r", i, tokens[i], text)
        if special or _looks_special(text):
            types[i] = TT.CONTROL
        else:
            text = text.replace("\u2581", " ")  # user-defined spaces, pre-normalized
            types[i] = TT.USER_DEFINED
        tokens[i], scores[i] = text, -1000.0

    spec = spm_normalizer_spec(proto)
    if spec["model_type"] != 2:
        log.warning("SentencePiece model_type %d is not BPE: llama.cpp's (and Strata's) SPM "
                    "tokenizer merges by score and may split differently", spec["model_type"])
    if spec["name"] not in (None, "identity") or spec["remove_extra_whitespaces"]:
        log.warning("SentencePiece normalizer %r (remove_extra_whitespaces=%s): llama.cpp's SPM "
                    "tokenizer does not normalize, so such text tokenizes differently",
                    spec["name"], spec["remove_extra_whitespaces"])

    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_add_space_prefix(spec["add_dummy_prefix"])
    sv = gguf.SpecialVocab(model_dir, load_merges=False, n_vocab=n_vocab)
    for typ, i in (("bos", sp.bos_id()), ("eos", sp.eos_id()), ("unk", sp.unk_id()),
                   ("pad", sp.pad_id())):
        if typ not in sv.special_token_ids and 0 <= i < n_vocab:
            sv.special_token_ids[typ] = i
    sv.add_to_gguf(w)


# ---- byte-level BPE (tokenizer.json) -------------------------------------------------------------

def write_vocab(w: gguf.GGUFWriter, model_dir: Path, hp: dict, pre_override: str | None):
    spm = load_sentencepiece(model_dir)
    if spm is not None:
        write_vocab_spm(w, model_dir, hp, *spm)
        return
    if not (model_dir / "tokenizer.json").is_file():
        if (model_dir / "tokenizer.model").is_file():
            log.warning("tokenizer.model is not a SentencePiece model and there is no "
                        "tokenizer.json: writing tokenizer.ggml.model = none")
        else:
            log.warning("no tokenizer files in %s: writing tokenizer.ggml.model = none "
                        "(the file can run token ids only)", model_dir)
        w.add_tokenizer_model("none")
        return
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise ConvertError(f"tokenizer.json present but transformers is missing ({e})") from e
    tok = AutoTokenizer.from_pretrained(model_dir)
    vocab = tok.get_vocab()
    n_vocab = hp.get("vocab_size", len(vocab))
    if max(vocab.values()) >= n_vocab:
        raise ConvertError(f"tokenizer has id {max(vocab.values())} >= vocab_size {n_vocab}")

    glm = (hp.get("architectures") or [None])[0] == "Glm4MoeForCausalLM"
    pre = pre_override
    if pre is None:
        chkhsh = sha256(str(tok.encode(CHECK_TEXT)).encode()).hexdigest()
        pre = PRE_BY_HASH.get(chkhsh)
        if pre is None:
            pre = _pre_from_tokenizer_json(model_dir, glm)
            if pre is None:
                raise ConvertError(f"BPE pre-tokenizer not recognized (check hash {chkhsh}); "
                                   "pass --pre NAME")
            log.warning("pre-tokenizer hash %s not in the table; tokenizer.json says %r", chkhsh, pre)

    reverse = {i: t for t, i in vocab.items()}
    added = tok.get_added_vocab()
    added_dec = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added:
            if not added_dec[i].normalized:
                t = tok.decode(tok.encode(t, add_special_tokens=False))
            looks_special = (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
                             or (t.startswith("<|") and t.endswith("|>"))
                             or (t.startswith("<｜") and t.endswith("｜>"))
                             or (t.startswith("<unused") and t.endswith(">")))
            if added_dec[i].special or looks_special:
                types.append(gguf.TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    sv = gguf.SpecialVocab(model_dir, load_merges=True)
    if glm:  # (a type the tokenizer config already sets is kept, as in llama.cpp)
        for typ, text in GLM4_SPECIALS:
            if text in added:
                sv._set_special_token(typ, added[text])
    sv.add_to_gguf(w)


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
