"""test_hf_parity.py - THE acceptance test of CPU inference: Strata against transformers.

For every architecture of the zoo in test_hf_parity_lib.py (olmoe, qwen2moe with shared expert and
q/k/v bias, qwen3moe, mixtral, granitemoe with and without shared expert, llama (also with linear
RoPE scaling), qwen2 (also with YaRN), qwen3 with tied embeddings, deepseek2 as DeepSeek-V2-Lite and
as DeepSeek-V3 (MLA, sigmoid + bias + group routing, YaRN), glm4moe as GLM-4.5 and GLM-4.5-Air
(partial NEOX RoPE, q/k/v bias, sigmoid + bias routing, shared expert), gpt_oss (sliding/full
attention with sinks, biased experts with the clamped SwiGLU, YaRN), qwen3next (gated DeltaNet and
gated attention layers, gated shared expert)): a tiny random float32 HF
model (seeded), saved with save_pretrained, converted to an F32 GGUF by tools/convert_hf.py, run by
Strata with an f32 KV cache on a few token-id prompts. Requires
  * logits at every prompt position: max|strata - hf| / max|hf| < 1e-4 (prompt read in one call,
    and again in batches of 8 tokens);
  * 32 greedy tokens, Strata decoding token by token, identical to HF's greedy continuation
    wherever the top-2 logit margin exceeds 1e-3 (at a near tie each side's token must be in the
    other's top-5, and the comparison ends there);
gpt_oss's expert_weights_scale against HF with the experts' down projections scaled; a Q8_0
conversion of one model whose greedy tokens mostly match the F32 file's; for deepseek2 also
batched prompts, verify windows with rejected drafts and a RAM budget, bit for bit; for
deepseek2, glm4moe and qwen3next the MTP layer as a drafter against a transformers-built
reference; for deepseek2 files in the layout before llama.cpp's MLA split (attn_kv_b) against
new-style ones; for qwen3next verify windows with the recurrent state rolled back, a prompt over
several DeltaNet chunks (its logits against HF; the same bits in one call, in any split, token by
token), rollback across a chunk start, the refusals (rollback past the window), and greedy
decoding through windows of MTP drafts (some rejected) equal to plain greedy."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import test_hf_parity_lib as L  # noqa: E402

REL_TOL = 1e-4
N_GEN = 32
PROMPTS = [
    [7],
    [1, 2, 3, 4, 5, 6, 7, 8, 9],
    [211, 17, 17, 305, 42, 0, 99, 128, 64, 3, 250, 250, 12, 77, 190, 5, 31, 8, 160, 271,
     44, 45, 46, 300, 1, 2, 9, 88, 140, 319, 13],
]
NAMES = list(L.zoo())


@pytest.fixture(scope="module", autouse=True)
def _torch_threads():
    n = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("hf_parity")


def prepare(name: str, workdir, outtype: str = "f32"):
    model = L.build_hf(name, seed=zlib.crc32(name.encode()) % 1000)
    d = workdir / name
    if not (d / "hf" / "config.json").exists():
        L.save_hf(model, d / "hf")
    path = d / f"{outtype}.gguf"
    if not path.exists():
        L.convert_hf().convert(d / "hf", path, outtype)
    return model, path


@pytest.mark.parametrize("name", NAMES)
def test_logits_and_greedy(name, workdir):
    model, path = prepare(name, workdir)
    failures = []
    with L.StrataModel(path, n_ctx=256) as sm:
        assert sm.n_vocab == model.config.vocab_size
        for p in PROMPTS:
            ref = L.hf_logits(model, p)
            got = sm.logits(p)
            err = L.rel_err_rows(got, ref)
            if err.max() >= REL_TOL:
                i = int(np.argmax(err))
                failures.append(f"prompt len {len(p)}: logits rel err {err.max():.3g} at position "
                                f"{i} (first position over: {int(np.argmax(err >= REL_TOL))}; "
                                f"per position {np.array2string(err, precision=2)})")
                continue
            s_ids, s_rows = sm.greedy(p, N_GEN)
            h_ids, h_rows = L.hf_greedy(model, p, N_GEN)
            msg = L.compare_greedy(s_ids, s_rows, h_ids, h_rows)
            if msg:
                failures.append(f"prompt len {len(p)}: greedy {msg}")
            # the logits of the steps both sides took must agree as well
            k = next((i for i, (a, b) in enumerate(zip(s_ids, h_ids)) if a != b), N_GEN)
            if k:
                e = L.rel_err_rows(s_rows[:k], h_rows[:k]).max()
                if e >= REL_TOL:
                    failures.append(f"prompt len {len(p)}: decode-step logits rel err {e:.3g}")
    assert not failures, f"{name}: " + "; ".join(failures)


@pytest.mark.parametrize("name", ["olmoe", "qwen2moe", "mixtral", "qwen3", "deepseek2_v3",
                                  "glm4moe"])
def test_batched_prefill(name, workdir):
    """The long prompt read in batches of 8 (n_batch 8) gives the same logits bound."""
    model, path = prepare(name, workdir)
    p = PROMPTS[2]
    ref = L.hf_logits(model, p)
    with L.StrataModel(path, n_ctx=128, n_batch=8) as sm:
        got = sm.logits(p)
        err = L.rel_err_rows(got, ref)
        assert err.max() < REL_TOL, f"{name}: n_batch 8: rel err {err.max():.3g} at {int(np.argmax(err))}"
        # and a prompt fed in two calls continues the cache correctly
        sm.lib.strata_session_reset(sm.session)
        a = sm.decode(p[:13], True)
        b = sm.decode(p[13:], True)
        err2 = L.rel_err_rows(np.concatenate([a, b]).astype(np.float64), ref)
        assert err2.max() < REL_TOL, f"{name}: split decode: rel err {err2.max():.3g}"


def _verify_windows(sm, ids, rows, windows):
    """Verify windows as speculative decoding runs them, on a session that has read the prompt:
    for each (k, wrong) the last token and k drafts of the greedy continuation ids (draft `wrong`
    replaced by another token, or none) in one call; the rows up to the first wrong draft must be
    token-by-token greedy's rows (rows[i] is the row after which ids[i] comes) bit for bit, then
    the cache is truncated after the last accepted one. Returns the index of the last token in."""
    import strata
    lib = sm.lib
    i = 0
    for k, wrong in windows:
        drafts = ids[i + 1:i + 1 + k]
        if wrong is not None and wrong < len(drafts):
            drafts = drafts[:wrong] + [(drafts[wrong] + 1) % sm.n_vocab] + drafts[wrong + 1:]
        n0 = lib.strata_session_n_past(sm.session)
        got = sm.decode([ids[i]] + drafts, True)
        acc = next((j for j, d in enumerate(drafts) if d != ids[i + 1 + j]), len(drafts))
        for j in range(acc + 1):
            assert np.array_equal(got[j], rows[i + 1 + j]), f"window row {j} differs (k {k})"
        strata.check(lib.strata_session_truncate(sm.session, n0 + 1 + acc), "truncate")
        i += 1 + acc
    return i


@pytest.mark.parametrize("name", ["deepseek2_lite", "deepseek2_v3"])
def test_deepseek2_windows_and_placement(name, workdir):
    """deepseek2 on the CPU beyond plain decoding (the files carry no tokenizer: token ids):
    verify windows as speculative decoding runs them (the last token and k drafts in one call,
    every row's logits, then the cache truncated after the first wrong draft) give the rows of
    token-by-token greedy decoding bit for bit, and a RAM budget of a few experts (the others read
    from the file when routed) gives the same logits bit for bit."""
    import strata
    _, path = prepare(name, workdir)
    p = PROMPTS[2]
    with L.StrataModel(path, n_ctx=256) as sm:
        ids, rows = sm.greedy(p, 24)
        lib = sm.lib
        lib.strata_session_reset(sm.session)
        row = sm.decode(p, False)[0]
        assert np.array_equal(row, rows[0])
        _verify_windows(sm, ids, rows, [(3, None), (5, 2), (1, 0), (4, None), (6, 3)])
        full = sm.logits(p)
    one = 3 * 64 * 32 * 4  # an expert's f32 bytes (n_embd 64, n_ff_exp 32)
    with strata.Model(path, n_ctx=256, n_threads=2, kv_type="f32", ram_budget=6 * one) as r:
        got = np.asarray(r.logits(p), dtype=np.float64)
    assert np.array_equal(got, full), f"RAM budget changed the logits: {np.abs(got - full).max()}"


@pytest.mark.parametrize("n_batch", [512, 2])
def test_qwen3next_windows_and_rollback(n_batch, workdir):
    """qwen3next's recurrent (DeltaNet) state under speculative decoding: verify windows (the last
    token and k drafts in one call, cut into batches of n_batch) give the rows of token-by-token
    greedy decoding bit for bit, the state restored after the first wrong draft; then a truncation
    back past the last window is refused with a message, a reset starts over bit for bit, and a
    truncation to the window's start equals decoding up to there."""
    import strata
    _, path = prepare("qwen3next", workdir)
    p = PROMPTS[2]
    with L.StrataModel(path, n_ctx=256, n_batch=n_batch) as sm:
        ids, rows = sm.greedy(p, 48)
        lib = sm.lib
        lib.strata_session_reset(sm.session)
        assert np.array_equal(sm.decode(p, False)[0], rows[0])
        i = _verify_windows(sm, ids, rows, [(3, None), (5, 2), (1, 0), (4, None), (6, 3), (16, 5), (2, 1)])
        n_past = lib.strata_session_n_past(sm.session)
        rc = lib.strata_session_truncate(sm.session, len(p))
        assert rc != 0 and "rolls back only inside the last decode window" in strata._ffi.last_error()
        assert lib.strata_session_n_past(sm.session) == n_past
        # still on track after the refusal: the next row is token-by-token's
        assert np.array_equal(sm.decode([ids[i]], True)[0], rows[i + 1])
        # a truncation to the start of the last call's window: the state there, then decoding on
        strata.check(lib.strata_session_truncate(sm.session, n_past), "truncate")
        assert np.array_equal(sm.decode([ids[i]], True)[0], rows[i + 1])
        # reset: position 0 again
        lib.strata_session_reset(sm.session)
        assert np.array_equal(sm.decode(p, False)[0], rows[0])


# 150 tokens: two full DeltaNet chunks (64 positions each) and an open third
LONG = [int(x) for x in np.random.default_rng(35).integers(0, 320, 150)]


def prepare_slow_decay(workdir):
    """The qwen3next zoo model with A_log lowered by 4 (g ~ -0.01 a step instead of ~ -0.7): the
    DeltaNet state then carries across a whole chunk, so the rows and the start state of a chunk
    64 positions back still reach the logits."""
    model = L.build_hf("qwen3next", seed=zlib.crc32(b"qwen3next") % 1000)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("A_log"):
                p.sub_(4.0)
    d = workdir / "qwen3next_slow_decay"
    path = d / "f32.gguf"
    if not path.exists():
        L.save_hf(model, d / "hf")
        L.convert_hf().convert(d / "hf", path, "f32")
    return model, path


def test_qwen3next_long_prompt_chunks(workdir):
    """qwen3next past its DeltaNet chunks (64 positions; transformers' chunked form for the
    prompt): 150 tokens within the logits bound of HF, and the same logits bit for bit whether the
    prompt comes in one call, in uneven calls (1, 63, 2, 80, ...: chunk starts inside calls and
    between them), token by token, cut by n_batch 7 within each call, or on 1 thread instead of 2.
    The model's decay is slow (prepare_slow_decay): the state from the chunks before matters."""
    model, path = prepare_slow_decay(workdir)
    ref = L.hf_logits(model, LONG)
    with L.StrataModel(path, n_ctx=256) as sm:
        one = sm.logits(LONG)
        err = L.rel_err_rows(one, ref)
        assert err.max() < REL_TOL, f"150 tokens: rel err {err.max():.3g} at {int(np.argmax(err))}"
        for splits in ([1, 63, 2, 80, 4], [64, 64, 22], [65, 1, 62, 22], [1] * len(LONG)):
            sm.lib.strata_session_reset(sm.session)
            rows, at = [], 0
            for n in splits:
                rows.append(sm.decode(LONG[at:at + n], True))
                at += n
            got = np.concatenate(rows).astype(np.float64)
            bad = np.flatnonzero((got != one).any(axis=1))
            assert not len(bad), f"splits {splits[:6]}: rows {bad[:8]} differ from one call"
    with L.StrataModel(path, n_ctx=256, n_batch=7) as sm:
        assert np.array_equal(sm.logits(LONG), one), "n_batch 7 differs from one call"
    with L.StrataModel(path, n_ctx=256, n_threads=1) as sm:
        assert np.array_equal(sm.logits(LONG), one), "1 thread differs from 2"


@pytest.mark.parametrize("start, n, keep", [(60, 17, 62), (47, 17, 50), (60, 17, 64), (63, 17, 63),
                                            (64, 10, 65), (120, 17, 127)])
def test_qwen3next_rollback_across_chunk(start, n, keep, workdir):
    """A verify window over a DeltaNet chunk start (position 64 or 128), its drafts wrong from
    position keep on, truncated back to keep (over the chunk start when keep < 64 or 128): the
    rest of the prompt then gives the logits of never having gone there, bit for bit (slow decay:
    the earliest rows of the chunk reopened still reach them)."""
    import strata
    _, path = prepare_slow_decay(workdir)
    with L.StrataModel(path, n_ctx=256) as sm:
        one = sm.logits(LONG)
        sm.lib.strata_session_reset(sm.session)
        head = sm.decode(LONG[:start], True)
        wrong = LONG[start:keep] + [(t + 1) % sm.n_vocab for t in LONG[keep:start + n]]
        win = sm.decode(wrong, True)
        strata.check(sm.lib.strata_session_truncate(sm.session, keep), "truncate")
        rest = sm.decode(LONG[keep:], True)
        got = np.concatenate([head, win[:keep - start], rest]).astype(np.float64)
        bad = np.flatnonzero((got != one).any(axis=1))
        assert not len(bad), f"window {start}+{n} back to {keep}: rows {bad[:8]} differ"


def test_qwen3next_cuda_not_refused(workdir):
    """qwen3next's CUDA sessions are not refused for the architecture: where no GPU is usable the
    error is the backend's (test_hf_parity_gpu.py runs them where one is)."""
    import strata
    cuda = next(b for b in strata.backends() if b["name"] == "cuda")
    if cuda["available"]:
        pytest.skip("a GPU is usable: test_hf_parity_gpu.py runs qwen3next's CUDA sessions")
    _, path = prepare("qwen3next", workdir)
    with pytest.raises(strata.StrataError) as e:
        L.StrataModel(path, n_ctx=64, backend="cuda")
    assert "qwen3next" not in str(e.value)


def test_gpt_oss_expert_weights_scale(workdir, monkeypatch):
    """gpt-oss honours <arch>.expert_weights_scale (llama.cpp passes it to build_moe_ffn): a file
    with the key at 0.5 matches HF with every expert's down projection and its bias halved (the
    same sum: each expert's output is weighted by its routing weight)."""
    model, _ = prepare("gpt_oss", workdir)
    conv = L.convert_hf()
    orig = conv.write_hparams_gpt_oss

    def with_scale(w, hp):
        orig(w, hp)
        w.add_expert_weights_scale(0.5)
    monkeypatch.setattr(conv, "write_hparams_gpt_oss", with_scale)
    path = workdir / "gpt_oss" / "scale_half.gguf"
    conv.convert(workdir / "gpt_oss" / "hf", path, "f32")
    monkeypatch.undo()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.experts.down_proj.mul_(0.5)
            layer.mlp.experts.down_proj_bias.mul_(0.5)
    try:
        with L.StrataModel(path, n_ctx=256) as sm:
            for p in PROMPTS:
                err = L.rel_err_rows(sm.logits(p), L.hf_logits(model, p))
                assert err.max() < REL_TOL, f"scale 0.5: rel err {err.max():.3g}"
    finally:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.experts.down_proj.mul_(2.0)
                layer.mlp.experts.down_proj_bias.mul_(2.0)


@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0"])
def test_deepseek2_legacy_kv_b(outtype, workdir):
    """A deepseek2 file in the layout before llama.cpp's MLA split (one attn_kv_b per layer, the
    trained key/value lengths, n_head KV heads, no *_mla keys; convert_hf --legacy-kv-b) loads by
    splitting attn_kv_b: f32 / f16 / bf16 give the new-style file's logits bit for bit (the split
    moves elements); q8_0's attn_k_b is dequantized to f32 (the new-style file stores it as f16:
    rows of 16 fit no Q8_0 block), so both are only as close to HF's f32 logits as Q8_0 allows."""
    import gguf
    model, new = prepare("deepseek2_lite", workdir, outtype)
    old = workdir / "deepseek2_lite" / f"legacy_{outtype}.gguf"
    if not old.exists():
        L.convert_hf().convert(workdir / "deepseek2_lite" / "hf", old, outtype, legacy_kv_b=True)
    r = gguf.GGUFReader(old)
    names = {t.name for t in r.tensors}
    keys = {f.name: f for f in r.fields.values()}
    assert "blk.0.attn_kv_b.weight" in names and "blk.0.attn_k_b.weight" not in names
    assert "deepseek2.attention.key_length_mla" not in keys
    assert keys["deepseek2.attention.head_count_kv"].contents() == model.config.num_attention_heads
    with L.StrataModel(new, n_ctx=256) as a, L.StrataModel(old, n_ctx=256) as b:
        for p in PROMPTS:
            la, lb = a.logits(p), b.logits(p)
            if outtype == "q8_0":  # both off HF's f32 logits by Q8_0's error, by about as much
                ref = L.hf_logits(model, p)
                ea, eb = L.rel_err_rows(la, ref).max(), L.rel_err_rows(lb, ref).max()
                assert eb < 1.5 * ea and eb < 0.2, f"q8_0 rel err vs HF: legacy {eb:.3g}, new {ea:.3g}"
            else:
                assert np.array_equal(la, lb), \
                    f"{outtype}: legacy file's logits differ by {np.abs(la - lb).max():.3g}"
        s_ids, _ = b.greedy(PROMPTS[2], 8)
        a_ids, _ = a.greedy(PROMPTS[2], 8)
        if outtype != "q8_0":
            assert s_ids == a_ids


def test_q8_0_greedy_mostly_matches_f32(workdir):
    """Loose: a Q8_0 conversion, teacher-forced on the F32 file's greedy continuation, picks the
    same next token at most positions."""
    name = "qwen3moe"
    _, f32 = prepare(name, workdir, "f32")
    _, q8 = prepare(name, workdir, "q8_0")
    agree, total = 0, 0
    with L.StrataModel(f32, n_ctx=256) as a, L.StrataModel(q8, n_ctx=256) as b:
        for p in PROMPTS[1:]:
            ids, _ = a.greedy(p, N_GEN)
            seq = list(p) + ids
            la = a.logits(seq)[len(p) - 1:-1]
            lb = b.logits(seq)[len(p) - 1:-1]
            agree += int((la.argmax(-1) == lb.argmax(-1)).sum())
            total += len(ids)
            corr = np.corrcoef(la.ravel(), lb.ravel())[0, 1]
            assert corr > 0.99, f"q8_0 vs f32 logits correlation {corr:.4f}"
    assert agree / total >= 0.75, f"q8_0 agrees with f32 on {agree}/{total} greedy positions"


@pytest.mark.parametrize("name", ["olmoe", "granitemoe_shared"])
def test_python_model_logits(name, workdir):
    """strata.Model(...).logits, the package's own entry point, under the same bound."""
    import strata
    if not hasattr(strata, "Model"):
        pytest.skip("strata.Model not available in this build of the package")
    model, path = prepare(name, workdir)
    with strata.Model(path, n_ctx=256, n_threads=2, kv_type="f32") as m:
        for p in PROMPTS:
            got = np.asarray(m.logits(p), dtype=np.float64)
            assert got.shape == (len(p), model.config.vocab_size)
            err = L.rel_err_rows(got, L.hf_logits(model, p))
            assert err.max() < REL_TOL, f"{name}: strata.Model.logits rel err {err.max():.3g}"


# =================================================================================================
# MTP layers as drafters (deepseek2, glm4moe, qwen3next)
# =================================================================================================

def test_deepseek2_mtp_drafter(workdir):
    """DeepSeek-V3's MTP layer (head and embedding shared with the trunk) against a reference
    built from transformers' DeepseekV3 decoder layer."""
    L.check_mtp_drafter(workdir, "deepseek2_v3", PROMPTS[2])


def test_glm4moe_mtp_drafter(workdir):
    """GLM-4.5's MTP layer, with its own embed_tokens and shared_head.head as GLM-4.5's checkpoints
    carry them, against a reference built from transformers' Glm4MoeDecoderLayer."""
    L.check_mtp_drafter(workdir, "glm4moe", PROMPTS[2], own_head=True)


def test_qwen3next_mtp_drafter(workdir):
    """Qwen3-Next's MTP block (mtp.fc, the (1 + w) pre-fc norms and final norm, one gated
    full-attention decoder layer with routed experts and the gated shared expert; head and
    embedding shared with the trunk) against a reference built from transformers'
    Qwen3NextDecoderLayer (layer_type full_attention) and Qwen3NextRMSNorm."""
    L.check_mtp_drafter(workdir, "qwen3next", PROMPTS[2])


@pytest.mark.parametrize("n_batch", [512, 2])
def test_qwen3next_mtp_speculative_greedy(n_batch, workdir):
    """--spec mtp on qwen3next: greedy decoding through verify windows of the MTP drafter's drafts
    gives plain greedy's tokens bit for bit, some drafts accepted and some rejected, so the
    DeltaNet layers' recurrent state is rolled back inside windows (the rows after a rejected
    draft undone; with n_batch 2 each window runs as several forward calls). The file's MTP block
    is made to agree with the trunk at times (mtp_agreeing_file)."""
    path = L.mtp_agreeing_file(workdir, "qwen3next")
    p = PROMPTS[2]
    plain, _ = L.mtp_spec_greedy(path, p, 48, use_mtp=False, n_batch=n_batch)
    spec, (windows, drafted, accepted) = L.mtp_spec_greedy(path, p, 48, use_mtp=True, n_batch=n_batch)
    assert spec == plain
    assert windows > 0 and 0 < accepted < drafted, (windows, drafted, accepted)
