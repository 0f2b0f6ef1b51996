"""test_synth_lowbit.py - bench/synth_lowbit.py at the tiny shape, every mix: the file loads with
the gguf package, every tensor dequantizes (gguf.quants), each quantized tensor's spread is within
10% of what synth_moe.py gives that tensor (computed here from synth_moe.py's constants: Q8_0 at
q8_scale with int8 quants in -127..127, Q4_K experts at d = dmin = 1e-3 with sub-block scales
Q4K_SC and quants 0..15) and its mean ~0, norms are ones, and `strata info` reads it. The vocab is
a small one written here. Skips when ../shared/bench/synth_moe.py is absent."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as Q

from conftest import REPO, shared_file

TOOL = REPO / "bench" / "synth_lowbit.py"
CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
EXPECT = {  # mix -> (gate/up type, down type, attention q type, head type)
    "iq2_xxs": (Q.IQ2_XXS, Q.IQ3_XXS, Q.Q4_K, Q.Q6_K),
    "iq2_s": (Q.IQ2_S, Q.Q3_K, Q.Q4_K, Q.Q6_K),
    "iq1_m": (Q.IQ1_M, Q.IQ2_XXS, Q.Q4_K, Q.Q6_K),
    "iq3_xxs": (Q.IQ3_XXS, Q.IQ4_XS, Q.Q4_K, Q.Q6_K),
    "mxfp4": (Q.MXFP4, Q.MXFP4, Q.Q8_0, Q.Q8_0),
}


def load_synth(path):
    spec = importlib.util.spec_from_file_location("synth_moe_ref", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference_std(sm, name, cols):
    """A tensor's spread in a synth_moe.py file, from its constants."""
    if "_exps" in name:
        return 1e-3 * np.sqrt(np.mean(sm.Q4K_SC.astype(np.float64) ** 2)) * np.sqrt((16 ** 2 - 1) / 12)
    k = np.arange(-127, 128, dtype=np.float64)
    q_ms = np.sum(k ** 2) / 256  # uniform bytes, -128 mapped to 0
    return sm.q8_scale(name, cols) * np.sqrt(q_ms)


def small_vocab(path):
    """A vocab-only GGUF of 512 byte-level BPE tokens (the keys synth_moe.py copies)."""
    w = gguf.GGUFWriter(str(path), "llama")
    toks = ["<|endoftext|>"] + [f"t{i}" for i in range(511)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types([3] + [1] * 511)
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("mix", sorted(EXPECT))
def test_tiny(tmp_path, mix):
    synth = shared_file("bench/synth_moe.py")
    vocab = small_vocab(tmp_path / "vocab.gguf")
    out = tmp_path / f"tiny-{mix}.gguf"
    p = subprocess.run([sys.executable, str(TOOL), "tiny", str(out), "--vocab", str(vocab),
                        "--mix", mix, "--synth", str(synth)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "std/target" in p.stderr
    sm = load_synth(synth)
    arch, n_layer, n_embd, n_head, n_kv, hd, n_exp, n_used, n_ff, _ = sm.SHAPES["tiny"]
    r = gguf.GGUFReader(str(out))
    t = {x.name: x for x in r.tensors}
    assert len(t) == 3 + 12 * n_layer
    assert list(t["token_embd.weight"].shape) == [n_embd, 512]
    gu, down, attn, head = EXPECT[mix]
    assert t["blk.0.ffn_gate_exps.weight"].tensor_type == gu
    assert t["blk.0.ffn_up_exps.weight"].tensor_type == gu
    assert t["blk.0.ffn_down_exps.weight"].tensor_type == down
    assert t["blk.0.attn_q.weight"].tensor_type == attn
    assert t["output.weight"].tensor_type == head
    assert list(t["blk.1.ffn_down_exps.weight"].shape) == [n_ff, n_embd, n_exp]
    for name, x in t.items():
        w = gguf.quants.dequantize(np.asarray(x.data), x.tensor_type).astype(np.float64)
        assert np.isfinite(w).all(), name
        if x.tensor_type == Q.F32:
            if "norm" in name:
                assert (w == 1).all(), name
            continue
        cols = int(x.shape[0])
        assert w.shape[-1] == cols, name
        want = reference_std(sm, name, cols)
        assert abs(w.std() / want - 1) < 0.10, (name, x.tensor_type.name, w.std(), want)
        assert abs(w.mean()) < 0.05 * want, (name, x.tensor_type.name, w.mean(), want)
    if not CLI.is_file():
        pytest.skip(f"{CLI} not built (set STRATA_CLI)")
    p = subprocess.run([str(CLI), "info", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert gu.name.lower() in p.stdout.lower() and "experts" in p.stdout
