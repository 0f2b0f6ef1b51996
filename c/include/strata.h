/* strata.h - the public C ABI of Strata, an inference engine for Mixture-of-Experts models:
 * models, tokenizer, sessions (and where their experts are placed), statistics and sampling.
 *
 * Two more public headers hold the file-format libraries under it: strata_gguf.h (reading GGUF
 * files) and strata_quant.h (tensor block formats, quantizing model files). Each compiles alone
 * as C99 (-pedantic) and as C++11.
 *
 * Usage: greedy text from a prompt.
 *
 *     strata_model *model;
 *     strata_model_params mp = strata_model_default_params();
 *     if (strata_model_load("model.gguf", &mp, &model) != STRATA_OK) {
 *         fprintf(stderr, "%s\n", strata_last_error());
 *         return 1;
 *     }
 *     strata_session_params sp = strata_session_default_params();
 *     sp.n_ctx = 4096;
 *     sp.placement.n_cpu_moe = -1;          // CUDA sessions: routed experts on the CPU
 *     strata_session *session;
 *     if (strata_session_create(model, &sp, &session) != STRATA_OK) { ... }
 *     strata_token toks[512], next;
 *     int64_t n;
 *     strata_tokenize(model, "Hello", 5, 1, 0, toks, 512, &n);
 *     strata_session_decode_greedy(session, toks, n, &next);   // the prompt, then the next token
 *     for (int i = 0; i < 32 && !strata_token_is_eog(model, next); i++) {
 *         char piece[64];
 *         int64_t len;
 *         if (strata_token_to_piece(model, next, 0, piece, sizeof piece, &len) == STRATA_OK)
 *             fwrite(piece, 1, (size_t)len, stdout);
 *         strata_session_decode_greedy(session, &next, 1, &next);
 *     }
 *     strata_session_free(session);
 *     strata_model_free(model);
 *
 * Conventions
 *   - Every fallible call returns a strata_status: 0 (STRATA_OK) on success, a negative code on
 *     failure. On failure, strata_last_error() returns a message for the calling thread that names
 *     what went wrong (for files: the field and the byte offset; for options: the parameter). The
 *     message stays valid until the same thread's next failing call.
 *   - Handles are opaque. Each create/open has a matching free; free(NULL) is a no-op.
 *   - No library function exits, aborts or prints.
 *   - Thread-safety: functions that take a const handle may be called from many threads at once;
 *     functions that take a non-const handle need the caller to serialize calls on that handle.
 *   - Sizes are in bytes unless a name says otherwise; element counts are int64_t.
 *   - Parameter structs are filled by their *_default_params() function and passed by pointer;
 *     set only the fields you mean to change. Structs may grow, at their end or in their nested
 *     groups, in any release whose STRATA_ABI_VERSION changes (the shared library's soname,
 *     libstrata.so.STRATA_ABI_VERSION, changes with it); code built against this header checks
 *     strata_abi_version() == STRATA_ABI_VERSION at start-up before passing a struct.
 *
 * Sections: version and status; backends and CPU kernels; tensor types; models; tokenizer;
 * sessions (placement, statistics); sampling; speculative decoding.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define STRATA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Version and status
 * ------------------------------------------------------------------------------------------- */

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 5
#define STRATA_VERSION_PATCH 0
/* The binary interface: a new number whenever a struct's layout or a function's signature
 * changes; the shared library's soname is libstrata.so.<this>. */
#define STRATA_ABI_VERSION 13

typedef enum strata_status {
    STRATA_OK = 0,
    STRATA_ERR_INVALID_ARG = -1,  /* a NULL, out-of-range or contradictory argument */
    STRATA_ERR_IO = -2,           /* open/read/mmap failed */
    STRATA_ERR_FORMAT = -3,       /* malformed or hostile file content */
    STRATA_ERR_NOMEM = -4,        /* an allocation failed */
    STRATA_ERR_UNSUPPORTED = -5,  /* valid request this build or type cannot serve */
    STRATA_ERR_NOT_FOUND = -6,    /* no such key, tensor or index */
    STRATA_ERR_TYPE = -7,         /* a value exists but has another type */
    STRATA_ERR_BACKEND = -8,      /* a compute backend (e.g. CUDA) call failed */
    STRATA_ERR_INTERNAL = -9,     /* a bug: please report it */
    STRATA_ERR_RANGE = -10        /* a buffer too small or a limit reached (e.g. the context is full) */
} strata_status;

/* "MAJOR.MINOR.PATCH". Static storage. Thread-safe. */
STRATA_API const char *strata_version(void);
/* MAJOR*10000 + MINOR*100 + PATCH of the library actually loaded (compare with the macros). */
STRATA_API int strata_version_number(void);
/* STRATA_ABI_VERSION of the library actually loaded: a caller compiled against another value
 * must not pass it structs. */
STRATA_API int strata_abi_version(void);
/* Short name of a status code, e.g. "STRATA_ERR_FORMAT". Static storage. Thread-safe. */
STRATA_API const char *strata_status_name(strata_status status);
/* Message of this thread's last failing call ("" if none). Thread-local storage. */
STRATA_API const char *strata_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Backends and CPU kernels
 * ------------------------------------------------------------------------------------------- */

typedef enum strata_backend_kind {
    STRATA_BACKEND_CPU = 0,
    STRATA_BACKEND_CUDA = 1,
    STRATA_BACKEND_COUNT = 2
} strata_backend_kind;

typedef struct strata_backend_info {
    strata_backend_kind kind;
    const char *name;        /* "cpu", "cuda" */
    int compiled;            /* 1 if this build contains the backend */
    int available;           /* 1 if it can run on this machine now */
    char detail[256];        /* available: what it found (ISA, device name); else: why not */
} strata_backend_info;

/* Fills *info for one backend kind. Probes the machine on first use (the CUDA probe loads the
 * driver). Thread-safe. */
STRATA_API strata_status strata_backend_query(strata_backend_kind kind, strata_backend_info *info);
/* Measures, now, the rate at which the backend's memory copies (bytes read + bytes written per
 * second): the bound that decode rates are read against. CUDA: a 256 MiB device-to-device copy,
 * the median of six after a warm-up (512 MiB of device memory for the while). UNSUPPORTED for
 * the CPU backend (its DRAM rate needs every core), an error where the backend cannot run.
 * Thread-safe; not to be run beside timed work. */
STRATA_API strata_status strata_backend_copy_rate(strata_backend_kind kind, double *bytes_per_s);
/* The CUDA devices this process sees (0 in a build without CUDA or without a usable driver: not an
 * error). Thread-safe. */
STRATA_API strata_status strata_cuda_device_count(int32_t *count);
/* Free and total bytes of CUDA device `device`'s memory now (cudaMemGetInfo); INVALID_ARG for a
 * device that does not exist, UNSUPPORTED without CUDA. */
STRATA_API strata_status strata_cuda_device_memory(int32_t device, int64_t *free_bytes, int64_t *total_bytes);

/* CPU instruction set levels of the dot-product kernels. */
typedef enum strata_cpu_isa {
    STRATA_ISA_SCALAR = 0,   /* portable C reference */
    STRATA_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C */
    STRATA_ISA_AVX512 = 2,   /* AVX-512 F/BW/VL (+VNNI when present) */
    STRATA_ISA_BEST = 99     /* whatever the CPU supports best */
} strata_cpu_isa;

/* Highest ISA level this CPU and build support. Thread-safe. */
STRATA_API strata_cpu_isa strata_cpu_isa_supported(void);
/* Selects the kernels used by strata_vec_dot (process-wide; default STRATA_ISA_BEST). A level
 * the CPU lacks gives STRATA_ERR_UNSUPPORTED. Not safe to call while other threads compute. */
STRATA_API strata_status strata_cpu_isa_set(strata_cpu_isa isa);
/* The level in use now. */
STRATA_API strata_cpu_isa strata_cpu_isa_active(void);
/* "scalar", "avx2", "avx512", "avx512-vnni"; static storage. */
STRATA_API const char *strata_cpu_isa_name(strata_cpu_isa isa);
/* AMX tiles for several activation rows per weight row (prompt batches, grouped experts) of
 * Q4_0 / Q4_K / Q5_K / Q6_K / Q8_0 weights: the same bits as the AVX-512 kernels, used at that
 * level only. Supported: 1 when the CPU has AMX-INT8 and the OS granted the tile state. Set
 * (process-wide, default on where supported; not safe while other threads compute): enabling
 * where unsupported gives STRATA_ERR_UNSUPPORTED. Active: supported, enabled and the AVX-512
 * level in use. Thread-safe except set. */
STRATA_API int strata_cpu_amx_supported(void);
STRATA_API strata_status strata_cpu_amx_set(int enable);
STRATA_API int strata_cpu_amx_active(void);

/* ---------------------------------------------------------------------------------------------
 * Tensor types (values are the GGUF/ggml type ids)
 * ------------------------------------------------------------------------------------------- */

typedef enum strata_type {
    STRATA_TYPE_F32 = 0,
    STRATA_TYPE_F16 = 1,
    STRATA_TYPE_Q4_0 = 2,
    STRATA_TYPE_Q4_1 = 3,
    STRATA_TYPE_Q5_0 = 6,
    STRATA_TYPE_Q5_1 = 7,
    STRATA_TYPE_Q8_0 = 8,
    STRATA_TYPE_Q8_1 = 9,
    STRATA_TYPE_Q2_K = 10,
    STRATA_TYPE_Q3_K = 11,
    STRATA_TYPE_Q4_K = 12,
    STRATA_TYPE_Q5_K = 13,
    STRATA_TYPE_Q6_K = 14,
    STRATA_TYPE_Q8_K = 15,
    STRATA_TYPE_IQ2_XXS = 16,
    STRATA_TYPE_IQ2_XS = 17,
    STRATA_TYPE_IQ3_XXS = 18,
    STRATA_TYPE_IQ1_S = 19,
    STRATA_TYPE_IQ4_NL = 20,
    STRATA_TYPE_IQ3_S = 21,
    STRATA_TYPE_IQ2_S = 22,
    STRATA_TYPE_IQ4_XS = 23,
    STRATA_TYPE_I8 = 24,
    STRATA_TYPE_I16 = 25,
    STRATA_TYPE_I32 = 26,
    STRATA_TYPE_I64 = 27,
    STRATA_TYPE_F64 = 28,
    STRATA_TYPE_IQ1_M = 29,
    STRATA_TYPE_BF16 = 30,
    STRATA_TYPE_TQ1_0 = 34,
    STRATA_TYPE_TQ2_0 = 35,
    STRATA_TYPE_MXFP4 = 39,
    STRATA_TYPE_COUNT = 40   /* one past the largest id; not every id below it is a type */
} strata_type;

/* 1 if id names a tensor type a GGUF file may hold (known layout), else 0. */
STRATA_API int strata_type_is_known(int id);
/* "f32", "q4_K", ... (ggml spelling); "unknown" for unknown ids. Static storage. */
STRATA_API const char *strata_type_name(strata_type type);
/* Parses a name as strata_type_name writes it (case-insensitive); STRATA_ERR_NOT_FOUND if none. */
STRATA_API strata_status strata_type_from_name(const char *name, strata_type *out);
/* Weights per block (1 for plain types) and bytes per block; 0 for unknown ids. */
STRATA_API int64_t strata_type_block_size(strata_type type);
STRATA_API int64_t strata_type_block_bytes(strata_type type);
/* Bytes of one row of n weights; -1 if n is not a multiple of the block size or type unknown. */
STRATA_API int64_t strata_row_bytes(strata_type type, int64_t n);

/* ---------------------------------------------------------------------------------------------
 * Models
 *
 * A strata_model is an opened GGUF model: architecture, hyperparameters, weights (zero-copy views
 * into the file mapping) and vocabulary. It is immutable once loaded; any number of sessions and
 * threads may use it at once. Supported architectures: olmoe, qwen2moe, qwen3moe, llama (dense and
 * with experts, i.e. Mixtral), granitemoe, qwen2, qwen3. vocab_only loads just the tokenizer (for
 * vocabulary-only GGUF files).
 * ------------------------------------------------------------------------------------------- */

typedef struct strata_model strata_model;
typedef int32_t strata_token;
typedef struct strata_gguf strata_gguf; /* strata_gguf.h */

typedef struct strata_model_params {
    int use_mmap;        /* 1 (default): map the file; 0: read it into memory */
    int vocab_only;      /* 1: load only the vocabulary (no weights are required) */
    int n_threads;       /* CPU compute threads of sessions on this model; <= 0: online CPUs */
    int mlock;           /* 1: keep the file's pages locked in RAM (strata_gguf_params.mlock) */
    int hugepages;       /* 1: transparent huge pages for the weights (strata_gguf_params) */
} strata_model_params;

typedef struct strata_model_info {
    const char *arch;          /* general.architecture, e.g. "olmoe" */
    const char *name;          /* general.name or "" */
    int vocab_only;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;          /* attention key/value length per head */
    int32_t n_ff;              /* dense FFN width (0 if none) */
    int32_t n_expert;          /* routed experts per layer (0: dense model) */
    int32_t n_expert_used;     /* top-k */
    int32_t n_ff_exp;          /* width of one routed expert */
    int32_t n_ff_shexp;        /* width of the shared expert (0 if none) */
    int64_t n_params;          /* weights in the file */
    int64_t n_params_active;   /* weights one token uses (experts counted top-k times) */
    uint64_t n_bytes;          /* tensor bytes in the file */
} strata_model_info;

/* Defaults: use_mmap 1, vocab_only 0, n_threads 0, mlock 0, hugepages 0. */
STRATA_API strata_model_params strata_model_default_params(void);
/* Opens and validates path (all shards of a split model). Unknown architectures, missing or
 * mis-shaped tensors and bad hyperparameters are errors naming the key or tensor. */
STRATA_API strata_status strata_model_load(const char *path, const strata_model_params *params,
                                           strata_model **out);
/* Drops the caller's reference. Sessions keep their model alive (each holds a reference from
 * strata_session_create to strata_session_free), so the model may be freed before its sessions:
 * its memory goes with the last of them. The caller must not use the model handle afterwards
 * (tokenizer calls included); its sessions stay usable. Thread-safe against sessions being freed
 * on other threads. */
STRATA_API void strata_model_free(strata_model *model);
/* Strings in *out live as long as the model. */
STRATA_API strata_status strata_model_get_info(const strata_model *model, strata_model_info *out);
/* The underlying file; owned by the model. */
STRATA_API const strata_gguf *strata_model_gguf(const strata_model *model);
/* The bytes one more position adds to a session's KV cache of this model in kv_type
 * (STRATA_TYPE_F16 or STRATA_TYPE_F32), from the model's shapes: every layer with a cache, K and V
 * of each KV head (sliding-window layers too: the cache keeps every position for them); with
 * latent attention (deepseek2) one row of kv_lora + rope values and no V; none for qwen3next's
 * recurrent layers. The MTP drafter's own cache is not counted. -1 for a NULL or vocab_only model
 * or another kv_type. */
STRATA_API int64_t strata_model_kv_bytes_per_token(const strata_model *model, strata_type kv_type);
/* The bytes of the recurrent state a session keeps whatever its length (qwen3next's DeltaNet
 * layers: each value head's delta-rule state and the conv's last inputs, f32), from the shapes;
 * 0 for models without recurrent layers, -1 for a NULL or vocab_only model. */
STRATA_API int64_t strata_model_state_bytes(const strata_model *model);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer
 *
 * From the GGUF metadata: byte-level BPE ("gpt2" model) with the pre-tokenizer that
 * tokenizer.ggml.pre names, or SentencePiece ("llama" model) with byte fallback.
 * ------------------------------------------------------------------------------------------- */

/* Tokenizes text (len bytes, any UTF-8; invalid bytes are handled as the tokenizer's byte rules
 * say). add_special: prepend BOS when the vocabulary asks for it (tokenizer.ggml.add_bos_token)
 * and append EOS when add_eos_token says so. parse_special: text like "<|im_start|>" becomes the
 * control token instead of plain text. *n_out is always the number of tokens the text needs; if
 * it exceeds cap, nothing beyond cap is written and the call returns STRATA_ERR_RANGE. */
STRATA_API strata_status strata_tokenize(const strata_model *model, const char *text, int64_t len,
                                         int add_special, int parse_special, strata_token *out,
                                         int64_t cap, int64_t *n_out);
/* The bytes token stands for (byte-level BPE decoded; SentencePiece "\xe2\x96\x81" as space,
 * <0xXX> as the byte). Control tokens give their text only when special is 1, else nothing.
 * *len_out is the full length; returns STRATA_ERR_RANGE if it exceeds cap. */
STRATA_API strata_status strata_token_to_piece(const strata_model *model, strata_token token,
                                               int special, char *buf, int64_t cap,
                                               int64_t *len_out);
/* Concatenated pieces of n tokens (the leading space SentencePiece adds is removed when
 * strip_leading_space is 1 and the first token is not special). Same buffer rule as above. */
STRATA_API strata_status strata_detokenize(const strata_model *model, const strata_token *tokens,
                                           int64_t n, int special, int strip_leading_space,
                                           char *buf, int64_t cap, int64_t *len_out);
/* The text of token as stored in the vocabulary (NUL-terminated copy), NULL if out of range. */
STRATA_API const char *strata_token_text(const strata_model *model, strata_token token);
/* BOS / EOS ids, -1 if the vocabulary has none. */
STRATA_API strata_token strata_token_bos(const strata_model *model);
STRATA_API strata_token strata_token_eos(const strata_model *model);
/* 1 if generating token should end generation (EOS, EOT, <|im_end|>, <|endoftext|>, ... every
 * end-of-generation token the vocabulary marks). */
STRATA_API int strata_token_is_eog(const strata_model *model, strata_token token);
/* 1 if token is a control (special) token. */
STRATA_API int strata_token_is_control(const strata_model *model, strata_token token);
/* tokenizer.chat_template, or NULL if the file has none. */
STRATA_API const char *strata_model_chat_template(const strata_model *model);

/* ---------------------------------------------------------------------------------------------
 * Sessions
 *
 * A strata_session is the mutable state of one sequence on a model: KV cache and position. Not
 * thread-safe: one thread at a time per session (it uses the model's CPU threads internally).
 * ------------------------------------------------------------------------------------------- */

typedef struct strata_session strata_session;

/* Progress of a long operation: done of total units ("upload": weight bytes copied to the GPU
 * while a CUDA session is created; "prompt": tokens of a strata_session_decode call that spans
 * several batches). Called on the calling thread, done increasing up to total; it must not call
 * back into the session. */
typedef void (*strata_progress_fn)(const char *what, int64_t done, int64_t total, void *user_data);

/* Where a session's routed experts live and move (CUDA sessions unless a field says otherwise).
 * Every mode gives the all-resident session's results, bit for bit, except where a field says it
 * computes in other arithmetic. */
typedef struct strata_placement_params {
    int32_t n_cpu_moe;    /* the routed experts of the first n_cpu_moe layers stay in RAM and the
                             CPU computes them; -1: every layer; 0 (default): all on the GPU.
                             Attention, routers and shared experts stay on the GPU. Layers count
                             by index as llama.cpp's --n-cpu-moe: a model's leading dense layers
                             (deepseek2) are among the first n_cpu_moe and have none. */
    int32_t expert_cache; /* routed experts live in a cache of this many GPU slots (at least
                             n_expert; the least frequently used expert goes), loaded over PCIe
                             from RAM when routed and not resident. 0 (default): every expert
                             resident; -1: as many slots as fit in gpu_mem (or the free memory)
                             after the other weights, the KV cache and scratch, less a margin
                             (the stats tell) */
    int64_t gpu_mem;      /* bytes of GPU memory the session may use with expert_cache -1 (0, the
                             default: what is free) */
    int64_t ram_budget;   /* CPU and CUDA sessions: bytes of RAM for routed experts (0, the
                             default: the whole file through its mapping). Experts not resident
                             are read from the file with O_DIRECT into that many expert-sized
                             slots (the least frequently used expert goes); the budget must hold
                             one token's experts, and prompt batches shrink so one layer's
                             experts fit. CUDA sessions: with expert_cache or n_cpu_moe
                             (page-locked slots the GPU cache loads from and the CPU layers read),
                             not with pin_experts 1, gpu_prefetch, cpu_misses 1, stage_experts > 0
                             or doorbell. */
    int pipe;             /* with ram_budget: the next layer's predicted experts (its norm and
                             router on the hidden state now) are read in a background thread while
                             this layer computes. CUDA sessions: in calls of up to 8 tokens, the
                             prediction on the GPU, experts already in GPU slots not read */
    int32_t stage_experts; /* with n_cpu_moe: a batch of at least this many tokens has a CPU
                             layer's routed experts copied to the GPU (one layer's worth of
                             slots) and computed there; fewer tokens are computed by the CPU. -1
                             (default): per batch, whichever the cost model predicts faster from
                             the PCIe rate and the CPU's expert cost measured at create (stats);
                             0: never. */
    int cpu_misses;       /* with expert_cache: 1 makes each missed expert either loaded into a
                             slot or computed by the CPU from RAM while the GPU computes the
                             others, as the cost model predicts faster. In calls of up to 8
                             tokens, where every cache layer's expert type has GPU kernels in the
                             CPU's arithmetic (the types below), every slot, hit or miss, is then
                             computed in the CPU's arithmetic: the same bits whatever the
                             residency and the share (stats cache_split 1); elsewhere the hits in
                             the GPU's and the CPU's misses in the CPU's (close, not
                             bit-identical; cache_split 2). With n_cpu_moe (not with doorbell or
                             ram_budget): in calls of up to 8 tokens a share of each CPU layer's
                             experts is copied to the GPU and computed there while the CPU
                             computes the rest; where every CPU layer's expert type has GPU kernels
                             in the CPU's arithmetic (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K), the result is
                             the CPU's alone, bit for bit, whatever the share (stats cpu_split 1).
                             -1 (default): that exact split of the CPU layers, no cache split; 1:
                             both splits, the CPU layers' in the GPU's arithmetic where the exact
                             one does not apply; 0: neither. */
    float pcie_frac;      /* with cpu_misses: < 0 (default -1): the cost model chooses; 0..1: the
                             heaviest round(pcie_frac x misses) are loaded, the rest computed */
    int pin_experts;      /* with expert_cache or n_cpu_moe: 1 copies the routed experts kept in
                             RAM into pinned host memory at create (the CPU's expert step and the
                             PCIe loads then read the copy at the pinned rate). -1 (default): pin
                             when the copy leaves 4 GiB of MemAvailable free (else, or when the
                             pinned allocation fails, read the mapping; the stats tell); 0: read
                             the file's mapping. */
    int gpu_prefetch;     /* with expert_cache: in decode steps, the next layer's experts are
                             predicted (its router on the current hidden state) and the missing
                             ones copied into free slots on a copy stream while this layer
                             computes. 0 (default): demand loads only. */
    int doorbell;         /* with n_cpu_moe: in calls of up to 8 tokens the CPU layers' experts
                             are computed by a pool of CPU threads that the GPU feeds through
                             host-mapped memory: the GPU publishes a layer's rows and routing and
                             waits on the device for the pool's flag, so the host does not wait
                             for each CPU layer. With expert_cache: in those calls the pool
                             computes the cache's misses while the GPU computes the hits (the
                             CPU's arithmetic for the misses; where every cache layer's expert
                             type has GPU kernels in the CPU's arithmetic, as for cpu_misses,
                             for the hits too: the same bits whatever the residency, stats
                             cache_split 1; else 2). Not with ram_budget (nor, with
                             expert_cache, gpu_prefetch, cpu_misses 1 or degrade_zero). 0
                             (default): the host hands each CPU layer over. */
    int cpu_warm;         /* with n_cpu_moe, host hand-off (not doorbell): in calls of up to 8
                             tokens a CPU layer's routing comes down with the next CPU layer's
                             prediction, and the CPU threads read those experts into their caches
                             while the GPU computes the next attention; stopped when the real
                             routing arrives. 0 (default) off, 1 on. */
    int cache_admit;      /* with expert_cache, where the CPU may compute a miss (doorbell's pool,
                             or cpu_misses 1): a missed expert takes a slot in place of a resident
                             one only when it has been looked up at least as often (use counts
                             that halve every 16 x slots look-ups); the CPU computes the others, so
                             spread routing does not churn the cache over PCIe. 1 on, 0 off. */
    int stage_ahead;      /* with n_cpu_moe and staging (stage_experts): after a staged batch's
                             experts are enqueued, the next CPU layer's experts (all of them: a
                             long batch touches nearly all) are copied into a second layer's
                             worth of slots on a copy stream while this layer computes, so the
                             next staged layer waits less. The same kernels and bytes: the same
                             results. 0 (default) off, 1 on. */
    int stage_split;      /* with n_cpu_moe and staging: a prompt-sized batch (more than 8 tokens)
                             of a CPU layer that is not staged whole is split by the cost model:
                             its experts with the most rows copied to the stage slots and
                             computed by the GPU while the CPU computes the others, at once. The
                             GPU's share in its own arithmetic, so a prompt's results depend on
                             the share the start-up timings pick (within the CPU/GPU tolerance).
                             0 (default) off, 1 on. */
    int defer_cpu;        /* with n_cpu_moe and doorbell (the CPU expert pool), in the calls the
                             pool serves (decode steps and verify windows): 1 defers a CPU layer's
                             expert rows of routing weight below defer_cpu_below, which join the
                             residual only before the next layer's FFN, so the next layer's
                             attention runs while the CPU finishes (an approximation: that
                             attention misses them); the rows at or above it join on time. The
                             last layer is never deferred. 2 (check): every row on time, but
                             summed in the deferred split's two parts (what the reordering alone
                             changes). 0 (default): off, nothing allocated, the same steps. */
    float defer_cpu_below; /* with defer_cpu: the routing weight that splits a deferred layer's
                             CPU rows (default 0.1); >= 1: every CPU row deferred, no split. */
    int pool_pcie;        /* with expert_cache and doorbell (the pool computes the cache's misses),
                             in the calls the pool serves: the GPU computes some of each call's
                             missed experts itself, its kernel reading their weights straight from
                             the pinned copy over PCIe (no slot, no host step), while the pool
                             computes the rest. 0 (default) off; N > 0: at most N a layer call;
                             -1: the count the cost model predicts to finish first. Needs the
                             pinned copy (pin_experts not 0). Where the cache's split is exact
                             (strata_session_stats.cache_split 1) the results are the same bits
                             whatever the count; otherwise the GPU's share is in its arithmetic. */
} strata_placement_params;

/* How a CUDA session runs its kernels. None of them changes the results except attn_tc, which
 * computes prompt attention in other arithmetic (close to the CPU's, not bit-identical). */
typedef struct strata_cuda_params {
    int graphs;           /* 1 (default): a single-token step is captured into a CUDA graph once
                             and replayed as one launch per step; 0: every kernel launched every
                             step; 2: also steps whose CPU layers go to the expert pool
                             (placement.doorbell) */
    int pdl;              /* on compute 9.0+: programmatic dependent launch (a kernel may start
                             while the one before finishes; each still waits for its inputs). 1
                             (default): calls of at most 8 tokens; 2: every call; 0: never */
    int attn_tc;          /* prompt batches' attention (64+ query rows per KV head, head_dim
                             64/128, f16 cache) on the tensor cores, f32 softmax. -1 (default) and
                             2: queries and probabilities each split into two f16 parts (hi + lo);
                             1: single f16 parts; 3: the probabilities split, the queries single;
                             0: the FMA kernel; other values are refused. Decode steps are
                             unaffected. */
    int q8_tiles;         /* 1 (default): each Q8_0 attention and dense FFN matrix is also kept in
                             the prompt tiles' layout (quants as rows of bytes, scales apart),
                             which batches of 32+ tokens copy into shared memory, at the cost of
                             those matrices' GPU memory once more, taken last and only where the
                             session's other allocations and the margin leave room (the stats
                             count the copies and the matrices without one); 0 off. */
    int iq_stage_tables;  /* the grouped expert kernels copy the IQ3_XXS / IQ3_S codebooks and
                             the sign masks into shared memory and decode from there (1) or read
                             them through the read-only cache (0); -1 (default): on for compute
                             capability 6.0 only. The same results either way. */
    int q8_sm60;          /* 1: the decode GEMV of every Q8_0 attention and dense FFN matrix and of a
                             Q8_0 output head takes the SM60 kernel (written for GPUs without a fast
                             dp4a, Pascal GP100; docs/OLDER_GPUS.md) over a packed copy (the tiles'
                             layout, made for these matrices even with q8_tiles 0, the head included,
                             where memory allows as for q8_tiles). An approximation: not the usual
                             kernels' bits (another f32 summation order). 0 (default): off. */
    int q8_sm60_bps;      /* with q8_sm60: the SM60 kernel's persistent blocks per SM, 1..32; 0
                             (default): 4 */
} strata_cuda_params;

/* Layers spread over CUDA devices of one host (docs/MULTI_GPU.md): stage i runs layers_i
 * consecutive layers on CUDA device device[i] with its own weights, KV cache and scratch, and the
 * hidden state goes from stage to stage (a peer copy between devices with peer access, through
 * pinned host memory otherwise, a device-to-device copy where two stages share a device). Each
 * layer runs the kernels of the unsplit session, so a split gives its bits. n_stages 0 and
 * auto_layers 0 (the defaults): no split, every layer on device 0 as before. */
#define STRATA_MAX_STAGES 8
typedef struct strata_split_params {
    int32_t n_stages;     /* 0 (default): no split; 1..STRATA_MAX_STAGES: layers[] and device[]
                             hold that many stages (auto_layers with 0: one stage per device) */
    int32_t layers[8];    /* [STRATA_MAX_STAGES] layers per stage, each >= 1, summing to the
                             model's n_layer; all 0 with auto_layers */
    int auto_layers;      /* 1: layers[] chosen at create in proportion to each stage's device's
                             free memory (a device named twice shares it); 0 (default) */
    int32_t device[8];    /* [STRATA_MAX_STAGES] each stage's CUDA device, 0 .. count - 1
                             (strata_cuda_device_count); a device may repeat (one card runs a
                             split: the same bits, no gain) */
    int pipeline_windows; /* 1: verify windows and prompt batches pipelined over the stages (a
                             stage starts the next window while the next stage runs this one);
                             needs stages on two distinct devices. Not built yet: refused. */
    int32_t peer_device;  /* -1 (default): none; else the CUDA device that computes the routed
                             experts of every stage (expert parallelism through NCCL's send and
                             receive; needs libnccl.so.2 at run time). Not built yet: refused. */
    int32_t expert_cache[8]; /* [STRATA_MAX_STAGES] stage i's expert cache slots for i >= 1 (at
                             least n_expert; -1 as many as fit on its device), as
                             placement.expert_cache is stage 0's; needs placement.expert_cache. 0
                             (default): placement.expert_cache scaled by the stage's layers with
                             routed experts over stage 0's, or -1 where that is -1 (entry 0 unused:
                             nonzero is refused) */
} strata_split_params;

typedef struct strata_session_params {
    int32_t n_ctx;        /* context length in tokens; 0: the model's n_ctx_train */
    int32_t n_batch;      /* tokens per forward pass while reading a prompt (default 512) */
    strata_type kv_type;  /* STRATA_TYPE_F16 (default) or STRATA_TYPE_F32 */
    int n_threads;        /* <= 0: the model's */
    int cpu_pin;          /* 1: bind the session's worker threads one per CPU of the creating
                             thread's affinity set (the creating thread itself is not bound: the
                             application may bind it to the set's first CPU); 0 (default): the
                             scheduler places them */
    strata_backend_kind backend; /* STRATA_BACKEND_CPU (default), or STRATA_BACKEND_CUDA: every
                                    weight and the KV cache on GPU 0, experts as placement says
                                    (STRATA_ERR_UNSUPPORTED at create when CUDA is unusable or the
                                    model's shape or weight types have no GPU kernel; the message
                                    says which) */
    /* DEGRADE_ZERO, an opt-in approximation: in decode steps and verify windows of <= 4 tokens
     * (strata_session_decode_gen, never while reading a prompt), a routed expert that missed its
     * deadline and whose gate weight for that position is below degrade_tau is dropped; each
     * position keeps its heaviest expert; weights are not renormalized. Experts resident on the
     * GPU or placed on the CPU never miss, so with every expert resident it changes nothing.
     * degrade_eval counts every routed slot as missed (the deterministic worst case, for quality
     * tables; CPU sessions only). */
    int degrade_zero;     /* 0 (default) or 1 */
    float degrade_tau;    /* 0 <= tau <= 1, default 0.03 */
    int degrade_eval;     /* 0 (default) or 1; needs degrade_zero */
    int profile;          /* 1: time the phases of every forward pass (strata_session_stats); on
                             the GPU each phase is followed by a device synchronization, which
                             slows the pass down: for measurements, not for serving */
    strata_progress_fn progress;  /* NULL (default): no progress reports */
    void *progress_data;          /* passed to progress */
    strata_placement_params placement; /* where routed experts live and move */
    strata_cuda_params cuda;           /* CUDA sessions' kernel choices */
    float route_tail_skip; /* an approximation, 0 (default) off; 0 < p < 1: in every call, each
                              token's routed slots are dropped lightest first while the dropped
                              routing weights sum to at most p, never its heaviest slot; the kept
                              weights are not renormalized (st_route_tail_skip, docs/DEFERRAL.md) */
    strata_split_params split;         /* CUDA sessions: layers over several devices (none) */
} strata_session_params;

/* Defaults: n_ctx 0, n_batch 512, kv_type F16, n_threads 0, backend CPU, degrade_tau 0.03,
 * placement.stage_experts -1, .cpu_misses -1, .pcie_frac -1, .pin_experts -1, cuda.graphs 1,
 * .pdl 1, .attn_tc -1, .q8_tiles 1, .iq_stage_tables -1 (.q8_sm60 0), split.peer_device -1;
 * everything else 0. */
STRATA_API strata_session_params strata_session_default_params(void);
/* Checks params against model as strata_session_create would, without creating anything: every
 * option's range, which options combine, a gpu_mem that holds the static split it chooses (alone
 * in a CUDA session), a ram_budget that holds one token's experts, and that the backend is usable
 * on this machine. STRATA_OK, or the status and message a create with
 * these params would fail with (creates can still fail for want of memory). params NULL: the
 * defaults. */
STRATA_API strata_status strata_session_params_check(const strata_model *model,
                                                     const strata_session_params *params);
/* The static split gpu_mem alone makes a CUDA session use (placement.gpu_mem > 0; expert_cache and
 * n_cpu_moe taken as 0; params' n_ctx, kv_type, stage_experts and stage_ahead count): *n_cpu_layers
 * gets how many leading layers keep their routed experts in RAM for the CPU (0: every layer's fit
 * on the GPU; n_layer: none do). Needs no GPU: arithmetic on the model's tensor sizes. A gpu_mem too
 * small even for the other weights is STRATA_ERR_NOMEM with the figures. */
STRATA_API strata_status strata_placement_fit(const strata_model *model, const strata_session_params *params,
                                              int32_t *n_cpu_layers);
STRATA_API strata_status strata_session_create(const strata_model *model,
                                               const strata_session_params *params,
                                               strata_session **out);
STRATA_API void strata_session_free(strata_session *session);
/* Forgets all tokens (position 0). */
STRATA_API void strata_session_reset(strata_session *session);
/* Drops tokens from position n_keep on (0 <= n_keep <= n_past). */
STRATA_API strata_status strata_session_truncate(strata_session *session, int32_t n_keep);
STRATA_API int32_t strata_session_n_past(const strata_session *session);
STRATA_API int32_t strata_session_n_ctx(const strata_session *session);

/* Evaluates n tokens at positions n_past .. n_past+n-1 (split into batches of n_batch) and
 * appends them to the KV cache. logits: NULL, or room for n_vocab floats (all_logits 0: the
 * last token's) or n x n_vocab floats (all_logits 1: every token's, row i for token i).
 * STRATA_ERR_RANGE (nothing evaluated) if n_past + n would exceed n_ctx; STRATA_ERR_INVALID_ARG
 * for a token id outside the vocabulary. */
STRATA_API strata_status strata_session_decode(strata_session *session, const strata_token *tokens,
                                               int64_t n, float *logits, int all_logits);
/* As strata_session_decode for n generated tokens: a decode step (n = 1) or a verify window of
 * draft tokens. Opt-in approximations (degrade_zero) apply only here, and only for n <= 4; with
 * every approximation off the result is bit-identical to strata_session_decode. */
STRATA_API strata_status strata_session_decode_gen(strata_session *session,
                                                   const strata_token *tokens, int64_t n,
                                                   float *logits, int all_logits);

/* As strata_session_decode_gen (n >= 1 generated tokens), and *next = the greedy token after the
 * last one: the argmax of its logits (NaN as -inf, the lowest id on ties), the token
 * strata_sampler_sample picks at temperature 0 without penalties; STRATA_ERR_INVALID_ARG when no
 * logit is finite. A CUDA session computes it on the GPU and copies one token down instead of
 * n_vocab logits. */
STRATA_API strata_status strata_session_decode_greedy(strata_session *session,
                                                      const strata_token *tokens, int64_t n,
                                                      strata_token *next);

/* As strata_session_decode_gen (n >= 1 generated tokens), and the k largest logits after the last
 * one with their token ids, in the sampler's candidate order (larger first, ties to the lower id,
 * NaN as -inf): ids[k], logits[k]; 1 <= k <= min(n_vocab, STRATA_TOPK_MAX). Feed them to
 * strata_sampler_sample_top. A CUDA session selects them on the GPU and copies k pairs down
 * instead of n_vocab logits. */
#define STRATA_TOPK_MAX 1024
STRATA_API strata_status strata_session_decode_topk(strata_session *session, const strata_token *tokens,
                                                    int64_t n, int32_t k, strata_token *ids, float *logits);

/* Routing trace: after a layer routes the tokens of a forward pass, fn gets the layer, the batch's
 * first position, its n tokens and, per token, the k experts the router chose and their gate
 * weights (ids[n][k], weights[n][k], before any DEGRADE_ZERO drop), and pred[n][k]: the experts
 * the previous layer predicted for this one (its norm and router applied to the hidden state
 * then), or NULL at the first layer. The arrays are valid during the call; fn must not call back
 * into the session. fn NULL stops the trace. CPU sessions (STRATA_ERR_UNSUPPORTED for others):
 * the routing is the model's, so a CPU trace serves placement studies of any backend. */
typedef void (*strata_route_fn)(int32_t layer, int32_t pos0, int64_t n, int32_t k, const int32_t *ids,
                                const float *weights, const int32_t *pred, void *user_data);
STRATA_API strata_status strata_session_set_route_trace(strata_session *session, strata_route_fn fn,
                                                        void *user_data);

/* Route replay (benchmarks only: the output is no longer the model's): every MoE layer's routing
 * replaced by a recorded one, a file that `bench/routing_stats.py TRACE --replay-out FILE` writes
 * from a routing trace, so that a placement can be timed on another model's routing (a trained
 * model's, on a file of the same expert count and top-k). Layer il at position p takes the trace's
 * layer il mod its layers at its decode step p mod its steps, each expert weighted 1/k; the
 * router still runs. CPU and CUDA sessions (there without CUDA graphs or the one-token fused
 * router, whose routing would not be replayed). path NULL turns it off. STRATA_ERR_FORMAT for a
 * malformed file, STRATA_ERR_INVALID_ARG for a trace of another top-k or more experts. */
STRATA_API strata_status strata_session_set_route_replay(strata_session *session, const char *path);

/* Activation trace (what `strata imatrix` sums into an importance matrix): before a weight matrix
 * of a forward pass is applied, fn gets the tensor's name in the file, the expert (0..n_expert-1
 * of a 3-D expert tensor; -1 for a 2-D tensor) and the input rows the matrix multiplies: n rows
 * of n_cols floats (n_cols the tensor's row length), row i at x + (rows ? rows[i] : i) * n_cols;
 * for an expert tensor only the rows of the tokens routed to that expert (after any DEGRADE_ZERO
 * drop), for ffn_down(_exps/_shexp) the hidden rows silu(gate) * up. Traced: standard attention
 * layers' q/k/v/output projections, routers, routed and shared experts, dense FFNs and the output
 * head (for the rows whose logits are computed); not traced: deepseek2's latent attention and
 * qwen3next's attention and recurrent layers. The arrays are valid during the call; fn must not
 * call back into the session. fn NULL stops the trace; off (the default) it costs nothing. CPU
 * sessions (STRATA_ERR_UNSUPPORTED for others). */
typedef void (*strata_act_fn)(const char *tensor, int32_t expert, const float *x, int64_t n_cols,
                              int64_t n, const int32_t *rows, void *user_data);
STRATA_API strata_status strata_session_set_act_trace(strata_session *session, strata_act_fn fn,
                                                      void *user_data);

/* The phases of a forward pass that profile mode times. */
typedef enum strata_phase {
    STRATA_PHASE_EMBED = 0,       /* token embeddings (and their copy to the GPU) */
    STRATA_PHASE_QKV,             /* attention norm, q/k/v projections, biases, q/k norms */
    STRATA_PHASE_ATTN,            /* RoPE, KV-cache store, attention */
    STRATA_PHASE_ATTN_OUT,        /* output projection and residual */
    STRATA_PHASE_ROUTER,          /* FFN norm, router, top-k (and DEGRADE_ZERO) */
    STRATA_PHASE_EXPERTS,         /* routed experts, or the dense FFN */
    STRATA_PHASE_SHARED,          /* shared expert, residual */
    STRATA_PHASE_OUTPUT,          /* final norm, logits (and their copy back) */
    STRATA_PHASE_COUNT
} strata_phase;

/* "embed", "qkv", ...; "?" for an unknown phase. Static storage. */
STRATA_API const char *strata_phase_name(strata_phase phase);

/* What a session did, for the stats footer. */
typedef struct strata_session_stats {
    int degrade_zero;             /* the session's setting */
    int degrade_eval;
    float degrade_tau;
    int64_t degrade_slots;        /* routed slots of decode steps where a drop was allowed */
    int64_t degrade_zeroed;       /* slots dropped */
    double degrade_layer_min;     /* smallest and largest per-layer share zeroed (0..1) */
    double degrade_layer_max;
    int profile;                  /* the session's setting; the fields below are 0 without it */
    int64_t forward_calls;        /* forward passes (batches) timed */
    int64_t forward_tokens;       /* tokens in them */
    double phase_seconds[STRATA_PHASE_COUNT];
    /* profile mode, CPU sessions of MoE models (and GPU sessions with cpu_warm, every call):
     * layer l+1's experts predicted at layer l's router (layer l+1's norm and router applied to
     * the hidden state then), scored when l+1 routes (predict_slots, predict_hits below) */
    /* where routed experts ran: slot-rows (one token's use of one expert) whose expert was in
     * GPU memory, and slot-rows the CPU computed (every slot of a CPU session; the n_cpu_moe
     * layers of a GPU session); per layer, the smallest and largest share served from the GPU */
    int64_t expert_slots_gpu;
    int64_t expert_slots_cpu;
    double layer_gpu_share_min, layer_gpu_share_max;
    int64_t pcie_bytes;           /* bytes copied between host and GPU by the forward passes */
    int64_t disk_bytes;           /* expert bytes read from disk (ram_budget) */
    int32_t expert_cache_slots;   /* slots of the expert cache (ram_budget; 0: none) */
    int64_t expert_cache_hits;    /* expert look-ups served by a resident slot */
    int64_t expert_cache_misses;  /* look-ups that had to fill a slot (or wait for a prefetch) */
    double layer_hit_rate_min;    /* smallest and largest per-layer share of look-ups served by a */
    double layer_hit_rate_max;    /* resident slot (late prefetches are misses) */
    int64_t prefetch_issued;      /* experts prefetched (pipe) */
    int64_t prefetch_timely;      /* needed, and read before their layer needed them */
    int64_t prefetch_late;        /* needed while still being read (counted as misses) */
    int64_t graph_launches;       /* CUDA-graph steps run (cuda.graphs) */
    int64_t graph_rebuilds;       /* of them, captures (the others replayed a captured graph) */
    int32_t threads_pinned;       /* worker threads bound to a CPU (cpu_pin) */
    int64_t predict_slots;        /* routed slots scored */
    int64_t predict_hits;         /* of them, predicted */
    /* stage_experts -1 (auto): the figures measured at create that decide each batch */
    double pcie_bytes_per_s;      /* host -> device rate of one expert's copies */
    double pcie_latency_s;        /* one small copy */
    double cpu_expert_fixed_s;    /* CPU: one expert's step for r rows = fixed + r * per_row */
    double cpu_expert_per_row_s;
    int64_t stage_batches;        /* CPU-layer batches computed on the GPU (stage_experts) */
    int64_t cpu_batches;          /* CPU-layer batches computed by the CPU (split ones too) */
    int64_t pinned_bytes;         /* the pinned copy of the experts kept in RAM (pin_experts) */
    int64_t cpu_warm_bytes;       /* cpu_warm: expert bytes the CPU threads read ahead of their
                                     layer (its prediction scored in predict_slots / _hits) */
    /* GPU sessions with n_cpu_moe, host hand-offs (every call, no profile needed): how many CPU
     * layers' batches were handed down, the host's time waiting for them (the GPU's part since
     * the previous hand-off, and the latency) and its time in their CPU steps (with cpu_misses,
     * enqueueing the GPU's share too) */
    int64_t cpu_hand_offs;
    double cpu_hand_wait_s;
    double cpu_step_s;
    /* cpu_misses: the CPU's share of a split as the cost model prices it (measured at create,
     * one token's step over 1 and 8 of a layer's experts): share_step once, plus share_expert
     * an expert (and cpu_expert_per_row_s a further row) */
    double cpu_share_step_s;
    double cpu_share_expert_s;
    /* q8_tiles: GPU bytes of the Q8_0 tile copies, and the matrices left without one (made last,
     * only in GPU memory nothing else of the session claimed) */
    int64_t q8_tiles_bytes;
    int32_t q8_tiles_skipped;
    /* iq_stage_tables as the CUDA session resolved it (1 on, 0 off; 0 for a CPU session) */
    int32_t iq_stage_tables;
    /* cpu_misses with n_cpu_moe: 0 no split of the CPU layers' decode steps; 1 split with the
     * GPU's share in the CPU's arithmetic (the same bits whatever the share: the auto default
     * where the types and the CPU's kernels allow); 2 split in the GPU's own arithmetic
     * (cpu_misses 1 elsewhere: the bits follow the share) */
    int32_t cpu_split;
    /* gpu_mem without expert_cache or n_cpu_moe (a CUDA session): the leading layers whose routed
     * experts the fit left in RAM for the CPU (0: all on the GPU); -1: no fit made */
    int32_t gpu_mem_cpu_layers;
    /* GPU sessions with n_cpu_moe: the decode rate the CPU layers allow by the figures measured
     * at create (per layer one token's experts, split with PCIe as the split would, else all on
     * the CPU); the GPU's own time is not counted, so a real run stays below it. 0: not known */
    double plan_decode_tok_s;
    /* stage_split: CPU-layer prompt batches split between the GPU (the experts with the most
     * rows, staged) and the CPU (the rest); counted in cpu_batches too */
    int64_t split_batches;
    /* defer_cpu: the mode the session runs (0 when the placement has no pool to defer), the split
     * weight (0: every CPU row deferred) and the CPU layers' calls deferred (or, check, split) */
    int32_t defer_cpu;
    float defer_cpu_below;
    int64_t defer_calls;
    /* route_tail_skip: the session's p and the routed slots it dropped */
    float route_tail_skip;
    int64_t route_tail_skipped;
    /* q8_sm60: the matrices whose decode GEMV takes the SM60 kernel (with a packed copy; the
     * output head counted), 0 when off */
    int32_t q8_sm60_mats;
    /* the session's context in memory (not counters: reset leaves them; no profile needed):
     * kv_bytes_per_token is
     * what one more position adds to the KV cache in the session's kv_type, from the model's shapes
     * (strata_model_kv_bytes_per_token: the same on every backend); kv_bytes the cache as the
     * backend allocated it for n_ctx positions (CPU: n_ctx x kv_bytes_per_token; a GPU session
     * sizes K and V by the larger of the key and value head widths and rounds each layer's up to
     * 256 bytes). state_bytes: qwen3next's recurrent state from the shapes
     * (strata_model_state_bytes); state_alloc_bytes what the backend keeps for it besides per-call
     * scratch (CPU: two chunks' start states with the open chunk's rows, the conv state, and the
     * rollback window's conv snapshot and inputs; GPU: the state and its window snapshot, the
     * window's conv and beta/alpha inputs); both 0 for other models */
    int64_t kv_bytes_per_token;
    int64_t kv_bytes;
    int64_t state_bytes;
    int64_t state_alloc_bytes;
    /* cpu_misses 1, or doorbell (the CPU expert pool), with expert_cache: 0 no split of the
     * cache's misses; 1 calls of up to 8 tokens compute every slot in the CPU's arithmetic (the
     * hits by GPU kernels that give the CPU's bits, the CPU's (the pool's) misses by the CPU,
     * summed in slot order: the same bits whatever the residency and the share, those of
     * --cpu-moe); 2 the hits in the GPU's own arithmetic (the types or the CPU's kernels do not
     * allow 1; longer calls always: the bits follow the residency) */
    int32_t cache_split;
} strata_session_stats;

/* Zeroes the counters of strata_session_stats (everything but the settings). */
STRATA_API void strata_session_reset_stats(strata_session *session);

/* Fills *out. Thread-safe with respect to other sessions only. */
STRATA_API strata_status strata_session_get_stats(const strata_session *session,
                                                  strata_session_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Sampling
 *
 * A strata_sampler picks the next token from logits: penalties over the last repeat_last_n
 * accepted tokens, then top-k, top-p, min-p, temperature, and a draw from a seeded generator (the
 * same seed and inputs give the same tokens). temperature <= 0 is greedy (argmax, lowest id on
 * ties). Not thread-safe; one per sequence.
 * ------------------------------------------------------------------------------------------- */

typedef struct strata_sampler strata_sampler;

typedef struct strata_sampler_params {
    float temperature;        /* default 0.8; <= 0: greedy */
    int32_t top_k;            /* default 40; <= 0: off */
    float top_p;              /* default 0.95; >= 1: off */
    float min_p;              /* default 0.05; <= 0: off */
    float repeat_penalty;     /* default 1.0 (off); llama.cpp's rule: logit/p if > 0, else *p */
    float presence_penalty;   /* default 0 */
    float frequency_penalty;  /* default 0 */
    int32_t repeat_last_n;    /* default 64; tokens the penalties look back over */
    uint64_t seed;            /* default 0x5eed */
} strata_sampler_params;

STRATA_API strata_sampler_params strata_sampler_default_params(void);
STRATA_API strata_status strata_sampler_create(const strata_sampler_params *params,
                                               int32_t n_vocab, strata_sampler **out);
STRATA_API void strata_sampler_free(strata_sampler *sampler);
/* Clears the history and reseeds. */
STRATA_API void strata_sampler_reset(strata_sampler *sampler);
/* Picks a token from n_vocab logits (not modified). Does not accept it. */
STRATA_API strata_status strata_sampler_sample(strata_sampler *sampler, const float *logits,
                                               strata_token *out);
/* How many candidates strata_sampler_sample_top needs to pick exactly what strata_sampler_sample
 * would from the whole row: top_k + repeat_last_n (at most n_vocab); 0 when candidates cannot do
 * (top_k <= 0 or >= n_vocab, temperature <= 0, or a penalty that can raise a logit:
 * repeat_penalty < 1, a negative frequency or presence penalty). */
STRATA_API int32_t strata_sampler_top_needed(const strata_sampler *sampler);
/* As strata_sampler_sample, from the n largest logits of a row in candidate order with their ids
 * (strata_session_decode_topk): the same token, and the same errors, given n >=
 * strata_sampler_top_needed(sampler) > 0 (else STRATA_ERR_INVALID_ARG). STRATA_ERR_UNSUPPORTED
 * when the candidates cannot tell (every one of them +inf): use the whole row. */
STRATA_API strata_status strata_sampler_sample_top(strata_sampler *sampler, const strata_token *ids,
                                                   const float *logits, int32_t n, strata_token *out);
/* Adds token to the penalty history (prompt tokens and generated ones). */
STRATA_API void strata_sampler_accept(strata_sampler *sampler, strata_token token);
/* Speculative sampling against a drafter that proposed `draft` (for sure): *out is the token this
 * row gives, strata_sampler_sample's own draw, and *accepted 1 when it is the draft. The draft is
 * thus accepted with the chance the chain gives it (at temperature <= 0: when it is the greedy
 * token), as the standard rejection rule accepts a sure draft, and a rejected row's token has the
 * chain's distribution without the draft; and since the draw is the plain one (one random number
 * a row), a generation through windows is the text one-token steps give for the same seed. Does
 * not accept *out into the history. */
STRATA_API strata_status strata_sampler_verify(strata_sampler *sampler, const float *logits,
                                               strata_token draft, strata_token *out, int *accepted);

/* ---------------------------------------------------------------------------------------------
 * Speculative decoding
 *
 * A drafter proposes the next few tokens; strata_session_speculate evaluates them in one verify
 * window (one forward pass of the last token and the drafts) and keeps the longest prefix the
 * sampler accepts, plus the sampler's own token after it. The output is the text of plain
 * one-token decoding, greedy or sampled with the same seed (a window's rows are one-token steps'
 * bits, and strata_sampler_verify draws as strata_sampler_sample does).
 *
 *     strata_drafter *d;
 *     strata_drafter_ngram_create(2, 4, &d);             // continuations found earlier in the text
 *     ... read the prompt; history = its tokens; last = the first sampled token ...
 *     while (generating) {
 *         strata_token draft[8], out[9];
 *         int32_t nd = 0, no = 0;
 *         strata_drafter_propose(d, history, n_history, 8, draft, &nd);
 *         strata_session_speculate(session, sampler, last, draft, nd, out, &no);
 *         ... emit out[0..no), append last and out[0..no-1) to history, last = out[no-1] ...
 *     }
 * ------------------------------------------------------------------------------------------- */

#define STRATA_DRAFT_MAX 16 /* the most drafted tokens one window verifies */

typedef struct strata_drafter strata_drafter;

/* A prompt-lookup drafter: the tokens that followed the latest earlier occurrence of the history's
 * last n tokens (n from ngram_max down to ngram_min), searched in the history, then in every
 * history it was given before (across calls and requests). 1 <= ngram_min <= ngram_max <= 8. */
STRATA_API strata_status strata_drafter_ngram_create(int32_t ngram_min, int32_t ngram_max,
                                                     strata_drafter **out);
/* A draft-model drafter: greedy tokens of `draft` (its own session with params), which must share
 * target's vocabulary (the same tokens, ids and special tokens: STRATA_ERR_INVALID_ARG naming the
 * first difference otherwise). The drafter keeps draft alive (a reference, as a session does). */
STRATA_API strata_status strata_drafter_model_create(const strata_model *target, const strata_model *draft,
                                                     const strata_session_params *params,
                                                     strata_drafter **out);
/* A self-drafter: the target session drafts for itself, each draft a greedy decode step that uses
 * only the routed experts already in its fast tier (a CUDA session's expert-cache slots; a CPU
 * session's RAM slots under ram_budget), every expert that missed dropped, so a draft costs no
 * PCIe or disk reads; the steps are rolled back before the window. Its history must be the
 * session's tokens plus the newest one (the caller's verify loop keeps it so). The draft steps
 * count in the session's expert stats. STRATA_ERR_UNSUPPORTED, saying why, where every expert is
 * in the fast tier (the draft would be the model itself) and for CUDA sessions with CPU layers
 * (n_cpu_moe) or the expert pool, not built for it yet. Not owned: free it before the session. */
STRATA_API strata_status strata_drafter_self_create(strata_session *target, strata_drafter **out);
/* A drafter from the model's MTP layer (the nextn layer deepseek2, glm4moe and qwen3next files may
 * carry): the target session's final hidden states and the newest token through it propose the
 * next tokens, each further draft chained on the layer's own output (llama.cpp's draft-mtp). From
 * creation on the session keeps every position's hidden state (n_ctx x n_embd floats); create it
 * before the prompt (positions decoded earlier draft from zeros). Its history must be the
 * session's tokens plus the newest one. CPU and CUDA sessions: a CUDA session puts the layer on
 * the GPU with all its routed experts, its cache and the hidden states (n_ctx x n_embd floats)
 * where they fit its free memory, else it copies its hidden states down and the layer runs on
 * the CPU (strata_drafter_describe says which, and why); STRATA_ERR_UNSUPPORTED, saying why, for
 * a model without MTP tensors. Not owned: free it before the session. */
STRATA_API strata_status strata_drafter_mtp_create(strata_session *target, strata_drafter **out);
/* One line saying what the drafter drafts with and, for MTP drafts, where its layer runs; valid
 * until the drafter is freed ("" for NULL). */
STRATA_API const char *strata_drafter_describe(const strata_drafter *drafter);
STRATA_API void strata_drafter_free(strata_drafter *drafter);
/* Up to max (<= STRATA_DRAFT_MAX) tokens continuing history[0..n_history); *n_out of them in out
 * (0: nothing to propose). The drafter learns the history it is given; with max 0 it only learns
 * it (a draft model reads it into its session: call it after the prompt, so the first window
 * does not pay for the prompt). */
STRATA_API strata_status strata_drafter_propose(strata_drafter *drafter, const strata_token *history,
                                                int64_t n_history, int32_t max, strata_token *out,
                                                int32_t *n_out);

/* One verify window: evaluates `last` (the newest token, not yet in the session) and the n_draft
 * drafted tokens after it (0 <= n_draft <= STRATA_DRAFT_MAX) in one forward pass, then lets the
 * sampler verify the drafts in order (strata_sampler_verify) and pick the token after the last
 * accepted one. out gets the accepted drafts and that token: *n_out = accepted + 1 tokens (fewer
 * when an end-of-generation token comes first: it ends the list). Each of them is accepted into
 * the sampler's history. The session keeps `last` and the accepted drafts; the rejected rows are
 * rolled back, so the KV cache is as if they never ran; out[*n_out - 1] is the next call's last.
 * STRATA_ERR_RANGE when the window would pass n_ctx (nothing evaluated). */
STRATA_API strata_status strata_session_speculate(strata_session *session, strata_sampler *sampler,
                                                  strata_token last, const strata_token *draft,
                                                  int32_t n_draft, strata_token *out, int32_t *n_out);

/* What a session's verify windows did (strata_session_speculate calls since create or the last
 * strata_session_reset_stats): per-token acceptance is accepted / drafted of the drafts a window
 * reached; tokens per window emitted / windows. */
typedef struct strata_spec_stats {
    int64_t windows;   /* verify windows run */
    int64_t drafted;   /* drafted tokens verified: up to a window's first rejected one */
    int64_t accepted;  /* of them, accepted */
    int64_t emitted;   /* tokens the windows gave (accepted drafts and the sampler's own) */
} strata_spec_stats;
STRATA_API strata_status strata_session_get_spec_stats(const strata_session *session,
                                                       strata_spec_stats *out);

/* ---------------------------------------------------------------------------------------------
 * The draft policy (--spec auto)
 *
 * How many drafted tokens the next window should verify, so that speculation pays or is left
 * alone. The policy keeps a per-token acceptance estimate (decayed counts: windows' drafts, and
 * proposals that were not verified compared with the token that came), and the seconds of a
 * window of k drafts (k + 1 rows) and of a plain step on this session, learnt from what the caller
 * observes: the first choice is a plain step, whose time anchors the table; a length not observed
 * yet is estimated on the line between observed ones, or past the longest observed on its last
 * slope (before any window, a quarter of a plain step a draft), taken three quarters as steep so
 * that a longer window gets tried once and then known. Every step it asks for is a real one, so
 * learning the table costs no extra passes. It picks the count with the most expected tokens a
 * second, (1 + a + ... + a^k) / (window_s[k] + k * draft_token_s), or 0 when a plain step is
 * expected to be as fast (within a 2% margin); after 32 plain steps without news of the
 * acceptance, one small window probes it. A length's first window costing over 1.3 times the
 * table's estimate (one-time costs: a GPU loading kernels at first launch) is tried once more
 * before its sample counts. Timing drives the choices, and with them the speed
 * only: windows give plain decoding's text (strata_session_speculate).
 *
 *     strata_spec_policy *p;
 *     strata_spec_policy_create(8, &p);
 *     ... nd = proposals available; k = strata_spec_policy_choose(p, nd, 0.0);
 *     ... k > 0: a window of draft[0..k), then observe(p, k, accepted, seconds);
 *         k == 0: a plain step, observe(p, 0, 0, seconds) and, if there was a proposal,
 *         strata_spec_policy_observe_unverified(p, draft[0] == the token that came) ...
 * ------------------------------------------------------------------------------------------- */

typedef struct strata_spec_policy strata_spec_policy;

typedef struct strata_spec_policy_stats {
    int64_t plain_steps;     /* steps observed plain */
    int64_t windows;         /* windows observed */
    int64_t probes;          /* of them, the probes the policy asked for */
    double acceptance;       /* the per-token acceptance estimate now */
    double plain_s;          /* seconds of a plain step (running mean) */
    double window_s[STRATA_DRAFT_MAX + 1]; /* [k]: seconds of a window of k drafts, k <= draft_max */
    int32_t draft_max;
    int32_t choice;          /* what it would choose now with draft_max free drafts */
    double break_even;       /* the lowest acceptance (to 0.01) at which a window pays; -1: none */
} strata_spec_policy_stats;

/* A policy for windows of up to draft_max (1..STRATA_DRAFT_MAX) drafts, nothing learnt yet. */
STRATA_API strata_status strata_spec_policy_create(int32_t draft_max, strata_spec_policy **out);
STRATA_API void strata_spec_policy_free(strata_spec_policy *policy);
/* The drafts the next window should verify, 0..min(n_avail, draft_max) (0: a plain step).
 * draft_token_s: what each drafted token still costs (0 once they are drafted). */
STRATA_API int32_t strata_spec_policy_choose(strata_spec_policy *policy, int32_t n_avail,
                                             double draft_token_s);
/* A window of n_draft drafts (n_accepted of them accepted), or with n_draft 0 a plain step, that
 * took seconds. */
STRATA_API void strata_spec_policy_observe(strata_spec_policy *policy, int32_t n_draft,
                                           int32_t n_accepted, double seconds);
/* A proposal that was not verified: matched 1 when its first token was the token that came. */
STRATA_API void strata_spec_policy_observe_unverified(strata_spec_policy *policy, int matched);
/* A window of n_draft drafts (0: a plain step) that took seconds, learnt as a cost only: for a
 * caller with one policy per drafter on one session, whose windows cost the same whichever drafter
 * filled them (the acceptance and the counts are left alone). */
STRATA_API void strata_spec_policy_observe_cost(strata_spec_policy *policy, int32_t n_draft, double seconds);
/* The expected tokens a second of a window of k drafts (0: a plain step) from what the policy
 * knows now, each draft still costing draft_token_s; 0 before a plain step was observed. For
 * choosing between drafters: the one whose chosen window has the highest rate. */
STRATA_API double strata_spec_policy_rate(const strata_spec_policy *policy, int32_t k, double draft_token_s);
/* Replaces the cost table (plain_s, window_s[0..draft_max]), every length then counting as
 * observed: for tests and for callers that measured it themselves. */
STRATA_API strata_status strata_spec_policy_set_costs(strata_spec_policy *policy, double plain_s,
                                                      const double *window_s);
STRATA_API strata_status strata_spec_policy_get_stats(const strata_spec_policy *policy,
                                                      strata_spec_policy_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_H */
