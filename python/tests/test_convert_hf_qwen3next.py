"""test_convert_hf_qwen3next.py - tools/convert_hf.py on Qwen3-Next (Qwen3NextForCausalLM ->
qwen3next), checked against transformers alone (no Strata engine).

Owns: the independent expected mapping of a Qwen3Next state dict to llama.cpp's qwen3next tensors
and keys (used by test_convert_hf.py's per-architecture tests too): attn_qkv / attn_gate derived
by running the HF module's own in_proj_qkvz + fix_query_key_value_ordering on the identity (not by
the converter's reshapes), the (1 + w) norms plus one, ssm_a = -exp(A_log); numeric checks that
llama.cpp's reading of the converted tensors (q/k/v/z from attn_qkv / attn_gate, per key head
[beta, alpha] from ssm_ba, g from ssm_a / ssm_dt, the conv from ssm_conv1d) equals the HF module
on random inputs; the configs the converter must refuse; the MTP block (mtp.*) kept as blk.N +
blk.N.nextn.* or dropped with --no-mtp."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")
import gguf  # noqa: E402

import test_hf_parity_lib as L  # noqa: E402


def _identity_split(lin, E: int):
    """The HF GatedDeltaNet's (q, k, v, z, b, a) for the identity input: column i is what input
    unit vector e_i produces, i.e. each part's weight rows (flattened per head)."""
    with torch.no_grad():
        x = torch.eye(E, dtype=torch.float32)[None]
        q, k, v, z, b, a = lin.fix_query_key_value_ordering(lin.in_proj_qkvz(x), lin.in_proj_ba(x))
    return [t.reshape(E, -1).T.numpy() for t in (q, k, v, z, b, a)]


def expected_tensors_qwen3next(model) -> dict[str, np.ndarray]:
    cfg = model.config
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    E = cfg.hidden_size
    out = {"token_embd.weight": sd["model.embed_tokens.weight"],
           "output.weight": sd["lm_head.weight"],
           "output_norm.weight": sd["model.norm.weight"] + 1}
    for il in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{il}.", f"blk.{il}."
        out[b + "attn_norm.weight"] = sd[p + "input_layernorm.weight"] + 1
        out[b + "post_attention_norm.weight"] = sd[p + "post_attention_layernorm.weight"] + 1
        if cfg.layer_types[il] == "linear_attention":
            la = model.model.layers[il].linear_attn
            q, k, v, z, _, _ = _identity_split(la, E)
            out[b + "attn_qkv.weight"] = np.concatenate([q, k, v])
            out[b + "attn_gate.weight"] = z
            out[b + "ssm_ba.weight"] = sd[p + "linear_attn.in_proj_ba.weight"]
            out[b + "ssm_conv1d.weight"] = sd[p + "linear_attn.conv1d.weight"][:, 0, :]
            out[b + "ssm_dt.bias"] = sd[p + "linear_attn.dt_bias"]
            out[b + "ssm_a"] = -np.exp(sd[p + "linear_attn.A_log"])
            out[b + "ssm_norm.weight"] = sd[p + "linear_attn.norm.weight"]
            out[b + "ssm_out.weight"] = sd[p + "linear_attn.out_proj.weight"]
        else:
            for hf, g in [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                          ("o_proj", "attn_output")]:
                out[b + g + ".weight"] = sd[p + f"self_attn.{hf}.weight"]
            out[b + "attn_q_norm.weight"] = sd[p + "self_attn.q_norm.weight"] + 1
            out[b + "attn_k_norm.weight"] = sd[p + "self_attn.k_norm.weight"] + 1
        gu = sd[p + "mlp.experts.gate_up_proj"]
        ff = gu.shape[1] // 2
        out[b + "ffn_gate_exps.weight"] = gu[:, :ff]
        out[b + "ffn_up_exps.weight"] = gu[:, ff:]
        out[b + "ffn_down_exps.weight"] = sd[p + "mlp.experts.down_proj"]
        out[b + "ffn_gate_inp.weight"] = sd[p + "mlp.gate.weight"]
        out[b + "ffn_gate_inp_shexp.weight"] = sd[p + "mlp.shared_expert_gate.weight"]
        for w in ("gate", "up", "down"):
            out[b + f"ffn_{w}_shexp.weight"] = sd[p + f"mlp.shared_expert.{w}_proj.weight"]
    return out


def expected_kv_qwen3next(cfg) -> dict:
    a = "qwen3next."
    interval = next(i + 1 for i, t in enumerate(cfg.layer_types) if t == "full_attention")
    return {a + "expert_feed_forward_length": cfg.moe_intermediate_size,
            a + "expert_shared_feed_forward_length": cfg.shared_expert_intermediate_size,
            a + "ssm.conv_kernel": cfg.linear_conv_kernel_dim,
            a + "ssm.state_size": cfg.linear_key_head_dim,
            a + "ssm.group_count": cfg.linear_num_key_heads,
            a + "ssm.time_step_rank": cfg.linear_num_value_heads,
            a + "ssm.inner_size": cfg.linear_value_head_dim * cfg.linear_num_value_heads,
            a + "full_attention_interval": interval,
            a + "rope.dimension_count": int(cfg.head_dim * cfg.rope_parameters["partial_rotary_factor"])}


# =================================================================================================
# Numeric checks on the converted file
# =================================================================================================

@pytest.fixture(scope="module")
def q3n(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3next")
    m = L.build_hf("qwen3next", seed=3)
    L.save_hf(m, d / "hf")
    path = L.convert_hf().convert(d / "hf", d / "f32.gguf", "f32")
    r = gguf.GGUFReader(path)
    return m, d, {t.name: np.asarray(t.data).astype(np.float64) for t in r.tensors}


def test_linear_attn_inputs_as_llama_cpp_reads_them(q3n):
    """On random inputs, llama.cpp's reading of the converted tensors (attn_qkv rows: every q head,
    every k head, every v head; attn_gate: z; ssm_ba: per key head its value heads' b then a;
    g = ssm_a * softplus(a + ssm_dt)) gives HF's q, k, v, z, beta and g."""
    model, _, a = q3n
    cfg = model.config
    nk, nv, dk = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim
    r = nv // nk
    il = cfg.layer_types.index("linear_attention")
    la = model.model.layers[il].linear_attn
    X = np.random.default_rng(5).standard_normal((3, cfg.hidden_size))
    with torch.no_grad():
        xt = torch.tensor(X, dtype=torch.float32)[None]
        q, k, v, z, b, al = la.fix_query_key_value_ordering(la.in_proj_qkvz(xt), la.in_proj_ba(xt))
        g = -la.A_log.float().exp() * torch.nn.functional.softplus(al.float() + la.dt_bias)
    blk = f"blk.{il}."
    qkv = X @ a[blk + "attn_qkv.weight"].T
    kd = nk * dk
    np.testing.assert_allclose(qkv[:, :kd], q[0].reshape(3, -1).numpy(), atol=1e-5)
    np.testing.assert_allclose(qkv[:, kd:2 * kd], k[0].reshape(3, -1).numpy(), atol=1e-5)
    np.testing.assert_allclose(qkv[:, 2 * kd:], v[0].reshape(3, -1).numpy(), atol=1e-5)
    np.testing.assert_allclose(X @ a[blk + "attn_gate.weight"].T, z[0].reshape(3, -1).numpy(), atol=1e-5)
    ba = (X @ a[blk + "ssm_ba.weight"].T).reshape(3, nk, 2 * r)
    beta_ll = 1 / (1 + np.exp(-ba[:, :, :r].reshape(3, nv)))
    alpha = ba[:, :, r:].reshape(3, nv)
    g_ll = a[blk + "ssm_a"] * np.log1p(np.exp(alpha + a[blk + "ssm_dt.bias"]))
    np.testing.assert_allclose(beta_ll, b[0].sigmoid().numpy(), atol=1e-6)
    np.testing.assert_allclose(g_ll, g[0].numpy(), rtol=1e-5, atol=1e-6)
    # the conv: ggml's ssm_conv over (K, C) weights equals HF's depthwise conv1d
    Kc = cfg.linear_conv_kernel_dim
    w = a[blk + "ssm_conv1d.weight"]
    seq = np.random.default_rng(6).standard_normal((7, w.shape[0]))
    pad = np.concatenate([np.zeros((Kc - 1, w.shape[0])), seq])
    ours = np.stack([(pad[t:t + Kc].T * w).sum(-1) for t in range(7)])
    with torch.no_grad():
        ref = la.conv1d(torch.tensor(seq.T[None], dtype=torch.float32))[0, :, :7].T.numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_attention_q_gate_layout(q3n):
    """attn_q's rows per head are [query (head_dim), gate (head_dim)], as llama.cpp views them:
    HF's q_proj output chunked per head."""
    model, _, a = q3n
    cfg = model.config
    il = cfg.layer_types.index("full_attention")
    att = model.model.layers[il].self_attn
    hd, H = cfg.head_dim, cfg.num_attention_heads
    X = np.random.default_rng(7).standard_normal((2, cfg.hidden_size))
    with torch.no_grad():
        q, gate = torch.chunk(att.q_proj(torch.tensor(X, dtype=torch.float32)).view(2, H, 2 * hd), 2, dim=-1)
    qg = (X @ a[f"blk.{il}.attn_q.weight"].T).reshape(2, H, 2 * hd)
    np.testing.assert_allclose(qg[..., :hd], q.numpy(), atol=1e-5)
    np.testing.assert_allclose(qg[..., hd:], gate.numpy(), atol=1e-5)


@pytest.mark.parametrize("edit,msg", [
    (dict(linear_value_head_dim=8), "linear_key_head_dim != linear_value_head_dim"),
    (dict(norm_topk_prob=False), "norm_topk_prob false"),
    (dict(mlp_only_layers=[0]), "dense layers"),
    (dict(layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"]),
     "not full attention on every 1-th layer alone"),
])
def test_qwen3next_refused(q3n, tmp_path, edit, msg):
    _, d, _ = q3n
    src = tmp_path / "hf"
    shutil.copytree(d / "hf", src)
    c = json.loads((src / "config.json").read_text())
    c.update(edit)
    (src / "config.json").write_text(json.dumps(c))
    conv = L.convert_hf()
    with pytest.raises(conv.ConvertError, match=msg):
        conv.convert(src, tmp_path / "x.gguf", "f32")


def test_qwen3next_mtp_block(tmp_path):
    """Qwen3-Next-80B-A3B's MTP block (mtp.fc, mtp.pre_fc_norm_embedding / _hidden, mtp.norm and
    mtp.layers.0, a gated full-attention layer with per-expert tensors: test_hf_parity_lib's
    qwen3next_mtp_state) converts to blk.N (N = the trunk's layer count) as llama.cpp's qwen3next
    loads it: the layer's tensors as a trunk full-attention layer's (norms + 1, experts stacked),
    fc -> nextn.eh_proj, the pre-fc norms -> nextn.enorm / nextn.hnorm and mtp.norm ->
    nextn.shared_head_norm, each + 1 ((1 + w) norms); block_count N + 1, nextn_predict_layers 1,
    full_attention_interval the trunk's; Q8_0 keeps the norms F32; --no-mtp drops the block."""
    conv = L.convert_hf()
    trunk, full, extras = L.mtp_checkpoint("qwen3next", tmp_path / "hf")
    n = trunk.config.num_hidden_layers
    assert full.config.layer_types[n] == "full_attention" and trunk.config.layer_types[n - 1] == "full_attention"
    r = gguf.GGUFReader(conv.convert(tmp_path / "hf", tmp_path / "mtp.gguf", "f32"))
    got = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("GGUF.")}
    a = {t.name: np.asarray(t.data) for t in r.tensors}
    assert got["qwen3next.block_count"] == n + 1 and got["qwen3next.nextn_predict_layers"] == 1
    assert got["qwen3next.full_attention_interval"] == expected_kv_qwen3next(trunk.config)[
        "qwen3next.full_attention_interval"]
    exp = expected_tensors_qwen3next(full)
    x = {k: v.numpy() for k, v in extras.items()}
    b = f"blk.{n}.nextn."
    exp.update({b + "eh_proj.weight": x["eh_proj.weight"], b + "enorm.weight": x["enorm.weight"] + 1,
                b + "hnorm.weight": x["hnorm.weight"] + 1,
                b + "shared_head_norm.weight": x["shared_head.norm.weight"] + 1})
    assert set(a) == set(exp), (sorted(set(a) - set(exp)), sorted(set(exp) - set(a)))
    for k, v in exp.items():
        np.testing.assert_array_equal(a[k], v, err_msg=k)
    ts = {t.name: [int(s) for s in t.shape] for t in r.tensors}
    E, H, hd = full.config.hidden_size, full.config.num_attention_heads, full.config.head_dim
    assert ts[b + "eh_proj.weight"] == [2 * E, E] and ts[f"blk.{n}.attn_q.weight"] == [E, 2 * H * hd]

    ty = {t.name: t.tensor_type for t in gguf.GGUFReader(
        conv.convert(tmp_path / "hf", tmp_path / "q8.gguf", "q8_0")).tensors}
    for k in ("nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight",
              "attn_q_norm.weight", "post_attention_norm.weight", "ffn_gate_inp.weight"):
        assert ty[f"blk.{n}.{k}"] == gguf.GGMLQuantizationType.F32, k
    assert ty[b + "eh_proj.weight"] == gguf.GGMLQuantizationType.Q8_0

    assert conv.main([str(tmp_path / "hf"), "-o", str(tmp_path / "trunk.gguf"), "--outtype", "f32",
                      "--no-mtp"]) == 0
    r = gguf.GGUFReader(tmp_path / "trunk.gguf")
    got = {f.name: f.contents() for f in r.fields.values()}
    assert got["qwen3next.block_count"] == n and "qwen3next.nextn_predict_layers" not in got
    assert {t.name for t in r.tensors} == set(expected_tensors_qwen3next(trunk))
