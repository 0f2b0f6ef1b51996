"""conftest.py - shared pytest setup: makes python/ importable without installing the package,
and gives the paths the tests use (repository root, ../shared data, the ./strata CLI)."""
import os
import sys
from pathlib import Path

import pytest

PY_DIR = Path(__file__).resolve().parent.parent
REPO = PY_DIR.parent
SHARED = REPO.parent / "shared"
if str(PY_DIR) not in sys.path:
    sys.path.insert(0, str(PY_DIR))


def shared_file(rel: str) -> Path:
    """A file under ../shared, or a pytest skip naming what is missing."""
    p = SHARED / rel
    if not p.is_file():
        pytest.skip(f"{p} not present (../shared data is optional)")
    return p


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (how byte-level BPE vocabularies spell bytes)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@pytest.fixture
def tiny_model() -> Path:
    return shared_file("models/strata-tiny-moe-q8_0.gguf")


def serve_health_stop(argv, env=None, cwd=None):
    """A `strata serve` command line (argv, its port 0): started, /health asked (200), stopped with
    SIGINT; its exit status returned."""
    import http.client
    import re
    import signal
    import subprocess
    p = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in p.stderr:
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        assert port, argv
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/health")
        assert c.getresponse().status == 200
        c.close()
    finally:
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=60)
    return rc



# ------------------------------------------------------------------------------------------------
# Watchdog: a test that runs past STRATA_TEST_TIMEOUT seconds (default 600; 0 turns it off) has
# its name and every thread's Python stack written to stderr, and the run ends with status 70, so a
# hang (in C code as much as in Python) fails fast and says where instead of eating CI's time limit.
# A Python timer thread does it (it runs while C code that released the GIL is stuck);
# faulthandler's own C thread is the backstop 30 s later, for a hang that holds the GIL.
# ------------------------------------------------------------------------------------------------
import faulthandler  # noqa: E402
import threading  # noqa: E402

_TEST_TIMEOUT = float(os.environ.get("STRATA_TEST_TIMEOUT", "600"))


def _expire(nodeid: str, capman) -> None:
    if capman is not None:  # give fds 1 and 2 back to the terminal / CI log
        try:
            capman.suspend_global_capture(in_=False)
        except Exception:  # noqa: BLE001 - best effort; the stacks still go to fd 2
            pass
    os.write(2, f"\n\nconftest watchdog: {nodeid} still running after {_TEST_TIMEOUT:.0f} s; "
                f"stacks follow, then exit 70\n".encode())
    faulthandler.dump_traceback(file=2, all_threads=True)
    os._exit(70)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    timer = None
    if _TEST_TIMEOUT > 0:
        timer = threading.Timer(_TEST_TIMEOUT, _expire, args=(item.nodeid, item.config.pluginmanager.getplugin("capturemanager")))
        timer.daemon = True
        timer.start()
        faulthandler.dump_traceback_later(_TEST_TIMEOUT + 30, exit=True)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()
