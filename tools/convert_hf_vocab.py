"""convert_hf_vocab.py - the tokenizer part of tools/convert_hf.py.

Owns: writing the checkpoint's tokenizer into the GGUF file (write_vocab) as llama.cpp's
converter does: byte-level BPE from tokenizer.json, with the pre-tokenizer named from the hash
table of llama.cpp's check text or from tokenizer.json's Split regex, and SentencePiece from
tokenizer.model (read without the protobuf package).

What llama.cpp does, and therefore this module does:
  * Tokenizer: byte-level BPE ("gpt2") from tokenizer.json through transformers' AutoTokenizer,
    token types, merges, special ids, add_bos/add_eos, chat template (gguf.SpecialVocab), and
    tokenizer.ggml.pre from the hash of llama.cpp's check text (a small table below), else from
    tokenizer.json's Split regex (GPT-2's: gpt-2; o200k's, gpt-oss's o200k_harmony: gpt-4o). Without
    tokenizer files the file gets tokenizer.ggml.model = "none", as llama.cpp does for
    vocabulary-less models, and a warning.
  * SentencePiece: a tokenizer.model that is a SentencePiece model (llama, Mistral, Mixtral) is
    preferred over tokenizer.json, as llama.cpp's LlamaModel.set_vocab prefers it, unless
    tokenizer.json is byte-level. tokenizer.ggml.model = "llama", pre "default", pieces, scores
    and types as _create_vocab_sentencepiece makes them (normal 1, unknown 2, control 3, unused 5,
    byte 6 from the model; added tokens from added_tokens.json, tokenizer_config.json's
    added_tokens_decoder and tokenizer.json's added_tokens: control 3 when special or
    special-looking, else user_defined 4 with U+2581 written as a space; score -1000), padded with
    [PADi] (unused, -10000) to config.json's vocab_size; special ids and add_bos/add_eos through
    gguf.SpecialVocab, ids it does not find taken from the model's own bos/eos/unk/pad ids; and
    tokenizer.ggml.add_space_prefix = the model's normalizer_spec.add_dummy_prefix. llama.cpp's
    SPM tokenizer neither normalizes (NFKC) nor collapses whitespace, so a model whose normalizer
    does either gets a warning (its tokenization then differs on such text).
"""
from __future__ import annotations

import json
import logging
from hashlib import sha256
from pathlib import Path

import gguf

from convert_hf_base import ConvertError

log = logging.getLogger("convert_hf")

# sha256 of str(tokenizer.encode(CHECK_TEXT)) -> tokenizer.ggml.pre; entries from llama.cpp's
# get_vocab_base_pre (the subset of pre-tokenizers Strata implements).
CHECK_TEXT = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis '
              'concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 '
              'កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български '
              '\'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you '
              'sure? \'M not sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL')
PRE_BY_HASH = {
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",
    "049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754": "deepseek-llm",
    "877081d19cf6996e2c4ff0e1236341e9b7bde288f5311a56a937f0afbbb3aeb5": "deepseek-v3",
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166": "olmo",  # also mpt's
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",
    "9ca2dd618e8afaf09731a7cf6e2105b373ba6a1821559f258b272fe83e6eb902": "glm4",  # GLM-4.5, 4.6
    "cdf5f35325780597efd76153d4d1c16778f766173908894c04afc20108536267": "glm4",  # GLM-4.7-Flash
    "a1336059768a55c99a734006ffb02203cd450fed003e9a71886c88acf24fdbc2": "glm4",  # glm-4-9b-hf
}

# GPT-2's pre-tokenizer regex, as tokenizers' ByteLevel(use_regex=True) applies it: a tokenizer.json
# whose only pre-tokenizer is that gets "gpt-2" when its hash is not in the table.
GPT2_SPLIT = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
# o200k's (GPT-4o, gpt-oss's o200k_harmony) Split regex before a regex-less ByteLevel: "gpt-4o"
O200K_SPLIT = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
               "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
               "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# Llama 3's Split regex, which GLM-4.5's tokenizer.json uses too: "glm4" for glm4moe checkpoints
# (llama.cpp's "llama-bpe" adds a BOS; GLM's has none)
LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
                "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
SPLIT_PRES = {GPT2_SPLIT: "gpt-2", O200K_SPLIT: "gpt-4o"}
# GLM-4.5's special tokens as llama.cpp's Glm4MoeModel.set_vocab sets them (bos [gMASK]; eot
# <|user|> and eom <|observation|>, so both end generation; unk <|endoftext|>)
GLM4_SPECIALS = (("bos", "[gMASK]"), ("eot", "<|user|>"), ("unk", "<|endoftext|>"),
                 ("eom", "<|observation|>"))


def _pre_from_tokenizer_json(model_dir: Path, glm: bool = False) -> str | None:
    """'gpt-2' when tokenizer.json pre-tokenizes exactly like GPT-2 (ByteLevel with its regex);
    'gpt-2' or 'gpt-4o' for a Split by one of SPLIT_PRES's regexes before a regex-less ByteLevel;
    'glm4' for Llama 3's Split there when glm (a glm4moe checkpoint)."""
    p = model_dir / "tokenizer.json"
    if not p.is_file():
        return None
    pre = json.load(open(p, encoding="utf-8")).get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    if pre.get("type") == "Sequence":
        subs = pre.get("pretokenizers") or []
        pres = dict(SPLIT_PRES, **({LLAMA3_SPLIT: "glm4"} if glm else {}))
        if (len(subs) == 2 and subs[0].get("type") == "Split"
                and subs[0].get("pattern", {}).get("Regex") in pres
                and subs[1].get("type") == "ByteLevel" and not subs[1].get("use_regex", True)):
            return pres[subs[0]["pattern"]["Regex"]]
    return None


# ---- SentencePiece (tokenizer.model) ------------------------------------------------------------

def _pb_fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message: ints for varints and fixed
    fields, bytes for length-delimited ones. Enough of the wire format to read a SentencePiece
    ModelProto's specs without the protobuf package."""
    i, n = 0, len(buf)

    def varint():
        nonlocal i
        v = shift = 0
        while True:
            if i >= n:
                raise ValueError("truncated varint")
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < n:
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            yield num, wt, varint()
        elif wt == 1 or wt == 5:
            k = 8 if wt == 1 else 4
            if i + k > n:
                raise ValueError("truncated fixed field")
            yield num, wt, int.from_bytes(buf[i:i + k], "little")
            i += k
        elif wt == 2:
            k = varint()
            if i + k > n:
                raise ValueError("truncated length-delimited field")
            yield num, wt, buf[i:i + k]
            i += k
        else:
            raise ValueError(f"protobuf wire type {wt} not expected")


def spm_normalizer_spec(proto: bytes) -> dict:
    """ModelProto.normalizer_spec (field 3) of a serialized SentencePiece model: name,
    add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces (proto2 defaults when absent);
    plus trainer_spec.model_type (1 unigram, 2 bpe, 3 word, 4 char; 1 when absent)."""
    spec = {"name": None, "add_dummy_prefix": True, "remove_extra_whitespaces": True,
            "escape_whitespaces": True, "model_type": 1}
    for num, wt, val in _pb_fields(proto):
        if num == 3 and wt == 2:
            for f, fwt, v in _pb_fields(val):
                if f == 1 and fwt == 2:
                    spec["name"] = v.decode("utf-8", "replace")
                elif f in (3, 4, 5) and fwt == 0:
                    spec[{3: "add_dummy_prefix", 4: "remove_extra_whitespaces",
                          5: "escape_whitespaces"}[f]] = bool(v)
        elif num == 2 and wt == 2:
            for f, fwt, v in _pb_fields(val):
                if f == 3 and fwt == 0:
                    spec["model_type"] = v
    return spec


def _tokenizer_json(model_dir: Path) -> dict | None:
    p = model_dir / "tokenizer.json"
    return json.load(open(p, encoding="utf-8")) if p.is_file() else None


def _is_byte_level(tj: dict | None) -> bool:
    """tokenizer.json pre-tokenizes or decodes byte-level (a GPT-2 style BPE)."""
    def has(node):
        if not isinstance(node, dict):
            return False
        if node.get("type") == "ByteLevel":
            return True
        return any(has(x) for k in ("pretokenizers", "decoders") for x in node.get(k) or [])
    return tj is not None and (has(tj.get("pre_tokenizer")) or has(tj.get("decoder")))


def load_sentencepiece(model_dir: Path):
    """(SentencePieceProcessor, serialized model) for model_dir/tokenizer.model when it is a
    SentencePiece model that should be converted, else None (no such file; a byte-level
    tokenizer.json next to it; a tokenizer.model in another format, e.g. tiktoken's)."""
    path = model_dir / "tokenizer.model"
    if not path.is_file():
        return None
    if _is_byte_level(_tokenizer_json(model_dir)):
        log.info("tokenizer.json is byte-level BPE: ignoring tokenizer.model")
        return None
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError as e:
        raise ConvertError(f"{path} needs the sentencepiece package ({e}); "
                           "pip install sentencepiece") from e
    proto = path.read_bytes()
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(proto)
        spm_normalizer_spec(proto)
    except (RuntimeError, OSError, ValueError) as e:
        log.warning("%s is not a SentencePiece model (%s)", path, e)
        return None
    return sp, proto


def _looks_special(t: str) -> bool:
    """llama.cpp's does_token_look_special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<｜") and t.endswith("｜>"))
            or (t.startswith("<unused") and t.endswith(">")))


def _added_tokens(model_dir: Path) -> list[tuple[int, str, bool]]:
    """(id, content, special) of the added tokens: tokenizer.json's added_tokens, then
    tokenizer_config.json's added_tokens_decoder (the later source wins for an id)."""
    out: dict[int, tuple[str, bool]] = {}
    tj = _tokenizer_json(model_dir)
    for t in (tj or {}).get("added_tokens") or []:
        out[int(t["id"])] = (t["content"], bool(t.get("special")))
    p = model_dir / "tokenizer_config.json"
    if p.is_file():
        dec = json.load(open(p, encoding="utf-8")).get("added_tokens_decoder") or {}
        for i, t in dec.items():
            out[int(i)] = (t["content"], bool(t.get("special")))
    return [(i, c, s) for i, (c, s) in sorted(out.items())]


def write_vocab_spm(w: gguf.GGUFWriter, model_dir: Path, hp: dict, sp, proto: bytes):
    """tokenizer.ggml.model = "llama" from a SentencePiece model, as llama.cpp's
    _set_vocab_sentencepiece writes it (plus add_space_prefix from the model's normalizer)."""
    TT = gguf.TokenType
    n_sp = sp.vocab_size()
    n_vocab = hp.get("vocab_size") or n_sp
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    scores = [-10000.0] * n_vocab
    types = [TT.UNUSED] * n_vocab
    if n_sp > n_vocab:
        log.warning("ignoring SentencePiece pieces from id %d: vocab_size is %d", n_vocab, n_vocab)
    for i in range(min(n_sp, n_vocab)):
        t = TT.NORMAL
        if sp.IsUnknown(i):
            t = TT.UNKNOWN
        elif sp.IsControl(i):
            t = TT.CONTROL
        elif sp.IsUnused(i):
            t = TT.UNUSED
        elif sp.IsByte(i):
            t = TT.BYTE
        tokens[i] = sp.IdToPiece(i)
        scores[i] = sp.GetScore(i)
        types[i] = t

    p = model_dir / "added_tokens.json"
    if p.is_file():
        for text, i in json.load(open(p, encoding="utf-8")).items():
            if i >= n_vocab:
                log.warning("ignoring added token %r: id %d >= vocab_size %d", text, i, n_vocab)
                continue
            tokens[i], scores[i], types[i] = text, -1000.0, TT.USER_DEFINED
    for i, text, special in _added_tokens(model_dir):
        if i >= n_vocab:
            log.warning("ignoring added token %r: id %d >= vocab_size %d", text, i, n_vocab)
            continue
        if types[i] != TT.UNUSED and tokens[i] != text:
            log.warning("replacing token %d: %r -> %r", i, tokens[i], text)
        if special or _looks_special(text):
            types[i] = TT.CONTROL
        else:
            text = text.replace("\u2581", " ")  # user-defined spaces, pre-normalized
            types[i] = TT.USER_DEFINED
        tokens[i], scores[i] = text, -1000.0

    spec = spm_normalizer_spec(proto)
    if spec["model_type"] != 2:
        log.warning("SentencePiece model_type %d is not BPE: llama.cpp's (and Strata's) SPM "
                    "tokenizer merges by score and may split differently", spec["model_type"])
    if spec["name"] not in (None, "identity") or spec["remove_extra_whitespaces"]:
        log.warning("SentencePiece normalizer %r (remove_extra_whitespaces=%s): llama.cpp's SPM "
                    "tokenizer does not normalize, so such text tokenizes differently",
                    spec["name"], spec["remove_extra_whitespaces"])

    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_add_space_prefix(spec["add_dummy_prefix"])
    sv = gguf.SpecialVocab(model_dir, load_merges=False, n_vocab=n_vocab)
    for typ, i in (("bos", sp.bos_id()), ("eos", sp.eos_id()), ("unk", sp.unk_id()),
                   ("pad", sp.pad_id())):
        if typ not in sv.special_token_ids and 0 <= i < n_vocab:
            sv.special_token_ids[typ] = i
    sv.add_to_gguf(w)


# ---- byte-level BPE (tokenizer.json) -------------------------------------------------------------

def write_vocab(w: gguf.GGUFWriter, model_dir: Path, hp: dict, pre_override: str | None):
    spm = load_sentencepiece(model_dir)
    if spm is not None:
        write_vocab_spm(w, model_dir, hp, *spm)
        return
    if not (model_dir / "tokenizer.json").is_file():
        if (model_dir / "tokenizer.model").is_file():
            log.warning("tokenizer.model is not a SentencePiece model and there is no "
                        "tokenizer.json: writing tokenizer.ggml.model = none")
        else:
            log.warning("no tokenizer files in %s: writing tokenizer.ggml.model = none "
                        "(the file can run token ids only)", model_dir)
        w.add_tokenizer_model("none")
        return
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise ConvertError(f"tokenizer.json present but transformers is missing ({e})") from e
    tok = AutoTokenizer.from_pretrained(model_dir)
    vocab = tok.get_vocab()
    n_vocab = hp.get("vocab_size", len(vocab))
    if max(vocab.values()) >= n_vocab:
        raise ConvertError(f"tokenizer has id {max(vocab.values())} >= vocab_size {n_vocab}")

    glm = (hp.get("architectures") or [None])[0] == "Glm4MoeForCausalLM"
    pre = pre_override
    if pre is None:
        chkhsh = sha256(str(tok.encode(CHECK_TEXT)).encode()).hexdigest()
        pre = PRE_BY_HASH.get(chkhsh)
        if pre is None:
            pre = _pre_from_tokenizer_json(model_dir, glm)
            if pre is None:
                raise ConvertError(f"BPE pre-tokenizer not recognized (check hash {chkhsh}); "
                                   "pass --pre NAME")
            log.warning("pre-tokenizer hash %s not in the table; tokenizer.json says %r", chkhsh, pre)

    reverse = {i: t for t, i in vocab.items()}
    added = tok.get_added_vocab()
    added_dec = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(n_vocab):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added:
            if not added_dec[i].normalized:
                t = tok.decode(tok.encode(t, add_special_tokens=False))
            looks_special = (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
                             or (t.startswith("<|") and t.endswith("|>"))
                             or (t.startswith("<｜") and t.endswith("｜>"))
                             or (t.startswith("<unused") and t.endswith(">")))
            if added_dec[i].special or looks_special:
                types.append(gguf.TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    sv = gguf.SpecialVocab(model_dir, load_merges=True)
    if glm:  # (a type the tokenizer config already sets is kept, as in llama.cpp)
        for typ, text in GLM4_SPECIALS:
            if text in added:
                sv._set_special_token(typ, added[text])
    sv.add_to_gguf(w)
