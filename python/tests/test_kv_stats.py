"""test_kv_stats.py - the KV cache's bytes a token and qwen3next's recurrent state where a user sees
them: Model.kv_bytes_per_token / state_bytes, Model.last_stats (kv_bytes_per_token, kv_bytes,
state_bytes, state_alloc_bytes), `strata run`'s footer line and --stats-json, against numbers worked
out by hand from each tiny HF model's config.json (the zoo of test_hf_parity_lib): GQA (olmoe:
2 x layers x KV heads x head_dim x element), DeepSeek MLA (layers x (kv_lora + rope) x element: one
latent row, no V), gpt-oss (its sliding-window layers counted in full: Strata's cache keeps every
position for them) and qwen3next (its attention layers only, plus the DeltaNet layers' state: each
value head's key x value state and the conv's last kernel - 1 inputs, f32). CPU sessions."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import strata  # noqa: E402
import test_hf_parity_lib as L  # noqa: E402
from conftest import REPO  # noqa: E402

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
N_CTX = 96


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kv_stats")


def prepare(name: str, workdir) -> tuple[dict, Path]:
    """The zoo model `name` converted to f32 GGUF, and its config.json."""
    d = workdir / name
    if not (d / "hf" / "config.json").exists():
        L.save_hf(L.build_hf(name, seed=zlib.crc32(name.encode()) % 1000), d / "hf")
    path = d / "f32.gguf"
    if not path.exists():
        L.convert_hf().convert(d / "hf", path, "f32")
    return json.loads((d / "hf" / "config.json").read_text()), path


def with_vocab(name: str, workdir) -> tuple[dict, Path]:
    """prepare(name) with a byte-level BPE vocabulary (L.train_bpe, o200k's split), so
    that `strata run` can tokenize its prompt."""
    from transformers import PreTrainedTokenizerFast
    cfg, _ = prepare(name, workdir)
    d = workdir / name / "hf_vocab"
    path = workdir / name / "vocab.gguf"
    if not path.exists():
        shutil.copytree(workdir / name / "hf", d, dirs_exist_ok=True)
        conv = L.convert_hf()
        tk = L.train_bpe(["the answer is 42\n"] * 8, ["<|endoftext|>"], conv.O200K_SPLIT, vocab_size=280)
        PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>").save_pretrained(str(d))
        conv.convert(d, path, "f32")
    return cfg, path


def by_hand(name: str, c: dict, el: int) -> tuple[int, int]:
    """(KV bytes a token in elements of el bytes, recurrent state bytes) from the HF config."""
    n = c["num_hidden_layers"]
    if name.startswith("deepseek2"):
        return n * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * el, 0
    if name == "qwen3next":
        n_att = c["layer_types"].count("full_attention")
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        state = (n - n_att) * (nv * dk * dv + (c["linear_conv_kernel_dim"] - 1) * (2 * nk * dk + nv * dv)) * 4
        return 2 * n_att * c["num_key_value_heads"] * c["head_dim"] * el, state
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * n * c["num_key_value_heads"] * hd * el, 0


NAMES = ["olmoe", "deepseek2_lite", "deepseek2_v3", "gpt_oss", "qwen3next"]


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_stats_dict(name, kv_type, workdir):
    cfg, path = prepare(name, workdir)
    per, state = by_hand(name, cfg, 4 if kv_type == "f32" else 2)
    with strata.Model(path, n_ctx=N_CTX, n_threads=2, kv_type=kv_type) as m:
        assert m.kv_bytes_per_token() == per
        assert m.kv_bytes_per_token("f32") == 2 * m.kv_bytes_per_token("f16")
        assert m.state_bytes == state
        m.logits([1, 2, 3])
        st = m.last_stats
    assert st["kv_bytes_per_token"] == per
    assert st["kv_bytes"] == N_CTX * per  # the CPU cache: n_ctx rows
    assert st["state_bytes"] == state
    assert (st["state_alloc_bytes"] > state) if state else st["state_alloc_bytes"] == 0


def test_mla_is_smaller_than_its_heads(workdir):
    """DeepSeek's latent row against the K and V its heads would cache as trained (per head
    nope + rope keys and v values): the point of MLA."""
    cfg, path = prepare("deepseek2_v3", workdir)
    full = cfg["num_hidden_layers"] * cfg["num_attention_heads"] * (
        cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"] + cfg["v_head_dim"]) * 2
    with strata.Model(path, n_ctx=N_CTX, n_threads=2) as m:
        assert m.kv_bytes_per_token() * 2 < full


@pytest.mark.skipif(not CLI.is_file(), reason="strata CLI not built (set STRATA_CLI)")
@pytest.mark.parametrize("name", ["gpt_oss", "qwen3next"])
def test_cli_footer_and_json(name, workdir, tmp_path):
    cfg, path = with_vocab(name, workdir)
    per, state = by_hand(name, cfg, 2)
    stats = tmp_path / "stats.json"
    p = subprocess.run([str(CLI), "-m", str(path), "-p", "x", "-n", "2", "-c", str(N_CTX), "-t", "2", "--cpu",
                        "--temp", "0", "--no-echo", "--stats-json", str(stats)], capture_output=True, timeout=300)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, err
    s = json.loads(stats.read_text())
    assert (s["kv_bytes_per_token"], s["kv_bytes"], s["state_bytes"]) == (per, N_CTX * per, state)
    line = next(ln for ln in err.splitlines() if "KV cache" in ln)
    m = re.match(r"strata: KV cache (\d+) B a token \(f16\), ([\d.]+) KiB for (\d+) positions", line)
    assert m, line
    assert int(m.group(1)) == per and int(m.group(3)) == N_CTX
    assert abs(float(m.group(2)) * 1024 - N_CTX * per) < 6, line
    if state:
        m = re.search(r"\+ recurrent state ([\d.]+) KiB \(([\d.]+) (KiB|MiB) allocated with its working "
                      r"buffers and rollback window\)", line)
        assert m and abs(float(m.group(1)) * 1024 - state) < 6, line
    else:
        assert "recurrent" not in line
