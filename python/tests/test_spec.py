"""test_spec.py - speculative decoding from the CLI and Python (issue 31): `--spec ngram` and
`--draft-model FILE`, alone or under `--spec auto`'s draft policy (generate(speculative="ngram" |
Model | "auto" | (Model, "auto"))), give greedy decoding's text token for token (prompt, chat with
stop strings, a full context), the footer, --stats-json and last_stats count the verify windows
and the policy's choices (the target as its own draft accepts every draft; a q4_0 copy of it
most), sampled text is plain's for the same seed, and the options and arguments refuse what
is not built or out of range."""
import json
import re
import sys
import os
import subprocess
from pathlib import Path

import pytest

import strata
from conftest import REPO

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
MODEL = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
REPEATS = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat"


def run(*args, check_rc=0, input=None):
    if not CLI.is_file():
        pytest.skip(f"strata CLI not built at {CLI}")
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, timeout=300, input=input)
    if check_rc is not None:
        assert p.returncode == check_rc, (args, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p


def gen(*extra, prompt="Dictionary, n.", n=80, stats=None):
    args = ["run", "-m", MODEL, "-p", prompt, "-n", n, "--temp", 0, "-t", 2, "--no-echo", *extra]
    if stats:
        args += ["--stats-json", stats]
    return run(*args)


@pytest.fixture(scope="module")
def q4_draft(tmp_path_factory):
    """The tiny model requantized to q4_0: the same vocabulary, other weights (a real draft)."""
    out = tmp_path_factory.mktemp("spec") / "tiny-q4_0.gguf"
    run("quantize", MODEL, out, "-T", "q4_0", "--allow-requantize")
    return out


@pytest.mark.parametrize("prompt", ["Dictionary, n.", REPEATS])
def test_greedy_text_unchanged(prompt, q4_draft, tmp_path):
    plain = gen(prompt=prompt).stdout
    for extra in (["--spec", "ngram"], ["--draft-model", q4_draft], ["--draft-model", MODEL],
                  ["--spec", "ngram", "--draft-max", 1], ["--spec", "ngram", "--draft-min", 3],
                  ["--spec", "auto"], ["--spec", "auto", "--draft-model", q4_draft]):
        p = gen(*extra, prompt=prompt, stats=tmp_path / "s.json")
        assert p.stdout == plain, extra
        s = json.loads((tmp_path / "s.json").read_text())
        assert s["n_gen"] == 80
        assert s["spec_accepted"] <= s["spec_drafted"]
        assert s["spec_windows"] > 0 or "auto" in extra
        assert b"speculative:" in p.stderr and b"verify windows" in p.stderr
        if "auto" in extra:
            assert b"draft policy:" in p.stderr and "policy_acceptance" in s
            assert s["policy_windows"] == s["spec_windows"]
            assert s["policy_plain_steps"] + s["spec_emitted"] == 79  # every token after the first
            assert len(s["policy_window_ms"]) == 9 and min(s["policy_window_ms"]) > 0


def test_auto_combines_drafters(q4_draft, tmp_path):
    """--spec auto with a draft model and a RAM budget (a fast tier): prompt lookup, the draft model
    and the self-draft each under a policy of their own; plain greedy's text, and the per-drafter
    counts add up to the session's."""
    for prompt in ("Dictionary, n.", REPEATS):
        plain = gen(prompt=prompt).stdout
        p = gen("--spec", "auto", "--draft-model", q4_draft, "--ram-budget", "4M", prompt=prompt,
                stats=tmp_path / "s.json")
        assert p.stdout == plain
        s = json.loads((tmp_path / "s.json").read_text())
        names = [d["name"] for d in s["drafters"]]
        assert names == ["prompt lookup", "draft model", "self-draft"], names
        assert b"among prompt lookup, draft model (cpu), self-draft, and a plain step" in p.stderr
        assert b"strata: drafters: prompt lookup" in p.stderr
        for key in ("windows", "drafted", "accepted"):
            assert sum(d[key] for d in s["drafters"]) == s["spec_" + key], key
        assert s["policy_windows"] == s["spec_windows"]
        assert s["policy_plain_steps"] + s["spec_emitted"] == 79
        assert all(0 < d["acceptance_estimate"] < 1 for d in s["drafters"])
    # without a fast tier the self-draft is left out, without --draft-model the draft model
    p = gen("--spec", "auto", stats=tmp_path / "t.json")
    assert [d["name"] for d in json.loads((tmp_path / "t.json").read_text())["drafters"]] == ["prompt lookup"]


def test_cut_layers_draft(tmp_path):
    """tools/cut_layers.py: the first 2 of the default model's 6 blocks, its vocabulary kept: the CLI
    reads 2 blocks, and as a draft model of the original it is accepted (same vocabulary) and keeps
    plain greedy's text; the refused cuts."""
    pytest.importorskip("gguf")
    out = tmp_path / "draft-l2.gguf"
    tool = [sys.executable, str(REPO / "tools" / "cut_layers.py"), str(MODEL)]
    p = subprocess.run([*tool, out, "--layers", "2"], capture_output=True, timeout=120)
    assert p.returncode == 0 and b"the first 2 of 6 blocks, 27 tensors" in p.stdout, p.stderr[-1000:]
    info = run("info", out).stdout.decode()
    assert re.search(r"block_count\s+2\b", info) and "8192 tokens" in info
    plain = gen(n=40).stdout
    g = gen("--draft-model", out, "--draft-max", 4, n=40, stats=tmp_path / "s.json")
    s = json.loads((tmp_path / "s.json").read_text())
    assert g.stdout == plain and s["spec_windows"] > 0 and s["spec_accepted"] < s["spec_drafted"]
    for bad in ("0", "7"):
        p = subprocess.run([*tool, tmp_path / "x.gguf", "--layers", bad], capture_output=True, timeout=120)
        assert p.returncode != 0 and b"outside 1..6" in p.stderr + p.stdout


def test_window_counts(q4_draft, tmp_path):
    # the target as its own draft: every draft accepted, windows of draft-max + 1 tokens
    gen("--draft-model", MODEL, "--draft-max", 4, n=50, stats=tmp_path / "a.json")
    a = json.loads((tmp_path / "a.json").read_text())
    assert a["spec_accepted"] == a["spec_drafted"] > 0
    assert a["spec_emitted"] == a["spec_windows"] + a["spec_accepted"]
    assert a["spec_drafted"] <= 4 * a["spec_windows"]
    # 49 tokens after the first in ceil(49 / 5) windows, the last one drafting only the 3 that
    # -n leaves room for
    assert a["n_gen"] == 50 and a["spec_windows"] == 10 and a["spec_drafted"] == 9 * 4 + 3
    # a q4_0 copy: most drafts, not all
    gen("--draft-model", q4_draft, stats=tmp_path / "b.json")
    b = json.loads((tmp_path / "b.json").read_text())
    assert 0.5 * b["spec_drafted"] < b["spec_accepted"] < b["spec_drafted"]
    # n-gram drafts on text that repeats itself
    gen("--spec", "ngram", prompt=REPEATS, stats=tmp_path / "c.json")
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["spec_accepted"] > 0
    # no drafts for want of --draft-min: plain steps, no windows
    gen("--spec", "ngram", "--draft-min", 16, n=30, stats=tmp_path / "d.json")
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["n_gen"] == 30 and d["spec_drafted"] == 0 and d["spec_windows"] == 0


def test_chat_stops_and_full_context(q4_draft):
    turns = b"Dictionary, n.\nWhat is a cat?\nAnd a dog?\n"
    for stop in ([], ["--stop", "."], ["--stop", "the"]):
        base = ["run", "-m", MODEL, "--chat", "-n", 40, "--temp", 0, "-t", 2, *stop]
        plain = run(*base, input=turns).stdout
        for extra in (["--spec", "ngram"], ["--draft-model", q4_draft], ["--draft-model", MODEL],
                      ["--spec", "auto"]):
            assert run(*base, *extra, input=turns).stdout == plain, (stop, extra)
    base = ["-c", 40, "--ignore-eos"]
    plain = gen(*base, n=100).stdout
    for extra in (["--spec", "ngram"], ["--draft-model", MODEL], ["--spec", "auto"]):
        p = gen(*base, *extra, n=100)
        assert p.stdout == plain and b"context full" in p.stderr


def test_sampling_same_text_for_a_seed(q4_draft):
    # a window's rows draw as one-token steps do: sampled text is plain's for the seed
    for sampling in (["--temp", 0.8, "--seed", 7], ["--temp", 1.2, "--top-k", 0, "--seed", 3],
                     ["--temp", 0.7, "--repeat-penalty", 1.3, "--seed", 11]):
        plain = gen(*sampling).stdout
        assert len(plain) > 0
        for extra in (["--draft-model", q4_draft], ["--draft-model", MODEL], ["--spec", "ngram"],
                      ["--spec", "auto"]):
            assert gen(*sampling, *extra).stdout == plain, (sampling, extra)


def test_oracle(tmp_path):
    """--spec oracle (benchmarks only) drafts the model's own continuation, computed first: every
    draft accepted at --oracle-rate 1, about the rate's share per verified draft below it, none
    at 0, and the text is plain's every time (greedy, and sampled with a seed)."""
    plain = gen(n=200, prompt=REPEATS).stdout
    for rate, lo, hi in ((None, 1.0, 1.0), (1, 1.0, 1.0), (0.7, 0.6, 0.8), (0.3, 0.2, 0.4), (0, 0.0, 0.0)):
        extra = ["--spec", "oracle"] + ([] if rate is None else ["--oracle-rate", rate])
        p = gen(*extra, n=200, prompt=REPEATS, stats=tmp_path / "o.json")
        assert p.stdout == plain, rate
        assert b"the oracle (benchmarks only)" in p.stderr
        s = json.loads((tmp_path / "o.json").read_text())
        assert s["n_gen"] == 200 and s["spec_drafted"] > 0
        assert lo <= s["spec_accepted"] / s["spec_drafted"] <= hi, (rate, s)
    seeded = ["--temp", 0.8, "--seed", 11]
    assert gen(*seeded, "--spec", "oracle", "--oracle-rate", 0.5).stdout == gen(*seeded).stdout
    p = gen("--spec", "auto", "--oracle-rate", 0.9, stats=tmp_path / "a.json")
    assert p.stdout == gen().stdout and b"draft policy:" in p.stderr
    assert "policy_acceptance" in json.loads((tmp_path / "a.json").read_text())


def test_options_refused():
    for args, msg in ((["--spec", "self", "--draft-model", MODEL], b"not self"),
                      (["--spec", "ngram", "--oracle-rate", 0.5], b"--oracle-rate"),
                      (["--oracle-rate", 0.5], b"--oracle-rate"),
                      (["--spec", "oracle", "--oracle-rate", 1.5], b"--oracle-rate"),
                      (["--spec", "oracle", "--draft-model", MODEL], b"exclude each other"),
                      (["--spec", "ngram", "--draft-model", MODEL], b"--draft-model"),
                      (["--spec", "bogus"], b"--spec"), (["--spec", "draft"], b"--draft-model"),
                      (["--spec", "ngram", "--draft-max", 0], b"--draft-max"),
                      (["--spec", "ngram", "--draft-max", 17], b"--draft-max"),
                      (["--spec", "ngram", "--draft-min", -1], b"--draft-min")):
        p = run("run", "-m", MODEL, "-p", "x", "-n", 4, *args, check_rc=None)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert msg in p.stderr, (args, p.stderr)
    p = run("run", "-m", MODEL, "-p", "x", "-n", 4, "--draft-model", "/nonexistent.gguf", check_rc=None)
    assert p.returncode != 0 and b"/nonexistent.gguf" in p.stderr


def test_python_speculative(q4_draft):
    m = strata.Model(MODEL, n_threads=2)
    d = strata.Model(q4_draft, n_threads=2)
    try:
        for prompt in ("Dictionary, n.", REPEATS):
            for stop in ((), (".",)):
                plain = m.generate_text(prompt, 60, temperature=0, stop=stop)
                for spec in ("ngram", d, m, "auto", (d, "auto")):
                    assert m.generate_text(prompt, 60, temperature=0, stop=stop, speculative=spec,
                                           draft_max=5) == plain, (prompt, stop, spec)
                    st = m.last_stats
                    assert st["spec_accepted"] <= st["spec_drafted"] <= 5 * st["spec_windows"]
                    if spec is m:
                        assert st["spec_accepted"] == st["spec_drafted"] > 0
                    if isinstance(spec, tuple) or spec == "auto":
                        assert st["policy_windows"] == st["spec_windows"]
                        assert [x["name"] for x in st["drafters"]] == (
                            ["prompt lookup", "draft model"] if isinstance(spec, tuple) else ["prompt lookup"])
                        assert len(st["policy_window_s"]) == 6 and 0 <= st["policy_acceptance"] <= 1
                    else:
                        assert st["spec_windows"] > 0 and "policy_windows" not in st
        m.generate_text("Dictionary, n.", 30, temperature=0)
        assert m.last_stats["spec_windows"] == 0
        a = m.generate_text("Dictionary, n.", 40, temperature=0.8, seed=5)
        for spec in (d, "ngram", "auto", (d, "auto")):
            assert a == m.generate_text("Dictionary, n.", 40, temperature=0.8, seed=5, speculative=spec)
        with pytest.raises(strata.StrataError, match="ram_budget"):  # refused by the session, at the first step
            next(m.generate("x", 4, speculative="self"))
        with pytest.raises(strata.StrataError, match="no MTP heads"):  # a file without an MTP layer
            next(m.generate("x", 4, speculative="mtp"))
        for kw, exc in ((dict(speculative=3), TypeError),
                        (dict(speculative="draft"), ValueError), (dict(speculative=("self", "auto")), TypeError),
                        (dict(speculative=("mtp", "auto")), TypeError),
                        (dict(speculative=("ngram", "auto")), TypeError),
                        (dict(speculative=(d, "sometimes")), TypeError),
                        (dict(speculative="ngram", draft_max=0), ValueError),
                        (dict(speculative="ngram", draft_max=17), ValueError),
                        (dict(speculative="ngram", draft_min=-1), ValueError),
                        (dict(speculative="ngram", draft_max=2.0), TypeError)):
            with pytest.raises(exc):
                m.generate("x", 4, **kw)
        g = m.generate("Dictionary, n.", 50, temperature=0, speculative="ngram")
        next(g)
        m.close()  # frees the n-gram drafter: the generator must not touch it
        with pytest.raises(ValueError):
            list(g)
    finally:
        m.close()
        d.close()


def test_verify_profile(tmp_path):
    """--verify-profile (and STRATA_VERIFY_PROFILE=1): a table at exit with a row per window length
    (plain steps as "plain") and a total, its parts summing to the total; the JSON has the same
    rows; the text is unchanged."""
    st = tmp_path / "vp.json"
    plain = gen(n=64).stdout
    p = gen("--spec", "oracle", "--oracle-rate", 0.8, "--draft-max", 4, "--verify-profile", n=64, stats=st)
    assert p.stdout == plain
    err = p.stderr.decode()
    assert "verify profile" in err
    rows = [l for l in err.splitlines() if l.startswith("| ") and not l.startswith("| drafts")]
    assert rows[-1].startswith("| all |")
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        parts = [float(c) for c in cells[3:11]]
        assert abs(sum(parts) - float(cells[11])) < 0.01 + 1e-3 * float(cells[11]), r
    vp = json.loads(st.read_text())["verify_profile"]
    assert sum(r["windows"] for r in vp) == int(rows[-1].split("|")[2])
    assert sum(r["tokens"] for r in vp) == 63  # every token after the prompt's
    assert all(0 <= r["drafts"] <= 4 and r["ms"]["attention"] > 0 for r in vp)
    env = dict(os.environ, STRATA_VERIFY_PROFILE="1")
    q = subprocess.run([str(CLI), "run", "-m", MODEL, "-p", "Dictionary, n.", "-n", "8", "--temp", "0", "-t", "2",
                        "--spec", "ngram"], capture_output=True, env=env, timeout=120)
    assert q.returncode == 0 and b"verify profile" in q.stderr


def test_short_read(tmp_path):
    """--short-read N: a prompt of up to N tokens is read as verify windows (the decode path):
    the same --logpos bits as the prompt path with approximations off, whatever the window size;
    DEGRADE_ZERO then counts the prompt's slots as decode slots (it acts only there)."""
    prompt = tmp_path / "p.txt"
    prompt.write_text((REPO / "LICENSE").read_text()[:600])
    base = ["run", "-m", MODEL, "-f", prompt, "-n", 0, "-t", 2]
    dumps = []
    for extra in ([], ["--short-read", 512], ["--short-read", 512, "--draft-max", 3], ["--short-read", 5]):
        out = tmp_path / f"lp{len(dumps)}.jsonl"
        run(*base, "--logpos", out, *extra)
        dumps.append(out.read_bytes())
    assert dumps[0] == dumps[1] == dumps[2] == dumps[3]
    env = dict(os.environ, DEGRADE_ZERO="1")
    tally = []
    for extra in ([], ["--short-read", 512]):
        q = subprocess.run([str(CLI), *map(str, base), *map(str, extra)], capture_output=True, env=env, timeout=120)
        assert q.returncode == 0, q.stderr
        line = [l for l in q.stderr.decode().splitlines() if "zeroed" in l][0]
        tally.append(int(line.split(" of ")[1].split()[0]))
    assert tally[0] == 0 and tally[1] > 0, tally


def test_self_draft(tmp_path):
    """--spec self: the model drafts with only the experts in its fast tier (here a CPU session's
    RAM slots under --ram-budget), misses dropped: plain's text, some drafts accepted; refused
    with the reason where every expert is resident."""
    plain = gen("--ram-budget", "4M", n=64).stdout
    st = tmp_path / "s.json"
    p = gen("--ram-budget", "4M", "--spec", "self", n=64, stats=st)
    assert p.stdout == plain and b"self-drafts" in p.stderr
    s = json.loads(st.read_text())
    assert 0 < s["spec_accepted"] < s["spec_drafted"]
    q = run("run", "-m", MODEL, "-p", "x", "-n", 4, "--spec", "self", check_rc=1)
    assert b"ram_budget" in q.stderr and b"--ram-budget" in q.stderr
    q = run("run", "-m", MODEL, "-p", "x", "-n", 4, "--spec", "mtp", check_rc=1)
    assert b"no MTP heads" in q.stderr


def test_python_self_draft():
    """generate(speculative="self") on a Model with a RAM budget: plain's text, drafts accepted."""
    with strata.Model(str(MODEL), n_threads=2, ram_budget=4 << 20) as m:
        plain = m.generate_text("Dictionary, n.", 40, temperature=0)
        assert m.generate_text("Dictionary, n.", 40, temperature=0, speculative="self") == plain
        st = m.last_stats
        assert 0 < st["spec_accepted"] <= st["spec_drafted"]
        assert [d["name"] for d in st["drafters"]] == ["self-draft"]
        # "auto" with a fast tier: prompt lookup and the self-draft, each under its own policy
        assert m.generate_text("Dictionary, n.", 40, temperature=0, speculative="auto") == plain
        st = m.last_stats
        assert [d["name"] for d in st["drafters"]] == ["prompt lookup", "self-draft"]
        for key in ("windows", "drafted", "accepted"):
            assert sum(d[key] for d in st["drafters"]) == st["spec_" + key], key
        assert st["policy_windows"] == st["spec_windows"]
