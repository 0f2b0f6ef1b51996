"""test_docs_commands.py - the command lines of README.md and docs/ run as written (issue 28).

Every `./strata ...`, `python3 -c ...` and `python3 tools/...` line in a code block of README.md,
docs/*.md and models/README.md, and every `./strata ...` command in README.md's tables, runs here
on the CPU and must exit 0. Placeholders are filled in: MODEL.gguf (and FILE, IN, BASE, OTHER)
is the embedded default model, TEXT a prompt or a text file, N a small count, OUT.gguf,
IMATRIX.gguf, F and the .jsonl names files in a scratch folder; `[...]` marks an optional part
and is dropped; `bench` runs one repetition. A new command line in the docs is picked up by this
test without touching it.

The perplexities docs/GENERATION.md and models/README.md quote are re-measured and must match what
the code prints now."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, serve_health_stop

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
MODEL = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "models" / "README.md"]
GPL3 = Path("/usr/share/common-licenses/GPL-3")

MODEL_NAMES = {"MODEL.gguf", "FILE.gguf", "IN.gguf", "BASE.gguf", "OTHER.gguf"}
COUNT_FOR = {"-n": "8", "-t": "2", "-b": "64", "--stride": "256", "-c": "256", "-r": "1"}
PROMPT = "Dictionary, n."


def _is_command(text: str) -> bool:
    t = text.strip()
    return t == "./strata" or t.startswith(("./strata ", "python3 -c ", "python3 tools/"))


def doc_commands(path: Path):
    """(line number, command text) of every command line in path's code blocks, and of the
    `./strata` commands in its tables (README.md)."""
    fenced = False
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            if _is_command(line):
                yield i, line.strip()
        elif path.name == "README.md" and line.startswith("|"):
            for span in re.findall(r"`([^`]+)`", line.split("|")[1]):
                if _is_command(span):
                    yield i, span.strip()


def all_commands():
    out = []
    for doc in DOCS:
        for lineno, cmd in doc_commands(doc):
            out.append(pytest.param(cmd, id=f"{doc.relative_to(REPO)}:{lineno}"))
    return out


def fill_in(cmd: str, scratch: Path) -> list[str]:
    """The command's argv with the placeholders filled in and optional parts dropped."""
    if not cmd.startswith("python3 -c"):
        cmd = re.sub(r"\s*\[[^\]]*\]", "", cmd)  # [optional parts]
    argv = shlex.split(cmd, comments=True)
    out = []
    for k, a in enumerate(argv):
        prev = argv[k - 1] if k else ""
        if k == 0 and a == "./strata":
            a = str(CLI)
        elif k == 0 and a == "python3":
            a = sys.executable
        elif a in MODEL_NAMES:
            a = str(MODEL)
        elif a == "OUT.gguf":
            a = str(scratch / "out.gguf")
        elif a == "IMATRIX.gguf":
            a = str(scratch / "imatrix.gguf")
        elif a == "TEXT":
            a = str(scratch / "text.txt") if prev == "-f" else PROMPT
        elif a == "prompt.txt":
            a = str(scratch / "prompt.txt")
        elif a in ("A.jsonl", "B.jsonl", "base.jsonl", "F") or (prev == "--json" and a == "F"):
            a = str(scratch / a)
        elif a == "N" and prev in COUNT_FOR:
            a = COUNT_FOR[prev]
        elif a == "T" and prev == "--type":
            a = "q4_0"
        elif prev == "-r" and argv[1] == "bench":
            a = "1"  # one timed repetition: the command is checked, not the figures
        elif prev == "-o" and "/" not in a:
            a = str(scratch / a)  # an output file the docs name (README's imatrix.gguf): never in the checkout
        out.append(a)
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("docs")
    (d / "prompt.txt").write_text(PROMPT)
    text = GPL3.read_text() if GPL3.is_file() else (REPO / "docs" / "PERFORMANCE.md").read_text()
    (d / "text.txt").write_text(text)  # enough tokens for perplexity's default context
    (d / "short.txt").write_text(text[:1500])
    if CLI.is_file():  # two logprob dumps for tools/kl.py A.jsonl B.jsonl
        for name, extra in (("A.jsonl", []), ("B.jsonl", ["--kv-type", "f32"])):
            subprocess.run([str(CLI), "-m", str(MODEL), "-f", str(d / "short.txt"), "-n", "0",
                            "-c", "512", "--logpos", str(d / name), *extra],
                           capture_output=True, timeout=300, check=True)
    return d


def run_server(argv, env):
    """A `strata serve` line: started on a free port, /health asked, stopped with SIGINT (exit 0)."""
    if "--port" in argv:
        argv[argv.index("--port") + 1] = "0"
    else:
        argv += ["--port", "0"]
    assert serve_health_stop(argv + ["--cpu", "-t", "2"], env=env, cwd=REPO) == 0, argv


@pytest.mark.parametrize("cmd", all_commands())
def test_doc_command_runs(cmd, scratch):
    if not CLI.is_file():
        pytest.skip(f"strata CLI not built at {CLI}")
    if "/usr/share/common-licenses/GPL-3" in cmd and not GPL3.is_file():
        pytest.skip(f"{GPL3} not on this machine")
    if "--kl " in cmd and not (scratch / "base.jsonl").is_file():
        pytest.skip("the --kl-base line before this one did not run")
    argv = fill_in(cmd, scratch)
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    if len(argv) > 1 and argv[1] == "serve":
        return run_server(argv, env)
    p = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, timeout=600)
    assert p.returncode == 0, (argv, p.stdout.decode()[-1500:], p.stderr.decode()[-1500:])


def test_commands_found():
    """The extraction itself: the lines this test is meant to run are found."""
    cmds = [c.values[0].split("#")[0].strip() for c in all_commands()]
    assert "./strata" in cmds
    assert any(c.startswith("./strata perplexity") for c in cmds)
    assert any(c.startswith("./strata quantize") for c in cmds)
    assert any(c.startswith("python3 -c") for c in cmds)


# ------------------------------------------------------------------------------------------------
# Documented perplexities
# ------------------------------------------------------------------------------------------------

def _final_ppl(text: str) -> tuple[float, float]:
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
    assert m, text[-2000:]
    return float(m.group(1)), float(m.group(2))


def _close(a: float, b: float, rel: float = 2e-4) -> bool:
    return abs(a - b) <= rel * abs(b)


def test_documented_perplexity_matches(tmp_path):
    """docs/GENERATION.md's measured example (GPL-3, -c 512): the final estimate it quotes, the
    f32 KV cache's PPL and the Q4_0 requantization's PPL are what the code prints now (within the
    float parts' arithmetic differences between CPU instruction-set levels)."""
    if not CLI.is_file():
        pytest.skip(f"strata CLI not built at {CLI}")
    if not GPL3.is_file():
        pytest.skip(f"{GPL3} not on this machine")
    doc = (REPO / "docs" / "GENERATION.md").read_text()
    base = ["perplexity", "-f", str(GPL3), "-c", "512"]

    def ppl(model, *extra):
        p = subprocess.run([str(CLI), *base[:1], "-m", str(model), *base[1:], *extra],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        return _final_ppl(p.stdout + p.stderr)

    got, err = ppl(MODEL)
    want, want_err = _final_ppl(doc)
    assert _close(got, want) and _close(err, want_err, 1e-3), (got, err, want, want_err)

    got32, _ = ppl(MODEL, "--kv-type", "f32")
    m = re.search(r"`--kv-type f32`.*?PPL ([0-9.]+)", doc, re.S)
    assert m and _close(got32, float(m.group(1))), (got32, m and m.group(1))

    q4 = tmp_path / "q4_0.gguf"
    p = subprocess.run([str(CLI), "quantize", str(MODEL), str(q4), "--type", "q4_0",
                        "--allow-requantize"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    got4, _ = ppl(q4)
    m = re.search(r"Q4_0 requantization.*?PPL ([0-9.]+)", doc, re.S)
    assert m and _close(got4, float(m.group(1))), (got4, m and m.group(1))

    # models/README.md rounds them to two decimals
    readme = (REPO / "models" / "README.md").read_text()
    m = re.search(r"\(([0-9.]+) vs ([0-9.]+) at -c 512\)", readme)
    assert m and (float(m.group(1)), float(m.group(2))) == (round(got4, 2), round(got, 2)), m
