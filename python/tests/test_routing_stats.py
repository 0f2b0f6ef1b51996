"""test_routing_stats.py - routing traces (issue 30): `--route-trace FILE` writes each layer's
routing as JSON lines, and bench/routing_stats.py's statistics and cache policies give the known
answers on constructed traces."""
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
MODEL = REPO / "models" / "strata-tiny-moe-q8_0.gguf"

spec = importlib.util.spec_from_file_location("routing_stats", REPO / "bench" / "routing_stats.py")
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def write_trace(path, n_layer, n_expert, k, steps, pred=None):
    """steps: per forward pass, per layer, the tokens' expert lists."""
    with open(path, "w") as f:
        f.write(json.dumps({"strata_route_trace": 1, "model": "m", "arch": "x", "n_layer": n_layer,
                            "n_expert": n_expert, "k": k}) + "\n")
        pos = 0
        for s, layers in enumerate(steps):
            for layer, toks in enumerate(layers):
                flat = [e for t in toks for e in t]
                p = None if pred is None or layer == 0 else [e for t in pred[s][layer] for e in t]
                f.write(json.dumps({"layer": layer, "pos": pos, "n": len(toks), "ids": flat,
                                    "w": [0.5] * len(flat), "pred": p}) + "\n")
            pos += len(layers[0])


def test_policies_on_known_sequences():
    seq = [(0, e) for e in [1, 2, 3, 1, 2, 3, 1, 2, 3]]
    assert rs.sim_lru(seq, 2) == 0          # a cycle one longer than the cache: LRU never hits
    assert rs.sim_belady(seq, 2) == 3       # MIN keeps one of the two it needs next
    assert rs.sim_lru(seq, 3) == 6
    assert rs.sim_lfu([(0, 1), (0, 1), (0, 2), (0, 3), (0, 1)], 1) == 1
    for name, fn in rs.POLICIES.items():     # no policy beats Belady
        for n in (1, 2, 3):
            assert fn(seq, n) <= rs.sim_belady(seq, n), name


def test_trace_statistics(tmp_path):
    # 2 layers x 4 experts, top-2; four decode steps, then a 2-token batch
    steps = [[[[0, 1]], [[2, 3]]], [[[0, 1]], [[2, 0]]], [[[0, 2]], [[2, 3]]], [[[0, 1]], [[1, 3]]],
             [[[0, 1], [1, 2]], [[3, 3], [3, 2]]]]
    pred = [[None, [[2, 3]]], [None, [[2, 1]]], [None, [[0, 1]]], [None, [[1, 3]]],
            [None, [[3, 2], [3, 2]]]]
    write_trace(tmp_path / "t.jsonl", 2, 4, 2, steps, pred)
    head, recs = rs.read_trace(tmp_path / "t.jsonl")
    seq = rs.lookups(recs)
    assert seq[:4] == [(0, 0), (0, 1), (1, 2), (1, 3)]
    assert seq[-5:] == [(0, 0), (0, 1), (0, 2), (1, 3), (1, 2)]  # a batch's distinct experts once
    assert len(rs.lookups(recs, decode_only=True)) == 16
    pop = rs.popularity(head, recs)
    # layer 0: expert 0 and 1 five slots each, 2 two: 50% of 12 needs two experts, 90% all three
    assert pop[0]["touched"] == 3 and pop[0]["slots"] == 12 and pop[0]["cover50"] == 2 and pop[0]["cover90"] == 3
    ru = rs.reuse(head, recs)
    assert ru["slots"] == 16
    # used by the step before: layer 0: expert 0 at steps 1-3 (3), expert 1 at step 1 (1);
    # layer 1: expert 2 at steps 1, 2 (2), expert 3 at step 3 (1)
    assert ru["reused_next_step"] == pytest.approx(7 / 16)
    pr = rs.prediction(recs)
    # layer 1's slots predicted: 2 + 1 + 0 + 2 in the steps, 2 + 2 in the batch
    assert pr["slots"] == 12 and pr["hit_rate"] == pytest.approx(9 / 12)
    rows = rs.hit_rates(head, seq, [25, 100])
    assert rows[1]["slots"] == 8 and rows[1]["LRU"] == pytest.approx((len(seq) - 7) / len(seq))
    assert '<svg' in rs.svg_plot(rows, "t")
    assert rs.main([str(tmp_path / "t.jsonl"), "--json", str(tmp_path / "r.json"),
                    "--svg", str(tmp_path / "r.svg")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["lookups"] == len(seq)


def run_cli(*args, env=None):
    if not CLI.is_file():
        pytest.skip(f"strata CLI not built at {CLI}")
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, timeout=300, env=env)


def test_cli_route_trace(tmp_path):
    out = tmp_path / "rt.jsonl"
    p = run_cli("-m", MODEL, "-p", "Dictionary, n.", "-n", 5, "--temp", 0, "-c", 128, "--cpu",
                "--route-trace", out)
    assert p.returncode == 0, p.stderr.decode()
    lines = out.read_text().splitlines()
    head = json.loads(lines[0])
    assert head["strata_route_trace"] == 1 and head["n_layer"] == 6 and head["n_expert"] == 32 and head["k"] == 4
    recs = [json.loads(x) for x in lines[1:]]
    assert len(recs) == 6 * 5  # the prompt's pass and four decode steps (the fifth token is sampled)
    assert [r["layer"] for r in recs[:6]] == list(range(6))
    assert recs[0]["pred"] is None and recs[1]["pred"] is not None
    assert all(len(r["ids"]) == r["n"] * 4 == len(r["w"]) for r in recs)
    assert rs.main([str(out)]) == 0
    # the environment variable does the same; a path that cannot be opened is an error with why
    env = dict(os.environ, STRATA_ROUTE_TRACE=str(tmp_path / "env.jsonl"))
    assert run_cli("-m", MODEL, "-p", "x", "-n", 1, "-c", 64, "--cpu", env=env).returncode == 0
    assert (tmp_path / "env.jsonl").read_text().count("\n") == 1 + 6
    p = run_cli("-m", MODEL, "-p", "x", "-n", 1, "-c", 64, "--cpu", "--route-trace", tmp_path / "no" / "t")
    assert p.returncode == 1 and b"No such file" in p.stderr


def test_cli_route_replay(tmp_path):
    """routing_stats.py --replay-out writes a trace's decode steps as a route replay file, and
    `strata --route-replay` routes every MoE layer by it: layer l at position p takes the file's
    layer l mod its layers at step p mod its steps, each expert weighted 1/k (the route trace of
    the replayed run shows it, prompt and decode rows alike). Malformed files, another top-k and
    experts the model lacks are refused with the reason."""
    import random
    rng = random.Random(7)
    steps = [[[rng.sample(range(32), 4)] for _ in range(3)] for _ in range(5)]
    write_trace(tmp_path / "src.jsonl", 3, 32, 4, steps)
    head, recs = rs.read_trace(tmp_path / "src.jsonl")
    rp = tmp_path / "r.replay"
    assert rs.write_replay(head, recs, rp) == (3, 5)
    words = rp.read_text().split()
    assert words[:6] == ["strata-route-replay", "1", "3", "32", "4", "5"] and len(words) == 6 + 5 * 3 * 4
    out = tmp_path / "rt.jsonl"
    p = run_cli("-m", MODEL, "-p", "Dictionary, n.", "-n", 5, "--temp", 0, "-c", 128, "--cpu",
                "--route-replay", rp, "--route-trace", out)
    assert p.returncode == 0, p.stderr.decode()
    assert b"route replay: every MoE layer routes as" in p.stderr
    got = [json.loads(x) for x in out.read_text().splitlines()[1:]]
    rows = 0
    for r in got:
        for t in range(r["n"]):
            want = steps[(r["pos"] + t) % 5][r["layer"] % 3][0]
            assert r["ids"][t * 4:(t + 1) * 4] == want, (r["layer"], r["pos"] + t)
            assert r["w"][t * 4:(t + 1) * 4] == [0.25] * 4
            rows += 1
    assert len(got) == 6 * 5 and rows == sum(r["n"] for r in got) > 6 * 5  # the prompt's pass, 4 steps
    j = tmp_path / "b.json"  # a bench's JSON says whose routing it timed
    q = run_cli("bench", "-m", MODEL, "-p", 0, "-n", 2, "-r", 1, "-t", 2, "--cpu", "--route-replay", rp, "--json", j)
    assert q.returncode == 0 and json.loads(j.read_text())["route_replay"] == str(rp), q.stderr.decode()
    env = dict(os.environ, STRATA_ROUTE_REPLAY=str(rp))
    assert b"route replay" in run_cli("-m", MODEL, "-p", "x", "-n", 1, "-c", 64, "--cpu", env=env).stderr
    body = " ".join(words[6:])
    bad = {"magic": "strata-route-trace 1 3 32 4 5\n" + body,
           "version": "strata-route-replay 2 3 32 4 5\n" + body,
           "top-k": "strata-route-replay 1 3 32 2 10\n" + body,
           "experts": "strata-route-replay 1 3 64 4 5\n" + body,
           "id": "strata-route-replay 1 3 32 4 5\n" + body.replace(words[6], "32", 1),
           "short": "strata-route-replay 1 3 32 4 6\n" + body,
           "long": "strata-route-replay 1 3 32 4 4\n" + body,
           "junk": "strata-route-replay 1 3 32 4 5\n" + body + " x"}
    why = {"magic": b"not a route replay file", "version": b"not a route replay file", "top-k": b"top-2",
           "experts": b"of 64 experts", "id": b"outside -1..31", "short": b"missing", "long": b"more than",
           "junk": b"more than"}
    for name, text in bad.items():
        f = tmp_path / f"{name}.replay"
        f.write_text(text)
        q = run_cli("-m", MODEL, "-p", "x", "-n", 1, "-c", 64, "--cpu", "--route-replay", f)
        assert q.returncode == 1 and why[name] in q.stderr, (name, q.stderr)
    q = run_cli("-m", MODEL, "-p", "x", "-n", 1, "-c", 64, "--cpu", "--route-replay", tmp_path / "none")
    assert q.returncode == 1 and b"cannot open" in q.stderr


def test_simulated_slot_book_is_the_ram_tiers(tmp_path):
    """The simulator's slot book is the C one: a CPU session whose experts come through a RAM tier
    of n slots (--ram-budget) counts exactly the hits the simulator finds on the same session's
    trace (a layer call holds its experts, as the tier does)."""
    text = tmp_path / "t.txt"
    text.write_text((REPO / "README.md").read_text()[:2500])
    slot = 106496  # the default model's RAM slot (an expert's three matrices, aligned)
    for n in (40, 96):
        trace = tmp_path / f"rt{n}.jsonl"
        p = run_cli("-m", MODEL, "-f", text, "-n", 0, "-b", 1, "-c", 1024, "--cpu", "-t", 2,
                    "--ram-budget", n * slot, "--profile", "--route-trace", trace)
        assert p.returncode == 0, p.stderr.decode()
        import re
        m = re.search(rb"RAM slots (\d+): (\d+) hits, (\d+) misses", p.stderr)
        assert m and int(m.group(1)) == n, p.stderr.decode()[-500:]
        head, recs = rs.read_trace(trace)
        calls = []
        seq = rs.lookups(recs, False, calls)
        hits = rs.sim_slot_book(seq, n, calls=calls)
        assert (hits, len(seq) - hits) == (int(m.group(2)), int(m.group(3)))


def test_python_route_trace(tmp_path):
    """Model.route_trace: the CLI's records for the same prompt and greedy tokens (a CPU session
    even when the Model would run on the GPU), and a file routing_stats.py reads."""
    import strata
    out = tmp_path / "cli.jsonl"
    p = run_cli("-m", MODEL, "-p", "Dictionary, n.", "-n", 5, "--temp", 0, "-c", 128, "--cpu", "--route-trace", out)
    assert p.returncode == 0, p.stderr.decode()
    cli = [json.loads(x) for x in out.read_text().splitlines()[1:]]
    with strata.Model(str(MODEL), n_ctx=128, n_threads=2) as m:
        recs = m.route_trace("Dictionary, n.", max_tokens=4, path=tmp_path / "py.jsonl")
        assert len(recs) == len(cli) == 6 * 5
        for a, b in zip(recs, cli):
            assert (a["layer"], a["pos"], a["n"], a["ids"], a["pred"]) == (b["layer"], b["pos"], b["n"], b["ids"], b["pred"])
            assert all(abs(x - y) <= 1e-5 * max(1.0, abs(y)) for x, y in zip(a["w"], b["w"]))
        head = json.loads((tmp_path / "py.jsonl").read_text().splitlines()[0])
        assert head["n_layer"] == 6 and head["n_expert"] == 32 and head["k"] == 4
        assert rs.main([str(tmp_path / "py.jsonl")]) == 0
        with pytest.raises(ValueError):
            m.route_trace([])


spec_ps = importlib.util.spec_from_file_location("placement_sim", REPO / "bench" / "placement_sim.py")
ps = importlib.util.module_from_spec(spec_ps)
spec_ps.loader.exec_module(ps)


def test_placement_sim_costs_and_placements(tmp_path):
    """bench/placement_sim.py: the split of misses is the cost model's, a slot book's flags count
    its hits, and on a trace where one expert a layer repeats the placements come out as the
    costs say (a resident layer costs gpu alone; the hybrid's cache catches the repeats)."""
    c = dict(gpu=10.0, trip=5.0, cpu0=20.0, cpu1=10.0, pcie=25.0, cache_extra=3.0, hybrid_extra=1.0, bell=2.0,
             zc=25.0)
    assert ps.split_us(0, c) == 0.0
    assert ps.split_us(1, c) == 25.0                   # one copy (25) beats the CPU's step (30)
    assert ps.split_us(3, c) == 40.0                   # two on the CPU (40), one copied (25)
    assert ps.split_us(3, c, 50.0) == 50.0             # at 50 an expert: all three on the CPU
    # pool_pcie's split prices the GPU's reads of the pinned copy at zc, not at the copy rate
    assert ps.layer_us("pool_pcie", 3, dict(c, zc=50.0)) == 10.0 + 2.0 + 50.0
    assert ps.layer_us("pool_pcie", 3, c) == 10.0 + 2.0 + 40.0
    flags = []
    seq = [(0, 1), (0, 2), (0, 1), (0, 3), (0, 1)]
    assert rs.sim_slot_book(seq, 2, flags=flags) == sum(flags) == 2 and flags == [False, False, True, False, True]
    # the pool's loads: empty slots fill freely, then one eviction a step (3 evicts 2, 4 waits)
    seq, steps = [(0, 1), (0, 2), (0, 3), (0, 4), (0, 4), (0, 3)], [0, 0, 1, 1, 2, 2]
    flags = []
    rs.sim_slot_book(seq, 2, flags=flags, steps=steps, evictions=1)
    assert flags == [False, False, False, False, False, True]
    flags = []
    rs.sim_slot_book(seq, 2, flags=flags)  # without the budget 4 takes a slot at once
    assert flags[4] is True
    # 4 layers x 8 experts, top-2: every layer routes expert 0 and a new one each step
    steps = [[[[0, 1 + (s + l) % 7]] for l in range(4)] for s in range(30)]
    write_trace(tmp_path / "t.jsonl", 4, 8, 2, steps)
    head, recs = rs.read_trace(tmp_path / "t.jsonl")
    rows = ps.simulate(head, recs, [0.5], 2, c)
    static = [r for r in rows if r["kind"] == "static"][0]
    # static at half: 2 resident layers (10 each), 2 CPU layers of 2 misses (10 + 5 + split(2) 30)
    assert static["us"] == pytest.approx(2 * 10 + 2 * (10 + 5 + 30))
    assert static["hit"] == pytest.approx(0.5)
    hyb = [r for r in rows if r["kind"] == "hybrid"]
    cache = [r for r in rows if r["kind"] == "cache"][0]
    assert len(hyb) == 2 and hyb[0]["hit"] > static["hit"]  # the repeated expert stays in its slots
    # d = 2 moves every layer to the CPU with 16 slots: the cache's look-ups and hits, less its extra
    assert hyb[1]["hit"] == cache["hit"] and cache["us"] - hyb[1]["us"] == pytest.approx(4 * (3.0 - 1.0))
    # the pool placements: the same slot book; no round trip, `bell` a layer, and with the GPU's
    # own share of the misses never slower than the pool alone
    pool = {r["kind"]: r for r in rows if r["kind"].startswith("pool")}
    assert pool["pool"]["hit"] == pool["pool_pcie"]["hit"] == cache["hit"]
    assert pool["pool_pcie"]["us"] <= pool["pool"]["us"]
    assert ps.layer_us("pool", 2.5, c) == pytest.approx((ps.layer_us("pool", 2, c) + ps.layer_us("pool", 3, c)) / 2)
    # the pool's one load a step goes to the layers in turn (moe_block.c's pm_first): layer 0
    # misses every step (a new expert each time), yet layer 1's one expert gets its slot on the
    # first step that layer 1 comes first, and keeps it; served from layer 0 every step, layer 1
    # would miss all ten steps
    calls = [c for st in range(10) for c in ((0, [10 + st]), (1, [4 if st == 0 else 5]))]
    miss = ps.misses_by_cache(calls, lambda l: True, 2, evictions=1)
    assert sum(miss[0::2]) == 10 and sum(miss[1::2]) == 2
    miss = ps.misses_by_cache(calls, lambda l: True, 2, evictions=1, rotate=False)  # the engine before
    assert sum(miss[0::2]) == 10 and sum(miss[1::2]) == 10
    assert all(r["tok_s"] == pytest.approx(1e6 / r["us"]) for r in rows)
    out = subprocess.run(["python3", str(REPO / "bench" / "placement_sim.py"), str(tmp_path / "t.jsonl"),
                          "--shares", "0.5", "--json", str(tmp_path / "p.json")], capture_output=True, text=True)
    assert out.returncode == 0 and "| 50% | static (2 CPU layers) |" in out.stdout, out.stderr
    assert json.load(open(tmp_path / "p.json"))["rows"][0]["kind"] == "static"
