"""test_kl.py - tools/kl.py on constructed dumps whose KL is known: identical dumps give 0; two
distributions whose whole support fits in the top K give the exact analytic KL; a coarsened
("everything else" bucket) case and an id missing from B's top-K match the formulas worked out
here; position buckets; top-1 agreement and the first differing position; --json and errors."""
import importlib.util
import json
import math
import subprocess
import sys

import pytest

from conftest import REPO

KL_PY = REPO / "tools" / "kl.py"
_spec = importlib.util.spec_from_file_location("strata_kl_tool", KL_PY)
kl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kl)


def write_dump(path, rows, n_vocab=100, top_k=None, model="m"):
    """rows: {pos: [(id, prob), ...]} (probabilities; written as logprobs)."""
    k = top_k or max(len(r) for r in rows.values())
    with open(path, "w") as f:
        f.write(json.dumps({"strata_logpos": 1, "model": model, "n_vocab": n_vocab,
                            "top_k": k}) + "\n")
        for pos in sorted(rows):
            top = [[i, math.log(p)] for i, p in rows[pos]]
            f.write(json.dumps({"pos": pos, "token": 1, "top": top}) + "\n")
    return path


def analytic(p, q):
    return sum(pi * math.log(pi / q[i]) for i, pi in p.items() if pi > 0)


def test_identical_is_zero(tmp_path):
    rows = {i: [(3, 0.6), (7, 0.3), (9, 0.05)] for i in range(20)}
    a = write_dump(tmp_path / "a.jsonl", rows)
    r = kl.compare(kl.load_dump(a), kl.load_dump(a))
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(0.0, abs=1e-12)
    assert r["buckets"]["all"]["top1_agree"] == 1.0
    assert r["first_top1_diff"] is None
    assert r["n_common"] == 20


def test_full_support_exact(tmp_path):
    pa = {0: 0.5, 1: 0.3, 2: 0.2}
    pb = {1: 0.5, 2: 0.3, 0: 0.2}
    a = write_dump(tmp_path / "a.jsonl", {0: sorted(pa.items(), key=lambda x: -x[1])}, top_k=4)
    b = write_dump(tmp_path / "b.jsonl", {0: sorted(pb.items(), key=lambda x: -x[1])}, top_k=4)
    r = kl.compare(kl.load_dump(a), kl.load_dump(b))
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(analytic(pa, pb), rel=1e-9)
    assert r["buckets"]["0-7"]["mean_kl"] == pytest.approx(analytic(pa, pb), rel=1e-9)
    assert r["buckets"]["all"]["top1_agree"] == 0.0
    assert r["first_top1_diff"] == 0
    # and the reverse direction is the other analytic value (KL is not symmetric)
    r2 = kl.compare(kl.load_dump(b), kl.load_dump(a))
    assert r2["buckets"]["all"]["mean_kl"] == pytest.approx(analytic(pb, pa), rel=1e-9)
    assert analytic(pa, pb) != pytest.approx(analytic(pb, pa), rel=1e-3)


def test_coarsened_rest_bucket(tmp_path):
    # both list ids 0,1; the rest of the mass (0.2 vs 0.4) forms one bucket
    a = write_dump(tmp_path / "a.jsonl", {0: [(0, 0.5), (1, 0.3)]})
    b = write_dump(tmp_path / "b.jsonl", {0: [(0, 0.4), (1, 0.2)]})
    want = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.2) + 0.2 * math.log(0.2 / 0.4)
    r = kl.compare(kl.load_dump(a), kl.load_dump(b))
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(want, rel=1e-9)


def test_missing_id_gets_tail_bound(tmp_path):
    # A lists id 5, B does not: B's tail 1 - 0.9 = 0.1, below B's smallest listed 0.3 -> b_5 = 0.1
    a = write_dump(tmp_path / "a.jsonl", {0: [(0, 0.7), (5, 0.2)]})
    b = write_dump(tmp_path / "b.jsonl", {0: [(0, 0.6), (1, 0.3)]})
    qb5 = 0.1
    ra, rb = 0.1, 1 - 0.6 - qb5
    want = 0.7 * math.log(0.7 / 0.6) + 0.2 * math.log(0.2 / qb5) + ra * math.log(ra / rb)
    r = kl.compare(kl.load_dump(a), kl.load_dump(b))
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(want, rel=1e-9)
    # B's smallest listed probability caps it: an unlisted id ranks below every listed one
    a2 = write_dump(tmp_path / "a2.jsonl", {0: [(0, 0.7), (5, 0.2)]})
    b2 = write_dump(tmp_path / "b2.jsonl", {0: [(0, 0.6), (1, 0.01)]})
    qb5 = 0.01  # min(0.01, 0.39)
    ra, rb = 0.1, 1 - 0.6 - qb5
    want = 0.7 * math.log(0.7 / 0.6) + 0.2 * math.log(0.2 / qb5) + ra * math.log(ra / rb)
    r = kl.compare(kl.load_dump(a2), kl.load_dump(b2))
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(want, rel=1e-9)
    # two missing ids share the tail: min(0.35, 0.05 / 2) each
    a3 = write_dump(tmp_path / "a3.jsonl", {0: [(0, 0.5), (5, 0.2), (6, 0.2)]})
    b3 = write_dump(tmp_path / "b3.jsonl", {0: [(0, 0.6), (1, 0.35)]})
    q = 0.025
    ra, rb = 0.1, 1 - 0.6 - 2 * q
    want = 0.5 * math.log(0.5 / 0.6) + 2 * 0.2 * math.log(0.2 / q) + ra * math.log(ra / rb)
    r = kl.compare(kl.load_dump(a3), kl.load_dump(b3))
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(want, rel=1e-9)


def test_buckets_agreement_first_diff(tmp_path):
    pa = {0: 0.5, 1: 0.3, 2: 0.2}
    variants = {"0-7": {0: 0.4, 1: 0.4, 2: 0.2}, "8-63": {0: 0.45, 1: 0.35, 2: 0.2},
                "64-639": {0: 0.3, 1: 0.5, 2: 0.2}, "640+": {0: 0.5, 1: 0.3, 2: 0.2}}
    rows_a, rows_b = {}, {}
    positions = [0, 3, 7, 8, 40, 63, 64, 300, 639, 640, 1000]
    for pos in positions:
        rows_a[pos] = list(pa.items())
        q = variants[kl.bucket_of(pos)]
        rows_b[pos] = sorted(q.items(), key=lambda x: (-x[1], x[0]))
    a = write_dump(tmp_path / "a.jsonl", rows_a)
    b = write_dump(tmp_path / "b.jsonl", rows_b)
    r = kl.compare(kl.load_dump(a), kl.load_dump(b))
    counts = {"0-7": 3, "8-63": 3, "64-639": 3, "640+": 2}
    total = 0.0
    for name, q in variants.items():
        assert r["buckets"][name]["n"] == counts[name]
        assert r["buckets"][name]["mean_kl"] == pytest.approx(analytic(pa, q), rel=1e-9, abs=1e-15)
        total += counts[name] * analytic(pa, q)
    assert r["buckets"]["all"]["n"] == len(positions)
    assert r["buckets"]["all"]["mean_kl"] == pytest.approx(total / len(positions), rel=1e-9)
    # top-1: 0-7 has a tie 0.4/0.4 listed id 0 first (same); 64-639 has id 1 on top (differs)
    assert r["buckets"]["0-7"]["top1_agree"] == 1.0
    assert r["buckets"]["64-639"]["top1_agree"] == 0.0
    assert r["buckets"]["all"]["top1_agree"] == pytest.approx(8 / 11)
    assert r["first_top1_diff"] == 64


def test_bucket_edges():
    assert [kl.bucket_of(p) for p in (0, 7, 8, 63, 64, 639, 640, 10 ** 6)] == \
        ["0-7", "0-7", "8-63", "8-63", "64-639", "64-639", "640+", "640+"]


def test_unmatched_positions_and_cli_json(tmp_path):
    a = write_dump(tmp_path / "a.jsonl", {0: [(1, 0.9)], 1: [(1, 0.9)], 2: [(2, 0.9)]})
    b = write_dump(tmp_path / "b.jsonl", {1: [(1, 0.9)], 2: [(1, 0.9)], 5: [(1, 0.9)]})
    p = subprocess.run([sys.executable, str(KL_PY), str(a), str(b), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["n_common"] == 2 and r["only_a"] == 1 and r["only_b"] == 1
    assert r["first_top1_diff"] == 2
    p = subprocess.run([sys.executable, str(KL_PY), str(a), str(b)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "first top-1 difference: position 2" in p.stdout


def test_errors(tmp_path):
    a = write_dump(tmp_path / "a.jsonl", {0: [(1, 0.9)]}, n_vocab=10)
    b = write_dump(tmp_path / "b.jsonl", {0: [(1, 0.9)]}, n_vocab=11)
    with pytest.raises(ValueError, match="n_vocab"):
        kl.compare(kl.load_dump(a), kl.load_dump(b))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match="header"):
        kl.load_dump(bad)
    c = write_dump(tmp_path / "c.jsonl", {9: [(1, 0.9)]}, n_vocab=10)
    with pytest.raises(ValueError, match="no position in common"):
        kl.compare(kl.load_dump(a), kl.load_dump(c))
    p = subprocess.run([sys.executable, str(KL_PY), str(a), str(bad)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "kl.py:" in p.stderr
