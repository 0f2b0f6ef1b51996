"""test_hf_parity_lib.py - helpers shared by the HF converter and parity tests (no tests here).

Owns: the tiny random Hugging Face model zoo (one config per architecture Strata supports, set up
as the real checkpoints are), building and saving such a model, importing tools/convert_hf.py,
a trained byte-level BPE tokenizer for the converter's vocabulary tests, running Strata on token
ids through the cffi API (f32 KV cache, all logits, token-by-token greedy),
the greedy-continuation comparison rule (vLLM's check_logprobs_close, with a top-2 margin), and
the MTP drafter's check against a reference built from transformers' own decoder layers (CPU and
GPU sessions)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("STRATA_SHARED") or (REPO.parent / "shared"))

# =================================================================================================
# Model zoo
# =================================================================================================

# Shared shape of every tiny model: several layers, GQA (4 query heads over 2 KV heads), head_dim 16.
BASE = dict(vocab_size=320, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
            tie_word_embeddings=False)


def zoo() -> dict[str, tuple[str, dict]]:
    """name -> (transformers class name without 'Config'/'ForCausalLM', config kwargs)."""
    moe8 = dict(num_experts=8, num_experts_per_tok=2)
    return {
        # OLMoE: q/k norm over the whole projection, top-k not renormalized; llama.cpp's converter
        # always writes eps 1e-5 for olmoe, which is also OLMoE's own value.
        "olmoe": ("Olmoe", dict(BASE, rms_norm_eps=1e-5, intermediate_size=64, **moe8,
                                norm_topk_prob=False, rope_theta=50000.0)),
        # Qwen2-MoE: shared expert with sigmoid gate, q/k/v bias, top-4 not renormalized.
        "qwen2moe": ("Qwen2Moe", dict(BASE, intermediate_size=128, moe_intermediate_size=32,
                                      shared_expert_intermediate_size=64, num_experts=8,
                                      num_experts_per_tok=4, norm_topk_prob=False, qkv_bias=True,
                                      decoder_sparse_step=1, mlp_only_layers=[],
                                      rope_theta=1000000.0)),
        # Qwen3-MoE: per-head q/k norm, renormalized top-k, n_head*head_dim (128) != n_embd (64).
        "qwen3moe": ("Qwen3Moe", dict(BASE, num_attention_heads=8, intermediate_size=128,
                                      moe_intermediate_size=32, **moe8, norm_topk_prob=True,
                                      decoder_sparse_step=1, mlp_only_layers=[],
                                      rope_theta=1000000.0)),
        # Mixtral: llama with experts (q/k permuted for normal RoPE), renormalized top-2.
        "mixtral": ("Mixtral", dict(BASE, intermediate_size=64, num_local_experts=8,
                                    num_experts_per_tok=2, rope_theta=500000.0)),
        # Granite MoE: multipliers != 1 (attention_multiplier replaces 1/sqrt(head_dim)).
        "granitemoe": ("GraniteMoe", dict(_granite(), intermediate_size=64, num_local_experts=8,
                                          num_experts_per_tok=2)),
        "granitemoe_shared": ("GraniteMoeShared", dict(_granite(), intermediate_size=64,
                                                       num_local_experts=8, num_experts_per_tok=2,
                                                       shared_intermediate_size=64)),
        # dense
        "llama": ("Llama", dict(BASE, intermediate_size=128, rope_theta=500000.0)),
        "llama_linear_rope": ("Llama", dict(BASE, intermediate_size=128, rope_parameters=dict(
            rope_type="linear", factor=2.0, rope_theta=500000.0))),
        "qwen2": ("Qwen2", dict(BASE, intermediate_size=128, rope_theta=1000000.0)),
        "qwen2_yarn": ("Qwen2", dict(BASE, intermediate_size=128, rope_parameters=dict(
            rope_type="yarn", factor=4.0, rope_theta=1000000.0, original_max_position_embeddings=128))),
        # Qwen3 dense: tied embeddings (no output tensor), per-head q/k norm.
        "qwen3": ("Qwen3", dict(BASE, num_attention_heads=8, intermediate_size=128,
                                rope_theta=1000000.0, tie_word_embeddings=True)),
        # DeepSeek-V2-Lite: MLA without q compression, 1 dense + MoE layers with 2 shared experts,
        # softmax greedy top-2 not renormalized.
        "deepseek2_lite": ("DeepseekV2", dict(_mla(), q_lora_rank=None, n_routed_experts=8,
                                              n_shared_experts=2, num_experts_per_tok=2,
                                              topk_method="greedy", n_group=1, topk_group=1,
                                              norm_topk_prob=False, routed_scaling_factor=1.0,
                                              rope_theta=10000.0)),
        # DeepSeek-V3: compressed q, sigmoid scores plus a selection bias (e_score_correction_bias,
        # see build_hf), top-4 within the best 2 of 4 groups, renormalized and scaled, YaRN.
        "deepseek2_v3": ("DeepseekV3", dict(_mla(), q_lora_rank=48, n_routed_experts=16,
                                            n_shared_experts=1, num_experts_per_tok=4, n_group=4,
                                            topk_group=2, norm_topk_prob=True,
                                            routed_scaling_factor=2.5, rope_parameters=dict(
                                                rope_type="yarn", factor=4.0, rope_theta=10000.0,
                                                original_max_position_embeddings=128,
                                                mscale=0.707, mscale_all_dim=0.707))),
        # GLM-4.5: GQA with q/k/v bias and per-head q/k norm, NEOX RoPE on half of each head
        # (partial_rotary_factor 0.5), 1 dense + MoE layers with a shared expert, sigmoid scores
        # plus a selection bias (e_score_correction_bias, see build_hf), top-4 of 16 in one group,
        # renormalized and scaled.
        "glm4moe": ("Glm4Moe", _glm4moe()),
        # GLM-4.5-Air: the same without q/k norm.
        "glm4moe_noqknorm": ("Glm4Moe", dict(_glm4moe(), use_qk_norm=False)),
        # gpt-oss: sliding (even layers, window 4 < the longest prompt) and full attention
        # alternating, attention sinks, q/k/v/o biases, softmax over the top-2 router logits
        # (router bias), experts with biases and the clamped SwiGLU (alpha 1.702, limit 7), YaRN
        # as gpt-oss's own (beta 32/1, untruncated correction range), scaled down.
        "gpt_oss": ("GptOss", dict(BASE, num_hidden_layers=4, rms_norm_eps=1e-5,
                                   intermediate_size=32, num_local_experts=8,
                                   num_experts_per_tok=2, sliding_window=4, attention_bias=True,
                                   swiglu_limit=7.0, rope_parameters=dict(
                                       rope_type="yarn", factor=4.0, beta_fast=32.0,
                                       beta_slow=1.0, truncate=False, rope_theta=150000.0,
                                       original_max_position_embeddings=128))),
        # Qwen3-Next: gated DeltaNet layers (2 key heads serving 4 value heads, conv kernel 4) and
        # gated full attention (every 2nd layer; q/k norms, rope on a quarter of each head),
        # 8 experts top-2 renormalized plus a shared expert behind a sigmoid gate.
        "qwen3next": ("Qwen3Next", dict(BASE, num_hidden_layers=4, intermediate_size=128,
                                        moe_intermediate_size=32,
                                        shared_expert_intermediate_size=64, **moe8,
                                        norm_topk_prob=True, full_attention_interval=2,
                                        linear_conv_kernel_dim=4, linear_key_head_dim=16,
                                        linear_value_head_dim=16, linear_num_key_heads=2,
                                        linear_num_value_heads=4, rope_parameters=dict(
                                            rope_type="default", rope_theta=10000.0,
                                            partial_rotary_factor=0.25))),
    }


def _mla() -> dict:
    """DeepSeek MLA shape: every head has its own latent-decompressed K/V (num_key_value_heads =
    heads; transformers derives head_dim itself), the first layer dense."""
    g = {k: v for k, v in BASE.items() if k != "head_dim"}
    return dict(g, num_key_value_heads=BASE["num_attention_heads"], kv_lora_rank=32,
                qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1,
                intermediate_size=128, moe_intermediate_size=32)


def _glm4moe() -> dict:
    return dict(BASE, intermediate_size=128, moe_intermediate_size=32, n_routed_experts=16,
                n_shared_experts=1, num_experts_per_tok=4, n_group=1, topk_group=1,
                first_k_dense_replace=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                attention_bias=True, use_qk_norm=True, rope_parameters=dict(
                    rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5))


def _granite() -> dict:
    g = {k: v for k, v in BASE.items() if k != "head_dim"}
    return dict(g, embedding_multiplier=4.0, residual_multiplier=0.5, attention_multiplier=0.2,
                logits_scaling=2.5, rope_theta=20000.0)


def gpu_shape(name: str) -> dict:
    """Config changes that give `name` head_dim 64, the smallest the GPU attention kernels take.
    Granite derives head_dim from hidden_size / heads, and OLMoE's q/k norm widths assume that
    ratio too, so their hidden size grows instead (4 heads x 64). glm4moe takes head_dim 64 as it
    is: its partial rotary factor 0.5 then rotates 32 dimensions of each head."""
    if name.startswith("granite"):
        return dict(hidden_size=256)
    if name == "olmoe":
        return dict(hidden_size=256, head_dim=64)
    if name.startswith("deepseek2"):  # MLA: nope + rope and v heads of 64, latent 64
        return dict(qk_nope_head_dim=48, qk_rope_head_dim=16, v_head_dim=64, kv_lora_rank=64)
    return dict(head_dim=64)


def build_hf(name: str, seed: int = 0, n_layers: int | None = None, overrides: dict | None = None):
    """The tiny float32 HF model `name`, weights drawn from torch.manual_seed(seed): matrices
    N(0, 0.1) (so logits are decisive), norm weights 1 + N(0, 0.2), biases N(0, 0.2); the routers'
    expert-selection bias buffers (DeepSeek-V3's e_score_correction_bias, zeros after init)
    N(0, 0.1), the scale of the differences between sigmoid scores, so the bias changes picks;
    gpt-oss's attention sinks N(0, 1) (the scale of the attention logits) and its experts'
    fused gate_up_proj N(0, 0.6), so the SwiGLU's clamps at +-7 cut some of the values."""
    import torch
    import transformers

    cls, kw = zoo()[name]
    kw = dict(kw)
    if n_layers is not None:
        kw["num_hidden_layers"] = n_layers
    kw.update(overrides or {})
    cfg = getattr(transformers, cls + "Config")(**kw, attn_implementation="eager",
                                                 bos_token_id=None, eos_token_id=None,
                                                 pad_token_id=None)
    torch.manual_seed(seed)
    model = getattr(transformers, cls + "ForCausalLM")(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim == 1 and "norm" in pname:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif pname.endswith(".sinks"):
                p.copy_(torch.randn_like(p))
            elif cls == "GptOss" and pname.endswith("experts.gate_up_proj"):
                p.copy_(0.6 * torch.randn_like(p))
            elif p.ndim == 1 or pname.endswith("_bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
        for bname, b in model.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    return model


def save_hf(model, path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


def mtp_checkpoint(name: str, path: Path, seed: int = 31, own_head: bool = False,
                   overrides: dict | None = None):
    """A checkpoint of zoo model `name` (an architecture with multi-token prediction: deepseek2,
    glm4moe, qwen3next) whose trunk is followed by one MTP layer, laid out as DeepSeek-V3's and
    GLM-4.5's are: layer N (N = the zoo's layer count) is a full decoder layer plus enorm, hnorm,
    eh_proj and shared_head.norm, and with own_head also its own embed_tokens and shared_head.head
    (else it shares the trunk's); config.json says num_nextn_predict_layers 1. Qwen3-Next's is
    laid out as Qwen3-Next-80B-A3B's (qwen3next_mtp_state). Written to `path` unless there
    already. Returns (trunk HF model, the (N+1)-layer HF model whose layer N is the MTP layer's,
    {MTP part name: tensor}). The MTP parts: norms 1 + N(0, 0.2), matrices N(0, 0.1).
    overrides: config changes (gpu_shape's)."""
    import json

    import safetensors.torch
    import torch
    n = zoo()[name][1]["num_hidden_layers"]
    qwen3next = name == "qwen3next"
    if qwen3next:  # the MTP layer attends whatever the trunk's interval says
        iv = zoo()[name][1]["full_attention_interval"]
        types = ["full_attention" if (i + 1) % iv == 0 else "linear_attention" for i in range(n)]
        overrides = dict(overrides or {}, layer_types=types + ["full_attention"])
    full = build_hf(name, seed=seed, n_layers=n + 1, overrides=overrides)
    E, V = full.config.hidden_size, full.config.vocab_size
    g = torch.Generator().manual_seed(5)
    extras = {"enorm.weight": 1.0 + 0.2 * torch.randn(E, generator=g),
              "hnorm.weight": 1.0 + 0.2 * torch.randn(E, generator=g),
              "eh_proj.weight": 0.1 * torch.randn(E, 2 * E, generator=g),
              "shared_head.norm.weight": 1.0 + 0.2 * torch.randn(E, generator=g)}
    if own_head:
        extras["embed_tokens.weight"] = 0.1 * torch.randn(V, E, generator=g)
        extras["shared_head.head.weight"] = 0.1 * torch.randn(V, E, generator=g)
    sd = {k: v.contiguous() for k, v in full.state_dict().items()}
    mtp = f"model.layers.{n}."
    trunk_sd = {k: v for k, v in sd.items() if not k.startswith(mtp)}
    c = dict(full.config.to_dict(), num_hidden_layers=n)
    if qwen3next:
        c["layer_types"] = c["layer_types"][:n]
    cfg = type(full.config).from_dict(c)
    trunk = type(full)(cfg).to(torch.float32).eval()
    trunk.load_state_dict(trunk_sd)
    if not (path / "config.json").exists():
        save_hf(trunk, path)
        layer = {k[len(mtp):]: v for k, v in sd.items() if k.startswith(mtp)}
        if qwen3next:
            ckpt = dict(trunk_sd, **qwen3next_mtp_state(layer, extras))
        else:
            ckpt = dict(trunk_sd, **{mtp + k: v for k, v in layer.items()},
                        **{mtp + k: v for k, v in extras.items()})
        for f in path.glob("*.safetensors"):
            f.unlink()
        safetensors.torch.save_file(ckpt, str(path / "model.safetensors"),
                                    metadata={"format": "pt"})
        c = json.loads((path / "config.json").read_text())
        c["mtp_num_hidden_layers" if qwen3next else "num_nextn_predict_layers"] = 1
        (path / "config.json").write_text(json.dumps(c))
    return trunk, full, extras


def qwen3next_mtp_state(layer: dict, extras: dict) -> dict:
    """Qwen3-Next-80B-A3B's MTP tensors: mtp.fc (eh_proj), mtp.pre_fc_norm_embedding (enorm),
    mtp.pre_fc_norm_hidden (hnorm), mtp.norm (shared_head.norm) and the decoder layer as
    mtp.layers.0.*, its routed experts one tensor per expert and matrix
    (mtp.layers.0.mlp.experts.E.{gate,up,down}_proj.weight) as the checkpoint has them."""
    out = {"mtp.fc.weight": extras["eh_proj.weight"],
           "mtp.pre_fc_norm_embedding.weight": extras["enorm.weight"],
           "mtp.pre_fc_norm_hidden.weight": extras["hnorm.weight"],
           "mtp.norm.weight": extras["shared_head.norm.weight"]}
    for k, v in layer.items():
        if k == "mlp.experts.gate_up_proj":
            ff = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight"] = v[e, :ff].contiguous()
                out[f"mtp.layers.0.mlp.experts.{e}.up_proj.weight"] = v[e, ff:].contiguous()
        elif k == "mlp.experts.down_proj":
            for e in range(v.shape[0]):
                out[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"] = v[e].contiguous()
        else:
            out["mtp.layers.0." + k] = v
    return out


def convert_hf():
    """tools/convert_hf.py as a module."""
    if "convert_hf" in sys.modules:
        return sys.modules["convert_hf"]
    spec = importlib.util.spec_from_file_location("convert_hf", REPO / "tools" / "convert_hf.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["convert_hf"] = mod
    spec.loader.exec_module(mod)
    return mod


def train_bpe(texts, specials, split: str | None = None, vocab_size: int = 300):
    """A byte-level BPE (a tokenizers.Tokenizer with ByteLevel's decoder) trained on texts with the
    special tokens specials. Pre-tokenized by the regex split (isolated) then a regex-less
    ByteLevel, as the tokenizer.json of o200k, Llama 3 and GLM-4.5 are; with split None by
    ByteLevel's own GPT-2 regex."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tk = Tokenizer(models.BPE())
    if split is None:
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, tr)
    return tk

def hf_logits(model, tokens) -> np.ndarray:
    import torch
    with torch.no_grad():
        out = model(torch.tensor([list(tokens)], dtype=torch.long))
    return out.logits[0].double().numpy()


def hf_greedy(model, prompt, n: int):
    """(generated ids, logits row of every generated step) by full recomputation each step."""
    ids = list(prompt)
    rows = []
    for _ in range(n):
        row = hf_logits(model, ids)[-1]
        rows.append(row)
        ids.append(int(np.argmax(row)))
    return ids[len(prompt):], np.array(rows)


# =================================================================================================
# Strata through cffi
# =================================================================================================

class StrataModel:
    """A loaded model and one session (f32 KV cache unless told) on it."""

    def __init__(self, path, n_threads: int = 2, n_ctx: int = 512, n_batch: int = 512,
                 kv_type: str = "f32", backend: str = "cpu"):
        import strata
        self.strata, self.lib, self.ffi = strata, strata.lib, strata.ffi
        lib, ffi = self.lib, self.ffi
        mp = ffi.new("strata_model_params *")
        mp[0] = lib.strata_model_default_params()
        mp.n_threads = n_threads
        pm = ffi.new("strata_model **")
        strata.check(lib.strata_model_load(str(path).encode(), mp, pm), "strata_model_load")
        self.model = pm[0]
        info = ffi.new("strata_model_info *")
        strata.check(lib.strata_model_get_info(self.model, info), "strata_model_get_info")
        self.n_vocab = info.n_vocab
        self.arch = ffi.string(info.arch).decode()
        sp = ffi.new("strata_session_params *")
        sp[0] = lib.strata_session_default_params()
        sp.n_ctx = n_ctx
        sp.n_batch = n_batch
        sp.kv_type = lib.STRATA_TYPE_F32 if kv_type == "f32" else lib.STRATA_TYPE_F16
        sp.n_threads = n_threads
        sp.backend = lib.STRATA_BACKEND_CUDA if backend == "cuda" else lib.STRATA_BACKEND_CPU
        ps = ffi.new("strata_session **")
        rc = lib.strata_session_create(self.model, sp, ps)
        if rc != 0:
            msg = strata._ffi.last_error()
            lib.strata_model_free(self.model)
            raise strata.StrataError(rc, msg, "strata_session_create")
        self.session = ps[0]

    def close(self):
        if self.session is not None:
            self.lib.strata_session_free(self.session)
            self.session = None
        if self.model is not None:
            self.lib.strata_model_free(self.model)
            self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def decode(self, tokens, all_logits: bool) -> np.ndarray:
        n = len(tokens)
        toks = self.ffi.new("strata_token[]", [int(t) for t in tokens])
        rows = n if all_logits else 1
        buf = np.zeros((rows, self.n_vocab), dtype=np.float32)
        ptr = self.ffi.cast("float *", self.ffi.from_buffer(buf))
        self.strata.check(self.lib.strata_session_decode(self.session, toks, n, ptr,
                                                         1 if all_logits else 0),
                          "strata_session_decode")
        return buf

    def logits(self, tokens) -> np.ndarray:
        """(n, n_vocab) logits of a fresh sequence, the prompt read in one call."""
        self.lib.strata_session_reset(self.session)
        return self.decode(tokens, True).astype(np.float64)

    def greedy(self, prompt, n: int):
        """Token-by-token greedy decoding: (generated ids, logits row of every generated step)."""
        self.lib.strata_session_reset(self.session)
        row = self.decode(prompt, False)[0]
        out, rows = [], []
        for i in range(n):
            rows.append(row.astype(np.float64))
            t = int(np.argmax(row))  # lowest id on ties, like strata's greedy sampler
            out.append(t)
            if i + 1 < n:
                row = self.decode([t], False)[0]
        return out, np.array(rows)


# =================================================================================================
# Comparison rules
# =================================================================================================

def rel_err_rows(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per position: max|a - ref| / max|ref|."""
    return np.abs(a - ref).max(axis=-1) / np.maximum(np.abs(ref).max(axis=-1), 1e-30)


def top2_margin(row: np.ndarray) -> float:
    s = np.sort(row)
    return float(s[-1] - s[-2])


def topk_ids(row: np.ndarray, k: int = 5) -> set[int]:
    return set(int(i) for i in np.argsort(-row, kind="stable")[:k])


def compare_greedy(a_ids, a_rows, b_ids, b_rows, margin: float = 1e-3, top: int = 5):
    """None when the continuations agree under the rule, else a message. Rule: identical up to the
    first difference; there, the top-2 margin of both sides' logits must be <= margin (a near
    tie) and each side's token must be in the other's top-`top`; comparison ends there (the
    sequences have diverged)."""
    for i, (x, y) in enumerate(zip(a_ids, b_ids)):
        if x == y:
            continue
        ma, mb = top2_margin(a_rows[i]), top2_margin(b_rows[i])
        if max(ma, mb) > margin:
            return (f"step {i}: strata {x} vs hf {y} with top-2 margins {ma:.3g} / {mb:.3g} > "
                    f"{margin} (strata {a_ids}, hf {b_ids})")
        if x not in topk_ids(b_rows[i], top) or y not in topk_ids(a_rows[i], top):
            return f"step {i}: near tie but {x}/{y} not in each other's top-{top}"
        return None
    return None


# =================================================================================================
# MTP layers as drafters (deepseek2, glm4moe, qwen3next)
# =================================================================================================

def _rms(x, w, eps):
    import torch
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _mtp_norm(layer, eps):
    """The MTP block's own norms (enorm, hnorm, shared_head.norm) as a function (x, w): the
    decoder layer's own RMSNorm class where it differs from the plain one (Qwen3-Next's scales by
    1 + w, as vLLM's Qwen3NextMTP builds them), else the plain RMSNorm."""
    import torch
    cls = type(layer.input_layernorm)
    if cls.__name__ != "Qwen3NextRMSNorm":
        return lambda x, w: _rms(x, w, eps)

    def norm(x, w):
        m = cls(w.shape[0], eps=eps)
        with torch.no_grad():
            m.weight.copy_(w)
        return m(x)
    return norm


def mtp_reference(trunk, full, extras, hist, k):
    """llama.cpp's draft-mtp with transformers' own decoder layer: MTP row p joins
    enorm(embed(t_p)) with hnorm(H_{p-1}) (the trunk's final-normed state, zeros before position
    0), eh_proj, the MTP layer, shared_head.norm, the head; drafts chain on the previous row's
    normed output. embed and head are the MTP layer's own (embed_tokens, shared_head.head) when it
    has them, else the trunk's; the norms are _mtp_norm's. The whole row sequence is recomputed
    per draft (causal: the same as a cache). Returns the k greedy drafts and each step's logits."""
    import torch
    eps = full.config.rms_norm_eps
    layer = full.model.layers[trunk.config.num_hidden_layers]
    norm = _mtp_norm(layer, eps)
    embed = extras.get("embed_tokens.weight", full.model.embed_tokens.weight)
    head = extras.get("shared_head.head.weight", full.lm_head.weight)
    with torch.no_grad():
        H = trunk.model(torch.tensor([hist[:-1]])).last_hidden_state[0]
        hprev = torch.cat([torch.zeros(1, H.shape[1]), H], 0)       # H_{p-1} for p = 0..n-1
        toks = list(hist)
        drafts, rows = [], []
        for _ in range(k):
            n = len(toks)
            e = norm(embed[torch.tensor(toks)], extras["enorm.weight"])
            x = torch.cat([e, norm(hprev[:n], extras["hnorm.weight"])], -1) @ extras["eh_proj.weight"].T
            pos = torch.arange(n)[None]
            cs = full.model.rotary_emb(x[None], pos)
            mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
            y = layer(x[None], attention_mask=mask, position_ids=pos, position_embeddings=cs)
            y = y[0] if isinstance(y, tuple) else y
            out = norm(y[0, -1], extras["shared_head.norm.weight"])
            logits = out @ head.T
            rows.append(logits.double().numpy())
            drafts.append(int(logits.argmax()))
            toks.append(drafts[-1])
            hprev = torch.cat([hprev[:n], out[None]], 0)
    return drafts, rows


def check_mtp_drafter(workdir, name: str, prompt, own_head: bool = False, backend: str = "cpu",
                      overrides: dict | None = None):
    """The MTP drafter (strata_drafter_mtp_create) of a `backend` session on zoo model `name` with
    3 trunk layers and one MTP layer (mtp_checkpoint, converted to F32 GGUF) proposes the greedy
    drafts of mtp_reference, first after `prompt`, then after verify windows (one with a rejected
    draft) left its cache a prefix to keep. A draft may differ only where the reference's top two
    logits are within 1e-3."""
    import strata
    d = workdir / (f"{name}_mtp" + ("_gpu_shape" if overrides else ""))
    trunk, full, extras = mtp_checkpoint(name, d / "hf", own_head=own_head, overrides=overrides)
    path = d / "f32.gguf"
    if not path.exists():
        convert_hf().convert(d / "hf", path, "f32")
    with StrataModel(path, n_ctx=256, backend=backend) as sm:
        lib, ffi = sm.lib, sm.ffi
        pd = ffi.new("strata_drafter **")
        strata.check(lib.strata_drafter_mtp_create(sm.session, pd), "strata_drafter_mtp_create")
        dr = pd[0]
        try:
            def propose(hist, k):
                h = ffi.new("strata_token[]", hist)
                out = ffi.new("strata_token[]", k)
                n = ffi.new("int32_t *")
                strata.check(lib.strata_drafter_propose(dr, h, len(hist), k, out, n), "propose")
                return [out[i] for i in range(n[0])]

            def check(hist, k):
                got = propose(hist, k)
                ref, rows = mtp_reference(trunk, full, extras, hist, k)
                for i, (a, b) in enumerate(zip(got, ref)):
                    if a != b:  # only where the reference's top two are apart
                        assert top2_margin(rows[i]) < 1e-3, (backend, i, got, ref)
                        break
                return got

            lib.strata_session_reset(sm.session)
            hist = list(prompt)
            sm.decode(hist[:-1], False)
            check(hist, 4)
            ids, _ = sm.greedy(hist[:-1], 12)  # the trunk's own continuation of hist[:-1]
            lib.strata_session_reset(sm.session)
            sm.decode(hist[:-1], False)        # (the drafter keeps its rows: a common prefix)
            h2 = hist[:-1] + ids[:6]
            sm.decode(ids[:5], False)          # as if windows accepted them
            check(h2, 3)
            strata.check(lib.strata_session_truncate(sm.session, len(hist) + 1), "truncate")
            h3 = hist[:-1] + ids[:3]           # a rejected draft rolled the trunk back
            check(h3, 5)
        finally:
            lib.strata_drafter_free(dr)


def mtp_agreeing_file(workdir, name: str) -> Path:
    """An F32 GGUF of mtp_checkpoint(name)'s checkpoint whose MTP drafts agree with the trunk at
    times: every layer's output projections (attention / DeltaNet out, experts' and shared
    experts' down) scaled by 0.01, so the trunk and the MTP block are each near a bigram map
    through the shared head, and the MTP block's fc near [I, 0] (the embedding half). Their norms
    differ, so some drafts are rejected too."""
    import json
    import shutil

    import safetensors.torch
    import torch
    d = workdir / f"{name}_mtp"
    mtp_checkpoint(name, d / "hf")
    path = d / "agree.gguf"
    if path.exists():
        return path
    src, dst = d / "hf", d / "hf_agree"
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.is_file():
            shutil.copy(f, dst / f.name)
    sd = safetensors.torch.load_file(str(src / "model.safetensors"))
    small = ("o_proj.weight", "out_proj.weight", "down_proj.weight", "experts.down_proj")
    for k in list(sd):
        if k.endswith(small):
            sd[k] = 0.01 * sd[k]
    E = json.loads((src / "config.json").read_text())["hidden_size"]
    g = torch.Generator().manual_seed(7)
    fc = torch.cat([torch.eye(E), torch.zeros(E, E)], 1) + 0.01 * torch.randn(E, 2 * E, generator=g)
    sd["mtp.fc.weight"] = fc.contiguous()
    safetensors.torch.save_file(sd, str(dst / "model.safetensors"), metadata={"format": "pt"})
    convert_hf().convert(dst, path, "f32")
    return path


def mtp_spec_greedy(path, prompt, n_gen: int, use_mtp: bool, n_batch: int = 512, draft_max: int = 4):
    """Greedy decoding of n_gen tokens after prompt on the file at path (a CPU session): one token a
    step, or through verify windows (strata_session_speculate) of up to draft_max drafts of the
    MTP drafter, as `strata run --spec mtp` decodes. Returns (tokens, (windows, drafted,
    accepted))."""
    import strata
    with StrataModel(path, n_ctx=256, n_batch=n_batch) as sm:
        lib, ffi = sm.lib, sm.ffi
        sp = ffi.new("strata_sampler_params *", lib.strata_sampler_default_params())
        sp.temperature = 0.0
        psmp = ffi.new("strata_sampler **")
        strata.check(lib.strata_sampler_create(sp, sm.n_vocab, psmp), "strata_sampler_create")
        smp, dr = psmp[0], ffi.NULL
        try:
            if use_mtp:
                pd = ffi.new("strata_drafter **")
                strata.check(lib.strata_drafter_mtp_create(sm.session, pd), "strata_drafter_mtp_create")
                dr = pd[0]
            lg = sm.decode(prompt, False)[0]
            last = ffi.new("strata_token *")
            strata.check(lib.strata_sampler_sample(smp, ffi.cast("float *", ffi.from_buffer(lg)), last),
                         "sample")
            out, hist, last = [last[0]], list(prompt), last[0]
            draft, got = ffi.new("strata_token[]", 16), ffi.new("strata_token[]", 17)
            nd, ng = ffi.new("int32_t *"), ffi.new("int32_t *")
            while len(out) < n_gen:
                hist.append(last)
                if not use_mtp:
                    row = sm.decode([last], False)[0]
                    strata.check(lib.strata_sampler_sample(smp, ffi.cast("float *", ffi.from_buffer(row)),
                                                           got), "sample")
                    last = got[0]
                    out.append(last)
                    continue
                h = ffi.new("strata_token[]", hist)
                k = min(draft_max, n_gen - len(out) - 1)
                strata.check(lib.strata_drafter_propose(dr, h, len(hist), k, draft, nd), "propose")
                strata.check(lib.strata_session_speculate(sm.session, smp, last, draft, nd[0], got, ng),
                             "strata_session_speculate")
                toks = [got[i] for i in range(ng[0])]
                out += toks
                hist += toks[:-1]
                last = toks[-1]
            st = ffi.new("strata_spec_stats *")
            strata.check(lib.strata_session_get_spec_stats(sm.session, st), "spec stats")
            return out[:n_gen], (st.windows, st.drafted, st.accepted)
        finally:
            if dr != ffi.NULL:
                lib.strata_drafter_free(dr)
            lib.strata_sampler_free(smp)
