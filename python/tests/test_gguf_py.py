"""test_gguf_py.py - strata.GGUF against gguf-py: files written by gguf.GGUFWriter (every value
type, arrays including nested and string arrays, tensors of several types, custom alignment) read
by strata.GGUF and compared with gguf.GGUFReader field by field and tensor by tensor (bytes
identical); the real files in ../shared the same way; error paths raise StrataError with the
library's message."""
import gc

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType as V, GGUFWriter

import strata
from conftest import SHARED

# (key, value, GGUF type) of every scalar type plus arrays
SCALARS = [
    ("t.u8", 250, V.UINT8), ("t.i8", -100, V.INT8), ("t.u16", 65000, V.UINT16),
    ("t.i16", -32000, V.INT16), ("t.u32", 4_000_000_000, V.UINT32), ("t.i32", -2_000_000_000, V.INT32),
    ("t.f32", 0.15625, V.FLOAT32), ("t.bool_t", True, V.BOOL), ("t.bool_f", False, V.BOOL),
    ("t.str", "héllo wörld ✓", V.STRING), ("t.empty_str", "", V.STRING),
    ("t.u64", 18_000_000_000_000_000_000, V.UINT64), ("t.i64", -9_000_000_000_000_000_000, V.INT64),
    ("t.f64", 3.141592653589793, V.FLOAT64),
]
ARRAYS = [
    ("a.i32", [1, -2, 3, 2_000_000_000], V.INT32),
    ("a.f32", [0.5, -1.25, 3e-8], V.FLOAT32),
    ("a.u8", list(range(200)), V.UINT8),
    ("a.bool", [True, False, True], V.BOOL),
    ("a.str", ["a", "", "ünïcode", "x" * 300], V.STRING),
    ("a.f64", [1e300, -2.5], V.FLOAT64),
]
NESTED = ("a.nested", [[1, 2, 3], [4], [5, 6]])  # (gguf-py refuses empty arrays)


def q_bytes(name, shape, rng):
    """Random well-formed quantized data (fp16 scale at offset 0 made finite) of ne = shape."""
    bs = strata.block_size(name)
    bb = strata.block_bytes(name)
    rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    nb = shape[0] // bs
    raw = rng.integers(0, 256, (rows, nb, bb), dtype=np.uint8)
    off = {"q6_K": 208, "q2_K": 80, "q3_K": 108}.get(name, 0)
    raw[:, :, off:off + 2] = np.array([0.01], dtype=np.float16).view(np.uint8)
    return raw.reshape(tuple(reversed(shape[1:])) + (nb * bb,))


def write_test_file(path, alignment=None):
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "testarch")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, val, vt in SCALARS:
        w.add_key_value(key, val, vt)
    for key, val, vt in ARRAYS:
        w.add_key_value(key, val, V.ARRAY, sub_type=vt)
    w.add_array(NESTED[0], NESTED[1])
    tensors = {}
    tensors["f32.vec"] = (rng.standard_normal(17).astype(np.float32), None)
    tensors["f32.mat"] = (rng.standard_normal((3, 5)).astype(np.float32), None)
    tensors["f16.mat"] = (rng.standard_normal((4, 64)).astype(np.float16), None)
    tensors["i32.vec"] = (np.arange(10, dtype=np.int32), None)
    for name, shape in (("q8_0", (64, 3)), ("q4_0", (32, 2, 2)), ("q4_K", (256, 2)),
                        ("q6_K", (512, 1)), ("iq4_nl", (32, 5))):
        tensors[f"{name}.w"] = (q_bytes(name, shape, rng), getattr(Q, name.upper()))
    bf = rng.standard_normal((2, 8)).astype(np.float32).view(np.uint32) >> 16
    tensors["bf16.mat"] = (bf.astype(np.uint16).view(np.uint8), Q.BF16)
    for name, (arr, raw_dtype) in tensors.items():
        if raw_dtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def reader_value(field):
    """Python value of a GGUFReader field (flat arrays and scalars; nested arrays excluded)."""
    if field.types[0] == V.ARRAY and field.types[-1] != V.STRING:
        v = field.contents()
        if field.types[-1] == V.BOOL:
            v = [bool(x) for x in v]
        return v
    v = field.contents()
    if field.types[0] == V.BOOL:
        v = bool(v)
    return v


def compare_with_reader(path):
    """Every field and tensor of path read by strata equals what GGUFReader reads."""
    r = GGUFReader(str(path))
    with strata.GGUF(path) as g:
        md = g.metadata
        rfields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
        assert list(md) == list(rfields)
        for key, f in rfields.items():
            assert g.value_type(key) == f.types[0].name.lower(), key
            if f.types[0] == V.ARRAY and len(f.types) > 2:
                continue  # nested: GGUFReader flattens them; checked against the writer input
            want = reader_value(f)
            got = md[key]
            if f.types[0] == V.FLOAT32 or (f.types[0] == V.ARRAY and f.types[-1] == V.FLOAT32):
                want = np.float32(want).tolist() if not isinstance(want, list) else \
                    [float(np.float32(x)) for x in want]
            assert got == want, key
        rversion = int(r.fields["GGUF.version"].contents())
        assert g.version == rversion
        assert g.alignment == r.alignment
        assert g.shards == [str(path)]
        assert len(g.tensors) == len(r.tensors)
        for info, rt in zip(g.tensors, r.tensors):
            assert info.name == rt.name
            assert info.type_id == int(rt.tensor_type)
            assert info.type == strata.type_name(int(rt.tensor_type))
            assert info.shape == tuple(int(x) for x in rt.shape)
            assert info.n_elements == int(rt.n_elements)
            assert info.n_bytes == int(rt.n_bytes)
            assert info.file_offset == int(rt.data_offset)
            assert info.shard == 0
            t = g.tensor(info.name)
            assert t.info == info
            assert t.data.dtype == np.uint8 and not t.data.flags.writeable
            assert t.data.tobytes() == np.asarray(rt.data).tobytes(), info.name
        return md


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_writer_file_matches_reader(tmp_path, alignment):
    path = tmp_path / "t.gguf"
    tensors = write_test_file(path, alignment)
    md = compare_with_reader(path)
    # values against what was written, nested arrays included
    for key, val, vt in SCALARS:
        want = float(np.float32(val)) if vt == V.FLOAT32 else val
        assert md[key] == want, key
    assert md["a.str"] == ARRAYS[4][1]
    assert md[NESTED[0]] == NESTED[1]
    assert md["general.architecture"] == "testarch"
    with strata.GGUF(path) as g:
        assert g.alignment == (alignment or 32)
        for info in g.tensors:
            assert info.offset % g.alignment == 0
        # dequantize: numpy shape is reversed ne, values as gguf-py computes them
        f = g.tensor("f32.mat").dequantize()
        assert f.shape == (3, 5) and np.array_equal(f, tensors["f32.mat"][0])
        h = g.tensor("f16.mat").dequantize()
        assert np.array_equal(h, tensors["f16.mat"][0].astype(np.float32))
        from gguf import quants as gq
        qt = g.tensor("q4_0.w")
        assert qt.info.shape == (32, 2, 2)
        d = qt.dequantize()
        assert d.shape == (2, 2, 32)
        assert np.array_equal(d, gq.dequantize(tensors["q4_0.w"][0], Q.Q4_0))


def test_views_outlive_the_file_object(tmp_path):
    path = tmp_path / "t.gguf"
    tensors = write_test_file(path)
    with strata.GGUF(path) as g:
        t = g.tensor("f32.vec")
    del g
    gc.collect()
    assert np.array_equal(t.data.view(np.float32), tensors["f32.vec"][0])
    with pytest.raises(ValueError):
        t.data[0] = 1  # read-only


def test_closed_file_refuses_access(tmp_path):
    path = tmp_path / "t.gguf"
    write_test_file(path)
    g = strata.GGUF(path)
    g.close()
    with pytest.raises(ValueError):
        g.tensors


def test_read_without_mmap_and_from_bytes(tmp_path):
    path = tmp_path / "t.gguf"
    write_test_file(path)
    with strata.GGUF(path, use_mmap=False) as g:
        a = g.tensor("q8_0.w").data.tobytes()
        keys = g.keys()
    m = strata.GGUF.from_bytes(path.read_bytes())
    assert m.tensor("q8_0.w").data.tobytes() == a
    assert m.keys() == keys
    assert m.shards == ["<memory>"]


def test_missing_tensor_and_key(tmp_path):
    path = tmp_path / "t.gguf"
    write_test_file(path)
    with strata.GGUF(path) as g:
        with pytest.raises(KeyError):
            g.tensor("nope")
        assert g.get("nope", 7) == 7
        assert "f32.vec" in g and "nope" not in g


def test_truncated_file_raises_with_offset(tmp_path):
    path = tmp_path / "t.gguf"
    write_test_file(path)
    data = path.read_bytes()
    for cut in (3, 20, len(data) // 3, len(data) - 5):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(strata.StrataError) as e:
            strata.GGUF(bad)
        assert e.value.status == strata.lib.STRATA_ERR_FORMAT, (cut, e.value)
        assert "offset" in e.value.message, e.value.message
        assert e.value.status_name == "STRATA_ERR_FORMAT"


def test_missing_file_raises_io(tmp_path):
    with pytest.raises(strata.StrataError) as e:
        strata.GGUF(tmp_path / "none.gguf")
    assert e.value.status == strata.lib.STRATA_ERR_IO
    assert "none.gguf" in e.value.message


def test_bad_magic(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"GGML" + b"\0" * 60)
    with pytest.raises(strata.StrataError) as e:
        strata.GGUF(p)
    assert "magic" in e.value.message


@pytest.mark.parametrize("rel", ["models/strata-tiny-moe-q8_0.gguf",
                                 "vocab/ggml-vocab-gpt-2.gguf",
                                 "vocab/ggml-vocab-llama-spm.gguf"])
# (ggml-vocab-qwen2.gguf is left out: GGUFReader takes ~20 s on its 150k-token arrays)
def test_shared_files_match_reader(rel):
    p = SHARED / rel
    if not p.is_file():
        pytest.skip(f"{p} not present (../shared data is optional)")
    md = compare_with_reader(p)
    assert "general.architecture" in md
    assert isinstance(md["tokenizer.ggml.tokens"], list) and md["tokenizer.ggml.tokens"]


def test_tiny_model_dequantizes_like_gguf():
    p = SHARED / "models/strata-tiny-moe-q8_0.gguf"
    if not p.is_file():
        pytest.skip(f"{p} not present")
    from gguf import quants as gq
    r = GGUFReader(str(p))
    with strata.GGUF(p) as g:
        for rt in r.tensors[:13]:
            got = g.tensor(rt.name).dequantize()
            want = gq.dequantize(np.asarray(rt.data), rt.tensor_type)
            assert got.shape == want.shape, rt.name
            assert np.array_equal(got, want), rt.name
