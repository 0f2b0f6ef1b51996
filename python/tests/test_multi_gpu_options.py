"""test_multi_gpu_options.py - the layer split's options (issue 36, docs/MULTI_GPU.md) at the
Python API and the command line: types and shapes refused at the call, the library's checks
(stage counts summing to the layer count, devices that exist, CUDA sessions only, the options that
need two real devices or NCCL, the placement options a split does not take yet, a stage's expert
cache without stage 0's and the per-stage cache fields), each message
naming its option and, on the command line, its flag. Runs without a GPU: every case here is
refused before a session exists (on a one-GPU machine a split over device 1 is refused too). The
binary is $STRATA_CLI, else <repo>/strata."""
import os
import subprocess
from pathlib import Path

import pytest

import strata
from strata._ffi import ffi, lib
from conftest import REPO

TINY = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
if not TINY.is_file():
    pytest.skip(f"{TINY} not present", allow_module_level=True)
CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))


def n_devices() -> int:
    n = ffi.new("int32_t *")
    assert lib.strata_cuda_device_count(n) == 0
    return int(n[0])


def n_layer() -> int:
    m = strata.Model(TINY)
    try:
        return m.info["n_layer"]
    finally:
        m.close()


def refused(match: str, **kw):
    with pytest.raises(strata.StrataError, match=match):
        strata.Model(TINY, **kw).close()


def test_defaults_ask_no_split():
    sp = lib.strata_session_default_params()
    assert sp.split.n_stages == 0 and sp.split.auto_layers == 0 and sp.split.peer_device == -1
    assert [sp.split.device[i] for i in range(8)] == list(range(8))  # one stage per device
    strata.Model(TINY).close()  # no split option: no device is asked, nothing refused


def test_python_types_and_shapes():
    with pytest.raises(ValueError, match="layer_split"):
        strata.Model(TINY, layer_split="even")
    with pytest.raises(TypeError):
        strata.Model(TINY, layer_split=[2, "2"])
    with pytest.raises(ValueError, match=">= 1"):
        strata.Model(TINY, layer_split=[4, 0])
    with pytest.raises(ValueError, match="1..8 stages"):
        strata.Model(TINY, layer_split=[1] * 9)
    with pytest.raises(ValueError, match="names 2 stages, split_device 3"):
        strata.Model(TINY, layer_split=[2, 2], split_device=[0, 0, 0])
    with pytest.raises(ValueError, match=">= -1"):
        strata.Model(TINY, peer_device=-2)


def test_expert_cache_devices_as_fields():
    from strata._args import split_args
    got = split_args([3, 3, 2, 2], None, False, -1, ["auto", 0, 48])
    assert got["expert_cache"] == [0, -1, 0, 48]  # stage 0's is expert_cache; 0: the default
    with pytest.raises(ValueError, match="stages 1..7"):
        split_args(None, None, False, -1, [8] * 8)
    with pytest.raises(ValueError, match=">= -1"):
        split_args(None, None, False, -1, [-2])


def test_split_is_for_cuda_sessions():
    L = n_layer()
    refused("layer_split is for CUDA sessions", layer_split=[L - 1, 1])
    refused("layer_split is for CUDA sessions", layer_split="auto")


def test_counts_must_sum_to_the_layer_count():
    L = n_layer()
    if n_devices() == 0:
        refused("no CUDA device here", backend="cuda", layer_split=[L, 1], split_device=[0, 0])
        return
    refused(f"layer_split sums to {L + 1} layers; the model has {L}", backend="cuda",
            layer_split=[L, 1], split_device=[0, 0])
    refused(f"{L + 1} stages for {L} layers", backend="cuda", layer_split="auto",
            split_device=[0] * (L + 1) if L + 1 <= 8 else [0] * 8)


def test_devices_must_exist():
    L, n = n_layer(), n_devices()
    if n == 0:
        refused("no CUDA device here", backend="cuda", layer_split=[L - 1, 1])
        return
    refused(f"split_device {n} of stage 1: no such CUDA device", backend="cuda",
            layer_split=[L - 1, 1], split_device=[0, n])
    if n == 1:  # the default devices are 0, 1: a second card is needed
        refused("split_device 1 of stage 1: no such CUDA device .this machine has 1", backend="cuda",
                layer_split=[L - 1, 1])


def test_options_that_need_two_devices_or_nccl():
    L, n = n_layer(), n_devices()
    refused("pipeline_windows needs a layer split", pipeline_windows=True)
    refused("peer_device 99: no such CUDA device", peer_device=99)
    refused("expert_cache_device1: the split has 0 stages", expert_cache_devices=[8])
    if n >= 1:
        refused("pipeline_windows needs stages on two distinct CUDA devices", backend="cuda",
                layer_split=[L - 1, 1], split_device=[0, 0], pipeline_windows=True)
        refused("peer_device needs NCCL|peer_device .experts on another device", backend="cuda",
                peer_device=0)
        refused("expert_cache_device1 needs expert_cache", backend="cuda",
                layer_split=[L - 1, 1], split_device=[0, 0], expert_cache_devices=[8])
        refused("layer_split with doorbell: not built yet", backend="cuda", layer_split=[L - 1, 1],
                split_device=[0, 0], expert_cache=64, doorbell=True)


def run_cli(*args):
    return subprocess.run([str(CLI), "run", "-m", str(TINY), "-p", "hi", "-n", "1", "-q", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not CLI.is_file(), reason="strata CLI not built (set STRATA_CLI)")
def test_cli_usage_errors():
    cases = [
        (["--layer-split", "2,x"], "bad value '2,x' for --layer-split"),
        (["--layer-split", "2,2", "--split-device", "0,0,0"], "--layer-split names 2 stages, --split-device 3"),
        (["--split-device", "0,0,0", "--layer-split", "2,2"], "--layer-split names 2 stages, --split-device 3"),
        (["--split", "even"], "bad value 'even' for --split"),
        (["--layer-split", "2,2", "--split", "auto"], "give one of them"),
        (["--layer-split", ",".join(["1"] * 9)], "more than 8 stages"),
        (["--peer-device", "-2"], "bad value '-2' for --peer-device"),
    ]
    for args, msg in cases:
        p = run_cli(*args)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert msg in p.stderr, (args, p.stderr)


@pytest.mark.skipif(not CLI.is_file(), reason="strata CLI not built (set STRATA_CLI)")
def test_cli_library_checks_name_flags():
    L = n_layer()
    p = run_cli("--cpu", "--layer-split", f"{L - 1},1")
    assert p.returncode != 0 and "layer_split (--layer-split) is for CUDA sessions" in p.stderr, p.stderr
    p = run_cli("--pipeline-windows")
    assert p.returncode != 0 and "pipeline_windows (--pipeline-windows) needs a layer split" in p.stderr, p.stderr
    p = run_cli("--expert-cache-device1", "8")
    assert p.returncode != 0 and "expert_cache_device1 (--expert-cache-device1)" in p.stderr, p.stderr
    p = run_cli("--gpu", "--layer-split", f"{L},1", "--split-device", "0,0")
    assert p.returncode != 0, p.stderr
    want = "no CUDA device here" if n_devices() == 0 else f"sums to {L + 1} layers; the model has {L}"
    assert want in p.stderr or "CUDA" in p.stderr, p.stderr


@pytest.mark.skipif(not CLI.is_file(), reason="strata CLI not built (set STRATA_CLI)")
def test_cli_help_lists_the_split_options():
    p = subprocess.run([str(CLI), "run", "--help"], capture_output=True, text=True, timeout=60)
    text = p.stdout + p.stderr
    for flag in ("--layer-split", "--split auto", "--split-device", "--pipeline-windows", "--peer-device",
                 "--expert-cache-deviceI"):
        assert flag in text, flag
