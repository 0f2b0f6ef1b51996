"""test_hf_parity_gpu.py - the reference-parity bound on the GPU session (backend "cuda").

The zoo of test_hf_parity_lib.py with head_dim 64 (the GPU attention kernels take 64, 128 and
256; granite gets hidden_size 256 instead), converted to F32 GGUF, with an f32 KV cache:
  * on the CPU session, which runs everywhere (CI included): the same bound as test_hf_parity.py,
    max|strata - hf| / max|hf| < 1e-4 at every position, and the greedy rule, so these shapes are
    known-good references;
  * on the GPU session, where CUDA is usable (it skips elsewhere): the same two checks, the prompt
    also read in batches of 8 (the GPU GEMV's column slices);
  * the MTP drafters of deepseek2 and glm4moe (one MTP layer after the trunk, these shapes)
    against transformers' own decoder layers (test_hf_parity_lib.check_mtp_drafter), on the CPU
    session and, where CUDA is usable, on the GPU session (the trunk's hidden rows from the GPU).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import test_hf_parity_lib as L  # noqa: E402

REL_TOL = 1e-4
N_GEN = 16
PROMPTS = [[5], [211, 17, 17, 305, 42, 0, 99, 128, 64, 3, 250, 250, 12, 77, 190, 5, 31, 8, 160]]
NAMES = list(L.zoo())


def cuda_usable() -> tuple[bool, str]:
    import strata
    cuda = next(b for b in strata.backends() if b["name"] == "cuda")
    return bool(cuda["available"]), cuda["detail"]


@pytest.fixture(scope="module", autouse=True)
def _torch_threads():
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_parity_gpu")


def prepare(name: str, workdir):
    model = L.build_hf(name, seed=zlib.crc32(name.encode()) % 1000, overrides=L.gpu_shape(name))
    d = workdir / name
    if not (d / "hf" / "config.json").exists():
        L.save_hf(model, d / "hf")
    path = d / "f32.gguf"
    if not path.exists():
        L.convert_hf().convert(d / "hf", path, "f32")
    return model, path


def check(name, workdir, backend, n_batch=512):
    model, path = prepare(name, workdir)
    failures = []
    with L.StrataModel(path, n_ctx=128, n_batch=n_batch, backend=backend) as sm:
        for p in PROMPTS:
            ref = L.hf_logits(model, p)
            err = L.rel_err_rows(sm.logits(p), ref)
            if err.max() >= REL_TOL:
                failures.append(f"prompt len {len(p)}: logits rel err {err.max():.3g} at "
                                f"{int(np.argmax(err))}")
                continue
            s_ids, s_rows = sm.greedy(p, N_GEN)
            h_ids, h_rows = L.hf_greedy(model, p, N_GEN)
            msg = L.compare_greedy(s_ids, s_rows, h_ids, h_rows)
            if msg:
                failures.append(f"prompt len {len(p)}: greedy {msg}")
    assert not failures, f"{name} ({backend}, n_batch {n_batch}): " + "; ".join(failures)


@pytest.mark.parametrize("name", NAMES)
def test_cpu_head_dim_64(name, workdir):
    check(name, workdir, "cpu")


@pytest.mark.parametrize("name", NAMES)
def test_gpu(name, workdir):
    ok, why = cuda_usable()
    if not ok:
        pytest.skip(f"CUDA unavailable: {why}")
    check(name, workdir, "cuda")
    check(name, workdir, "cuda", n_batch=8)


MTP = [("deepseek2_v3", False), ("glm4moe", True)]  # (zoo name, the MTP layer's own embedding and head)


@pytest.mark.parametrize("name,own_head", MTP)
def test_mtp_drafter_cpu_head_dim_64(name, own_head, workdir):
    L.check_mtp_drafter(workdir, name, PROMPTS[1], own_head=own_head, overrides=L.gpu_shape(name))


@pytest.mark.parametrize("name,own_head", MTP)
def test_mtp_drafter_gpu(name, own_head, workdir):
    ok, why = cuda_usable()
    if not ok:
        pytest.skip(f"CUDA unavailable: {why}")
    L.check_mtp_drafter(workdir, name, PROMPTS[1], own_head=own_head, backend="cuda",
                        overrides=L.gpu_shape(name))
