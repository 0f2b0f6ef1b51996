"""_gguf.py - GGUF files from Python: strata.GGUF opens and validates a model (all shards of a
split one) through libstrata and exposes its metadata as Python values, its tensor table as
TensorInfo records, and each tensor's bytes as a zero-copy read-only numpy view.

Lifetime: the C handle belongs to a small _Handle object. A GGUF and every view made from it hold
a reference to that object, so closing the GGUF (or leaving its `with` block) releases the mapping
only once the last view is gone."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ._args import path_arg
from ._ffi import check, ffi, lib
from ._blocks import type_name


# ------------------------------------------------------------------------------------------------
# Handle and zero-copy views
# ------------------------------------------------------------------------------------------------

class _Handle:
    """Owns one strata_gguf*; frees it when garbage-collected."""

    def __init__(self, ptr):
        self.ptr = ffi.gc(ptr, lib.strata_gguf_free)


class _View:
    """Exposes len bytes at a C address through the numpy array interface, keeping `owner`
    (the _Handle) alive as long as any array made from it."""

    def __init__(self, owner, address: int, size: int):
        self._owner = owner
        self.__array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (address, True),  # read-only
            "version": 3,
        }


# ------------------------------------------------------------------------------------------------
# Metadata values
# ------------------------------------------------------------------------------------------------

_G = None  # filled lazily with the GGUF value type ids


def _gtypes():
    global _G
    if _G is None:
        _G = {name: getattr(lib, "STRATA_GGUF_" + name) for name in (
            "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING",
            "ARRAY", "UINT64", "INT64", "FLOAT64")}
    return _G


def _decode_str(ptr, length: int):
    raw = ffi.unpack(ptr, length) if length else b""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw  # not UTF-8: the bytes as stored


def _value(gptr, v):
    """strata_gguf_value -> Python value (int, float, bool, str/bytes, list)."""
    g = _gtypes()
    t = v.type
    if t in (g["UINT8"], g["UINT16"], g["UINT32"], g["UINT64"]):
        return int(v.v.u64)
    if t in (g["INT8"], g["INT16"], g["INT32"], g["INT64"]):
        return int(v.v.i64)
    if t in (g["FLOAT32"], g["FLOAT64"]):
        return float(v.v.f64)
    if t == g["BOOL"]:
        return bool(v.v.u64)
    if t == g["STRING"]:
        return _decode_str(v.v.str.ptr, int(v.v.str.len))
    if t == g["ARRAY"]:
        n = int(v.v.arr.count)
        et = v.v.arr.elem_type
        e = ffi.new("strata_gguf_value *")
        vp = ffi.addressof(v)
        get = lib.strata_gguf_array_get
        ev = e[0]
        if et == g["STRING"]:  # fast path: vocabularies hold 100k+ strings
            out = [None] * n
            unpack = ffi.unpack
            for i in range(n):
                if get(gptr, vp, i, e) != 0:
                    check(get(gptr, vp, i, e), "strata_gguf_array_get")
                s = ev.v.str
                raw = unpack(s.ptr, s.len) if s.len else b""
                try:
                    out[i] = raw.decode("utf-8")
                except UnicodeDecodeError:
                    out[i] = raw
            return out
        out = []
        for i in range(n):
            check(get(gptr, vp, i, e), "strata_gguf_array_get")
            out.append(_value(gptr, ev))
        return out
    raise ValueError(f"strata: unknown GGUF value type {t}")


# ------------------------------------------------------------------------------------------------
# Tensors
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file. shape is ne[0..n_dims) (ne[0] = row length, as GGUF stores it);
    numpy arrays of the tensor are shaped reversed(shape)."""
    name: str
    type: str
    type_id: int
    shape: tuple
    n_elements: int
    offset: int
    file_offset: int
    n_bytes: int
    shard: int


class Tensor:
    """A tensor's info and bytes. .data is a read-only uint8 view over the file mapping."""

    def __init__(self, info: TensorInfo, data: np.ndarray):
        self.info = info
        self.data = data

    @property
    def name(self) -> str:
        return self.info.name

    def dequantize(self) -> np.ndarray:
        """float32 array shaped reversed(ne), e.g. (ne1, ne0) for a matrix (as gguf-py does)."""
        n = self.info.n_elements
        out = np.empty(n, dtype=np.float32)
        if n:
            check(lib.strata_dequantize_row(self.info.type_id, ffi.from_buffer(self.data),
                                            ffi.from_buffer("float[]", out), n), "strata_dequantize_row")
        return out.reshape(tuple(reversed(self.info.shape)))

    def __repr__(self):
        i = self.info
        return f"Tensor({i.name!r}, {i.type}, shape={i.shape})"


# ------------------------------------------------------------------------------------------------
# The file
# ------------------------------------------------------------------------------------------------

class GGUF:
    """An opened, validated GGUF model. Use as a context manager or call close()."""

    def __init__(self, path, use_mmap: bool = True, open_shards: bool = True):
        self.path = path_arg("path", path)
        params = ffi.new("strata_gguf_params *", lib.strata_gguf_default_params())
        params.use_mmap = 1 if use_mmap else 0
        params.open_shards = 1 if open_shards else 0
        out = ffi.new("strata_gguf **")
        check(lib.strata_gguf_open(os.fsencode(self.path), params, out), "strata_gguf_open")
        self._h = _Handle(out[0])
        self._metadata = None
        self._tensors = None
        self._by_name = None

    @classmethod
    def from_bytes(cls, data: bytes):
        """Validates a GGUF image held in memory (copied into the handle)."""
        self = cls.__new__(cls)
        self.path = "<memory>"
        out = ffi.new("strata_gguf **")
        check(lib.strata_gguf_open_memory(data, len(data), 0, ffi.NULL, out),
              "strata_gguf_open_memory")
        self._h = _Handle(out[0])
        self._metadata = None
        self._tensors = None
        self._by_name = None
        return self

    # -- lifetime --
    def close(self) -> None:
        """Drops this object's hold on the file; views made earlier stay valid."""
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def _ptr(self):
        if self._h is None:
            raise ValueError("strata: GGUF is closed")
        return self._h.ptr

    # -- file facts --
    @property
    def version(self) -> int:
        return int(lib.strata_gguf_version(self._ptr))

    @property
    def alignment(self) -> int:
        return int(lib.strata_gguf_alignment(self._ptr))

    @property
    def shards(self) -> list[str]:
        p = self._ptr
        return [ffi.string(lib.strata_gguf_shard_path(p, i)).decode(errors="surrogateescape")
                for i in range(lib.strata_gguf_shard_count(p))]

    # -- metadata --
    def keys(self) -> list[str]:
        p = self._ptr
        return [ffi.string(lib.strata_gguf_kv_key(p, i)).decode(errors="surrogateescape")
                for i in range(lib.strata_gguf_kv_count(p))]

    def value_type(self, key: str) -> str:
        """GGUF type name of a key's value ("uint32", "array", ...)."""
        p = self._ptr
        i = lib.strata_gguf_kv_find(p, key.encode())
        if i < 0:
            raise KeyError(key)
        v = ffi.new("strata_gguf_value *")
        check(lib.strata_gguf_kv_value(p, i, v), "strata_gguf_kv_value")
        return ffi.string(lib.strata_gguf_type_name(v.type)).decode()

    def get(self, key: str, default=None):
        p = self._ptr
        i = lib.strata_gguf_kv_find(p, key.encode())
        if i < 0:
            return default
        v = ffi.new("strata_gguf_value *")
        check(lib.strata_gguf_kv_value(p, i, v), "strata_gguf_kv_value")
        return _value(p, v[0])

    @property
    def metadata(self) -> dict:
        """key -> Python value, in file order (computed once)."""
        if self._metadata is None:
            p = self._ptr
            md = {}
            v = ffi.new("strata_gguf_value *")
            for i in range(lib.strata_gguf_kv_count(p)):
                key = ffi.string(lib.strata_gguf_kv_key(p, i)).decode(errors="surrogateescape")
                check(lib.strata_gguf_kv_value(p, i, v), "strata_gguf_kv_value")
                md[key] = _value(p, v[0])
            self._metadata = md
        return self._metadata

    # -- tensors --
    def _info(self, i: int):
        t = ffi.new("strata_tensor_info *")
        check(lib.strata_gguf_tensor_info(self._ptr, i, t), "strata_gguf_tensor_info")
        return t

    @staticmethod
    def _to_info(t) -> TensorInfo:
        return TensorInfo(
            name=ffi.string(t.name).decode(errors="surrogateescape"),
            type=type_name(int(t.type)), type_id=int(t.type),
            shape=tuple(int(t.ne[d]) for d in range(t.n_dims)),
            n_elements=int(t.n_elements), offset=int(t.offset), file_offset=int(t.file_offset),
            n_bytes=int(t.n_bytes), shard=int(t.shard))

    @property
    def tensors(self) -> list[TensorInfo]:
        if self._tensors is None:
            self._tensors = [self._to_info(self._info(i))
                             for i in range(lib.strata_gguf_tensor_count(self._ptr))]
            self._by_name = {t.name: i for i, t in enumerate(self._tensors)}
        return self._tensors

    def __len__(self) -> int:
        return int(lib.strata_gguf_tensor_count(self._ptr))

    def __contains__(self, name: str) -> bool:
        return lib.strata_gguf_tensor_find(self._ptr, name.encode()) >= 0

    def tensor(self, name: str) -> Tensor:
        """The tensor called name (KeyError if none), its bytes a zero-copy read-only view."""
        i = lib.strata_gguf_tensor_find(self._ptr, name.encode())
        if i < 0:
            raise KeyError(f"strata: no tensor named {name!r}")
        t = self._info(i)
        info = self._to_info(t)
        addr = int(ffi.cast("uintptr_t", t.data))
        data = np.asarray(_View(self._h, addr, info.n_bytes)) if info.n_bytes else \
            np.zeros(0, dtype=np.uint8)
        data.flags.writeable = False
        return Tensor(info, data)

    def __repr__(self):
        state = "closed" if self._h is None else f"{len(self)} tensors"
        return f"GGUF({self.path!r}, {state})"
