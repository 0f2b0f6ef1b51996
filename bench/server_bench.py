#!/usr/bin/env python3
"""server_bench.py - strata serve's figures (issue 33, docs/SERVER.md): the time to the first token
of a conversation's next turn with the slot's KV cache reused (only the new turn is read) and
without (another prompt evicted it first, so the whole history is read), at several history
lengths; and the generation rate of 4 streams at once with --parallel 4. With --llama-server BIN
the same turns against llama.cpp's server (its cache_prompt keeps a slot's cache as Strata's
slots do), run after Strata's. Prints a table, writes JSON. Only the standard library.

    python3 bench/server_bench.py -m MODEL.gguf [--strata ./strata] [--args "--cpu-moe -t 16"]
        [--history 2048,8192,30000] [--turn 64] [--gen 128] [--out FILE.json]
        [--llama-server BIN --llama-args "-ngl 99 -ncmoe 48 -t 16 -fa on"]
"""
import argparse
import http.client
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

FILLER = (Path(__file__).resolve().parent.parent / "docs" / "EXPERTS.md").read_text()


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, strata, model, args, ctx, parallel, llama=None):
        if llama:  # llama.cpp's server: an explicit port, its readiness from /health
            port = free_port()
            cmd = [llama, "-m", model, "--port", str(port), "-c", str(ctx * parallel), "--parallel", str(parallel),
                   *args.split()]
            self.p = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            self.host, self.port = "127.0.0.1", port
            for _ in range(1200):
                try:
                    c = http.client.HTTPConnection(self.host, port, timeout=2)
                    c.request("GET", "/health")
                    if c.getresponse().status == 200:
                        return
                except OSError:
                    pass
                time.sleep(0.5)
            raise SystemExit("llama-server did not start")
        cmd = [strata, "serve", "-m", model, "--port", "0", "-c", str(ctx), "--parallel", str(parallel),
               "--timeout", "600", *args.split()]
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        for line in self.p.stderr:
            sys.stderr.write(line)
            m = re.search(r"listening on http://([^:]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()
                return
        raise SystemExit("the server did not start")

    def post(self, path, body):
        c = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        c.request("POST", path, body=json.dumps(body))
        r = c.getresponse()
        return json.loads(r.read())

    def stream(self, prompt, gen, **fields):
        """One streamed greedy completion (fields added to the request): seconds from the request
        to the first and to the last chunk with text (None without text), to the end, and the
        usage."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        t0 = time.time()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0,
                                                               "stream": True, "stream_options": {"include_usage": True},
                                                               **fields}))
        r = c.getresponse()
        first = last = usage = None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0].get("text"):
                last = time.time() - t0
                if first is None:
                    first = last
            if ev.get("usage"):
                usage = ev["usage"]
        return first, last, time.time() - t0, usage

    def ttft(self, prompt, gen=1):
        """Seconds to the first streamed token, and the usage."""
        first, _, total, usage = self.stream(prompt, gen, cache_prompt=True)
        return (first if first is not None else total), usage

    def stop(self):
        self.p.send_signal(2)
        self.p.wait(timeout=120)


def text_of(srv, n_tokens, salt=""):
    """A prompt of about n_tokens tokens (the docs' text repeated), its start made distinct by salt."""
    words = (salt + " " + FILLER).split()
    out, n = [], 0
    while n < n_tokens:
        out.append(words[len(out) % len(words)])
        n += 1.3  # (about 1.3 tokens a word; checked below)
    text = " ".join(out)
    toks = srv.post("/tokenize", {"content": text})["tokens"]
    return srv.post("/detokenize", {"tokens": toks[:n_tokens]})["content"]


def cached(u):
    return ((u or {}).get("prompt_tokens_details") or {}).get("cached_tokens", -1)


def measure(a, llama=None):
    """The turns and the 4 streams on one server (Strata's, or llama.cpp's with llama set)."""
    hist = [int(x) for x in a.history.split(",")]
    ctx = max(hist) + a.turn + 512
    args = a.llama_args if llama else a.args
    rows = []
    srv = Server(a.strata, a.model, args, ctx, 1, llama)
    try:
        for h in hist:
            history = text_of(srv, h, "history")
            srv.ttft(history, 8)  # turn 1: the history read into the slot
            turn = history + " " + text_of(srv, a.turn, "turn")
            reuse, u1 = srv.ttft(turn)
            srv.ttft(text_of(srv, 256, "other"))  # another prompt takes the slot
            full, u2 = srv.ttft(turn)
            rows.append({"history": h, "turn": a.turn, "ttft_reuse_s": reuse, "ttft_full_s": full,
                         "cached_reuse": cached(u1), "cached_full": cached(u2)})
            print(f"{'llama-server' if llama else 'strata'} history {h}: time to first token {reuse:.3f} s reused "
                  f"({cached(u1)} cached) vs {full:.3f} s read whole: {full / reuse:.1f}x", flush=True)
    finally:
        srv.stop()
    srv = Server(a.strata, a.model, args, 4096, 4, llama)
    try:
        out = []

        def stream(i):
            t0 = time.time()
            r = srv.post("/v1/completions", {"prompt": text_of(srv, 256, f"s{i}"), "max_tokens": a.gen,
                                             "temperature": 0})
            out.append((r["usage"]["completion_tokens"], time.time() - t0))
        t0 = time.time()
        ts = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        total = sum(n for n, _ in out)
        par = {"streams": 4, "tokens": total, "seconds": wall, "tok_s": total / wall}
        print(f"{'llama-server' if llama else 'strata'} 4 streams (--parallel 4): {total} tokens in {wall:.2f} s, "
              f"{total / wall:.1f} tok/s together", flush=True)
    finally:
        srv.stop()
    return {"turns": rows, "parallel": par}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--args", default="")
    ap.add_argument("--history", default="2048,8192,30000")
    ap.add_argument("--turn", type=int, default=64)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--llama-args", default="-ngl 99")
    ap.add_argument("--out", default="bench/results/server_bench.json")
    a = ap.parse_args()
    res = {"model": a.model, "args": a.args, "strata": measure(a)}
    if a.llama_server:
        res["llama_args"] = a.llama_args
        res["llama_server"] = measure(a, a.llama_server)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print("| server | history | turn | TTFT reused | TTFT whole | ratio |\n|---|---:|---:|---:|---:|---:|")
    for who in ("strata", "llama_server"):
        for r in res.get(who, {}).get("turns", []):
            print(f"| {who} | {r['history']} | {r['turn']} | {r['ttft_reuse_s']:.3f} s | {r['ttft_full_s']:.3f} s | "
                  f"{r['ttft_full_s'] / r['ttft_reuse_s']:.1f}x |")


if __name__ == "__main__":
    main()
