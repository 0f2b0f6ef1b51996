"""test_server.py - `strata serve` (c/server/, docs/SERVER.md) on the default model, on localhost:
the endpoints and OpenAI's formats, greedy text equal to `strata run`'s, streaming equal to the
whole answer, stop strings, the KV cache reused across requests (cached_tokens), n choices, the API key,
the limits (413, 431, 408, a prompt past the context), malformed requests, a client leaving
mid-stream, clients at once against --parallel 2 and a short queue (200 or 503, nothing left
busy), OpenAI's own Python client, and a qwen3next slot that cannot roll its recurrent state
back reading the prompt again. The binary is $STRATA_CLI, else <repo>/strata."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, serve_health_stop

CLI = Path(os.environ.get("STRATA_CLI", REPO / "strata"))
if not CLI.is_file():
    pytest.skip(f"strata CLI not built at {CLI} (run make, or set STRATA_CLI)", allow_module_level=True)
TINY = REPO / "models" / "strata-tiny-moe-q8_0.gguf"
if not TINY.is_file():
    pytest.skip(f"{TINY} not present", allow_module_level=True)
PROMPT = "Dictionary, n."


class Server:
    """A running `strata serve --port 0` and its address; stop() checks a clean exit."""

    def __init__(self, *args, model=TINY):
        self.p = subprocess.Popen([str(CLI), "serve", "-m", str(model), "--port", "0", "-t", "2", "--cpu",
                                   *map(str, args)], stderr=subprocess.PIPE, text=True)
        self.err = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.err.append(line)
            m = re.search(r"listening on http://([^:]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                self.drain = threading.Thread(target=self._drain, daemon=True)
                self.drain.start()
                return
        self.p.kill()
        raise AssertionError("server did not start: " + "".join(self.err))

    def _drain(self):
        for line in self.p.stderr:
            self.err.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        data = json.dumps(body) if isinstance(body, (dict, list)) else body
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, text

    def json(self, method, path, body=None, headers=None):
        status, text = self.request(method, path, body, headers)
        return status, json.loads(text)

    def raw(self, data, timeout=10):
        """Bytes sent as they are; what comes back until the server closes."""
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        s.sendall(data)
        out = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except socket.timeout:
            pass
        s.close()
        return out

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        rc = self.p.wait(timeout=30)
        self.drain.join(timeout=10)  # (its last lines: the pipe is read to its end)
        assert rc == 0, "".join(self.err)
        assert any("stopped after" in ln for ln in self.err), self.err


@pytest.fixture(scope="module")
def srv():
    s = Server("--parallel", 2, "--queue", 2, "--max-body", "8K", "--max-header", "4K", "--timeout", 2, "-c", 256)
    yield s
    s.stop()


def cli_greedy(prompt, n):
    p = subprocess.run([str(CLI), "run", "-m", str(TINY), "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2",
                        "--no-echo", "--quiet", "--cpu"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def sse_events(text):
    return [ln[len("data: "):] for ln in text.split("\n") if ln.startswith("data: ")]


def test_health_models_tokenize(srv):
    assert srv.json("GET", "/health") == (200, {"status": "ok"})
    st, m = srv.json("GET", "/v1/models")
    assert st == 200 and m["object"] == "list" and m["data"][0]["id"] == "strata-tiny-moe-q8_0"
    st, t = srv.json("POST", "/tokenize", {"content": PROMPT})
    assert st == 200 and len(t["tokens"]) > 1
    st, d = srv.json("POST", "/detokenize", {"tokens": t["tokens"]})
    assert st == 200 and d["content"] == PROMPT


def test_completion_is_the_cli_greedy_text(srv):
    st, r = srv.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
    assert st == 200, r
    ch = r["choices"][0]
    assert r["object"] == "text_completion" and ch["finish_reason"] == "length"
    assert ch["text"] == cli_greedy(PROMPT, 24).rstrip("\n") or cli_greedy(PROMPT, 24).startswith(ch["text"])
    u = r["usage"]
    assert u["completion_tokens"] == 24 and u["total_tokens"] == u["prompt_tokens"] + 24
    # streamed: the same text in chunks, a finish reason, the usage when asked, [DONE] last
    st, text = srv.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                                                       "stream": True, "stream_options": {"include_usage": True}})
    ev = sse_events(text)
    assert st == 200 and ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == ch["text"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 24


def test_stop_strings_and_prefix_reuse(srv):
    full = srv.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0})[1]
    text = full["choices"][0]["text"]
    stop = text[8:12]
    assert stop.strip(), text
    cut = text[:text.index(stop)]
    st, r = srv.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": [stop]})
    assert st == 200 and r["choices"][0]["text"] == cut and r["choices"][0]["finish_reason"] == "stop"
    st, s = srv.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0,
                                                    "stop": stop, "stream": True})
    chunks = [json.loads(e) for e in sse_events(s)[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == cut
    # the next turn extends the last prompt: its cached prefix is read from the slot's KV cache
    longer = PROMPT + text
    st, r2 = srv.json("POST", "/v1/completions", {"prompt": longer, "max_tokens": 4, "temperature": 0})
    n_first = len(srv.json("POST", "/tokenize", {"content": PROMPT, "add_special": True})[1]["tokens"])
    assert st == 200 and r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_first - 1, r2["usage"]


def test_errors_in_openai_format(srv):
    for body, word in (("{not json", "JSON"), ({"prompt": 5}, "prompt"), ({"prompt": "x", "temperature": 9},
                       "temperature"), ({"prompt": "x", "n": 9}, '"n"'), ({"prompt": "x", "stop": [1]}, "stop")):
        st, e = srv.json("POST", "/v1/completions", body)
        assert st == 400 and word in e["error"]["message"] and e["error"]["type"] == "invalid_request_error", e
    assert srv.json("GET", "/nope")[0] == 404
    assert srv.json("GET", "/v1/completions")[0] == 405
    st, e = srv.json("POST", "/v1/completions", {"prompt": "word " * 400})
    assert st == 400 and "context" in e["error"]["message"]
    assert srv.json("POST", "/v1/completions", {"prompt": "x" * 9000})[0] == 413
    assert srv.json("GET", "/health", headers={"X-Big": "y" * 5000})[0] == 431
    assert srv.raw(b"GARBAGE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert srv.raw(b"GET /health HTTP/1.1\r\nHost: x\r\n").startswith(b"HTTP/1.1 408")  # slow: 2 s limit
    assert srv.json("GET", "/health")[0] == 200


def test_client_leaving_mid_stream_frees_its_slot(srv):
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    body = json.dumps({"prompt": PROMPT, "max_tokens": 200, "stream": True})
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
    got = b""
    while b"data: " not in got:
        b = s.recv(4096)
        assert b, got
        got += b
    s.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        m = srv.request("GET", "/metrics")[1]
        if "strata_requests_processing 0" in m:
            break
        time.sleep(0.05)
    assert "strata_requests_processing 0" in m and "strata_requests_queued 0" in m


def test_many_clients_answered(srv):
    out = []

    def one(i):
        st, _ = srv.request("POST", "/v1/completions", {"prompt": f"{PROMPT} {i}", "max_tokens": 16})
        out.append(st)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == 12 and set(out) <= {200, 503} and 200 in out, out
    m = srv.request("GET", "/metrics")[1]
    assert "strata_requests_processing 0" in m and "strata_requests_queued 0" in m


def test_api_key():
    s = Server("--api-key", "s3cret")
    try:
        assert s.json("GET", "/health")[0] == 200  # open without the key
        st, e = s.json("GET", "/v1/models")
        assert st == 401 and e["error"]["type"] == "authentication_error"
        assert s.json("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert s.json("GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        s.stop()


def test_openai_client(srv):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=f"http://{srv.host}:{srv.port}/v1", api_key="none")
    r = c.completions.create(model="strata-tiny-moe-q8_0", prompt=PROMPT, max_tokens=12, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model="x", prompt=PROMPT, max_tokens=12, temperature=0, stream=True) if ch.choices)
    assert streamed == r.choices[0].text
    assert [m.id for m in c.models.list()] == ["strata-tiny-moe-q8_0"]


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def chat_srv(tmp_path_factory):
    """A server on a copy of the default model with a ChatML chat template in its metadata."""
    pytest.importorskip("gguf")
    import sys
    path = tmp_path_factory.mktemp("chat") / "chat.gguf"
    p = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(TINY), str(path),
                        "--chat-template", CHATML, "--force"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    s = Server("-c", 512, "--alias", "chat", model=path)
    yield s
    s.stop()


def test_chat_completions(chat_srv, srv):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    st, r = chat_srv.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0})
    assert st == 200 and r["object"] == "chat.completion", r
    m = r["choices"][0]["message"]
    assert m["role"] == "assistant" and r["usage"]["completion_tokens"] == 12
    # the prompt is the template's rendering, tokenized without an added BOS
    text = "".join(f"<|im_start|>{x['role']}\n{x['content']}<|im_end|>\n" for x in msgs) + "<|im_start|>assistant\n"
    n = len(chat_srv.json("POST", "/tokenize", {"content": text})[1]["tokens"])
    assert r["usage"]["prompt_tokens"] == n
    # and equals /v1/completions on that text (greedy)
    st, c = chat_srv.json("POST", "/v1/completions", {"prompt": text, "max_tokens": 12, "temperature": 0})
    assert c["choices"][0]["text"] == m["content"] and c["usage"]["prompt_tokens_details"]["cached_tokens"] >= n - 1
    # streamed: the role first, then the same content, a finish reason, [DONE]
    st, s = chat_srv.request("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0,
                                                              "stream": True})
    ev = sse_events(s)
    chunks = [json.loads(e) for e in ev[:-1]]
    assert ev[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == m["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["object"] == "chat.completion.chunk"
    # a second turn reads only its new part
    turn2 = msgs + [{"role": "assistant", "content": m["content"]}, {"role": "user", "content": "More?"}]
    st, r2 = chat_srv.json("POST", "/v1/chat/completions", {"messages": turn2, "max_tokens": 4})
    assert st == 200 and r2["usage"]["prompt_tokens_details"]["cached_tokens"] >= n - 1
    # bad messages, and a model without a template
    assert chat_srv.json("POST", "/v1/chat/completions", {"messages": []})[0] == 400
    assert chat_srv.json("POST", "/v1/chat/completions", {"messages": [{"content": "x"}]})[0] == 400
    st, e = srv.json("POST", "/v1/chat/completions", {"messages": msgs})
    assert st == 400 and "chat template" in e["error"]["message"]


def test_openai_client_chat(chat_srv):
    openai = pytest.importorskip("openai")
    c = openai.OpenAI(base_url=f"http://{chat_srv.host}:{chat_srv.port}/v1", api_key="none")
    r = c.chat.completions.create(model="chat", messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                  temperature=0)
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 8
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0, stream=True))
    assert streamed == r.choices[0].message.content


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_load_64_clients():
    """64 clients for $STRATA_SERVER_LOAD_S seconds (default 60) against --parallel 4: every
    request answered 200 or 503, nothing left processing or queued, resident memory flat (within
    64 MiB of where it stood after the first seconds)."""
    seconds = float(os.environ.get("STRATA_SERVER_LOAD_S", "60"))
    s = Server("--parallel", 4, "-c", 128)
    try:
        stop_at = time.time() + seconds
        counts, bad, lock = {}, [], threading.Lock()

        def client(i):
            while time.time() < stop_at:
                try:
                    st, _ = s.request("POST", "/v1/completions", {"prompt": f"{PROMPT} {i % 7}", "max_tokens": 8,
                                                                  "stream": i % 2 == 0}, timeout=60)
                except Exception as e:  # noqa: BLE001 - any failure is the test's finding
                    with lock:
                        bad.append(repr(e))
                    continue
                with lock:
                    counts[st] = counts.get(st, 0) + 1
        ts = [threading.Thread(target=client, args=(i,)) for i in range(64)]
        for t in ts:
            t.start()
        time.sleep(min(5.0, seconds / 4))
        rss0 = rss_kib(s.p.pid)
        for t in ts:
            t.join()
        rss1 = rss_kib(s.p.pid)
        m = s.request("GET", "/metrics")[1]
        assert not bad, bad[:5]
        assert set(counts) <= {200, 503} and counts.get(200, 0) > 0, counts
        assert "strata_requests_processing 0" in m and "strata_requests_queued 0" in m
        assert rss1 - rss0 < 64 * 1024, (rss0, rss1)
    finally:
        s.stop()


def test_logprobs(srv, chat_srv):
    st, r = srv.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 3})
    ch = r["choices"][0]
    lp = ch["logprobs"]
    assert st == 200 and len(lp["tokens"]) == 6 == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert "".join(lp["tokens"]) == ch["text"] and lp["text_offset"][0] == 0
    for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        vals = list(top.values())
        assert len(top) <= 3 and vals == sorted(vals, reverse=True) and val <= 0
        assert abs(val - vals[0]) < 1e-6  # greedy: the chosen token is the most likely one
    st, c = chat_srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 4, "temperature": 0, "logprobs": True,
                                                           "top_logprobs": 2})
    content = c["choices"][0]["logprobs"]["content"]
    assert st == 200 and len(content) == 4 and all(len(e["top_logprobs"]) == 2 for e in content)
    assert "".join(bytes(e["bytes"]).decode("utf-8", "replace") for e in content) == c["choices"][0]["message"]["content"]
    assert srv.json("POST", "/v1/completions", {"prompt": "x", "logprobs": 50})[0] == 400
    # streamed: each chunk carries the entries of the tokens whose text it completes
    st, text = srv.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                                       "logprobs": 3, "stream": True})
    chunks = [json.loads(e) for e in sse_events(text)[:-1]]
    toks = [t for c in chunks if c["choices"] and c["choices"][0]["logprobs"] for t in c["choices"][0]["logprobs"]["tokens"]]
    vals = [v for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
            for v in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert toks == lp["tokens"] and vals == lp["token_logprobs"], (toks, lp["tokens"])
    assert chat_srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                          "top_logprobs": 2})[0] == 400


def test_serve_flag_on_run():
    assert serve_health_stop([str(CLI), "run", "-m", str(TINY), "--serve", "--port", "0", "-t", "2", "--cpu"]) == 0


def test_speculation_gives_the_same_text(srv):
    """--spec ngram and --spec auto: verify windows give the text of one-token steps (greedy, and
    sampled with a seed), whole and streamed."""
    rep = " ".join(["The cat sat on the mat, and the dog sat on the log."] * 6)
    bodies = [{"prompt": rep, "max_tokens": 40, "temperature": 0},
              {"prompt": rep, "max_tokens": 40, "temperature": 0.8, "seed": 7}]
    want = [srv.json("POST", "/v1/completions", b)[1]["choices"][0]["text"] for b in bodies]
    for mode in ("ngram", "auto"):
        s = Server("--spec", mode, "--draft-max", 4, "-c", 512)
        try:
            for b, w in zip(bodies, want):
                st, r = s.json("POST", "/v1/completions", b)
                assert st == 200 and r["choices"][0]["text"] == w, (mode, b)
                st, text = s.request("POST", "/v1/completions", dict(b, stream=True))
                chunks = [json.loads(e) for e in sse_events(text)[:-1]]
                assert "".join(c["choices"][0]["text"] for c in chunks) == w, (mode, "stream")
            m = dict(re.findall(r"^(strata_spec_\w+) (\d+)$", s.request("GET", "/metrics")[1], re.M))
            assert int(m["strata_spec_windows_total"]) > 0, (mode, m)
            if mode == "ngram":  # (auto's policy may find windows do not pay, e.g. under ASan)
                assert int(m["strata_spec_accepted_total"]) > 0, (mode, m)
            # logprobs steps plainly, the same text
            st, r = s.json("POST", "/v1/completions", dict(bodies[0], logprobs=1))
            assert st == 200 and r["choices"][0]["text"] == want[0]
        finally:
            s.stop()


THINK = CHATML.replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>\n{% endif %}") + \
    "{# a reasoning model's template: </think> closes its thinking #}"


def test_reasoning_split(tmp_path):
    """A template whose generation prompt opens <think>: what the model writes before </think> is
    reasoning_content (all of it here: the default model never closes it), whole and streamed;
    reasoning_format none leaves it in content."""
    import sys
    path = tmp_path / "think.gguf"
    p = subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(TINY), str(path),
                        "--chat-template", THINK, "--force"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip("gguf_new_metadata unavailable: " + p.stderr[-300:])
    s = Server("-c", 512, model=path)
    try:
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "temperature": 0}
        m = s.json("POST", "/v1/chat/completions", body)[1]["choices"][0]["message"]
        raw = s.json("POST", "/v1/chat/completions", dict(body, reasoning_format="none"))[1]["choices"][0]["message"]
        assert "</think>" not in raw["content"] and raw["content"] and "reasoning_content" not in raw
        assert m["content"] == "" and m["reasoning_content"] == raw["content"].lstrip("\n"), (m, raw)
        st, text = s.request("POST", "/v1/chat/completions", dict(body, stream=True))
        chunks = [json.loads(e) for e in sse_events(text)[:-1]]
        r = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
        c = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert r == m["reasoning_content"] and c == "", (r, c)
    finally:
        s.stop()


def test_no_max_tokens_runs_to_the_context(srv):
    """Without max_tokens (and without -n), as llama-server: until the end of generation or of
    the slot's context (-c 256 here)."""
    st, r = srv.json("POST", "/v1/completions", {"prompt": PROMPT, "temperature": 0})
    u = r["usage"]
    assert st == 200 and r["choices"][0]["finish_reason"] in ("length", "stop")
    assert u["completion_tokens"] > 128 or r["choices"][0]["finish_reason"] == "stop", u
    assert u["prompt_tokens"] + u["completion_tokens"] <= 256, u


def test_echo(srv):
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0}
    plain = srv.json("POST", "/v1/completions", body)[1]["choices"][0]["text"]
    st, r = srv.json("POST", "/v1/completions", dict(body, echo=True, stop=["Dictionary"]))
    assert st == 200 and r["choices"][0]["text"] == PROMPT + plain  # (a stop in the prompt does not cut it)
    st, text = srv.request("POST", "/v1/completions", dict(body, echo=True, stream=True))
    assert "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(text)[:-1]) == PROMPT + plain


def test_n_choices(srv):
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0}
    one = srv.json("POST", "/v1/completions", body)[1]
    st, r = srv.json("POST", "/v1/completions", dict(body, n=3))
    assert st == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert all(c["text"] == one["choices"][0]["text"] for c in r["choices"])  # greedy: all the same
    assert r["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"]
    assert r["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    # sampled with a seed: reproducible, choice i seeded seed + i (choice 1 is a seed+1 request's choice 0)
    sampled = dict(body, n=2, temperature=1.0, seed=7, max_tokens=10, logprobs=2)
    a, b = srv.json("POST", "/v1/completions", sampled)[1], srv.json("POST", "/v1/completions", sampled)[1]
    assert [c["index"] for c in a["choices"]] == [0, 1] and a["choices"] == b["choices"]
    solo = srv.json("POST", "/v1/completions", dict(sampled, n=1, seed=8))[1]["choices"][0]
    assert dict(solo, index=1) == a["choices"][1]
    assert all("".join(c["logprobs"]["tokens"]) == c["text"] for c in a["choices"])
    # streamed: each chunk names its choice, each choice finishes, usage once at the end
    st, text = srv.request("POST", "/v1/completions", dict(sampled, stream=True, stream_options={"include_usage": True}))
    chunks = [json.loads(e) for e in sse_events(text)[:-1]]
    got, finish = {}, {}
    for ck in chunks:
        for c in ck["choices"]:
            got[c["index"]] = got.get(c["index"], "") + c["text"]
            if c["finish_reason"]:
                finish[c["index"]] = c["finish_reason"]
    assert got == {i: c["text"] for i, c in enumerate(a["choices"])}
    assert finish == {i: c["finish_reason"] for i, c in enumerate(a["choices"])}
    usage = [ck["usage"] for ck in chunks if ck.get("usage")]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == a["usage"]["completion_tokens"]
    st, e = srv.json("POST", "/v1/completions", dict(body, n=9))
    assert st == 400 and e["error"]["type"] == "invalid_request_error" and '"n"' in e["error"]["message"]


def test_n_choices_chat(chat_srv):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0}
    one = chat_srv.json("POST", "/v1/chat/completions", body)[1]["choices"][0]["message"]["content"]
    st, r = chat_srv.json("POST", "/v1/chat/completions", dict(body, n=2))
    assert st == 200 and [c["message"]["content"] for c in r["choices"]] == [one, one]
    st, text = chat_srv.request("POST", "/v1/chat/completions", dict(body, n=2, stream=True))
    got = {}
    for ev in sse_events(text)[:-1]:
        for c in json.loads(ev)["choices"]:
            got[c["index"]] = got.get(c["index"], "") + (c["delta"].get("content") or "")
    assert got == {0: one, 1: one}


def test_echo_logprobs(srv):
    np = pytest.importorskip("numpy")
    import strata
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2}
    plain = srv.json("POST", "/v1/completions", body)[1]["choices"][0]
    st, r = srv.json("POST", "/v1/completions", dict(body, echo=True))
    ch = r["choices"][0]
    lp = ch["logprobs"]
    assert st == 200 and ch["text"] == PROMPT + plain["text"]
    with strata.Model(str(TINY), n_threads=2) as m:
        ids = m.tokenize(PROMPT)
        rows = m.logits(ids).astype(np.float64)
        pieces = [m.detokenize_bytes([t]).decode("utf-8", "replace") for t in ids]
    n = len(ids)
    assert lp["tokens"][:n] == pieces and len(lp["tokens"]) == n + len(plain["logprobs"]["tokens"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    ref = rows - (rows.max(1, keepdims=True) + np.log(np.exp(rows - rows.max(1, keepdims=True)).sum(1, keepdims=True)))
    for i in range(1, n):  # token i under the row after tokens 0 .. i-1
        assert abs(lp["token_logprobs"][i] - ref[i - 1, ids[i]]) < 1e-4, i
        best = np.argsort(-ref[i - 1])[:2]
        assert sorted(lp["top_logprobs"][i].values(), reverse=True) == pytest.approx(ref[i - 1, best], abs=1e-4)
    for key in ("tokens", "token_logprobs", "top_logprobs"):
        assert lp[key][n:] == plain["logprobs"][key], key
    assert lp["text_offset"][n:] == [o + len(PROMPT) for o in plain["logprobs"]["text_offset"]]
    # n = 2: the prompt's entries in both choices; streamed: the same entries in order
    st, r2 = srv.json("POST", "/v1/completions", dict(body, echo=True, n=2))
    assert st == 200 and [c["logprobs"] for c in r2["choices"]] == [lp, lp]
    st, text = srv.request("POST", "/v1/completions", dict(body, echo=True, stream=True))
    chunks = [json.loads(e)["choices"][0] for e in sse_events(text)[:-1]]
    assert [t for c in chunks if c["logprobs"] for t in c["logprobs"]["tokens"]] == lp["tokens"]
    assert [v for c in chunks if c["logprobs"] for v in c["logprobs"]["token_logprobs"]] == lp["token_logprobs"]


def test_qwen3next_rereads_when_it_cannot_roll_back(tmp_path):
    """A qwen3next slot whose next prompt shares only a short prefix with what it holds: its
    recurrent state rolls back only inside the last decode window, so strata_session_truncate
    answers STRATA_ERR_UNSUPPORTED and the server reads the whole prompt again (cached_tokens 0).
    The answer (greedy, with each step's logprob) must be a fresh server's, bit for bit; a prompt
    continuing inside the window keeps its prefix instead."""
    import zlib
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import test_hf_parity_lib as L
    model = L.build_hf("qwen3next", seed=zlib.crc32(b"qwen3next") % 1000)
    L.save_hf(model, tmp_path / "hf")
    gguf_path = L.convert_hf().convert(tmp_path / "hf", tmp_path / "q3n.gguf", "f32")
    first = {"prompt": list(range(5, 35)), "max_tokens": 6, "temperature": 0, "logprobs": 1}
    second = {"prompt": [5, 6, 7, 40, 41, 42, 43, 44, 45], "max_tokens": 6, "temperature": 0,
              "logprobs": 1}

    def answer(r):
        c = r["choices"][0]
        return c["logprobs"]["token_logprobs"], c["finish_reason"]

    fresh = Server("--parallel", 1, "-c", 256, model=gguf_path)
    try:
        st, want = fresh.json("POST", "/v1/completions", second)
        assert st == 200 and want["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    finally:
        fresh.stop()
    s = Server("--parallel", 1, "-c", 256, model=gguf_path)
    try:
        st, r = s.json("POST", "/v1/completions", first)
        assert st == 200 and r["usage"]["completion_tokens"] == 6
        st, got = s.json("POST", "/v1/completions", second)
        assert st == 200
        assert got["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # read again
        assert answer(got) == answer(want)
        # the same prompt again rolls back inside its window: its prefix is reused
        st, again = s.json("POST", "/v1/completions", second)
        assert st == 200 and again["usage"]["prompt_tokens_details"]["cached_tokens"] == 8
        assert answer(again) == answer(want)
    finally:
        s.stop()
