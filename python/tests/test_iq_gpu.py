"""test_iq_gpu.py - the low-bit types on the GPU session, on the trained default model requantized
(`strata quantize`) to the mixes real low-bit files have: experts in IQ2_XXS / IQ2_XS / IQ2_S /
IQ1_S / IQ1_M / IQ3_XXS / IQ3_S / IQ4_XS / MXFP4, expert downs IQ4_NL (the default model's
128-wide rows fit no 256-weight type), the rest Q8_0 or the type itself where it fits.

The reference is the same weights dequantized to f32 (`strata quantize --type f32`), the exact
function both backends approximate: the CPU quantizes activations to Q8_K (one scale per 256
values) for these types and the GPU to Q8_1 (one per 32), so each is off the exact function by its
own rounding. That rounding also swaps near-tied routing choices: the 16-token prompt makes 96
top-4-of-32 decisions and a few have the 4th and 5th router probabilities within 1%; one swap moves
that position's KL from ~2e-4 to as much as 4e-2 (IQ1_S: the GPU swaps layer 2's tie at position
12, rel. margin 0.16%, KL 0.044 there; the CPU layer 4's at 14, 0.3%, KL 0.0036), and which ties
swap is chance, so the largest raw KL compares the backends' luck. So each backend is compared with
iq_ref_lib's numpy forward of the f32 weights (itself checked against the f32 CPU session) with
the near-tie swaps that best explain that backend's logits applied (iq_ref_lib.explain), and:
  * every position's logits: KL(explained exact || backend) <= EXPL_MAX, for the CPU and the GPU;
  * the GPU's mean of those over positions <= max(1e-4, 3 x the CPU's);
  * where the explained exact logits' top-2 margin exceeds 1e-2, the same argmax;
  * greedy continuations: the same tokens as the CPU's or the exact model's, up to a near tie
    (test_hf_parity_lib.compare_greedy);
with every expert on the GPU, and again with --cpu-moe (the experts on the CPU, the grouped
kernels' prompt path and the hand-off) and with an expert cache of a quarter of the experts
(demand loads of these blocks). Skips where CUDA is unusable; the CPU half runs everywhere.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import iq_ref_lib as R
import strata
import test_hf_parity_lib as L

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
SRC = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
KL_MAX = 1e-4
# per position, against the exact function with the backend's near-tie swaps: ~10x the rounding's
# KL on every mix (<= 1.2e-3 on the CPU and an emulated GPU), 20x below one swap's
EXPL_MAX = 2e-3
N_GEN = 12
PROMPT = [5, 211, 17, 17, 305, 42, 0, 99, 128, 64, 3, 250, 250, 12, 77, 190]
# mix name -> strata quantize arguments
MIXES = {
    "iq2_xxs": ["--type-experts", "iq2_xxs", "--type-down", "iq4_nl", "--type-dense", "q8_0"],
    "iq2_xs": ["--type-experts", "iq2_xs", "--type-down", "iq4_nl", "--type-dense", "q8_0"],
    "iq2_s": ["--type-experts", "iq2_s", "--type-down", "iq4_nl", "--type-dense", "q4_K"],
    "iq1_s": ["--type-experts", "iq1_s", "--type-down", "iq4_nl", "--type-dense", "q8_0"],
    "iq1_m": ["--type-experts", "iq1_m", "--type-down", "iq4_nl", "--type-dense", "q8_0"],
    "iq3_xxs": ["--type-experts", "iq3_xxs", "--type-down", "iq4_nl", "--type-dense", "q8_0"],
    "iq3_s": ["--type-experts", "iq3_s", "--type-down", "iq4_nl", "--type-dense", "q8_0"],
    "iq4_xs": ["--type-experts", "iq4_xs", "--type-down", "iq4_nl", "--type-dense", "iq4_xs"],
    "mxfp4": ["--type", "mxfp4", "--type-dense", "q8_0"],
}
PLACEMENTS = {"resident": {}, "cpu_moe": {"n_cpu_moe": -1}, "cache": {"expert_cache": 48}}


def cuda_usable() -> tuple[bool, str]:
    cuda = next(b for b in strata.backends() if b["name"] == "cuda")
    return bool(cuda["available"]), cuda["detail"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    if not SRC.exists():
        pytest.skip(f"default model not found: {SRC}")
    d = tmp_path_factory.mktemp("iq_gpu")
    return d


def requantized(d: Path, mix: str) -> Path:
    out = d / f"{mix}.gguf"
    if not out.exists():
        subprocess.run([str(CLI), "quantize", str(SRC), str(out), *MIXES[mix], "--allow-requantize", "-t", "2"],
                       check=True, capture_output=True, text=True)
    return out


class Session(L.StrataModel):
    """test_hf_parity_lib's StrataModel (f32 KV cache, 2 threads), its session made again with the
    placement's fields set when there are any."""

    def __init__(self, path, backend: str, placement: dict):
        super().__init__(path, n_ctx=128, backend=backend)
        if not placement:
            return
        lib, ffi = self.lib, self.ffi
        lib.strata_session_free(self.session)
        self.session = None
        sp = ffi.new("strata_session_params *")
        sp[0] = lib.strata_session_default_params()
        sp.n_ctx, sp.n_batch, sp.n_threads = 128, 512, 2
        sp.kv_type = lib.STRATA_TYPE_F32
        sp.backend = lib.STRATA_BACKEND_CUDA if backend == "cuda" else lib.STRATA_BACKEND_CPU
        for k, v in placement.items():
            setattr(sp.placement, k, v)
        ps = ffi.new("strata_session **")
        rc = lib.strata_session_create(self.model, sp, ps)
        if rc != 0:
            msg = strata._ffi.last_error()
            self.close()
            raise strata.StrataError(rc, msg, "strata_session_create")
        self.session = ps[0]


kl_rows = R.kl_rows
_cpu_cache: dict = {}
_ref_cache: dict = {}


def cpu_reference(path: Path):
    if path not in _cpu_cache:
        with Session(path, "cpu", {}) as sm:
            _cpu_cache[path] = (sm.logits(PROMPT), *sm.greedy(PROMPT, N_GEN))
    return _cpu_cache[path]


def exact_reference(path: Path):
    """The CPU session on the same weights dequantized to f32 (f32 activations throughout)."""
    return cpu_reference(exact_file(path))


def exact_file(path: Path) -> Path:
    f32 = path.with_name(path.stem + "_f32.gguf")
    if not f32.exists():
        subprocess.run([str(CLI), "quantize", str(path), str(f32), "--type", "f32", "--allow-requantize",
                        "-t", "2"], check=True, capture_output=True, text=True)
    return f32


def numpy_weights(path: Path) -> dict:
    """iq_ref_lib's weights of the f32 copy, once checked against the f32 CPU session."""
    if path not in _ref_cache:
        W = R.load_f32(exact_file(path))
        kl = kl_rows(exact_reference(path)[0], R.forward(W, PROMPT)).max()
        assert kl <= 1e-8, f"{path.name}: the numpy reference is off the f32 CPU session: KL {kl:.3g}"
        _ref_cache[path] = W
    return _ref_cache[path]


def explained(path: Path, got: np.ndarray) -> tuple[np.ndarray, np.ndarray, frozenset]:
    """KL per position of got against the exact function with got's near-tie swaps, those exact
    logits, and the swaps as (layer, position)."""
    ref, swaps = R.explain(numpy_weights(path), PROMPT, got)
    return kl_rows(ref, got), ref, swaps


@pytest.mark.parametrize("mix", list(MIXES))
def test_cpu_reference_runs(mix, files):
    logits, ids, _ = cpu_reference(requantized(files, mix))
    assert np.isfinite(logits).all() and len(ids) == N_GEN


@pytest.mark.parametrize("mix", list(MIXES))
def test_cpu_near_exact(mix, files):
    """The CPU session within EXPL_MAX of the exact function once its near-tie swaps are applied
    (and the explanation itself: a swap made in the reference is found, and only that one)."""
    path = requantized(files, mix)
    kl, _, swaps = explained(path, cpu_reference(path)[0])
    print(f"{mix} cpu: explained KL max {kl.max():.3g} mean {kl.mean():.3g}, swaps {sorted(swaps)}")
    assert kl.max() <= EXPL_MAX, f"{mix}: KL(explained exact || cpu) up to {kl.max():.3g} at {int(kl.argmax())}"
    W = numpy_weights(path)
    probs = []
    R.forward(W, PROMPT, probs=probs)
    t, l = R.near_ties(probs, W["_hp"]["n_used"])[0]
    planted = R.forward(W, PROMPT, frozenset({(l, t)}))
    kl_p, _, found = explained(path, planted)
    assert found == {(l, t)} and kl_p.max() <= 1e-12, (found, (l, t), kl_p.max())


@pytest.mark.parametrize("place", list(PLACEMENTS))
@pytest.mark.parametrize("mix", list(MIXES))
def test_gpu_matches_cpu(mix, place, files):
    ok, why = cuda_usable()
    if not ok:
        pytest.skip(f"CUDA unavailable: {why}")
    path = requantized(files, mix)
    cpu, c_ids, c_rows = cpu_reference(path)
    exact, x_ids, x_rows = exact_reference(path)
    with Session(path, "cuda", PLACEMENTS[place]) as sm:
        got = sm.logits(PROMPT)
        g_ids, g_rows = sm.greedy(PROMPT, N_GEN)
    kl_c, _, c_swaps = explained(path, cpu)
    kl, ref, g_swaps = explained(path, got)
    print(f"{mix} {place}: raw KL(exact||cpu) max {kl_rows(exact, cpu).max():.3g}, KL(exact||gpu) max "
          f"{kl_rows(exact, got).max():.3g}; explained: cpu max {kl_c.max():.3g} mean {kl_c.mean():.3g} "
          f"swaps {sorted(c_swaps)}, gpu max {kl.max():.3g} mean {kl.mean():.3g} swaps {sorted(g_swaps)}")
    assert kl.max() <= EXPL_MAX, (f"{mix} {place}: KL(explained exact || gpu) up to {kl.max():.3g} at position "
                                  f"{int(kl.argmax())} > {EXPL_MAX:.3g} (swaps {sorted(g_swaps)})")
    bound = max(KL_MAX, 3 * kl_c.mean())
    assert kl.mean() <= bound, (f"{mix} {place}: mean explained KL {kl.mean():.3g} > {bound:.3g} "
                                f"(cpu's {kl_c.mean():.3g})")
    for i in range(len(PROMPT)):
        if L.top2_margin(ref[i]) > 1e-2:
            assert int(ref[i].argmax()) == int(got[i].argmax()), f"{mix} {place}: argmax differs at {i}"
    msgs = [L.compare_greedy(g_ids, g_rows, c_ids, c_rows), L.compare_greedy(g_ids, g_rows, x_ids, x_rows)]
    assert None in msgs, f"{mix} {place}: greedy differs from both the cpu's and the exact model's: {msgs}"
