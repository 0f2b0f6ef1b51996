"""test_imatrix.py - `strata imatrix` and `strata quantize --imatrix` on the default model.

- contents: blk.0's attn_q/k/v input is attn_norm(token embedding), recomputed here in numpy from
  the file's tensors and the text's tokens (chunks of -c, BOS first): its column sums of squares
  must be the file's in_sum2, its counts the tokens read; each expert's counts must equal the
  number of times the route trace (--route-trace of the same run) sent a token to it; the
  experts' gate sums add up to k times the router's (the same rows, each routed k times);
- the format: gguf.GGUFReader reads llama.cpp's names, shapes, types and keys;
- reading: a file written with gguf.GGUFWriter in llama.cpp's layout steers the quantizer: the
  output bytes of a dense and an expert tensor equal strata.quantize(..., importance=in_sum2 /
  counts) of the dequantized source rows (ones for an expert with count 0); a shape mismatch is
  refused naming the tensor, and no file is left;
- without --imatrix the requantized bytes are those of the commit before importance matrices
  (sha256 pinned from its build);
- with an importance matrix from one text the importance-weighted error of the tensors falls
  for IQ2_XXS and IQ1_S, and IQ1_S's KL against the Q8_0 model on another text falls.
"""
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf import quants as gq

import strata
from conftest import REPO

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
MODEL = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
N_CTX, CHUNKS = 128, 3

# sha256 (first 32 hex digits) of `strata quantize MODEL OUT --type T --allow-requantize` as
# built at c3c1579 (before importance matrices existed).
NO_IMATRIX_SHA256 = {
    "iq2_xxs": "2ea548fe3025db8745ae346673831fac",
    "iq1_s": "d6dd1014b36ee9871284cf8456072f46",
    "iq4_xs": "3ed89f4b62e5926000f838cd35530e18",
}


def run(*args, check=True):
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def calib_text():
    return (REPO / "docs" / "MODELS.md").read_text()


def tensors(path):
    return {t.name: t for t in GGUFReader(str(path)).tensors}


def f32_of(t):
    """A reader tensor as float32 in ggml order reversed (numpy's [.., ne1, ne0])."""
    shape = tuple(int(d) for d in reversed(t.shape))
    if t.tensor_type == Q.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(shape)
    return gq.dequantize(np.asarray(t.data), t.tensor_type).reshape(shape)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("imatrix")
    (d / "cal.txt").write_text(calib_text())
    p = run("imatrix", "-m", MODEL, "-f", d / "cal.txt", "-o", d / "im.gguf", "-c", N_CTX,
            "--chunks", CHUNKS, "-t", 2, "--route-trace", d / "rt.jsonl")
    assert re.search(r"wrote .*im\.gguf: \d+ tensors", p.stdout)
    return d


def chunk_tokens():
    m = strata.Model(str(MODEL))
    text = calib_text()
    toks = m.tokenize(text, add_special=False)
    bos = len(m.tokenize("a", add_special=True)) > len(m.tokenize("a", add_special=False))
    chunks = []
    for c in range(CHUNKS):
        ch = list(toks[c * N_CTX:(c + 1) * N_CTX])
        if bos:
            ch[0] = m.bos
        chunks.append(ch)
    return np.array(chunks).reshape(-1)


def test_attention_input_sums(made):
    im, mt = tensors(made / "im.gguf"), tensors(MODEL)
    emb = f32_of(mt["token_embd.weight"]).astype(np.float64)
    norm_w = f32_of(mt["blk.0.attn_norm.weight"]).astype(np.float64)
    x = emb[chunk_tokens()]
    xn = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-5) * norm_w
    want = np.sum(xn * xn, axis=0)
    for name in ("attn_q", "attn_k", "attn_v"):
        s = f32_of(im[f"blk.0.{name}.weight.in_sum2"])
        assert s.shape == (1, 256)
        np.testing.assert_allclose(s[0], want, rtol=2e-4)
        assert f32_of(im[f"blk.0.{name}.weight.counts"]).reshape(-1).tolist() == [CHUNKS * N_CTX]


def test_expert_counts_match_route_trace(made):
    im = tensors(made / "im.gguf")
    lines = (made / "rt.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    n_layer, n_expert, k = head["n_layer"], head["n_expert"], head["k"]
    routed = np.zeros((n_layer, n_expert), dtype=np.int64)
    for ln in lines[1:]:
        r = json.loads(ln)
        np.add.at(routed[r["layer"]], np.array(r["ids"]), 1)
    assert routed.sum() == n_layer * CHUNKS * N_CTX * k
    for il in range(n_layer):
        for name, cols in (("ffn_gate_exps", 256), ("ffn_up_exps", 256), ("ffn_down_exps", 128)):
            c = f32_of(im[f"blk.{il}.{name}.weight.counts"]).reshape(-1)
            assert c.tolist() == routed[il].tolist(), (il, name)
            assert f32_of(im[f"blk.{il}.{name}.weight.in_sum2"]).shape == (n_expert, cols)
        gate = f32_of(im[f"blk.{il}.ffn_gate_exps.weight.in_sum2"]).astype(np.float64)
        up = f32_of(im[f"blk.{il}.ffn_up_exps.weight.in_sum2"])
        router = f32_of(im[f"blk.{il}.ffn_gate_inp.weight.in_sum2"]).astype(np.float64)[0]
        np.testing.assert_array_equal(gate, up)
        np.testing.assert_allclose(gate.sum(axis=0), k * router, rtol=1e-4)


def test_gguf_format(made):
    r = GGUFReader(str(made / "im.gguf"))
    f = r.fields
    assert f["general.type"].contents() == "imatrix"
    assert f["imatrix.datasets"].contents() == [str(made / "cal.txt")]
    assert f["imatrix.chunk_count"].contents() == CHUNKS
    assert f["imatrix.chunk_size"].contents() == N_CTX
    names = [t.name for t in r.tensors]
    assert names == sorted(names, key=lambda n: (n.rsplit(".", 1)[0], n.endswith(".counts")))  # in_sum2 first
    assert all(t.tensor_type == Q.F32 for t in r.tensors)
    bases = {n.rsplit(".", 1)[0] for n in names}
    assert len(names) == 2 * len(bases) == 2 * 6 * 8  # q, k, v, o, router, 3 expert tensors
    assert not any(n.startswith("output.") for n in names)  # only with --process-output


def write_llamacpp_imatrix(path, entries):
    """entries: name -> (sums [n_mat][n_cols], counts [n_mat]), llama.cpp's layout."""
    w = GGUFWriter(str(path), arch="")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["test"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    for name in sorted(entries):
        sums, counts = entries[name]
        w.add_tensor(f"{name}.in_sum2", np.asarray(sums, np.float32))
        w.add_tensor(f"{name}.counts", np.asarray(counts, np.float32).reshape(-1, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_quantize_reads_llamacpp_layout(tmp_path):
    rng = np.random.default_rng(3)
    q_sums = rng.gamma(1.0, 1.0, (1, 256)) * 7
    up_sums = rng.gamma(1.0, 1.0, (32, 256)) * 5
    up_counts = rng.integers(1, 9, 32).astype(np.float32)
    up_counts[[3, 17]] = 0
    write_llamacpp_imatrix(tmp_path / "im.gguf", {"blk.0.attn_q.weight": (q_sums, [7]),
                                                  "blk.0.ffn_up_exps.weight": (up_sums, up_counts)})
    p = run("quantize", MODEL, tmp_path / "o.gguf", "--type", "iq4_xs", "--allow-requantize",
            "-t", 2, "--imatrix", tmp_path / "im.gguf")
    assert "2 tensors quantized with their entry" in p.stdout
    src, out = tensors(MODEL), tensors(tmp_path / "o.gguf")
    wq = f32_of(src["blk.0.attn_q.weight"])
    assert bytes(out["blk.0.attn_q.weight"].data) == strata.quantize("iq4_xs", wq, importance=q_sums[0] / 7)
    up = f32_of(src["blk.0.ffn_up_exps.weight"])
    raw = np.asarray(out["blk.0.ffn_up_exps.weight"].data).reshape(32, -1)
    for e in range(32):
        imp = up_sums[e] / up_counts[e] if up_counts[e] > 0 else np.ones(256)
        assert raw[e].tobytes() == strata.quantize("iq4_xs", up[e], importance=imp), e
    # the other tensors (no entry) are as without an importance matrix
    run("quantize", MODEL, tmp_path / "plain.gguf", "--type", "iq4_xs", "--allow-requantize", "-t", 2)
    plain = tensors(tmp_path / "plain.gguf")
    assert bytes(out["blk.1.attn_q.weight"].data) == bytes(plain["blk.1.attn_q.weight"].data)
    assert bytes(out["blk.0.attn_q.weight"].data) != bytes(plain["blk.0.attn_q.weight"].data)
    meta = GGUFReader(str(tmp_path / "o.gguf")).fields
    assert meta["quantize.imatrix.entries_count"].contents() == 2


def test_shape_mismatch_refused(tmp_path):
    write_llamacpp_imatrix(tmp_path / "im.gguf", {"blk.0.attn_q.weight": (np.ones((1, 128)), [1])})
    p = run("quantize", MODEL, tmp_path / "o.gguf", "--type", "iq2_xxs", "--allow-requantize",
            "--imatrix", tmp_path / "im.gguf", check=False)
    assert p.returncode == 1
    assert "blk.0.attn_q.weight" in p.stderr and "another model" in p.stderr, p.stderr
    assert not (tmp_path / "o.gguf").exists()


@pytest.mark.parametrize("t", sorted(NO_IMATRIX_SHA256))
def test_bytes_without_imatrix_unchanged(tmp_path, t):
    run("quantize", MODEL, tmp_path / "o.gguf", "--type", t, "--allow-requantize", "-t", 2)
    assert hashlib.sha256((tmp_path / "o.gguf").read_bytes()).hexdigest()[:32] == NO_IMATRIX_SHA256[t]


def weighted_error(src, out, im):
    """Sum over the tensors with an entry of sum_col importance * (dequantized - source)^2."""
    total = 0.0
    for name, t in out.items():
        if f"{name}.in_sum2" not in im or t.tensor_type == src[name].tensor_type:
            continue
        s = f32_of(im[f"{name}.in_sum2"]).astype(np.float64)
        c = f32_of(im[f"{name}.counts"]).reshape(-1).astype(np.float64)
        imp = np.where(c[:, None] > 0, s / np.maximum(c, 1)[:, None], 1.0)
        w, q = f32_of(src[name]).astype(np.float64), f32_of(t).astype(np.float64)
        if w.ndim == 3:
            total += float(np.sum(imp[:, None, :] * (q - w) ** 2))
        else:
            total += float(np.sum(imp[0] * (q - w) ** 2))
    return total


@pytest.mark.parametrize("t", ["iq2_xxs", "iq1_s"])
def test_imatrix_lowers_weighted_error(made, tmp_path, t):
    run("quantize", MODEL, tmp_path / "a.gguf", "--type", t, "--allow-requantize", "-t", 2)
    run("quantize", MODEL, tmp_path / "b.gguf", "--type", t, "--allow-requantize", "-t", 2,
        "--imatrix", made / "im.gguf")
    src, im = tensors(MODEL), tensors(made / "im.gguf")
    ea = weighted_error(src, tensors(tmp_path / "a.gguf"), im)
    eb = weighted_error(src, tensors(tmp_path / "b.gguf"), im)
    assert eb < 0.95 * ea, (t, ea, eb)  # (-8.5% and -6.7% on this text)


def test_imatrix_lowers_kl_iq1_s(made, tmp_path):
    """IQ1_S's KL against the Q8_0 model on a text the importance matrix did not see."""
    ev = tmp_path / "ev.txt"
    ev.write_text((REPO / "docs" / "ARCHITECTURE.md").read_text())
    run("perplexity", "-m", MODEL, "-f", ev, "-c", N_CTX, "-t", 2, "--kl-base", tmp_path / "base.jsonl")
    kl = {}
    for tag, extra in (("plain", []), ("imatrix", ["--imatrix", made / "im.gguf"])):
        f = tmp_path / f"{tag}.gguf"
        run("quantize", MODEL, f, "--type", "iq1_s", "--allow-requantize", "-t", 2, *extra)
        p = run("perplexity", "-m", f, "-f", ev, "-c", N_CTX, "-t", 2, "--kl", tmp_path / "base.jsonl")
        kl[tag] = float(re.search(r"mean ([0-9.]+)", p.stdout + p.stderr).group(1))
    assert kl["imatrix"] < 0.97 * kl["plain"], kl
