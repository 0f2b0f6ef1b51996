"""test_convert_hf.py - tools/convert_hf.py checked against the HF checkpoint alone (no Strata
engine): every tensor of every architecture read back with gguf.GGUFReader and compared with a
mapping of the HF state dict written out independently here (names, stacking of experts, granite
splits, the q/k permutation), the permutation checked numerically against both RoPE styles, the
metadata keys llama.cpp writes, the per-tensor type rules for f16/bf16/q8_0 (Q8_0 bytes equal to
gguf.quants.quantize), the byte-level BPE tokenizer metadata, and the command line; GLM-4.5's tokenizer (glm4 pre and
special ids) also through Strata's vocabulary (a vocab-only load) against the HF tokenizer. deepseek2
(DeepSeek-V2/V3): the MLA kv_b_proj split rebuilt into the HF weight, HF's rope on the unpermuted
weights against normal RoPE, the routing keys, multi-token-prediction layers dropped, and the
configs the converter must refuse. glm4moe (GLM-4.5/Air): names and shapes of llama.cpp's loader,
HF's partial rotate-half RoPE against llama.cpp's NEOX RoPE on the converted q/k, the routing keys
and refusals, and an MTP layer kept (blk.N + blk.N.nextn.*) or dropped with --no-mtp. gpt-oss's
own tests are in test_convert_hf_gpt_oss.py (its expected tensors and keys come from there)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

import test_hf_parity_lib as L  # noqa: E402
from test_convert_hf_gpt_oss import expected_kv_gpt_oss, expected_tensors_gpt_oss  # noqa: E402
from test_convert_hf_qwen3next import expected_kv_qwen3next, expected_tensors_qwen3next  # noqa: E402

NAMES = list(L.zoo())
GLM = ["glm4moe", "glm4moe_noqknorm"]
PERMUTED = {"mixtral", "granitemoe", "granitemoe_shared", "llama", "llama_linear_rope"}


# =================================================================================================
# Independent reference: HF state dict -> expected GGUF tensors
# =================================================================================================

def interleave_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Per head of d rows: new row 2i = old row i, new row 2i+1 = old row d/2 + i."""
    rows = w.shape[0]
    d = rows // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for i in range(d // 2):
            out[h * d + 2 * i] = w[h * d + i]
            out[h * d + 2 * i + 1] = w[h * d + d // 2 + i]
    return out


LAYER_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.router.layer.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.router.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "block_sparse_moe.output_linear.weight": "ffn_down_exps.weight",
    "shared_mlp.output_linear.weight": "ffn_down_shexp.weight",
    # deepseek2 (MLA; kv_b_proj is split in expected_tensors)
    "self_attn.q_a_proj.weight": "attn_q_a.weight",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
}
EXPERT_W = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps",
            "w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}


def expected_tensors(name: str, model) -> dict[str, np.ndarray]:
    if name == "gpt_oss":
        return expected_tensors_gpt_oss(model)
    if name == "qwen3next":
        return expected_tensors_qwen3next(model)
    cfg = model.config
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    out: dict[str, np.ndarray] = {}
    experts: dict[tuple[int, str], dict[int, np.ndarray]] = {}
    for k, v in sd.items():
        if k == "model.embed_tokens.weight":
            out["token_embd.weight"] = v
        elif k == "lm_head.weight":
            out["output.weight"] = v
        elif k == "model.norm.weight":
            out["output_norm.weight"] = v
        else:
            parts = k.split(".")
            assert parts[:2] == ["model", "layers"], k
            bid, rest = int(parts[2]), ".".join(parts[3:])
            b = f"blk.{bid}."
            if rest.endswith("experts.gate_up_proj"):  # transformers-5 in-memory layout
                ff = v.shape[1] // 2
                out[b + "ffn_gate_exps.weight"] = v[:, :ff]
                out[b + "ffn_up_exps.weight"] = v[:, ff:]
            elif rest.endswith("experts.down_proj"):
                out[b + "ffn_down_exps.weight"] = v
            elif ".experts." in rest:  # one matrix per expert (older transformers)
                _, _, xid, w, _ = rest.split(".")
                experts.setdefault((bid, w), {})[int(xid)] = v
            elif rest == "block_sparse_moe.input_linear.weight":
                ff = cfg.intermediate_size
                out[b + "ffn_gate_exps.weight"] = v[:, :ff]
                out[b + "ffn_up_exps.weight"] = v[:, ff:]
            elif rest == "shared_mlp.input_linear.weight":
                ff = cfg.shared_intermediate_size
                out[b + "ffn_gate_shexp.weight"] = v[:ff]
                out[b + "ffn_up_shexp.weight"] = v[ff:]
            elif rest == "self_attn.kv_b_proj.weight":
                out[b + "attn_k_b.weight"], out[b + "attn_v_b.weight"] = split_kv_b(v, cfg)
            else:
                if name in PERMUTED and rest.startswith("self_attn.q_proj"):
                    v = interleave_rows(v, cfg.num_attention_heads)
                if name in PERMUTED and rest.startswith("self_attn.k_proj"):
                    v = interleave_rows(v, cfg.num_key_value_heads)
                if name in GLM and rest == "post_attention_layernorm.weight":
                    out[b + "post_attention_norm.weight"] = v  # llama.cpp's ATTN_POST_NORM
                    continue
                out[b + LAYER_MAP[rest]] = v
    for (bid, w), d in experts.items():
        out[f"blk.{bid}.{EXPERT_W[w]}.weight"] = np.stack([d[e] for e in sorted(d)])
    return out


def split_kv_b(w: np.ndarray, cfg):
    """kv_b_proj rows, head by head: qk_nope K rows then v_head V rows. k_b[h] = K rows of head h
    transposed (kv_lora, qk_nope); v_b[h] = V rows of head h (v_head, kv_lora)."""
    nope, vd, H = cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.num_attention_heads
    k_b = np.empty((H, w.shape[1], nope), np.float32)
    v_b = np.empty((H, vd, w.shape[1]), np.float32)
    for h in range(H):
        base = h * (nope + vd)
        for i in range(nope):
            k_b[h, :, i] = w[base + i]
        for i in range(vd):
            v_b[h, i, :] = w[base + nope + i]
    return k_b, v_b


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """name -> (hf model, f32 GGUF path) for every architecture (2 layers)."""
    conv = L.convert_hf()
    out = {}
    for name in NAMES:
        d = tmp_path_factory.mktemp(name)
        m = L.build_hf(name, seed=1, n_layers=2)
        L.save_hf(m, d / "hf")
        out[name] = (m, conv.convert(d / "hf", d / "f32.gguf", "f32"))
    return out


def kv(reader: gguf.GGUFReader) -> dict:
    return {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}


# =================================================================================================
# Tensors
# =================================================================================================

@pytest.mark.parametrize("name", NAMES)
def test_tensors_f32(converted, name):
    model, path = converted[name]
    exp = expected_tensors(name, model)
    r = gguf.GGUFReader(path)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(exp), (sorted(set(got) - set(exp)), sorted(set(exp) - set(got)))
    for n, t in got.items():
        assert t.tensor_type == Q.F32, n
        a = np.asarray(t.data)
        assert a.shape == exp[n].shape, (n, a.shape, exp[n].shape)
        np.testing.assert_array_equal(a, exp[n], err_msg=n)
    if model.config.tie_word_embeddings:
        assert "output.weight" not in got


def rope_neox(x, pos, theta):
    """HF rotate_half on one head vector x (d,)."""
    d = x.shape[0]
    inv = theta ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    x1, x2 = x[: d // 2], x[d // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s])


def rope_norm(x, pos, theta):
    """llama.cpp normal RoPE: rotate adjacent pairs (x[2i], x[2i+1]) by pos * theta^(-2i/d)."""
    d = x.shape[0]
    inv = theta ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(pos * inv), np.sin(pos * inv)
    e, o = x[0::2], x[1::2]
    y = np.empty_like(x)
    y[0::2] = e * c - o * s
    y[1::2] = e * s + o * c
    return y


@pytest.mark.parametrize("name", ["mixtral", "llama"])
def test_permutation_matches_rope_styles(converted, name):
    """q.k under HF's NEOX rotation of the HF weights equals q.k under normal RoPE of the converted
    weights, for every head pair and several positions: the permutation is what llama.cpp's
    normal RoPE needs."""
    model, path = converted[name]
    cfg = model.config
    r = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(path).tensors}
    sd = model.state_dict()
    wq_hf = sd["model.layers.0.self_attn.q_proj.weight"].numpy().astype(np.float64)
    wk_hf = sd["model.layers.0.self_attn.k_proj.weight"].numpy().astype(np.float64)
    wq, wk = r["blk.0.attn_q.weight"].astype(np.float64), r["blk.0.attn_k.weight"].astype(np.float64)
    theta = cfg.rope_parameters["rope_theta"]
    d = cfg.head_dim
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(cfg.hidden_size), rng.standard_normal(cfg.hidden_size)
    for h in range(cfg.num_attention_heads):
        hk = h // (cfg.num_attention_heads // cfg.num_key_value_heads)
        for pq, pk in ((0, 0), (5, 2), (17, 11)):
            qh = rope_neox((wq_hf @ x)[h * d:(h + 1) * d], pq, theta)
            kh = rope_neox((wk_hf @ y)[hk * d:(hk + 1) * d], pk, theta)
            qg = rope_norm((wq @ x)[h * d:(h + 1) * d], pq, theta)
            kg = rope_norm((wk @ y)[hk * d:(hk + 1) * d], pk, theta)
            assert abs(qh @ kh - qg @ kg) < 1e-9 * (1 + abs(qh @ kh))


# =================================================================================================
# Metadata
# =================================================================================================

def expected_kv(name: str, cfg) -> dict:
    arch = {"olmoe": "olmoe", "qwen2moe": "qwen2moe", "qwen3moe": "qwen3moe", "mixtral": "llama",
            "granitemoe": "granitemoe", "granitemoe_shared": "granitemoe", "llama": "llama",
            "llama_linear_rope": "llama", "qwen2": "qwen2", "qwen2_yarn": "qwen2",
            "qwen3": "qwen3", "deepseek2_lite": "deepseek2", "deepseek2_v3": "deepseek2",
            "glm4moe": "glm4moe", "glm4moe_noqknorm": "glm4moe",
            "gpt_oss": "gpt-oss", "qwen3next": "qwen3next"}[name]
    a = arch + "."
    rp = cfg.rope_parameters
    e = {
        "general.architecture": arch, "general.type": "model", "general.file_type": 0,
        "general.quantization_version": 2, "tokenizer.ggml.model": "none",
        a + "block_count": cfg.num_hidden_layers,
        a + "context_length": cfg.max_position_embeddings,
        a + "embedding_length": cfg.hidden_size,
        a + "feed_forward_length": cfg.intermediate_size,
        a + "attention.head_count": cfg.num_attention_heads,
        a + "attention.head_count_kv": cfg.num_key_value_heads,
        a + "rope.freq_base": rp["rope_theta"],
        a + "attention.layer_norm_rms_epsilon": cfg.rms_norm_eps,
    }
    if arch != "granitemoe":
        e[a + "attention.key_length"] = cfg.head_dim
        e[a + "attention.value_length"] = cfg.head_dim
    n_exp = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    if n_exp:
        e[a + "expert_count"] = n_exp
        e[a + "expert_used_count"] = cfg.num_experts_per_tok
    if arch in ("llama", "granitemoe"):
        e[a + "vocab_size"] = cfg.vocab_size
        hd = None if arch == "granitemoe" else getattr(cfg, "head_dim", None)
        e[a + "rope.dimension_count"] = hd or cfg.hidden_size // cfg.num_attention_heads
    if arch in ("qwen2moe", "qwen3moe"):
        e[a + "expert_feed_forward_length"] = cfg.moe_intermediate_size
    if arch == "qwen2moe":
        e[a + "expert_shared_feed_forward_length"] = cfg.shared_expert_intermediate_size
    if arch == "granitemoe":
        e[a + "attention.scale"] = cfg.attention_multiplier
        e[a + "embedding_scale"] = cfg.embedding_multiplier
        e[a + "residual_scale"] = cfg.residual_multiplier
        e[a + "logit_scale"] = cfg.logits_scaling
        if getattr(cfg, "shared_intermediate_size", 0):
            e[a + "expert_shared_feed_forward_length"] = cfg.shared_intermediate_size
    if rp.get("rope_type") == "linear":
        e[a + "rope.scaling.type"] = "linear"
        e[a + "rope.scaling.factor"] = rp["factor"]
    if rp.get("rope_type") == "yarn":
        e[a + "rope.scaling.type"] = "yarn"
        e[a + "rope.scaling.factor"] = rp["factor"]
        e[a + "rope.scaling.original_context_length"] = rp["original_max_position_embeddings"]
    if arch == "deepseek2":
        e.update(expected_kv_deepseek2(name, cfg))
    if arch == "glm4moe":
        e.update(expected_kv_glm4moe(cfg))
    if arch == "gpt-oss":
        e.update(expected_kv_gpt_oss(cfg))
    if arch == "qwen3next":
        e.update(expected_kv_qwen3next(cfg))
    return e


def expected_kv_glm4moe(cfg) -> dict:
    """llama.cpp's Glm4MoeModel keys (no expert groups: the zoo's n_group is 1)."""
    a = "glm4moe."
    return {
        a + "rope.dimension_count": int(cfg.head_dim
                                        * cfg.rope_parameters["partial_rotary_factor"]),
        a + "expert_count": cfg.n_routed_experts,
        a + "expert_used_count": cfg.num_experts_per_tok,
        a + "expert_shared_count": cfg.n_shared_experts,
        a + "expert_feed_forward_length": cfg.moe_intermediate_size,
        a + "leading_dense_block_count": cfg.first_k_dense_replace,
        a + "expert_weights_scale": cfg.routed_scaling_factor,
        a + "expert_weights_norm": bool(cfg.norm_topk_prob),
        a + "expert_gating_func": 2,  # sigmoid
        a + "vocab_size": cfg.vocab_size,
    }


# (gating func, (expert groups, groups used) or None) of the deepseek2 zoo entries
DS2_ROUTING = {"deepseek2_lite": (1, None), "deepseek2_v3": (2, (4, 2))}


def expected_kv_deepseek2(name: str, cfg) -> dict:
    a = "deepseek2."
    kvl, rope = cfg.kv_lora_rank, cfg.qk_rope_head_dim
    e = {
        a + "attention.head_count_kv": 1,
        a + "attention.key_length": kvl + rope,
        a + "attention.value_length": kvl,
        a + "attention.key_length_mla": cfg.qk_nope_head_dim + rope,
        a + "attention.value_length_mla": cfg.v_head_dim,
        a + "attention.kv_lora_rank": kvl,
        a + "leading_dense_block_count": cfg.first_k_dense_replace,
        a + "vocab_size": cfg.vocab_size,
        a + "expert_feed_forward_length": cfg.moe_intermediate_size,
        a + "expert_count": cfg.n_routed_experts,
        a + "expert_shared_count": cfg.n_shared_experts,
        a + "expert_weights_scale": cfg.routed_scaling_factor,
        a + "expert_weights_norm": bool(cfg.norm_topk_prob),
        a + "expert_gating_func": DS2_ROUTING[name][0],
        a + "rope.dimension_count": rope,
    }
    if cfg.q_lora_rank is not None:
        e[a + "attention.q_lora_rank"] = cfg.q_lora_rank
    if DS2_ROUTING[name][1]:
        e[a + "expert_group_count"], e[a + "expert_group_used_count"] = DS2_ROUTING[name][1]
    if "mscale_all_dim" in cfg.rope_parameters:
        e[a + "rope.scaling.yarn_log_multiplier"] = 0.1 * cfg.rope_parameters["mscale_all_dim"]
    return e


@pytest.mark.parametrize("name", NAMES)
def test_metadata(converted, name):
    model, path = converted[name]
    got = kv(gguf.GGUFReader(path))
    exp = expected_kv(name, model.config)
    for k, v in exp.items():
        assert k in got, f"{k} missing"
        if isinstance(v, float):
            assert got[k] == pytest.approx(v, rel=1e-6), k
        else:
            assert got[k] == v, k
    arch = exp["general.architecture"]
    # keys llama.cpp's converter does not write for these architectures
    if arch not in ("deepseek2", "glm4moe"):
        assert arch + ".expert_weights_norm" not in got
    extra = {k for k in got if k.startswith(arch + ".")} - set(exp)
    assert not extra, f"unexpected keys {sorted(extra)}"
    assert isinstance(got.get("general.name"), str) and got["general.name"]


# =================================================================================================
# Output types
# =================================================================================================

def test_types_q8_0_f16_bf16(tmp_path):
    """llama.cpp's rules: 1-D, *_norm, routers (incl. the shared-expert gate) and biases F32;
    matrices the target type; Q8_0 falls back to F16 for rows not a multiple of 32."""
    conv = L.convert_hf()
    m = L.build_hf("qwen2moe", seed=2, n_layers=1)
    L.save_hf(m, tmp_path / "hf")
    exp = expected_tensors("qwen2moe", m)
    for outtype, qt, ft in (("q8_0", Q.Q8_0, 7), ("f16", Q.F16, 1), ("bf16", Q.BF16, 32)):
        p = conv.convert(tmp_path / "hf", tmp_path / f"{outtype}.gguf", outtype)
        r = gguf.GGUFReader(p)
        assert kv(r)["general.file_type"] == ft
        for t in r.tensors:
            e = exp[t.name]
            f32 = (e.ndim == 1 or t.name.endswith(("_norm.weight", "ffn_gate_inp.weight",
                                                    "ffn_gate_inp_shexp.weight", ".bias")))
            want = Q.F32 if f32 else qt
            if want == Q.Q8_0 and e.shape[-1] % 32:
                want = Q.F16
            assert t.tensor_type == want, (outtype, t.name, t.tensor_type.name)
            if want == Q.Q8_0:
                np.testing.assert_array_equal(np.asarray(t.data).reshape(-1),
                                              gguf.quants.quantize(e, Q.Q8_0).reshape(-1), t.name)
            elif want == Q.F16:
                np.testing.assert_array_equal(np.asarray(t.data), e.astype(np.float16), t.name)
            elif want == Q.BF16:
                deq = gguf.quants.dequantize(np.asarray(t.data), Q.BF16).reshape(e.shape)
                np.testing.assert_allclose(deq, e, rtol=2 ** -8, atol=0)
    # the shared expert's 64-wide rows quantize; a 48-wide one would not (fallback tested above
    # only when present): make sure at least one Q8_0 tensor exists
    r = gguf.GGUFReader(tmp_path / "q8_0.gguf")
    assert any(t.tensor_type == Q.Q8_0 for t in r.tensors)


def test_fused_experts_layout(tmp_path):
    """The transformers-5 fused expert layout (experts.gate_up_proj (E, 2ff, d), experts.down_proj
    (E, d, ff)) converts to the same tensors as the per-expert layout."""
    from safetensors.torch import load_file, save_file
    conv = L.convert_hf()
    m = L.build_hf("qwen3moe", seed=4, n_layers=1)
    L.save_hf(m, tmp_path / "a")
    sd = load_file(str(tmp_path / "a" / "model.safetensors"))
    E = m.config.num_experts
    fused = {k: v for k, v in sd.items() if ".experts." not in k}
    p = "model.layers.0.mlp.experts."
    fused[p + "gate_up_proj"] = torch.stack([torch.cat([sd[f"{p}{e}.gate_proj.weight"],
                                                        sd[f"{p}{e}.up_proj.weight"]]) for e in range(E)])
    fused[p + "down_proj"] = torch.stack([sd[f"{p}{e}.down_proj.weight"] for e in range(E)])
    (tmp_path / "b").mkdir()
    save_file(fused, str(tmp_path / "b" / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "b" / "config.json").write_text((tmp_path / "a" / "config.json").read_text())
    ra, rb = ({t.name: np.asarray(t.data)
               for t in gguf.GGUFReader(conv.convert(tmp_path / x, tmp_path / f"{x}.gguf", "f32")).tensors}
              for x in ("a", "b"))
    assert set(ra) == set(rb)
    for n in ra:
        np.testing.assert_array_equal(ra[n], rb[n], err_msg=n)


# =================================================================================================
# deepseek2
# =================================================================================================

DS2 = ["deepseek2_lite", "deepseek2_v3"]


@pytest.mark.parametrize("name", DS2)
def test_deepseek2_tensors(converted, name):
    """The MLA split rebuilt by the inverse operation gives kv_b_proj back exactly; GGUF shapes
    (ne order) are llama.cpp's; routers, selection bias, experts (stacked), shared experts and the
    dense leading layer carry the HF values."""
    model, path = converted[name]
    cfg = model.config
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    H, kvl, nope, vd = (cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_nope_head_dim,
                        cfg.v_head_dim)
    ts = {t.name: t for t in gguf.GGUFReader(path).tensors}
    a = {n: np.asarray(t.data) for n, t in ts.items()}
    for il in range(cfg.num_hidden_layers):
        b, h = f"blk.{il}.", f"model.layers.{il}."
        assert [int(x) for x in ts[b + "attn_k_b.weight"].shape] == [nope, kvl, H]
        assert [int(x) for x in ts[b + "attn_v_b.weight"].shape] == [kvl, vd, H]
        k_b, v_b = a[b + "attn_k_b.weight"], a[b + "attn_v_b.weight"]
        kv_b = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(H * (nope + vd), kvl)
        np.testing.assert_array_equal(kv_b, sd[h + "self_attn.kv_b_proj.weight"])
        assert "attn_kv_b.weight" not in {n[len(b):] for n in ts if n.startswith(b)}
        q = ["attn_q.weight"] if cfg.q_lora_rank is None else ["attn_q_a.weight", "attn_q_b.weight",
                                                                "attn_q_a_norm.weight"]
        for n in q + ["attn_kv_a_mqa.weight", "attn_kv_a_norm.weight", "attn_output.weight"]:
            assert b + n in ts, b + n
        assert (b + "attn_q.weight" in ts) == (cfg.q_lora_rank is None)
        if il < cfg.first_k_dense_replace:
            np.testing.assert_array_equal(a[b + "ffn_gate.weight"], sd[h + "mlp.gate_proj.weight"])
            assert b + "ffn_gate_inp.weight" not in ts and b + "ffn_up_exps.weight" not in ts
            continue
        assert b + "ffn_gate.weight" not in ts
        E, ff = cfg.n_routed_experts, cfg.moe_intermediate_size
        assert [int(x) for x in ts[b + "ffn_gate_exps.weight"].shape] == [cfg.hidden_size, ff, E]
        assert [int(x) for x in ts[b + "ffn_down_exps.weight"].shape] == [ff, cfg.hidden_size, E]
        gu = sd[h + "mlp.experts.gate_up_proj"]
        for e in range(E):
            np.testing.assert_array_equal(a[b + "ffn_gate_exps.weight"][e], gu[e, :ff])
            np.testing.assert_array_equal(a[b + "ffn_up_exps.weight"][e], gu[e, ff:])
            np.testing.assert_array_equal(a[b + "ffn_down_exps.weight"][e],
                                          sd[h + "mlp.experts.down_proj"][e])
        np.testing.assert_array_equal(a[b + "ffn_gate_inp.weight"], sd[h + "mlp.gate.weight"])
        sh = cfg.moe_intermediate_size * cfg.n_shared_experts
        assert [int(x) for x in ts[b + "ffn_up_shexp.weight"].shape] == [cfg.hidden_size, sh]
        np.testing.assert_array_equal(a[b + "ffn_down_shexp.weight"],
                                      sd[h + "mlp.shared_experts.down_proj.weight"])
        bias = h + "mlp.gate.e_score_correction_bias"
        assert (b + "exp_probs_b.bias" in ts) == (bias in sd)
        if bias in sd:
            assert ts[b + "exp_probs_b.bias"].tensor_type == Q.F32
            assert np.abs(sd[bias]).min() > 0  # the zoo's random bias survived save/convert
            np.testing.assert_array_equal(a[b + "exp_probs_b.bias"], sd[bias])


@pytest.mark.parametrize("name", DS2)
def test_deepseek2_rope_unpermuted(converted, name):
    """q_pe.k_pe under transformers' own DeepSeek rotation (V2: complex pairs; V3: interleaved
    cos/sin) of the HF weights equals it under normal RoPE (adjacent pairs, the same inv_freq and
    attention factor) of the converted weights, every head and several positions."""
    model, path = converted[name]
    cfg = model.config
    a = {t.name: np.asarray(t.data).astype(np.float64) for t in gguf.GGUFReader(path).tensors}
    sd = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    nope, rope, kvl = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.kv_lora_rank
    qn = "q_proj" if cfg.q_lora_rank is None else "q_b_proj"
    wq_hf = sd[f"model.layers.0.self_attn.{qn}.weight"]
    wk_hf = sd["model.layers.0.self_attn.kv_a_proj_with_mqa.weight"][kvl:]
    wq = a["blk.0." + ("attn_q.weight" if cfg.q_lora_rank is None else "attn_q_b.weight")]
    wk = a["blk.0.attn_kv_a_mqa.weight"][kvl:]
    remb = model.model.rotary_emb
    inv, scale = remb.inv_freq.double().numpy(), float(remb.attention_scaling)
    mod = sys.modules[type(model).__module__]
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(wq_hf.shape[1]), rng.standard_normal(wk_hf.shape[1])

    def hf_rope(q, k, pq, pk):
        t = (lambda v: torch.tensor(v, dtype=torch.float32).view(1, 1, 1, -1))
        if hasattr(mod, "apply_rotary_emb"):  # V2
            fq = remb(t(q), torch.tensor([[pq]]))
            fk = remb(t(k), torch.tensor([[pk]]))
            return mod.apply_rotary_emb(t(q), t(q), fq)[0], mod.apply_rotary_emb(t(k), t(k), fk)[0]
        cq, sq = remb(t(q), torch.tensor([[pq]]))
        ck, sk = remb(t(k), torch.tensor([[pk]]))
        return (mod.apply_rotary_pos_emb_interleave(t(q), t(q), cq, sq)[0],
                mod.apply_rotary_pos_emb_interleave(t(k), t(k), ck, sk)[0])

    def norm_rope(v, pos):
        c, s = np.cos(pos * inv) * scale, np.sin(pos * inv) * scale
        out = np.empty_like(v)
        out[0::2] = v[0::2] * c - v[1::2] * s
        out[1::2] = v[0::2] * s + v[1::2] * c
        return out

    for h in range(cfg.num_attention_heads):
        rows = slice(h * (nope + rope) + nope, (h + 1) * (nope + rope))
        for pq, pk in ((0, 0), (5, 2), (300, 117)):
            qh, kh = hf_rope(wq_hf[rows] @ x, wk_hf @ y, pq, pk)
            ref = float((qh.double() * kh.double()).sum())
            got = norm_rope(wq[rows] @ x, pq) @ norm_rope(wk @ y, pk)
            assert abs(ref - got) < 1e-5 * (1 + abs(ref)), (h, pq, pk, ref, got)


@pytest.mark.parametrize("name", DS2)
def test_deepseek2_absorbed_attention(converted, name):
    """Layer 0's attention computed from the GGUF alone the way llama.cpp's deepseek2 runs MLA
    (q_nope absorbed through attn_k_b into the latent, scores over the cached latent + rope key,
    values decompressed through attn_v_b; kq scale from key_length_mla and the YaRN keys) equals
    transformers' attention output on the same input."""
    model, path = converted[name]
    r = gguf.GGUFReader(path)
    g, a = kv(r), {t.name: np.asarray(t.data).astype(np.float64) for t in r.tensors}
    k = lambda key: g["deepseek2." + key]  # noqa: E731
    H, kvl, rope = k("attention.head_count"), k("attention.kv_lora_rank"), k("rope.dimension_count")
    nope = k("attention.key_length_mla") - rope
    eps = k("attention.layer_norm_rms_epsilon")
    seen = {}
    hook = model.model.layers[0].self_attn.register_forward_hook(
        lambda mod, args, kw, out: seen.update(x=kw["hidden_states"], y=out[0]), with_kwargs=True)
    try:
        L.hf_logits(model, [3, 141, 59, 26, 5, 35, 89, 79, 32, 38])
    finally:
        hook.remove()
    x, ref = seen["x"][0].double().numpy(), seen["y"][0].double().numpy()
    T = x.shape[0]

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    if "blk.0.attn_q.weight" in a:
        q = x @ a["blk.0.attn_q.weight"].T
    else:
        q = rms(x @ a["blk.0.attn_q_a.weight"].T, a["blk.0.attn_q_a_norm.weight"]) \
            @ a["blk.0.attn_q_b.weight"].T
    q = q.reshape(T, H, nope + rope)
    kv_a = x @ a["blk.0.attn_kv_a_mqa.weight"].T
    c, k_pe = rms(kv_a[:, :kvl], a["blk.0.attn_kv_a_norm.weight"]), kv_a[:, kvl:]
    remb = model.model.rotary_emb
    inv, att = remb.inv_freq.double().numpy(), float(remb.attention_scaling)

    def rot(v, pos):  # normal RoPE on the last axis, adjacent pairs
        ang = pos * inv
        cs, sn = np.cos(ang) * att, np.sin(ang) * att
        out = np.empty_like(v)
        out[..., 0::2] = v[..., 0::2] * cs - v[..., 1::2] * sn
        out[..., 1::2] = v[..., 0::2] * sn + v[..., 1::2] * cs
        return out

    scale = 1 / np.sqrt(nope + rope)
    if "deepseek2.rope.scaling.yarn_log_multiplier" in g:
        m = 1 + k("rope.scaling.yarn_log_multiplier") * np.log(k("rope.scaling.factor"))
        scale *= m * m
    k_b, v_b = a["blk.0.attn_k_b.weight"], a["blk.0.attn_v_b.weight"]  # (H,kvl,nope), (H,vd,kvl)
    out = np.zeros((T, H * v_b.shape[1]))
    for t in range(T):
        kp = np.stack([rot(k_pe[s], s) for s in range(t + 1)])
        for h in range(H):
            q_lat = k_b[h] @ q[t, h, :nope]
            sc = (c[:t + 1] @ q_lat + kp @ rot(q[t, h, nope:], t)) * scale
            p = np.exp(sc - sc.max())
            out[t, h * v_b.shape[1]:(h + 1) * v_b.shape[1]] = v_b[h] @ (p / p.sum() @ c[:t + 1])
    got = out @ a["blk.0.attn_output.weight"].T
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-5 * np.abs(ref).max())


def test_deepseek2_types_q8_0(converted, tmp_path):
    """Q8_0: exp_probs_b, norms and the router F32; attn_k_b (rows of qk_nope = 16) falls back to
    F16; attn_v_b (rows of kv_lora = 32) and the experts quantize."""
    _, f32 = converted["deepseek2_v3"]
    p = L.convert_hf().convert(f32.parent / "hf", tmp_path / "q8.gguf", "q8_0")
    ty = {t.name: t.tensor_type for t in gguf.GGUFReader(p).tensors}
    assert ty["blk.1.exp_probs_b.bias"] == Q.F32
    assert ty["blk.1.attn_kv_a_norm.weight"] == Q.F32 and ty["blk.1.ffn_gate_inp.weight"] == Q.F32
    assert ty["blk.1.attn_k_b.weight"] == Q.F16
    assert ty["blk.1.attn_v_b.weight"] == Q.Q8_0 and ty["blk.1.ffn_up_exps.weight"] == Q.Q8_0


def _ds2_dir(converted, tmp_path, name, **edit):
    """A copy of the converted zoo model's HF directory with config.json keys replaced."""
    import shutil
    _, f32 = converted[name]
    d = tmp_path / "hf"
    shutil.copytree(f32.parent / "hf", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(edit)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_deepseek2_mtp_layers_dropped(converted, tmp_path):
    """Layers past num_hidden_layers that are no MTP layers (no eh_proj: here the trunk's own
    layers 1-2 with num_hidden_layers cut to 1) are not converted (test_hf_parity's MTP test
    converts a real MTP layer)."""
    d = _ds2_dir(converted, tmp_path, "deepseek2_v3", num_hidden_layers=1)
    p = L.convert_hf().convert(d, tmp_path / "x.gguf", "f32")
    names = {t.name for t in gguf.GGUFReader(p).tensors}
    assert "blk.0.attn_k_b.weight" in names and not any(n.startswith("blk.1.") for n in names)
    assert kv(gguf.GGUFReader(p))["deepseek2.block_count"] == 1


def test_deepseek2_group_limited_v2(converted, tmp_path, caplog):
    """DeepSeek-V2's group_limited_greedy writes the group keys (and warns that llama.cpp ranks
    groups differently); greedy (the zoo entry) writes none."""
    assert "deepseek2.expert_group_count" not in kv(gguf.GGUFReader(converted["deepseek2_lite"][1]))
    d = _ds2_dir(converted, tmp_path, "deepseek2_lite", topk_method="group_limited_greedy",
                 n_group=4, topk_group=2)
    got = kv(gguf.GGUFReader(L.convert_hf().convert(d, tmp_path / "x.gguf", "f32")))
    assert got["deepseek2.expert_group_count"] == 4
    assert got["deepseek2.expert_group_used_count"] == 2
    assert "best two" in caplog.text


@pytest.mark.parametrize("name,edit,msg", [
    ("deepseek2_lite", dict(topk_method="bogus_topk"), "bogus_topk"),
    ("deepseek2_v3", dict(topk_method="greedy"), "'greedy'"),
    ("deepseek2_v3", dict(n_group=3), "not divisible by n_group 3"),
    ("deepseek2_v3", dict(topk_group=5), "topk_group 5"),
    ("deepseek2_v3", dict(scoring_func="softmax"), "sigmoid"),
    ("deepseek2_lite", dict(scoring_func="sqrtsoftplus"), "sqrtsoftplus"),
    ("deepseek2_v3", dict(rope_interleave=False), "rope_interleave"),
    ("deepseek2_v3", dict(rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=1e4,
                                               original_max_position_embeddings=128, mscale=1.0,
                                               mscale_all_dim=0.707)), "mscale_all_dim"),
])
def test_deepseek2_refused(converted, tmp_path, name, edit, msg):
    d = _ds2_dir(converted, tmp_path, name, **edit)
    out = tmp_path / "x.gguf"
    with pytest.raises(L.convert_hf().ConvertError, match=msg):
        L.convert_hf().convert(d, out, "f32")
    assert not out.exists()


# =================================================================================================
# glm4moe
# =================================================================================================

def glm4moe_shapes(cfg, il: int) -> dict[str, list[int]]:
    """Layer il's tensors as llama.cpp's glm4moe loader creates them (ne order), q/k norms when
    the config has them."""
    E, hd, H, Hkv = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    n_exp, ff_exp = cfg.n_routed_experts, cfg.moe_intermediate_size
    t = {"attn_norm.weight": [E], "attn_q.weight": [E, hd * H], "attn_q.bias": [hd * H],
         "attn_k.weight": [E, hd * Hkv], "attn_k.bias": [hd * Hkv],
         "attn_v.weight": [E, hd * Hkv], "attn_v.bias": [hd * Hkv],
         "attn_output.weight": [hd * H, E], "post_attention_norm.weight": [E]}
    if cfg.use_qk_norm:
        t.update({"attn_q_norm.weight": [hd], "attn_k_norm.weight": [hd]})
    if il < cfg.first_k_dense_replace:
        ff = cfg.intermediate_size
        t.update({"ffn_gate.weight": [E, ff], "ffn_up.weight": [E, ff], "ffn_down.weight": [ff, E]})
    else:
        sh = ff_exp * cfg.n_shared_experts
        t.update({"ffn_gate_inp.weight": [E, n_exp], "exp_probs_b.bias": [n_exp],
                  "ffn_gate_exps.weight": [E, ff_exp, n_exp],
                  "ffn_up_exps.weight": [E, ff_exp, n_exp],
                  "ffn_down_exps.weight": [ff_exp, E, n_exp], "ffn_gate_shexp.weight": [E, sh],
                  "ffn_up_shexp.weight": [E, sh], "ffn_down_shexp.weight": [sh, E]})
    return t


@pytest.mark.parametrize("name", GLM)
def test_glm4moe_tensors(converted, name):
    """Every layer has exactly the tensors of llama.cpp's loader with its shapes (the FFN's input
    norm as post_attention_norm, no ffn_norm; q/k norms only with use_qk_norm); the selection bias
    is F32 and carries the zoo's random values."""
    model, path = converted[name]
    cfg = model.config
    ts = {t.name: t for t in gguf.GGUFReader(path).tensors}
    want = {"token_embd.weight": [cfg.hidden_size, cfg.vocab_size],
            "output.weight": [cfg.hidden_size, cfg.vocab_size],
            "output_norm.weight": [cfg.hidden_size]}
    for il in range(cfg.num_hidden_layers):
        want.update({f"blk.{il}.{n}": s for n, s in glm4moe_shapes(cfg, il).items()})
    assert set(ts) == set(want), (sorted(set(ts) - set(want)), sorted(set(want) - set(ts)))
    for n, s in want.items():
        assert [int(x) for x in ts[n].shape] == s, (n, ts[n].shape, s)
    sd = model.state_dict()
    for il in range(cfg.first_k_dense_replace, cfg.num_hidden_layers):
        bias = sd[f"model.layers.{il}.mlp.gate.e_score_correction_bias"].numpy()
        assert ts[f"blk.{il}.exp_probs_b.bias"].tensor_type == Q.F32
        assert np.abs(bias).min() > 0
        np.testing.assert_array_equal(np.asarray(ts[f"blk.{il}.exp_probs_b.bias"].data), bias)


def rope_neox_partial(x, pos, theta, n_rot):
    """llama.cpp's NEOX RoPE (ggml rope_neox) on one head vector: pairs (i, i + n_rot/2) for
    i < n_rot/2 rotated by pos * theta^(-2i/n_rot); dimensions n_rot.. unchanged."""
    y = x.copy()
    i = np.arange(n_rot // 2)
    ang = pos * theta ** (-2.0 * i / n_rot)
    a, b = x[i], x[i + n_rot // 2]
    y[i] = a * np.cos(ang) - b * np.sin(ang)
    y[i + n_rot // 2] = a * np.sin(ang) + b * np.cos(ang)
    return y


@pytest.mark.parametrize("name", GLM)
def test_glm4moe_partial_rope(converted, name):
    """transformers' Glm4Moe attention inputs (q/k projections with bias, q/k norms, then
    apply_rotary_pos_emb with partial_rotary_factor) equal llama.cpp's path on the converted
    tensors alone (same projections, RMS q/k norms, NEOX RoPE over rope.dimension_count dims
    with rope.freq_base), head by head at several positions: no permutation is needed."""
    model, path = converted[name]
    r = gguf.GGUFReader(path)
    g, a = kv(r), {t.name: np.asarray(t.data).astype(np.float64) for t in r.tensors}
    n_rot, theta = g["glm4moe.rope.dimension_count"], g["glm4moe.rope.freq_base"]
    hd, eps = g["glm4moe.attention.key_length"], g["glm4moe.attention.layer_norm_rms_epsilon"]
    assert n_rot == hd // 2
    att = model.model.layers[0].self_attn
    mod = sys.modules[type(model).__module__]
    rng = np.random.default_rng(11)
    X = rng.standard_normal((1, 3, model.config.hidden_size))
    pos = [0, 7, 300]

    def ours(w, bias, norm, x, p):
        v = (x @ a[w].T + a[bias]).reshape(-1, hd)
        if norm in a:
            v = v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * a[norm]
        return np.stack([rope_neox_partial(h, p, theta, n_rot) for h in v])

    with torch.no_grad():
        x = torch.tensor(X, dtype=torch.float32)
        q = att.q_proj(x).view(1, 3, -1, hd)
        k = att.k_proj(x).view(1, 3, -1, hd)
        if att.use_qk_norm:
            q, k = att.q_norm(q), att.k_norm(k)
        cos, sin = model.model.rotary_emb(x, torch.tensor([pos]))
        qh, kh = mod.apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    for t, p in enumerate(pos):
        for hf, w in ((qh, "q"), (kh, "k")):
            got = ours(f"blk.0.attn_{w}.weight", f"blk.0.attn_{w}.bias",
                       f"blk.0.attn_{w}_norm.weight", X[0, t], p)
            ref = hf[0, :, t].double().numpy()
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * np.abs(ref).max(),
                                       err_msg=f"{w} at position {p}")


def test_glm4moe_groups(converted, tmp_path):
    """Expert groups are written when they select (n_group 4, topk_group 2), not when every group
    is used (topk_group == n_group: the same experts stay eligible, and llama.cpp's loader wants
    fewer groups used than there are)."""
    conv = L.convert_hf()
    got = kv(gguf.GGUFReader(conv.convert(_ds2_dir(converted, tmp_path / "a", "glm4moe", n_group=4,
                                                   topk_group=2), tmp_path / "a.gguf", "f32")))
    assert got["glm4moe.expert_group_count"] == 4 and got["glm4moe.expert_group_used_count"] == 2
    got = kv(gguf.GGUFReader(conv.convert(_ds2_dir(converted, tmp_path / "b", "glm4moe", n_group=4,
                                                   topk_group=4), tmp_path / "b.gguf", "f32")))
    assert "glm4moe.expert_group_count" not in got and "glm4moe.expert_group_used_count" not in got


def test_glm4moe_checkpoint_config_layout(converted, tmp_path):
    """GLM-4.5's own config.json keeps rope_theta and partial_rotary_factor at the top level:
    rope.dimension_count and freq_base follow them."""
    d = _ds2_dir(converted, tmp_path, "glm4moe", rope_theta=1000000.0, partial_rotary_factor=0.25)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["rope_parameters"]
    (d / "config.json").write_text(json.dumps(cfg))
    got = kv(gguf.GGUFReader(L.convert_hf().convert(d, tmp_path / "x.gguf", "f32")))
    assert got["glm4moe.rope.dimension_count"] == 4
    assert got["glm4moe.rope.freq_base"] == 1000000.0


@pytest.mark.parametrize("edit,msg", [
    (dict(n_group=3), "not divisible by n_group 3"),
    (dict(n_group=4, topk_group=5), "topk_group 5"),
    (dict(n_group=8, topk_group=1, num_experts_per_tok=3), "experts of the selected groups"),
    (dict(n_group=16), "top two"),
    (dict(num_experts_per_tok=17), "num_experts_per_tok 17"),
    (dict(scoring_func="softmax"), "sigmoid"),
    (dict(rope_parameters=dict(rope_type="default", rope_theta=1e4, partial_rotary_factor=0.3125)),
     "partial_rotary_factor"),
])
def test_glm4moe_refused(converted, tmp_path, edit, msg):
    d = _ds2_dir(converted, tmp_path, "glm4moe", **edit)
    out = tmp_path / "x.gguf"
    with pytest.raises(L.convert_hf().ConvertError, match=msg):
        L.convert_hf().convert(d, out, "f32")
    assert not out.exists()


NEXTN = {"eh_proj.weight": "nextn.eh_proj.weight", "enorm.weight": "nextn.enorm.weight",
         "hnorm.weight": "nextn.hnorm.weight",
         "shared_head.norm.weight": "nextn.shared_head_norm.weight",
         "embed_tokens.weight": "nextn.embed_tokens.weight",
         "shared_head.head.weight": "nextn.shared_head_head.weight"}


def test_glm4moe_mtp_layer(tmp_path):
    """A GLM-4.5 layout MTP layer (a full MoE decoder layer plus eh_proj, enorm, hnorm,
    shared_head.norm, embed_tokens, shared_head.head) converts to blk.3 with its parts in
    blk.3.nextn.*, block_count trunk + 1 and nextn_predict_layers 1, values unchanged; Q8_0 keeps
    its norms and selection bias F32; --no-mtp drops it (block_count 3, no nextn key)."""
    conv = L.convert_hf()
    trunk, full, extras = L.mtp_checkpoint("glm4moe", tmp_path / "hf", own_head=True)
    n = trunk.config.num_hidden_layers
    r = gguf.GGUFReader(conv.convert(tmp_path / "hf", tmp_path / "mtp.gguf", "f32"))
    got, a = kv(r), {t.name: np.asarray(t.data) for t in r.tensors}
    assert got["glm4moe.block_count"] == n + 1 and got["glm4moe.nextn_predict_layers"] == 1
    exp = expected_tensors("glm4moe", full)
    exp.update({f"blk.{n}.{NEXTN[k]}": v.numpy() for k, v in extras.items()})
    assert set(a) == set(exp), (sorted(set(a) - set(exp)), sorted(set(exp) - set(a)))
    for k, v in exp.items():
        np.testing.assert_array_equal(a[k], v, err_msg=k)
    shapes = {f"blk.{n}.{k}": s for k, s in glm4moe_shapes(full.config, n).items()}
    E, V = full.config.hidden_size, full.config.vocab_size
    shapes.update({f"blk.{n}.nextn.eh_proj.weight": [2 * E, E], f"blk.{n}.nextn.enorm.weight": [E],
                   f"blk.{n}.nextn.embed_tokens.weight": [E, V],
                   f"blk.{n}.nextn.shared_head_head.weight": [E, V]})
    ts = {t.name: t for t in r.tensors}
    for k, s in shapes.items():
        assert [int(x) for x in ts[k].shape] == s, (k, ts[k].shape, s)

    ty = {t.name: t.tensor_type for t in gguf.GGUFReader(
        conv.convert(tmp_path / "hf", tmp_path / "q8.gguf", "q8_0")).tensors}
    for k in ("nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight",
              "post_attention_norm.weight", "exp_probs_b.bias", "attn_q.bias",
              "ffn_gate_inp.weight"):
        assert ty[f"blk.{n}.{k}"] == Q.F32, k
    assert ty[f"blk.{n}.nextn.eh_proj.weight"] == Q.Q8_0
    assert ty[f"blk.{n}.ffn_up_exps.weight"] == Q.Q8_0

    assert conv.main([str(tmp_path / "hf"), "-o", str(tmp_path / "trunk.gguf"), "--outtype", "f32",
                      "--no-mtp"]) == 0
    r = gguf.GGUFReader(tmp_path / "trunk.gguf")
    got = kv(r)
    assert got["glm4moe.block_count"] == n and "glm4moe.nextn_predict_layers" not in got
    assert {t.name for t in r.tensors} == set(expected_tensors("glm4moe", trunk))


# =================================================================================================
# Tokenizer
# =================================================================================================

CORPUS = ["The quick brown fox jumps over the lazy dog. " * 3,
          "Hello world! It's 2024, and we've got 3 cats & 12 dogs.",
          "def f(x):\n    return x ** 2  # square\n", "naïve café — Ünïcode test, 東京 123"]


def make_tokenizer_dir(path):
    """A trained byte-level BPE (GPT-2 pre-tokenizer) saved as transformers saves one."""
    from transformers import PreTrainedTokenizerFast
    tk = L.train_bpe(CORPUS * 4, ["<|endoftext|>", "<|im_start|>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")
    fast.chat_template = "{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}"
    fast.save_pretrained(str(path))
    return fast


def test_tokenizer_metadata(tmp_path):
    conv = L.convert_hf()
    m = L.build_hf("olmoe", seed=5, n_layers=1)
    L.save_hf(m, tmp_path / "hf")
    fast = make_tokenizer_dir(tmp_path / "hf")
    assert len(fast) <= m.config.vocab_size
    p = conv.convert(tmp_path / "hf", tmp_path / "tok.gguf", "f32")
    got = kv(gguf.GGUFReader(p))
    assert got["tokenizer.ggml.model"] == "gpt2"
    assert got["tokenizer.ggml.pre"] == "gpt-2"
    toks = got["tokenizer.ggml.tokens"]
    assert len(toks) == m.config.vocab_size
    vocab = fast.get_vocab()
    for t, i in vocab.items():
        assert toks[i] == t
    for i in range(len(vocab), m.config.vocab_size):
        assert toks[i] == f"[PAD{i}]"
    types = got["tokenizer.ggml.token_type"]
    eot = vocab["<|endoftext|>"]
    assert types[eot] == gguf.TokenType.CONTROL
    assert types[vocab["<|im_start|>"]] == gguf.TokenType.CONTROL
    assert types[vocab["the"] if "the" in vocab else vocab["Ġthe"]] == gguf.TokenType.NORMAL
    assert types[m.config.vocab_size - 1] == gguf.TokenType.UNUSED
    merges = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())["model"]["merges"]
    merges = [x if isinstance(x, str) else " ".join(x) for x in merges]
    assert got["tokenizer.ggml.merges"] == merges
    assert got["tokenizer.ggml.bos_token_id"] == eot
    assert got["tokenizer.ggml.eos_token_id"] == eot
    assert "<|im_start|>" in got["tokenizer.chat_template"]


# =================================================================================================
# Command line
# =================================================================================================

def test_cli(tmp_path):
    m = L.build_hf("mixtral", seed=6, n_layers=1)
    L.save_hf(m, tmp_path / "hf")
    out = tmp_path / "x.gguf"
    tool = str(L.REPO / "tools" / "convert_hf.py")
    r = subprocess.run([sys.executable, tool, str(tmp_path / "hf"), "--outfile", str(out),
                        "--outtype", "q8_0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert kv(gguf.GGUFReader(out))["general.file_type"] == 7
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["architectures"] = ["BertForMaskedLM"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, tool, str(tmp_path / "hf"), "-o", str(tmp_path / "y.gguf")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert "BertForMaskedLM" in r.stderr and "not supported" in r.stderr
    assert not (tmp_path / "y.gguf").exists()


def test_gpt2_tokenizer_roundtrip(tmp_path):
    """llama.cpp's GPT-2 vocabulary (../shared/vocab) rebuilt as a transformers tokenizer, put next
    to a model and converted: the check-text hash must name it 'gpt-2' (so CHECK_TEXT is
    llama.cpp's to the byte), tokens and merges must come back unchanged, and Strata's tokenizer
    on the converted file must agree with transformers' on sample text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    src = L.SHARED / "vocab" / "ggml-vocab-gpt-2.gguf"
    if not src.is_file():
        pytest.skip(f"{src} not present (../shared data is optional)")
    ref = kv(gguf.GGUFReader(src))
    toks, merges = ref["tokenizer.ggml.tokens"], ref["tokenizer.ggml.merges"]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)},
                              merges=[tuple(m.split(" ", 1)) for m in merges]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")
    cls, kw = L.zoo()["olmoe"]
    import transformers
    cfg = transformers.OlmoeConfig(**dict(kw, vocab_size=len(toks), num_hidden_layers=1,
                                          hidden_size=32, intermediate_size=32, head_dim=8),
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    L.save_hf(transformers.OlmoeForCausalLM(cfg), tmp_path / "hf")
    fast.save_pretrained(str(tmp_path / "hf"))
    out = L.convert_hf().convert(tmp_path / "hf", tmp_path / "gpt2.gguf", "f16")
    got = kv(gguf.GGUFReader(out))
    assert got["tokenizer.ggml.pre"] == "gpt-2"
    assert got["tokenizer.ggml.tokens"] == toks
    assert got["tokenizer.ggml.merges"] == merges
    eot = toks.index("<|endoftext|>")
    assert got["tokenizer.ggml.token_type"][eot] == gguf.TokenType.CONTROL
    assert got["tokenizer.ggml.bos_token_id"] == eot == got["tokenizer.ggml.eos_token_id"]

    import strata
    texts = ["Hello world", " Hello World!", "It's 3.14159 o'clock,  isn't it?\n\n\tTabs",
             "naïve café 東京 🦙🦙", "   leading spaces and trailing   "]
    with strata.Model(out, vocab_only=True) as m:
        for t in texts:
            assert m.tokenize(t, add_special=False) == fast.encode(t), t


# =================================================================================================
# GLM-4.5's tokenizer (glm4 pre-tokenizer, its special tokens and end-of-generation set)
# =================================================================================================

GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>",
                "<|user|>", "<|assistant|>", "<|observation|>"]
GLM_TEXTS = [
    "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nI've been 'told he's there, 'RE you sure? "
    "12345 apples\n\n  ok<|assistant|>\n<think></think>\nSure!! 3.14159<|endoftext|>",
    "HELLO World's  \t\n\n x<|observation|>\n{\"city\": \"Paris\"}<|user|>",
    "Ünïcödé 你好世界 1234567 a..b   \n\n\n   end",
    "<|user|><|user|>[gMASK]<think>x</think>  <sop>",
]


def test_glm4_tokenizer(tmp_path):
    """A GLM-4.5-style tokenizer.json (Llama 3's Split regex before a regex-less ByteLevel, its
    special tokens, <think> / </think> as plain added tokens) on the zoo glm4moe: written as
    tokenizer.ggml.pre "glm4" with llama.cpp's ids (bos [gMASK], eot <|user|>, eom
    <|observation|>, unk <|endoftext|>); Strata tokenizes text with the specials and the regex's
    cases (contractions, digits in threes, newline and space runs) into the HF tokenizer's ids,
    adds no BOS, and ends generation on <|user|>, <|observation|> and <|endoftext|> only."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    strata = pytest.importorskip("strata")
    conv = L.convert_hf()
    d = tmp_path / "hf"
    L.save_hf(L.build_hf("glm4moe", seed=5), d)
    tk = L.train_bpe(["I've been told he's there 12345 apples, sure!! the end\n\n"] * 8, GLM_SPECIALS,
                     conv.LLAMA3_SPLIT)
    tk.add_tokens([AddedToken("<think>", special=False, normalized=False),
                   AddedToken("</think>", special=False, normalized=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>")
    fast.save_pretrained(str(d))
    path = conv.convert(d, tmp_path / "glm.gguf", "f32")
    got = kv(gguf.GGUFReader(path))
    ids = {t: tk.token_to_id(t) for t in GLM_SPECIALS + ["<think>", "</think>"]}
    assert got["tokenizer.ggml.pre"] == "glm4"
    assert got["tokenizer.ggml.bos_token_id"] == ids["[gMASK]"]
    assert got["tokenizer.ggml.eot_token_id"] == ids["<|user|>"]
    assert got["tokenizer.ggml.eom_token_id"] == ids["<|observation|>"]
    assert got["tokenizer.ggml.eos_token_id"] == ids["<|endoftext|>"]
    with strata.Model(path, vocab_only=True) as m:
        for text in GLM_TEXTS:
            want = tk.encode(text).ids
            assert m.tokenize(text, add_special=True, parse_special=True) == want, text
            assert m.detokenize(want, special=True) == text, text
        eog = {t for t, i in ids.items() if m.is_eog(i)}
        assert eog == {"<|endoftext|>", "<|user|>", "<|observation|>"}, eog
