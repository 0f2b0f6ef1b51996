"""test_cli.py - the ./strata command line: --help, --version, info on the tiny model, the vocab
files and a file written here, quantize round trips, and the usage errors (one line on stderr,
exit status 2). The binary is $STRATA_CLI, else <repo>/strata."""
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

import strata
from conftest import REPO, SHARED

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
if not CLI.is_file():
    pytest.skip(f"strata CLI not built at {CLI} (run make, or set STRATA_CLI)",
                allow_module_level=True)
TINY = SHARED / "models/strata-tiny-moe-q8_0.gguf"
VOCAB = SHARED / "vocab/ggml-vocab-llama-spm.gguf"


def run(*args, check_rc=None):
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert p.returncode == check_rc, (args, p.returncode, p.stdout, p.stderr)
    return p


def need(path):
    if not path.is_file():
        pytest.skip(f"{path} not present (../shared data is optional)")
    return path


# ------------------------------------------------------------------------------------------------
# help, version, no arguments
# ------------------------------------------------------------------------------------------------

def test_help():
    for flag in ("--help", "-h"):
        p = run(flag, check_rc=0)
        assert p.stdout.startswith("usage: strata")
        assert "info MODEL.gguf" in p.stdout and "quantize IN.gguf OUT.gguf" in p.stdout
        assert "--version" in p.stdout
        assert len(p.stdout.splitlines()) <= 40  # one screen
        assert p.stderr == ""


def test_version_lists_backends():
    p = run("--version", check_rc=0)
    lines = p.stdout.splitlines()
    assert lines[0] == f"strata {strata.version()}"
    cpu = [ln for ln in lines if ln.startswith("backend cpu")]
    cuda = [ln for ln in lines if ln.startswith("backend cuda")]
    assert len(cpu) == 1 and "compiled, available" in cpu[0]
    assert len(cuda) == 1
    b = {x["name"]: x for x in strata.backends()}
    assert ("not compiled" in cuda[0]) == (not b["cuda"]["compiled"])


# `strata` with no arguments runs the embedded default model: test_generate.py checks it.


# ------------------------------------------------------------------------------------------------
# usage errors: one line, exit 2
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (["--foo"], "strata: unknown option '--foo' (see strata --help)"),
    (["frobnicate"], "strata: unknown command 'frobnicate' (see strata --help)"),
    (["info"], "info needs a model file"),
    (["info", "/no/such/file.gguf"], "strata: cannot open '/no/such/file.gguf'"),
    (["info", "--bogus", "x.gguf"], "strata: unknown option '--bogus' (see strata --help)"),
    (["quantize", "/no/such/in.gguf", "/tmp/out.gguf", "--type", "q8_0"], "cannot open"),
    (["quantize", "a.gguf"], "needs an input and an output file"),
    (["quantize", "a.gguf", "b.gguf"], "needs --type"),
    (["quantize", "a.gguf", "b.gguf", "--type", "q9_9"], "unknown type 'q9_9'"),
    (["quantize", "a.gguf", "b.gguf", "--type", "q4_1"], "cannot quantize to q4_1"),
    (["quantize", "a.gguf", "b.gguf", "--type-experts", "iq2_xxs", "--type-down", "q4_K"],
     "needs --type (or all of"),
    (["quantize", "a.gguf", "b.gguf", "--type", "q8_0", "--type-down", "q8_K"],
     "cannot quantize to q8_K"),
    (["quantize", "a.gguf", "b.gguf", "--type", "q8_0", "--type-dense"],
     "option '--type-dense' needs a value"),
    (["quantize", "a.gguf", "b.gguf", "--type", "q8_0", "-t", "x"], "bad thread count 'x'"),
    (["quantize", "a.gguf", "b.gguf", "--type"], "option '--type' needs a value"),
])
def test_usage_errors(args, needle):
    p = run(*args, check_rc=2)
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert needle in lines[0]
    assert lines[0].startswith("strata: ")


def test_corrupt_file_fails_with_status_1(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 10)
    p = run("info", bad, check_rc=1)
    assert p.stderr.startswith("strata: ") and "offset" in p.stderr


# ------------------------------------------------------------------------------------------------
# info
# ------------------------------------------------------------------------------------------------

def field(out, label):
    m = re.search(rf"^{re.escape(label)}\s+(.*)$", out, flags=re.M)
    assert m, f"no line '{label}' in:\n{out}"
    return m.group(1).strip()


def kind_lines(out):
    """group name -> (count, bytes) from the tensor table."""
    table = out.split("tensors by kind", 1)[1]
    groups = {}
    for ln in table.splitlines()[1:]:
        m = re.match(r"^(\S.*?)\s{2,}(\d+)\s+(\d+)\s", ln)
        if m and not ln.startswith("  "):
            groups[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return groups


def test_info_tiny_model():
    path = need(TINY)
    p = run("info", path, check_rc=0)
    out = p.stdout
    with strata.GGUF(path) as g:
        tensors = g.tensors
        md = g.metadata
    assert field(out, "gguf version") == "3"
    assert field(out, "shards") == "1"
    assert field(out, "alignment") == "32"
    assert field(out, "tensors") == str(len(tensors))
    assert field(out, "architecture") == md["general.architecture"] == "olmoe"
    for key in ("context_length", "embedding_length", "block_count", "attention.head_count",
                "attention.head_count_kv", "expert_count", "expert_used_count"):
        assert re.search(rf"^\s+{re.escape(key)}\s+{md['olmoe.' + key]}$", out, flags=re.M), key
    assert re.search(r"^\s+rope.freq_base\s+10000$", out, flags=re.M)
    assert field(out, "tokenizer").startswith(md["tokenizer.ggml.model"])
    assert field(out, "vocab size") == f"{len(md['tokenizer.ggml.tokens'])} tokens"
    groups = kind_lines(out)
    assert groups["total"] == (len(tensors), sum(t.n_bytes for t in tensors))

    def kind(name):
        if "norm" in name:
            return "norms"
        if "ffn_gate_inp" in name:
            return "router"
        if "_exps" in name:
            return "experts"
        if name.startswith(("token_embd", "output")):
            return "embeddings/output"
        if "attn_" in name:
            return "attention"
        return "other"
    want = {}
    for t in tensors:
        c, b = want.get(kind(t.name), (0, 0))
        want[kind(t.name)] = (c + 1, b + t.n_bytes)
    assert {k: v for k, v in groups.items() if k != "total"} == want
    assert "--tensors" not in out and "blk.0.attn_q.weight" not in out
    # the KV cache's bytes a token: K and V of every layer and KV head, f16 and f32
    per = 2 * md["olmoe.block_count"] * md["olmoe.attention.head_count_kv"] * (
        md["olmoe.embedding_length"] // md["olmoe.attention.head_count"])
    assert field(out, "KV cache") == f"{per * 2 / 1024:.2f} KiB a token (f16), {per * 4 / 1024:.2f} KiB (f32)"


def test_run_footer_kv_cache(tmp_path):
    """`strata run`'s footer says the KV cache's bytes a token in the session's type and as
    allocated for -c positions; --stats-json has the same numbers (a GQA model: no recurrent
    state)."""
    path = need(TINY)
    with strata.GGUF(path) as g:
        md = g.metadata
    per = 2 * md["olmoe.block_count"] * md["olmoe.attention.head_count_kv"] * (
        md["olmoe.embedding_length"] // md["olmoe.attention.head_count"]) * 4
    out = tmp_path / "s.json"
    p = run("-m", path, "-p", "x", "-n", 2, "-c", 256, "-t", 2, "--cpu", "--kv-type", "f32", "--stats-json", out,
            check_rc=0)
    assert f"strata: KV cache {per / 1024:.2f} KiB a token (f32), {256 * per / 1048576:.2f} MiB for 256 positions\n" \
        in p.stderr
    import json
    j = json.loads(out.read_text())
    assert (j["kv_bytes_per_token"], j["kv_bytes"], j["state_bytes"], j["state_alloc_bytes"]) == (per, 256 * per, 0, 0)
    assert "KV cache" not in run("-m", path, "-p", "x", "-n", 1, "--cpu", "--quiet", check_rc=0).stderr


def test_info_tensor_list():
    path = need(TINY)
    out = run("info", path, "--tensors", check_rc=0).stdout
    with strata.GGUF(path) as g:
        for t in g.tensors:
            m = re.search(rf"^{re.escape(t.name)}\s+(\S+)\s+(.*?)\s+(\d+)\s+(\d+)\s+(\d+)$", out,
                          flags=re.M)
            assert m, t.name
            assert m.group(1) == t.type
            assert m.group(2) == " x ".join(map(str, t.shape))
            assert int(m.group(3)) == t.n_bytes and int(m.group(4)) == t.file_offset


def test_info_gpu_mem_split():
    """info --gpu-mem SIZE [-c N]: the static split a GPU session would use for that memory (no GPU
    needed): CPU layers fall as SIZE grows, every layer fits with plenty, too little is refused."""
    path = need(TINY)
    seen = []
    for size in ("523M", "527M", "531M", "535M", "539M", "1G"):
        out = run("info", path, "--gpu-mem", size, "-c", 256, check_rc=0).stdout
        line = field(out, "placement")
        m = re.search(r"as --n-cpu-moe (\d+)", line)
        seen.append(0 if "fit on the GPU" in line else 6 if "as --cpu-moe" in line else int(m.group(1)))
    assert seen == sorted(seen, reverse=True) and seen[-1] == 0 and seen[0] > 0, seen
    p = run("info", path, "--gpu-mem", "1M", check_rc=1)
    assert "holds not even the weights" in p.stderr and "--gpu-mem" in p.stderr
    assert run("info", path, "--gpu-mem", "x", check_rc=2).returncode == 2


def test_info_vocab_file():
    out = run("info", need(VOCAB), check_rc=0).stdout
    assert field(out, "tensors") == "0"
    assert field(out, "tokenizer").startswith("llama")
    assert field(out, "vocab size") == "32000 tokens"


def test_info_written_file(tmp_path):
    path = tmp_path / "w.gguf"
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_uint32("qwen3moe.expert_count", 128)
    w.add_uint32("qwen3moe.expert_feed_forward_length", 768)
    w.add_float32("qwen3moe.rope.freq_base", 1000000.0)
    w.add_custom_alignment(64)
    w.add_tensor("blk.0.ffn_gate_inp.weight", np.zeros((128, 64), dtype=np.float32))
    w.add_tensor("blk.0.ffn_up_shexp.weight", np.zeros((32, 64), dtype=np.float16))
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((32, 64), dtype=np.float16))
    w.add_tensor("rope_freqs", np.zeros(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = run("info", path, check_rc=0).stdout
    assert field(out, "architecture") == "qwen3moe"
    assert field(out, "alignment") == "64"
    assert re.search(r"^\s+expert_feed_forward_length\s+768$", out, flags=re.M)
    assert re.search(r"^\s+rope.freq_base\s+1e\+06$", out, flags=re.M)
    assert field(out, "tokenizer") == "(none)"
    g = kind_lines(out)
    assert g["router"] == (1, 128 * 64 * 4)
    assert g["shared experts"] == (1, 32 * 64 * 2)
    assert g["dense FFN"] == (1, 32 * 64 * 2)
    assert g["other"] == (1, 32)
    assert g["total"][0] == 4


# ------------------------------------------------------------------------------------------------
# quantize
# ------------------------------------------------------------------------------------------------

def test_quantize_round_trip(tmp_path):
    src = need(TINY)
    out = tmp_path / "q4k.gguf"
    p = run("quantize", src, out, "--type", "q4_K", check_rc=1)
    assert "allow_requantize" in p.stderr and "token_embd.weight" in p.stderr
    assert not out.exists()
    p = run("quantize", src, out, "--type", "q4_K", "-t", "2", "--allow-requantize", check_rc=0)
    assert f"wrote {out}" in p.stdout
    with strata.GGUF(src) as a, strata.GGUF(out) as b:
        assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
        types = {t.name: t.type for t in b.tensors}
        for t in a.tensors:
            if len(t.shape) == 1 or "ffn_gate_inp" in t.name:
                assert types[t.name] == t.type == "f32"
            elif t.shape[0] % 256 == 0:
                assert types[t.name] == "q4_K", t.name
            else:
                assert types[t.name] == "q8_0", t.name  # row length 128: falls back
        ma, mb = a.metadata, b.metadata
        assert mb["general.file_type"] == 14
        assert {k: v for k, v in ma.items() if k != "general.file_type"} == \
               {k: v for k, v in mb.items() if k != "general.file_type"}
        x = a.tensor("blk.0.attn_q.weight").dequantize()
        y = b.tensor("blk.0.attn_q.weight").dequantize()
        assert np.sqrt(np.mean((x - y) ** 2)) < 0.1 * np.sqrt(np.mean(x ** 2))
    # the result opens in `info`
    info = run("info", out, check_rc=0).stdout
    assert "q4_K" in info


def test_quantize_refuses_same_file(tmp_path):
    src = need(TINY)
    link = tmp_path / "same.gguf"
    os.symlink(src, link)
    p = run("quantize", src, link, "--type", "q8_0", check_rc=1)
    assert "is the input file" in p.stderr


def test_bench_table_and_json(tmp_path):
    """`strata bench` with llama-bench's flags: one row per (depth, test), tok/s > 0, the decode
    rows carry the weight bytes a token reads; bad flags are usage errors."""
    model = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
    out = tmp_path / "b.json"
    p = run("bench", "-m", model, "-p", "16,32", "-n", "4", "-d", "0,8", "-r", "2", "-t", "2",
            "--cpu", "--json", out, check_rc=0)
    rows = [l for l in p.stdout.splitlines() if l.startswith("| strata-tiny")]
    assert [r.split("|")[5].strip() for r in rows] == ["pp16", "pp32", "tg4", "pp16 @ d8",
                                                       "pp32 @ d8", "tg4 @ d8"]
    import json
    j = json.loads(out.read_text())
    assert j["backend"] == "cpu" and len(j["rows"]) == 6
    # the GPU's copy-rate share is a column of its own, blank for a CPU session (no rate)
    assert p.stdout.splitlines()[0].rstrip().endswith("| GB/s | of copy rate |")
    assert j["copy_bytes_per_s"] == 0 and all(r.split("|")[9].strip() == "" for r in rows)
    assert all(r["tok_s"] > 0 and r["reps"] == 2 for r in j["rows"])
    tg = [r for r in j["rows"] if r["test"] == "tg"]
    # one token reads every dense tensor, 4 of 32 experts and one embedding row: 6.3 MiB here
    assert all(6.0e6 < r["decode_bytes"] < 7.0e6 for r in tg)
    # and the KV cache: K and V of every layer and KV head, f16, over depth + n/2 positions
    import strata
    with strata.Model(str(model)) as info:
        mi = info.info
    per_pos = 2 * mi["n_layer"] * mi["n_head_kv"] * mi["head_dim"] * 2
    assert [r["kv_bytes"] for r in tg] == [per_pos * (0 + 2), per_pos * (8 + 2)]
    # the untimed warmup run (llama-bench's default) stays out of the counts: expert rows are
    # reps x tokens x top-k x layers, with and without --no-warmup
    per_tok = mi["n_expert_used"] * mi["n_layer"]
    assert [r["experts"]["rows_cpu"] for r in j["rows"]] == [2 * n * per_tok for n in (16, 32, 4) * 2]
    out2 = tmp_path / "b2.json"
    run("bench", "-m", model, "-p", "16", "-n", "4", "-r", "2", "-t", "2", "--cpu", "--no-warmup",
        "--json", out2, check_rc=0)
    j2 = json.loads(out2.read_text())
    assert [r["experts"]["rows_cpu"] for r in j2["rows"]] == [2 * 16 * per_tok, 2 * 4 * per_tok]
    # bytes read from disk under a RAM budget (none without one), and the timed seconds
    assert all(r["experts"]["disk_bytes"] == 0 and r["experts"]["seconds"] > 0 for r in j2["rows"])
    out3 = tmp_path / "b3.json"
    p3 = run("bench", "-m", model, "-p", "16", "-n", "4", "-r", "1", "-t", "2", "--cpu", "--ram-budget", "4M",
             "--json", out3, check_rc=0)
    j3 = json.loads(out3.read_text())
    assert all(r["experts"]["disk_bytes"] > 0 for r in j3["rows"])
    assert "GB/s of the timed runs" in p3.stderr
    assert run("bench", "-m", model, "-p", "x1", check_rc=2).stderr
    assert "unknown option '--frob'" in run("bench", "-m", model, "--frob", check_rc=2).stderr


def test_bench_windows(tmp_path):
    """`strata bench -w`: verify windows of N tokens, one decode call each with every row's
    logits, rolled back after each repetition (the expert rows count N tokens per repetition);
    the JSON has the pass time and the pass's bytes with the share of experts N tokens touch
    under independent routing, 1 - (1 - k/E)^N; out-of-range windows are usage errors."""
    import json
    model = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
    out = tmp_path / "w.json"
    p = run("bench", "-m", model, "-p", "0", "-n", "0", "-w", "1,3,8", "-d", "0,5", "-r", "2", "-t", "2",
            "--cpu", "--json", out, check_rc=0)
    rows = [l for l in p.stdout.splitlines() if l.startswith("| strata-tiny")]
    assert [r.split("|")[5].strip() for r in rows] == ["w1", "w3", "w8", "w1 @ d5", "w3 @ d5", "w8 @ d5"]
    j = json.loads(out.read_text())["rows"]
    assert [r["experts"]["rows_cpu"] for r in j] == [2 * n * 4 * 6 for n in (1, 3, 8) * 2]
    for r in j:
        share = 1 - (1 - 4 / 32) ** r["n"]
        assert abs(r["expert_share"] - share) < 1e-4
        assert abs(r["pass_s"] - r["n"] / r["tok_s"]) < 1e-6 * r["pass_s"] + 1e-9
        assert r["pass_bytes"] > r["decode_bytes"] * r["n"] * 0.99 or r["n"] == 1
    # one pass reads the dense weights once: its bytes grow with N, but less than N-fold
    d0 = [r for r in j if r["depth"] == 0]
    assert d0[0]["pass_bytes"] < d0[1]["pass_bytes"] < d0[2]["pass_bytes"] < 8 * d0[0]["pass_bytes"]
    # the one-token window reads what a decode step reads
    assert abs(j[0]["decode_bytes"] - 6628624) < 1e5
    for bad in ("0", "18", "x"):
        assert "for -w" in run("bench", "-m", model, "-w", bad, check_rc=2).stderr
