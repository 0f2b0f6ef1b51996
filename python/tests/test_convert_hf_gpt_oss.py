"""test_convert_hf_gpt_oss.py - tools/convert_hf.py on gpt-oss (GptOssForCausalLM -> gpt-oss),
checked against transformers alone (no Strata engine).

Owns: the independent expected mapping of a GptOss state dict to llama.cpp's gpt-oss tensors and
keys (used by test_convert_hf.py's per-architecture tests too); a float64 numpy forward pass that
reads only the converted GGUF and implements llama.cpp's gpt-oss graph (YaRN NEOX rope by ggml's
rope_yarn, attention sinks, sliding window on even layers, softmax over the top-k router logits,
clamped SwiGLU with biases), compared with HF's logits, with the variants that must NOT match
(truncated YaRN range, window off by one, no sinks); HF's rotary inv_freq and cos/sin against
llama.cpp's YaRN formula; the MoE block alone on random input; MXFP4 (OpenAI's checkpoint
blocks repacked against transformers' own dequantizer, and --expert-type mxfp4); the o200k
tokenizer.json pre-tokenizer named "gpt-4o"; harmony's end-of-generation tokens (through
Strata's vocabulary, a vocab-only load); the configs the converter must refuse."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

import test_hf_parity_lib as L  # noqa: E402

PROMPT = [211, 17, 17, 305, 42, 0, 99, 128, 64, 3, 250, 250, 12, 77, 190, 5, 31, 8, 160, 271,
          44, 45, 46, 300, 1, 2, 9, 88, 140, 319, 13]


def kv(reader: gguf.GGUFReader) -> dict:
    return {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}


# =================================================================================================
# Independent reference of the mapping (also used by test_convert_hf.py)
# =================================================================================================

_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
    "mlp.experts.down_proj_bias": "ffn_down_exps.bias",
    **{f"self_attn.{p}_proj.{w}": f"attn_{g}.{w}" for p, g in
       (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output")) for w in ("weight", "bias")},
}


def expected_tensors_gpt_oss(model) -> dict[str, np.ndarray]:
    """GGUF name -> numpy array (numpy order = reversed ggml ne) for a GptOss model. HF's experts
    compute x @ W (W (E, in, out)); gate_up's output column 2j is gate unit j, 2j+1 up unit j."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd.pop("model.embed_tokens.weight"),
           "output.weight": sd.pop("lm_head.weight"),
           "output_norm.weight": sd.pop("model.norm.weight")}
    for k, v in sd.items():
        parts = k.split(".")
        b, rest = f"blk.{int(parts[2])}.", ".".join(parts[3:])
        if rest == "mlp.experts.gate_up_proj":
            E, d, f2 = v.shape
            g, u = np.empty((E, f2 // 2, d), np.float32), np.empty((E, f2 // 2, d), np.float32)
            for e in range(E):
                for j in range(f2 // 2):
                    g[e, j], u[e, j] = v[e, :, 2 * j], v[e, :, 2 * j + 1]
            out[b + "ffn_gate_exps.weight"], out[b + "ffn_up_exps.weight"] = g, u
        elif rest == "mlp.experts.gate_up_proj_bias":
            out[b + "ffn_gate_exps.bias"] = np.stack([v[:, 2 * j] for j in range(v.shape[1] // 2)], 1)
            out[b + "ffn_up_exps.bias"] = np.stack([v[:, 2 * j + 1] for j in range(v.shape[1] // 2)], 1)
        elif rest == "mlp.experts.down_proj":
            out[b + "ffn_down_exps.weight"] = np.stack([v[e].T for e in range(v.shape[0])])
        else:
            out[b + _LAYER[rest]] = v
    return out


def expected_kv_gpt_oss(cfg) -> dict:
    """The gpt-oss keys beyond the common ones test_convert_hf.expected_kv checks."""
    a = "gpt-oss."
    return {a + "attention.sliding_window": cfg.sliding_window,
            a + "expert_feed_forward_length": cfg.intermediate_size,
            a + "rope.dimension_count": cfg.head_dim,
            a + "rope.scaling.yarn_beta_fast": 32.0, a + "rope.scaling.yarn_beta_slow": 1.0}


# =================================================================================================
# llama.cpp's gpt-oss graph in numpy (float64), reading only the GGUF
# =================================================================================================

def yarn_inv_freq(n_rot, base, factor, orig_ctx, beta_fast, beta_slow, truncate):
    """(inv_freq (n_rot/2,), mscale) of ggml's rope_yarn with ext_factor 1 (theta = p * inv_freq)
    and llama-context's attention factor: ggml_rope_yarn_corr_dims floors/ceils the correction
    range (truncate=True); truncate=False leaves it fractional, as OpenAI's reference and HF's
    truncate=false do."""
    def corr_dim(n):
        return n_rot * math.log(orig_ctx / (n * 2 * math.pi)) / (2 * math.log(base))
    lo, hi = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(0.0, lo), min(n_rot - 1.0, hi)
    freq_scale = 1.0 / factor
    i = np.arange(n_rot // 2)
    extrap = base ** (-2.0 * i / n_rot)
    ramp = 1 - np.clip((i - lo) / max(0.001, hi - lo), 0, 1)  # rope_yarn_ramp(lo, hi, 2i)
    inv = freq_scale * extrap * (1 - ramp) + extrap * ramp
    attn_factor = (0.1 * math.log(factor) + 1) / (1 + 0.1 * math.log(factor))  # llama-context
    return inv, attn_factor * (1 + 0.1 * math.log(1 / freq_scale))


def rope_neox(x, pos, inv, mscale):
    """x (n, heads, d): pairs (i, i + d/2) rotated by pos * inv[i], scaled by mscale."""
    th = pos[:, None, None] * inv[None, None, :]
    c, s = np.cos(th) * mscale, np.sin(th) * mscale
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def moe_block(t, p, h, k_used):
    """llama.cpp's build_moe_ffn for gpt-oss on rows h (n, n_embd): router logits + bias, top-k,
    softmax over the k logits, per expert SwiGLU-OAI(gate + b, up + b) then down + b, weighted."""
    logits = h @ t[p + "ffn_gate_inp.weight"].T + t[p + "ffn_gate_inp.bias"]
    out = np.zeros_like(h)
    for r in range(h.shape[0]):
        top = np.argsort(-logits[r], kind="stable")[:k_used]
        w = np.exp(logits[r, top] - logits[r, top].max())
        w /= w.sum()
        for e, wt in zip(top, w):
            g = t[p + "ffn_gate_exps.weight"][e] @ h[r] + t[p + "ffn_gate_exps.bias"][e]
            u = t[p + "ffn_up_exps.weight"][e] @ h[r] + t[p + "ffn_up_exps.bias"][e]
            g, u = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
            act = g / (1 + np.exp(-1.702 * g)) * (u + 1)
            out[r] += wt * (t[p + "ffn_down_exps.weight"][e] @ act + t[p + "ffn_down_exps.bias"][e])
    return out


def np_forward(path, tokens, truncate=False, window_delta=0, sinks=True):
    """Logits (n, n_vocab) of llama.cpp's gpt-oss graph for tokens; the keyword arguments make
    the deliberately wrong variants."""
    r = gguf.GGUFReader(path)
    meta = kv(r)
    t = {x.name: np.asarray(x.data, dtype=np.float64) for x in r.tensors}
    a = "gpt-oss."
    H, Hkv = meta[a + "attention.head_count"], meta[a + "attention.head_count_kv"]
    d, eps = meta[a + "attention.key_length"], meta[a + "attention.layer_norm_rms_epsilon"]
    n_swa = meta[a + "attention.sliding_window"] + window_delta
    inv, msc = yarn_inv_freq(meta[a + "rope.dimension_count"], meta[a + "rope.freq_base"],
                             meta[a + "rope.scaling.factor"],
                             meta[a + "rope.scaling.original_context_length"],
                             meta[a + "rope.scaling.yarn_beta_fast"],
                             meta[a + "rope.scaling.yarn_beta_slow"], truncate)
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    qi, kj = np.arange(n)[:, None], np.arange(n)[None, :]

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    x = t["token_embd.weight"][tokens]
    for il in range(meta[a + "block_count"]):
        p = f"blk.{il}."
        h = rms(x, t[p + "attn_norm.weight"])
        q, k, v = (h @ t[p + f"attn_{z}.weight"].T + t[p + f"attn_{z}.bias"] for z in "qkv")
        q = rope_neox(q.reshape(n, H, d), pos, inv, msc)
        k = rope_neox(k.reshape(n, Hkv, d), pos, inv, msc)
        v = v.reshape(n, Hkv, d)
        masked = kj > qi
        if il % 2 == 0:  # sliding_window_pattern 2: even layers sliding
            masked = masked | (qi - kj >= n_swa)
        att = np.empty((n, H, d))
        for hq in range(H):
            hk = hq // (H // Hkv)
            s = np.where(masked, -np.inf, q[:, hq] @ k[:, hk].T / math.sqrt(d))
            sink = t[p + "attn_sinks.weight"][hq] if sinks else -np.inf
            m = np.maximum(s.max(-1), sink)[:, None]
            e = np.exp(s - m)
            att[:, hq] = e / (e.sum(-1, keepdims=True) + np.exp(sink - m)) @ v[:, hk]
        x = x + att.reshape(n, H * d) @ t[p + "attn_output.weight"].T + t[p + "attn_output.bias"]
        x = x + moe_block(t, p, rms(x, t[p + "post_attention_norm.weight"]), meta[a + "expert_used_count"])
    return rms(x, t["output_norm.weight"]) @ t["output.weight"].T


@pytest.fixture(scope="module")
def zoo_oss(tmp_path_factory):
    """(HF model, f32 GGUF) of the 4-layer zoo gpt_oss."""
    d = tmp_path_factory.mktemp("gpt_oss")
    m = L.build_hf("gpt_oss", seed=11)
    L.save_hf(m, d / "hf")
    return m, L.convert_hf().convert(d / "hf", d / "f32.gguf", "f32")


def test_numpy_graph_matches_hf(zoo_oss):
    """The converted file run by llama.cpp's gpt-oss graph (untruncated YaRN) gives HF's logits on
    a 31-token prompt (window 4 cuts in); truncating the YaRN range as ggml does, a window one
    longer or shorter, or dropping the sinks does not."""
    model, path = zoo_oss
    ref = L.hf_logits(model, PROMPT)
    assert L.rel_err_rows(np_forward(path, PROMPT), ref).max() < 1e-5
    for wrong in (dict(truncate=True), dict(window_delta=1), dict(window_delta=-1),
                  dict(sinks=False)):
        assert L.rel_err_rows(np_forward(path, PROMPT, **wrong), ref).max() > 1e-3, wrong


def test_moe_block_matches_hf(zoo_oss):
    """Layer 1's MoE block (router with bias, de-interleaved gate/up, biases, clamped SwiGLU) on
    random rows large enough to hit the clamps, against HF's GptOssMLP."""
    model, path = zoo_oss
    t = {x.name: np.asarray(x.data, dtype=np.float64) for x in gguf.GGUFReader(path).tensors}
    h = np.random.default_rng(5).standard_normal((16, model.config.hidden_size)) * 2
    with torch.no_grad():
        ref, _ = model.model.layers[1].mlp(torch.tensor(h[None], dtype=torch.float32))
    got = moe_block(t, "blk.1.", h, model.config.num_experts_per_tok)
    np.testing.assert_allclose(got, ref[0].double().numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cfg", [
    dict(head_dim=16, theta=150000.0, factor=4.0, orig=128),      # the zoo's
    dict(head_dim=64, theta=150000.0, factor=32.0, orig=4096),    # gpt-oss-20b / 120b
])
def test_rotary_matches_llama_yarn(cfg):
    """HF's GptOss rotary (truncate false) = ggml's rope_yarn with a fractional correction range:
    inv_freq, the attention factor, and cos/sin at positions up to 64. ggml's own (floored/ceiled)
    range gives other frequencies."""
    import transformers
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding
    c = transformers.GptOssConfig(head_dim=cfg["head_dim"], max_position_embeddings=131072,
                                  rope_parameters=dict(rope_type="yarn", factor=cfg["factor"],
                                                       beta_fast=32.0, beta_slow=1.0,
                                                       truncate=False, rope_theta=cfg["theta"],
                                                       original_max_position_embeddings=cfg["orig"]))
    rot = GptOssRotaryEmbedding(c)
    args = (cfg["head_dim"], cfg["theta"], cfg["factor"], cfg["orig"], 32.0, 1.0)
    inv, msc = yarn_inv_freq(*args, truncate=False)
    np.testing.assert_allclose(rot.inv_freq.double().numpy(), inv, rtol=1e-6)
    assert rot.attention_scaling == pytest.approx(msc, rel=1e-7)
    pos = torch.arange(65)[None]
    with torch.no_grad():
        cos, sin = rot(torch.zeros(1, dtype=torch.float32), pos)
    th = np.arange(65)[:, None] * inv[None]
    np.testing.assert_allclose(cos[0].double().numpy(), np.cos(th) * msc, atol=2e-5)
    np.testing.assert_allclose(sin[0].double().numpy(), np.sin(th) * msc, atol=2e-5)
    inv_t, _ = yarn_inv_freq(*args, truncate=True)
    assert np.abs(inv_t / inv - 1).max() > 1e-2


# =================================================================================================
# MXFP4
# =================================================================================================

def openai_mxfp4(w: np.ndarray):
    """w (..., rows, cols) -> OpenAI's (blocks (..., rows, cols/32, 16), scales (..., rows,
    cols/32)): gguf's MXFP4 quantizer, its nibbles moved to OpenAI's order (element 2i low,
    2i+1 high nibble of byte i)."""
    raw = gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), Q.MXFP4)
    raw = raw.reshape(*w.shape[:-1], w.shape[-1] // 32, 17)
    e, qs = raw[..., 0], raw[..., 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # ggml: j low, j + 16 high
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8), e.copy()


def test_mxfp4_repack_matches_transformers():
    """Random OpenAI MXFP4 bytes: GGML's dequantization of the repacked blocks equals
    transformers' convert_moe_packed_tensors (which returns them transposed), bit for bit."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (3, 6, 4, 16), dtype=np.uint8)
    scales = rng.integers(118, 134, (3, 6, 4), dtype=np.uint8)
    ref = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales),
                                     dtype=torch.float32).numpy()  # (E, cols, rows)
    pk = L.convert_hf().mxfp4_repack(blocks, scales)
    assert pk.qtype == Q.MXFP4 and pk.shape == (3, 6, 128) and pk.raw.shape == (3, 6, 4 * 17)
    deq = gguf.quants.dequantize(pk.raw, Q.MXFP4)
    np.testing.assert_array_equal(deq, ref.transpose(0, 2, 1))


def test_mxfp4_checkpoint(zoo_oss, tmp_path):
    """An OpenAI-style checkpoint (experts as *_blocks/*_scales, (E, out, in/32, 16)) converts to
    MXFP4 expert tensors (file type MXFP4_MOE) that dequantize to what transformers dequantizes
    from the same bytes, split into gate/up as the float layout is."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    model, path = zoo_oss
    src = path.parent / "hf"
    sd = load_file(str(src / "model.safetensors"))
    deq = {}
    for k in list(sd):
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            w = sd.pop(k).numpy().transpose(0, 2, 1)  # (E, out, in)
            blocks, scales = openai_mxfp4(w)
            sd[k + "_blocks"], sd[k + "_scales"] = torch.from_numpy(blocks), torch.from_numpy(scales)
            deq[k] = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales),
                                                dtype=torch.float32)  # (E, in, out), HF's layout
    d = tmp_path / "hf"
    d.mkdir()
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(src / "config.json", d / "config.json")
    out = L.convert_hf().convert(d, tmp_path / "mx.gguf", "f32")
    r = gguf.GGUFReader(out)
    assert kv(r)["general.file_type"] == gguf.LlamaFileType.MOSTLY_MXFP4_MOE
    with torch.no_grad():
        for k, v in deq.items():
            dict(model.named_parameters())[k].copy_(v)
    exp = expected_tensors_gpt_oss(model)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(exp)
    for n, t in got.items():
        if "_exps.weight" in n:
            assert t.tensor_type == Q.MXFP4, n
            a = gguf.quants.dequantize(np.asarray(t.data), Q.MXFP4).reshape(exp[n].shape)
        else:
            assert t.tensor_type == Q.F32, n
            a = np.asarray(t.data)
        np.testing.assert_array_equal(a, exp[n], err_msg=n)


def test_expert_type_mxfp4(zoo_oss, tmp_path):
    """--expert-type mxfp4 with --outtype q8_0: experts MXFP4 (gguf's quantizer, byte for byte),
    attention matrices Q8_0, sinks / norms / router / every bias F32."""
    model, path = zoo_oss
    out = L.convert_hf().convert(path.parent / "hf", tmp_path / "x.gguf", "q8_0",
                                 expert_type="mxfp4")
    r = gguf.GGUFReader(out)
    assert kv(r)["general.file_type"] == gguf.LlamaFileType.MOSTLY_MXFP4_MOE
    exp = expected_tensors_gpt_oss(model)
    for t in r.tensors:
        e = exp[t.name]
        if t.name.endswith("_exps.weight"):
            assert t.tensor_type == Q.MXFP4, t.name
            np.testing.assert_array_equal(np.asarray(t.data).reshape(-1),
                                          gguf.quants.quantize(e, Q.MXFP4).reshape(-1), t.name)
        elif e.ndim == 1 or t.name.endswith((".bias", "ffn_gate_inp.weight")):
            assert t.tensor_type == Q.F32, t.name
        else:
            assert t.tensor_type == Q.Q8_0, t.name


# =================================================================================================
# Tokenizer and refusals
# =================================================================================================

def test_o200k_pre_tokenizer(zoo_oss, tmp_path):
    """A tokenizer.json pre-tokenizing with o200k's Split regex then a regex-less ByteLevel (as
    gpt-oss's o200k_harmony does) is written with tokenizer.ggml.pre = "gpt-4o"."""
    from transformers import PreTrainedTokenizerFast
    conv = L.convert_hf()
    d = tmp_path / "hf"
    shutil.copytree(zoo_oss[1].parent / "hf", d)
    tk = L.train_bpe(["camelCase HTTPServer don'T 12345 a/b\n\n"] * 8, ["<|endoftext|>", "<|return|>"],
                     conv.O200K_SPLIT)
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|return|>")
    fast.save_pretrained(str(d))
    assert [p for p, _ in tk.pre_tokenizer.pre_tokenize_str("camelCase 12345")] == \
        ["camel", "Case", "Ġ", "123", "45"]
    got = kv(gguf.GGUFReader(conv.convert(d, tmp_path / "t.gguf", "f32")))
    assert got["tokenizer.ggml.model"] == "gpt2"
    assert got["tokenizer.ggml.pre"] == "gpt-4o"


def test_harmony_end_of_generation(zoo_oss, tmp_path):
    """gpt-oss's harmony specials through the converter and Strata's vocabulary (what the CLI,
    the server and Python stop on): <|return|>, <|call|> and <|endoftext|> end generation, <|end|>
    (the end of a message inside an answer) and <|start|>/<|channel|>/<|message|> do not, as in
    llama.cpp's special_eog_ids for o200k_harmony."""
    from transformers import PreTrainedTokenizerFast
    strata = pytest.importorskip("strata")
    conv = L.convert_hf()
    d = tmp_path / "hf"
    shutil.copytree(zoo_oss[1].parent / "hf", d)
    specials = ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                "<|return|>", "<|call|>"]
    tk = L.train_bpe(["the answer is 42\n"] * 8, specials, conv.O200K_SPLIT)
    PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|return|>").save_pretrained(str(d))
    path = conv.convert(d, tmp_path / "h.gguf", "f32")
    with strata.Model(path, vocab_only=True) as m:
        ids = {t: tk.token_to_id(t) for t in specials}
        eog = {t for t, i in ids.items() if m.is_eog(i)}
        assert eog == {"<|endoftext|>", "<|return|>", "<|call|>"}, eog
        assert m.tokenize("<|start|>", add_special=False, parse_special=True) == [ids["<|start|>"]]


def _edited(zoo_oss, tmp_path, **edit):
    d = tmp_path / "hf"
    shutil.copytree(zoo_oss[1].parent / "hf", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(edit)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


_YARN = dict(rope_type="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0, rope_theta=150000.0,
             original_max_position_embeddings=128)


@pytest.mark.parametrize("edit,msg", [
    (dict(swiglu_limit=5.0), "swiglu"),
    (dict(swiglu_alpha=1.5), "swiglu"),
    (dict(attention_bias=False), "attention_bias"),
    (dict(layer_types=["full_attention"] * 4), "layer_types"),
    (dict(rope_parameters=_YARN), "truncate"),
    (dict(rope_parameters=dict(_YARN, truncate=True)), "truncate"),
    (dict(rope_parameters=dict(_YARN, truncate=False, attention_factor=1.2)), "attention factor"),
    (dict(rope_parameters=dict(rope_type="default", rope_theta=150000.0)), "YaRN"),
])
def test_refused(zoo_oss, tmp_path, edit, msg):
    d = _edited(zoo_oss, tmp_path, **edit)
    out = tmp_path / "x.gguf"
    with pytest.raises(L.convert_hf().ConvertError, match=msg):
        L.convert_hf().convert(d, out, "f32")
    assert not out.exists()
