"""convert_hf_base.py - what every part of tools/convert_hf.py shares.

Owns: ConvertError (the one error the converter raises for a checkpoint it will not convert)
and the reading of a config's RoPE parameters (rope_params), which the generic hyperparameters
and the per-architecture checks of convert_hf_arch.py both take. A leaf: it imports no sibling.
"""
from __future__ import annotations


class ConvertError(Exception):
    pass


def _find(hp: dict, keys):
    for k in keys:
        if k in hp:
            return hp[k]
    return None


def rope_params(hp: dict) -> dict:
    """llama.cpp's TextModel.rope_parameters: rope_parameters (transformers 5) or rope_scaling,
    with rope_theta and rope_type mirrored into it."""
    rp = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    theta = _find(hp, ["global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta",
                       "rotary_emb_base"])
    if "rope_theta" not in rp and theta is not None:
        rp["rope_theta"] = theta
    if "rope_type" not in rp and rp.get("type") is not None:
        rp["rope_type"] = rp["type"]
    return rp
