"""test_quant_oracle.py - THE block-format oracle: Strata's dequantizers, quantizers and dot
products against the gguf Python package (gguf.quants, an independent implementation of every
ggml block layout).

- dequantize: random well-formed blocks (random bytes, half-precision scale fields overwritten with
  finite values) must dequantize EXACTLY as gguf.quants.dequantize does;
- quantize: Q8_0/Q4_0 bit-exact with gguf.quants.quantize, F16 with numpy, BF16 with gguf;
  Q4_K/Q6_K checked by dequantizing Strata's bytes with gguf (a layout cross-check) under an error
  bound;
- dot products: strata.vec_dot against a float64 dot of gguf-dequantized weights with the
  activations quantized to the activation type and back, at every ISA level the CPU has."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants as gq

import strata

# type name -> (weights per block, bytes per block, byte offsets of fp16 fields)
LAYOUTS = {
    "f32": (1, 4, ()),
    "f16": (1, 2, ()),
    "bf16": (1, 2, ()),
    "q4_0": (32, 18, (0,)),
    "q4_1": (32, 20, (0, 2)),
    "q5_0": (32, 22, (0,)),
    "q5_1": (32, 24, (0, 2)),
    "q8_0": (32, 34, (0,)),
    "q2_K": (256, 84, (80, 82)),
    "q3_K": (256, 110, (108,)),
    "q4_K": (256, 144, (0, 2)),
    "q5_K": (256, 176, (0, 2)),
    "q6_K": (256, 210, (208,)),
    "iq4_nl": (32, 18, (0,)),
    "iq4_xs": (256, 136, (0,)),
    "iq3_xxs": (256, 98, (0,)),
    "iq3_s": (256, 110, (0,)),
    "iq2_xxs": (256, 66, (0,)),
    "iq2_xs": (256, 74, (0,)),
    "iq2_s": (256, 82, (0,)),
    "iq1_s": (256, 50, (0,)),
    "iq1_m": (256, 56, ()),  # its f16 scale is spread over the top nibbles of 4 u16 at 48
    "mxfp4": (32, 17, ()),  # an E8M0 exponent byte, no f16
}
GGUF_TYPE = {name: getattr(Q, name.upper()) for name in LAYOUTS}
N_ELEMS = 256 * 256  # several hundred blocks of every type


def finite_halves(rng, n, wild=True):
    """n finite fp16 bit patterns: mostly moderate scales, some raw finite patterns (subnormals,
    signed zeros, extremes) when wild."""
    vals = (rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 0, n)).astype(np.float16)
    bits = vals.view(np.uint16).copy()
    if wild:
        raw = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
        raw = np.where((raw & 0x7C00) == 0x7C00, raw & 0x83FF, raw)  # no inf/nan: exponent 0
        pick = rng.random(n) < 0.2
        bits = np.where(pick, raw, bits).astype(np.uint16)
    return bits


def random_blocks(name, n_elems, rng, wild=True):
    """Random well-formed bytes of n_elems weights of type name."""
    bs, bb, halves = LAYOUTS[name]
    nb = n_elems // bs
    if name == "f32":
        return (rng.standard_normal(n_elems) * 10.0 ** rng.uniform(-3, 3, n_elems)) \
            .astype(np.float32).view(np.uint8).copy()
    if name in ("f16", "bf16"):
        if name == "f16":
            bits = finite_halves(rng, n_elems, wild)
        elif not wild:
            bits = (rng.standard_normal(n_elems) * 10.0 ** rng.uniform(-3, 3, n_elems)) \
                .astype(np.float32).view(np.uint32) >> 16
            bits = bits.astype(np.uint16)
        else:
            bits = rng.integers(0, 1 << 16, n_elems, dtype=np.uint32).astype(np.uint16)
            bits = np.where((bits & 0x7F80) == 0x7F80, bits & 0x807F, bits).astype(np.uint16)
        return bits.view(np.uint8).copy()
    raw = rng.integers(0, 256, (nb, bb), dtype=np.uint8)
    for off in halves:
        raw[:, off:off + 2] = finite_halves(rng, nb, wild).view(np.uint8).reshape(nb, 2)
    if name == "iq1_m":
        words = raw[:, 48:56].copy().view(np.uint16)  # (nb, 4)
        d = finite_halves(rng, nb, wild)
        for k in range(4):  # nibble k of d into the top nibble of word k
            words[:, k] = (words[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        raw[:, 48:56] = words.view(np.uint8)
    if name == "mxfp4" and not wild:  # exponents near 1 (wild: any, 2^127 * 6 included)
        raw[:, 0] = rng.integers(112, 136, nb, dtype=np.uint8)
    return raw.reshape(-1)


def gguf_dequant(name, raw):
    with np.errstate(over="ignore"):  # MXFP4's largest exponents overflow to inf (both sides)
        return gq.dequantize(np.ascontiguousarray(raw), GGUF_TYPE[name]).reshape(-1).astype(np.float32)


# ------------------------------------------------------------------------------------------------
# Dequantize: exact
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(LAYOUTS))
def test_dequantize_matches_gguf_exactly(name):
    if not strata.can_dequantize(name):
        pytest.fail(f"strata cannot dequantize {name}")
    rng = np.random.default_rng(1000 + strata.type_id(name))
    n = N_ELEMS if LAYOUTS[name][0] > 1 else 8192
    raw = random_blocks(name, n, rng)
    assert strata.row_bytes(name, n) == raw.size
    got = strata.dequantize(name, raw.tobytes(), n)
    want = gguf_dequant(name, raw)
    assert got.shape == want.shape
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        bs = LAYOUTS[name][0]
        i = bad[0]
        pytest.fail(f"{name}: {bad.size} of {n} values differ; first at {i} (block {i // bs}, "
                    f"index {i % bs}): strata {got[i]!r} gguf {want[i]!r}")


def test_dequantize_rejects_bad_length():
    with pytest.raises(ValueError):
        strata.dequantize("q4_0", b"\0" * 18, 33)
    with pytest.raises(ValueError):
        strata.dequantize("q4_0", b"\0" * 17, 32)


# ------------------------------------------------------------------------------------------------
# Quantize
# ------------------------------------------------------------------------------------------------

def distributions(n, rng):
    """name -> float32 data of n values (n a multiple of 256)."""
    ties = (rng.integers(-254, 255, n) / 2.0).astype(np.float32)  # halves: exact rounding ties
    outlier = (rng.standard_normal(n) * 0.01).astype(np.float32)
    outlier[::32] = 3.0
    mixed = rng.standard_normal(n).astype(np.float32)
    mixed[:32] = 0.0  # a whole zero block
    mixed[64:96] = -1e-7  # a constant block
    return {
        "normal": rng.standard_normal(n).astype(np.float32),
        "uniform": rng.uniform(-1, 1, n).astype(np.float32),
        "zeros": np.zeros(n, dtype=np.float32),
        "tiny": (rng.standard_normal(n) * 1e-6).astype(np.float32),
        "subnormal-scale": (rng.standard_normal(n) * 1e-38).astype(np.float32),
        "large": (rng.standard_normal(n) * 1e4).astype(np.float32),
        "ties": ties,
        "outlier": outlier,
        "mixed": mixed,
        "positive": rng.uniform(0, 5, n).astype(np.float32),
    }


@pytest.mark.parametrize("name", ["q8_0", "q4_0"])
def test_quantize_bit_exact_with_gguf(name):
    rng = np.random.default_rng(7)
    for dist, x in distributions(4096, rng).items():
        if dist == "subnormal-scale":
            continue  # 1/d overflows: the reference itself is undefined there
        got = np.frombuffer(strata.quantize(name, x), dtype=np.uint8)
        want = gq.quantize(x.reshape(-1, 4096), GGUF_TYPE[name]).reshape(-1)
        if not np.array_equal(got, want):
            bb = LAYOUTS[name][1]
            blk = np.flatnonzero(got != want)[0] // bb
            pytest.fail(f"{name} {dist}: block {blk} differs: strata {got[blk*bb:(blk+1)*bb]} "
                        f"gguf {want[blk*bb:(blk+1)*bb]}")


def test_quantize_f16_matches_numpy():
    rng = np.random.default_rng(8)
    x = np.concatenate([
        rng.standard_normal(4096).astype(np.float32),
        (rng.standard_normal(1024) * 1e-6).astype(np.float32),  # subnormal halves
        (rng.standard_normal(1024) * 1e-9).astype(np.float32),  # underflow to zero
        (rng.standard_normal(1024) * 7e4).astype(np.float32),   # overflow to inf
        np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 2.0**-24, 2.0**-25,
                  2.0**-25 * 1.0001, 1 + 2.0**-11, 1 + 3 * 2.0**-11], dtype=np.float32),
    ])
    got = np.frombuffer(strata.quantize("f16", x), dtype=np.uint16)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


def test_quantize_bf16_matches_gguf():
    rng = np.random.default_rng(9)
    x = np.concatenate([
        rng.standard_normal(4096).astype(np.float32),
        rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32),
    ])
    x = x[: x.size // 2 * 2]
    got = np.frombuffer(strata.quantize("bf16", x), dtype=np.uint16)
    want = gq.quantize(x.reshape(1, -1), Q.BF16).reshape(-1).view(np.uint16)
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


def test_quantize_f32_is_identity():
    x = np.random.default_rng(3).standard_normal(100).astype(np.float32)
    assert strata.quantize("f32", x) == x.tobytes()


# Bounds on the RMS error relative to the RMS of the data (besides the brief's sqrt(sum d^2)/n on
# 0.1 + 2 cos(i)). Uniform quantization theory: step/sqrt(12) with step ~ block range / levels gives
# ~0.087 for q4_K (15 levels over 32 values) and ~0.016 for q6_K (63 levels over 16 values) on
# gaussian data; measured 0.071 and 0.017.
K_BOUNDS = {"q4_K": 0.09, "q6_K": 0.022}
# Data this small underflows the fp16 super-block scales (d = max scale / 63 < 2^-24): the format
# cannot represent it, so only finiteness is checked there.
K_UNREPRESENTABLE = ("tiny", "subnormal-scale")


@pytest.mark.parametrize("name", ["q4_K", "q6_K"])
def test_k_quantize_layout_and_error(name):
    n = 4096
    x = (0.1 + 2.0 * np.cos(np.arange(n, dtype=np.float64))).astype(np.float32)
    q = strata.quantize(name, x)
    assert len(q) == strata.row_bytes(name, n)
    deq = gguf_dequant(name, np.frombuffer(q, dtype=np.uint8))
    # the gguf reading of Strata's bytes equals Strata's own reading: same layout
    assert np.array_equal(deq, strata.dequantize(name, q, n))
    err = np.sqrt(np.sum((deq.astype(np.float64) - x) ** 2)) / n
    assert err < 0.002, f"{name}: sqrt(sum d^2)/n = {err}"
    rng = np.random.default_rng(11)
    for dist, y in distributions(n, rng).items():
        yq = strata.quantize(name, y)
        yd = gguf_dequant(name, np.frombuffer(yq, dtype=np.uint8)).astype(np.float64)
        rms = np.sqrt(np.mean(y.astype(np.float64) ** 2))
        rel = np.sqrt(np.mean((yd - y) ** 2)) / rms if rms > 0 else np.abs(yd).max()
        assert np.all(np.isfinite(yd)), dist
        if dist in K_UNREPRESENTABLE:
            continue
        assert rel < K_BOUNDS[name], f"{name} {dist}: relative RMS error {rel}"


def test_quantize_rejects_bad_length():
    with pytest.raises(ValueError):
        strata.quantize("q4_K", np.zeros(100, dtype=np.float32))


# ------------------------------------------------------------------------------------------------
# Dot products
# ------------------------------------------------------------------------------------------------

def np_q8_K_roundtrip(x):
    """Emulation of llama.cpp's Q8_K activation quantizer: per 256 values the element of largest
    magnitude (with its sign) gives iscale = -127/max, q = nearest(iscale*x) capped at 127,
    d = 1/iscale; returns q*d."""
    xb = x.astype(np.float32).reshape(-1, 256)
    imax = np.abs(xb).argmax(axis=1)
    mx = xb[np.arange(xb.shape[0]), imax]
    out = np.zeros_like(xb)
    nz = mx != 0
    iscale = (np.float32(-127.0) / mx[nz]).astype(np.float32)
    q = np.minimum(np.rint(iscale[:, None] * xb[nz]), 127)
    d = (np.float32(1.0) / iscale).astype(np.float32)
    out[nz] = q * d[:, None]
    return out.reshape(-1)


def act_roundtrip(act, x):
    if act == "f32":
        return x.astype(np.float32)
    if act == "q8_0":
        return gq.dequantize(gq.quantize(x.reshape(1, -1), Q.Q8_0), Q.Q8_0).reshape(-1)
    if act == "q8_K":
        return np_q8_K_roundtrip(x)
    raise AssertionError(act)


def isa_levels():
    best = strata.cpu_isa_supported()
    order = ["scalar", "avx2", "avx512"]
    top = 2 if best.startswith("avx512") else order.index(best)
    return order[: top + 1]


DOT_TYPES = [t for t in LAYOUTS]
EXPECTED_ACT = {"f32": "f32", "f16": "f32", "bf16": "f32", "q4_0": "q8_0", "q4_1": "q8_0",
                "q5_0": "q8_0", "q5_1": "q8_0", "q8_0": "q8_0", "iq4_nl": "q8_0", "mxfp4": "q8_0"}


@pytest.mark.parametrize("isa", isa_levels())
@pytest.mark.parametrize("name", DOT_TYPES)
def test_vec_dot_against_float64(name, isa):
    if not strata.can_dot(name):
        pytest.skip(f"strata has no dot product for {name} (yet)")
    act = strata.act_type(name)
    assert act == EXPECTED_ACT.get(name, "q8_K")
    rng = np.random.default_rng(500 + strata.type_id(name))
    strata.cpu_isa_set(isa)
    try:
        for n in (256, 1024, 4096):
            for trial in range(4):
                w = random_blocks(name, n, rng, wild=False)
                x = rng.standard_normal(n).astype(np.float32)
                if trial == 1:
                    x *= 1e-3
                if trial == 2:
                    x[: n // 2] = 0.0
                wd = gguf_dequant(name, w).astype(np.float64)
                xd = act_roundtrip(act, x).astype(np.float64)
                ref = float(np.dot(wd, xd))
                scale = float(np.sum(np.abs(wd * xd)))
                got = strata.vec_dot(name, w, x)
                assert abs(got - ref) <= 1e-4 * scale + 1e-30, \
                    f"{name} {isa} n={n} trial={trial}: got {got} want {ref} (scale {scale})"
    finally:
        strata.cpu_isa_set("best")


def test_vec_dot_q_matches_vec_dot():
    rng = np.random.default_rng(5)
    w = random_blocks("q4_0", 512, rng, wild=False)
    x = rng.standard_normal(512).astype(np.float32)
    xq = strata.quantize("q8_0", x)
    assert strata.vec_dot_q("q4_0", w, xq, 512) == strata.vec_dot("q4_0", w, x)
