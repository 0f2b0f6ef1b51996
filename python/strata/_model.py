"""_model.py - strata.Model: a loaded GGUF model with its tokenizer, text generation and
teacher-forced logits, over the C API's Models, Tokenizer, Sessions and Sampling sections.

    with strata.Model("model.gguf", n_ctx=1024, n_threads=4) as m:
        ids = m.tokenize("Dictionary, n.")
        for tok, text in m.generate("Dictionary, n.", max_tokens=64, temperature=0.7, seed=1):
            print(text, end="")
        m.logits(ids).shape == (len(ids), m.n_vocab)

Every failing library call raises StrataError.
"""
from __future__ import annotations

import codecs
import json
import os
from typing import Iterator, Sequence

import numpy as np

from ._args import split_args, file_exists, float_arg, int_arg, path_arg, stop_strings, text_arg, token_ids
from ._ffi import StrataError, check, ffi, lib
from ._spec import Source, Speculator

_KV_TYPES = {"f16": lib.STRATA_TYPE_F16, "f32": lib.STRATA_TYPE_F32}


def _str(p) -> str:
    return "" if p == ffi.NULL else ffi.string(p).decode("utf-8", errors="replace")


def _session_stats(sess) -> dict:
    """strata_session_get_stats as a dict (phase_seconds keyed by phase name)."""
    st = ffi.new("strata_session_stats *")
    check(lib.strata_session_get_stats(sess, st), "strata_session_get_stats")
    out = {}
    for name in dir(st[0]):
        if name == "phase_seconds":
            out[name] = {ffi.string(lib.strata_phase_name(i)).decode(): float(st.phase_seconds[i])
                         for i in range(lib.STRATA_PHASE_COUNT)}
        else:
            out[name] = getattr(st, name)
    sp = ffi.new("strata_spec_stats *")
    check(lib.strata_session_get_spec_stats(sess, sp), "strata_session_get_spec_stats")
    for name in ("windows", "drafted", "accepted", "emitted"):
        out["spec_" + name] = int(getattr(sp, name))
    return out


class Model:
    """A model file (strata_model_load) plus the session settings generate()/logits() use.

    Parameters: n_ctx (0: the model's training context), n_threads (0: all cores), n_batch
    (prompt tokens per forward pass, default 512), kv_type ("f16" or "f32"), backend ("cpu", or
    "cuda": every weight and the KV cache on the GPU; creating the session raises where CUDA is
    unusable), degrade_zero / degrade_tau / degrade_eval (the DEGRADE_ZERO approximation,
    docs/DEGRADE_ZERO.md; generated tokens only), route_tail_skip (an approximation, 0 off: each
    token's lightest routed experts skipped while their weights sum to at most it), profile (time the forward phases), ram_budget
    / pipe (routed experts in that many bytes of RAM slots read from disk, docs/EXPERTS.md), vocab_only
    (only the tokenizer; generate/logits then raise), use_mmap, mlock (keep the file's pages
    locked in RAM; raises when RLIMIT_MEMLOCK refuses), hugepages (transparent huge pages for
    the weights, best effort). CUDA sessions also take
    cuda_graphs (replay decode steps as CUDA graphs, default True), cuda_pdl (programmatic
    dependent launch: "auto", the default: for calls of up to 8 tokens; "all"; False), n_cpu_moe (routed experts of
    the first N layers on the CPU; -1: all, llama.cpp's --cpu-moe), stage_experts (with
    n_cpu_moe: batches of this many tokens compute the CPU layers' experts on the GPU; "auto", the
    default: the cost model chooses per batch; 0: never), expert_cache
    (GPU slots for routed experts, "auto" or a count), gpu_mem (bytes for expert_cache="auto"; alone,
    the static split that fits: the first layers' routed experts on the CPU) and
    attn_tc (prompt attention on the tensor cores: True (single f16 operands), False
    (FMA units), "split" or "auto", the default: tensor cores with hi + lo f16 operands,
    "split-p": the probabilities only split),
    pin_experts (experts kept in RAM
    copied into pinned memory: True, False, or "auto", the default: when RAM allows), gpu_prefetch (next-layer experts prefetched into the cache), cpu_misses /
    pcie_frac (cache misses loaded or computed by the CPU, by the cost model or a forced share; with
    n_cpu_moe: that share of a CPU layer's experts in decode steps copied to the GPU; cpu_misses
    "auto", the default: only that CPU-layer split, where the GPU's share computes the CPU's bits), doorbell
    (with n_cpu_moe: decode steps feed the CPU layers to a pool of CPU threads through host-mapped
    memory, docs/EXPERTS.md), cpu_warm (with n_cpu_moe: the CPU threads read the next CPU layer's
    predicted experts into their caches while the GPU computes; default False), cache_admit (with
    expert_cache and doorbell or cpu_misses: a miss evicts a resident expert only when looked up at
    least as often; default False), pool_pcie (with expert_cache and doorbell: the GPU computes up
    to N of a step's missed experts a layer itself, reading the pinned copy over PCIe, while the
    pool computes the rest; "auto": the cost model's count; default 0, off), stage_ahead (with staging: the next CPU layer's experts copied
    to the GPU while a staged layer computes; default False), stage_split (with staging: a prompt
    batch of a CPU layer not staged whole split by the cost model, its heaviest experts on the GPU
    while the CPU computes the rest; default False), defer_cpu (with doorbell and CPU layers, an
    approximation: 0 off, the default; 1 a CPU layer's expert rows of routing weight below
    defer_cpu_below, default 0.1, join before the next layer's FFN; "check": on time, summed in
    that order; docs/DEFERRAL.md), q8_tiles (Q8_0
    dense matrices also kept in the prompt tiles' layout where GPU memory allows: same results,
    faster prompts; default True), iq_stage_tables (the grouped expert kernels' IQ3 codebooks
    staged in shared memory: True, False or "auto", the default: on for compute capability 6.0
    only; same results), q8_sm60 (an approximation for GPUs without a fast dp4a: the decode GEMV
    of those matrices and of a Q8_0 head by the SM60 kernel over packed copies, not the usual
    kernels' bits; default False; docs/OLDER_GPUS.md), q8_sm60_bps (its persistent blocks per SM,
    1..32; 0, the default: 4), layer_split (several GPUs, docs/MULTI_GPU.md: None, the default,
    no split; a sequence of layer counts, one per stage, summing to the model's; or "auto": by
    each device's free memory), split_device (each stage's CUDA device; default 0, 1, ...; a device
    may repeat), expert_cache_devices (with expert_cache, stage 0's cache: stage 1..N's expert
    cache slots, a count or "auto"; 0 or left out: expert_cache scaled by the stage's MoE layers,
    or auto with expert_cache "auto"), pipeline_windows and peer_device (-1: none) — the last two
    not built yet and refused with the reason; CPU sessions ignore them, but a layer split needs
    backend="cuda". cpu_pin binds the session's worker threads one per
    CPU (Model.last_stats["threads_pinned"] says how many)."""

    def __init__(self, path, *, n_ctx: int = 0, n_threads: int = 0, n_batch: int = 512,
                 kv_type: str = "f16", vocab_only: bool = False, use_mmap: bool = True,
                 mlock: bool = False, hugepages: bool = False,
                 backend: str = "cpu", degrade_zero: bool = False, degrade_tau: float = 0.03,
                 degrade_eval: bool = False, profile: bool = False, ram_budget: int = 0,
                 pipe: bool = False, cuda_graphs: bool = True, cuda_pdl="auto", n_cpu_moe: int = 0,
                 stage_experts="auto", expert_cache=0, gpu_mem: int = 0,
                 attn_tc="auto", pin_experts="auto", cpu_pin: bool = False,
                 gpu_prefetch: bool = False, cpu_misses="auto", pcie_frac: float = -1.0,
                 doorbell: bool = False, cpu_warm: bool = False, q8_tiles: bool = True,
                 cache_admit: bool = False, pool_pcie=0, stage_ahead: bool = False, stage_split: bool = False,
                 defer_cpu=0, defer_cpu_below: float = 0.1, route_tail_skip: float = 0.0,
                 iq_stage_tables="auto", q8_sm60: bool = False, q8_sm60_bps: int = 0,
                 layer_split=None, split_device=None, pipeline_windows: bool = False,
                 peer_device: int = -1, expert_cache_devices=None):
        path = path_arg("path", path, must_exist=False)
        n_ctx, n_batch = int_arg("n_ctx", n_ctx), int_arg("n_batch", n_batch)
        n_threads = int_arg("n_threads", n_threads)
        ram_budget, gpu_mem = int_arg("ram_budget", ram_budget), int_arg("gpu_mem", gpu_mem)
        n_cpu_moe = int_arg("n_cpu_moe", n_cpu_moe, lo=-1)
        degrade_tau = float_arg("degrade_tau", degrade_tau, 0.0, 1.0)
        self.route_tail_skip = float_arg("route_tail_skip", route_tail_skip, 0.0, 1.0)
        if self.route_tail_skip >= 1.0:
            raise ValueError(f"route_tail_skip must be below 1, not {route_tail_skip}")
        pcie_frac = float_arg("pcie_frac", pcie_frac, hi=1.0)
        if kv_type not in _KV_TYPES:
            raise ValueError(f"kv_type must be 'f16' or 'f32', not {kv_type!r}")
        if backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', not {backend!r}")
        self.backend = backend
        self.degrade_zero, self.degrade_tau = bool(degrade_zero or degrade_eval), float(degrade_tau)
        self.degrade_eval = bool(degrade_eval)
        self.profile = bool(profile)
        self.ram_budget, self.pipe = int(ram_budget), bool(pipe)
        if expert_cache == "auto":
            expert_cache = -1
        elif isinstance(expert_cache, str):
            raise ValueError(f"expert_cache must be a slot count or 'auto', not {expert_cache!r}")
        else:
            expert_cache = int_arg("expert_cache", expert_cache)
        self.cuda_graphs, self.n_cpu_moe = bool(cuda_graphs), int(n_cpu_moe)
        if cuda_pdl in ("auto", True):
            self.cuda_pdl = 1
        elif cuda_pdl == "all":
            self.cuda_pdl = 2
        elif cuda_pdl is False:
            self.cuda_pdl = 0
        else:
            raise ValueError(f"cuda_pdl must be 'auto', 'all', True or False, not {cuda_pdl!r}")
        if attn_tc == "auto":
            self.attn_tc = -1
        elif attn_tc == "split":
            self.attn_tc = 2
        elif attn_tc == "split-p":
            self.attn_tc = 3
        elif isinstance(attn_tc, str):
            raise ValueError(f"attn_tc must be True, False, 'auto', 'split' or 'split-p', not {attn_tc!r}")
        else:
            self.attn_tc = int(bool(attn_tc))
        if pin_experts == "auto":
            self.pin_experts = -1
        elif isinstance(pin_experts, str):
            raise ValueError(f"pin_experts must be True, False or 'auto', not {pin_experts!r}")
        else:
            self.pin_experts = int(bool(pin_experts))
        self.cpu_pin, self.gpu_prefetch = bool(cpu_pin), bool(gpu_prefetch)
        self.doorbell, self.cpu_warm, self.q8_tiles = bool(doorbell), bool(cpu_warm), bool(q8_tiles)
        if isinstance(iq_stage_tables, str) and iq_stage_tables != "auto":
            raise ValueError(f"iq_stage_tables must be True, False or 'auto', not {iq_stage_tables!r}")
        self.iq_stage_tables = -1 if isinstance(iq_stage_tables, str) else int(bool(iq_stage_tables))
        self.cache_admit, self.stage_ahead = bool(cache_admit), bool(stage_ahead)
        self.stage_split, self.q8_sm60 = bool(stage_split), bool(q8_sm60)
        self.q8_sm60_bps = int_arg("q8_sm60_bps", q8_sm60_bps, lo=0, hi=32)
        if defer_cpu not in (0, 1, False, True, "check"):
            raise ValueError(f"defer_cpu must be 0, 1 or 'check', not {defer_cpu!r}")
        self.defer_cpu = 2 if defer_cpu == "check" else int(defer_cpu)
        self.defer_cpu_below = float(defer_cpu_below)
        if self.defer_cpu and not self.defer_cpu_below > 0:
            raise ValueError(f"defer_cpu_below must be a routing weight above 0, not {defer_cpu_below!r}")
        if cpu_misses == "auto":
            self.cpu_misses = 1 if pcie_frac >= 0 else -1
        elif cpu_misses in (True, False):
            self.cpu_misses = int(bool(cpu_misses) or pcie_frac >= 0)
        else:
            raise ValueError(f"cpu_misses must be True, False or 'auto', not {cpu_misses!r}")
        self.pcie_frac = float(pcie_frac)
        if stage_experts == "auto":
            stage_experts = -1
        elif isinstance(stage_experts, str):
            raise ValueError(f"stage_experts must be a token count or 'auto', not {stage_experts!r}")
        else:
            stage_experts = int_arg("stage_experts", stage_experts)
        self.stage_experts, self.expert_cache, self.gpu_mem = int(stage_experts), int(expert_cache), int(gpu_mem)
        if pool_pcie == "auto":
            self.pool_pcie = -1
        elif isinstance(pool_pcie, str):
            raise ValueError(f"pool_pcie must be a count of experts or 'auto', not {pool_pcie!r}")
        else:
            self.pool_pcie = int_arg("pool_pcie", pool_pcie)
        self._split = split_args(layer_split, split_device, pipeline_windows, peer_device,
                                 expert_cache_devices)
        self.path = path
        self._ptr = ffi.NULL
        file_exists(path)
        self._keep = ffi.NULL  # the session logits(keep=True) appends to
        self._ngram = ffi.NULL  # generate(speculative="ngram")'s drafter, kept across calls
        mp = lib.strata_model_default_params()
        mp.use_mmap = 1 if use_mmap else 0
        mp.vocab_only = 1 if vocab_only else 0
        mp.n_threads = int(n_threads)
        mp.mlock = 1 if mlock else 0
        mp.hugepages = 1 if hugepages else 0
        out = ffi.new("strata_model **")
        check(lib.strata_model_load(os.fsencode(self.path), ffi.new("strata_model_params *", mp), out),
              "strata_model_load")
        self._ptr = out[0]
        self.n_ctx, self.n_threads, self.n_batch = int(n_ctx), int(n_threads), int(n_batch)
        self.kv_type = kv_type
        info = ffi.new("strata_model_info *")
        check(lib.strata_model_get_info(self._ptr, info), "strata_model_get_info")
        self.info = {name: (_str(getattr(info, name)) if name in ("arch", "name")
                            else int(getattr(info, name)))
                     for name in ("arch", "name", "vocab_only", "n_vocab", "n_ctx_train", "n_embd",
                                  "n_layer", "n_head", "n_head_kv", "head_dim", "n_ff", "n_expert",
                                  "n_expert_used", "n_ff_exp", "n_ff_shexp", "n_params",
                                  "n_params_active", "n_bytes")}
        self.n_vocab = self.info["n_vocab"]
        if not vocab_only:  # a bad session option fails here, not at the first generate()
            try:
                check(lib.strata_session_params_check(
                    self._ptr, ffi.new("strata_session_params *", self._session_params())),
                    "strata_session_params_check")
            except BaseException:
                self.close()
                raise
        self.last_stop = None  # why the last generate() ended: eog, length, stop, context
        self.last_stats = None  # strata_session_get_stats of the last logits()/generate() session

    # -- lifetime ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the model. A generator still running keeps the library's model alive (its session
        holds a reference) but raises ValueError at its next step."""
        if getattr(self, "_ngram", ffi.NULL) != ffi.NULL:
            lib.strata_drafter_free(self._ngram)
            self._ngram = ffi.NULL
        if self._keep != ffi.NULL:
            lib.strata_session_free(self._keep)
            self._keep = ffi.NULL
        if self._ptr != ffi.NULL:
            lib.strata_model_free(self._ptr)
            self._ptr = ffi.NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _model(self):
        if self._ptr == ffi.NULL:
            raise ValueError(f"the model {self.path!r} is closed")
        return self._ptr

    # -- tokenizer --------------------------------------------------------------------------------

    @property
    def bos(self) -> int:
        return int(lib.strata_token_bos(self._model()))

    @property
    def eos(self) -> int:
        return int(lib.strata_token_eos(self._model()))

    @property
    def chat_template(self) -> str | None:
        p = lib.strata_model_chat_template(self._model())
        return None if p == ffi.NULL else _str(p)

    def is_eog(self, token: int) -> bool:
        return bool(lib.strata_token_is_eog(self._model(), int(token)))

    def token_text(self, token: int) -> str | None:
        p = lib.strata_token_text(self._model(), int(token))
        return None if p == ffi.NULL else _str(p)

    def tokenize(self, text: str, add_special: bool = True,
                 parse_special: bool = False) -> list[int]:
        """The token ids of text (a str; bytes and numbers raise TypeError)."""
        data = text_arg("text", text).encode("utf-8")
        n_out = ffi.new("int64_t *")
        cap = len(data) + 8
        buf = ffi.new("strata_token[]", cap)
        st = lib.strata_tokenize(self._model(), data, len(data), int(add_special),
                                 int(parse_special), buf, cap, n_out)
        if st == lib.STRATA_ERR_RANGE and n_out[0] > cap:
            cap = int(n_out[0])
            buf = ffi.new("strata_token[]", cap)
            st = lib.strata_tokenize(self._model(), data, len(data), int(add_special),
                                     int(parse_special), buf, cap, n_out)
        check(st, "strata_tokenize")
        return list(ffi.unpack(buf, int(n_out[0])))

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        buf = ffi.new("char[]", 256)
        n = ffi.new("int64_t *")
        st = lib.strata_token_to_piece(self._model(), int(token), int(special), buf, 256, n)
        if st == lib.STRATA_ERR_RANGE and n[0] > 256:
            buf = ffi.new("char[]", int(n[0]))
            st = lib.strata_token_to_piece(self._model(), int(token), int(special), buf, n[0], n)
        check(st, "strata_token_to_piece")
        return ffi.unpack(buf, int(n[0]))

    def detokenize_bytes(self, ids: Sequence[int], special: bool = False,
                         strip_leading_space: bool = False) -> bytes:
        ids = token_ids("ids", ids, self.n_vocab)
        toks = ffi.new("strata_token[]", ids) if ids else ffi.new("strata_token[]", 1)
        n = ffi.new("int64_t *")
        cap = 16 * len(ids) + 16
        buf = ffi.new("char[]", cap)
        st = lib.strata_detokenize(self._model(), toks, len(ids), int(special),
                                   int(strip_leading_space), buf, cap, n)
        if st == lib.STRATA_ERR_RANGE and n[0] > cap:
            cap = int(n[0])
            buf = ffi.new("char[]", cap)
            st = lib.strata_detokenize(self._model(), toks, len(ids), int(special),
                                       int(strip_leading_space), buf, cap, n)
        check(st, "strata_detokenize")
        return ffi.unpack(buf, int(n[0]))

    def detokenize(self, ids: Sequence[int], special: bool = False,
                   strip_leading_space: bool = False) -> str:
        """The text of ids (invalid UTF-8 replaced by U+FFFD)."""
        return self.detokenize_bytes(ids, special, strip_leading_space).decode("utf-8",
                                                                               errors="replace")

    # -- sessions ---------------------------------------------------------------------------------

    def _session_params(self):
        """The strata_session_params of this Model's settings."""
        sp = lib.strata_session_default_params()
        sp.n_ctx = self.n_ctx
        sp.n_batch = self.n_batch
        sp.kv_type = _KV_TYPES[self.kv_type]
        sp.backend = lib.STRATA_BACKEND_CUDA if self.backend == "cuda" else lib.STRATA_BACKEND_CPU
        sp.n_threads = self.n_threads
        sp.degrade_zero, sp.degrade_tau = int(self.degrade_zero), self.degrade_tau
        sp.route_tail_skip = self.route_tail_skip
        sp.degrade_eval = int(self.degrade_eval)
        sp.profile = int(self.profile)
        pl = sp.placement
        pl.ram_budget, pl.pipe = self.ram_budget, int(self.pipe)
        pl.n_cpu_moe, pl.stage_experts = self.n_cpu_moe, self.stage_experts
        pl.expert_cache, pl.gpu_mem = self.expert_cache, self.gpu_mem
        pl.pin_experts, pl.gpu_prefetch = self.pin_experts, int(self.gpu_prefetch)
        pl.cpu_misses, pl.pcie_frac = self.cpu_misses, self.pcie_frac
        pl.doorbell, pl.cpu_warm = int(self.doorbell), int(self.cpu_warm)
        pl.cache_admit, pl.stage_ahead = int(self.cache_admit), int(self.stage_ahead)
        pl.stage_split, pl.pool_pcie = int(self.stage_split), self.pool_pcie
        pl.defer_cpu, pl.defer_cpu_below = self.defer_cpu, self.defer_cpu_below
        cu = sp.cuda
        cu.graphs, cu.pdl, cu.attn_tc, cu.q8_tiles = (int(self.cuda_graphs), self.cuda_pdl,
                                                      self.attn_tc, int(self.q8_tiles))
        cu.iq_stage_tables = self.iq_stage_tables
        cu.q8_sm60, cu.q8_sm60_bps = int(self.q8_sm60), self.q8_sm60_bps
        sp.cpu_pin = int(self.cpu_pin)
        sq = sp.split
        for name, value in self._split.items():
            if isinstance(value, list):
                for i, x in enumerate(value):
                    getattr(sq, name)[i] = x
            else:
                setattr(sq, name, value)
        return sp

    def _new_session(self, sp=None):
        """A session of this Model's settings, or of sp (session params made from them)."""
        if sp is None:
            sp = self._session_params()
        out = ffi.new("strata_session **")
        check(lib.strata_session_create(self._model(), ffi.new("strata_session_params *", sp), out),
              "strata_session_create")
        return out[0]

    def logits(self, tokens: Sequence[int], keep: bool = False) -> np.ndarray:
        """Teacher-forced logits: row i is the distribution after tokens[0..i], shape
        (len(tokens), n_vocab) float32. A fresh session each call unless keep=True, which appends
        to one kept session (reset_kept() starts it over)."""
        ids = token_ids("tokens", tokens, self.n_vocab)
        self._model()
        if not ids:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        if keep:
            if self._keep == ffi.NULL:
                self._keep = self._new_session()
            sess = self._keep
        else:
            sess = self._new_session()
        try:
            out = np.empty((len(ids), self.n_vocab), dtype=np.float32)
            check(lib.strata_session_decode(sess, ffi.new("strata_token[]", ids), len(ids),
                                            ffi.cast("float *", out.ctypes.data), 1),
                  "strata_session_decode")
            return out
        finally:
            self.last_stats = _session_stats(sess)
            if not keep:
                lib.strata_session_free(sess)

    def gpu_mem_split(self, gpu_mem: int, n_ctx: int | None = None) -> int:
        """How many leading layers would keep their routed experts in RAM for the CPU in a GPU session
        given gpu_mem bytes alone (strata_placement_fit: the static split that fits, at this Model's
        n_ctx unless n_ctx is given; no GPU needed): 0 when every layer's experts fit, the layer
        count when none do. StrataError when gpu_mem holds not even the other weights."""
        gpu_mem = int_arg("gpu_mem", gpu_mem, lo=1)
        sp = self._session_params()
        if n_ctx is not None:
            sp.n_ctx = int_arg("n_ctx", n_ctx, lo=1)
        sp.placement.gpu_mem = gpu_mem
        out = ffi.new("int32_t *")
        check(lib.strata_placement_fit(self._model(), ffi.new("strata_session_params *", sp), out),
              "strata_placement_fit")
        return int(out[0])

    def kv_bytes_per_token(self, kv_type: str | None = None) -> int:
        """The bytes one more position adds to a session's KV cache (strata_model_kv_bytes_per_token:
        every layer's K and V, MLA's one latent row, none for qwen3next's recurrent layers) in
        kv_type ("f16" or "f32"; default this Model's). last_stats gives it for the session that ran
        (kv_bytes_per_token, kv_bytes as allocated for n_ctx, state_bytes, state_alloc_bytes)."""
        kv_type = self.kv_type if kv_type is None else kv_type
        if kv_type not in _KV_TYPES:
            raise ValueError(f"kv_type must be 'f16' or 'f32', not {kv_type!r}")
        n = int(lib.strata_model_kv_bytes_per_token(self._model(), _KV_TYPES[kv_type]))
        if n < 0:
            raise ValueError(f"{self.path!r} was loaded vocab_only: it has no KV cache")
        return n

    @property
    def state_bytes(self) -> int:
        """The recurrent state a session keeps whatever its length (qwen3next's DeltaNet layers,
        strata_model_state_bytes); 0 for other models."""
        n = int(lib.strata_model_state_bytes(self._model()))
        if n < 0:
            raise ValueError(f"{self.path!r} was loaded vocab_only: it has no recurrent state")
        return n

    def route_trace(self, prompt: "str | Sequence[int]", max_tokens: int = 0, path=None) -> list:
        """The routing of prompt (text or token ids) and of max_tokens greedy tokens after it, one
        record per layer and forward pass, as `strata run --route-trace` writes them: {"layer",
        "pos" (the pass's first position), "n" (its tokens), "ids" and "w" (n x k, row-major: each
        token's experts and gate weights), "pred" (the experts the previous layer predicted for this
        one, or None)}. Runs a CPU session of this Model's settings (routing is the model's, so the
        trace serves any backend's placement study). path: also written there as JSON lines, with
        the CLI's header line, for bench/routing_stats.py."""
        ids = self.tokenize(prompt) if isinstance(prompt, str) else token_ids("prompt", prompt, self.n_vocab)
        max_tokens = int_arg("max_tokens", max_tokens)
        if not ids:
            raise ValueError("route_trace: an empty prompt")
        sp = self._session_params()
        sp.backend = lib.STRATA_BACKEND_CPU
        sess = self._new_session(sp)
        recs = []

        @ffi.callback("void(int32_t, int32_t, int64_t, int32_t, const int32_t *, const float *, const int32_t *, void *)")
        def on_layer(layer, pos0, n, k, pids, pw, ppred, _ud):
            m = int(n) * int(k)
            recs.append({"layer": int(layer), "pos": int(pos0), "n": int(n),
                         "ids": [int(x) for x in ffi.unpack(pids, m)],
                         "w": [float(x) for x in ffi.unpack(pw, m)],
                         "pred": None if ppred == ffi.NULL else [int(x) for x in ffi.unpack(ppred, m)]})

        try:
            check(lib.strata_session_set_route_trace(sess, on_layer, ffi.NULL), "strata_session_set_route_trace")
            lg = np.empty(self.n_vocab, dtype=np.float32)
            lgp = ffi.cast("float *", lg.ctypes.data)
            check(lib.strata_session_decode(sess, ffi.new("strata_token[]", ids), len(ids), lgp, 0),
                  "strata_session_decode")
            tok = ffi.new("strata_token[1]")
            for _ in range(max_tokens):
                if lib.strata_session_n_past(sess) >= lib.strata_session_n_ctx(sess):
                    break
                tok[0] = int(np.argmax(lg))
                check(lib.strata_session_decode(sess, tok, 1, lgp, 0), "strata_session_decode")
        finally:
            lib.strata_session_set_route_trace(sess, ffi.NULL, ffi.NULL)
            lib.strata_session_free(sess)
        if path is not None:
            info = self.info
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps({"strata_route_trace": 1, "model": str(self.path), "arch": info["arch"],
                                    "n_layer": info["n_layer"], "n_expert": info["n_expert"],
                                    "k": info["n_expert_used"]}) + "\n")
                for r in recs:
                    f.write(json.dumps(r) + "\n")
        return recs

    def reset_kept(self) -> None:
        if self._keep != ffi.NULL:
            lib.strata_session_reset(self._keep)

    # -- generation -------------------------------------------------------------------------------

    def generate(self, prompt: str | Sequence[int], max_tokens: int | None = 128, *,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 seed: int = 0x5eed, stop: str | Sequence[str] | None = (), ignore_eos: bool = False,
                 add_special: bool = True, parse_special: bool = True,
                 speculative: "str | Model | None" = None, draft_max: int = 8, draft_min: int = 0
                 ) -> Iterator[tuple[int, str]]:
        """Yields (token_id, text) per generated token. text is what became final with that token:
        "" while a multi-byte character or a possible stop string is incomplete; when a stop
        string appears the text is cut before it and generation ends. End-of-generation tokens end
        it without being yielded (unless ignore_eos). A fresh session per call; self.last_stop
        tells why it ended ("eog", "length", "stop", "context").

        prompt: text (str) or token ids (a sequence of ints); bytes or a number raise TypeError.
        max_tokens: None generates until end of generation or a full context. stop: one stop
        string or a sequence of them. Arguments are checked here, not at the first next(); a
        generator of a model closed meanwhile raises ValueError.

        speculative: None (one token a step), "ngram" (continuations found earlier in the text,
        remembered across calls on this Model), "self" (this model with only the experts its fast
        tier holds, misses dropped: needs ram_budget on the CPU or expert_cache on the GPU, else
        StrataError at the first step), "mtp" (the file's own MTP layer: deepseek2, glm4moe and
        qwen3next files that carry one; on the GPU where it fits a CUDA session, else on the CPU:
        last_stats["drafters"][0]["describe"] says which; StrataError at the first step for a file
        without one) or a
        Model with the same vocabulary (a draft model, run in a session of its own with its own
        settings): drafted tokens are verified in windows
        of one forward pass, at most draft_max (1..16) a window, a plain step when fewer than
        draft_min are drafted. "auto" or (Model, "auto"): every drafter the call can have (n-gram
        drafts, the draft Model when given, the self-draft where the session has a fast tier),
        each under a draft policy of its own, which chooses each step's drafter and window length
        from the acceptance seen and the windows' learnt cost, plain steps where windows do not
        pay (docs/SPECULATIVE.md). The text is the same as without (greedy, or sampled with the
        same seed). last_stats["spec_windows"], ["spec_drafted"], ["spec_accepted"],
        ["spec_emitted"] count what the windows did, ["drafters"] each drafter's share, and with
        the policy its "policy_*" entries what it chose and measured."""
        if isinstance(prompt, str):
            ids = self.tokenize(prompt, add_special=add_special, parse_special=parse_special)
        else:
            ids = token_ids("prompt", prompt, self.n_vocab)
        max_tokens = -1 if max_tokens is None else int_arg("max_tokens", max_tokens)
        stops = stop_strings(stop)
        self._model()
        if not ids:
            if self.bos < 0:
                raise ValueError("empty prompt and the model has no BOS token")
            ids = [self.bos]
        sp = lib.strata_sampler_default_params()
        sp.temperature, sp.top_k, sp.top_p, sp.min_p = temperature, top_k, top_p, min_p
        sp.repeat_penalty, sp.repeat_last_n = repeat_penalty, repeat_last_n
        sp.presence_penalty, sp.frequency_penalty = presence_penalty, frequency_penalty
        sp.seed = int_arg("seed", seed, lo=None) & 0xffffffffffffffff
        spec = self._spec_args(speculative, draft_max, draft_min)
        return self._generate(ids, max_tokens, sp, stops, ignore_eos, spec)

    def _spec_args(self, speculative, draft_max, draft_min):
        """(draft source, draft_max, draft_min, policy on) checked, or None for plain steps."""
        if speculative is None:
            return None
        dmax = int_arg("draft_max", draft_max, lo=1, hi=lib.STRATA_DRAFT_MAX)
        dmin = int_arg("draft_min", draft_min, lo=0, hi=lib.STRATA_DRAFT_MAX)
        auto = isinstance(speculative, tuple) and len(speculative) == 2 and speculative[1] == "auto"
        source = speculative[0] if auto else speculative
        if isinstance(source, Model):
            source._model()
            return (source, dmax, dmin, auto)
        if source in ("ngram", "auto") and not auto:
            return ("ngram", dmax, dmin, source == "auto")
        if source in ("self", "mtp") and not auto:
            return (source, dmax, dmin, False)
        if source == "draft":
            raise ValueError(f"speculative={speculative!r}: needs the draft Model itself: use "
                             "\"ngram\", \"self\", \"mtp\", \"auto\" or a Model")
        raise TypeError("speculative must be None, \"ngram\", \"self\", \"mtp\", \"auto\", a Model or "
                        "(Model, \"auto\"), "
                        f"not {speculative!r}")

    def _sources(self, spec, sess):
        """The drafters of spec on sess: the source asked for, or under auto every one the call can
        have (this Model's n-gram one, kept across calls and freed by close(); the draft Model's,
        over a session of its own; the self-draft where sess has a fast tier, left out where not)."""
        source, auto = spec[0], spec[3]
        out = ffi.new("strata_drafter **")
        made = []
        try:
            if source == "ngram" or auto:
                if self._ngram == ffi.NULL:
                    check(lib.strata_drafter_ngram_create(2, 4, out), "strata_drafter_ngram_create")
                    self._ngram = out[0]
                made.append(Source("prompt lookup", self._ngram, own=False, cheap=True))
            if isinstance(source, Model):
                params = ffi.new("strata_session_params *", source._session_params())
                check(lib.strata_drafter_model_create(self._model(), source._model(), params, out),
                      "strata_drafter_model_create")
                made.append(Source("draft model", out[0], own=True, cheap=False, reads_prompt=True))
            if source == "self":
                check(lib.strata_drafter_self_create(sess, out), "strata_drafter_self_create")
                made.append(Source("self-draft", out[0], own=True, cheap=False))
            if source == "mtp":
                check(lib.strata_drafter_mtp_create(sess, out), "strata_drafter_mtp_create")
                made.append(Source("mtp", out[0], own=True, cheap=False))
            elif auto and lib.strata_drafter_self_create(sess, out) == lib.STRATA_OK:
                made.append(Source("self-draft", out[0], own=True, cheap=False))
        except StrataError:
            for s in made:
                s.close()
            raise
        return made

    def _generate(self, ids, max_tokens, sp, stops, ignore_eos, spec=None):
        model = self._model()
        sess = self._new_session()
        smp_out = ffi.new("strata_sampler **")
        spx = None
        try:
            check(lib.strata_sampler_create(ffi.new("strata_sampler_params *", sp), self.n_vocab,
                                            smp_out), "strata_sampler_create")
            if spec is not None:
                spx = Speculator(self._sources(spec, sess), spec[1], spec[2], spec[3])
        except StrataError:
            if smp_out[0] != ffi.NULL:
                lib.strata_sampler_free(smp_out[0])
            lib.strata_session_free(sess)
            raise
        smp = smp_out[0]
        # speculative: the window's tokens still to hand out (the sampler has accepted them), and
        # the tokens so far for the drafter
        window, hist = [], list(ids)
        logits = ffi.new("float[]", self.n_vocab)
        tok = ffi.new("strata_token *")
        # the CLI's candidates path: the top_k + repeat_last_n best logits after each step (on a
        # CUDA session selected on the GPU), the same tokens as the whole row
        need = lib.strata_sampler_top_needed(smp)
        cids = ffi.new("strata_token[]", max(need, 1))
        cvals = ffi.new("float[]", max(need, 1))
        have_cand = False
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        prev = None  # the last (token, text) not yet yielded (the final flush joins it)
        self.last_stop = "length"
        try:
            n_ctx = lib.strata_session_n_ctx(sess)
            if len(ids) > n_ctx:
                raise StrataError(lib.STRATA_ERR_RANGE, f"the prompt has {len(ids)} tokens but "
                                  f"the context holds {n_ctx}", "generate")
            for t in ids:
                lib.strata_sampler_accept(smp, t)
            check(lib.strata_session_decode(sess, ffi.new("strata_token[]", ids), len(ids), logits,
                                            0), "strata_session_decode")
            if spx is not None:
                spx.start(hist)
            n_gen = 0
            while max_tokens < 0 or n_gen < max_tokens:
                self._model()  # raises once the model is closed (the session still holds it)
                if window:
                    t = window.pop(0)
                else:
                    if have_cand:
                        check(lib.strata_sampler_sample_top(smp, cids, cvals, need, tok),
                              "strata_sampler_sample_top")
                    else:
                        check(lib.strata_sampler_sample(smp, logits, tok), "strata_sampler_sample")
                    t = int(tok[0])
                    if ignore_eos or not lib.strata_token_is_eog(model, t):
                        lib.strata_sampler_accept(smp, t)
                    if spx is not None:
                        spx.plain_done(t)
                if not ignore_eos and lib.strata_token_is_eog(model, t):
                    self.last_stop = "eog"
                    break
                hist.append(t)
                n_gen += 1
                pending += dec.decode(self.token_to_piece(t))
                cut = min((i for i in (pending.find(s) for s in stops) if i >= 0), default=-1)
                if cut >= 0:
                    if prev is not None:
                        yield prev
                    prev = (t, pending[:cut])
                    pending = ""
                    self.last_stop = "stop"
                    break
                hold = 0
                for s in stops:
                    for h in range(min(len(s) - 1, len(pending)), hold, -1):
                        if pending.endswith(s[:h]):
                            hold = h
                            break
                if prev is not None:
                    yield prev
                prev = (t, pending[:len(pending) - hold])
                pending = pending[len(pending) - hold:]
                if max_tokens >= 0 and n_gen >= max_tokens:
                    break
                if window:  # the rest of this window: in the cache already
                    continue
                n_past = lib.strata_session_n_past(sess)
                if n_past >= n_ctx:
                    self.last_stop = "context"
                    break
                if spx is not None:
                    self._model()  # close() during the yield above freed the n-gram drafter
                    window = spx.step(sess, smp, hist, min(n_ctx - n_past - 1, max_tokens - n_gen - 1
                                                           if max_tokens >= 0 else n_ctx)) or []
                    if window:
                        continue
                    tok[0] = t  # a plain step after a window's last token
                if need > 0:
                    check(lib.strata_session_decode_topk(sess, tok, 1, need, cids, cvals),
                          "strata_session_decode_topk")
                    have_cand = True
                else:
                    check(lib.strata_session_decode_gen(sess, tok, 1, logits, 0),
                          "strata_session_decode_gen")
            if self.last_stop != "stop":
                pending += dec.decode(b"", final=True)
            if prev is not None:
                yield (prev[0], prev[1] + (pending if self.last_stop != "stop" else ""))
        finally:
            self.last_stats = _session_stats(sess)
            if spx is not None:
                self.last_stats.update(spx.stats())
                spx.close()
            lib.strata_sampler_free(smp)
            lib.strata_session_free(sess)

    def generate_text(self, prompt, max_tokens: int = 128, **kw) -> str:
        """The generated text as one string (generate() joined)."""
        return "".join(text for _, text in self.generate(prompt, max_tokens, **kw))
