"""test_server_tools.py - tool calls end to end through `strata serve`: a tiny "bigram" GGUF written
here (one dense qwen2 layer whose attention and FFN add nothing, a one-hot embedding, an output
matrix that maps each token to the next one of a chain) greedily writes a fixed answer in its
chat template's tool-call format after the template's generation prompt; the request with tools
gets it back as OpenAI tool_calls (finish_reason "tool_calls", the text before the calls as
content, null when there is none; reasoning as reasoning_content), streamed as content and
reasoning deltas and a tool_calls delta that reassemble to the same, and the same request without
tools gets the calls' text as content (so the calls come from the server's parser, not from the
model). Each case uses its model's real template from ../shared/chat_templates/, from which the
server tells the format (a template the server does not read as that format fails the case).
Formats: Qwen2.5's Hermes <tool_call> blocks, Mistral's [TOOL_CALLS] array, Llama 3.x's bare
JSON (and after <|python_tag|>, two calls), DeepSeek R1 (reasoning before the call) and V3.1,
gpt-oss harmony (an analysis message before the call), GLM-4.6 (reasoning first), Qwen3-Coder's
XML (content and two calls), Kimi-K2 (its functions.NAME:IDX id), functionary v3.1 and v3.2
(content and two calls) and Seed-OSS (reasoning first): every format text.h names has a case.
Not driven here: Mistral's newer NAME[ARGS]{...} form, functionary's python code calls, calls
the parser must refuse (the C tests have those). DeepSeek R1's template leaves the tools out of
the prompt (the format is told from its tool-call markers all the same). A bigram model writes
each token at most once per answer, so where a real answer repeats a control token (gpt-oss's
second <|channel|> and <|message|>) the repeat is spelled inside an ordinary token of the same
text. The binary is $STRATA_CLI, else <repo>/strata."""
import json

import numpy as np
import pytest

from conftest import bytes_to_unicode, shared_file
from test_server import Server, sse_events

gguf = pytest.importorskip("gguf")

N_EMBD = 512  # >= the vocab: each token's embedding is its own basis vector

CALL_ARGS = {"city": "Paris"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]


B2U = bytes_to_unicode()


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
    # one merge (the reader wants some), of two bytes no text here has: a merge whose token is not in
    # the vocab would drop its bytes (as llama.cpp does), a "\n\n" the prompt's last token
    w.add_token_merges([B2U[0] + " " + B2U[1]])
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


LYON = {"city": "Lyon"}
TWO = [("get_weather", CALL_ARGS), ("get_weather", LYON)]
QWEN_JSON = json.dumps({"name": "get_weather", "arguments": CALL_ARGS})
MISTRAL_JSON = json.dumps([{"name": "get_weather", "arguments": CALL_ARGS}])
LLAMA_CALL = {"name": "get_weather", "parameters": CALL_ARGS}
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<|eom_id|>", "<|python_tag|>"]
DS = {k: f"<\uff5c{k.replace(' ', chr(0x2581))}\uff5c>" for k in  # DeepSeek's <｜tool▁calls▁begin｜> and the rest
      ["begin of sentence", "end of sentence", "User", "Assistant", "tool calls begin", "tool calls end",
       "tool call begin", "tool call end", "tool sep"]}
DS_SPECIALS = list(DS.values())
HARMONY_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                    "<|constrain|>", "<|return|>", "<|call|>"]
GLM_SPECIALS = ["[gMASK]", "<sop>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
KIMI_SPECIALS = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                 "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                 "<|tool_call_argument_begin|>", "<|tool_call_end|>"]
SEED_SPECIALS = ["<seed:bos>", "<seed:eos>", "<seed:pad>", "<seed:think>", "</seed:think>", "<seed:tool_call>",
                 "</seed:tool_call>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def case(template, specials, eos, start, chain, calls=(("get_weather", CALL_ARGS),), content=None, reasoning=None,
         ids=None, raw=("get_weather", "Paris")):
    """One format's case: the template file, the vocabulary's special tokens, the end of turn, the
    generation prompt's last token (a special or a one-byte text), the answer's tokens; what the
    server must make of it: the calls (name, arguments), the content before them, the reasoning,
    the ids where the format gives them; and what the answer's content holds without tools."""
    return dict(template=template, specials=specials, eos=eos, start=start, chain=chain, calls=list(calls),
                content=content, reasoning=reasoning, ids=ids, raw=raw)


CASES = {
    "hermes": case("Qwen-Qwen2.5-7B-Instruct.jinja", QWEN_SPECIALS, "<|im_end|>", "\n",
                   ["<tool_call>\n", QWEN_JSON, "\n</tool_call>", "<|im_end|>"]),
    "mistral": case("mistralai-Mistral-Nemo-Instruct-2407.jinja",
                    ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                     "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"], "</s>",
                    "[/INST]", ["[TOOL_CALLS]", MISTRAL_JSON, "</s>"]),
    "llama3": case("meta-llama-Llama-3.1-8B-Instruct.jinja", LLAMA_SPECIALS, "<|eot_id|>", "\n",
                   [json.dumps(LLAMA_CALL), "<|eot_id|>"]),
    "llama3-python-tag": case("meta-llama-Llama-3.3-70B-Instruct.jinja", LLAMA_SPECIALS, "<|eot_id|>", "\n",
                              ["<|python_tag|>", json.dumps(LLAMA_CALL),
                               "; " + json.dumps({"name": "get_weather", "parameters": LYON}), "<|eom_id|>"],
                              calls=TWO),
    "deepseek-r1": case("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", DS_SPECIALS, DS["end of sentence"], "\n",
                        ["Paris is in France; I should call get_weather.", "</think>\n\n", DS["tool calls begin"],
                         DS["tool call begin"], "function", DS["tool sep"],
                         "get_weather\n```json\n" + json.dumps(CALL_ARGS) + "\n```", DS["tool call end"],
                         DS["tool calls end"], DS["end of sentence"]],
                        reasoning="Paris is in France; I should call get_weather."),
    "deepseek-v3.1": case("deepseek-ai-DeepSeek-V3.1.jinja", DS_SPECIALS, DS["end of sentence"], ">",
                          [DS["tool calls begin"], DS["tool call begin"], "get_weather", DS["tool sep"],
                           json.dumps(CALL_ARGS), DS["tool call end"], DS["tool calls end"], DS["end of sentence"]]),
    "gpt-oss": case("openai-gpt-oss-120b.jinja", HARMONY_SPECIALS, "<|return|>", "t",
                    ["<|channel|>", "analysis", "<|message|>", "The user asks for Paris: call get_weather.", "<|end|>",
                     "<|start|>", "assistant<|channel|>commentary to=functions.get_weather ", "<|constrain|>",
                     "json<|message|>", json.dumps(CALL_ARGS), "<|call|>"],
                    reasoning="The user asks for Paris: call get_weather.", raw=("Paris",)),
    "glm-4.6": case("GLM-4.6.jinja", GLM_SPECIALS, "<|observation|>", "<|assistant|>",
                    ["<think>", "The user wants the weather in Paris.", "</think>", "<tool_call>", "get_weather\n",
                     "<arg_key>", "city", "</arg_key>", "<arg_value>", "Paris", "</arg_value>", "</tool_call>",
                     "<|observation|>"],
                    reasoning="The user wants the weather in Paris."),
    "qwen3-coder": case("Qwen3-Coder.jinja", QWEN_SPECIALS, "<|im_end|>", "\n",
                        ["I will check both cities.", "\n<tool_call>\n<function=get_weather>\n",
                         "<parameter=city>\nParis\n</parameter>\n", "</function>\n</tool_call>",
                         "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n"
                         "</tool_call>", "<|im_end|>"],
                        calls=TWO, content="I will check both cities."),
    "kimi-k2": case("moonshotai-Kimi-K2.jinja", KIMI_SPECIALS, "<|im_end|>", "<|im_middle|>",
                    ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.get_weather:0",
                     "<|tool_call_argument_begin|>", json.dumps(CALL_ARGS), "<|tool_call_end|>",
                     "<|tool_calls_section_end|>", "<|im_end|>"],
                    ids=["functions.get_weather:0"]),
    "functionary-v3.1": case("meetkai-functionary-medium-v3.1.jinja", LLAMA_SPECIALS, "<|eot_id|>", "\n",
                             ["<function=get_weather>", json.dumps(CALL_ARGS), "</function>", "<|eom_id|>"]),
    "functionary-v3.2": case("meetkai-functionary-medium-v3.2.jinja", LLAMA_SPECIALS, "<|eot_id|>", ">",
                             ["all\n", "Let me check both cities.", ">>>get_weather\n", json.dumps(CALL_ARGS),
                              ">>>get_weather\n" + json.dumps(LYON), "<|eot_id|>"],
                             calls=TWO, content="Let me check both cities."),
    "seed-oss": case("ByteDance-Seed-OSS.jinja", SEED_SPECIALS, "<seed:eos>", "\n",
                     ["<seed:think>", "The user wants Paris's weather.", "</seed:think>", "<seed:tool_call>",
                      "\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n",
                      "</seed:tool_call>", "<seed:eos>"],
                     reasoning="The user wants Paris's weather."),
}


@pytest.fixture(scope="module", params=list(CASES))
def tool_srv(request, tmp_path_factory):
    name = request.param
    c = CASES[name]
    template = shared_file("chat_templates/" + c["template"]).read_text()
    path = tmp_path_factory.mktemp("tools") / f"bigram-{name}.gguf"
    bigram_model(path, template, c["specials"], c["eos"], c["start"], c["chain"])
    s = Server("-c", 2048, "--alias", "bigram", model=path)
    yield c, s
    s.stop()


def check_calls(c, calls):
    """calls (OpenAI's, as dicts) are the case's, in order, each with an id (the model's where given)."""
    assert len(calls) == len(c["calls"]), calls
    for k, (call, (name, args)) in enumerate(zip(calls, c["calls"])):
        assert call["type"] == "function" and call["id"], call
        assert call["function"]["name"] == name and json.loads(call["function"]["arguments"]) == args, call
        if c["ids"]:
            assert call["id"] == c["ids"][k], call
    assert len({call["id"] for call in calls}) == len(calls), calls  # (ids tell the calls apart)


def test_tool_call_whole(tool_srv):
    c, s = tool_srv
    body = {"messages": MSGS, "tools": TOOLS, "max_tokens": 32, "temperature": 0}
    st, r = s.json("POST", "/v1/chat/completions", body)
    assert st == 200, r
    ch = r["choices"][0]
    m = ch["message"]
    assert ch["finish_reason"] == "tool_calls", r
    assert m["role"] == "assistant" and m["content"] == c["content"], m
    assert m.get("reasoning_content") == c["reasoning"], m
    check_calls(c, m["tool_calls"])
    assert r["usage"]["completion_tokens"] == len(c["chain"]) - 1, r["usage"]  # (the end of turn not counted)
    # without tools the same generation is plain content: the calls above are the parser's
    st, r = s.json("POST", "/v1/chat/completions", {k: v for k, v in body.items() if k != "tools"})
    m = r["choices"][0]["message"]
    assert st == 200 and r["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in m, r
    assert all(x in m["content"] for x in c["raw"]), m
    assert m.get("reasoning_content") == c["reasoning"], m


def test_tool_call_streamed(tool_srv):
    c, s = tool_srv
    body = {"messages": MSGS, "tools": TOOLS, "max_tokens": 32, "temperature": 0, "stream": True}
    st, text = s.request("POST", "/v1/chat/completions", body)
    ev = sse_events(text)
    assert st == 200 and ev[-1] == "[DONE]", text
    chunks = [json.loads(e) for e in ev[:-1]]
    assert all(x["object"] == "chat.completion.chunk" for x in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls", chunks[-1]
    deltas = [x["choices"][0]["delta"] for x in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == (c["content"] or ""), chunks
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == (c["reasoning"] or ""), chunks
    calls = {}  # OpenAI's reassembly: by index, id / type / name once, arguments concatenated
    for d in deltas:
        for t in d.get("tool_calls") or []:
            acc = calls.setdefault(t["index"], {"id": "", "type": "", "function": {"name": "", "arguments": ""}})
            acc["id"] += t.get("id") or ""
            acc["type"] += t.get("type") or ""
            acc["function"]["name"] += (t.get("function") or {}).get("name") or ""
            acc["function"]["arguments"] += (t.get("function") or {}).get("arguments") or ""
    check_calls(c, [calls[i] for i in sorted(calls)])


def test_openai_client_tool_call(tool_srv):
    openai = pytest.importorskip("openai")
    c, s = tool_srv
    cl = openai.OpenAI(base_url=f"http://{s.host}:{s.port}/v1", api_key="none")
    r = cl.chat.completions.create(model="bigram", messages=MSGS, tools=TOOLS, max_tokens=32, temperature=0)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content == c["content"]
    check_calls(c, [t.model_dump() for t in m.tool_calls])
    # the stream through the client's own chunk types
    calls, content, finish = {}, "", None
    for ch in cl.chat.completions.create(model="bigram", messages=MSGS, tools=TOOLS, max_tokens=32, temperature=0,
                                         stream=True):
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            acc = calls.setdefault(tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
            acc["id"] += tc.id or ""
            acc["function"]["name"] += tc.function.name or ""
            acc["function"]["arguments"] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == (c["content"] or "")
    check_calls(c, [calls[i] for i in sorted(calls)])
