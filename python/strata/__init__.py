"""strata - Python binding of Strata, an inference engine for Mixture-of-Experts GGUF models.

Loads libstrata.so through cffi (ABI mode); the declarations come from strata.h at import time.

    import strata
    strata.version(), strata.backends()
    with strata.GGUF("model.gguf") as g:
        g.metadata["general.architecture"], g.tensors[0], g.tensor("token_embd.weight").dequantize()
    strata.dequantize("q4_K", raw, n), strata.quantize("q8_0", x), strata.vec_dot("q4_0", w, x)

Every failing library call raises StrataError (.status, .status_name, .message); running out of
memory raises StrataMemoryError, also a MemoryError, and a missing file StrataFileNotFoundError,
also a FileNotFoundError. Wrong argument types raise TypeError and values out of range ValueError,
at the call."""
from __future__ import annotations

from ._ffi import (CDEF, HEADER_PATH, LIBRARY_PATH, StrataError, StrataFileNotFoundError,
                   StrataMemoryError, check, ffi, lib)
from ._blocks import (act_type, block_bytes, block_size, can_dequantize, can_dot, can_quantize,
                      cpu_amx_active, cpu_amx_set, cpu_amx_supported,
                      cpu_isa_active, cpu_isa_set, cpu_isa_supported, dequantize, quantize,
                      quantize_file, row_bytes, takes_importance, type_id, type_name, types, vec_dot,
                      vec_dot_q)
from ._gguf import GGUF, Tensor, TensorInfo
from ._model import Model

__version__ = "0.5.0"


def version() -> str:
    """Version of the loaded library, "MAJOR.MINOR.PATCH"."""
    return ffi.string(lib.strata_version()).decode()


def backends() -> list[dict]:
    """One dict per compute backend: name, compiled, available, detail."""
    out = []
    info = ffi.new("strata_backend_info *")
    for kind in range(lib.STRATA_BACKEND_COUNT):
        check(lib.strata_backend_query(kind, info), "strata_backend_query")
        out.append({
            "name": ffi.string(info.name).decode() if info.name != ffi.NULL else str(kind),
            "compiled": bool(info.compiled),
            "available": bool(info.available),
            "detail": ffi.string(info.detail).decode(errors="replace"),
        })
    return out


__all__ = ["StrataError", "StrataMemoryError", "StrataFileNotFoundError", "Model", "GGUF", "Tensor", "TensorInfo", "version", "backends",
           "type_id", "type_name", "types", "block_size", "block_bytes", "row_bytes",
           "can_dequantize", "can_quantize", "can_dot", "act_type", "dequantize", "quantize",
           "vec_dot", "vec_dot_q", "cpu_isa_supported", "cpu_isa_active", "cpu_isa_set",
           "cpu_amx_supported", "cpu_amx_active", "cpu_amx_set",
           "quantize_file", "takes_importance", "ffi", "lib", "CDEF", "HEADER_PATH", "LIBRARY_PATH"]
