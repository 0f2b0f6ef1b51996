/* backend_cuda.c - the CUDA backend's table (backend.h): the GPU session's state (weights, KV
 * cache, scratch and expert placement on the device: forward_cuda_setup.c), the forward pass of a
 * batch (forward_cuda.c; the greedy token and the candidates are selected on the device), and the
 * GPU's part of the statistics. */
#include "backend.h"
#include "gpu_tier.h"
#include "gpu_pass.h"
#include "deltanet_gpu.h"

static strata_status cuda_forward(strata_session *s, const strata_token *tokens, int64_t T, float *logits,
                                  int all) {
    /* layers whose experts the CPU computes: the pool's workers spin through the GPU's part of
     * each layer instead of sleeping and waking */
    const int hold = (s->plan.n_cpu_moe != 0 && !st_gpu_pool_serves(s, T)) || s->plan.cpu_misses;
    if (hold) st_threadpool_hold(s->tp, 1);
    strata_status st = st_gpu_forward_batch(s, tokens, T, logits, all);
    if (hold) st_threadpool_hold(s->tp, 0);
    return st;
}

static void cuda_stats(const strata_session *s, strata_session_stats *out) {
    st_gpu_tier *c = st_gpu_get_cache(s);
    if (c) {
        int64_t loaded = 0;
        st_gpu_tier_counters(c, &out->expert_cache_slots, &out->expert_cache_hits,
                              &out->expert_cache_misses, &loaded, &out->layer_hit_rate_min,
                              &out->layer_hit_rate_max);
        int64_t pi = 0, pt = 0, pl = 0; /* the GPU cache's prefetches, added to the RAM tier's */
        st_gpu_tier_prefetch_counters(c, &pi, &pt, &pl);
        out->prefetch_issued += pi;
        out->prefetch_timely += pt;
        out->prefetch_late += pl;
    }
    out->pinned_bytes = st_gpu_pinned_bytes(s);
    st_gpu_tiles_stats(s, &out->q8_tiles_bytes, &out->q8_tiles_skipped, &out->q8_sm60_mats);
    out->iq_stage_tables = s->iq_stage_tables > 0;
    out->cpu_split = st_gpu_split_mode(s);
    out->cache_split = st_gpu_cache_split_mode(s);
    out->route_tail_skipped += st_gpu_tail_skipped(s, 0);
    out->plan_decode_tok_s = st_gpu_plan_rate(s);
    st_gpu_mem_stats(s, &out->kv_bytes, &out->state_alloc_bytes);
}

static void cuda_reset_stats(strata_session *s) {
    st_gpu_tier_reset_counters(st_gpu_get_cache(s));
    (void)st_gpu_tail_skipped(s, 1);
}

const st_backend st_backend_cuda = {"cuda", st_gpu_create, st_gpu_free, cuda_forward, cuda_stats,
                                    cuda_reset_stats, st_gpu_rs_call_begin, st_gpu_rs_truncate};
