"""test_cli_messages.py - what ./strata tells a new user: library errors with the flag of each
parameter they name, the refused requantize naming --allow-requantize, and the one-line reason for
a CPU session and the GPU-only flags it ignores. The binary is $STRATA_CLI, else <repo>/strata."""
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
