/* common.h - what the model-running subcommands (run.c, perplexity.c) share: the option set and
 * its parser (-m, -p, -f, -n, -c, -t, -b, sampling, --logpos, ...), loading a model and session
 * from those options, timing and peak RSS, JSON string output, and the teacher-forced logprob
 * dump (top-K log-softmax rows, JSONL) with the top-K KL estimate that tools/kl.py also uses.
 * Uses only the public API (strata.h). */
#ifndef STRATA_CLI_COMMON_H
#define STRATA_CLI_COMMON_H

#include "cli.h"

#include <stdint.h>
#include <stdio.h>

#define CLI_MAX_STOPS 16
#define CLI_MAX_GPU_ONLY 32

typedef struct {
    const char *model;            /* -m */
    const char *prompt;           /* -p */
    const char *prompt_file;      /* -f */
    int n_predict;                /* -n: tokens to generate (-1: until EOG or the context ends) */
    int n_ctx;                    /* -c: 0 = the model's training context */
    int n_threads;                /* -t: 0 = all cores */
    int n_batch;                  /* -b: prompt tokens per forward pass */
    strata_type kv_type;          /* --kv-type f16|f32 */
    int degrade_zero;             /* --degrade-zero or DEGRADE_ZERO=1 */
    float degrade_tau;            /* --degrade-tau or DEGRADE_TAU (default 0.03) */
    int degrade_eval;             /* --degrade-eval or STRATA_DEGRADE_EVAL=1 (implies degrade_zero) */
    int profile;                  /* --profile or STRATA_PROFILE=1: time the forward phases */
    int cuda_graphs;              /* --cuda-graphs or STRATA_CUDA_GRAPHS=1 */
    int cuda_pdl;                 /* --no-pdl or STRATA_CUDA_PDL=0 turn it off */
    int n_cpu_moe;                /* --n-cpu-moe N, --cpu-moe (-1), --gpu-experts (0, default) */
    int stage_experts;            /* --stage-experts N ($STRATA_STAGE_EXPERTS; 0: off) */
    int attn_tc;                  /* --attn-tc ($STRATA_ATTN_TC=1) */
    int pin_experts;              /* --pin-experts ($STRATA_PIN_EXPERTS=1) */
    int cpu_pin;                  /* --cpu-pin ($STRATA_CPU_PIN=1) */
    int no_amx;                   /* --no-amx ($STRATA_AMX=0) */
    const char *cpu_isa;          /* --cpu-isa scalar|avx2|avx512|best ($STRATA_CPU_ISA); NULL: best */
    int gpu_prefetch;             /* --gpu-prefetch ($STRATA_GPU_PREFETCH=1) */
    int cpu_warm;                 /* --cpu-warm / --no-cpu-warm ($STRATA_CPU_WARM=1) */
    int q8_tiles;                 /* --q8-tiles / --no-q8-tiles ($STRATA_Q8_TILES=0: off) */
    int doorbell;                 /* --doorbell ($STRATA_DOORBELL=1) */
    int cpu_misses;               /* --cpu-misses / --no-cpu-misses ($STRATA_CPU_MISSES=1 / 0); -1 auto */
    float pcie_frac;              /* --pcie-frac F ($STRATA_PCIE_FRAC; < 0: the cost model) */
    int expert_cache;             /* --expert-cache N|auto (-1): GPU slots for routed experts */
    int64_t gpu_mem;              /* --gpu-mem SIZE: GPU memory for --expert-cache auto */
    int64_t ram_budget;           /* --ram-budget SIZE (bytes; K/M/G suffixes): experts from disk */
    int pipe;                     /* --pipe or STRATA_PIPE=1: prefetch with the RAM tier */
    int ngl;                      /* -ngl N as given */
    int gpu;                      /* -1 auto (GPU when usable, else CPU), 0 --cpu / -ngl 0, 1 --gpu */
    char backend_desc[300];       /* set by cli_new_session: "cuda (NVIDIA H200, ...)" or "cpu" */
    strata_sampler_params sp;     /* --temp, --top-k, ... */
    int seed_random;              /* --seed -1: sp.seed was drawn at random */
    const char *gpu_only[CLI_MAX_GPU_ONLY]; /* the GPU-only flags given, named once each */
    int n_gpu_only;
    int ctx_warned;               /* the context was already checked against n_ctx_train (bench) */
    const char *stops[CLI_MAX_STOPS]; /* --stop (repeatable) */
    int n_stops;
    int ignore_eos;               /* --ignore-eos */
    int no_bos;                   /* --no-bos: never prepend BOS */
    int no_echo;                  /* --no-echo: do not print the prompt before the continuation */
    const char *logpos;           /* --logpos FILE or $STRATA_LOGPOS */
    int logpos_top;               /* --logpos-top K (default 20) */
    const char *stats_json;       /* --stats-json FILE */
    int interactive;              /* -i / --chat */
    const char *chat_template;    /* --chat-template chatml|inst|none (default: from the model) */
    const char *system;           /* --system TEXT (chat) */
    int quiet;                    /* --quiet: no stats on stderr */
    int mlock;                    /* --mlock */
    int hugepages;                /* --hugepages */
    int no_mmap;                  /* --no-mmap */
    /* perplexity */
    int stride;                   /* --stride N (default n_ctx) */
    const char *kl_base;          /* --kl-base FILE */
    const char *kl;               /* --kl FILE */
} cli_opts;

/* Defaults: n_predict 128, n_batch 512, kv f16, the library's sampler defaults, top-K 20. */
void cli_opts_init(cli_opts *o);
/* Parses the option at argv[*i] (advancing *i past its value). Returns 1 if it was one of the
 * shared options, 0 if it is not, or CLI_EXIT_USAGE (after the message) for a bad value. */
int cli_opts_parse(cli_opts *o, int argc, char **argv, int *i);
/* The help text of the shared options. */
void cli_opts_usage(FILE *f);

/* Loads o->model (params from the options); *load_s gets the seconds it took. Prints the failure
 * and returns CLI_EXIT_FAIL, or 0. */
int cli_load_model(const cli_opts *o, strata_model **model, double *load_s);
/* Session with the options' n_ctx, n_batch, kv_type, n_threads and backend: --gpu must get the
 * GPU (else it fails), auto takes the GPU when CUDA is usable and the model has GPU kernels and
 * otherwise says in one stderr line why it runs on the CPU; a CPU session names the GPU-only
 * flags given in one warning line (they are ignored), and a context past the model's training
 * context gets a warning line. Fills o->backend_desc. */
int cli_new_session(cli_opts *o, const strata_model *model, strata_session **out);
/* When DEGRADE_ZERO is on: one stderr line with what it dropped (tau, zeroed slots, share, per-layer
 * min/max share). Nothing when it is off. */
void cli_print_degrade_stats(const strata_session *sess);
/* The [PROF] line on stderr: prompt and decode tok/s, where routed experts ran (slot-rows from GPU
 * memory and on the CPU, per-layer GPU share), bytes over PCIe and from disk, zeroed slots; gpu 0
 * (a CPU session) leaves out the GPU-only fields. */
void cli_print_prof_line(const strata_session *sess, int gpu, double prompt_tps, double decode_tps);
/* The CPU threads a session of these options uses: -t, else the online CPUs (the library's rule
 * for n_threads 0). */
int cli_threads_used(const cli_opts *o);
/* With --profile: one stderr line per phase set, milliseconds per token and share of the total. */
void cli_print_profile(const strata_session *sess, const char *what);
/* Tokenizes text into *toks (malloc'd), *n tokens. Prints failures, returns CLI_EXIT_FAIL or 0. */
int cli_tokenize(const strata_model *model, const char *text, size_t len, int add_special,
                 int parse_special, strata_token **toks, int64_t *n);
/* 1 if the vocabulary prepends BOS when tokenizing with add_special. */
int cli_model_adds_bos(const strata_model *model);

/* ---- teacher-forced logprob dumps ------------------------------------------------------------
 * JSONL: a header line {"strata_logpos": 1, "model": ..., "n_vocab": V, "top_k": K, ...} then one
 * line per position {"pos": i, "token": NEXT_ID or null, "top": [[id, logprob], ...]} with the
 * K most probable ids in descending order, log-softmax computed in double. */

typedef struct {
    int32_t n_vocab;
    int k;
    int32_t *ids;     /* [k] */
    double *lp;       /* [k] */
    double lse;       /* log-sum-exp of the last row */
} cli_topk;

int cli_topk_init(cli_topk *t, int32_t n_vocab, int k);
void cli_topk_free(cli_topk *t);
/* Fills t->ids/lp with the top k of log_softmax(logits) (descending; lower id first on ties). */
void cli_topk_row(cli_topk *t, const float *logits);
/* Writes the header line; extra is NULL or more JSON members (", \"a\": 1"). */
void cli_logpos_header(FILE *f, const char *model, int32_t n_vocab, int k, const char *extra);
/* Writes one position line from t's current row; next < 0 writes "token": null. */
void cli_logpos_line(FILE *f, int64_t pos, int64_t next, const cli_topk *t);

/* Top-K KL(A||B) estimate over A's top-K support: with a_i the probabilities of A's K ids, b_i
 * B's for the same ids, and the rest buckets ra = 1 - sum a_i, rb = 1 - sum b_i:
 *     KL = sum_i a_i (log a_i - log b_i) + ra log(ra / rb)
 * i.e. the exact KL of the two distributions coarsened to (A's K ids, everything else): never
 * negative, a lower bound of the full KL, and exact when A's support fits in its top K. */
double cli_kl_topk(const double *lp_a, const double *lp_b, int k);

#endif /* STRATA_CLI_COMMON_H */
