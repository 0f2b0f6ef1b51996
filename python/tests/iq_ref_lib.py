"""iq_ref_lib.py - the default model's function (olmoe) in numpy, for test_iq_gpu.py (no tests here).

Owns: a float64-accumulating forward pass of an olmoe GGUF whose weights are all f32 (the exact
function a requantized file's backends approximate), with the routing of chosen (layer, position)
pairs overridden; and the near-tie explanation of a backend's logits: the routing that a backend's
rounding may choose differently from the exact function is the 4th-vs-5th expert of a token whose
two router probabilities are within TIE of each other, and `explain` finds, position by position,
the swaps of such pairs that bring the exact function closest to the backend's logits.

Why: on the default model (6 layers, top-4 of 32 experts) a 16-token prompt makes 96 routing
decisions, and a few have the 4th and 5th router probabilities within 1% of each other. A
backend's activation rounding (the CPU's Q8_K, the GPU's Q8_1) moves router inputs by ~1e-3
relative, enough to swap such a pair; one swap moves that position's KL from ~1e-4 to ~4e-2. Which
ties swap is chance, so the largest KL against the exact function compares the backends' luck, not
their arithmetic. With the swaps each backend made applied to the reference, the KL left is the
arithmetic's."""
from __future__ import annotations

import numpy as np

TIE = 0.02  # a (layer, position) pair is a near tie when (p4 - p5) / p4 < TIE


def load_f32(path) -> dict:
    import gguf
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            raise ValueError(f"{path}: {t.name} is {t.tensor_type.name}, not F32")
        out[t.name] = np.array(t.data, dtype=np.float64)
    meta = {k: r.fields[k].contents() for k in r.fields if k.startswith("olmoe.")}
    out["_hp"] = dict(n_layer=int(meta["olmoe.block_count"]),
                      n_head=int(meta["olmoe.attention.head_count"]),
                      n_used=int(meta["olmoe.expert_used_count"]),
                      eps=float(meta["olmoe.attention.layer_norm_rms_epsilon"]),
                      base=float(meta["olmoe.rope.freq_base"]))
    if int(meta["olmoe.attention.head_count_kv"]) != out["_hp"]["n_head"]:
        raise ValueError("iq_ref_lib handles n_head_kv == n_head only")
    return out


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope_neox(x, base):
    T, _, D = x.shape
    half = D // 2
    ang = np.arange(T)[:, None] * base ** (-np.arange(half) * 2.0 / D)[None]
    c, s = np.cos(ang)[:, None], np.sin(ang)[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def _attention(W, p, h, hp):
    T = h.shape[0]
    q = _rms(h @ W[p + "attn_q.weight"].T, W[p + "attn_q_norm.weight"], hp["eps"])
    k = _rms(h @ W[p + "attn_k.weight"].T, W[p + "attn_k_norm.weight"], hp["eps"])
    v = h @ W[p + "attn_v.weight"].T
    H = hp["n_head"]
    D = q.shape[-1] // H
    q, k, v = (_rope_neox(q.reshape(T, H, D), hp["base"]), _rope_neox(k.reshape(T, H, D), hp["base"]),
               v.reshape(T, H, D))
    att = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + np.triu(np.full((T, T), -np.inf), 1)[None]
    att = np.exp(att - att.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", att, v).reshape(T, -1) @ W[p + "attn_output.weight"].T


def forward(W, tokens, swaps=frozenset(), probs=None) -> np.ndarray:
    """(T, n_vocab) logits. swaps: (layer, position) pairs whose 4th expert is replaced by the 5th
    (by router probability; the gate weight stays that expert's probability, olmoe does not
    renormalize). probs: a list that gets each layer's (T, n_expert) router probabilities."""
    hp = W["_hp"]
    x = W["token_embd.weight"][list(tokens)]
    for l in range(hp["n_layer"]):
        p = f"blk.{l}."
        x = x + _attention(W, p, _rms(x, W[p + "attn_norm.weight"], hp["eps"]), hp)
        h = _rms(x, W[p + "ffn_norm.weight"], hp["eps"])
        z = h @ W[p + "ffn_gate_inp.weight"].T
        pr = np.exp(z - z.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        if probs is not None:
            probs.append(pr)
        G, U, Dn = W[p + "ffn_gate_exps.weight"], W[p + "ffn_up_exps.weight"], W[p + "ffn_down_exps.weight"]
        for t in range(len(tokens)):
            order = np.argsort(-pr[t], kind="stable")
            sel = list(order[:hp["n_used"]])
            if (l, t) in swaps:
                sel[-1] = order[hp["n_used"]]
            for e in sel:
                g, u = G[e] @ h[t], U[e] @ h[t]
                x[t] += pr[t, e] * (Dn[e] @ (g / (1.0 + np.exp(-g)) * u))
    x = _rms(x, W["output_norm.weight"], hp["eps"])
    return x @ W["output.weight"].T


def kl_rows(p_logits, q_logits) -> np.ndarray:
    def logsm(x):
        x = np.asarray(x, dtype=np.float64)
        m = x.max(axis=-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    lp, lq = logsm(p_logits), logsm(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def near_ties(probs, n_used: int, done=()) -> list:
    """(position, layer) of every near tie not in done, position-major."""
    out = []
    for l, pr in enumerate(probs):
        s = -np.sort(-pr, axis=-1)
        rel = (s[:, n_used - 1] - s[:, n_used]) / s[:, n_used - 1]
        out += [(int(t), l) for t in np.flatnonzero(rel < TIE) if (t, l) not in done]
    return sorted(out)


def explain(W, tokens, got) -> tuple[np.ndarray, frozenset]:
    """The exact logits with the near-tie swaps that bring them closest to got (a backend's
    logits), and those swaps as (layer, position). Greedy in position order, each swap at position t
    judged by position t's KL: of t's near ties (those of the reference with the swaps so far) the
    swap that lowers it most is made, until none lowers it; then the next position. Best-first
    because one position can hold ties in several layers: any swap there moves its logits, and the
    first in layer order may lower the KL a little while another is the one the backend made."""
    n_used = W["_hp"]["n_used"]
    swaps, done = frozenset(), set()
    probs = []
    ref = forward(W, tokens, swaps, probs)
    while True:
        todo = near_ties(probs, n_used, done)
        if not todo:
            return ref, swaps
        t = todo[0][0]
        best = None
        for _, l in (c for c in todo if c[0] == t):
            done.add((t, l))
            probs_s = []
            alt = forward(W, tokens, swaps | {(l, t)}, probs_s)
            kl = kl_rows(alt[t], got[t])
            if kl < (kl_rows(ref[t], got[t]) if best is None else best[0]):
                best = (kl, alt, swaps | {(l, t)}, probs_s)
        if best is not None:  # t's other ties are judged again against the new reference
            _, ref, swaps, probs = best
            done = {d for d in done if d[0] != t} | {(t, l) for l, u in swaps if u == t}
