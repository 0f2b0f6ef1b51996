"""_ffi.py - the cffi binding (ABI mode) of libstrata.

Owns: finding the public headers (strata.h, strata_gguf.h, strata_quant.h) and libstrata.so,
deriving the cffi declarations from the headers at import time (so the binding cannot drift from
the C API), loading the library, checking that its ABI is the headers', and turning failing status
codes into StrataError.

Header search order (the folder of the first strata.h found; the other two are read beside it):
$STRATA_HEADER, python/strata/strata.h (copies made by packaging), <repo>/c/include/strata.h.
Library search order: $STRATA_LIB, python/strata/libstrata.so, <repo>/libstrata.so.
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import cffi

_PKG_DIR = Path(__file__).resolve().parent
_REPO_DIR = _PKG_DIR.parent.parent


# ------------------------------------------------------------------------------------------------
# Header -> cdef
# ------------------------------------------------------------------------------------------------

def header_candidates() -> list[Path]:
    """Where strata.h is looked for, in order."""
    out = []
    env = os.environ.get("STRATA_HEADER")
    if env:
        out.append(Path(env))
    out.append(_PKG_DIR / "strata.h")
    out.append(_REPO_DIR / "c" / "include" / "strata.h")
    return out


def find_header() -> Path:
    tried = header_candidates()
    for p in tried:
        if p.is_file():
            return p
    raise ImportError("strata: cannot find strata.h; tried: " + ", ".join(map(str, tried)) +
                      " (set STRATA_HEADER)")


_INT_DEFINE = re.compile(r"^\s*#\s*define\s+(STRATA_[A-Z0-9_]+)\s+(-?(?:0x[0-9a-fA-F]+|\d+))\s*$")


def derive_cdef(header_text: str) -> str:
    """Turns the text of strata.h into declarations cffi's parser accepts.

    Drops comments, the `#ifdef __cplusplus` blocks (extern "C" and its closing brace), every
    preprocessor line except integer `#define STRATA_*` constants (cffi understands those), and
    the STRATA_API macro; collapses blank lines. Deterministic: the same header gives the same
    text."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"\\\n", " ", text)  # line continuations
    out = []
    skip_depth = 0  # inside an #ifdef __cplusplus ... #endif block (nesting counted)
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            directive = stripped[1:].strip()
            if skip_depth:
                if directive.startswith("if"):
                    skip_depth += 1
                elif directive.startswith("endif"):
                    skip_depth -= 1
                continue
            if re.match(r"ifdef\s+__cplusplus\b", directive) or \
               re.match(r"if\s+defined\s*\(?\s*__cplusplus", directive):
                skip_depth = 1
                continue
            m = _INT_DEFINE.match(stripped)
            if m and m.group(1) not in ("STRATA_API", "STRATA_H"):
                out.append(f"#define {m.group(1)} {m.group(2)}")
            continue
        if skip_depth:
            continue
        line = re.sub(r'extern\s+"C"\s*\{', "", line)
        line = re.sub(r"\bSTRATA_API\b\s*", "", line)
        line = line.rstrip()
        if line.strip():
            out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# Library
# ------------------------------------------------------------------------------------------------

def library_candidates() -> list[Path]:
    """Where libstrata.so is looked for, in order."""
    out = []
    env = os.environ.get("STRATA_LIB")
    if env:
        out.append(Path(env))
    out.append(_PKG_DIR / "libstrata.so")
    out.append(_REPO_DIR / "libstrata.so")
    return out


HEADERS = ("strata.h", "strata_gguf.h", "strata_quant.h")  # in include order
HEADER_PATH = find_header()
CDEF = "".join(derive_cdef((HEADER_PATH.parent / h).read_text(encoding="utf-8")) for h in HEADERS)

ffi = cffi.FFI()
ffi.cdef(CDEF)


def _load():
    errors = []
    for p in library_candidates():
        if not p.is_file():
            errors.append(f"{p} (not found)")
            continue
        try:
            return ffi.dlopen(str(p)), p
        except OSError as e:
            errors.append(f"{p} ({e})")
    raise ImportError("strata: cannot load libstrata.so; tried: " + "; ".join(errors) +
                      " (build it with `make`, or set STRATA_LIB)")


lib, LIBRARY_PATH = _load()
if lib.strata_abi_version() != lib.STRATA_ABI_VERSION:
    raise ImportError(f"strata: {LIBRARY_PATH} has ABI {lib.strata_abi_version()} but the headers in "
                      f"{HEADER_PATH.parent} have {lib.STRATA_ABI_VERSION}: rebuild it (make) or point "
                      "STRATA_LIB / STRATA_HEADER at a matching pair")


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------

class StrataError(Exception):
    """A failing libstrata call: .status (negative int), .status_name and .message."""

    def __init__(self, status: int, message: str, call: str = ""):
        self.status = int(status)
        self.status_name = ffi.string(lib.strata_status_name(status)).decode()
        self.message = message
        self.call = call
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class StrataMemoryError(StrataError, MemoryError):
    """STRATA_ERR_NOMEM: an allocation failed (catch it as MemoryError or StrataError)."""


class StrataFileNotFoundError(StrataError, FileNotFoundError):
    """A file to open is not there (catch it as FileNotFoundError or StrataError)."""

    def __init__(self, path: str, call: str = ""):
        super().__init__(lib.STRATA_ERR_IO, f"cannot open '{path}': no such file", call)
        self.errno, self.strerror, self.filename = errno.ENOENT, os.strerror(errno.ENOENT), path

    def __str__(self) -> str:
        return f"{self.status_name}: cannot open '{self.filename}': {self.strerror}"


def last_error() -> str:
    return ffi.string(lib.strata_last_error()).decode("utf-8", errors="replace")


def check(status: int, call: str = "") -> None:
    """Raises StrataError for a failing status (with this thread's library message);
    StrataMemoryError, also a MemoryError, for STRATA_ERR_NOMEM."""
    if status != 0:
        cls = StrataMemoryError if status == lib.STRATA_ERR_NOMEM else StrataError
        raise cls(status, last_error(), call)
