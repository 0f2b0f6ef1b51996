/* backend_cuda.c - the CUDA backend's table (backend.h): the GPU session's state (weights, KV
 * cache, scratch and expert placement on the device: forward_cuda_setup.c), the forward pass of a
 * batch (forward_cuda.c; the greedy token and the candidates are selected on the device), an MTP
 * drafter's layer on the device (mtp_gpu.c), and the GPU's part of the statistics. */
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

/* The expert caches' counters in place of the RAM tier's (the prefetches added to its): the
 * session's cache, or a split's stages' summed (slots, hits, misses, prefetches) with the
 * per-layer hit rates' extremes over the stages that looked up any. */
static void cuda_cache_stats(const strata_session *s, strata_session_stats *out) {
    int found = 0, any = 0;
    for (int i = 0; i < STRATA_MAX_STAGES; i++) {
        st_gpu_tier *c = st_gpu_get_cache(s, i);
        if (!c) continue; /* (no cache, or a split's stage without MoE layers) */
        int32_t slots = 0;
        int64_t hits = 0, misses = 0, loaded = 0, pi = 0, pt = 0, pl = 0;
        double lo = 0.0, hi = 0.0;
        st_gpu_tier_counters(c, &slots, &hits, &misses, &loaded, &lo, &hi);
        if (!found) out->expert_cache_slots = 0, out->expert_cache_hits = out->expert_cache_misses = 0;
        out->expert_cache_slots += slots;
        out->expert_cache_hits += hits;
        out->expert_cache_misses += misses;
        if (!found || (hits + misses > 0 && (!any || lo < out->layer_hit_rate_min))) out->layer_hit_rate_min = lo;
        if (!found || (hits + misses > 0 && (!any || hi > out->layer_hit_rate_max))) out->layer_hit_rate_max = hi;
        found = 1;
        any |= hits + misses > 0;
        st_gpu_tier_prefetch_counters(c, &pi, &pt, &pl);
        out->prefetch_issued += pi;
        out->prefetch_timely += pt;
        out->prefetch_late += pl;
    }
}

static void cuda_stats(const strata_session *s, strata_session_stats *out) {
    cuda_cache_stats(s, out);
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
    for (int i = 0; i < STRATA_MAX_STAGES; i++) st_gpu_tier_reset_counters(st_gpu_get_cache(s, i));
    (void)st_gpu_tail_skipped(s, 1);
}

const st_backend st_backend_cuda = {"cuda", st_gpu_create, st_gpu_free, cuda_forward, cuda_stats,
                                    cuda_reset_stats, st_gpu_rs_call_begin, st_gpu_rs_truncate,
                                    st_gpu_mtp_attach, st_gpu_mtp_rows, st_gpu_mtp_detach};
