/* options.h - the option set of the model-running commands (run, perplexity, bench): cli_opts,
 * its defaults (some from the environment), the parser of -m, -p, -n, -c, -t, sampling,
 * placement, --logpos, ... and their help text (options.c). */
#ifndef STRATA_CLI_OPTIONS_H
#define STRATA_CLI_OPTIONS_H

enum { CLI_SPEC_NONE = 0, CLI_SPEC_NGRAM = 1, CLI_SPEC_DRAFT = 2, CLI_SPEC_AUTO = 3, CLI_SPEC_ORACLE = 4, CLI_SPEC_SELF = 5,
       CLI_SPEC_MTP = 6 };

#include "cli.h"

#include <stddef.h>
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
    float route_tail_skip;        /* --route-tail-skip P ($STRATA_ROUTE_TAIL_SKIP), 0 off */
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
    int cache_admit;              /* --cache-admit / --no-cache-admit ($STRATA_CACHE_ADMIT=1) */
    int pool_pcie;                /* --pool-pcie N|auto ($STRATA_POOL_PCIE; -1 auto, 0 off) */
    int stage_ahead;              /* --stage-ahead ($STRATA_STAGE_AHEAD=1) */
    int stage_split;              /* --stage-split ($STRATA_STAGE_SPLIT=1) */
    int defer_cpu;                /* --defer-cpu 0|1|check ($STRATA_VERIFY_DEFER_CPU): 0, 1, 2 */
    float defer_below;            /* --defer-cpu-below W ($STRATA_VERIFY_DEFER_CPU_BELOW), 0.1 */
    int defer_below_given;        /* set by the option or the variable (the start-up line says) */
    int defer_below_bad;          /* the variable was not a number above 0 (0.1 taken) */
    const char *defer_text;       /* the values as given, for the start-up lines */
    const char *defer_below_text;
    int q8_tiles;                 /* --q8-tiles / --no-q8-tiles ($STRATA_Q8_TILES=0: off) */
    int iq_stage_tables;          /* --iq-stage-tables on|off|auto ($STRATA_IQ_STAGE_TABLES=1|0): -1 auto */
    int q8_sm60;                  /* --q8-sm60 ($STRATA_Q8_SM60=1): the SM60 Q8_0 decode GEMV */
    int q8_sm60_bps;              /* --q8-sm60-bps N ($STRATA_Q8_SM60_BPS): its blocks per SM; 0: 4 */
    int doorbell;                 /* --doorbell ($STRATA_DOORBELL=1) */
    int cpu_misses;               /* --cpu-misses / --no-cpu-misses ($STRATA_CPU_MISSES=1 / 0); -1 auto */
    float pcie_frac;              /* --pcie-frac F ($STRATA_PCIE_FRAC; < 0: the cost model) */
    int expert_cache;             /* --expert-cache N|auto (-1): GPU slots for routed experts */
    int64_t gpu_mem;              /* --gpu-mem SIZE: GPU memory for --expert-cache auto */
    int64_t ram_budget;           /* --ram-budget SIZE (bytes; K/M/G suffixes): experts from disk */
    int pipe;                     /* --pipe or STRATA_PIPE=1: prefetch with the RAM tier */
    strata_split_params split;    /* --layer-split A,B,..., --split auto, --split-device D0,D1,...,
                                     --pipeline-windows, --peer-device N, --expert-cache-deviceI N
                                     (docs/MULTI_GPU.md); the library's defaults otherwise */
    int split_devices_n;          /* stages --split-device named (0: not given) */
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
    const char *route_trace;      /* --route-trace FILE or $STRATA_ROUTE_TRACE: each layer's routing */
    const char *route_replay;     /* --route-replay FILE or $STRATA_ROUTE_REPLAY: a recorded routing
                                     in place of the router's (benchmarks) */
    int spec;                     /* --spec: CLI_SPEC_NONE (default), _NGRAM, _DRAFT, _AUTO, _ORACLE, _SELF or _MTP */
    float oracle_rate;            /* --oracle-rate P: the oracle drafter's share of right drafts (-1: not given) */
    int verify_profile;           /* --verify-profile / STRATA_VERIFY_PROFILE=1: per-window phase table at exit */
    int short_read;               /* --short-read N: prompts of up to N tokens read as verify windows */
    const char *draft_model;      /* --draft-model FILE (implies --spec draft unless --spec is given) */
    int draft_max;                /* --draft-max N: drafts a verify window takes at most (default 8) */
    int draft_min;                /* --draft-min N: fewer drafted tokens make a plain step (default 0) */
    int interactive;              /* -i / --chat */
    const char *chat_template;    /* --chat-template auto|model|chatml|inst|none (NULL: auto) */
    const char *chat_template_file; /* --chat-template-file FILE: a Jinja template instead of the model's */
    const char *chat_log;         /* --chat-log FILE: each chat turn as a JSON line */
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

/* Defaults: n_predict 128, n_batch 512, kv f16, the library's sampler defaults, top-K 20, and the
 * environment knobs ($DEGRADE_ZERO, $STRATA_PROFILE, $STRATA_CUDA_GRAPHS, ...). */
void cli_opts_init(cli_opts *o);
/* Parses the option at argv[*i] (advancing *i past its value). Returns 1 if it was one of the
 * shared options, 0 if it is not, or CLI_EXIT_USAGE (after the message) for a bad value. */
int cli_opts_parse(cli_opts *o, int argc, char **argv, int *i);
/* The help text of the shared options. */
void cli_opts_usage(FILE *f);
/* --cpu-isa's names (scalar, avx2, avx512, best): 0 with *out set, or -1 for none of them. */
int cli_cpu_isa_from_name(const char *v, strata_cpu_isa *out);

/* A compile-time check, worth 0, that expr (not evaluated) has the given type: the tables that
 * name cli_opts fields by offset (options.c, session_setup.c) stay typed. */
#define CLI_TYPE_CHECK(type, expr) (0 * sizeof(char[_Generic((expr), type: 1, default: -1)]))

#endif /* STRATA_CLI_OPTIONS_H */
