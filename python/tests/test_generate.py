"""test_generate.py - strata.Model and the ./strata run / perplexity commands on the trained tiny
model in ../shared (skipped when it is absent): logits shape and kept sessions, greedy generation
equal to the argmax of independently computed teacher-forced logits, the same seed giving the
same text, stop strings, max_tokens, errors as StrataError; the CLI's greedy text equal to the
Python one, its --logpos dump equal to log_softmax of Model.logits, kl.py on it, the context-full
message, and perplexity equal to the value numpy computes from Model.logits with
llama-perplexity's chunking rule."""
import importlib.util
import json
import math
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import strata
from conftest import REPO

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
PROMPT = "Dictionary, n."
TEXT = ("The kernel keeps a list of every device it knows about. When a driver is loaded, it "
        "registers the devices it can handle, and the core code calls its probe function for "
        "each of them. A probe function checks that the hardware is present, allocates the "
        "memory it needs, and returns zero on success or a negative error code. ") * 6


@pytest.fixture(scope="module")
def model(request):
    from conftest import shared_file
    path = shared_file("models/strata-tiny-moe-q8_0.gguf")
    m = strata.Model(path, n_ctx=512, n_threads=2)
    yield m
    m.close()


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def run_cli(*args, check_rc=0, env=None, input=None):
    if not CLI.is_file():
        pytest.skip(f"strata CLI not built at {CLI}")
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, timeout=300,
                       env=env, input=input)
    if check_rc is not None:
        assert p.returncode == check_rc, (args, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p


# ------------------------------------------------------------------------------------------------
# strata.Model
# ------------------------------------------------------------------------------------------------

def test_info_and_tokenizer(model):
    assert model.info["arch"] == "olmoe" and model.n_vocab == 8192
    assert model.info["n_expert"] == 32 and model.info["n_expert_used"] == 4
    ids = model.tokenize(TEXT[:200])
    assert ids and all(0 <= t < model.n_vocab for t in ids)
    assert model.detokenize(ids) == TEXT[:200]
    assert model.is_eog(model.eos)


def test_logits_shape_and_keep(model):
    ids = model.tokenize(TEXT)[:40]
    full = model.logits(ids)
    assert full.shape == (40, model.n_vocab) and full.dtype == np.float32
    assert np.isfinite(full).all()
    again = model.logits(ids)
    np.testing.assert_array_equal(full, again)  # a fresh session each call
    model.reset_kept()
    a = model.logits(ids[:25], keep=True)
    b = model.logits(ids[25:], keep=True)
    model.reset_kept()
    both = np.concatenate([a, b])
    assert np.abs(both - full).max() <= 1e-3 * np.abs(full).max()
    assert model.logits([]).shape == (0, model.n_vocab)


def test_greedy_is_argmax_of_teacher_forced_logits(model):
    prompt = model.tokenize(PROMPT)
    out = list(model.generate(PROMPT, max_tokens=24, temperature=0))
    toks = [t for t, _ in out]
    assert len(toks) == 24 and model.last_stop == "length"
    assert toks == [t for t, _ in model.generate(PROMPT, max_tokens=24, temperature=0)]
    lg = model.logits(prompt + toks[:-1])[len(prompt) - 1:]
    for i, t in enumerate(toks):
        row = lg[i]
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] > 1e-3:
            assert t == int(np.argmax(row)), (i, t, int(np.argmax(row)))
        else:
            assert t in np.argsort(row)[-5:]
    text = "".join(s for _, s in out)
    assert text == model.detokenize(toks)
    assert len(text) > 20


def test_mlock_hugepages_same_text(model):
    """mlock and hugepages change where the weights live, not the text (mapped and read; the
    CLI's --mlock --hugepages --no-mmap too). Without the privilege or limit to lock, mlock must
    raise an error naming RLIMIT_MEMLOCK."""
    import resource
    from conftest import shared_file
    path = shared_file("models/strata-tiny-moe-q8_0.gguf")
    want = model.generate_text("The probe function", max_tokens=12, temperature=0)
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    can_lock = os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft > 64 << 20
    for use_mmap in (True, False):
        try:
            with strata.Model(path, n_ctx=512, n_threads=2, use_mmap=use_mmap, mlock=True, hugepages=True) as m:
                assert m.generate_text("The probe function", max_tokens=12, temperature=0) == want
        except strata.StrataError as e:
            assert not can_lock and "RLIMIT_MEMLOCK" in str(e)
    if can_lock:
        p = run_cli("-m", path, "-p", "The probe function", "-n", "12", "--temp", "0", "--cpu", "-t", "2",
                    "--no-echo", "--mlock", "--hugepages", "--no-mmap", "-c", "512")
        q = run_cli("-m", path, "-p", "The probe function", "-n", "12", "--temp", "0", "--cpu", "-t", "2",
                    "--no-echo", "-c", "512")
        assert p.stdout == q.stdout


def test_seed_determinism(model):
    kw = dict(max_tokens=32, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    a = model.generate_text(PROMPT, seed=1, **kw)
    b = model.generate_text(PROMPT, seed=1, **kw)
    c = model.generate_text(PROMPT, seed=2, **kw)
    assert a == b
    assert a != c


def test_stop_strings(model):
    full = model.generate_text(PROMPT, max_tokens=48, temperature=0)
    assert len(full) > 30
    stop = full[15:19]
    cut = full.find(stop)
    out = list(model.generate(PROMPT, max_tokens=48, temperature=0, stop=[stop, "\x00never"]))
    assert "".join(s for _, s in out) == full[:cut]
    assert model.last_stop == "stop"
    assert len(out) < 48


def test_errors_raise(model, tmp_path):
    with pytest.raises(strata.StrataError):
        strata.Model(tmp_path / "missing.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(strata.StrataError):
        strata.Model(bad)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.logits([model.n_vocab + 5])
    long_prompt = model.tokenize(TEXT * 3)
    assert len(long_prompt) > 512
    with pytest.raises(strata.StrataError) as e:
        list(model.generate(long_prompt, max_tokens=1))
    assert e.value.status_name == "STRATA_ERR_RANGE"
    with pytest.raises(ValueError):
        strata.Model(tmp_path / "x.gguf", kv_type="q4")


def test_context_full_stops(model):
    m = strata.Model(model.path, n_ctx=32, n_threads=2)
    with m:
        prompt = m.tokenize(PROMPT)
        toks = [t for t, _ in m.generate(prompt, max_tokens=100, temperature=0, ignore_eos=True)]
        assert m.last_stop == "context"
        assert len(prompt) + len(toks) == 33  # the 32nd position's logits give one more token


# ------------------------------------------------------------------------------------------------
# ./strata run / perplexity
# ------------------------------------------------------------------------------------------------

def test_cli_greedy_matches_python_and_stats(model, tmp_path):
    stats = tmp_path / "stats.json"
    p = run_cli("-m", model.path, "-p", PROMPT, "-n", 24, "--temp", 0, "-c", 512, "-t", 2,
                "--stats-json", stats)
    want = model.generate_text(PROMPT, max_tokens=24, temperature=0)
    assert p.stdout.decode() == PROMPT + want + "\n"
    err = p.stderr.decode()
    assert "tok/s" in err and "peak RSS" in err and "first token" in err
    s = json.loads(stats.read_text())
    assert s["n_gen"] == 24 and s["n_prompt"] == len(model.tokenize(PROMPT))
    assert s["gen_tok_s"] > 0 and s["peak_rss_bytes"] > 10 << 20


def test_cli_seed_and_stop(model):
    args = ["-m", model.path, "-p", PROMPT, "-n", 32, "--temp", 1.0, "--top-k", 0, "--top-p", 1,
            "--min-p", 0, "-c", 256, "--no-echo"]
    a = run_cli(*args, "--seed", 5).stdout
    assert a == run_cli(*args, "--seed", 5).stdout
    assert a != run_cli(*args, "--seed", 6).stdout
    py = model.generate_text(PROMPT, max_tokens=32, temperature=1.0, top_k=0, top_p=1.0,
                             min_p=0.0, seed=5)
    assert a.decode() == py + "\n"  # the same sampler, the same seed
    stop = py[10:13]
    b = run_cli(*args, "--seed", 5, "--stop", stop).stdout.decode()
    assert b == py[:py.find(stop)] + "\n"


def test_cli_logpos_matches_logits(model, tmp_path):
    dump = tmp_path / "lp.jsonl"
    text = TEXT[:600]
    run_cli("-m", model.path, "-p", text, "-n", 0, "--logpos", dump, "--logpos-top", 8, "-b", 37,
            "-c", 512)
    lines = dump.read_text().splitlines()
    head = json.loads(lines[0])
    assert head["strata_logpos"] == 1 and head["n_vocab"] == 8192 and head["top_k"] == 8
    ids = model.tokenize(text)
    rows = [json.loads(x) for x in lines[1:]]
    assert [r["pos"] for r in rows] == list(range(len(ids)))
    assert [r["token"] for r in rows] == ids[1:] + [None]
    ref = log_softmax(model.logits(ids))
    for r in rows:
        want = np.argsort(-ref[r["pos"]], kind="stable")[:8]
        got_ids = [i for i, _ in r["top"]]
        got_lp = np.array([lp for _, lp in r["top"]])
        np.testing.assert_allclose(got_lp, ref[r["pos"], got_ids], atol=2e-3)
        assert abs(got_lp[0] - ref[r["pos"]].max()) < 2e-3
        assert np.all(np.diff(got_lp) <= 0)
        assert set(got_ids[:3]) <= set(want[:5].tolist())
    # the env variable does the same; kl.py of a dump against itself is 0
    env = dict(os.environ, STRATA_LOGPOS=str(tmp_path / "env.jsonl"))
    run_cli("-m", model.path, "-p", text, "-n", 0, "--logpos-top", 8, "-c", 512, env=env)
    spec = importlib.util.spec_from_file_location("kl_tool", REPO / "tools" / "kl.py")
    kl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kl)
    r = kl.compare(kl.load_dump(dump), kl.load_dump(tmp_path / "env.jsonl"))
    assert r["n_common"] == len(ids)
    assert r["buckets"]["all"]["mean_kl"] < 1e-6 and r["first_top1_diff"] is None


def test_cli_context_full_and_usage(model):
    p = run_cli("-m", model.path, "-p", PROMPT, "-n", 200, "-c", 24, "--ignore-eos", "--temp", 0)
    assert b"context full" in p.stderr
    p = run_cli("-m", model.path, "-p", TEXT, "-c", 16, check_rc=1)
    assert b"context holds 16" in p.stderr
    p = run_cli("-m", model.path, "--frobnicate", check_rc=2)
    assert p.stderr.decode().count("\n") == 1 and "unknown option '--frobnicate'" in p.stderr.decode()
    p = run_cli("run", "-p", "x", check_rc=2)
    assert b"no model" in p.stderr
    p = run_cli("-m", model.path, "--temp", "hot", check_rc=2)
    assert b"bad value 'hot' for --temp" in p.stderr


def test_cli_perplexity_matches_numpy(model, tmp_path):
    txt = tmp_path / "t.txt"
    txt.write_text(TEXT)
    base = tmp_path / "base.jsonl"
    p = run_cli("perplexity", "-m", model.path, "-f", txt, "-c", 64, "-b", 64, "-t", 2,
                "--kl-base", base)
    out = p.stdout.decode()
    final = [ln for ln in out.splitlines() if ln.startswith("Final estimate")]
    assert final, out
    ppl, err = (float(x) for x in final[0].split("=")[1].split("+/-"))
    # numpy reference: chunks of 64, first token BOS only if the vocabulary adds one (it does
    # not here), score positions 32..62 against the next token
    ids = model.tokenize(TEXT, add_special=False)
    n_ctx, first = 64, 32
    nll = []
    for c in range(len(ids) // n_ctx):
        chunk = ids[c * n_ctx:(c + 1) * n_ctx]
        lp = log_softmax(model.logits(chunk))
        nll += [-lp[j, chunk[j + 1]] for j in range(first, n_ctx - 1)]
    nll = np.array(nll)
    want = math.exp(nll.mean())
    want_err = want * math.sqrt(nll.var() / (len(nll) - 1))
    assert ppl == pytest.approx(want, rel=2e-3)
    assert err == pytest.approx(want_err, rel=2e-2)
    # --kl against its own base: KL 0, 100 % same top-1
    p = run_cli("perplexity", "-m", model.path, "-f", txt, "-c", 64, "-b", 16, "-t", 2,
                "--kl", base)
    out = p.stdout.decode()
    assert "same top-1: 100.000 %" in out
    mean = float(out.split("mean ")[1].split()[0])
    assert mean < 1e-4
    # a different context gives a different scoring: the base does not match
    p = run_cli("perplexity", "-m", model.path, "-f", txt, "-c", 32, "--kl", base, check_rc=1)
    assert b"positions" in p.stderr


def test_cli_chat_keeps_the_cache(model):
    # plain continuation (no template): turn 2 continues the cache of turn 1 and its answer
    p = run_cli("-m", model.path, "-i", "--chat-template", "none", "-n", 12, "--temp", 0,
                "-c", 512, input=b"Dictionary, n.\nLexicon, n.\n")
    t1 = model.tokenize("Dictionary, n.", parse_special=True)
    g1 = [t for t, _ in model.generate(t1, max_tokens=12, temperature=0)]
    t2 = t1 + g1 + model.tokenize("\nLexicon, n.", add_special=False, parse_special=True)
    g2 = [t for t, _ in model.generate(t2, max_tokens=12, temperature=0)]
    want = model.detokenize(g1) + model.detokenize(g2) + "\n"
    assert p.stdout.decode() == want
    assert b"template none" in p.stderr


def test_cli_no_arguments_runs_the_embedded_model(tmp_path):
    if not (REPO / "models" / "strata-tiny-moe-q8_0.gguf").is_file():
        pytest.skip("models/strata-tiny-moe-q8_0.gguf not present")
    if not CLI.is_file():
        pytest.skip(f"strata CLI not built at {CLI}")
    p = subprocess.run([str(CLI)], capture_output=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert out.startswith("Dictionary, n.") and len(out) > 100
    assert b"embedded default model" in p.stderr and b"tok/s" in p.stderr
    if not (CLI.parent / "models").is_dir():  # found only through the working directory
        p = subprocess.run([str(CLI)], capture_output=True, timeout=60, cwd=tmp_path)
        assert p.returncode == 2 and b"was not found" in p.stderr


def test_cli_degrade_zero_flags_and_stats(model, tmp_path):
    """DEGRADE_ZERO from the CLI: off by default and silent; on (env or option) it says so at
    start-up and in the footer; with nothing missed the text is unchanged; the evaluation mode
    changes perplexity only above tau 0; bad taus are usage errors."""
    txt = tmp_path / "t.txt"
    txt.write_text(TEXT * 4)
    args = ["-m", model.path, "-p", PROMPT, "-n", 24, "--temp", 0, "--cpu", "-c", 256]
    off = run_cli(*args)
    assert b"DEGRADE_ZERO" not in off.stderr
    env = dict(os.environ, DEGRADE_ZERO="1", DEGRADE_TAU="0.05")
    on = run_cli(*args, env=env)
    assert on.stdout == off.stdout  # every expert resident: nothing misses, nothing is dropped
    err = on.stderr.decode()
    assert "DEGRADE_ZERO on (an approximation)" in err and "tau 0.05" in err
    assert "zeroed 0 of " in err
    ev = run_cli(*args, "--degrade-eval", "--degrade-tau", "0.2").stderr.decode()
    m = re.search(r"zeroed (\d+) of (\d+) decode slots", ev)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0
    ppl = lambda p: float(re.search(rb"PPL = ([0-9.]+)", p.stdout).group(1))
    pargs = ["perplexity", "-m", model.path, "-f", txt, "-c", 128, "--cpu", "--degrade-eval"]
    p0 = ppl(run_cli(*pargs, "--degrade-tau", 0))
    assert ppl(run_cli("perplexity", "-m", model.path, "-f", txt, "-c", 128, "--cpu")) == pytest.approx(p0, rel=1e-4)
    assert ppl(run_cli(*pargs, "--degrade-tau", 0.2)) != p0
    assert b"bad value '1.5' for --degrade-tau" in run_cli(*args, "--degrade-tau", 1.5, check_rc=2).stderr
    bad = run_cli(*args, env=dict(os.environ, DEGRADE_ZERO="1", DEGRADE_TAU="x"), check_rc=1)
    assert b"degrade_tau" in bad.stderr


def test_cli_placement_options_parse(model):
    """--cpu-moe, --n-cpu-moe N, --gpu-experts, --cuda-graphs, --profile are accepted (placement
    and graphs apply to GPU sessions; a CPU session's text is unchanged) and checked."""
    args = ["-m", model.path, "-p", PROMPT, "-n", 12, "--temp", 0, "--cpu", "-c", 128]
    base = run_cli(*args).stdout
    for extra in (["--cpu-moe"], ["--n-cpu-moe", 2], ["--gpu-experts"], ["--cuda-graphs"],
                  ["--no-cuda-graphs"], ["--cpu-moe", "--stage-experts", 64],
                  ["--cpu-moe", "--stage-experts", "auto"], ["--attn-tc"],
                  ["--pin-experts"], ["--cpu-pin"], ["--gpu-prefetch"], ["--cpu-misses"],
                  ["--pcie-frac", "0.5"], ["--attn-tc-split"], ["--attn-tc-split-p"], ["--no-attn-tc"], ["--no-pdl"],
                  ["--pdl"], ["--pdl-all"], ["--doorbell-graphs"], ["--cpu-warm"], ["--no-cpu-warm"],
                  ["--q8-tiles"], ["--no-q8-tiles"], ["--cache-admit"], ["--no-cache-admit"], ["--stage-ahead"], ["--q8-sm60"],
                  ["--pool-pcie", 2], ["--pool-pcie", "auto"]):
        assert run_cli(*args, *extra).stdout == base, extra
    prof = run_cli(*args, "--profile").stderr.decode()
    assert "strata: profile (prompt and generation)" in prof and " experts " in prof
    assert "next-layer experts predicted" in prof
    assert b"bad value 'x' for --n-cpu-moe" in run_cli(*args, "--n-cpu-moe", "x", check_rc=2).stderr
    assert b"--stage-experts" in run_cli(*args, "--stage-experts", "-3", check_rc=2).stderr
    assert b"--pcie-frac" in run_cli(*args, "--pcie-frac", "1.5", check_rc=2).stderr
    assert b"--pool-pcie" in run_cli(*args, "--pool-pcie", "-2", check_rc=2).stderr
    # the [PROF] footer: a CPU session computes every routed slot (6 layers x top-4 per token)
    assert b"[PROF]" not in run_cli(*args).stderr  # a CPU run prints it only with --profile
    err = run_cli(*args, "--profile").stderr.decode()
    m = re.search(r"\[PROF\] prompt [0-9.]+ tok/s \| decode [0-9.]+ tok/s \| experts: (\d+) slot-rows "
                  r"on the CPU", err)
    n_prompt = len(model.tokenize(PROMPT))
    assert m and int(m.group(1)) == (n_prompt + 11) * 6 * 4, err[-600:]


def test_cli_cpu_isa(model, tmp_path):
    """--cpu-isa LEVEL ($STRATA_CPU_ISA) runs the CPU kernels of that level: every level this CPU
    has gives the same greedy text (the Q8_0 matmuls are bit-identical across levels, the rest
    other arithmetic of the same function); a bad name is a usage error, a level above the CPU's
    an error at load."""
    args = ["-m", model.path, "-p", PROMPT, "-n", 16, "--temp", 0, "--cpu", "-c", 128]
    base = run_cli(*args).stdout
    order = ["scalar", "avx2", "avx512"]
    sup = strata.cpu_isa_supported()  # "scalar", "avx2", "avx512..."
    have = order[:(2 if sup.startswith("avx512") else order.index(sup)) + 1]
    for level in have + ["best"]:
        assert run_cli(*args, "--cpu-isa", level).stdout == base, level
    env = dict(os.environ, STRATA_CPU_ISA="scalar")
    p = run_cli(*args, env=env)
    assert p.stdout == base
    assert b"strata: --cpu-isa: the CPU kernels of the scalar level" in p.stderr
    assert b"bad value 'avx9' for --cpu-isa" in run_cli(*args, "--cpu-isa", "avx9", check_rc=2).stderr
    env = dict(os.environ, STRATA_CPU_ISA="avx9")
    assert b"$STRATA_CPU_ISA" in run_cli(*args, env=env, check_rc=1).stderr
    if "avx512" not in have:
        assert b"--cpu-isa avx512" in run_cli(*args, "--cpu-isa", "avx512", check_rc=1).stderr
    # at every level, a prompt in one batch gives the logprobs of one token at a time: the model
    # requantized to Q4_K takes the several-row kernels (AVX2 and AVX-512) for the batch
    q4k = tmp_path / "tiny-q4_K.gguf"
    run_cli("quantize", model.path, q4k, "--type", "q4_K", "--allow-requantize")
    (tmp_path / "p.txt").write_text(TEXT[:900])
    for level in have:
        dumps = []
        for b in (512, 1):
            out = tmp_path / f"lp_{level}_{b}.jsonl"
            run_cli("-m", q4k, "-f", tmp_path / "p.txt", "-n", 0, "--logpos", out, "--cpu", "-c", 512,
                    "-b", b, "--cpu-isa", level, "--no-amx")
            dumps.append(out.read_bytes())
        assert dumps[0] == dumps[1] and len(dumps[0]) > 1000, level


def test_python_last_stats():
    """Model.last_stats: the session counters of the last call, profile phases by name."""
    from conftest import shared_file
    m = strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=128, n_threads=2,
                     profile=True, degrade_eval=True, degrade_tau=0.05)
    m.generate_text(PROMPT, max_tokens=10, temperature=0)
    st = m.last_stats
    n_prompt = len(m.tokenize(PROMPT))
    assert st["forward_tokens"] == n_prompt + 9 and st["profile"] == 1
    assert set(st["phase_seconds"]) == {"embed", "qkv", "attention", "attn_out", "router",
                                        "experts", "shared", "output"}
    assert st["degrade_slots"] == 9 * 6 * 4 and 0 <= st["degrade_zeroed"] <= st["degrade_slots"]
    assert st["expert_slots_cpu"] == (n_prompt + 9) * 6 * 4 and st["expert_slots_gpu"] == 0
    assert st["q8_tiles_bytes"] == 0 and st["q8_tiles_skipped"] == 0  # a CPU session makes none
    assert st["cpu_split"] == 0  # no GPU share to split
    m.logits([1, 2, 3])
    assert m.last_stats["forward_tokens"] == 3
    m.close()
    # cpu_misses: "auto" (the default), True or False; anything else is refused
    for bad in ("yes", 2):
        try:
            strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=64, cpu_misses=bad)
            raise AssertionError(f"cpu_misses={bad!r} accepted")
        except ValueError:
            pass
    # q8_tiles reaches the session (GPU sessions only use it: a CPU session's logits are the same)
    a = strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=64, n_threads=2, q8_tiles=False)
    b = strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=64, n_threads=2)
    assert (a.logits([1, 2, 3]) == b.logits([1, 2, 3])).all()
    a.close()
    b.close()
    # q8_sm60 too (a CPU session: the same logits, no matrix on the SM60 GEMV)
    a = strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=64, n_threads=2, q8_sm60=True)
    b = strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=64, n_threads=2)
    assert (a.logits([1, 2, 3]) == b.logits([1, 2, 3])).all()
    assert a.last_stats["q8_sm60_mats"] == 0
    a.close()
    b.close()


def test_cli_ram_budget(model):
    """--ram-budget: experts read from the file into a few RAM slots give the same text; the
    [PROF] line counts the slots, hits, misses and disk bytes; bad sizes are usage errors."""
    args = ["-m", model.path, "-p", PROMPT, "-n", 24, "--temp", 0, "--ignore-eos", "--cpu", "-c", 128]
    base = run_cli(*args).stdout
    p = run_cli(*args, "--ram-budget", "1M", "--profile")
    assert p.stdout == base
    m = re.search(r"RAM slots (\d+): (\d+) hits, (\d+) misses .* disk ([0-9.]+) MiB", p.stderr.decode())
    assert m and int(m.group(1)) == 9 and int(m.group(3)) > 0 and float(m.group(4)) > 0
    assert b"bad value '1X' for --ram-budget" in run_cli(*args, "--ram-budget", "1X", check_rc=2).stderr
    assert b"one token needs 4" in run_cli(*args, "--ram-budget", "100K", check_rc=1).stderr


def test_python_gpu_placement_options():
    """The CUDA session options pass through Model: a CPU session ignores them (same logits);
    bad values raise; with backend="cuda" they reach the library (or fail as CUDA does here)."""
    from conftest import shared_file
    path = shared_file("models/strata-tiny-moe-q8_0.gguf")
    toks = list(range(5, 40))
    base = strata.Model(path, n_ctx=128, n_threads=2)
    opts = strata.Model(path, n_ctx=128, n_threads=2, cuda_graphs=False, cuda_pdl="all", n_cpu_moe=-1, cpu_pin=True,
                        stage_experts=16, expert_cache="auto", gpu_mem=1 << 30, attn_tc=True,
                        pin_experts=True, gpu_prefetch=True, cpu_misses=True, pcie_frac=0.25,
                        cache_admit=True, stage_ahead=True, stage_split=True, defer_cpu=1,
                        defer_cpu_below=0.2, pool_pcie="auto")
    assert np.array_equal(base.logits(toks), opts.logits(toks))
    assert opts.last_stats["threads_pinned"] == (1 if len(os.sched_getaffinity(0)) >= 2 else 0)
    with pytest.raises(ValueError):
        strata.Model(path, expert_cache="most")
    with pytest.raises(ValueError):
        strata.Model(path, cuda_pdl="some")
    with pytest.raises(ValueError):
        strata.Model(path, expert_cache=-2)
    with pytest.raises(ValueError, match="defer_cpu"):
        strata.Model(path, defer_cpu="sometimes")
    with pytest.raises(ValueError, match="defer_cpu_below"):
        strata.Model(path, defer_cpu=1, defer_cpu_below=0)
    with pytest.raises(ValueError, match="stage_experts"):
        strata.Model(path, n_ctx=128, stage_experts=-2)
    with pytest.raises(ValueError, match="pool_pcie"):
        strata.Model(path, n_ctx=128, pool_pcie="most")
    with pytest.raises(ValueError, match="pool_pcie"):
        strata.Model(path, n_ctx=128, pool_pcie=-1)
    if not strata.backends()[1]["available"]:  # refused at the call, with CUDA's reason
        with pytest.raises(strata.StrataError):
            strata.Model(path, n_ctx=128, backend="cuda", n_cpu_moe=-1, stage_experts=1)
    else:  # --cpu-moe with every batch staged: the all-resident GPU logits, bit for bit
        cuda = strata.Model(path, n_ctx=128, backend="cuda", n_cpu_moe=-1, stage_experts=1)
        ref = strata.Model(path, n_ctx=128, backend="cuda")
        assert np.array_equal(cuda.logits(toks), ref.logits(toks))
        ref.close()
        cuda.close()
    for m in (base, opts):
        m.close()


def test_gpu_mem_split():
    """Model.gpu_mem_split: the static split gpu_mem alone would use (no GPU needed), CPU layers
    falling from all to none as the memory grows; too little is a StrataError naming gpu_mem."""
    from conftest import shared_file
    with strata.Model(shared_file("models/strata-tiny-moe-q8_0.gguf"), n_ctx=256, n_threads=2) as m:
        split = [m.gpu_mem_split(mib << 20) for mib in (523, 527, 531, 535, 539, 1024)]
        assert split == sorted(split, reverse=True) and split[0] > 0 and split[-1] == 0, split
        assert m.gpu_mem_split(1 << 40, n_ctx=128) == 0
        with pytest.raises(strata.StrataError, match="gpu_mem"):
            m.gpu_mem_split(1 << 20)
        with pytest.raises(ValueError):
            m.gpu_mem_split(0)
