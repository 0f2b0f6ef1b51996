#!/usr/bin/env python3
"""server_bench.py - strata serve's figures (issue 33, docs/SERVER.md): the time to the first token
of a conversation's next turn with the slot's KV cache reused (only the new turn is read) and
without (another prompt evicted it first, so the whole history is read), at several history
lengths; and the generation rate of 4 streams at once with --parallel 4. Prints a table, writes
JSON. Only the standard library.

    python3 bench/server_bench.py -m MODEL.gguf [--strata ./strata] [--args "--cpu-moe -t 16"]
        [--history 2048,8192,30000] [--turn 64] [--gen 128] [--out FILE.json]
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


class Server:
    def __init__(self, strata, model, args, ctx, parallel):
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

    def ttft(self, prompt, gen=1):
        """Seconds to the first streamed token, and the usage."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        t0 = time.time()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0,
                                                               "stream": True, "stream_options": {"include_usage": True}}))
        r = c.getresponse()
        first, usage = None, None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if first is None and ev["choices"] and ev["choices"][0]["text"]:
                first = time.time() - t0
            if ev.get("usage"):
                usage = ev["usage"]
        return (first if first is not None else time.time() - t0), usage

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--strata", default="./strata")
    ap.add_argument("--args", default="")
    ap.add_argument("--history", default="2048,8192,30000")
    ap.add_argument("--turn", type=int, default=64)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--out", default="bench/results/server_bench.json")
    a = ap.parse_args()
    hist = [int(x) for x in a.history.split(",")]
    ctx = max(hist) + a.turn + 512
    rows = []
    srv = Server(a.strata, a.model, a.args, ctx, 1)
    try:
        for h in hist:
            history = text_of(srv, h, "history")
            srv.ttft(history, 8)  # turn 1: the history read into the slot
            turn = history + " " + text_of(srv, a.turn, "turn")
            reuse, u1 = srv.ttft(turn)
            srv.ttft(text_of(srv, 256, "other"))  # another prompt takes the slot
            full, u2 = srv.ttft(turn)
            rows.append({"history": h, "turn": a.turn, "ttft_reuse_s": reuse, "ttft_full_s": full,
                         "cached_reuse": u1["prompt_tokens_details"]["cached_tokens"],
                         "cached_full": u2["prompt_tokens_details"]["cached_tokens"], "prompt_tokens": u1["prompt_tokens"]})
            print(f"history {h}: time to first token {reuse:.3f} s reused ({u1['prompt_tokens_details']['cached_tokens']} "
                  f"cached) vs {full:.3f} s read whole: {full / reuse:.1f}x", flush=True)
    finally:
        srv.stop()
    srv = Server(a.strata, a.model, a.args, 4096, 4)
    try:
        out = []

        def stream(i):
            t0 = time.time()
            r = srv.post("/v1/completions", {"prompt": text_of(srv, 256, f"s{i}"), "max_tokens": a.gen,
                                             "temperature": 0, "ignore_eos": True})
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
        print(f"4 streams (--parallel 4): {total} tokens in {wall:.2f} s, {total / wall:.1f} tok/s together")
    finally:
        srv.stop()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"model": a.model, "args": a.args, "turns": rows, "parallel": par}, indent=1))
    print("| history | turn | TTFT reused | TTFT whole | ratio |\n|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['history']} | {r['turn']} | {r['ttft_reuse_s']:.3f} s | {r['ttft_full_s']:.3f} s | "
              f"{r['ttft_full_s'] / r['ttft_reuse_s']:.1f}x |")


if __name__ == "__main__":
    main()
