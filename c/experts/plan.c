/* plan.c - the placement plan (plan.h): each placement option's range, the rules about which
 * options combine, and their resolution into what a session does. */
#include "plan.h"
#include "common.h"

#include <math.h>

/* Each placement option on its own. */
static strata_status st_plan_ranges(const strata_placement_params *q) {
    if (q->ram_budget < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "session option ram_budget %lld < 0", (long long)q->ram_budget);
    if (q->cpu_misses < -1 || q->cpu_misses > 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option cpu_misses %d (1 on, 0 off, -1 auto)",
                        q->cpu_misses);
    if (isnan(q->pcie_frac) || q->pcie_frac > 1.0f)
        return st_error(STRATA_ERR_INVALID_ARG, "session option pcie_frac %g (0..1, or < 0 for the "
                        "cost model)", (double)q->pcie_frac);
    if (q->stage_experts < -1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option stage_experts %d (a token count, 0 "
                        "off, or -1 auto)", (int)q->stage_experts);
    if (q->cpu_warm != 0 && q->cpu_warm != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option cpu_warm %d: expected 0 or 1", q->cpu_warm);
    if (q->stage_ahead != 0 && q->stage_ahead != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option stage_ahead %d: expected 0 or 1", q->stage_ahead);
    if (q->stage_split != 0 && q->stage_split != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option stage_split %d: expected 0 or 1", q->stage_split);
    if (q->defer_cpu < 0 || q->defer_cpu > 2)
        return st_error(STRATA_ERR_INVALID_ARG, "session option defer_cpu %d (0 off, 1 defer, 2 check)",
                        q->defer_cpu);
    if (q->defer_cpu != 0 && !(q->defer_cpu_below > 0.0f))
        return st_error(STRATA_ERR_INVALID_ARG, "session option defer_cpu_below %g: a routing weight above 0 "
                        "(>= 1: every CPU row deferred)", (double)q->defer_cpu_below);
    if (q->cache_admit != 0 && q->cache_admit != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option cache_admit %d: expected 0 or 1", q->cache_admit);
    if (q->pin_experts < -1 || q->pin_experts > 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option pin_experts %d (1 on, 0 off, -1 auto)",
                        q->pin_experts);
    if (q->pool_pcie < -1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option pool_pcie %d (0 off, N > 0 at most N missed "
                        "experts a layer call, -1 the cost model's count)", q->pool_pcie);
    return STRATA_OK;
}

/* Options that do not combine. CUDA sessions with a RAM budget: the experts the GPU cache loads or
 * the CPU computes come from the RAM tier (pinned slots, filled from the file with O_DIRECT); the
 * options that read every expert from RAM do not combine with it. */
static strata_status st_plan_combinations(const strata_session_params *p) {
    const strata_placement_params *q = &p->placement;
    const int gpu = p->backend == STRATA_BACKEND_CUDA;
    const int ram_gpu = q->ram_budget > 0 && gpu;
    if (ram_gpu && q->n_cpu_moe == 0 && q->expert_cache == 0)
        return st_error(STRATA_ERR_INVALID_ARG, "ram_budget with a CUDA session needs expert_cache "
                        "or n_cpu_moe: else every routed expert is on the GPU");
    if (gpu && q->doorbell && q->expert_cache != 0 && (q->gpu_prefetch || q->cpu_misses == 1 || p->degrade_zero))
        return st_error(STRATA_ERR_UNSUPPORTED, "doorbell with expert_cache: the expert pool computes "
                        "the decode steps' misses; gpu_prefetch, cpu_misses and degrade_zero handle "
                        "them otherwise (leave them off)");
    if (gpu && q->pool_pcie != 0 && q->pin_experts == 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "pool_pcie reads missed experts from their pinned copy: "
                        "it needs pin_experts (not 0)");
    if (gpu && q->doorbell && q->n_cpu_moe != 0 && q->cpu_misses == 1)
        return st_error(STRATA_ERR_UNSUPPORTED, "doorbell with n_cpu_moe: the expert pool computes "
                        "every expert of the CPU layers' decode steps; cpu_misses (a share over "
                        "PCIe to the GPU) is for the host hand-off (leave one off)");
    if (ram_gpu && q->doorbell)
        return st_error(STRATA_ERR_UNSUPPORTED, "ram_budget with a CUDA session: doorbell's "
                        "expert pool reads every CPU layer's experts from RAM, not the tier's "
                        "slots; leave it off");
    if (ram_gpu && (q->pin_experts == 1 || q->gpu_prefetch || q->cpu_misses == 1 || q->stage_experts > 0))
        return st_error(STRATA_ERR_UNSUPPORTED, "ram_budget with a CUDA session: pin_experts 1, "
                        "gpu_prefetch, cpu_misses and stage_experts read experts outside the RAM "
                        "tier; leave them off (or auto)");
    if (p->degrade_eval && gpu)
        return st_error(STRATA_ERR_UNSUPPORTED, "degrade_eval runs on CPU sessions only");
    return STRATA_OK;
}

int32_t st_plan_fit_layers(int64_t gpu_mem, int64_t fixed_bytes, const int64_t *layer_bytes, int32_t n_layer) {
    if (fixed_bytes > gpu_mem) return -1;
    int64_t room = gpu_mem - fixed_bytes;
    int32_t n = n_layer; /* the last layers' experts go up first, while they fit */
    while (n > 0 && layer_bytes[n - 1] <= room) room -= layer_bytes[--n];
    return n;
}

strata_status st_plan_check(const strata_session_params *p) {
    strata_status st = st_plan_ranges(&p->placement);
    return st != STRATA_OK ? st : st_plan_combinations(p);
}

/* Each switch applies only where its mode exists: the GPU's options on CUDA sessions, the split
 * where experts are off the GPU, the staging where CPU layers are. */
void st_plan_resolve(const strata_session_params *p, st_placement_plan *out) {
    const strata_placement_params *q = &p->placement;
    const int gpu = p->backend == STRATA_BACKEND_CUDA;
    const int ram_gpu = q->ram_budget > 0 && gpu;
    st_placement_plan *pl = out;
    pl->gpu = gpu;
    pl->ram_gpu = ram_gpu;
    pl->n_cpu_moe = q->n_cpu_moe < 0 ? -1 : q->n_cpu_moe;
    pl->expert_cache = gpu ? (q->expert_cache < 0 ? -1 : q->expert_cache) : 0;
    pl->gpu_mem = q->gpu_mem > 0 ? q->gpu_mem : 0;
    pl->ram_budget = q->ram_budget;
    pl->pipe = q->pipe != 0 && q->ram_budget > 0;
    pl->stage_experts = gpu && pl->n_cpu_moe != 0 && !ram_gpu ? q->stage_experts : 0;
    pl->pin_experts = gpu && !ram_gpu ? q->pin_experts : 0;
    pl->gpu_prefetch = gpu && q->expert_cache != 0 && q->gpu_prefetch != 0;
    pl->cpu_warm = gpu && q->n_cpu_moe != 0 && q->cpu_warm;
    pl->doorbell = gpu && (q->n_cpu_moe != 0 || q->expert_cache != 0) && q->doorbell != 0;
    pl->cpu_misses = gpu && (q->expert_cache != 0 || q->n_cpu_moe != 0) && q->cpu_misses == 1;
    /* auto: the CPU layers' decode split where it computes the same bits as the CPU alone (the
     * CUDA set-up checks the kernels); not with the pool or the RAM tier, which read experts
     * otherwise */
    pl->cpu_misses_auto = gpu && q->n_cpu_moe != 0 && q->cpu_misses < 0 && !q->doorbell && !ram_gpu;
    pl->pcie_frac = q->pcie_frac < 0 ? -1.0f : q->pcie_frac;
    /* admission needs somewhere else for a miss to go: the pool (doorbell) or the split */
    pl->cache_admit = gpu && q->expert_cache != 0 && (pl->doorbell || pl->cpu_misses) && q->cache_admit;
    pl->stage_ahead = pl->stage_experts != 0 && q->stage_ahead;
    pl->stage_split = pl->stage_experts != 0 && q->stage_split;
    /* deferral: only where the pool computes CPU layers (the calls it serves); else nothing */
    pl->defer_cpu = gpu && q->n_cpu_moe != 0 && pl->doorbell ? q->defer_cpu : 0;
    pl->defer_below = pl->defer_cpu ? q->defer_cpu_below : 0.0f;
    /* the GPU's own share of the pool's misses: only where the pool computes a cache's misses */
    pl->pool_pcie = gpu && q->expert_cache != 0 && pl->doorbell && !ram_gpu ? q->pool_pcie : 0;
}
