"""`strata tokenize` on the vocabulary-only files of ../shared/vocab: the ids of llama.cpp's test
vectors (.inp/.out, tokenized without BOS as test-tokenizer-0 does, i.e. --no-special), both
output forms, BOS where the vocabulary adds it, --parse-special, -f, and usage errors.
The binary is $STRATA_CLI, else <repo>/strata."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
VOCAB = Path(os.environ.get("STRATA_SHARED") or REPO.parent / "shared") / "vocab"

if not CLI.exists():
    pytest.skip(f"strata CLI not built at {CLI} (run make, or set STRATA_CLI)",
                allow_module_level=True)


def vocab(name: str) -> Path:
    p = VOCAB / f"ggml-vocab-{name}.gguf"
    if not p.is_file():
        pytest.skip(f"{p} not present (set STRATA_SHARED)")
    return p


def run(*args, check=True):
    r = subprocess.run([str(CLI), "tokenize", *map(str, args)], capture_output=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr.decode()
    return r


def vectors(path: Path):
    raw = path.with_name(path.name + ".inp").read_bytes()
    outs = path.with_name(path.name + ".out").read_text().split("\n")
    ins = raw.split(b"\n__ggml_vocab_test__\n")
    if ins and ins[-1] == b"":
        ins.pop()
    return [(s, [int(x) for x in o.split()]) for s, o in zip(ins, outs)]


@pytest.mark.parametrize("name", ["gpt-2", "qwen2", "llama-bpe", "llama-spm"])
def test_vectors_through_cli(name, tmp_path):
    path = vocab(name)
    cases = vectors(path)
    assert len(cases) > 10
    for i, (text, want) in enumerate(cases[:12]):
        f = tmp_path / f"in{i}.txt"
        f.write_bytes(text)
        got = [int(x) for x in run("-m", path, "-f", f, "--no-special").stdout.split()]
        assert got == want, (name, text)


def test_list_and_bos():
    path = vocab("llama-bpe")
    lines = run("-m", path, "-p", "Hello world").stdout.decode().split()
    assert lines == ["128000", "9906", "1917"]
    assert run("-m", path, "-p", "Hello world", "--list").stdout == b"[128000, 9906, 1917]\n"
    assert run("-m", path, "-p", "Hello world", "--no-special", "--list").stdout == b"[9906, 1917]\n"
    assert run("-m", vocab("gpt-2"), "-p", "Hello world", "--ids").stdout == b"15496\n995\n"


def test_parse_special():
    path = vocab("qwen2")
    plain = run("-m", path, "-p", "<|im_start|>hi", "--list").stdout
    special = run("-m", path, "-p", "<|im_start|>hi", "--parse-special", "--list").stdout
    assert special.startswith(b"[151644, ") and not plain.startswith(b"[151644")


def test_usage_errors(tmp_path):
    path = vocab("gpt-2")
    assert run("-m", path, check=False).returncode == 2
    assert run("-p", "x", check=False).returncode == 2
    assert run("-m", path, "-p", "x", "--bogus", check=False).returncode == 2
    assert run("-m", tmp_path / "missing.gguf", "-p", "x", check=False).returncode == 2
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    r = run("-m", bad, "-p", "x", check=False)
    assert r.returncode == 1 and r.stderr
