"""test_cli_messages.py - what ./strata tells a new user: library errors with the flag of each
parameter they name, the refused requantize naming --allow-requantize, the one-line reason for a
CPU session and the GPU-only flags it ignores, --seed -1, --stats-json's thread count, no [PROF]
line or blank lines on a plain CPU run, warnings past the training context, each subcommand's own
--help, info's file type name, write failures with their reason, and an over-long chat message
dropped while the chat goes on. The binary is $STRATA_CLI, else <repo>/strata."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
if not CLI.is_file():
    pytest.skip(f"strata CLI not built at {CLI} (run make, or set STRATA_CLI)",
                allow_module_level=True)
TINY = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
if not TINY.is_file():
    pytest.skip(f"{TINY} not present", allow_module_level=True)
GEN = ["-m", TINY, "-p", "Dictionary, n.", "-n", 4, "--temp", 0, "-t", 2]


def run(*args, rc=0, env=None, input=None, cwd=None):
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300,
                       env=env, input=input, cwd=cwd)
    assert p.returncode == rc, (args, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p


def cuda_usable():
    line = [ln for ln in run("--version").stdout.splitlines() if ln.startswith("backend cuda")][0]
    return ", available" in line


# ------------------------------------------------------------------------------------------------
# item 12: library messages name parameters; the CLI adds its flags
# ------------------------------------------------------------------------------------------------

def test_library_error_names_the_flags():
    err = run(*GEN, "--ram-budget", "1M", "--gpu", rc=1).stderr
    assert len(err.splitlines()) == 1, err
    assert "ram_budget (--ram-budget) with a CUDA session needs expert_cache (--expert-cache) or " \
           "n_cpu_moe (--cpu-moe, --n-cpu-moe)" in err, err
    err = run(*GEN, "--cpu", env=dict(os.environ, DEGRADE_TAU="x"), rc=1).stderr
    assert "degrade_tau (--degrade-tau)" in err, err


# ------------------------------------------------------------------------------------------------
# item 8: quantize of an already quantized file
# ------------------------------------------------------------------------------------------------

def test_quantize_requantize_names_the_flag(tmp_path):
    out = tmp_path / "q4_0.gguf"
    err = run("quantize", TINY, out, "--type", "q4_0", rc=1).stderr
    assert len(err.splitlines()) == 1 and "--allow-requantize" in err, err
    assert not out.exists()
    assert f"wrote {out}" in run("quantize", TINY, out, "--type", "q4_0", "-t", 2,
                                 "--allow-requantize").stdout
    assert "--allow-requantize" in run("quantize", "--help").stdout


# ------------------------------------------------------------------------------------------------
# item 9: the CPU fallback says why and what it ignores
# ------------------------------------------------------------------------------------------------

def test_cpu_session_says_why_and_what_it_ignores():
    if cuda_usable():
        pytest.skip("CUDA is usable here: the default session is a GPU one")
    err = run(*GEN, "--cpu-moe", "--expert-cache", 4, "--cpu-moe").stderr.splitlines()
    why = [ln for ln in err if ln.startswith("strata: running on the CPU: ")]
    assert len(why) == 1 and "CUDA" in why[0], err
    ign = [ln for ln in err if "ignored" in ln]
    assert ign == ["strata: warning: ignored on the CPU (GPU sessions only): --cpu-moe, --expert-cache"], err
    # an explicit --cpu needs no reason, but the ignored flags are still named
    err = run(*GEN, "--cpu", "--gpu-prefetch").stderr
    assert "running on the CPU" not in err and "ignored on the CPU (GPU sessions only): --gpu-prefetch" in err
    assert "ignored" not in run(*GEN, "--cpu").stderr
    # an explicit --gpu stays an error
    err = run(*GEN, "--gpu", rc=1).stderr
    assert err.startswith("strata: cannot create a GPU session: ") and len(err.splitlines()) == 1, err


# ------------------------------------------------------------------------------------------------
# item 10
# ------------------------------------------------------------------------------------------------

def test_random_seed():
    args = ["-m", TINY, "-p", "Dictionary, n.", "-n", 12, "--temp", 1.0, "-t", 2, "--cpu"]
    p = run(*args, "--seed", -1)
    m = re.search(r"^strata: --seed -1: seed (\d+)", p.stderr, flags=re.M)
    assert m, p.stderr
    assert run(*args, "--seed", m.group(1)).stdout == p.stdout
    assert "seed" not in run(*args, "--seed", -1, "--quiet").stderr
    assert "bad value '-2' for --seed" in run(*args, "--seed", -2, rc=2).stderr


def test_stats_json_threads_and_seed(tmp_path):
    out = tmp_path / "s.json"
    run("-m", TINY, "-p", "x", "-n", 1, "--cpu", "--stats-json", out)  # no -t: every online CPU
    assert json.loads(out.read_text())["n_threads"] == os.sysconf("SC_NPROCESSORS_ONLN")
    run(*GEN, "--cpu", "--seed", 7, "--stats-json", out)
    s = json.loads(out.read_text())
    assert s["n_threads"] == 2 and s["seed"] == 7


def test_cpu_run_has_no_prof_line_or_blank_lines():
    err = run(*GEN, "--cpu").stderr
    assert "[PROF]" not in err and "" not in err.splitlines(), err
    err = run(*GEN, "--cpu", "--profile").stderr
    prof = [ln for ln in err.splitlines() if ln.startswith("[PROF]")]
    assert len(prof) == 1 and "slot-rows on the CPU" in prof[0], err
    assert "GPU" not in prof[0] and "PCIe" not in prof[0], prof
    if not cuda_usable():  # `strata` with no arguments, here on the CPU
        err = run(cwd=REPO).stderr
        assert "[PROF]" not in err and "" not in err.splitlines(), err


def test_past_the_training_context_warns():
    err = run(*GEN, "--cpu", "-c", 2048).stderr
    assert len([ln for ln in err.splitlines() if "training context" in ln]) == 1, err
    assert "strata: warning: -c 2048 is past the model's training context of 1024" in err
    assert "training context" not in run(*GEN, "--cpu", "-c", 1024).stderr
    err = run("bench", "-m", TINY, "-p", 8, "-n", 2, "-d", 1100, "-r", 1, "-t", 2, "--cpu").stderr
    assert len([ln for ln in err.splitlines() if "training context" in ln]) == 1, err
    assert "-d 1100" in err
    assert "training context" not in run("bench", "-m", TINY, "-p", 8, "-n", 2, "-r", 1, "-t", 2,
                                         "--cpu").stderr


@pytest.mark.parametrize("cmd", ["run", "bench", "perplexity", "tokenize", "info", "quantize"])
def test_each_subcommand_has_its_own_help(cmd):
    top = run("--help").stdout
    for flag in ("--help", "-h"):
        out = run(cmd, flag).stdout
        assert out != top
        first = out.splitlines()[0]
        assert first.startswith(f"usage: strata {cmd} ") or \
            (cmd == "run" and first.startswith("usage: strata [run] ")), first


def test_info_names_the_file_type():
    out = run("info", TINY).stdout
    assert re.search(r"^file type\s+MOSTLY_Q8_0 \(7\)$", out, flags=re.M), out


def test_write_failures_say_why(tmp_path):
    bad = tmp_path / "no" / "such" / "dir" / "f.json"
    for extra in (["--stats-json", bad], ["--logpos", bad]):
        err = run(*GEN, "--cpu", *extra, rc=1).stderr
        assert f"cannot write '{bad}': No such file or directory" in err, err
    err = run("bench", "-m", TINY, "-p", 8, "-n", 0, "-r", 1, "--cpu", "--json", bad, rc=1).stderr
    assert f"cannot write '{bad}': No such file or directory" in err, err
    txt = tmp_path / "t.txt"
    txt.write_text("Dictionary, n. A book containing the words of a language. " * 40)
    err = run("perplexity", "-m", TINY, "-f", txt, "-c", 64, "--cpu", "--kl-base", bad, rc=1).stderr
    assert f"cannot write '{bad}': No such file or directory" in err, err


# ------------------------------------------------------------------------------------------------
# item 11: an over-long chat message
# ------------------------------------------------------------------------------------------------

def test_chat_drops_an_over_long_message():
    args = ["-m", TINY, "-i", "--chat-template", "none", "-n", 6, "--temp", 0, "-c", 64, "-t", 2, "--cpu"]
    want = run(*args, input="Dictionary, n.\nLexicon, n.\n").stdout
    p = run(*args, input="Dictionary, n.\n" + "word " * 100 + "\nLexicon, n.\n")
    assert p.stdout == want  # dropped before anything was read: the next line continues the cache
    too = [ln for ln in p.stderr.splitlines() if "too long" in ln]
    assert len(too) == 1 and "dropped" in too[0], p.stderr
    # the first message too long: dropped, the next one is the first turn
    p = run(*args, input="word " * 100 + "\nDictionary, n.\nLexicon, n.\n")
    assert p.stdout == want and "too long" in p.stderr


# ------------------------------------------------------------------------------------------------
# issue 32: STRATA_VERIFY_DEFER_CPU and _BELOW each say at start-up what they do
# ------------------------------------------------------------------------------------------------

def test_defer_cpu_lines():
    def lines(extra=(), **env):
        e = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_VERIFY_DEFER")}
        e.update(env)
        err = run(*GEN, "--cpu", *extra, env=e).stderr.splitlines()
        return [ln for ln in err if "DEFER" in ln]
    assert lines() == []  # unset: nothing
    assert lines(STRATA_VERIFY_DEFER_CPU="0") == []
    ign = lines(STRATA_VERIFY_DEFER_CPU_BELOW="0.2")
    assert len(ign) == 1 and "=0.2 ignored" in ign[0], ign
    off = lines(STRATA_VERIFY_DEFER_CPU="1")  # a CPU session: nothing to defer, one line says why
    assert len(off) == 1 and "off" in off[0] and "--doorbell" in off[0], off
    bad = lines(STRATA_VERIFY_DEFER_CPU="check", STRATA_VERIFY_DEFER_CPU_BELOW="lots")
    assert len(bad) == 2 and "not a number above 0: 0.1 taken" in bad[0], bad
    # the options: values checked
    for v in ("yes", "2"):
        assert "--defer-cpu" in run(*GEN, "--defer-cpu", v, rc=2).stderr
    for w in ("0", "-1", "x"):
        assert "--defer-cpu-below" in run(*GEN, "--defer-cpu", 1, "--defer-cpu-below", w, rc=2).stderr
