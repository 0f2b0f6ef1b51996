"""test_server_tools.py - tool calls end to end through `strata serve`: a tiny "bigram" GGUF written
here (one dense qwen2 layer whose attention and FFN add nothing, a one-hot embedding, an output
matrix that maps each token to the next one of a chain) greedily writes a fixed tool call in its
chat template's format after the template's generation prompt; the request with tools gets it back
as OpenAI tool_calls (finish_reason "tool_calls", content null), streamed as a tool_calls delta
that reassembles to the same call, and the same request without tools gets the raw text as content
(so the calls come from the server's parser, not from the model). Formats: Qwen2.5's Hermes
<tool_call> blocks and Mistral's [TOOL_CALLS] array. The binary is $STRATA_CLI, else <repo>/strata."""
import json

import numpy as np
import pytest

from conftest import shared_file
from test_server import Server, sse_events

gguf = pytest.importorskip("gguf")

N_EMBD = 512  # >= the vocab: each token's embedding is its own basis vector

CALL_ARGS = {"city": "Paris"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


def byte_unicode():
    """GPT-2's byte -> printable character map (the byte-level BPE vocabulary's spelling)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = byte_unicode()


def spell(text):
    return "".join(B2U[b] for b in text.encode())


def bigram_model(path, template, specials, eos, start, chain):
    """A qwen2 GGUF whose greedy output after the token start (one of specials, or a one-byte
    text) is chain (texts, each one token, the last an end of turn among specials): vocab =
    specials (control tokens), the 256 bytes, the chain's other pieces; every other token is
    followed by eos."""
    pieces = [c for c in chain if c not in specials]
    toks = list(specials) + [B2U[b] for b in range(256)] + [spell(p) for p in pieces]
    types = [3] * len(specials) + [1] * (256 + len(pieces))
    ids = {t: i for i, t in enumerate(specials)}
    ids.update({p: len(specials) + 256 + i for i, p in enumerate(pieces)})
    nv = len(toks)
    assert nv <= N_EMBD and len(set(toks)) == nv
    nxt = np.full(nv, ids[eos])
    prev = ids[start] if start in ids else len(specials) + start.encode()[0]
    for c in chain:
        nxt[prev] = ids[c]
        prev = ids[c]
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("bigram tool-call test model")
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges([B2U[ord("\n")] + " " + B2U[ord("\n")]])  # (never made: its token is not in the vocab)
    w.add_bos_token_id(0)
    w.add_eos_token_id(ids[eos])
    w.add_add_bos_token(False)
    w.add_chat_template(template)
    f32 = np.float32
    embd = np.zeros((nv, N_EMBD), f32)
    embd[np.arange(nv), np.arange(nv)] = 1
    out = np.zeros((nv, N_EMBD), f32)  # logit j = sqrt(N_EMBD) * out[j, i] for token i
    out[nxt, np.arange(nv)] = 1
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, f32))
    w.add_tensor("output.weight", out)
    zero = lambda *shape: np.zeros(shape, f32)  # noqa: E731
    w.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, f32))
    for x in "qkv":
        w.add_tensor(f"blk.0.attn_{x}.weight", zero(N_EMBD, N_EMBD))
        w.add_tensor(f"blk.0.attn_{x}.bias", zero(N_EMBD))
    w.add_tensor("blk.0.attn_output.weight", zero(N_EMBD, N_EMBD))  # attention adds nothing
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, f32))
    w.add_tensor("blk.0.ffn_gate.weight", zero(64, N_EMBD))
    w.add_tensor("blk.0.ffn_up.weight", zero(64, N_EMBD))
    w.add_tensor("blk.0.ffn_down.weight", zero(N_EMBD, 64))  # nor does the FFN
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


QWEN_JSON = json.dumps({"name": "get_weather", "arguments": CALL_ARGS})
MISTRAL_JSON = json.dumps([{"name": "get_weather", "arguments": CALL_ARGS}])
# format: template file, special tokens, end of turn, the generation prompt's last token, the chain
FORMATS = {
    "hermes": ("Qwen-Qwen2.5-7B-Instruct.jinja", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|im_end|>",
               "\n", ["<tool_call>\n", QWEN_JSON, "\n</tool_call>", "<|im_end|>"]),
    "mistral": ("mistralai-Mistral-Nemo-Instruct-2407.jinja",
                ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                 "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"], "</s>",
                "[/INST]", ["[TOOL_CALLS]", MISTRAL_JSON, "</s>"]),
}


@pytest.fixture(scope="module", params=sorted(FORMATS))
def tool_srv(request, tmp_path_factory):
    name = request.param
    tmpl_file, specials, eos, start, chain = FORMATS[name]
    template = shared_file("chat_templates/" + tmpl_file).read_text()
    path = tmp_path_factory.mktemp("tools") / f"bigram-{name}.gguf"
    bigram_model(path, template, specials, eos, start, chain)
    s = Server("-c", 2048, "--alias", "bigram", model=path)
    yield name, chain, s
    s.stop()


def check_call(calls):
    assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"], calls
    f = calls[0]["function"]
    assert f["name"] == "get_weather" and json.loads(f["arguments"]) == CALL_ARGS, f


def test_tool_call_whole(tool_srv):
    name, chain, s = tool_srv
    body = {"messages": MSGS, "tools": TOOLS, "max_tokens": 16, "temperature": 0}
    st, r = s.json("POST", "/v1/chat/completions", body)
    assert st == 200, r
    ch = r["choices"][0]
    assert ch["finish_reason"] == "tool_calls", r
    assert ch["message"]["role"] == "assistant" and ch["message"]["content"] is None, ch
    check_call(ch["message"]["tool_calls"])
    assert r["usage"]["completion_tokens"] == len(chain) - 1, r["usage"]  # (the end of turn not counted)
    # without tools the same generation is plain content: the calls above are the parser's
    st, r = s.json("POST", "/v1/chat/completions", {k: v for k, v in body.items() if k != "tools"})
    m = r["choices"][0]["message"]
    assert st == 200 and r["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in m, r
    assert "get_weather" in m["content"] and json.dumps(CALL_ARGS) in m["content"], m


def test_tool_call_streamed(tool_srv):
    name, chain, s = tool_srv
    body = {"messages": MSGS, "tools": TOOLS, "max_tokens": 16, "temperature": 0, "stream": True}
    st, text = s.request("POST", "/v1/chat/completions", body)
    ev = sse_events(text)
    assert st == 200 and ev[-1] == "[DONE]", text
    chunks = [json.loads(e) for e in ev[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls", chunks[-1]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "", chunks
    calls = {}  # OpenAI's reassembly: by index, id / type / name once, arguments concatenated
    for c in chunks:
        for d in c["choices"][0]["delta"].get("tool_calls") or []:
            acc = calls.setdefault(d["index"], {"id": "", "type": "", "function": {"name": "", "arguments": ""}})
            acc["id"] += d.get("id") or ""
            acc["type"] += d.get("type") or ""
            acc["function"]["name"] += (d.get("function") or {}).get("name") or ""
            acc["function"]["arguments"] += (d.get("function") or {}).get("arguments") or ""
    check_call([calls[i] for i in sorted(calls)])


def test_openai_client_tool_call(tool_srv):
    openai = pytest.importorskip("openai")
    name, chain, s = tool_srv
    c = openai.OpenAI(base_url=f"http://{s.host}:{s.port}/v1", api_key="none")
    r = c.chat.completions.create(model="bigram", messages=MSGS, tools=TOOLS, max_tokens=16, temperature=0)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content is None
    assert m.tool_calls[0].function.name == "get_weather"
    assert json.loads(m.tool_calls[0].function.arguments) == CALL_ARGS
    # the stream through the client's own chunk types
    name_s, args_s = "", ""
    finish = None
    for ch in c.chat.completions.create(model="bigram", messages=MSGS, tools=TOOLS, max_tokens=16, temperature=0,
                                        stream=True):
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            name_s += tc.function.name or ""
            args_s += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls" and name_s == "get_weather" and json.loads(args_s) == CALL_ARGS
