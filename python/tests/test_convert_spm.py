"""test_convert_spm.py - tools/convert_hf.py on SentencePiece checkpoints (tokenizer.model, as
llama, Mistral and Mixtral ship): a tiny BPE SentencePiece model trained here (byte_fallback, llama's
normalizer settings) next to a tiny random MixtralForCausalLM, converted, and then
  * the tokenizer metadata checked piece by piece against the model (pieces, scores, types, special
    ids, add_bos/add_eos, add_space_prefix, added tokens, [PADi] padding), in both the
    transformers-5 layout (tokenizer.json + tokenizer_config.json) and the older one
    (tokenizer_config.json with added_tokens_decoder, added_tokens.json, no tokenizer.json);
  * Strata's tokenization of the converted file equal to sentencepiece's encode() on a corpus of
    inputs (leading, repeated and trailing spaces, newlines, tabs, digits, accents, scripts the
    model never saw and emoji through byte fallback), and detokenization giving the text back.
The model is BPE-type: llama.cpp's SPM tokenizer (which Strata follows) merges by score, which is
what sentencepiece's BPE does; a unigram model (Viterbi over pieces) splits differently and is not a
target (the converter warns for one)."""
from __future__ import annotations

import io
import json
import random
import shutil

import pytest

spm = pytest.importorskip("sentencepiece")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
import gguf  # noqa: E402
from gguf import TokenType as TT  # noqa: E402

import test_hf_parity_lib as L  # noqa: E402

N_PAD = 5  # config.json vocab_size beyond the pieces and added tokens


def training_corpus(seed: int = 0) -> list[str]:
    """Deterministic English-like lines with punctuation, digits and a little accented, Greek and
    Cyrillic text."""
    r = random.Random(seed)
    words = ("the of and to in is that it was for on are with as his they be at one have this "
             "from or had by word but what some we can out other were all there when up use your "
             "how said an each she which do their time if will way about many then them write "
             "would like so these her long make thing see him two has look more day could go come "
             "did number sound café naïve über déjà straße Ελλάδα привет").split()
    out = []
    for _ in range(3000):
        s = " ".join(r.choice(words) for _ in range(r.randint(2, 14)))
        if r.random() < 0.5:
            s = s.capitalize()
        s += r.choice([".", ",", "!", "?", ";", ":", " -", "..."])
        if r.random() < 0.4:
            s += " " + str(r.randint(0, 10 ** r.randint(1, 6)))
        if r.random() < 0.2:
            s = "(" + s + ")"
        if r.random() < 0.1:
            s = "  " + s
        out.append(s)
    return out


def train_spm(model_type: str = "bpe", vocab_size: int = 400) -> bytes:
    """A serialized SentencePiece model with llama's settings: identity normalizer, whitespace kept,
    dummy prefix, split digits, byte fallback; <unk> 0, <s> 1, </s> 2."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_corpus()), model_writer=buf, vocab_size=vocab_size,
        model_type=model_type, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, split_digits=True,
        allow_whitespace_only_pieces=True, character_coverage=0.9995, num_threads=1,
        minloglevel=2, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    return buf.getvalue()


@pytest.fixture(scope="module")
def proto() -> bytes:
    p = train_spm()
    assert p == train_spm(), "SentencePiece training is not deterministic"
    return p


def save_mixtral(path, vocab_size: int):
    _, kw = L.zoo()["mixtral"]
    cfg = transformers.MixtralConfig(**dict(kw, vocab_size=vocab_size, num_hidden_layers=1),
                                     bos_token_id=1, eos_token_id=2, pad_token_id=None)
    torch.manual_seed(0)
    L.save_hf(transformers.MixtralForCausalLM(cfg).eval(), path)


def kv(path) -> dict:
    r = gguf.GGUFReader(path)
    return {f.name: f.contents() for f in r.fields.values() if not f.name.startswith("GGUF.")}


ADDED_CONTROL = "<|im_start|>"
ADDED_USER = "<tool_call>"


@pytest.fixture(scope="module")
def hf_layout(proto, tmp_path_factory):
    """transformers-5 layout: LlamaTokenizer built from tokenizer.model with two added tokens,
    saved with save_pretrained (tokenizer.json, tokenizer_config.json), and the tokenizer.model
    itself, as real checkpoints ship all three. Returns (dir, converted gguf, sp, hf tokenizer)."""
    pytest.importorskip("google.protobuf")  # transformers reads tokenizer.model through protobuf
    from transformers import AddedToken, LlamaTokenizer
    d = tmp_path_factory.mktemp("spm_hf")
    src = d / "src"
    src.mkdir()
    (src / "tokenizer.model").write_bytes(proto)
    tok = LlamaTokenizer.from_pretrained(str(src), add_bos_token=True, add_eos_token=False)
    tok.add_tokens([AddedToken(ADDED_CONTROL, special=True, normalized=False)])
    tok.add_tokens([AddedToken(ADDED_USER, special=False, normalized=False)])
    hf = d / "hf"
    sp = spm.SentencePieceProcessor(model_proto=proto)
    save_mixtral(hf, len(tok) + N_PAD)
    tok.save_pretrained(str(hf))
    shutil.copy(src / "tokenizer.model", hf / "tokenizer.model")
    assert (hf / "tokenizer.json").is_file()
    out = L.convert_hf().convert(hf, d / "spm.gguf", "f32")
    return hf, out, sp, tok


def check_pieces(got: dict, sp, n_vocab: int):
    """Pieces, scores and types of the model. <unk>, <s> and </s> are added tokens (special) in
    both layouts, so, as llama.cpp's converter does, they come out CONTROL with score -1000."""
    toks, scores, types = (got["tokenizer.ggml.tokens"], got["tokenizer.ggml.scores"],
                           got["tokenizer.ggml.token_type"])
    assert len(toks) == len(scores) == len(types) == n_vocab
    n_byte = 0
    for i in range(sp.vocab_size()):
        assert toks[i] == sp.id_to_piece(i), i
        if i < 3:
            assert types[i] == TT.CONTROL and scores[i] == -1000.0, i
            continue
        assert scores[i] == pytest.approx(sp.get_score(i)), i
        want = (TT.UNKNOWN if sp.is_unknown(i) else TT.CONTROL if sp.is_control(i)
                else TT.UNUSED if sp.is_unused(i) else TT.BYTE if sp.is_byte(i) else TT.NORMAL)
        assert types[i] == want, (i, toks[i])
        n_byte += types[i] == TT.BYTE
    assert n_byte == 256
    assert [sp.id_to_piece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"]
    assert toks[3] == "<0x00>" and toks[3 + 255] == "<0xFF>"
    for i in range(n_vocab - N_PAD, n_vocab):
        assert toks[i] == f"[PAD{i}]" and types[i] == TT.UNUSED and scores[i] == -10000.0


def test_spm_metadata_hf_layout(hf_layout):
    hf, out, sp, tok = hf_layout
    got = kv(out)
    n_vocab = json.loads((hf / "config.json").read_text())["vocab_size"]
    assert got["tokenizer.ggml.model"] == "llama"
    assert got["tokenizer.ggml.pre"] == "default"
    assert "tokenizer.ggml.merges" not in got
    check_pieces(got, sp, n_vocab)
    toks, types, scores = (got["tokenizer.ggml.tokens"], got["tokenizer.ggml.token_type"],
                           got["tokenizer.ggml.scores"])
    ic, iu = tok.convert_tokens_to_ids([ADDED_CONTROL, ADDED_USER])
    assert (ic, iu) == (sp.vocab_size(), sp.vocab_size() + 1)
    assert toks[ic] == ADDED_CONTROL and types[ic] == TT.CONTROL and scores[ic] == -1000.0
    assert toks[iu] == ADDED_USER and types[iu] == TT.USER_DEFINED and scores[iu] == -1000.0
    assert got["tokenizer.ggml.bos_token_id"] == 1
    assert got["tokenizer.ggml.eos_token_id"] == 2
    assert got["tokenizer.ggml.unknown_token_id"] == 0
    assert got["tokenizer.ggml.add_bos_token"] is True
    assert got["tokenizer.ggml.add_space_prefix"] is True


def test_spm_metadata_legacy_layout(proto, tmp_path):
    """tokenizer.model + tokenizer_config.json (add_bos/add_eos, added_tokens_decoder) +
    added_tokens.json, no tokenizer.json (llama-2 / Mistral-v0.1 era checkpoints)."""
    sp = spm.SentencePieceProcessor(model_proto=proto)
    n = sp.vocab_size()
    hf = tmp_path / "hf"
    save_mixtral(hf, n + 3 + N_PAD)
    (hf / "tokenizer.model").write_bytes(proto)
    dec = {str(i): {"content": c, "special": s, "lstrip": False, "rstrip": False,
                    "normalized": False, "single_word": False}
           for i, c, s in [(0, "<unk>", True), (1, "<s>", True), (2, "</s>", True),
                           (n, "[INST]", True), (n + 1, "<|tool|>", False)]}
    (hf / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": True, "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer", "added_tokens_decoder": dec}))
    (hf / "added_tokens.json").write_text(json.dumps({"[INST]": n, "<|tool|>": n + 1,
                                                       "\u2581my\u2581word": n + 2}))
    out = L.convert_hf().convert(hf, tmp_path / "legacy.gguf", "f32")
    got = kv(out)
    assert got["tokenizer.ggml.model"] == "llama"
    check_pieces(got, sp, n + 3 + N_PAD)
    toks, types = got["tokenizer.ggml.tokens"], got["tokenizer.ggml.token_type"]
    assert (toks[n], types[n]) == ("[INST]", TT.CONTROL)        # special
    assert (toks[n + 1], types[n + 1]) == ("<|tool|>", TT.CONTROL)  # looks special
    # added_tokens.json: user-defined, kept as written (llama.cpp pre-normalizes only the others)
    assert (toks[n + 2], types[n + 2]) == ("\u2581my\u2581word", TT.USER_DEFINED)
    assert got["tokenizer.ggml.add_bos_token"] is True
    assert got["tokenizer.ggml.add_eos_token"] is True
    assert got["tokenizer.ggml.bos_token_id"] == 1 and got["tokenizer.ggml.eos_token_id"] == 2

    import strata
    with strata.Model(out, vocab_only=True) as m:
        ids = m.tokenize("Hello", add_special=True)
        assert ids == [1] + sp.encode("Hello") + [2]
        assert m.tokenize("[INST]", add_special=False, parse_special=True) == [n]


def test_spm_normalizer_spec(proto):
    conv = L.convert_hf()
    spec = conv.spm_normalizer_spec(proto)
    assert spec == {"name": "identity", "add_dummy_prefix": True, "remove_extra_whitespaces": False,
                    "escape_whitespaces": True, "model_type": 2}
    pb2 = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")
    m = pb2.ModelProto()
    m.ParseFromString(proto)
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.name = "nmt_nfkc"
    m.normalizer_spec.remove_extra_whitespaces = True
    m.trainer_spec.model_type = pb2.TrainerSpec.UNIGRAM
    spec = conv.spm_normalizer_spec(m.SerializeToString())
    assert spec == {"name": "nmt_nfkc", "add_dummy_prefix": False, "remove_extra_whitespaces": True,
                    "escape_whitespaces": True, "model_type": 1}


TEXTS = [
    "Hello world", " Hello world", "  two leading spaces", "trailing  ", "a  b   c    d",
    " ", "   ", "\n", "line one\nline two\n\n", "\n leading newline", "\ttab\tand  tab",
    "12345 67.89 0 1000000", "3.14159, 2.71828; 1/137", "The café's naïve über-ålready.",
    "Ελλάδα и привет!", "東京 タワー", "emoji 🚀🦙 done", "😶\u200d🌫️", "🦙", "¿Qué? ¡Sí!",
    "\u00a0nbsp and zero\u200bwidth", "the of and to in is that it was for on are with",
    "x" * 64, "(the) [of] {and} <to> \"said\" 'one'", "don't can't won't", "a\r\nb",
    "Number 7: sound, day... look - more!", "\u2581already escaped", "",
]


def test_spm_tokenize_matches_sentencepiece(hf_layout):
    hf, out, sp, tok = hf_layout
    import strata
    with strata.Model(out, vocab_only=True) as m:
        assert m.n_vocab == len(tok) + N_PAD
        for t in TEXTS + training_corpus(1)[:200]:
            ids = m.tokenize(t, add_special=False)
            assert ids == sp.encode(t), t
            assert m.tokenize(t, add_special=True) == [1] + ids, t
            # detokenization: the text back (the dummy prefix stripped), as sentencepiece decodes;
            # a literal U+2581 in the text is a space to SentencePiece and comes back as one
            back = t.replace("\u2581", " ")
            assert m.detokenize(ids, strip_leading_space=True) == sp.decode(ids) == back, t
            assert m.detokenize(ids) == (" " + back if t else ""), t


def test_spm_added_tokens_tokenize(hf_layout):
    hf, out, sp, tok = hf_layout
    ic, iu = tok.convert_tokens_to_ids([ADDED_CONTROL, ADDED_USER])
    import strata
    with strata.Model(out, vocab_only=True) as m:
        assert m.tokenize(ADDED_CONTROL, add_special=False, parse_special=True) == [ic]
        assert ic not in m.tokenize(ADDED_CONTROL, add_special=False, parse_special=False)
        assert m.tokenize(ADDED_USER, add_special=False) == [iu]  # user-defined: always matched
        assert m.detokenize([ic], special=True) == ADDED_CONTROL
        assert m.detokenize([iu]) == ADDED_USER


def test_tokenizer_model_not_used(proto, tmp_path):
    """A tokenizer.model that is not SentencePiece (tiktoken's text format) is skipped: 'none'
    without tokenizer.json; a byte-level tokenizer.json next to a SentencePiece model wins."""
    conv = L.convert_hf()
    hf = tmp_path / "hf"
    save_mixtral(hf, 320)
    (hf / "tokenizer.model").write_text("IQ== 0\nIg== 1\n")
    assert kv(conv.convert(hf, tmp_path / "a.gguf", "f32"))["tokenizer.ggml.model"] == "none"
    import test_convert_hf as T
    T.make_tokenizer_dir(hf)
    (hf / "tokenizer.model").write_bytes(proto)
    got = kv(conv.convert(hf, tmp_path / "b.gguf", "f32"))
    assert got["tokenizer.ggml.model"] == "gpt2" and got["tokenizer.ggml.pre"] == "gpt-2"
