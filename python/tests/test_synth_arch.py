"""test_synth_arch.py - bench/synth_arch.py against the GGUF contracts of the architectures it
writes, written out here from the models' configs (not from the script's tables): every key with
its value and GGUF type, every tensor's name, shape (GGUF ne order) and type, for the tiny presets
(deepseek2: V3-style and V2-Lite-style and each experts type, with llama.cpp's fallback type for
down experts whose rows a 256-block type does not divide; glm4moe: Air-style with its MTP layer and
without, 4.5-style with q/k norms, llama.cpp's Q3_K_M rules (restated here from llama-quant.cpp)
including the first layers' Q5_K / Q5_1; gpt-oss: MXFP4 and Q8_0 experts, biases and sinks;
qwen3next: gated DeltaNet and gated attention layers, the shared expert's gate, attn_qkv counted
with attn_v for the first layers' Q5_K, ssm_a negative); every
weight zero-mean with the spread its kind should have; tokens routing to their own experts (in
numpy for deepseek2, in Strata's own route trace for every tiny preset); the qwen3next file read
back into transformers' Qwen3Next (the converter's mapping inverted), its hidden state keeping rms
~1 layer after layer and Strata's logits following transformers'; each tiny file loaded and
decoded by Strata's CLI and python package ($STRATA_CLI / $STRATA_LIB); --layers / --dense /
--no-mtp; chunked, multi-process writing giving the same bytes; and --dry-run's tensor list, byte
totals and per-token expert bytes for the full-size presets (nothing written). The vocab is
test_synth_lowbit.py's small one. Skips when ../shared/bench/synth_moe.py is absent."""
import importlib.util
import re
import subprocess
import sys

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

from conftest import REPO, shared_file
from test_synth_lowbit import small_vocab

TOOL = REPO / "bench" / "synth_arch.py"
U32, F32, BOOL, STR = V.UINT32, V.FLOAT32, V.BOOL, V.STRING

# the models' config.json values (test-side copy): layers, embd, heads, q_lora, kv_lora, nope,
# rope, v, n_ff, dense, experts, shared, used, n_ff_exp, gating, norm, scale, groups, used groups,
# yarn factor, original ctx, mscale_all_dim, rope base, vocab, ctx
CONFIGS = {
    "deepseek-v2-lite": (27, 2048, 16, 0, 512, 128, 64, 128, 10944, 1, 64, 2, 6, 1408, 1, False, 1.0,
                         1, 1, 40.0, 4096, 0.707, 10000.0, 102400, 163840),
    "deepseek-v3": (61, 7168, 128, 1536, 512, 128, 64, 128, 18432, 3, 256, 1, 8, 2048, 2, True, 2.5,
                    8, 4, 40.0, 4096, 1.0, 10000.0, 129280, 163840),
    "kimi-k2": (61, 7168, 64, 1536, 512, 128, 64, 128, 18432, 1, 384, 1, 8, 2048, 2, True, 2.827,
                1, 1, 32.0, 4096, 1.0, 50000.0, 163840, 131072),
    "deepseek2-tiny": (3, 256, 4, 128, 64, 32, 16, 32, 512, 1, 16, 1, 4, 256, 2, True, 2.5,
                       4, 2, 40.0, 4096, 1.0, 10000.0, 600, 4096),
    "deepseek2-lite-tiny": (3, 256, 4, 0, 64, 32, 16, 32, 512, 1, 16, 2, 4, 352, 1, False, 1.0,
                            1, 1, 40.0, 4096, 0.707, 10000.0, 600, 4096),
}
KEYS = "n_layer e nh q_lora kv nope rope v n_ff n_dense n_exp n_sh n_used n_ffe gating norm scale " \
       "groups g_used yarn_f yarn_orig mscale_all base vocab ctx"
Q8_RMS = np.sqrt(np.sum(np.arange(-127, 128) ** 2.0) / 256)  # synth_moe.py's Q8_0 quants: bytes, 128 -> 0
ETYPES = {"q4_k": Q.Q4_K, "q8_0": Q.Q8_0, "q3_k": Q.Q3_K, "q2_k": Q.Q2_K}
# llama-quant.cpp's tensor_type_fallback: the type for rows a 256-block type does not divide
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q3_K: Q.Q4_0, Q.Q2_K: Q.Q4_0}


def cfg(preset):
    return dict(zip(KEYS.split(), CONFIGS[preset]))


def expected_tensors(c, n_layer, n_dense, n_vocab, et):
    """name -> (ne, type, weight std or None for F32 ones / 'router' / 'bias')."""
    e, nh, qk = c["e"], c["nh"], c["nope"] + c["rope"]
    t = {"token_embd.weight": ((e, n_vocab), Q.Q8_0, 1.0),
         "output_norm.weight": ((e,), Q.F32, None),
         "output.weight": ((e, n_vocab), Q.Q8_0, 1e-3 * Q8_RMS)}
    for i in range(n_layer):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = ((e,), Q.F32, None)
        if c["q_lora"]:
            t[b + "attn_q_a.weight"] = ((e, c["q_lora"]), Q.Q8_0, e ** -0.5)
            t[b + "attn_q_a_norm.weight"] = ((c["q_lora"],), Q.F32, None)
            t[b + "attn_q_b.weight"] = ((c["q_lora"], nh * qk), Q.Q8_0, c["q_lora"] ** -0.5)
        else:
            t[b + "attn_q.weight"] = ((e, nh * qk), Q.Q8_0, e ** -0.5)
        t[b + "attn_kv_a_mqa.weight"] = ((e, c["kv"] + c["rope"]), Q.Q8_0, e ** -0.5)
        t[b + "attn_kv_a_norm.weight"] = ((c["kv"],), Q.F32, None)
        t[b + "attn_k_b.weight"] = ((c["nope"], c["kv"], nh), Q.Q8_0, c["kv"] ** -0.5)
        t[b + "attn_v_b.weight"] = ((c["kv"], c["v"], nh), Q.Q8_0, c["kv"] ** -0.5)
        t[b + "attn_output.weight"] = ((nh * c["v"], e), Q.Q8_0, 0.1 * (nh * c["v"]) ** -0.5)
        t[b + "ffn_norm.weight"] = ((e,), Q.F32, None)
        if i < n_dense:
            f = c["n_ff"]
            t[b + "ffn_gate.weight"] = ((e, f), Q.Q8_0, e ** -0.5)
            t[b + "ffn_up.weight"] = ((e, f), Q.Q8_0, e ** -0.5)
            t[b + "ffn_down.weight"] = ((f, e), Q.Q8_0, 0.1 * f ** -0.5)
            continue
        n, f, fs = c["n_exp"], c["n_ffe"], c["n_ffe"] * c["n_sh"]
        t[b + "ffn_gate_inp.weight"] = ((e, n), Q.F32, "router")
        if c["gating"] == 2:
            t[b + "exp_probs_b.bias"] = ((n,), Q.F32, "bias")
        t[b + "ffn_gate_exps.weight"] = ((e, f, n), et, e ** -0.5)
        t[b + "ffn_up_exps.weight"] = ((e, f, n), et, e ** -0.5)
        down = FALLBACK[et] if f % 256 and et in FALLBACK else et
        t[b + "ffn_down_exps.weight"] = ((f, e, n), down, 0.1 * f ** -0.5)
        t[b + "ffn_gate_shexp.weight"] = ((e, fs), Q.Q8_0, e ** -0.5)
        t[b + "ffn_up_shexp.weight"] = ((e, fs), Q.Q8_0, e ** -0.5)
        t[b + "ffn_down_shexp.weight"] = ((fs, e), Q.Q8_0, 0.1 * fs ** -0.5)
    return t


def expected_keys(c, n_layer, n_dense, n_vocab):
    a = "deepseek2."
    k = {"general.architecture": (STR, "deepseek2"), a + "block_count": (U32, n_layer),
         a + "context_length": (U32, c["ctx"]), a + "embedding_length": (U32, c["e"]),
         a + "feed_forward_length": (U32, c["n_ff"]), a + "attention.head_count": (U32, c["nh"]),
         a + "attention.head_count_kv": (U32, 1), a + "attention.layer_norm_rms_epsilon": (F32, 1e-6),
         a + "attention.kv_lora_rank": (U32, c["kv"]),
         a + "attention.key_length": (U32, c["kv"] + c["rope"]), a + "attention.value_length": (U32, c["kv"]),
         a + "attention.key_length_mla": (U32, c["nope"] + c["rope"]),
         a + "attention.value_length_mla": (U32, c["v"]), a + "rope.dimension_count": (U32, c["rope"]),
         a + "rope.freq_base": (F32, c["base"]), a + "rope.scaling.type": (STR, "yarn"),
         a + "rope.scaling.factor": (F32, c["yarn_f"]),
         a + "rope.scaling.original_context_length": (U32, c["yarn_orig"]),
         a + "rope.scaling.yarn_log_multiplier": (F32, 0.1 * c["mscale_all"]),
         a + "leading_dense_block_count": (U32, n_dense), a + "expert_count": (U32, c["n_exp"]),
         a + "expert_used_count": (U32, c["n_used"]), a + "expert_shared_count": (U32, c["n_sh"]),
         a + "expert_feed_forward_length": (U32, c["n_ffe"]),
         a + "expert_weights_scale": (F32, c["scale"]), a + "expert_weights_norm": (BOOL, c["norm"]),
         a + "expert_gating_func": (U32, c["gating"]), a + "vocab_size": (U32, n_vocab)}
    if c["q_lora"]:
        k[a + "attention.q_lora_rank"] = (U32, c["q_lora"])
    if c["groups"] > 1:
        k[a + "expert_group_count"] = (U32, c["groups"])
        k[a + "expert_group_used_count"] = (U32, c["g_used"])
    return k


def run_tool(*argv):
    synth = shared_file("bench/synth_moe.py")
    p = subprocess.run([sys.executable, str(TOOL), *map(str, argv), "--synth", str(synth), "--jobs", "1"],
                       capture_output=True, text=True)
    return p


def check_file(path, preset, n_layer, n_dense, et, n_vocab=512):
    """Every key and tensor of a written deepseek2 file against the contract; returns the reader."""
    c = cfg(preset)
    want = expected_tensors(c, n_layer, n_dense, n_vocab, et)
    for name, (ne, qt, std) in want.items():
        if std == "router":
            want[name] = (ne, qt, 0.05 * (2048 / c["e"]) ** 0.5)
        elif std == "bias":
            want[name] = (ne, qt, 0.01)
    return check_contents(path, "deepseek2", expected_keys(c, n_layer, n_dense, n_vocab), want, n_vocab)


def check_contents(path, arch, keys, want, n_vocab, extra=frozenset()):
    """Keys (exactly the architecture's set, each with its GGUF type and value) and tensors (exactly
    these names and `extra`'s, which the caller checks; each of want's with its shape, type, and for
    weights a zero mean and the spread wanted: std None for F32 ones)."""
    r = gguf.GGUFReader(str(path))
    for key, (vt, val) in keys.items():
        f = r.fields[key]
        assert f.types[0] == vt, key
        got = f.contents()
        assert (got == pytest.approx(val, rel=1e-6)) if vt == F32 else got == val, (key, got, val)
    assert {k for k in r.fields if k.startswith(arch + ".")} == {k for k in keys if k.startswith(arch + ".")}
    assert len(r.fields["tokenizer.ggml.tokens"].data) == n_vocab
    assert len(r.fields["tokenizer.ggml.token_type"].data) == n_vocab
    t = {x.name: x for x in r.tensors}
    assert set(t) == set(want) | set(extra), (set(t) ^ (set(want) | set(extra)))
    for name, (ne, qt, std) in want.items():
        x = t[name]
        assert tuple(int(d) for d in x.shape) == ne and x.tensor_type == qt, (name, x.shape, x.tensor_type, ne, qt)
        w = gguf.quants.dequantize(np.asarray(x.data), qt).astype(np.float64)
        assert np.isfinite(w).all(), name
        if std is None:
            assert (w == 1).all(), name
            continue
        n = w.size  # tolerances: at least 5-6 sampling errors of a spread / mean of n values
        assert abs(w.std() / std - 1) < max(0.10, 5 / np.sqrt(2 * n)), (name, w.std(), std)
        assert abs(w.mean()) < max(0.05, 6 / np.sqrt(n)) * std, (name, w.mean(), std)
    return r


@pytest.mark.parametrize("preset,etype", [("deepseek2-tiny", "q4_k"), ("deepseek2-tiny", "q8_0"),
                                          ("deepseek2-tiny", "q2_k"), ("deepseek2-tiny", "q3_k"),
                                          ("deepseek2-lite-tiny", "q4_k"), ("deepseek2-lite-tiny", "q2_k"),
                                          ("deepseek2-lite-tiny", "q8_0")])
def test_tiny(tmp_path, preset, etype):
    out = tmp_path / "m.gguf"
    p = run_tool(preset, out, "--vocab", small_vocab(tmp_path / "v.gguf"), "--experts-type", etype)
    assert p.returncode == 0, p.stderr
    assert "expert bytes per token" in p.stderr and "std/target" in p.stderr
    check_file(out, preset, 3, 1, ETYPES[etype])


def rms_norm(x):
    return x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + 1e-6)


def test_tokens_route_to_their_own_experts(tmp_path):
    """Layer 1's router on the normed embeddings of 64 tokens: the top-4 sets overlap about as
    much as random sets of 4 of 16 (Jaccard ~0.14), not like collapsed routing (~1)."""
    out = tmp_path / "m.gguf"
    assert run_tool("deepseek2-tiny", out, "--vocab", small_vocab(tmp_path / "v.gguf")).returncode == 0
    t = {x.name: x for x in gguf.GGUFReader(str(out)).tensors}
    emb = gguf.quants.dequantize(np.asarray(t["token_embd.weight"].data), Q.Q8_0)[:64].astype(np.float64)
    router = np.asarray(t["blk.1.ffn_gate_inp.weight"].data, dtype=np.float64)
    bias = np.asarray(t["blk.1.exp_probs_b.bias"].data, dtype=np.float64)
    score = 1 / (1 + np.exp(-(rms_norm(emb) @ router.T))) + bias
    top = [set(np.argsort(-s)[:4]) for s in score]
    jac = [len(a & b) / len(a | b) for i, a in enumerate(top) for b in top[i + 1:]]
    assert np.mean(jac) < 0.3, np.mean(jac)
    assert len(set().union(*top)) == 16


def test_layers_and_dense(tmp_path):
    vocab = small_vocab(tmp_path / "v.gguf")
    out = tmp_path / "m2.gguf"
    p = run_tool("deepseek2-tiny", out, "--vocab", vocab, "--layers", "2")
    assert p.returncode == 0, p.stderr
    check_file(out, "deepseek2-tiny", 2, 1, Q.Q4_K)
    p = run_tool("deepseek2-tiny", out, "--vocab", vocab, "--layers", "2", "--dense", "0")
    assert p.returncode == 0, p.stderr
    check_file(out, "deepseek2-tiny", 2, 0, Q.Q4_K)
    bad = run_tool("deepseek2-tiny", tmp_path / "bad.gguf", "--vocab", vocab, "--layers", "1")
    assert bad.returncode != 0 and "MoE layer" in bad.stderr
    assert not (tmp_path / "bad.gguf").exists()


def test_pad_vocab(tmp_path):
    """--pad-vocab: the vocab file's 512 tokens, then unused ones up to the model's 600."""
    out = tmp_path / "m.gguf"
    p = run_tool("deepseek2-tiny", out, "--vocab", small_vocab(tmp_path / "v.gguf"), "--pad-vocab")
    assert p.returncode == 0, p.stderr
    r = check_file(out, "deepseek2-tiny", 3, 1, Q.Q4_K, n_vocab=600)
    toks, types = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
    assert toks.contents(0) == "<|endoftext|>" and toks.contents(511) == "t510"
    assert len(set(toks.contents())) == 600
    assert list(types.contents()[:2]) == [3, 1] and set(types.contents()[512:]) == {5}


def load_tool():
    spec = importlib.util.spec_from_file_location("synth_arch_t", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_chunks_and_jobs(tmp_path, monkeypatch):
    """Tensors made in many chunks by 1 or 2 processes: the same bytes, each chunk its own."""
    synth = shared_file("bench/synth_moe.py")
    vocab = small_vocab(tmp_path / "v.gguf")
    mod = load_tool()
    monkeypatch.setitem(sys.modules, mod.__name__, mod)  # the worker processes' jobs name it
    monkeypatch.setattr(mod, "CHUNK_BYTES", 20000)
    for jobs in (1, 2):
        monkeypatch.setattr(sys, "argv", ["synth_arch.py", "deepseek2-tiny", str(tmp_path / f"j{jobs}.gguf"),
                                          "--vocab", str(vocab), "--synth", str(synth), "--jobs", str(jobs)])
        mod.main()
    a, b = (tmp_path / "j1.gguf").read_bytes(), (tmp_path / "j2.gguf").read_bytes()
    assert a == b
    r = check_file(tmp_path / "j1.gguf", "deepseek2-tiny", 3, 1, Q.Q4_K)
    x = np.asarray({t.name: t for t in r.tensors}["blk.1.ffn_up_exps.weight"].data)
    rows = x.reshape(-1, x.shape[-1])
    per_chunk = 20000 // rows.shape[1]
    assert not np.array_equal(rows[:per_chunk], rows[per_chunk:2 * per_chunk])


def dry_run(preset, *extra):
    p = run_tool(preset, *extra, "--dry-run")
    assert p.returncode == 0, p.stderr
    rows = {}
    for line in p.stdout.splitlines():
        m = re.match(r"(\S+\.(?:weight|bias)|blk\.\d+\.ssm_a)\s+(\w+)\s+\[([\d, ]+)\]\s+(\d+)$", line)
        if m:
            rows[m[1]] = (tuple(int(v) for v in m[3].split(",")), Q[m[2]], int(m[4]))
    return p.stdout, rows


def nbytes(ne, qt):
    per, size = gguf.GGML_QUANT_SIZES[qt]
    return int(np.prod(ne)) // per * size


@pytest.mark.parametrize("preset,extra,layers,dense", [
    ("deepseek-v2-lite", [], 27, 1), ("deepseek-v3", [], 4, 1), ("kimi-k2", [], 4, 1),
    ("deepseek-v3", ["--layers", "61"], 61, 3), ("deepseek-v3", ["--layers", "8", "--dense", "3"], 8, 3)])
def test_dry_run_real_shapes(tmp_path, preset, extra, layers, dense):
    c = cfg(preset)
    out, rows = dry_run(preset, tmp_path / "never.gguf", *extra)
    want = expected_tensors(c, layers, dense, c["vocab"], Q.Q4_K)
    assert {k: v[:2] for k, v in rows.items()} == {k: v[:2] for k, v in want.items()}
    assert all(rows[k][2] == nbytes(*want[k][:2]) for k in want)
    total = sum(nbytes(ne, qt) for ne, qt, _ in want.values())
    assert f"weights {total} bytes" in out, out
    full = sum(nbytes(ne, qt) for ne, qt, _ in
               expected_tensors(c, c["n_layer"], c["n_dense"], c["vocab"], Q.Q4_K).values())
    assert f"vocab {c['vocab']}): {full / 2**30:.2f} GiB" in out, out
    expert = sum(nbytes(*want[f"blk.{dense}.ffn_{k}_exps.weight"][:2]) for k in ("gate", "up", "down"))
    per_token = c["n_used"] * (expert // c["n_exp"]) * (layers - dense)
    assert f"expert bytes per token {per_token} " in out
    assert not (tmp_path / "never.gguf").exists()


# ---- glm4moe and gpt-oss ----------------------------------------------------------------------
# the models' config.json values (test-side copy). glm4moe: layers, embd, heads, KV heads,
# head_dim, rope dims (head_dim * partial_rotary_factor), use_qk_norm, intermediate_size,
# first_k_dense_replace, n_routed_experts, num_experts_per_tok, moe_intermediate_size,
# routed_scaling_factor, rope_theta, vocab, ctx
GLM_CONFIGS = {
    "glm-4.5-air": (46, 4096, 96, 8, 128, 64, False, 10944, 1, 128, 8, 1408, 1.0, 1e6, 151552, 131072),
    "glm-4.5": (92, 5120, 96, 8, 128, 64, True, 12288, 3, 160, 8, 1536, 2.5, 1e6, 151552, 131072),
    "glm4moe-air-tiny": (3, 256, 4, 2, 64, 32, False, 544, 1, 16, 4, 352, 1.0, 1e6, 600, 4096),
    "glm4moe-tiny": (4, 256, 4, 2, 64, 32, True, 512, 2, 20, 4, 256, 2.5, 1e6, 600, 4096),
}
GLM_KEYS = "n_layer e nh nkv hd rope qk_norm n_ff n_dense n_exp n_used n_ffe scale base vocab ctx"
# gpt-oss: layers, embd, heads, KV heads, head_dim, experts, experts per token, intermediate_size,
# sliding_window, vocab, ctx (all: rope_theta 150000, yarn factor 32 of 4096, beta 32 / 1)
OSS_CONFIGS = {
    "gpt-oss-20b": (24, 2880, 64, 8, 64, 32, 4, 2880, 128, 201088, 131072),
    "gpt-oss-120b": (36, 2880, 64, 8, 64, 128, 4, 2880, 128, 201088, 131072),
    "gpt-oss-tiny": (3, 192, 4, 2, 32, 16, 4, 160, 16, 600, 4096),
}
OSS_KEYS = "n_layer e nh nkv hd n_exp n_used n_ffe swa vocab ctx"
# llama-quant.cpp's tensor_type_fallback, and the block sizes
FALLBACK_ALL = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0, Q.Q3_K: Q.Q4_0, Q.Q2_K: Q.Q4_0}


def want_type(mix, name, cols, n_all):
    """The stored type of a matrix: mix an experts type (every other matrix Q8_0) or "q3_k_m"
    (llama-quant.cpp's Q3_K_M rules for a model of more than 8 experts), then the fallback."""
    if mix == "q3_k_m":
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        if name == "output.weight":
            t = Q.Q6_K
        elif name.endswith("attn_v.weight"):  # i_attention_wv < 2
            t = Q.Q5_K if layer < 2 else Q.Q4_K
        elif name.endswith("attn_output.weight"):
            t = Q.Q4_K
        elif ".ffn_down" in name:  # i_layer < n_ffn_down / 16, n_ffn_down = block_count
            t = Q.Q5_K if layer < n_all // 16 else Q.Q4_K
        else:
            t = Q.Q3_K
    else:
        t = mix if name.endswith("_exps.weight") else Q.Q8_0
    if cols % gguf.GGML_QUANT_SIZES[t][0]:
        t = FALLBACK_ALL[t]
    return t


def glm_tensors(c, n_layer, n_dense, n_vocab, mix, n_mtp):
    """name -> (ne, type, std: None for F32 ones)."""
    e, nh, nkv, hd = c["e"], c["nh"], c["nkv"], c["hd"]
    n_all = n_layer + n_mtp
    spec = {"token_embd.weight": ((e, n_vocab), 1.0), "output_norm.weight": ((e,), None),
            "output.weight": ((e, n_vocab), 1e-3 * Q8_RMS)}
    for i in range(n_all):
        b = f"blk.{i}."
        spec.update({b + "attn_norm.weight": ((e,), None),
                     b + "attn_q.weight": ((e, nh * hd), e ** -0.5), b + "attn_q.bias": ((nh * hd,), 0.02),
                     b + "attn_k.weight": ((e, nkv * hd), e ** -0.5), b + "attn_k.bias": ((nkv * hd,), 0.02),
                     b + "attn_v.weight": ((e, nkv * hd), e ** -0.5), b + "attn_v.bias": ((nkv * hd,), 0.02),
                     b + "attn_output.weight": ((nh * hd, e), 0.1 * (nh * hd) ** -0.5),
                     b + "post_attention_norm.weight": ((e,), None)})
        if c["qk_norm"]:
            spec[b + "attn_q_norm.weight"] = spec[b + "attn_k_norm.weight"] = ((hd,), None)
        if i < n_dense:
            f = c["n_ff"]
            spec.update({b + "ffn_gate.weight": ((e, f), e ** -0.5), b + "ffn_up.weight": ((e, f), e ** -0.5),
                         b + "ffn_down.weight": ((f, e), 0.1 * f ** -0.5)})
        else:
            n, f = c["n_exp"], c["n_ffe"]
            spec.update({b + "ffn_gate_inp.weight": ((e, n), 0.05 * (2048 / e) ** 0.5),
                         b + "exp_probs_b.bias": ((n,), 0.01),
                         b + "ffn_gate_exps.weight": ((e, f, n), e ** -0.5),
                         b + "ffn_up_exps.weight": ((e, f, n), e ** -0.5),
                         b + "ffn_down_exps.weight": ((f, e, n), 0.1 * f ** -0.5),
                         b + "ffn_gate_shexp.weight": ((e, f), e ** -0.5),
                         b + "ffn_up_shexp.weight": ((e, f), e ** -0.5),
                         b + "ffn_down_shexp.weight": ((f, e), 0.1 * f ** -0.5)})
        if i >= n_layer:  # the MTP layer's own parts, as GLM's checkpoints have them
            spec.update({b + "nextn.eh_proj.weight": ((2 * e, e), (2 * e) ** -0.5),
                         b + "nextn.enorm.weight": ((e,), None), b + "nextn.hnorm.weight": ((e,), None),
                         b + "nextn.shared_head_norm.weight": ((e,), None)})
    return {k: (ne, typed(k, ne, mix, n_all), std) for k, (ne, std) in spec.items()}


def typed(name, ne, mix, n_all):
    f32 = len(ne) == 1 or name.endswith((".bias", "ffn_gate_inp.weight"))
    return Q.F32 if f32 else want_type(mix, name, ne[0], n_all)


def glm_keys(c, n_layer, n_dense, n_vocab, ftype, n_mtp):
    a = "glm4moe."
    k = {"general.architecture": (STR, "glm4moe"), a + "block_count": (U32, n_layer + n_mtp),
         a + "context_length": (U32, c["ctx"]), a + "embedding_length": (U32, c["e"]),
         a + "feed_forward_length": (U32, c["n_ff"]), a + "attention.head_count": (U32, c["nh"]),
         a + "attention.head_count_kv": (U32, c["nkv"]), a + "attention.layer_norm_rms_epsilon": (F32, 1e-5),
         a + "attention.key_length": (U32, c["hd"]), a + "attention.value_length": (U32, c["hd"]),
         a + "rope.dimension_count": (U32, c["rope"]), a + "rope.freq_base": (F32, c["base"]),
         a + "expert_count": (U32, c["n_exp"]), a + "expert_used_count": (U32, c["n_used"]),
         a + "expert_feed_forward_length": (U32, c["n_ffe"]), a + "expert_shared_count": (U32, 1),
         a + "leading_dense_block_count": (U32, n_dense), a + "expert_gating_func": (U32, 2),
         a + "expert_weights_scale": (F32, c["scale"]), a + "expert_weights_norm": (BOOL, True),
         a + "vocab_size": (U32, n_vocab), "general.file_type": (U32, int(ftype))}
    if n_mtp:
        k[a + "nextn_predict_layers"] = (U32, n_mtp)
    return k


def oss_tensors(c, n_layer, n_vocab, mix):
    e, nh, nkv, hd, n, f = c["e"], c["nh"], c["nkv"], c["hd"], c["n_exp"], c["n_ffe"]
    spec = {"token_embd.weight": ((e, n_vocab), 1.0), "output_norm.weight": ((e,), None),
            "output.weight": ((e, n_vocab), 1e-3 * Q8_RMS)}
    for i in range(n_layer):
        b = f"blk.{i}."
        spec.update({b + "attn_norm.weight": ((e,), None),
                     b + "attn_q.weight": ((e, nh * hd), e ** -0.5), b + "attn_q.bias": ((nh * hd,), 0.02),
                     b + "attn_k.weight": ((e, nkv * hd), e ** -0.5), b + "attn_k.bias": ((nkv * hd,), 0.02),
                     b + "attn_v.weight": ((e, nkv * hd), e ** -0.5), b + "attn_v.bias": ((nkv * hd,), 0.02),
                     b + "attn_output.weight": ((nh * hd, e), 0.1 * (nh * hd) ** -0.5),
                     b + "attn_output.bias": ((e,), 0.01), b + "attn_sinks.weight": ((nh,), 0.1),
                     b + "post_attention_norm.weight": ((e,), None),
                     b + "ffn_gate_inp.weight": ((e, n), 0.05 * (2048 / e) ** 0.5),
                     b + "ffn_gate_inp.bias": ((n,), 0.01),
                     b + "ffn_gate_exps.weight": ((e, f, n), e ** -0.5), b + "ffn_gate_exps.bias": ((f, n), 0.02),
                     b + "ffn_up_exps.weight": ((e, f, n), e ** -0.5), b + "ffn_up_exps.bias": ((f, n), 0.02),
                     b + "ffn_down_exps.weight": ((f, e, n), 0.1 * f ** -0.5),
                     b + "ffn_down_exps.bias": ((e, n), 0.01)})
    return {k: (ne, Q.F32 if len(ne) == 1 or k.endswith((".bias", "ffn_gate_inp.weight", "attn_sinks.weight"))
                else want_type(mix, k, ne[0], n_layer), std) for k, (ne, std) in spec.items()}


def oss_keys(c, n_layer, ftype):
    a = "gpt-oss."
    return {"general.architecture": (STR, "gpt-oss"), a + "block_count": (U32, n_layer),
            a + "context_length": (U32, c["ctx"]), a + "embedding_length": (U32, c["e"]),
            a + "feed_forward_length": (U32, c["n_ffe"]), a + "attention.head_count": (U32, c["nh"]),
            a + "attention.head_count_kv": (U32, c["nkv"]), a + "attention.layer_norm_rms_epsilon": (F32, 1e-5),
            a + "attention.key_length": (U32, c["hd"]), a + "attention.value_length": (U32, c["hd"]),
            a + "rope.dimension_count": (U32, c["hd"]), a + "rope.freq_base": (F32, 150000.0),
            a + "rope.scaling.type": (STR, "yarn"), a + "rope.scaling.factor": (F32, 32.0),
            a + "rope.scaling.original_context_length": (U32, 4096),
            a + "rope.scaling.yarn_beta_fast": (F32, 32.0), a + "rope.scaling.yarn_beta_slow": (F32, 1.0),
            a + "attention.sliding_window": (U32, c["swa"]), a + "expert_count": (U32, c["n_exp"]),
            a + "expert_used_count": (U32, c["n_used"]), a + "expert_feed_forward_length": (U32, c["n_ffe"]),
            "general.file_type": (U32, int(ftype))}


def glm_cfg(preset):
    return dict(zip(GLM_KEYS.split(), GLM_CONFIGS[preset]))


def oss_cfg(preset):
    return dict(zip(OSS_KEYS.split(), OSS_CONFIGS[preset]))


FTYPES = {"q3_k_m": gguf.LlamaFileType.MOSTLY_Q3_K_M, "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_M,
          "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "mxfp4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE}
MIXES = {"q3_k_m": "q3_k_m", "q4_k": Q.Q4_K, "q8_0": Q.Q8_0, "mxfp4": Q.MXFP4}


def contract(preset, n_layer, n_dense, n_vocab, etype, n_mtp):
    """(keys, tensors) a file of preset should have."""
    if preset in GLM_CONFIGS:
        c = glm_cfg(preset)
        return (glm_keys(c, n_layer, n_dense, n_vocab, FTYPES[etype], n_mtp),
                glm_tensors(c, n_layer, n_dense, n_vocab, MIXES[etype], n_mtp))
    c = oss_cfg(preset)
    return oss_keys(c, n_layer, FTYPES[etype]), oss_tensors(c, n_layer, n_vocab, MIXES[etype])


@pytest.mark.parametrize("preset,etype,extra,layers,dense,mtp", [
    ("glm4moe-air-tiny", "q3_k_m", [], 3, 1, 1), ("glm4moe-air-tiny", "q4_k", [], 3, 1, 1),
    ("glm4moe-air-tiny", "q3_k_m", ["--no-mtp"], 3, 1, 0), ("glm4moe-tiny", "q3_k_m", [], 4, 2, 1),
    ("glm4moe-tiny", "q8_0", ["--layers", "3", "--dense", "1"], 3, 1, 1),
    ("gpt-oss-tiny", "mxfp4", [], 3, 0, 0), ("gpt-oss-tiny", "q8_0", ["--layers", "2"], 2, 0, 0)])
def test_tiny_glm_oss(tmp_path, preset, etype, extra, layers, dense, mtp):
    out = tmp_path / "m.gguf"
    p = run_tool(preset, out, "--vocab", small_vocab(tmp_path / "v.gguf"), "--experts-type", etype, *extra)
    assert p.returncode == 0, p.stderr
    assert "expert bytes per token" in p.stderr and "std/target" in p.stderr
    keys, tensors = contract(preset, layers, dense, 512, etype, mtp)
    check_contents(out, keys["general.architecture"][1], keys, tensors, 512)


def test_q3_k_m_first_layers(tmp_path):
    """block_count 32: the down projections of layers 0 and 1 (32 // 16) in Q5_K, here Q5_1 (rows
    of 544 and 352), the attn_v of layers 0 and 1 in Q5_K; written, zero-mean, and loaded."""
    out = tmp_path / "m.gguf"
    p = run_tool("glm4moe-air-tiny", out, "--vocab", small_vocab(tmp_path / "v.gguf"), "--layers", "31")
    assert p.returncode == 0, p.stderr
    keys, tensors = contract("glm4moe-air-tiny", 31, 1, 512, "q3_k_m", 1)
    assert tensors["blk.0.ffn_down.weight"][1] == Q.Q5_1 and tensors["blk.1.ffn_down_exps.weight"][1] == Q.Q5_1
    assert tensors["blk.2.ffn_down_exps.weight"][1] == Q.Q5_0 and tensors["blk.1.attn_v.weight"][1] == Q.Q5_K
    check_contents(out, "glm4moe", keys, tensors, 512)
    decode_with_strata(out)


def decode_with_strata(path):
    """The CLI's bench (16 prompt tokens, 4 decoded) on the file, then strata.Model's route trace
    of 24 tokens: finite logits, and in every MoE layer the tokens spread over the experts."""
    import os
    cli = os.environ.get("STRATA_CLI", str(REPO / "strata"))
    if not os.path.exists(cli):
        pytest.skip(f"strata CLI not built at {cli}")
    p = subprocess.run([cli, "bench", "-m", str(path), "-p", "16", "-n", "4", "-r", "1", "-t", "2"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "tg4" in p.stdout, p.stderr[-2000:]
    import strata
    with strata.Model(str(path), n_ctx=64, n_threads=2) as m:
        lg = m.logits(list(range(1, 9)))
        assert np.isfinite(lg).all() and lg.std() > 0
        recs = m.route_trace(list(range(1, 25)))
        n_exp = m.info["n_expert"]
    by_layer = {}
    for r in recs:
        by_layer.setdefault(r["layer"], set()).update(r["ids"])
    assert by_layer, "no MoE layer traced"
    for layer, used in by_layer.items():  # 24 tokens x top-4 of 16-20 experts: most get used
        assert len(used) >= n_exp // 2, (layer, sorted(used))


@pytest.mark.parametrize("preset,extra", [("glm4moe-air-tiny", []), ("glm4moe-tiny", []),
                                          ("gpt-oss-tiny", []), ("deepseek2-tiny", []),
                                          ("deepseek2-lite-tiny", []), ("glm4moe-air-tiny", ["--no-mtp"])])
def test_strata_loads_and_decodes(tmp_path, preset, extra):
    out = tmp_path / "m.gguf"
    p = run_tool(preset, out, "--vocab", small_vocab(tmp_path / "v.gguf"), *extra)
    assert p.returncode == 0, p.stderr
    decode_with_strata(out)
    if preset.startswith("glm4moe") and "--no-mtp" not in extra:
        spec_mtp_cli(out)


def spec_mtp_cli(path):
    """`strata run --spec mtp` on a file with an MTP layer: the start-up line says where the layer
    runs (a CPU session: on the CPU), and greedy text with MTP drafts is plain greedy's."""
    import os
    cli = os.environ.get("STRATA_CLI", str(REPO / "strata"))
    args = [cli, "run", "-m", str(path), "-p", "a b c", "-n", "12", "--temp", "0", "-t", "2", "--ignore-eos"]
    plain = subprocess.run(args, capture_output=True, text=True, timeout=300)
    mtp = subprocess.run(args + ["--spec", "mtp", "--draft-max", "3"], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and mtp.returncode == 0, (plain.stderr[-1500:], mtp.stderr[-1500:])
    assert "MTP drafts: the model's MTP layer on the CPU, up to 3 a window" in mtp.stderr, mtp.stderr[-1500:]
    assert mtp.stdout == plain.stdout
    import strata  # the same from Python: generate(speculative="mtp")
    with strata.Model(str(path), n_ctx=128, n_threads=2) as m:
        want = m.generate_text("a b c", 12, temperature=0, ignore_eos=True)
        assert m.generate_text("a b c", 12, temperature=0, ignore_eos=True, speculative="mtp", draft_max=3) == want
        d = m.last_stats["drafters"]
        assert [x["name"] for x in d] == ["mtp"] and d[0]["describe"] == "MTP drafts: the model's MTP layer on the CPU"
        assert m.last_stats["spec_windows"] > 0


@pytest.mark.parametrize("preset,extra,layers,dense,mtp", [
    ("glm-4.5-air", [], 46, 1, 1), ("glm-4.5-air", ["--no-mtp"], 46, 1, 0), ("glm-4.5", [], 4, 1, 1),
    ("glm-4.5", ["--layers", "92"], 92, 3, 1), ("gpt-oss-20b", [], 24, 0, 0), ("gpt-oss-120b", [], 4, 0, 0),
    ("gpt-oss-120b", ["--layers", "36"], 36, 0, 0)])
def test_dry_run_glm_oss(tmp_path, preset, extra, layers, dense, mtp):
    glm = preset in GLM_CONFIGS
    c = glm_cfg(preset) if glm else oss_cfg(preset)
    etype = "q3_k_m" if glm else "mxfp4"
    out, rows = dry_run(preset, tmp_path / "never.gguf", *extra)
    _, want = contract(preset, layers, dense, c["vocab"], etype, mtp)
    assert {k: v[:2] for k, v in rows.items()} == {k: v[:2] for k, v in want.items()}
    assert all(rows[k][2] == nbytes(*want[k][:2]) for k in want)
    total = sum(nbytes(ne, qt) for ne, qt, _ in want.values())
    assert f"weights {total} bytes" in out, out
    _, full_want = contract(preset, c["n_layer"], c.get("n_dense", 0), c["vocab"], etype, mtp)
    full = sum(nbytes(ne, qt) for ne, qt, _ in full_want.values())
    assert f"vocab {c['vocab']}): {full / 2**30:.2f} GiB" in out, out
    per_token = sum(c["n_used"] * nbytes(ne, qt) // c["n_exp"] for k, (ne, qt, _) in want.items()
                    if "_exps." in k and int(k.split(".")[1]) < layers)
    assert f"expert bytes per token {per_token} " in out, out
    assert not (tmp_path / "never.gguf").exists()


# ---- qwen3next ---------------------------------------------------------------------------------
# Qwen3-Next-80B-A3B's config.json (test-side copy): layers, hidden_size, heads, KV heads, head_dim,
# rope dims (head_dim * partial_rotary_factor 0.25), rope_theta, intermediate_size, num_experts,
# num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
# full_attention_interval, linear_conv_kernel_dim, linear_num_key_heads, linear_num_value_heads,
# linear_key_head_dim (= linear_value_head_dim), vocab, max_position_embeddings (rms_norm_eps 1e-6)
QN_CONFIGS = {
    "qwen3-next-80b": (48, 2048, 16, 2, 256, 64, 1e7, 5120, 512, 10, 512, 512, 4, 4, 16, 32, 128,
                       151936, 262144),
    "qwen3next-tiny": (4, 256, 4, 2, 64, 16, 1e7, 512, 16, 4, 256, 256, 2, 4, 2, 4, 64, 600, 4096),
}
QN_KEYS = "n_layer e nh nkv hd rope base n_ff n_exp n_used n_ffe n_ffs interval conv lk lv d vocab ctx"


def qn_cfg(preset):
    return dict(zip(QN_KEYS.split(), QN_CONFIGS[preset]))


def qn_type(mix, name, n_all):
    """llama-quant.cpp for a qwen3next matrix: with "q3_k_m", attn_qkv is attn_v-like
    (category_is_attn_v catches ATTENTION_QKV first) and shares i_attention_wv with attn_v, which
    counts in layer order, one a layer here: Q5_K in layers 0 and 1; attn_gate, ssm_ba and ssm_out
    have no rule (Q3_K). Otherwise the routed experts in mix, every other matrix Q8_0."""
    if mix == "q3_k_m" and name.endswith("attn_qkv.weight"):
        return Q.Q5_K if int(name.split(".")[1]) < 2 else Q.Q4_K
    return want_type(mix, name, 256, n_all)  # every qwen3next row length is a multiple of 256


def qn_tensors(c, n_layer, n_vocab, mix):
    """name -> (ne, type, std): std None for F32 ones, ("negexp", s) for -exp(N(0, s))."""
    e, nh, nkv, hd, d = c["e"], c["nh"], c["nkv"], c["hd"], c["d"]
    n, f, fs = c["n_exp"], c["n_ffe"], c["n_ffs"]
    conv, inner = 2 * c["lk"] * d + c["lv"] * d, c["lv"] * d
    router = 0.05 * (2048 / e) ** 0.5
    f32 = set()  # F32 matrices: the routers and conv1d
    spec = {"token_embd.weight": ((e, n_vocab), 1.0), "output_norm.weight": ((e,), None),
            "output.weight": ((e, n_vocab), 1e-3 * Q8_RMS)}
    for i in range(n_layer):
        b = f"blk.{i}."
        spec[b + "attn_norm.weight"] = ((e,), None)
        if (i + 1) % c["interval"] == 0:  # gated full attention
            spec.update({b + "attn_q.weight": ((e, 2 * nh * hd), e ** -0.5),
                         b + "attn_k.weight": ((e, nkv * hd), e ** -0.5),
                         b + "attn_v.weight": ((e, nkv * hd), e ** -0.5),
                         b + "attn_output.weight": ((nh * hd, e), 0.1 * (nh * hd) ** -0.5),
                         b + "attn_q_norm.weight": ((hd,), None), b + "attn_k_norm.weight": ((hd,), None)})
        else:  # gated DeltaNet
            spec.update({b + "ssm_a": ((c["lv"],), ("negexp", 0.5)),
                         b + "ssm_conv1d.weight": ((c["conv"], conv), 0.5),
                         b + "ssm_dt.bias": ((c["lv"],), None),
                         b + "ssm_ba.weight": ((e, 2 * c["lv"]), e ** -0.5),
                         b + "attn_qkv.weight": ((e, conv), e ** -0.5),
                         b + "attn_gate.weight": ((e, inner), e ** -0.5),
                         b + "ssm_norm.weight": ((d,), None),
                         b + "ssm_out.weight": ((inner, e), 0.1 * inner ** -0.5)})
            f32.add(b + "ssm_conv1d.weight")
        spec.update({b + "post_attention_norm.weight": ((e,), None),
                     b + "ffn_gate_inp.weight": ((e, n), router),
                     b + "ffn_gate_exps.weight": ((e, f, n), e ** -0.5),
                     b + "ffn_up_exps.weight": ((e, f, n), e ** -0.5),
                     b + "ffn_down_exps.weight": ((f, e, n), 0.1 * f ** -0.5),
                     b + "ffn_gate_shexp.weight": ((e, fs), e ** -0.5),
                     b + "ffn_up_shexp.weight": ((e, fs), e ** -0.5),
                     b + "ffn_down_shexp.weight": ((fs, e), 0.1 * fs ** -0.5),
                     b + "ffn_gate_inp_shexp.weight": ((e, 1), router)})
        f32 |= {b + "ffn_gate_inp.weight", b + "ffn_gate_inp_shexp.weight"}
    return {k: (ne, Q.F32 if len(ne) == 1 or k in f32 else qn_type(mix, k, n_layer), std)
            for k, (ne, std) in spec.items()}


def qn_keys(c, n_layer, ftype):
    a = "qwen3next."
    return {"general.architecture": (STR, "qwen3next"), a + "block_count": (U32, n_layer),
            a + "context_length": (U32, c["ctx"]), a + "embedding_length": (U32, c["e"]),
            a + "feed_forward_length": (U32, c["n_ff"]), a + "attention.head_count": (U32, c["nh"]),
            a + "attention.head_count_kv": (U32, c["nkv"]), a + "attention.layer_norm_rms_epsilon": (F32, 1e-6),
            a + "attention.key_length": (U32, c["hd"]), a + "attention.value_length": (U32, c["hd"]),
            a + "rope.dimension_count": (U32, c["rope"]), a + "rope.freq_base": (F32, c["base"]),
            a + "expert_count": (U32, c["n_exp"]), a + "expert_used_count": (U32, c["n_used"]),
            a + "expert_feed_forward_length": (U32, c["n_ffe"]),
            a + "expert_shared_feed_forward_length": (U32, c["n_ffs"]),
            a + "ssm.conv_kernel": (U32, c["conv"]), a + "ssm.state_size": (U32, c["d"]),
            a + "ssm.group_count": (U32, c["lk"]), a + "ssm.time_step_rank": (U32, c["lv"]),
            a + "ssm.inner_size": (U32, c["lv"] * c["d"]),
            a + "full_attention_interval": (U32, c["interval"]), "general.file_type": (U32, int(ftype))}


def check_qwen3next(path, preset, n_layer, etype, n_vocab=512):
    """check_contents with ssm_a's -exp(N(0, 0.5)) checked apart (negative, log(-a) in range)."""
    c = qn_cfg(preset)
    want = qn_tensors(c, n_layer, n_vocab, MIXES[etype])
    negexp = {k: v for k, v in want.items() if isinstance(v[2], tuple)}
    r = check_contents(path, "qwen3next", qn_keys(c, n_layer, FTYPES[etype]),
                       {k: v for k, v in want.items() if k not in negexp}, n_vocab, extra=set(negexp))
    t = {x.name: x for x in r.tensors}
    logs = []
    for name, (ne, qt, (_, s)) in negexp.items():
        x = t[name]
        assert tuple(int(v) for v in x.shape) == ne and x.tensor_type == qt, name
        a = np.asarray(x.data, dtype=np.float64)
        assert (a < 0).all(), name
        logs.append(np.log(-a))
    logs = np.concatenate(logs)  # n_v_heads values a layer: too few for a spread, so N(0, 0.5)'s
    assert np.abs(logs).max() < 5 * 0.5 and logs.std() > 0.1, logs  # 5-sigma range, not constant
    return r


@pytest.mark.parametrize("etype", ["q3_k_m", "q4_k"])
def test_tiny_qwen3next(tmp_path, etype):
    out = tmp_path / "m.gguf"
    p = run_tool("qwen3next-tiny", out, "--vocab", small_vocab(tmp_path / "v.gguf"), "--experts-type", etype)
    assert p.returncode == 0, p.stderr
    assert "expert bytes per token" in p.stderr and "std/target" in p.stderr
    r = check_qwen3next(out, "qwen3next-tiny", 4, etype)
    types = {x.name: x.tensor_type for x in r.tensors}
    if etype == "q3_k_m":  # the first two attn_v-like tensors, one of each kind at interval 2
        assert types["blk.0.attn_qkv.weight"] == types["blk.1.attn_v.weight"] == Q.Q5_K
        assert types["blk.2.attn_qkv.weight"] == types["blk.3.attn_v.weight"] == Q.Q4_K
    decode_with_strata(out)


@pytest.mark.parametrize("layers", [48, 12])
def test_dry_run_qwen3next(tmp_path, layers):
    c = qn_cfg("qwen3-next-80b")
    out, rows = dry_run("qwen3-next-80b", tmp_path / "never.gguf", *(["--layers", str(layers)] if layers != 48 else []))
    want = qn_tensors(c, layers, c["vocab"], "q3_k_m")
    assert {k: v[:2] for k, v in rows.items()} == {k: v[:2] for k, v in want.items()}
    assert all(rows[k][2] == nbytes(*want[k][:2]) for k in want)
    total = sum(nbytes(ne, qt) for ne, qt, _ in want.values())
    assert f"weights {total} bytes" in out, out
    full = sum(nbytes(ne, qt) for ne, qt, _ in qn_tensors(c, 48, c["vocab"], "q3_k_m").values())
    assert f"vocab {c['vocab']}): {full / 2**30:.2f} GiB" in out, out
    per_token = sum(c["n_used"] * nbytes(ne, qt) // c["n_exp"] for k, (ne, qt, _) in want.items() if "_exps." in k)
    assert f"expert bytes per token {per_token} " in out, out
    n_down5 = layers // 16  # llama.cpp: down projections Q5_K below block_count / 16
    assert [want[f"blk.{i}.ffn_down_exps.weight"][1] for i in range(4)] == \
        [Q.Q5_K] * min(4, n_down5) + [Q.Q4_K] * (4 - min(4, n_down5))
    assert want["blk.3.attn_v.weight"][1] == Q.Q4_K and want["blk.1.attn_qkv.weight"][1] == Q.Q5_K
    assert not (tmp_path / "never.gguf").exists()


def qn_hf_state(r, c):
    """The HF checkpoint (Qwen3NextForCausalLM names) of a written qwen3next file: the inverse of
    tools/convert_hf.py's mapping (norms scaled by 1 + w there, so w - 1 here, the DeltaNet's own
    norm aside; in_proj_qkvz regrouped per key head as [q, k, v, z]; A_log = log(-ssm_a))."""
    w = {x.name: gguf.quants.dequantize(np.asarray(x.data), x.tensor_type).astype(np.float32)
         .reshape(tuple(reversed([int(v) for v in x.shape]))) for x in r.tensors}
    sd = {"model.embed_tokens.weight": w["token_embd.weight"], "lm_head.weight": w["output.weight"],
          "model.norm.weight": w["output_norm.weight"] - 1}
    nk, dk, rv = c["lk"], c["d"], c["lv"] // c["lk"] * c["d"]
    for i in range(c["n_layer"]):
        b, h = f"blk.{i}.", f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = w[b + "attn_norm.weight"] - 1
        sd[h + "post_attention_layernorm.weight"] = w[b + "post_attention_norm.weight"] - 1
        if (i + 1) % c["interval"] == 0:
            for g, hf in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")):
                sd[h + f"self_attn.{hf}_proj.weight"] = w[b + f"attn_{g}.weight"]
            sd[h + "self_attn.q_norm.weight"] = w[b + "attn_q_norm.weight"] - 1
            sd[h + "self_attn.k_norm.weight"] = w[b + "attn_k_norm.weight"] - 1
        else:
            qkv, e = w[b + "attn_qkv.weight"], c["e"]
            parts = [qkv[:nk * dk].reshape(nk, dk, e), qkv[nk * dk:2 * nk * dk].reshape(nk, dk, e),
                     qkv[2 * nk * dk:].reshape(nk, rv, e), w[b + "attn_gate.weight"].reshape(nk, rv, e)]
            a = h + "linear_attn."
            sd.update({a + "in_proj_qkvz.weight": np.concatenate(parts, axis=1).reshape(-1, e),
                       a + "in_proj_ba.weight": w[b + "ssm_ba.weight"],
                       a + "conv1d.weight": w[b + "ssm_conv1d.weight"][:, None, :],
                       a + "A_log": np.log(-w[b + "ssm_a"]), a + "dt_bias": w[b + "ssm_dt.bias"],
                       a + "norm.weight": w[b + "ssm_norm.weight"], a + "out_proj.weight": w[b + "ssm_out.weight"]})
        m = h + "mlp."
        sd[m + "gate.weight"] = w[b + "ffn_gate_inp.weight"]
        for j in range(c["n_exp"]):
            for g in ("gate", "up", "down"):
                sd[m + f"experts.{j}.{g}_proj.weight"] = w[b + f"ffn_{g}_exps.weight"][j]
        for g in ("gate", "up", "down"):
            sd[m + f"shared_expert.{g}_proj.weight"] = w[b + f"ffn_{g}_shexp.weight"]
        sd[m + "shared_expert_gate.weight"] = w[b + "ffn_gate_inp_shexp.weight"].reshape(1, -1)
    return {k: np.ascontiguousarray(v) for k, v in sd.items()}


def test_qwen3next_hidden_state_against_transformers(tmp_path):
    """The tiny file (Q8_0, so dequantized weights stand for it) read back into transformers'
    Qwen3Next: every layer's output hidden state keeps an rms of ~1 (each block adds ~0.1 or
    less, the DeltaNet's recurrent state held behind its norm), and Strata's logits of the file
    follow transformers' (the file means what the contract says, to both)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import save_file
    out = tmp_path / "m.gguf"
    p = run_tool("qwen3next-tiny", out, "--vocab", small_vocab(tmp_path / "v.gguf"), "--experts-type", "q8_0")
    assert p.returncode == 0, p.stderr
    c = qn_cfg("qwen3next-tiny")
    hf = tmp_path / "hf"
    hf.mkdir()
    save_file(qn_hf_state(gguf.GGUFReader(str(out)), c), str(hf / "model.safetensors"))
    cfg_hf = transformers.Qwen3NextConfig(
        vocab_size=512, hidden_size=c["e"], intermediate_size=c["n_ff"], num_hidden_layers=c["n_layer"],
        num_attention_heads=c["nh"], num_key_value_heads=c["nkv"], head_dim=c["hd"], rms_norm_eps=1e-6,
        max_position_embeddings=c["ctx"], full_attention_interval=c["interval"],
        linear_conv_kernel_dim=c["conv"], linear_key_head_dim=c["d"], linear_value_head_dim=c["d"],
        linear_num_key_heads=c["lk"], linear_num_value_heads=c["lv"], num_experts=c["n_exp"],
        num_experts_per_tok=c["n_used"], moe_intermediate_size=c["n_ffe"],
        shared_expert_intermediate_size=c["n_ffs"], norm_topk_prob=True, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=c["base"], partial_rotary_factor=c["rope"] / c["hd"]),
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg_hf.save_pretrained(str(hf))
    model = transformers.Qwen3NextForCausalLM.from_pretrained(str(hf), dtype=torch.float32).eval()
    ids = [int(t) for t in np.random.default_rng(5).integers(1, 512, size=32)]
    with torch.no_grad():
        res = model(torch.tensor([ids]), output_hidden_states=True)
    rms = [float(h[0].double().pow(2).mean(-1).sqrt().max()) for h in res.hidden_states[:-1]]
    rms_min = [float(h[0].double().pow(2).mean(-1).sqrt().min()) for h in res.hidden_states[:-1]]
    assert max(rms) < 1.5 and min(rms_min) > 0.7, (rms_min, rms)  # embeddings, then each layer's output
    ref = res.logits[0].double().numpy()
    import os
    if not os.environ.get("STRATA_LIB") and not (REPO / "libstrata.so").exists():
        pytest.skip("libstrata.so not built")
    import strata
    with strata.Model(str(out), n_ctx=64, n_threads=2) as m:
        got = m.logits(ids).astype(np.float64)
    err = np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert err.max() < 0.02, err  # Strata's Q8_0 activations against float32
    assert (got.argmax(1) == ref.argmax(1)).mean() > 0.9
