"""test_ffi.py - the binding and the headers cannot drift: every function and enum constant that
the public headers (strata.h, strata_gguf.h, strata_quant.h) declare is reachable through the ffi
object, and the cdef in use is exactly what the derivation makes from the header files as they are
now."""
import re

import cffi
import pytest

import strata
from strata import _ffi


def header_text():
    d = _ffi.find_header().parent
    return "".join((d / h).read_text(encoding="utf-8") for h in _ffi.HEADERS)


def declared_functions(text):
    # parsed independently of the derivation: STRATA_API <return type> strata_xxx(
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return sorted(set(re.findall(r"\bSTRATA_API\b[^;(]*?\b(strata_[a-z0-9_]+)\s*\(", text)))


def declared_enum_constants(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    names = []
    for body in re.findall(r"typedef\s+enum\s+\w*\s*\{(.*?)\}", text, flags=re.S):
        names += re.findall(r"\b(STRATA_[A-Z0-9_]+)\s*=\s*(-?\d+)", body)
    return names


def test_header_found_is_the_repository_header():
    assert _ffi.HEADER_PATH.is_file()
    assert strata.HEADER_PATH == _ffi.HEADER_PATH


def test_every_function_is_bound():
    funcs = declared_functions(header_text())
    assert len(funcs) >= 40, funcs  # the header really was parsed
    missing = [f for f in funcs if not hasattr(strata.lib, f)]
    assert not missing, f"declared in the headers but not reachable: {missing}"


def test_every_enum_constant_is_bound_with_its_value():
    consts = declared_enum_constants(header_text())
    assert len(consts) >= 60
    for name, value in consts:
        assert getattr(strata.lib, name) == int(value), name


def test_version_macros_match_library():
    lib = strata.lib
    assert lib.strata_abi_version() == lib.STRATA_ABI_VERSION
    assert lib.strata_version_number() == (lib.STRATA_VERSION_MAJOR * 10000 +
                                           lib.STRATA_VERSION_MINOR * 100 +
                                           lib.STRATA_VERSION_PATCH)
    assert strata.version() == "%d.%d.%d" % (lib.STRATA_VERSION_MAJOR, lib.STRATA_VERSION_MINOR,
                                            lib.STRATA_VERSION_PATCH)


def test_cdef_is_current_derivation():
    # the text in use equals the derivation of the header file right now, and a fresh FFI
    # parses it (cffi's C parser is the compile-time check)
    d = _ffi.find_header().parent
    derived = "".join(_ffi.derive_cdef((d / h).read_text(encoding="utf-8")) for h in _ffi.HEADERS)
    assert strata.CDEF == derived
    fresh = cffi.FFI()
    fresh.cdef(derived)
    assert fresh.sizeof("strata_backend_info") == strata.ffi.sizeof("strata_backend_info")
    assert fresh.sizeof("strata_tensor_info") == strata.ffi.sizeof("strata_tensor_info")


def test_derivation_strips_what_cffi_cannot_parse():
    text = '''/* c */
#ifndef X
#define X
#define STRATA_API __attribute__((visibility("default")))
#define STRATA_FOO 12
#ifdef __cplusplus
extern "C" {
#endif
STRATA_API int strata_f(void); // trailing
#ifdef __cplusplus
}
#endif
#endif
'''
    out = _ffi.derive_cdef(text)
    assert out == "#define STRATA_FOO 12\nint strata_f(void);\n"


def test_struct_layouts_match_c():
    ffi = strata.ffi
    assert ffi.sizeof("strata_gguf_value") == 32
    assert ffi.offsetof("strata_tensor_info", "ne") == 16


def test_errors_raise_with_status_and_message():
    with pytest.raises(strata.StrataError) as e:
        strata.type_id("q9_Z")
    assert e.value.status == strata.lib.STRATA_ERR_NOT_FOUND
    assert e.value.status_name == "STRATA_ERR_NOT_FOUND"
    assert "q9_Z" in e.value.message and "q9_Z" in str(e.value)


def test_backends():
    b = strata.backends()
    names = [x["name"] for x in b]
    assert names == ["cpu", "cuda"]
    cpu = b[0]
    assert cpu["compiled"] and cpu["available"] and cpu["detail"]
    for x in b:
        assert set(x) == {"name", "compiled", "available", "detail"}
        assert isinstance(x["detail"], str)
        if not x["compiled"]:
            assert not x["available"]


def test_type_helpers():
    assert strata.type_id("Q4_K") == 12 and strata.type_name(12) == "q4_K"
    assert strata.type_name("q8_0") == "q8_0"
    assert strata.row_bytes("q4_0", 64) == 36
    with pytest.raises(ValueError):
        strata.row_bytes("q4_0", 33)
    assert strata.act_type("q4_K") == "q8_K"
    assert strata.act_type("q4_0") == "q8_0"
    assert strata.act_type("bf16") == "f32"
    assert "iq4_xs" in strata.types() and "unknown" not in strata.types()
    assert strata.cpu_isa_supported() in ("scalar", "avx2", "avx512", "avx512-vnni")


def test_cpu_amx_switch():
    # AMX is on by default where the CPU and OS offer it; turning it off always works, turning it
    # on where there is none raises; either way the results are the same (test_isa_amx)
    if strata.cpu_amx_supported():
        assert strata.cpu_amx_active() == (strata.cpu_isa_active() in ("avx512", "avx512-vnni"))
        strata.cpu_amx_set(False)
        assert not strata.cpu_amx_active()
        strata.cpu_amx_set(True)
    else:
        assert not strata.cpu_amx_active()
        with pytest.raises(strata.StrataError):
            strata.cpu_amx_set(True)
        strata.cpu_amx_set(False)
        assert not strata.cpu_amx_active()
