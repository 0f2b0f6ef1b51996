"""test_q8_dense_gguf.py - tools/q8_dense_gguf.py: a synthetic MoE file (Q4_K / Q5_K / Q6_K / F16
dense projections and head, Q4_K and Q8_0 routed experts) converted: dense tensors and the head
become Q8_0, dequantized within Q8_0's per-block bound of the original values (gguf.quants on both
sides), every other tensor keeps its type, absolute offset and bytes, the header keeps its length,
offsets stay aligned, `strata info` reads the output; a 2-shard model (the unchanged shard
hard-linked, or copied with --copy; either shard named); the refusals (not a GGUF, output exists,
non-finite weights, a split input with a single-file output name, unknown tensor type); and the
trained default model with Q4_K dense weights keeps its greedy tokens and logits once converted."""
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as Q

from conftest import REPO

TOOL = REPO / "tools" / "q8_dense_gguf.py"
CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
D_OFF = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}  # f16 scale fields of each block
N_EMBD, N_FF, N_EXP, VOCAB = 256, 256, 4, 512


def q_blocks(qtype, rows, cols, rng):
    """Random well-formed blocks (finite f16 scales) as uint8 [rows, row bytes]."""
    bs, bb = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // bs, bb), dtype=np.uint8)
    for off in D_OFF[qtype]:
        raw[:, :, off:off + 2] = np.frombuffer(np.float16(rng.uniform(2e-4, 1e-3)).tobytes(), np.uint8)
    return raw.reshape(rows, -1)


def tensors_of(layers, rng, dense=True, head=True, embd=True):
    """name -> (array, raw_dtype or None) of a small qwen3moe-like model."""
    t = {}
    if embd:
        t["token_embd.weight"] = (gguf.quants.quantize(rng.standard_normal((VOCAB, N_EMBD)).astype(np.float32), Q.Q8_0), Q.Q8_0)
    dense_types = [Q.Q4_K, Q.Q5_K, Q.Q6_K, None]  # None: F16
    for i in layers:
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = (np.ones(N_EMBD, np.float32), None)
        t[b + "ffn_norm.weight"] = (np.ones(N_EMBD, np.float32), None)
        t[b + "ffn_gate_inp.weight"] = (rng.standard_normal((N_EXP, N_EMBD)).astype(np.float32), None)
        if dense:
            for k, kind in enumerate(("attn_q", "attn_k", "attn_v", "attn_output")):
                qt = dense_types[(k + i) % 4]
                if qt is None:
                    t[b + kind + ".weight"] = ((rng.standard_normal((N_EMBD, N_EMBD)) * 0.05).astype(np.float16), None)
                else:
                    t[b + kind + ".weight"] = (q_blocks(qt, N_EMBD, N_EMBD, rng), qt)
        for kind in ("gate", "up", "down"):
            if i % 2 == 0:
                x = q_blocks(Q.Q4_K, N_EXP * N_FF, N_EMBD, rng).reshape(N_EXP, N_FF, -1)
                t[b + f"ffn_{kind}_exps.weight"] = (x, Q.Q4_K)
            else:
                x = gguf.quants.quantize(rng.standard_normal((N_EXP * N_FF, N_EMBD)).astype(np.float32) * 0.02, Q.Q8_0)
                t[b + f"ffn_{kind}_exps.weight"] = (x.reshape(N_EXP, N_FF, -1), Q.Q8_0)
    if head:
        t["output_norm.weight"] = (np.ones(N_EMBD, np.float32), None)
        t["output.weight"] = (q_blocks(Q.Q4_K, VOCAB, N_EMBD, rng), Q.Q4_K)
    return t


def write_gguf(path, tensors, split=None):
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(2)
    w.add_embedding_length(N_EMBD)
    w.add_expert_count(N_EXP)
    if split:
        no, count, total = split
        w.add_uint16("split.no", no)
        w.add_uint16("split.count", count)
        w.add_int32("split.tensors.count", total)
    for name, (arr, qt) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=qt) if qt is not None else w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True)


def check_pair(src, dst):
    """The conversion rules between one input file and its output; returns the converted names."""
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dst))
    assert int(a.data_offset) == int(b.data_offset), "header length changed"
    with open(src, "rb") as fa, open(dst, "rb") as fb:
        ha, hb = fa.read(int(a.data_offset)), fb.read(int(b.data_offset))
    assert len(ha) == len(hb)
    converted = []
    for x, y in zip(a.tensors, b.tensors):
        assert x.name == y.name and list(x.shape) == list(y.shape)
        assert (int(y.data_offset) - int(b.data_offset)) % int(b.alignment) == 0, y.name
        dense = x.name == "output.weight" or any(k in x.name for k in ("attn_q.", "attn_k.", "attn_v.", "attn_output."))
        if dense and x.tensor_type != Q.Q8_0:
            converted.append(x.name)
            assert y.tensor_type == Q.Q8_0, x.name
            w = gguf.quants.dequantize(np.asarray(x.data), x.tensor_type).astype(np.float64).reshape(-1, 32)
            v = gguf.quants.dequantize(np.asarray(y.data), Q.Q8_0).astype(np.float64).reshape(-1, 32)
            amax = np.abs(w).max(axis=1)
            # Q8_0: half a step (1/254 of the block max) + 127 steps times the f16 scale's rounding
            # (2^-11 of the scale in f16's normal range, 2^-25 absolute below it)
            err = np.abs(v - w).max(axis=1)
            bound = amax / 254 + 127 * np.maximum(amax / 127 * 2.0 ** -11, 2.0 ** -25)
            assert (err <= bound * (1 + 1e-6)).all(), x.name
            assert err.max() > 0, x.name  # a real requantization happened
        else:
            assert y.tensor_type == x.tensor_type, x.name
            assert int(y.data_offset) == int(x.data_offset), x.name
            assert np.asarray(y.data).tobytes() == np.asarray(x.data).tobytes(), x.name
    return converted


def strata_info(path):
    if not CLI.is_file():
        pytest.skip(f"{CLI} not built (set STRATA_CLI)")
    p = subprocess.run([str(CLI), "info", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_single_file(tmp_path):
    rng = np.random.default_rng(1)
    src, dst = tmp_path / "m.gguf", tmp_path / "q8.gguf"
    write_gguf(src, tensors_of([0, 1], rng))
    p = run_tool(src, dst)
    assert p.returncode == 0, p.stderr
    conv = check_pair(src, dst)
    assert len(conv) == 9  # 2 layers x 4 projections + the head
    assert "appended" in p.stdout and "in place" in p.stdout  # K-quants grow, F16 shrinks
    assert "of max |w|" in p.stdout
    out = strata_info(dst)
    assert "q8_0" in out and "q4_K" in out
    # unreferenced old bytes aside, the file grew by the appended Q8_0 data only
    assert dst.stat().st_size > src.stat().st_size


def test_refusals(tmp_path):
    rng = np.random.default_rng(2)
    src, dst = tmp_path / "m.gguf", tmp_path / "q8.gguf"
    write_gguf(src, tensors_of([0], rng))
    bad = tmp_path / "notgguf.gguf"
    bad.write_text("hello")
    p = run_tool(bad, dst)
    assert p.returncode == 1 and "not a GGUF" in p.stderr and not dst.exists()
    dst.write_text("keep")
    p = run_tool(src, dst)
    assert p.returncode == 1 and "exists" in p.stderr and "--force" in p.stderr
    assert dst.read_text() == "keep"
    assert run_tool(src, dst, "--force").returncode == 0
    check_pair(src, dst)
    p = run_tool(src, src, "--force")
    assert p.returncode == 1 and "input file" in p.stderr
    # non-finite dense weights: refused, nothing left behind
    t = tensors_of([0], rng)
    w = (rng.standard_normal((N_EMBD, N_EMBD)) * 0.05).astype(np.float32)
    w[3, 5] = np.inf
    t["blk.0.attn_q.weight"] = (w, None)
    nan_src, nan_dst = tmp_path / "nan.gguf", tmp_path / "nan-q8.gguf"
    write_gguf(nan_src, t)
    p = run_tool(nan_src, nan_dst)
    assert p.returncode == 1 and "non-finite" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("nan-q8")) == []
    # a weight whose block scale overflows f16
    w = np.zeros((N_EMBD, N_EMBD), np.float32)
    w[0, 0] = 1e7
    t["blk.0.attn_q.weight"] = (w, None)
    write_gguf(nan_src, t)
    p = run_tool(nan_src, nan_dst)
    assert p.returncode == 1 and "overflows f16" in p.stderr and not nan_dst.exists()
    # a tensor type id no GGUF reader knows
    unk = tmp_path / "unk.gguf"
    unk.write_bytes(src.read_bytes())
    r = gguf.GGUFReader(str(unk))
    t0 = r.tensors[0]
    pos = t0.field.offset + sum(int(x.nbytes) for x in t0.field.parts[:4])
    with open(unk, "r+b") as f:
        f.seek(pos)
        assert struct.unpack("<I", f.read(4))[0] == int(t0.tensor_type)
        f.seek(pos)
        f.write(struct.pack("<I", 250))
    p = run_tool(unk, tmp_path / "unk-q8.gguf")
    assert p.returncode == 1 and "cannot read" in p.stderr, p.stderr


@pytest.mark.parametrize("copy", [False, True])
def test_two_shards(tmp_path, copy):
    rng = np.random.default_rng(3)
    s1 = tensors_of([0], rng, dense=False, head=False)  # experts only: linked / copied
    s2 = tensors_of([1], rng, embd=False)  # dense + head: rewritten
    total = len(s1) + len(s2)
    ins = [tmp_path / f"m-0000{i}-of-00002.gguf" for i in (1, 2)]
    write_gguf(ins[0], s1, (0, 2, total))
    write_gguf(ins[1], s2, (1, 2, total))
    outs = [tmp_path / f"q8-0000{i}-of-00002.gguf" for i in (1, 2)]
    args = [ins[1], outs[0]] + (["--copy"] if copy else [])  # naming shard 2 opens both
    p = run_tool(*args)
    assert p.returncode == 0, p.stderr
    assert check_pair(ins[0], outs[0]) == []
    assert len(check_pair(ins[1], outs[1])) == 5
    same = os.stat(ins[0]).st_ino == os.stat(outs[0]).st_ino
    assert same != copy
    assert os.stat(ins[1]).st_ino != os.stat(outs[1]).st_ino
    assert outs[0].read_bytes() == ins[0].read_bytes()
    out = strata_info(outs[0])
    assert "shards          2" in out
    # a single-file output name for a split input is refused; rerun needs --force
    p = run_tool(ins[0], tmp_path / "single.gguf")
    assert p.returncode == 1 and "NAME-00001-of-00002.gguf" in p.stderr
    p = run_tool(ins[0], outs[0])
    assert p.returncode == 1 and "exists" in p.stderr
    assert run_tool(ins[0], outs[0], "--force").returncode == 0
    check_pair(ins[1], outs[1])
    assert ins[0].read_bytes() == outs[0].read_bytes()  # the input was not touched through a link
    # a missing shard
    ins[1].unlink()
    p = run_tool(ins[0], tmp_path / "x-00001-of-00002.gguf")
    assert p.returncode == 1 and "missing" in p.stderr


def tokenize(sm, text):
    ffi, lib = sm.ffi, sm.lib
    raw = text.encode()
    out, n = ffi.new("strata_token[]", len(raw) + 16), ffi.new("int64_t *")
    sm.strata.check(lib.strata_tokenize(sm.model, raw, len(raw), 1, 0, out, len(raw) + 16, n),
                    "strata_tokenize")
    return [out[i] for i in range(n[0])]


def test_default_model_q4k_dense(tmp_path, tiny_model):
    """The trained default model with Q4_K weights, then its dense projections and head Q8_0:
    Strata's greedy tokens equal, logits close."""
    import strata
    import test_hf_parity_lib as L
    q4k, q8 = tmp_path / "q4k.gguf", tmp_path / "q4k-q8dense.gguf"
    strata.quantize_file(tiny_model, q4k, "q4_K", allow_requantize=True)
    p = run_tool(q4k, q8)
    assert p.returncode == 0, p.stderr
    conv = check_pair(q4k, q8)
    assert "output.weight" in conv and len(conv) == 6 * 4 + 1
    with L.StrataModel(q4k, n_ctx=256) as a, L.StrataModel(q8, n_ctx=256) as b:
        ids = tokenize(a, "Dictionary, n. A book containing the words of a language arranged in "
                          "alphabetical order, with explanations of their meanings.")
        assert ids == tokenize(b, "Dictionary, n. A book containing the words of a language "
                                  "arranged in alphabetical order, with explanations of their meanings.")
        la, lb = a.logits(ids), b.logits(ids)
        prompt = ids[:6]
        ia, ra = a.greedy(prompt, 16)
        ib, rb = b.greedy(prompt, 16)
    # max|diff| / max|logit| per position; Q4_K itself moves the Q8_0 original's logits several
    # times more than this conversion does
    err = L.rel_err_rows(lb, la)
    assert err.max() < 0.08 and err.mean() < 0.03, (err.max(), err.mean())
    assert err.max() > 0  # the dense weights did change
    msg = L.compare_greedy(ia, ra, ib, rb, margin=0.05)
    assert msg is None, msg
