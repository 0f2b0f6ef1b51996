"""_args.py - argument checks shared by the package's entry points.

Owns the rules every public call applies before reaching the library: a wrong type raises
TypeError, a value out of range ValueError, a missing file FileNotFoundError, so a mistake is
reported at the call that made it instead of being read as something else (bytes as token ids, a
number as a byte count) or failing later."""
from __future__ import annotations

import numbers
import os
from typing import Iterable

from ._ffi import StrataFileNotFoundError


def _type_name(v) -> str:
    return type(v).__name__


def path_arg(name: str, v, must_exist: bool = True) -> str:
    """A filesystem path (str or os.PathLike) as str; TypeError for anything else, and
    FileNotFoundError (StrataFileNotFoundError) when must_exist and nothing is there."""
    if not isinstance(v, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), not {_type_name(v)}")
    p = os.fsdecode(os.fspath(v))
    if must_exist:
        file_exists(p)
    return p


def file_exists(p: str) -> None:
    """FileNotFoundError (also a StrataError) when nothing is at p."""
    if not os.path.exists(p):
        raise StrataFileNotFoundError(p)


def int_arg(name: str, v, lo: int | None = 0, hi: int | None = None) -> int:
    """An integer (not a bool) within [lo, hi] (None: unbounded)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {_type_name(v)}")
    v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"{name} must be >= {lo}, not {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, not {v}")
    return v


def float_arg(name: str, v, lo: float | None = None, hi: float | None = None) -> float:
    """A real number (not a bool, not NaN) within [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a number, not {_type_name(v)}")
    v = float(v)
    if v != v or (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"
        raise ValueError(f"{name} must be in {rng}, not {v}")
    return v


def token_ids(name: str, v, n_vocab: int) -> list[int]:
    """A sequence of token ids (ints in [0, n_vocab)) as a list. Text, bytes and single numbers are
    TypeErrors: text goes through tokenize(), and bytes are neither text nor ids."""
    if isinstance(v, (str, bytes, bytearray, memoryview)) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a sequence of token ids (ints), not {_type_name(v)}")
    out = []
    for t in v:
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise TypeError(f"{name} must hold token ids (ints), not {_type_name(t)}")
        t = int(t)
        if not 0 <= t < n_vocab:
            raise ValueError(f"{name}: token id {t} is outside the vocabulary (0..{n_vocab - 1})")
        out.append(t)
    return out


def text_arg(name: str, v) -> str:
    """Text (str); bytes and numbers are TypeErrors (decode bytes first)."""
    if not isinstance(v, str):
        hint = " (decode bytes to str first)" if isinstance(v, (bytes, bytearray)) else ""
        raise TypeError(f"{name} must be a str, not {_type_name(v)}{hint}")
    return v


def stop_strings(v) -> list[str]:
    """stop=: None, one string (one stop string, as in the OpenAI API), or an iterable of strings;
    empty strings are dropped."""
    if v is None:
        return []
    if isinstance(v, str):
        return [v] if v else []
    if isinstance(v, (bytes, bytearray)) or not isinstance(v, Iterable):
        raise TypeError(f"stop must be a str or a sequence of str, not {_type_name(v)}")
    out = []
    for s in v:
        if not isinstance(s, str):
            raise TypeError(f"stop must hold str, not {_type_name(s)}")
        if s:
            out.append(s)
    return out


MAX_STAGES = 8  # STRATA_MAX_STAGES


def _int_list(name: str, v, lo: int) -> list[int]:
    """A sequence of 1..MAX_STAGES ints >= lo as a list."""
    if isinstance(v, (str, bytes, bytearray)) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a sequence of ints, not {_type_name(v)}")
    out = [int_arg(name, x, lo=lo) for x in v]
    if not 1 <= len(out) <= MAX_STAGES:
        raise ValueError(f"{name} must name 1..{MAX_STAGES} stages, not {len(out)}")
    return out


def split_args(layer_split, split_device, pipeline_windows, peer_device, expert_cache_devices) -> dict:
    """The layer split's options (docs/MULTI_GPU.md) as strata_split_params fields: only those
    given, so the library's defaults stand for the rest. layer_split: None (no split), "auto" or
    layer counts per stage; split_device: each stage's CUDA device; expert_cache_devices: stage
    1..N's expert cache slots ("auto", a count, or 0 for the default from expert_cache). The library checks them against the model and
    the devices (counts summing to n_layer, devices that exist)."""
    out: dict = {}
    n = 0
    if isinstance(layer_split, str):
        if layer_split != "auto":
            raise ValueError(f"layer_split must be a sequence of layer counts or 'auto', not {layer_split!r}")
        out["auto_layers"] = 1
    elif layer_split is not None:
        out["layers"] = _int_list("layer_split", layer_split, 1)
        n = len(out["layers"])
    if split_device is not None:
        out["device"] = _int_list("split_device", split_device, 0)
        if n and len(out["device"]) != n:
            raise ValueError(f"layer_split names {n} stages, split_device {len(out['device'])}")
        n = len(out["device"])
    if n:
        out["n_stages"] = n
    if pipeline_windows:
        out["pipeline_windows"] = 1
    out["peer_device"] = int_arg("peer_device", peer_device, lo=-1)
    if expert_cache_devices is not None:
        caches = [-1 if x == "auto" else x for x in expert_cache_devices]
        caches = _int_list("expert_cache_devices", caches, -1)
        if len(caches) > MAX_STAGES - 1:
            raise ValueError(f"expert_cache_devices names stages 1..{MAX_STAGES - 1}, not {len(caches)}")
        out["expert_cache"] = [0] + caches
    return out
