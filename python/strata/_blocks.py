"""_blocks.py - tensor types and block formats on numpy arrays: type names <-> ids, row sizes,
dequantize, quantize, dot products, CPU ISA selection, and quantizing whole GGUF files."""
from __future__ import annotations

import os

import numpy as np

from ._args import int_arg, path_arg
from ._ffi import StrataError, check, ffi, lib  # noqa: F401 (StrataError re-exported)


# ------------------------------------------------------------------------------------------------
# Types
# ------------------------------------------------------------------------------------------------

def type_id(t) -> int:
    """Type id of a name ("q4_K", case-insensitive) or an id (checked to be a known type)."""
    if isinstance(t, str):
        out = ffi.new("strata_type *")
        check(lib.strata_type_from_name(t.encode(), out), "strata_type_from_name")
        return int(out[0])
    t = int(t)
    if not lib.strata_type_is_known(t):
        raise ValueError(f"strata: {t} is not a known tensor type id")
    return t


def type_name(t) -> str:
    """ggml spelling of a type ("f32", "q4_K", ...); "unknown" for an unknown id."""
    if isinstance(t, str):
        t = type_id(t)
    return ffi.string(lib.strata_type_name(int(t))).decode()


def types() -> list[str]:
    """Names of every known tensor type, by id."""
    return [type_name(i) for i in range(lib.STRATA_TYPE_COUNT) if lib.strata_type_is_known(i)]


def block_size(t) -> int:
    return int(lib.strata_type_block_size(type_id(t)))


def block_bytes(t) -> int:
    return int(lib.strata_type_block_bytes(type_id(t)))


def row_bytes(t, n: int) -> int:
    """Bytes of a row of n weights; ValueError if n is not a multiple of the block size."""
    r = int(lib.strata_row_bytes(type_id(t), int(n)))
    if r < 0:
        raise ValueError(f"strata: {n} weights do not make whole {type_name(t)} blocks "
                         f"(block size {block_size(t)})")
    return r


def can_dequantize(t) -> bool:
    return bool(lib.strata_type_can_dequantize(type_id(t)))


def can_quantize(t) -> bool:
    return bool(lib.strata_type_can_quantize(type_id(t)))


def can_dot(t) -> bool:
    return bool(lib.strata_type_can_dot(type_id(t)))


def act_type(t) -> str | None:
    """Name of the activation type the dot product of weights of type t uses (f32, q8_0 or
    q8_K); None if t has no dot product."""
    a = int(lib.strata_act_type(type_id(t)))
    return None if a == lib.STRATA_TYPE_COUNT else type_name(a)


# ------------------------------------------------------------------------------------------------
# Block formats
# ------------------------------------------------------------------------------------------------

def _as_bytes(raw) -> np.ndarray:
    """A contiguous uint8 view (or copy, if not contiguous) of bytes or of a numpy array."""
    if isinstance(raw, np.ndarray):
        return np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    return np.frombuffer(raw, dtype=np.uint8)


def dequantize(t, raw, n: int | None = None) -> np.ndarray:
    """raw: bytes (or a numpy array) of n weights in type t's layout -> float32 array of n.
    n defaults to all whole blocks in raw."""
    tid = type_id(t)
    a = _as_bytes(raw)
    if n is None:
        n = a.size // block_bytes(tid) * block_size(tid)
    need = row_bytes(tid, n)
    if a.size < need:
        raise ValueError(f"strata: {n} {type_name(tid)} weights need {need} bytes, got {a.size}")
    out = np.empty(n, dtype=np.float32)
    check(lib.strata_dequantize_row(tid, ffi.from_buffer(a), ffi.from_buffer("float[]", out),
                                    n), "strata_dequantize_row")
    return out


def quantize(t, x, importance=None) -> bytes:
    """x: float32 values (any shape, flattened; size a multiple of the block size) -> bytes in
    type t's layout. importance: per-column importance (the last axis of x; an importance matrix's
    mean squared activations) for the types that take one (takes_importance), else None."""
    tid = type_id(t)
    x = np.asarray(x, dtype=np.float32)
    xs = np.ascontiguousarray(x.reshape(-1))
    n = xs.size
    out = np.empty(row_bytes(tid, n), dtype=np.uint8)
    if importance is None:
        check(lib.strata_quantize_row(tid, ffi.from_buffer("float[]", xs), ffi.from_buffer(out), n),
              "strata_quantize_row")
        return out.tobytes()
    w = np.ascontiguousarray(np.asarray(importance, dtype=np.float32).reshape(-1))
    ncol = w.size
    if ncol == 0 or n % ncol or (x.ndim and x.shape[-1] != ncol):
        raise ValueError(f"strata: importance of {ncol} columns for rows of {x.shape}")
    rb = row_bytes(tid, ncol)
    for r in range(n // ncol):
        check(lib.strata_quantize_row_importance(
            tid, ffi.from_buffer("float[]", xs[r * ncol:(r + 1) * ncol]),
            ffi.from_buffer(out[r * rb:(r + 1) * rb]), ncol, ffi.from_buffer("float[]", w)),
            "strata_quantize_row_importance")
    return out.tobytes()


def takes_importance(t) -> bool:
    """Whether type t's quantizer uses an importance matrix (quantize(..., importance=))."""
    return bool(lib.strata_type_takes_importance(type_id(t)))


def vec_dot(t, w, x) -> float:
    """dot(w, x): w the bytes of len(x) weights of type t, x float32 activations (quantized to
    act_type(t) inside, as the engine does)."""
    tid = type_id(t)
    xs = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(-1))
    n = xs.size
    wa = _as_bytes(w)
    need = row_bytes(tid, n)
    if wa.size < need:
        raise ValueError(f"strata: {n} {type_name(tid)} weights need {need} bytes, got {wa.size}")
    out = ffi.new("float *")
    check(lib.strata_vec_dot_f32(tid, ffi.from_buffer(wa), ffi.from_buffer("float[]", xs), n,
                                 out), "strata_vec_dot_f32")
    return float(out[0])


def vec_dot_q(t, w, xq, n: int) -> float:
    """dot(w, xq) with xq already in act_type(t)'s layout (strata_vec_dot)."""
    tid = type_id(t)
    wa, xa = _as_bytes(w), _as_bytes(xq)
    out = ffi.new("float *")
    check(lib.strata_vec_dot(tid, ffi.from_buffer(wa), ffi.from_buffer(xa), int(n), out),
          "strata_vec_dot")
    return float(out[0])


# ------------------------------------------------------------------------------------------------
# CPU instruction sets
# ------------------------------------------------------------------------------------------------

_ISA = {"scalar": 0, "avx2": 1, "avx512": 2, "best": 99}


def cpu_isa_supported() -> str:
    return ffi.string(lib.strata_cpu_isa_name(lib.strata_cpu_isa_supported())).decode()


def cpu_isa_active() -> str:
    return ffi.string(lib.strata_cpu_isa_name(lib.strata_cpu_isa_active())).decode()


def cpu_isa_set(name: str) -> None:
    """Selects the dot-product kernels: "scalar", "avx2", "avx512" or "best"."""
    if name not in _ISA:
        raise ValueError(f"strata: unknown ISA level {name!r} (one of {', '.join(_ISA)})")
    check(lib.strata_cpu_isa_set(_ISA[name]), "strata_cpu_isa_set")


def cpu_amx_supported() -> bool:
    """Whether the CPU and OS offer the AMX tiles (used for CPU batches; the same results)."""
    return bool(lib.strata_cpu_amx_supported())


def cpu_amx_active() -> bool:
    return bool(lib.strata_cpu_amx_active())


def cpu_amx_set(enable: bool) -> None:
    """Turns the AMX tiles on or off (process-wide); on where there are none raises StrataError."""
    check(lib.strata_cpu_amx_set(1 if enable else 0), "strata_cpu_amx_set")


# ------------------------------------------------------------------------------------------------
# Model files
# ------------------------------------------------------------------------------------------------

def quantize_file(in_path, out_path, type, n_threads: int = 0,
                  allow_requantize: bool = False, type_experts=None, type_dense=None,
                  type_down=None) -> dict:
    """Rewrites a GGUF model with its weights in `type` (strata_quantize_file); type_experts
    (ffn_*_exps but ffn_down_exps), type_dense (other weights but ffn_down) and type_down
    (ffn_down, ffn_down_exps) override it where given. Returns the counts: n_tensors,
    n_quantized, n_fallback, n_kept, bytes_in, bytes_out."""
    p = ffi.new("strata_quantize_params *", lib.strata_quantize_default_params())
    stats = ffi.new("strata_quantize_stats *")
    in_path, out_path = path_arg("in_path", in_path), path_arg("out_path", out_path, must_exist=False)
    p.type = type_id(type)
    p.n_threads = int_arg("n_threads", n_threads)
    p.allow_requantize = 1 if allow_requantize else 0
    for field, t in (("type_experts", type_experts), ("type_dense", type_dense),
                     ("type_down", type_down)):
        setattr(p, field, -1 if t is None else type_id(t))
    p.stats = stats
    check(lib.strata_quantize_file(os.fsencode(in_path), os.fsencode(out_path), p),
          "strata_quantize_file")
    return {k: int(getattr(stats, k)) for k in
            ("n_tensors", "n_quantized", "n_fallback", "n_kept", "bytes_in", "bytes_out")}


__all__ = ["StrataError", "type_id", "type_name", "types", "block_size", "block_bytes",
           "row_bytes", "can_dequantize", "can_quantize", "can_dot", "act_type", "dequantize",
           "quantize", "vec_dot", "vec_dot_q", "cpu_isa_supported", "cpu_isa_active",
           "cpu_isa_set", "quantize_file"]
