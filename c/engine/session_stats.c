/* session_stats.c - what a session did (strata_session_get_stats): the session's own counters,
 * the RAM tier's, and the backend's part (backend.h); strata_session_reset_stats zeroes them. */
#include "ram_tier.h"
#include "session.h"

#include <string.h>

void strata_session_reset_stats(strata_session *s) {
    if (!s) return;
    for (int32_t il = 0; il < s->dstats.n_layer; il++) s->dstats.eligible[il] = s->dstats.zeroed[il] = 0;
    s->dstats.eligible_total = s->dstats.zeroed_total = 0;
    memset(s->prof, 0, sizeof s->prof);
    s->prof_calls = s->prof_tokens = 0;
    s->pred_slots = s->pred_hits = 0;
    s->warm_bytes = 0;
    s->hand_offs = 0;
    s->hand_wait_s = s->cpu_step_s = 0;
    for (int32_t il = 0; il < s->model->hp.n_layer; il++) s->slots_gpu[il] = s->slots_cpu[il] = 0;
    s->pcie_bytes = 0;
    s->graph_launches = s->graph_rebuilds = 0;
    s->stage_batches = s->cpu_batches = s->split_batches = s->defer_calls = 0;
    s->tail_skipped = 0;
    st_ram_tier_reset_counters(s->ram);
    memset(&s->spec, 0, sizeof s->spec);
    s->be->reset_stats(s);
}

strata_status strata_session_get_stats(const strata_session *s, strata_session_stats *out) {
    if (!s || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_session_get_stats: NULL argument");
    memset(out, 0, sizeof *out);
    out->degrade_zero = s->degrade.enabled;
    out->degrade_eval = s->degrade.eval;
    out->degrade_tau = s->degrade.tau;
    out->route_tail_skip = s->tail_skip;
    out->route_tail_skipped = s->tail_skipped;
    out->degrade_slots = s->dstats.eligible_total;
    out->degrade_zeroed = s->dstats.zeroed_total;
    out->profile = s->profile;
    out->forward_calls = s->prof_calls;
    out->forward_tokens = s->prof_tokens;
    for (int i = 0; i < STRATA_PHASE_COUNT; i++) out->phase_seconds[i] = s->prof[i];
    int any = 0;
    for (int32_t il = 0; il < s->model->hp.n_layer; il++) {
        out->expert_slots_gpu += s->slots_gpu[il];
        out->expert_slots_cpu += s->slots_cpu[il];
        const int64_t tot = s->slots_gpu[il] + s->slots_cpu[il];
        if (!tot) continue;
        const double share = (double)s->slots_gpu[il] / (double)tot;
        if (!any || share < out->layer_gpu_share_min) out->layer_gpu_share_min = share;
        if (!any || share > out->layer_gpu_share_max) out->layer_gpu_share_max = share;
        any = 1;
    }
    out->pcie_bytes = s->pcie_bytes;
    st_ram_tier_counters(s->ram, &out->expert_cache_hits, &out->expert_cache_misses, &out->disk_bytes,
                         &out->prefetch_issued, &out->prefetch_timely, &out->prefetch_late);
    out->expert_cache_slots = st_ram_tier_slots(s->ram);
    st_ram_tier_layer_hits(s->ram, &out->layer_hit_rate_min, &out->layer_hit_rate_max);
    out->graph_launches = s->graph_launches;
    out->graph_rebuilds = s->graph_rebuilds;
    out->threads_pinned = s->threads_pinned;
    out->pcie_bytes_per_s = s->cost.pcie_bytes_per_s;
    out->pcie_latency_s = s->cost.pcie_latency_s;
    out->cpu_expert_fixed_s = s->cost.cpu_fixed_s;
    out->cpu_expert_per_row_s = s->cost.cpu_per_row_s;
    out->cpu_share_step_s = s->cost.cpu_step_s;
    out->cpu_share_expert_s = s->cost.cpu_expert_s;
    out->stage_batches = s->stage_batches;
    out->split_batches = s->split_batches;
    out->defer_cpu = s->plan.defer_cpu;
    out->defer_cpu_below = s->plan.defer_cpu && s->plan.defer_below < 1.0f ? s->plan.defer_below : 0.0f;
    out->defer_calls = s->defer_calls;
    out->cpu_batches = s->cpu_batches;
    out->predict_slots = s->pred_slots;
    out->predict_hits = s->pred_hits;
    out->cpu_warm_bytes = s->warm_bytes;
    out->cpu_hand_offs = s->hand_offs;
    out->cpu_hand_wait_s = s->hand_wait_s;
    out->cpu_step_s = s->cpu_step_s;
    out->gpu_mem_cpu_layers = s->fit_cpu_layers;
    out->kv_bytes_per_token = (int64_t)st_kv_bytes_per_token(&s->model->hp, s->kv_type);
    out->state_bytes = (int64_t)st_recurrent_state_bytes(&s->model->hp);
    int first = 1;
    for (int32_t il = 0; il < s->dstats.n_layer; il++) {
        if (s->dstats.eligible[il] == 0) continue;
        const double share = (double)s->dstats.zeroed[il] / (double)s->dstats.eligible[il];
        if (first || share < out->degrade_layer_min) out->degrade_layer_min = share;
        if (first || share > out->degrade_layer_max) out->degrade_layer_max = share;
        first = 0;
    }
    s->be->stats(s, out); /* the backend's figures (a GPU cache's replace the RAM tier's; its
                             allocations: kv_bytes, state_alloc_bytes) */
    return STRATA_OK;
}
