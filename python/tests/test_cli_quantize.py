"""test_cli_quantize.py - strata_quantize_file (behind `strata quantize`) on a small float model
written here with gguf.GGUFWriter: every target type, the per-tensor rules (1-D kept, router f32,
row-length fallback to q8_0, non-float kept), metadata preserved with general.file_type updated,
values checked against independent references (numpy / gguf.quants, bit-exact where the format
allows, an error bound for the K types), requantize rules, threads, and failure cleanup."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf import quants as gq

import strata

FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_K": 14, "q6_K": 18, "bf16": 32}
TARGETS = list(FILE_TYPE)
REL_RMS = {"q4_K": 0.09, "q6_K": 0.022}


def make_model(path, alignment=None):
    """A small MoE-shaped float model. Returns name -> float32 values (numpy order)."""
    rng = np.random.default_rng(42)
    w = GGUFWriter(str(path), "olmoe")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint32("olmoe.block_count", 1)
    w.add_uint32("olmoe.expert_count", 4)
    w.add_float32("olmoe.rope.freq_base", 10000.0)
    w.add_string("general.name", "tiny-float")
    w.add_uint32("general.file_type", 0)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0])
    w.add_array("nested.ints", [[1, 2], [3]])
    t = {
        "token_embd.weight": rng.standard_normal((64, 256)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(256).astype(np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((256, 256)).astype(np.float16),
        "blk.0.ffn_gate_inp.weight": rng.standard_normal((4, 256)).astype(np.float16),
        "blk.0.ffn_up_exps.weight": rng.standard_normal((4, 64, 256)).astype(np.float32),
        "blk.0.ffn_down_exps.weight": rng.standard_normal((4, 256, 64)).astype(np.float32),
        "blk.0.odd.weight": rng.standard_normal((8, 48)).astype(np.float32),
        "blk.0.ids": rng.integers(0, 100, (4, 64)).astype(np.int32),
    }
    for name, arr in t.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {k: v.astype(np.float32) for k, v in t.items()}


def expected_type(name, shape_ne, src_type, target):
    if len(shape_ne) == 1 or src_type == "i32":
        return src_type
    if "ffn_gate_inp" in name:
        return "f32"
    bs = strata.block_size(target)
    if shape_ne[0] % bs:
        return "q8_0" if shape_ne[0] % 32 == 0 else src_type
    return target


def reference_bytes(kind, x):
    """Independent encoding of float32 x (rows of the last axis) in kind, or None if the format
    has no bit-exact reference."""
    flat = x.reshape(-1, x.shape[-1])
    if kind == "f32":
        return flat.astype(np.float32).tobytes()
    if kind == "f16":
        return flat.astype(np.float16).tobytes()
    if kind in ("bf16", "q8_0", "q4_0"):
        return gq.quantize(flat, getattr(Q, kind.upper())).tobytes()
    return None


@pytest.mark.parametrize("target", TARGETS)
def test_quantize_each_target(tmp_path, target):
    src = tmp_path / "in.gguf"
    values = make_model(src)
    out = tmp_path / f"out-{target}.gguf"
    stats = strata.quantize_file(src, out, target, n_threads=2)
    with strata.GGUF(src) as a, strata.GGUF(out) as b:
        ma, mb = a.metadata, b.metadata
        assert mb["general.file_type"] == FILE_TYPE[target]
        assert {k: v for k, v in ma.items() if k != "general.file_type"} == \
               {k: v for k, v in mb.items() if k != "general.file_type"}
        assert list(ma) == list(mb)  # order kept
        assert b.version == 3 and b.alignment == a.alignment
        n_conv = n_fall = n_kept = 0
        for ta in a.tensors:
            tb = b.tensor(ta.name).info
            want = expected_type(ta.name, ta.shape, ta.type, target)
            assert tb.type == want, (ta.name, tb.type, want)
            assert tb.shape == ta.shape
            if want == ta.type:
                n_kept += 1
                assert b.tensor(ta.name).data.tobytes() == a.tensor(ta.name).data.tobytes()
                continue
            if want == target or "ffn_gate_inp" in ta.name:
                n_conv += 1
            else:
                n_fall += 1
            x = values[ta.name]
            got = b.tensor(ta.name).data.tobytes()
            ref = reference_bytes(want, x)
            if ref is not None:
                assert got == ref, (ta.name, want)
            else:
                y = gq.dequantize(np.frombuffer(got, dtype=np.uint8), getattr(Q, want.upper()))
                y = y.reshape(x.shape)
                rel = np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2))
                assert rel < REL_RMS[want], (ta.name, want, rel)
        assert stats["n_tensors"] == len(a.tensors)
        assert (stats["n_quantized"], stats["n_fallback"], stats["n_kept"]) == \
               (n_conv, n_fall, n_kept)
        assert stats["bytes_in"] == sum(t.n_bytes for t in a.tensors)
        assert stats["bytes_out"] == sum(t.n_bytes for t in b.tensors)


def test_custom_alignment_is_kept(tmp_path):
    src = tmp_path / "in.gguf"
    make_model(src, alignment=128)
    out = tmp_path / "out.gguf"
    strata.quantize_file(src, out, "q8_0")
    with strata.GGUF(out) as b:
        assert b.alignment == 128 and b.metadata["general.alignment"] == 128
        assert all(t.offset % 128 == 0 for t in b.tensors)


def test_threads_give_identical_bytes(tmp_path):
    src = tmp_path / "in.gguf"
    make_model(src)
    strata.quantize_file(src, tmp_path / "a.gguf", "q4_K", n_threads=1)
    strata.quantize_file(src, tmp_path / "b.gguf", "q4_K", n_threads=3)
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()


def test_requantize_rules(tmp_path):
    src = tmp_path / "in.gguf"
    make_model(src)
    q8 = tmp_path / "q8.gguf"
    strata.quantize_file(src, q8, "q8_0")
    out = tmp_path / "q4.gguf"
    with pytest.raises(strata.StrataError) as e:
        strata.quantize_file(q8, out, "q4_K")
    assert e.value.status == strata.lib.STRATA_ERR_INVALID_ARG
    assert "token_embd.weight" in e.value.message and "allow_requantize" in e.value.message
    assert not out.exists()
    # same type: nothing to requantize
    strata.quantize_file(q8, out, "q8_0")
    assert out.read_bytes() == q8.read_bytes()
    strata.quantize_file(q8, out, "q4_K", allow_requantize=True)
    with strata.GGUF(out) as g:
        assert g.tensor("token_embd.weight").info.type == "q4_K"


def test_bad_target_and_same_file(tmp_path):
    src = tmp_path / "in.gguf"
    make_model(src)
    with pytest.raises(strata.StrataError) as e:
        strata.quantize_file(src, tmp_path / "x.gguf", "q4_1")
    assert "q4_1" in e.value.message
    with pytest.raises(strata.StrataError) as e:
        strata.quantize_file(src, src, "q8_0")
    assert "input" in e.value.message
    assert not (tmp_path / "x.gguf").exists()


def test_unwritable_output(tmp_path):
    src = tmp_path / "in.gguf"
    make_model(src)
    with pytest.raises(strata.StrataError) as e:
        strata.quantize_file(src, tmp_path / "no-dir" / "x.gguf", "q8_0")
    assert e.value.status == strata.lib.STRATA_ERR_IO and "no-dir" in e.value.message
