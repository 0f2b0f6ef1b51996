/* plan.h - the placement plan: the session parameters about where routed experts live and move
 * (strata_placement_params, with the backend and DEGRADE_ZERO), checked and resolved once, at
 * create, into what the session does. Every rule about which options combine, and its message,
 * is here (plan.c); session set-up, the CUDA set-up and the forward passes read the plan, never
 * the parameters.
 *
 * Where a layer's routed experts live (st_plan_layer):
 *   RESIDENT  on the GPU for good (CUDA sessions without a cache), or in RAM for a CPU session;
 *   CACHED    in the GPU expert cache's slots, loaded over PCIe when routed (expert_cache);
 *   CPU       in RAM, computed by the CPU (n_cpu_moe), unless a batch is staged to the GPU.
 * Per call, the CUDA pass then picks a mode for each layer's chunk of tokens (staged, host
 * hand-off, expert pool, split ...) from the plan's switches below. */
#ifndef STRATA_PLAN_H
#define STRATA_PLAN_H

#include "strata.h"

typedef enum { ST_LAYER_RESIDENT = 0, ST_LAYER_CACHED = 1, ST_LAYER_CPU = 2 } st_layer_home;

typedef struct st_placement_plan {
    int gpu;                /* a CUDA session: the GPU modes below apply */
    int32_t n_cpu_moe;      /* the first n_cpu_moe layers' experts on the CPU; -1 every layer */
    int32_t expert_cache;   /* GPU: slots of the expert cache; -1 as many as fit; 0 none */
    int64_t gpu_mem;        /* GPU: bytes for expert_cache -1; 0 the free memory */
    int64_t ram_budget;     /* RAM slots' bytes for routed experts; 0 the file's mapping */
    int ram_gpu;            /* the RAM tier under a CUDA session (its slots feed the GPU) */
    int pipe;               /* the RAM tier reads the next layer's predicted experts ahead */
    int32_t stage_experts;  /* GPU, CPU layers: batches of this many tokens computed on the GPU;
                               -1 the cost model per batch; 0 never */
    int pin_experts;        /* GPU: experts kept in RAM copied to pinned memory: 1, -1 when RAM
                               allows, 0 never */
    int gpu_prefetch;       /* GPU cache: the next layer's predicted experts prefetched */
    int cpu_warm;           /* GPU, CPU layers: the next CPU layer's experts read ahead */
    int doorbell;           /* GPU: decode-sized calls hand CPU layers (and cache misses) to the
                               expert pool through host-mapped memory */
    int cpu_misses;         /* GPU: cache misses and CPU layers' experts split between PCIe loads
                               and the CPU by the cost model (both splits) */
    int cpu_misses_auto;    /* GPU, CPU layers: the decode split where it gives the CPU's bits */
    float pcie_frac;        /* with a split: < 0 the cost model; 0..1 the share loaded */
    int cache_admit;        /* GPU cache with the CPU computing misses: evictions need admission */
    int stage_ahead;        /* staging: the next CPU layer's experts copied while this one computes */
    int stage_split;        /* staging: unstaged prompt batches split between the GPU and the CPU */
    int defer_cpu;          /* GPU, the pool's CPU layers: 1 late rows join before the next FFN,
                               2 check (on time, summed in the split's parts); 0 off */
    float defer_below;      /* the split weight; >= 1 every CPU row deferred */
    int pool_pcie;          /* GPU cache with the pool computing misses: the GPU reads up to N of
                               a call's missed experts from the pinned copy itself; -1 the cost
                               model's count; 0 off */
} st_placement_plan;

/* Each placement option in range, and the options that do not combine (with the backend and
 * DEGRADE_ZERO): STRATA_OK or the error a create would fail with. */
strata_status st_plan_check(const strata_session_params *p);
/* The resolved plan of checked parameters. */
void st_plan_resolve(const strata_session_params *p, st_placement_plan *out);

/* gpu_mem alone (a CUDA session without expert_cache or n_cpu_moe): the static split that fits,
 * the fewest leading layers whose routed experts stay in RAM so that fixed_bytes (the other
 * weights, the KV cache, an allowance for scratch) plus the other layers' routed experts
 * (layer_bytes[n_layer]) fit in gpu_mem: 0..n_layer, or -1 when fixed_bytes alone does not fit.
 * The static split: on spread routing it beat an expert cache of the same memory (docs/EXPERTS.md). */
int32_t st_plan_fit_layers(int64_t gpu_mem, int64_t fixed_bytes, const int64_t *layer_bytes, int32_t n_layer);

/* 1 if layer il's routed experts are the CPU's (n_cpu_moe < 0: every layer). */
static inline int st_plan_layer_on_cpu(const st_placement_plan *pl, int il) {
    return pl->n_cpu_moe < 0 || il < pl->n_cpu_moe;
}

/* Where layer il's routed experts live. */
static inline st_layer_home st_plan_layer(const st_placement_plan *pl, int il) {
    if (pl->gpu && st_plan_layer_on_cpu(pl, il)) return ST_LAYER_CPU;
    return pl->gpu && pl->expert_cache != 0 ? ST_LAYER_CACHED : ST_LAYER_RESIDENT;
}

#endif /* STRATA_PLAN_H */
