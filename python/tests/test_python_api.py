"""test_python_api.py - the Python API's contract at its edges (issue 28): objects that outlive
their model, argument types and ranges checked at the call, stop strings, and a plain
(non-editable) `pip install` of the package."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import strata
from conftest import REPO

MODEL = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
PROMPT = "Dictionary, n."


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_child(code: str) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (a crash there is a failed test, not a dead pytest)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_child_env(),
                          capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def model():
    m = strata.Model(MODEL, n_ctx=256, n_threads=2)
    yield m
    m.close()


# ------------------------------------------------------------------------------------------------
# 1. A generator outliving its model
# ------------------------------------------------------------------------------------------------

def test_generator_outliving_with_block_raises():
    """The issue's crash: leaving the with block with a half-consumed generator freed the C model
    under the session (SIGSEGV). Now the session keeps the library's model alive and the
    generator raises ValueError at its next step."""
    p = _run_child(f"""
        import strata
        with strata.Model({str(MODEL)!r}) as m:
            g = m.generate("Dictionary, n.", max_tokens=8); next(g)
        try:
            list(g)
        except ValueError as e:
            print("raised:", e)
    """)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert b"raised:" in p.stdout and b"closed" in p.stdout


def test_close_with_live_generator_then_gc():
    """m.close() with a half-consumed generator: the generator raises; dropping it frees the
    session, then the model (no crash at garbage collection either)."""
    p = _run_child(f"""
        import gc, strata
        m = strata.Model({str(MODEL)!r}, n_ctx=128)
        g = m.generate("Dictionary, n.", max_tokens=16, temperature=0)
        next(g); next(g)
        m.close()
        try:
            next(g)
            print("no error")
        except ValueError:
            print("raised")
        del g, m
        gc.collect()
        print("done")
    """)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    assert p.stdout.split() == [b"raised", b"done"]


def test_generator_unstarted_after_close_raises():
    m = strata.Model(MODEL, n_ctx=128, n_threads=2)
    g = m.generate(PROMPT, max_tokens=4)
    m.close()
    with pytest.raises(ValueError, match="closed"):
        next(g)
    with pytest.raises(ValueError, match="closed"):
        m.tokenize("x")


def test_generator_keeps_model_object_alive():
    """Only a generator refers to the Model: it still runs to the end with the right text."""
    want = strata.Model(MODEL, n_ctx=128, n_threads=2).generate_text(PROMPT, 12, temperature=0)
    g = strata.Model(MODEL, n_ctx=128, n_threads=2).generate(PROMPT, 12, temperature=0)
    assert "".join(t for _, t in g) == want


# ------------------------------------------------------------------------------------------------
# 2-3. Text is str, ids are a sequence of ints, anything else is a TypeError
# ------------------------------------------------------------------------------------------------

def test_prompt_types(model):
    ids = model.tokenize(PROMPT)
    text = model.generate_text(PROMPT, 6, temperature=0)
    assert model.generate_text(ids, 6, temperature=0) == text
    assert model.generate_text(tuple(ids), 6, temperature=0) == text
    assert model.generate_text(np.array(ids, dtype=np.int32), 6, temperature=0) == text
    for bad in (PROMPT.encode(), bytearray(PROMPT.encode()), 123, 1.5, None, [1, "2"], [1.0],
                [True]):
        with pytest.raises(TypeError):
            model.generate(bad, max_tokens=4)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.generate([model.n_vocab], max_tokens=4)
    with pytest.raises(ValueError):
        model.generate([-1], max_tokens=4)


def test_tokenize_types(model):
    assert model.tokenize("abc") == model.tokenize(str("abc"))
    for bad in (b"abc", bytearray(b"abc"), 123, None, ["abc"]):
        with pytest.raises(TypeError):
            model.tokenize(bad)
    with pytest.raises(TypeError):
        model.detokenize("abc")
    with pytest.raises(TypeError):
        model.logits(b"abc")


# ------------------------------------------------------------------------------------------------
# 4. stop="ab" is one stop string
# ------------------------------------------------------------------------------------------------

def test_stop_plain_string_is_one_stop(model):
    full = model.generate_text(PROMPT, 40, temperature=0, ignore_eos=True)
    # a two-character stop whose first character shows up earlier on its own: read as two stops
    # (the old behaviour) it would cut the text there, before the pair
    k = next(i for i in range(10, len(full) - 2)
             if full.find(full[i:i + 2]) == i and full.find(full[i]) < i)
    two = full[k:k + 2]
    cut = full.find(two)
    assert cut > 0
    got = model.generate_text(PROMPT, 40, temperature=0, ignore_eos=True, stop=two)
    assert got == full[:cut] and model.last_stop == "stop"
    # a list of one string does the same; a character of it alone stops earlier or elsewhere
    assert model.generate_text(PROMPT, 40, temperature=0, ignore_eos=True, stop=[two]) == got
    assert model.generate_text(PROMPT, 40, temperature=0, ignore_eos=True, stop=None) == full
    for bad in (b"ab", 5, ["a", 5]):
        with pytest.raises(TypeError):
            model.generate(PROMPT, 4, stop=bad)


# ------------------------------------------------------------------------------------------------
# 5. Values checked at the call
# ------------------------------------------------------------------------------------------------

def test_max_tokens(model):
    with pytest.raises(ValueError):
        model.generate(PROMPT, max_tokens=-5)
    with pytest.raises(TypeError):
        model.generate(PROMPT, max_tokens="8")
    assert [t for t, _ in model.generate(PROMPT, max_tokens=0)] == []
    m = strata.Model(MODEL, n_ctx=24, n_threads=2)
    n_prompt = len(m.tokenize(PROMPT))
    toks = list(m.generate(PROMPT, max_tokens=None, temperature=0, ignore_eos=True))
    assert m.last_stop == "context" and n_prompt + len(toks) == 25
    m.close()


def test_model_arguments(tmp_path):
    for bad in (123, None, 1.5, [str(MODEL)]):
        with pytest.raises(TypeError):
            strata.Model(bad)
    with pytest.raises(FileNotFoundError) as e:
        strata.Model(tmp_path / "missing.gguf")
    assert isinstance(e.value, strata.StrataError) and "missing.gguf" in str(e.value)
    with pytest.raises(FileNotFoundError):
        strata.GGUF(tmp_path / "missing.gguf")
    with pytest.raises(TypeError):
        strata.GGUF(42)
    for kw in ({"n_ctx": -1}, {"n_threads": -3}, {"n_batch": -1}, {"ram_budget": -1},
               {"degrade_tau": 2.0}, {"n_cpu_moe": -2}, {"expert_cache": -2}):
        with pytest.raises(ValueError):
            strata.Model(MODEL, **kw)
    for kw in ({"n_ctx": "64"}, {"n_threads": 2.0}, {"n_ctx": True}):
        with pytest.raises(TypeError):
            strata.Model(MODEL, **kw)


def test_invalid_session_option_fails_at_model():
    """ram_budget=1 cannot hold one expert: refused when the Model is made, not at the first
    generate()."""
    with pytest.raises(strata.StrataError, match="ram_budget"):
        strata.Model(MODEL, n_ctx=64, ram_budget=1)
    with pytest.raises(strata.StrataError):
        strata.Model(MODEL, n_ctx=64, degrade_eval=True, backend="cuda")
    m = strata.Model(MODEL, n_ctx=64, ram_budget=64 << 20)  # enough: accepted
    m.close()


def test_memory_error_class():
    assert issubclass(strata.StrataMemoryError, MemoryError)
    assert issubclass(strata.StrataMemoryError, strata.StrataError)
    with pytest.raises(MemoryError):
        strata.check(strata.lib.STRATA_ERR_NOMEM, "test")


# ------------------------------------------------------------------------------------------------
# 7. pip install python/ (not -e) gives a working package
# ------------------------------------------------------------------------------------------------

def test_plain_pip_install(tmp_path):
    """`pip install python/` copies the headers and libstrata.so into the package, which then imports
    and runs with no environment variables and no repository on the path."""
    lib = Path(os.environ.get("STRATA_LIB", REPO / "libstrata.so"))
    if not lib.is_file():
        pytest.skip(f"{lib} not built")
    try:
        import setuptools  # noqa: F401  (the build backend, without network access)
    except ImportError:
        pytest.skip("setuptools not installed")
    src = tmp_path / "src"
    shutil.copytree(REPO / "python", src / "python", ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", "libstrata.so", "*.h"))
    shutil.copytree(REPO / "c" / "include", src / "c" / "include")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_") and k != "PYTHONPATH"}
    env["STRATA_BUILD_LIB"] = str(lib)  # which library to package (default: <repo>/libstrata.so)
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-build-isolation", "--target", str(target), str(src / "python")],
                       env=env, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    env["PYTHONPATH"] = str(target)
    code = (f"import strata; m = strata.Model({str(MODEL)!r}, n_ctx=64); "
            "print(strata.LIBRARY_PATH); print(m.generate_text('Dictionary, n.', 4, temperature=0))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    assert str(target) in p.stdout.decode().splitlines()[0]


def test_pip_install_without_library_refuses(tmp_path):
    """Without a built libstrata.so the install stops with a message saying to run make."""
    try:
        import setuptools  # noqa: F401
    except ImportError:
        pytest.skip("setuptools not installed")
    src = tmp_path / "src"
    shutil.copytree(REPO / "python", src / "python", ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", "libstrata.so", "*.h"))
    shutil.copytree(REPO / "c" / "include", src / "c" / "include")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--target", str(tmp_path / "site"), str(src / "python")],
                       env=env, capture_output=True, timeout=300)
    assert p.returncode != 0
    assert b"make" in p.stdout + p.stderr and b"libstrata.so" in p.stdout + p.stderr
