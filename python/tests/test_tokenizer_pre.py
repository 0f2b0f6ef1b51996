"""Pre-tokenizers without llama.cpp test vectors, checked against an independent reference.

For each tokenizer.ggml.pre value, a vocabulary-only GGUF is written (the tokens and merges of
../shared/vocab/ggml-vocab-{qwen2,gpt-2}.gguf with that pre value) and Strata's token ids for a
corpus of tricky inputs are compared with a reference made of
  - the PyPI `regex` module running llama.cpp's exact pattern lists (copied below as data from
    llama.cpp's src/llama-vocab.cpp), applied as llama.cpp's unicode_regex_split applies them
    (each pattern cuts every piece into its matches and the unmatched stretches between them),
  - a plain byte-level BPE in Python (GPT-2 bytes_to_unicode, then repeatedly merge the adjacent
    pair with the lowest merge rank, leftmost on ties; llama3-style pre-tokenizers take a piece
    that is itself a token whole).
An unknown pre value must fail to load with a message naming it.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

regex = pytest.importorskip("regex")
gguf = pytest.importorskip("gguf")

import strata  # noqa: E402
from strata import ffi, lib  # noqa: E402
from conftest import bytes_to_unicode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("STRATA_SHARED") or ROOT.parent / "shared")
VOCAB = SHARED / "vocab"

# ---- llama.cpp's pattern lists (data) -----------------------------------------------------------

GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
LLAMA3 = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
          "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2 = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
         "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN35 = ("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
          "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# LLAMA_VOCAB_PRE_TYPE_GPT4O (o200k: gpt-4o, gpt-oss, llama4), exactly as llama.cpp has it
GPT4O = ("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
         "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
         "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
         "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
         "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

SETS = {
    "default": ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
    "gpt2": [GPT2],
    "llama3": [LLAMA3],
    "qwen2": [QWEN2],
    "qwen35": [QWEN35],
    "starcoder": ["\\p{N}", GPT2],
    "falcon": ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
    "deepseek-llm": [
        "[\r\n]",
        '\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af'
        '\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1'
        '\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5'
        '\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a'
        '\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d'
        '\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3'
        '\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115'
        '\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f'
        '\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3'
        '\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf'
        '\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f'
        '\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2'
        '\U000118a0-\U000118df\U0001e900-\U0001e943]+',
        '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+',
        '\\s+$',
        '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
        '\\p{N}+',
    ],
    "deepseek-v3": [
        '\\p{N}{1,3}',
        '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
        '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?'
        '[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
    ],
    "gpt4o": [GPT4O],
}

# tokenizer.ggml.pre -> (pattern set, ignore_merges), as llama.cpp's vocab loader maps them
PRES = {
    "default": ("default", False),
    "gpt-2": ("gpt2", False),
    "olmo": ("gpt2", False),
    "mpt": ("gpt2", False),
    "llama-bpe": ("llama3", True),
    "llama3": ("llama3", True),
    "dbrx": ("llama3", False),
    "qwen2": ("qwen2", False),
    "stablelm2": ("qwen2", False),
    "deepseek-r1-qwen": ("qwen2", False),
    "qwen35": ("qwen35", False),
    "smollm": ("starcoder", False),
    "starcoder": ("starcoder", False),
    "refact": ("starcoder", False),
    "falcon": ("falcon", False),
    "deepseek-llm": ("deepseek-llm", False),
    "deepseek-v3": ("deepseek-v3", False),
    "gpt-4o": ("gpt4o", False),
    "llama4": ("gpt4o", False),
}

CORPUS = [
    "Hello world",
    " Hello  World!  ",
    "I'm HERE'S you've WE'LL they'D 'S 'sa O'Neil's don't DON'T",
    "'s'S'T'RE'vE'm'LL'd's",
    "1234567890 12 123 1234 12345 \u0663\u0664\u0665\u0666 \u2460\u2461\u2462 \xbd \xb2\xb3",
    "1,234,567.89 $100 \u20ac200 \xa5300 3.14159e-10",
    "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c \u30ab\u30bf\u30ab\u30ca\u3002\u300c\u5f15\u7528\u300d",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "\U0001f999\U0001f680 \U0001f636\u200d\U0001f32b\ufe0f \U0001f44d\U0001f3fd \u2705 \u2764\ufe0f",
    "a\r\nb\n\n\nc\t\td   e\xa0f\u3000g  \n  h",
    "end   ",
    " \t \n",
    "\r\r\n\n  \n\n\t\n",
    "   leading and trailing   \n",
    "...!!??---***(())[[{{}}]]<<>>~~``^^$$++==||@@##%%&&",
    "a.b,c;d:e/f\\g",
    "~/path/to-file.txt --flag=value -x",
    "e\u0301 cafe\u0301 n\u0303 Z\u0351\u0352a\u0353l\u0354g\u0355o",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "x\xb2+y\xb3=z\u2074 \u221a2 \u2211\u222b \u2264\u2265",
    "\xabquoted\xbb \u201eGerman\u201c \u2018single\u2019 \u2014 dash \u2013 en",
    "line\u2028sep\u2029para\x85nel",
    "def f(x):\n    return x**2  # comment\n\n\tif (a&&b||c) {y+=1;}",
    "ALLCAPS lowercase MiXeD camelCase snake_case kebab-case",
    "\u00c4pfel \u00fcber \u00df \u0130stanbul \u0131",
    "   ",
    "\t",
    "\n",
    "",
]

# o200k's own cases: case changes inside words, contractions attached to words in any case, digit
# groups, '/' and newlines after punctuation, non-ASCII letters (llama.cpp's pattern tells case
# apart for A-Z / a-z only), marks, CJK, emoji
CORPUS_GPT4O = [
    "camelCase PascalCase HTTPServer iPhone XMLHttpRequest getHTTPResponse aBcDeF ABCdef",
    "I'M you'RE He's SHE'S it'S we'Ve THEY'LL i'd O'Neil'S don'T CAN'T 'tis 's 'Re",
    "1 12 123 1234 12345 123456 1234567 12,345 3.14 0x1F 2024-01-02 v1.2.3 a1b22c333d4444",
    " 7 leading space before numbers and\twords  \n 42\n\nX",
    "http://example.com/a/b?c=d&e=f // comment /* c */ a/\nb //\n\n",
    "!!!???... ---=== ***\r\n;;;\n,,,/ (((x))) [[y]] {{z}}",
    "\u00c9COLE \u00e9cole \u00c9cole \u00e9COLE \u01c5ungla \u0130I\u0131i \u00dfSS \u03a3\u03c3\u03c2",
    "e\u0301te\u0301 E\u0301TE\u0301 \u0915\u093f\u0924\u093e\u092c",
    "\u4e2d\u6587\u5b57Chinese\u6587\u5b57 \u65e5\u672c\u8a9eABC\u30ab\u30ca 123\u5e74",
    "\U0001f600\U0001f600 a\U0001f44db \U0001f468\u200d\U0001f469\u200d\U0001f467 \u00a9\u00ae\u2122 x\u2192y",
    "\n\n\n  \n\t\n \r\n\r\n   tail   ",
    "<|start|>assistant<|channel|>analysis<|message|>Hi!<|end|>",
]

# ---- reference ------------------------------------------------------------------------------


B2U = bytes_to_unicode()


def ref_split(text: str, patterns: list[str]) -> list[str]:
    pieces = [text] if text else []
    for pat in patterns:
        rx = regex.compile(pat)
        out = []
        for piece in pieces:
            last = 0
            for m in rx.finditer(piece):
                if m.end() == m.start():
                    continue
                if m.start() > last:
                    out.append(piece[last:m.start()])
                out.append(m.group())
                last = m.end()
            if last < len(piece):
                out.append(piece[last:])
        pieces = out
    return pieces


class RefBPE:
    def __init__(self, tokens: list[str], merges: list[str]):
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {}
        for i, m in enumerate(merges):
            sp = m.find(" ", 1)
            if sp < 0:
                continue
            self.ranks.setdefault((m[:sp], m[sp + 1:]), i)

    def encode(self, text: str, patterns: list[str], ignore_merges: bool) -> list[int]:
        ids = []
        for piece in ref_split(text, patterns):
            word = "".join(B2U[b] for b in piece.encode("utf-8"))
            if ignore_merges and word in self.vocab:
                ids.append(self.vocab[word])
                continue
            syms = list(word)
            while len(syms) > 1:
                best = None
                for i in range(len(syms) - 1):
                    r = self.ranks.get((syms[i], syms[i + 1]))
                    if r is not None and (best is None or r < best[0]):
                        best = (r, i)
                if best is None:
                    break
                i = best[1]
                syms[i:i + 2] = [syms[i] + syms[i + 1]]
            for s in syms:
                if s in self.vocab:
                    ids.append(self.vocab[s])
                else:  # llama.cpp: tokens of the single bytes of the symbol's text, if any
                    for b in s.encode("utf-8"):
                        if b < 0x80 and chr(b) in self.vocab:
                            ids.append(self.vocab[chr(b)])
        return ids


# ---- strata through cffi ----------------------------------------------------------------------


def load_vocab_only(path: Path):
    params = ffi.new("strata_model_params *", lib.strata_model_default_params())
    params.vocab_only = 1
    out = ffi.new("strata_model **")
    strata.check(lib.strata_model_load(str(path).encode(), params, out), "strata_model_load")
    return ffi.gc(out[0], lib.strata_model_free)


def st_tokenize(model, text: str) -> list[int]:
    data = text.encode("utf-8")
    n = ffi.new("int64_t *")
    cap = 4 * len(data) + 16
    buf = ffi.new("strata_token[]", cap)
    strata.check(lib.strata_tokenize(model, data, len(data), 0, 0, buf, cap, n), "strata_tokenize")
    return list(buf[0:n[0]])


def st_detokenize(model, ids: list[int]) -> bytes:
    n = ffi.new("int64_t *")
    arr = ffi.new("strata_token[]", ids or [0])
    cap = 16 * len(ids) + 16
    buf = ffi.new("char[]", cap)
    strata.check(lib.strata_detokenize(model, arr, len(ids), 0, 0, buf, cap, n), "detokenize")
    return ffi.buffer(buf, n[0])[:]


# ---- fixtures --------------------------------------------------------------------------------


class Base:
    def __init__(self, name: str):
        # strata's reader here (gguf.GGUFReader takes ~20 s on the 150k-token file); the gguf
        # package writes the copies
        with strata.GGUF(str(VOCAB / f"ggml-vocab-{name}.gguf")) as g:
            md = g.metadata
            self.tokens = list(md["tokenizer.ggml.tokens"])
            self.types = list(md["tokenizer.ggml.token_type"])
            self.merges = list(md["tokenizer.ggml.merges"])
        self.ref = RefBPE(self.tokens, self.merges)

    def write(self, path: Path, pre: str) -> Path:
        w = gguf.GGUFWriter(str(path), "gpt2")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(self.tokens)
        w.add_token_types(self.types)
        w.add_token_merges(self.merges)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path


@pytest.fixture(scope="module")
def bases():
    if not (VOCAB / "ggml-vocab-qwen2.gguf").exists():
        pytest.skip(f"{VOCAB}: shared vocabularies not found (set STRATA_SHARED)")
    return {"qwen2": Base("qwen2"), "gpt-2": Base("gpt-2")}


def _check(bases, tmp_path, base: str, pre: str, corpus=CORPUS):
    b = bases[base]
    set_name, ignore = PRES[pre]
    model = load_vocab_only(b.write(tmp_path / f"{base}-{pre}.gguf", pre))
    bad = []
    for text in corpus:
        want = b.ref.encode(text, SETS[set_name], ignore)
        got = st_tokenize(model, text)
        if got != want:
            bad.append((text, want, got, ref_split(text, SETS[set_name])))
        # byte-level BPE round-trips every input
        assert st_detokenize(model, got) == text.encode("utf-8"), (pre, text)
    assert not bad, "\n".join(f"{pre} on {t!r}:\n  want {w}\n  got  {g}\n  pieces {p}"
                              for t, w, g, p in bad[:5])


@pytest.mark.parametrize("pre", sorted(PRES))
def test_pre_qwen2_vocab(bases, tmp_path, pre):
    _check(bases, tmp_path, "qwen2", pre)


@pytest.mark.parametrize("pre", ["gpt-2", "default", "falcon", "llama3"])
def test_pre_gpt2_vocab(bases, tmp_path, pre):
    _check(bases, tmp_path, "gpt-2", pre)


@pytest.mark.parametrize("base", ["qwen2", "gpt-2"])
def test_pre_gpt4o_cases(bases, tmp_path, base):
    _check(bases, tmp_path, base, "gpt-4o", CORPUS + CORPUS_GPT4O)


def test_pre_gpt4o_long_runs(bases, tmp_path):
    """Runs of 100k letters (upper then lower case) and of digits split without exhausting the
    stack and round-trip."""
    model = load_vocab_only(bases["qwen2"].write(tmp_path / "long.gguf", "gpt-4o"))
    for text in ("A" * 50000 + "b" * 50000, "x" * 100000, "9" * 30000):
        ids = st_tokenize(model, text)
        assert ids and st_detokenize(model, ids) == text.encode()


def test_gpt4o_reference_splits():
    """The reference pattern cuts as o200k does on plain ASCII."""
    got = ref_split("camelCase HTTPServer don'T I'M 12345\n\n a/\nb", [GPT4O])
    assert got == ["camel", "Case", " HTTPServer", " don'T", " I'M", " ", "123", "45", "\n\n",
                   " a", "/\n", "b"]


def test_reference_is_not_trivial():
    """The pattern sets really differ on the corpus (so each test exercises its own set)."""
    splits = {name: [tuple(ref_split(t, pats)) for t in CORPUS] for name, pats in SETS.items()}
    names = list(splits)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert splits[a] != splits[b], (a, b)


def test_unknown_pre_is_an_error(bases, tmp_path):
    path = bases["gpt-2"].write(tmp_path / "unknown-pre.gguf", "no-such-pre-tokenizer")
    with pytest.raises(strata.StrataError) as e:
        load_vocab_only(path)
    assert "no-such-pre-tokenizer" in str(e.value)
    assert e.value.status_name == "STRATA_ERR_UNSUPPORTED"
