"""test_quantize_iq.py - the low-bit quantizers (Q2_K, Q3_K, Q5_K, MXFP4, IQ4_NL, IQ4_XS,
IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) and `strata quantize`'s per-kind mixes.

- layout and quality: Strata's bytes of gaussian rows dequantized by gguf.quants.dequantize (an
  independent decoder of every ggml layout) must be close to the rows: relative RMS error under a
  per-type bound (RMSE), and above the rate-distortion floor 2^-bpw of a gaussian source (which
  no quantizer beats: a test comparing the rows with themselves would fail it);
- the bytes themselves: the sha256 of Strata's output on fixed rows must equal that of ggml's
  quantizers (ggml-quants.c of llama.cpp built alone, outside this repository; IQ2_XXS, IQ2_XS and
  IQ1_S with an importance matrix of ones, the rest with none), which pins the port;
- the default model requantized with --type-experts / --type-dense / --type-down: `strata info`
  lists each tensor with the type its kind asked for (or the Q8_0 fallback where the row length
  does not fit), the values are close to the source; and with types the CPU can run, `strata run`
  gives text and `strata perplexity` stays finite and within PPL_FACTOR of the Q8_0 model's.
"""
import hashlib
import math
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants as gq

import strata
from conftest import REPO, SHARED

# The relative RMS error ggml's quantizer has on RMSE_ROWS (Strata's is the same: its bytes are
# ggml's, see GGML_SHA256) plus 10% margin. For scale, the gaussian rate-distortion floor 2^-bpw:
# q2_K 0.16, q3_K 0.09, q5_K 0.02, mxfp4 0.05, iq4_* 0.05, iq3_xxs 0.12, iq3_s 0.09, iq2_xxs 0.24,
# iq2_xs 0.20, iq2_s 0.17, iq1_s 0.34, iq1_m 0.30. IQ3_XXS, IQ3_S and IQ1_M sit further above it
# than their bit rates suggest because ggml's no-imatrix weighting (x^2) favours the large values
# over the RMS.
RMSE = {
    "q2_K": 0.33, "q3_K": 0.17, "q5_K": 0.040, "mxfp4": 0.127, "iq4_nl": 0.084, "iq4_xs": 0.085,
    "iq3_xxs": 0.236, "iq3_s": 0.182, "iq2_xxs": 0.38, "iq2_xs": 0.33, "iq2_s": 0.29,
    "iq1_s": 0.54, "iq1_m": 0.64,
}
TYPES = list(RMSE)

# sha256 (first 32 hex digits) of ggml's bytes for golden_rows().
GGML_SHA256 = {
    "q2_K": "948744f53efc5a13cfc615889a981208",
    "q3_K": "0d9212c4e171e1a70d4fa8306ff67fe6",
    "q5_K": "b77640d78de2afabc0f2eb872038cd3c",
    "mxfp4": "fd33cde8df018d3010c91485e67f8726",
    "iq4_nl": "8d86dae75dd6ae6bfcd3a6c565f174e5",
    "iq4_xs": "32c59beaac8ed22070048d15d84fc206",
    "iq2_xxs": "ecb61d602a1e49196cf758459e9163aa",
    "iq2_xs": "e1167b3d8fda9c18609e8da8e3fec336",
    "iq2_s": "c82d5e5cf03c11385a4702329824e72e",
    "iq3_xxs": "9117e2245e2c21fbe7f8f3905af1bf45",
    "iq3_s": "133311992d12f38ae357fb4fbe31dee0",
    "iq1_s": "6b7cb4fe76a84905f7327f0bfe9c7c0d",
    "iq1_m": "f7a1204f2075403806203b0941acd435",
}

# The same with an importance matrix (golden_importance(): what ggml's quantize_* take as
# quant_weights), from the same standalone build of ggml-quants.c.
IMATRIX_TYPES = ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "iq4_nl", "iq4_xs"]
GGML_SHA256_IMATRIX = {
    "iq2_xxs": "0f1cd9b06076a0bec92dbc3c80d09158",
    "iq2_xs": "506d0125c238f1ff061ff0c6c8fd8786",
    "iq2_s": "9619b1b9385caa76b348e479184b5d1e",
    "iq3_xxs": "0c546208f85ee6b3d937afefd280b411",
    "iq3_s": "2f38a7fd0354171db387c3b0420622b3",
    "iq1_s": "ea46b4e8bc1506e0db68525696835c7f",
    "iq1_m": "d77051b80528fa62ae56d1cdcd26976a",
    "iq4_nl": "e79680e1c3e756fa0a1923dd630c074a",
    "iq4_xs": "c72359a26af398b9cbcb434741895092",
}

# Types the CPU runs, used for the run / perplexity checks (every weight in the type, and a mix).
# IQ1_S / IQ1_M only in the mix: 1.56 bits on every weight of the tiny default model is past
# PPL_FACTOR (as on real models, where IQ1 files keep attention and downs in larger types).
CPU_TYPES = ["iq3_xxs", "iq3_s", "iq4_xs", "q2_K", "q3_K", "iq2_xxs", "iq2_xs", "iq2_s", "mxfp4",
             "iq1_s", "iq1_m"]
MIX_ONLY = {"iq1_s", "iq1_m"}
PPL_FACTOR = 1.5

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
PPL_TEXT = (
    "The kernel keeps a list of every process that is ready to run, and the scheduler picks the "
    "next one from that list whenever the current process blocks, exits, or uses up its time "
    "slice. Each process has a priority, which the administrator can change with the nice "
    "command, and the scheduler gives a larger share of the processor to processes with a higher "
    "priority. When a program reads from a file, the data is first copied from the disk into the "
    "page cache, so that a second read of the same block does not have to wait for the disk "
    "again. The size of the cache is not fixed: the kernel grows it while memory is free and "
    "shrinks it when applications need more memory.\n\n"
    "Dictionary, n. A book containing the words of a language arranged in alphabetical order, "
    "with explanations of their meanings. A good dictionary also gives the pronunciation of each "
    "word, its origin, and examples of its use in sentences taken from well known authors. Perl is "
    "a general purpose programming language originally developed for text manipulation and now "
    "used for a wide range of tasks including system administration, web development, network "
    "programming, and more. A hash is an unordered collection of values, each of which is "
    "identified by a unique string called its key.\n\n"
    "A module is a file that contains definitions of functions, classes and variables. The import "
    "statement finds a module, loads it and binds it to a name in the local namespace. Each module "
    "has its own private symbol table, which is used as the global symbol table by all functions "
    "defined in the module, so the author of a module can use global variables without worrying "
    "about accidental clashes with the global variables of a user.\n"
)


def rmse_rows():
    return np.random.default_rng(7).standard_normal((64, 1024)).astype(np.float32)


def golden_rows():
    """Gaussian rows at scales 1, 0.02 and 30, and one with a zero run and a tiny run."""
    rng = np.random.default_rng(20261207)
    x = (rng.standard_normal((4, 1024)) * np.array([[1.0], [0.02], [30.0], [1.0]])).astype(np.float32)
    x[3, 100:140] = 0.0
    x[3, 300:340] *= 1e-6
    return x


def golden_importance():
    """A skewed importance per column (gamma, a few heavy columns), with a run of zeros."""
    w = np.random.default_rng(5).gamma(0.5, 2.0, 1024).astype(np.float32)
    w[10:20] = 0.0
    return w


def gguf_dequant(t, raw, shape):
    a = np.frombuffer(raw, dtype=np.uint8).reshape(shape[0], -1)
    return gq.dequantize(a, getattr(Q, t.upper())).reshape(shape)


def rel_rms(y, x):
    return float(np.sqrt(np.mean((y.astype(np.float64) - x) ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2)))


@pytest.mark.parametrize("t", TYPES)
def test_gaussian_rows_within_bound(t):
    assert strata.can_quantize(t)
    x = rmse_rows()
    raw = strata.quantize(t, x)
    assert len(raw) == strata.row_bytes(t, x.shape[1]) * x.shape[0]
    rel = rel_rms(gguf_dequant(t, raw, x.shape), x)
    bpw = strata.block_bytes(t) * 8 / strata.block_size(t)
    assert 2.0 ** -bpw < rel < RMSE[t], (t, rel)


@pytest.mark.parametrize("t", TYPES)
def test_bytes_match_ggml(t):
    x = golden_rows()
    raw = strata.quantize(t, x)
    assert hashlib.sha256(raw).hexdigest()[:32] == GGML_SHA256[t]
    assert rel_rms(gguf_dequant(t, raw, x.shape)[0], x[0]) < RMSE[t]


@pytest.mark.parametrize("t", TYPES)
def test_importance_types(t):
    assert strata.takes_importance(t) == (t in IMATRIX_TYPES)


@pytest.mark.parametrize("t", IMATRIX_TYPES)
def test_importance_bytes_match_ggml(t):
    """With an importance matrix the bytes are ggml's quantize_*(quant_weights) bytes; ones give
    the no-importance bytes of IQ2_XXS, IQ2_XS and IQ1_S (their NULL path is ones)."""
    x = golden_rows()
    raw = strata.quantize(t, x, importance=golden_importance())
    assert hashlib.sha256(raw).hexdigest()[:32] == GGML_SHA256_IMATRIX[t]
    if t in ("iq2_xxs", "iq2_xs", "iq1_s"):
        assert strata.quantize(t, x, importance=np.ones(1024, np.float32)) == strata.quantize(t, x)


@pytest.mark.parametrize("t", IMATRIX_TYPES)
def test_importance_lowers_weighted_error(t):
    """The error weighted by the importance (what a layer's output error is, for inputs whose
    mean squared values are the importance) is lower with it than without. (An exponential spread
    of importance; with a far more skewed one, gamma shape 0.3, ggml's IQ2_XXS ends 4% worse.)"""
    x = rmse_rows()
    w = np.random.default_rng(11).gamma(1.0, 1.0, x.shape[1]).astype(np.float32)
    err = {}
    for imp in (None, w):
        y = gguf_dequant(t, strata.quantize(t, x, importance=imp), x.shape)
        err[imp is None] = float(np.sum(w * (y.astype(np.float64) - x) ** 2))
    assert err[False] < 0.9 * err[True], (t, err)


@pytest.mark.parametrize("t", TYPES)
def test_strata_dequant_agrees(t):
    """Where Strata dequantizes the type too, it reads the new bytes exactly as gguf does."""
    if not strata.can_dequantize(t):
        pytest.skip(f"{t}: no dequantizer in this build")
    x = rmse_rows()[:4]
    raw = strata.quantize(t, x)
    np.testing.assert_array_equal(strata.dequantize(t, raw), gguf_dequant(t, raw, x.shape).reshape(-1))


def test_mix_rules(tmp_path):
    """strata_quantize_file's per-kind targets on a small float model: dense ffn_down and
    ffn_down_exps take type_down, other *_exps type_experts, the rest type_dense; unset ones
    fall back to type; a bad one is refused naming the field."""
    from gguf import GGUFWriter
    rng = np.random.default_rng(3)
    t = {
        "token_embd.weight": (64, 256), "blk.0.attn_q.weight": (256, 256),
        "blk.0.ffn_up.weight": (512, 256), "blk.0.ffn_down.weight": (256, 512),
        "blk.0.ffn_up_exps.weight": (4, 64, 256), "blk.0.ffn_down_exps.weight": (4, 256, 64),
        "blk.0.ffn_gate_inp.weight": (4, 256), "blk.0.attn_norm.weight": (256,),
    }
    src = tmp_path / "in.gguf"
    w = GGUFWriter(str(src), "olmoe")
    w.add_uint32("olmoe.block_count", 1)
    for name, shape in t.items():
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cases = [
        (dict(type="q8_0", type_experts="iq3_s", type_dense="iq4_xs", type_down="mxfp4"),
         {"token_embd.weight": "iq4_xs", "blk.0.attn_q.weight": "iq4_xs",
          "blk.0.ffn_up.weight": "iq4_xs", "blk.0.ffn_down.weight": "mxfp4",
          "blk.0.ffn_up_exps.weight": "iq3_s", "blk.0.ffn_down_exps.weight": "mxfp4"}, 7),
        (dict(type="q5_K", type_experts="iq1_m"),  # down and dense unset: q5_K; down_exps rows 64
         {"token_embd.weight": "q5_K", "blk.0.attn_q.weight": "q5_K",
          "blk.0.ffn_up.weight": "q5_K", "blk.0.ffn_down.weight": "q5_K",
          "blk.0.ffn_up_exps.weight": "iq1_m", "blk.0.ffn_down_exps.weight": "q8_0"}, 16),
    ]
    for k, (params, want, file_type) in enumerate(cases):
        out = tmp_path / f"out{k}.gguf"
        strata.quantize_file(src, out, **params)
        with strata.GGUF(out) as g:
            got = {x.name: x.type for x in g.tensors}
            assert g.metadata["general.file_type"] == file_type
        for name, typ in want.items():
            assert got[name] == typ, (k, name, got[name], typ)
        assert got["blk.0.ffn_gate_inp.weight"] == "f32" and got["blk.0.attn_norm.weight"] == "f32"
    with pytest.raises(strata.StrataError) as e:
        strata.quantize_file(src, tmp_path / "bad.gguf", "q8_0", type_down="q8_K")
    assert "type_down" in e.value.message and "q8_K" in e.value.message
    assert not (tmp_path / "bad.gguf").exists()


# ------------------------------------------------------------------------------------------------
# The default model, requantized with mixes
# ------------------------------------------------------------------------------------------------

def default_model() -> Path:
    for p in (REPO / "models" / "strata-tiny-moe-q8_0.gguf", SHARED / "models" / "strata-tiny-moe-q8_0.gguf"):
        if p.is_file():
            return p
    pytest.skip("the default model (models/strata-tiny-moe-q8_0.gguf) is not present")


def cli(*args, timeout=600):
    if not CLI.is_file():
        pytest.skip(f"{CLI} not built")
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def info_types(path) -> dict:
    """name -> type from `strata info --tensors`."""
    out = cli("info", path, "--tensors")
    types = {}
    for line in out.splitlines():
        m = re.match(r"(\S+\.weight)\s+(\S+)\s", line)
        if m:
            types[m.group(1)] = m.group(2)
    return types


def want_type(name, ne0, src_type, experts, dense, down):
    if name.endswith("norm.weight") or "ffn_gate_inp" in name:
        return src_type
    t = down if "ffn_down" in name else experts if "_exps" in name else dense
    return t if ne0 % strata.block_size(t) == 0 else "q8_0"


def test_default_model_mix(tmp_path):
    src = default_model()
    out = tmp_path / "mix.gguf"
    mix = {"experts": "iq2_xxs", "dense": "q8_0", "down": "q4_K"}
    text = cli("quantize", src, out, "--type-experts", mix["experts"], "--type-dense", mix["dense"],
               "--type-down", mix["down"], "--allow-requantize", "-t", "2")
    assert "experts iq2_xxs, dense q8_0, down q4_K" in text
    listed = info_types(out)
    kinds = set()
    with strata.GGUF(src) as a, strata.GGUF(out) as b:
        assert b.metadata["general.file_type"] == 19  # LLAMA_FTYPE_MOSTLY_IQ2_XXS: the experts'
        for ta in a.tensors:
            want = want_type(ta.name, ta.shape[0], ta.type, **mix)
            tb = b.tensor(ta.name)
            assert tb.info.type == want, (ta.name, tb.info.type, want)
            assert ta.name not in listed or listed[ta.name] == want, (ta.name, listed[ta.name])
            kinds.add(want)
            if want != ta.type:  # the values: gguf's decoding of both files
                x = gq.dequantize(a.tensor(ta.name).data, getattr(Q, ta.type.upper()))
                y = gq.dequantize(tb.data, getattr(Q, want.upper()))
                assert rel_rms(np.asarray(y).reshape(-1), np.asarray(x).reshape(-1)) < RMSE[want]
        assert len(listed) == len([t for t in a.tensors if t.name.endswith(".weight")])
    assert "iq2_xxs" in kinds and "q8_0" in kinds
    assert any(n.endswith("ffn_up_exps.weight") and t == "iq2_xxs" for n, t in listed.items())
    # ffn_down_exps rows are the expert width (128): no 256-weight block fits, so they fall back
    assert all(t == "q8_0" for n, t in listed.items() if "ffn_down" in n)


@pytest.fixture(scope="module")
def ppl_text(tmp_path_factory):
    p = tmp_path_factory.mktemp("ppl") / "text.txt"
    p.write_text(PPL_TEXT)
    return p


def perplexity(model, text):
    out = cli("perplexity", "-m", model, "-f", text, "-c", "128", "--cpu", "-t", "2")
    m = re.search(r"Final estimate: PPL = ([0-9.eE+-]+|nan|inf)", out)
    assert m, out
    return float(m.group(1))


@pytest.fixture(scope="module")
def q8_ppl(ppl_text):
    return perplexity(default_model(), ppl_text)


@pytest.mark.parametrize("t", CPU_TYPES)
def test_requantized_model_runs(tmp_path, ppl_text, q8_ppl, t):
    """All weights in t (expert downs fall back to q8_0: rows of 128), then a mix: experts in t,
    downs iq4_nl (a 32-weight type that fits them), the rest q8_0."""
    src = default_model()
    modes = (("all", ["--type", t]),
             ("mix", ["--type-experts", t, "--type-down", "iq4_nl", "--type-dense", "q8_0"]))
    for name, args in modes[1:] if t in MIX_ONLY else modes:
        out = tmp_path / f"{t}-{name}.gguf"
        cli("quantize", src, out, *args, "--allow-requantize", "-t", "2")
        with strata.GGUF(out) as g:
            got = {x.name: x.type for x in g.tensors}
        assert got["blk.0.ffn_up_exps.weight"] == t
        if name == "mix":
            assert got["blk.0.ffn_down_exps.weight"] == "iq4_nl"
            assert got["blk.0.attn_q.weight"] == "q8_0"
        text = cli("run", "-m", out, "-p", "Dictionary, n. A book", "-n", "16", "--temp", "0",
                   "--cpu", "-t", "2")
        assert len(text.strip()) > len("Dictionary, n. A book")
        ppl = perplexity(out, ppl_text)
        assert math.isfinite(ppl) and q8_ppl / PPL_FACTOR < ppl < q8_ppl * PPL_FACTOR, (t, name, ppl, q8_ppl)
