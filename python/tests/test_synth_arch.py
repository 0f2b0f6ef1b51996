"""test_synth_arch.py - bench/synth_arch.py against the deepseek2 GGUF contract, written out here
from the models' configs (not from the script's tables): every key with its value and GGUF type,
every tensor's name, shape (GGUF ne order) and type, for the two tiny presets (V3-style and
V2-Lite-style) and each experts type, with llama.cpp's fallback type for down experts whose rows a
256-block type does not divide (V2-Lite's 1408); every weight zero-mean with the spread its kind should have;
tokens routing to their own experts; --layers / --dense; chunked, multi-process writing giving the
same bytes; and --dry-run's tensor list and byte totals for the full-size presets (nothing written).
The vocab is test_synth_lowbit.py's small one. Skips when ../shared/bench/synth_moe.py is absent."""
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
    """Every key and tensor of a written file against the contract; returns the reader."""
    c = cfg(preset)
    r = gguf.GGUFReader(str(path))
    for key, (vt, want) in expected_keys(c, n_layer, n_dense, n_vocab).items():
        f = r.fields[key]
        assert f.types[0] == vt, key
        got = f.contents()
        assert (got == pytest.approx(want, rel=1e-6)) if vt == F32 else got == want, (key, got, want)
    dsk = {k for k in r.fields if k.startswith("deepseek2.")}
    assert dsk == {k for k in expected_keys(c, n_layer, n_dense, n_vocab) if k.startswith("deepseek2.")}
    assert len(r.fields["tokenizer.ggml.tokens"].data) == n_vocab
    assert len(r.fields["tokenizer.ggml.token_type"].data) == n_vocab
    want = expected_tensors(c, n_layer, n_dense, n_vocab, et)
    t = {x.name: x for x in r.tensors}
    assert set(t) == set(want)
    for name, (ne, qt, std) in want.items():
        x = t[name]
        assert tuple(int(d) for d in x.shape) == ne and x.tensor_type == qt, (name, x.shape, x.tensor_type)
        w = gguf.quants.dequantize(np.asarray(x.data), qt).astype(np.float64)
        assert np.isfinite(w).all(), name
        if std is None:
            assert (w == 1).all(), name
            continue
        if std == "router":
            std = 0.05 * (2048 / c["e"]) ** 0.5
        elif std == "bias":
            std = 0.01
        n = w.size  # tolerances: at least 3-6 sampling errors of a spread / mean of n values
        assert abs(w.std() / std - 1) < max(0.10, 3 / np.sqrt(2 * n)), (name, w.std(), std)
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
        m = re.match(r"(\S+\.(?:weight|bias))\s+(\w+)\s+\[([\d, ]+)\]\s+(\d+)$", line)
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
