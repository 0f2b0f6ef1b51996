#!/usr/bin/env python3
"""Train an OLMoE-architecture MoE at Qwen3-30B-A3B's expert count (128 experts, top-8) and export it.

The recipe of ../shared/models/train_tiny_moe.py (the embedded default model's; that file's
numerics, losses and export unchanged) with issue 30's configuration: 12 layers of 128 experts,
top-8, n_embd 256, expert FFN 128, context 1024 (159 M parameters, about 13 M active per token
without the output head). What differs from the recipe:

  - the experts of a layer run as three batched matrix products over a padded (expert, slot, d)
    buffer instead of a loop over experts (128 x 12 small products per step would leave the GPU
    waiting on launches); the sums are the loop's to rounding (--moe loop keeps the loop, for
    checking), and while training an expert takes at most --cap x its mean share of a batch's
    slots (the overflow is dropped and logged: the recipe's initialisation routes most tokens
    alike, so the first steps drop some, until load balancing spreads them; the cap keeps such a
    router from filling the GPU's memory); evaluation and export drop nothing;
  - --batch 32 sequences a step (the recipe: 64), halved until one step with every expert's
    buffer at the cap fits the GPU (a probe before training); --lr 2e-3 (the recipe: 3e-3, for
    half the depth);
  - --vocab-gguf FILE takes the tokenizer (byte-level BPE, tokens and merges) from a GGUF, here
    the default model's 8192-token vocabulary (its ids are `strata tokenize`'s), instead of
    training one (as the recipe does when it is not given);
  - --seconds S trains for S seconds of wall time (warm-up, then a cosine over the budget's
    elapsed share, as the recipe's over its steps), at most --steps steps;
  - text files may be .xz; large documents are cut at paragraphs for a parallel encode
    (--max-chars N: only each file's first N characters);
  - --seq N trains on N-token windows (default: the context), --save-hf writes the transformers
    checkpoint (off: 640 MB in f32), --small a 2-layer config for a smoke test.

Outputs (in --out): tokenizer.json, config.json, the model as an F16 GGUF in the layout llama.cpp
writes for 'olmoe' (NAME-f16.gguf, --name), train_log.json (loss curve, held-out perplexity,
samples, the check against transformers' OlmoeForCausalLM, expert load). Needs torch,
transformers, tokenizers, numpy and the gguf package.

usage: train_moe128.py --train a.txt[.xz] ... --heldout c.txt[.xz] --out DIR [--seconds S]
       [--steps N] [--batch B] [--vocab-gguf models/strata-tiny-moe-q8_0.gguf]
"""
import argparse
import json
import lzma
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CFG = dict(vocab=8192, d=256, layers=12, heads=4, kv_heads=4, head_dim=64, experts=128, top_k=8,
           ff=128, rope_theta=10000.0, eps=1e-5, ctx=1024)
MOE = dict(impl="bmm", cap=4.0)  # set from the command line; cap applies only while training
STATS = dict(dropped=0, slots=0)


def rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x, pos, theta):  # x: (B, H, T, D), NEOX style (rotate halves), as HF rotate_half
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    f = torch.outer(pos.float(), inv)
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(s, c):
        super().__init__()
        d, h, kv, hd, E, ff = c["d"], c["heads"], c["kv_heads"], c["head_dim"], c["experts"], c["ff"]
        s.c = c
        s.attn_norm = nn.Parameter(torch.ones(d))
        s.q = nn.Linear(d, h * hd, bias=False)
        s.k = nn.Linear(d, kv * hd, bias=False)
        s.v = nn.Linear(d, kv * hd, bias=False)
        s.o = nn.Linear(h * hd, d, bias=False)
        s.q_norm = nn.Parameter(torch.ones(h * hd))
        s.k_norm = nn.Parameter(torch.ones(kv * hd))
        s.ffn_norm = nn.Parameter(torch.ones(d))
        s.router = nn.Linear(d, E, bias=False)
        std = 0.02
        s.w_gate = nn.Parameter(torch.randn(E, ff, d) * std)
        s.w_up = nn.Parameter(torch.randn(E, ff, d) * std)
        s.w_down = nn.Parameter(torch.randn(E, d, ff) * std / math.sqrt(2 * c["layers"]))

    def experts_loop(s, h, idx, w):
        """The recipe's loop over experts (one small product each)."""
        c = s.c
        out = torch.zeros_like(h)
        flat = idx.view(-1)
        order = torch.argsort(flat)
        counts = torch.bincount(flat, minlength=c["experts"]).tolist()
        tok = order // c["top_k"]
        wsort = w.view(-1)[order]
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            t = tok[start:start + n]
            he = h[t]
            y = F.linear(F.silu(F.linear(he, s.w_gate[e])) * F.linear(he, s.w_up[e]), s.w_down[e])
            out.index_add_(0, t, (y * wsort[start:start + n, None]).to(out.dtype))
            start += n
        return out

    def experts_bmm(s, h, idx, w):
        """All experts at once: each routed (token, expert) slot goes to row `rank` of its expert's
        block of a zero-padded (E, C, d) buffer, three batched products, then the rows back to
        their tokens weighted by the gate. Zero rows add nothing, so each token's sum is the
        loop's. While training, C is at most MOE['cap'] x the mean load and the rest is dropped."""
        c = s.c
        E, k = c["experts"], c["top_k"]
        N, d = h.shape
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        e_sorted = flat[order]
        counts = torch.bincount(flat, minlength=E)
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(N * k, device=h.device) - starts[e_sorted]
        C = int(counts.max())  # the one host sync of the layer
        tok = order // k
        wsel = w.reshape(-1)[order]
        if s.training and MOE["cap"] > 0:
            cap = max(1, int(math.ceil(MOE["cap"] * N * k / E)))
            if C > cap:
                keep = rank < cap
                STATS["dropped"] += int((~keep).sum())
                e_sorted, rank, tok, wsel = e_sorted[keep], rank[keep], tok[keep], wsel[keep]
            if C > cap or MOE.get("probe"):  # the probe step sizes the batch for the largest buffers
                C = cap
        if s.training:
            STATS["slots"] += N * k
        dt = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else h.dtype
        X = h.new_zeros(E, C, d, dtype=dt)
        X = X.index_put((e_sorted, rank), h[tok].to(dt))
        g = torch.bmm(X, s.w_gate.transpose(1, 2).to(dt))
        u = torch.bmm(X, s.w_up.transpose(1, 2).to(dt))
        Y = torch.bmm(F.silu(g) * u, s.w_down.transpose(1, 2).to(dt))
        y = Y[e_sorted, rank] * wsel[:, None]
        return torch.zeros_like(h).index_add_(0, tok, y.to(h.dtype))

    def forward(s, x, pos):
        c = s.c
        B, T, d = x.shape
        h = rms(x, s.attn_norm, c["eps"])
        q = rms(s.q(h), s.q_norm, c["eps"]).view(B, T, c["heads"], c["head_dim"]).transpose(1, 2)
        k = rms(s.k(h), s.k_norm, c["eps"]).view(B, T, c["kv_heads"], c["head_dim"]).transpose(1, 2)
        v = s.v(h).view(B, T, c["kv_heads"], c["head_dim"]).transpose(1, 2)
        q, k = rope(q, pos, c["rope_theta"]), rope(k, pos, c["rope_theta"])
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.o(a.transpose(1, 2).reshape(B, T, -1))
        h = rms(x, s.ffn_norm, c["eps"]).view(B * T, d)
        logits = s.router(h)
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        w, idx = torch.topk(probs, c["top_k"], dim=-1)  # OLMoE: no renormalization
        if MOE["impl"] == "loop":
            out = s.experts_loop(h, idx, w)
        else:
            out = s.experts_bmm(h, idx, w)
        # load-balancing loss (Switch style) and router z-loss, as OLMoE trains with
        flat = idx.view(-1)
        frac = torch.bincount(flat, minlength=c["experts"]).float() / flat.numel()
        lb = c["experts"] * (frac * probs.mean(0)).sum()
        z = torch.logsumexp(logits.float(), -1).pow(2).mean()
        s.last_load = frac.detach()
        return x + out.view(B, T, d), lb, z


class Model(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c = c
        s.emb = nn.Embedding(c["vocab"], c["d"])
        nn.init.normal_(s.emb.weight, std=0.02)
        s.layers = nn.ModuleList([Layer(c) for _ in range(c["layers"])])
        s.norm = nn.Parameter(torch.ones(c["d"]))
        s.head = nn.Linear(c["d"], c["vocab"], bias=False)
        nn.init.normal_(s.head.weight, std=0.02)

    def forward(s, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = s.emb(ids)
        lbs, zs = 0.0, 0.0
        for l in s.layers:
            x, lb, z = l(x, pos)
            lbs, zs = lbs + lb, zs + z
        return s.head(rms(x, s.norm, s.c["eps"])), lbs / len(s.layers), zs / len(s.layers)


def read_text(path):
    """A text file (.xz: decompressed), its first MOE['max_chars'] characters when that is set."""
    n = MOE.get("max_chars") or -1
    if path.endswith(".xz"):
        with lzma.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            return fh.read(n)
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(n)


def train_tokenizer(files, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    def lines():  # the Debian texts hold a few bytes that are not UTF-8
        for f in files:
            yield from read_text(f).splitlines(keepends=True)
    tok.train_from_iterator(lines(), tr)
    return tok


def gguf_tokenizer(path):
    """The byte-level BPE tokenizer (gpt2 model, gpt-2 pre-tokenizer) a GGUF holds, as the
    tokenizers library's object that train_tokenizer would have made with that vocabulary."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    r = gguf.GGUFReader(path)
    f = r.fields
    model = f["tokenizer.ggml.model"].contents()
    pre = f["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in f else "default"
    if model != "gpt2" or pre not in ("gpt-2", "default"):
        raise SystemExit(f"{path}: tokenizer {model}/{pre}, not byte-level BPE with gpt-2's pre-tokenizer")
    tokens = f["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"].contents()]
    types = f["tokenizer.ggml.token_type"].contents()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t, ty in zip(tokens, types) if ty == 3])
    return tok


def encode_file(tok, path, eos, piece=1 << 16):
    """Token ids of a text file: documents split at blank-line triples, each followed by eos; a
    long document is cut at paragraphs into pieces of about `piece` bytes (encoded in parallel)."""
    text = read_text(path)
    docs = [d for d in text.split("\n\n\n") if d.strip()]
    pieces, ends = [], []
    for d in docs:
        while len(d) > piece:
            cut = d.rfind("\n\n", 0, piece)
            cut = cut + 2 if cut > 0 else piece
            pieces.append(d[:cut])
            ends.append(False)
            d = d[cut:]
        pieces.append(d)
        ends.append(True)
    ids = []
    for enc, end in zip(tok.encode_batch(pieces), ends):
        ids.extend(enc.ids)
        if end:
            ids.append(eos)
    return np.array(ids, dtype=np.int32)


def hf_check(model, c, ids, tmp, save):
    """Load our weights into transformers' OlmoeForCausalLM and compare logits."""
    from transformers import OlmoeConfig, OlmoeForCausalLM
    cfg = OlmoeConfig(vocab_size=c["vocab"], hidden_size=c["d"], intermediate_size=c["ff"],
                      num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                      num_key_value_heads=c["kv_heads"], max_position_embeddings=c["ctx"],
                      rope_theta=c["rope_theta"], rms_norm_eps=c["eps"], num_experts=c["experts"],
                      num_experts_per_tok=c["top_k"], norm_topk_prob=False, tie_word_embeddings=False,
                      pad_token_id=None, bos_token_id=None, eos_token_id=0)
    hf = OlmoeForCausalLM(cfg).float().eval()
    sd = hf.state_dict()
    mine = {}
    mine["model.embed_tokens.weight"] = model.emb.weight
    mine["model.norm.weight"] = model.norm
    mine["lm_head.weight"] = model.head.weight
    for i, l in enumerate(model.layers):
        p = f"model.layers.{i}."
        mine[p + "input_layernorm.weight"] = l.attn_norm
        mine[p + "post_attention_layernorm.weight"] = l.ffn_norm
        mine[p + "self_attn.q_proj.weight"] = l.q.weight
        mine[p + "self_attn.k_proj.weight"] = l.k.weight
        mine[p + "self_attn.v_proj.weight"] = l.v.weight
        mine[p + "self_attn.o_proj.weight"] = l.o.weight
        mine[p + "self_attn.q_norm.weight"] = l.q_norm
        mine[p + "self_attn.k_norm.weight"] = l.k_norm
        mine[p + "mlp.gate.weight"] = l.router.weight
        if p + "mlp.experts.gate_up_proj" in sd:  # transformers >= 5: fused experts
            mine[p + "mlp.experts.gate_up_proj"] = torch.cat([l.w_gate, l.w_up], 1)
            mine[p + "mlp.experts.down_proj"] = l.w_down
        else:
            for e in range(c["experts"]):
                q = p + f"mlp.experts.{e}."
                mine[q + "gate_proj.weight"] = l.w_gate[e]
                mine[q + "up_proj.weight"] = l.w_up[e]
                mine[q + "down_proj.weight"] = l.w_down[e]
    missing = set(sd) - set(mine)
    extra = set(mine) - set(sd)
    if missing or extra:
        print("HF key mismatch; missing", sorted(missing)[:8], "extra", sorted(extra)[:8], file=sys.stderr)
        return None
    for k, v in list(mine.items()):
        if sd[k].shape != v.shape:
            print("shape mismatch", k, sd[k].shape, v.shape, file=sys.stderr)
            return None
    hf.load_state_dict({k: v.detach().float().cpu() for k, v in mine.items()})
    x = torch.tensor(ids[None, :256].astype(np.int64))
    with torch.no_grad():
        ref = hf(x).logits[0]
        model_cpu = model.float().cpu()
        got = model_cpu(x)[0][0]
        model.to(DEV)
    err = ((ref - got).abs().max() / ref.abs().max()).item()
    if save:
        hf.save_pretrained(os.path.join(tmp, "hf"))
    return err


def write_gguf(model, c, tok, path, name):
    import gguf
    w = gguf.GGUFWriter(path, "olmoe")
    w.add_name(name)
    w.add_context_length(c["ctx"])
    w.add_embedding_length(c["d"])
    w.add_feed_forward_length(c["ff"])
    w.add_block_count(c["layers"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_expert_count(c["experts"])
    w.add_expert_used_count(c["top_k"])
    w.add_file_type(1)
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
    w.add_token_merges(merges)
    eos = vocab["<|endoftext|>"]
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    def f16(t):
        return t.detach().float().cpu().numpy().astype(np.float16)

    def f32(t):
        return t.detach().float().cpu().numpy().astype(np.float32)

    w.add_tensor("token_embd.weight", f16(model.emb.weight))
    for i, l in enumerate(model.layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", f32(l.attn_norm))
        w.add_tensor(b + "attn_q.weight", f16(l.q.weight))
        w.add_tensor(b + "attn_k.weight", f16(l.k.weight))
        w.add_tensor(b + "attn_v.weight", f16(l.v.weight))
        w.add_tensor(b + "attn_output.weight", f16(l.o.weight))
        w.add_tensor(b + "attn_q_norm.weight", f32(l.q_norm))
        w.add_tensor(b + "attn_k_norm.weight", f32(l.k_norm))
        w.add_tensor(b + "ffn_norm.weight", f32(l.ffn_norm))
        w.add_tensor(b + "ffn_gate_inp.weight", f32(l.router.weight))
        w.add_tensor(b + "ffn_gate_exps.weight", f16(l.w_gate))
        w.add_tensor(b + "ffn_up_exps.weight", f16(l.w_up))
        w.add_tensor(b + "ffn_down_exps.weight", f16(l.w_down))
    w.add_tensor("output_norm.weight", f32(model.norm))
    w.add_tensor("output.weight", f16(model.head.weight))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", nargs="+", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", default="strata-moe128")
    ap.add_argument("--steps", type=int, default=100000, help="at most this many steps")
    ap.add_argument("--seconds", type=float, default=240.0, help="wall-time budget of the training loop")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=0, help="training window (default: the context)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--moe", choices=("bmm", "loop"), default="bmm")
    ap.add_argument("--cap", type=float, default=4.0, help="training: an expert's slots at most cap x the mean (0: no cap)")
    ap.add_argument("--vocab-gguf", help="take the tokenizer from this GGUF instead of training one")
    ap.add_argument("--eval-chunks", type=int, default=200, help="held-out perplexity over this many windows")
    ap.add_argument("--save-hf", action="store_true", help="also write the transformers checkpoint (hf/)")
    ap.add_argument("--small", action="store_true", help="a 2-layer smoke-test config")
    ap.add_argument("--max-chars", type=int, default=0, help="read only this much of each text (a smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    MOE.update(impl=args.moe, cap=args.cap, max_chars=args.max_chars)
    c = dict(CFG)
    if args.small:
        c.update(layers=2, ctx=128)
        if not args.vocab_gguf:
            c.update(vocab=512)
    torch.manual_seed(args.seed)
    if DEV == "cuda":
        print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
    t0 = time.time()
    if args.vocab_gguf:
        tok = gguf_tokenizer(args.vocab_gguf)
        if tok.get_vocab_size() != c["vocab"]:
            c["vocab"] = tok.get_vocab_size()
    else:
        tok = train_tokenizer(args.train, c["vocab"])
    tok.save(os.path.join(args.out, "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    data = np.concatenate([encode_file(tok, f, eos) for f in args.train])
    held = encode_file(tok, args.heldout, eos)
    print(f"tokenizer + encode {time.time() - t0:.0f}s: train {len(data)} tokens, heldout {len(held)}", flush=True)

    model = Model(c).to(DEV)
    nparams = sum(p.numel() for p in model.parameters())
    active = nparams - c["layers"] * 3 * (c["experts"] - c["top_k"]) * c["ff"] * c["d"] - c["vocab"] * c["d"]
    print(f"params {nparams} ({active} active per token with the head), config {c}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=DEV == "cuda")
    T, B = args.seq or c["ctx"], args.batch
    data_t = torch.from_numpy(data.astype(np.int64)).to(DEV)
    g = torch.Generator(device=DEV).manual_seed(args.seed)

    def step_loss(batch):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits, lb, z = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, c["vocab"]), batch[:, 1:].reshape(-1))
        return loss, lb, z

    # the probe: one forward and backward with every expert buffer at the cap (the most memory a
    # step can take); on running out of memory, half the batch (the tokens a step sees), again
    while DEV == "cuda" and MOE["impl"] == "bmm" and MOE["cap"] > 0:
        MOE["probe"] = True
        try:
            loss, lb, z = step_loss(data_t[:B * (T + 1)].view(B, T + 1))
            (loss + 0.01 * lb + 0.001 * z).backward()
            print(f"probe: batch {B} x {T} fits, peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
            break
        except torch.cuda.OutOfMemoryError:
            print(f"probe: batch {B} x {T} runs out of GPU memory; halving it", flush=True)
            if B <= 2:
                raise
            B //= 2
        finally:
            MOE["probe"] = False
            model.zero_grad(set_to_none=True)
            loss = lb = z = None
            torch.cuda.empty_cache()
    STATS.update(dropped=0, slots=0)
    log, last = [], (0, 0)
    t1 = time.time()
    step, done = 0, 0.0
    while step < args.steps and done < 1.0:
        done = max(step / args.steps, (time.time() - t1) / args.seconds)
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(done, 1.0))))
        for pg in opt.param_groups:
            pg["lr"] = lr
        starts = torch.randint(0, len(data) - T - 1, (B,), device=DEV, generator=g)
        idx = starts[:, None] + torch.arange(T + 1, device=DEV)[None]
        loss, lb, z = step_loss(data_t[idx])
        total = loss + 0.01 * lb + 0.001 * z
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            # the busiest expert's share of a layer's slots over the mean share, the worst layer;
            # the share of slots the cap dropped since the last line
            maxload = max(float(l.last_load.max()) for l in model.layers) * c["experts"]
            dropped = (STATS["dropped"] - last[0]) / max(1, STATS["slots"] - last[1])
            last = (STATS["dropped"], STATS["slots"])
            log.append(dict(step=step, loss=round(loss.item(), 4), lb=round(lb.item(), 4), z=round(z.item(), 3),
                            lr=round(lr, 6), t=round(time.time() - t1, 1), max_load=round(maxload, 2),
                            dropped=round(dropped, 4)))
            print(log[-1], flush=True)
            if not math.isfinite(log[-1]["loss"]):
                print(f"FAIL: the loss is not finite at step {step}; training stopped", flush=True)
                step += 1
                break
        step += 1
    train_s = time.time() - t1
    log.append(dict(step=step - 1, loss=round(loss.item(), 4), lb=round(lb.item(), 4), z=round(z.item(), 3),
                    lr=round(lr, 6), t=round(train_s, 1)))
    print(log[-1], flush=True)
    print(f"trained {step} steps of {B} x {T} tokens ({step * B * T} tokens) in {train_s:.0f}s, "
          f"{step * B * T / train_s:.0f} tok/s; slots dropped by the cap: {STATS['dropped']} of {STATS['slots']}",
          flush=True)

    dropped, slots = STATS["dropped"], STATS["slots"]
    model.eval()
    nll, n = 0.0, 0
    Te = c["ctx"]
    with torch.no_grad():
        ht = torch.from_numpy(held.astype(np.int64)).to(DEV)
        for s in range(0, min(len(held) - Te - 1, args.eval_chunks * Te), Te):
            x = ht[s:s + Te + 1][None]
            lg = model(x[:, :-1])[0].float()
            nll += F.cross_entropy(lg.view(-1, c["vocab"]), x[0, 1:], reduction="sum").item()
            n += Te
    ppl = math.exp(nll / n) if n else float("nan")
    samples = []
    with torch.no_grad():
        for prompt in ["The kernel", "A dictionary is", "To install the module,", "Dictionary, n."]:
            ids = torch.tensor([tok.encode(prompt).ids], device=DEV)
            for _ in range(40):
                nxt = model(ids)[0][0, -1].argmax()
                ids = torch.cat([ids, nxt.view(1, 1)], 1)
            samples.append(tok.decode(ids[0].tolist()))
    t2 = time.time()
    err = hf_check(model, c, held, args.out, args.save_hf)
    print(f"params {nparams}, heldout ppl {ppl:.2f} over {n} tokens, hf max rel err {err} ({time.time() - t2:.0f}s)",
          flush=True)
    for s in samples:
        print("sample:", repr(s), flush=True)
    gpath = os.path.join(args.out, f"{args.name}-f16.gguf")
    write_gguf(model, c, tok, gpath, args.name)
    json.dump(dict(config=c, params=nparams, active_params=active, train_tokens=int(len(data)),
                   heldout_tokens=int(len(held)), steps=step, batch=B, seq=T, lr=args.lr,
                   train_seconds=train_s, tokens_seen=step * B * T, moe=MOE,
                   cap_dropped=dropped, cap_slots=slots, heldout_ppl=ppl, heldout_ppl_tokens=n, hf_rel_err=err,
                   vocab_gguf=args.vocab_gguf, samples=samples, log=log, seconds=time.time() - t0,
                   device=torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu"),
              open(os.path.join(args.out, "train_log.json"), "w"), indent=1)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    print("wrote", gpath, os.path.getsize(gpath), flush=True)
    if err is None or err > 1e-3:
        print(f"FAIL: the module does not match transformers' OlmoeForCausalLM (err {err})", flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
