/* session_params.c - what a session accepts: strata_session_default_params, each option's range
 * (the placement's, and the rules about which options combine, are the placement plan's:
 * c/experts/plan.c), and strata_session_params_check, which runs them and the checks that need
 * the model and the machine (RAM budget against the experts' size, the backend usable here)
 * without creating anything. */
#include "session.h"
#include "plan.h"
#include "layer_split.h"
#include "nccl.h"
#include "ram_tier.h"

#include <math.h>
#include <stdio.h>

strata_session_params strata_session_default_params(void) {
    strata_session_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 0;
    p.n_batch = 512;
    p.kv_type = STRATA_TYPE_F16;
    p.n_threads = 0;
    p.backend = STRATA_BACKEND_CPU;
    p.degrade_zero = 0;
    p.degrade_tau = ST_DEGRADE_TAU_DEFAULT;
    p.degrade_eval = 0;
    p.cuda.graphs = 1;
    p.cuda.pdl = 1;
    p.cuda.attn_tc = -1;
    p.cuda.q8_tiles = 1;
    p.cuda.iq_stage_tables = -1;
    p.placement.stage_experts = -1;
    p.placement.pin_experts = -1;
    p.placement.pcie_frac = -1.0f;
    p.placement.cpu_misses = -1;
    p.placement.defer_cpu_below = 0.1f;
    for (int i = 0; i < STRATA_MAX_STAGES; i++) p.split.device[i] = i; /* one stage per device */
    p.split.peer_device = -1;
    return p;
}

/* Each option on its own, but the placement's (plan.c): in range, flags 0 or 1. */
static strata_status st_check_ranges(const strata_session_params *p) {
    if (p->n_ctx < 0)
        return st_error(STRATA_ERR_INVALID_ARG, "session option n_ctx %d < 0", (int)p->n_ctx);
    if (p->kv_type != STRATA_TYPE_F16 && p->kv_type != STRATA_TYPE_F32)
        return st_error(STRATA_ERR_INVALID_ARG, "session option kv_type %s: expected f16 or f32",
                        strata_type_name(p->kv_type));
    if (p->backend != STRATA_BACKEND_CPU && p->backend != STRATA_BACKEND_CUDA)
        return st_error(STRATA_ERR_INVALID_ARG, "session option backend %d: expected %d (cpu) or %d "
                        "(cuda)", (int)p->backend, (int)STRATA_BACKEND_CPU, (int)STRATA_BACKEND_CUDA);
    if (p->degrade_zero != 0 && p->degrade_zero != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option degrade_zero %d: expected 0 or 1",
                        p->degrade_zero);
    if (!(p->degrade_tau >= 0.0f && p->degrade_tau <= 1.0f))
        return st_error(STRATA_ERR_INVALID_ARG, "session option degrade_tau %g: expected 0..1",
                        (double)p->degrade_tau);
    if (!(p->route_tail_skip >= 0.0f && p->route_tail_skip < 1.0f))
        return st_error(STRATA_ERR_INVALID_ARG, "session option route_tail_skip %g: expected 0 (off) up to "
                        "below 1", (double)p->route_tail_skip);
    if (p->degrade_eval && !p->degrade_zero)
        return st_error(STRATA_ERR_INVALID_ARG, "session option degrade_eval needs degrade_zero");
    if (p->cuda.attn_tc < -1 || p->cuda.attn_tc > 3)
        return st_error(STRATA_ERR_INVALID_ARG, "session option attn_tc %d (-1 auto, 0 FMA kernel, 1 "
                        "single f16, 2 split queries and probabilities, 3 split probabilities)", p->cuda.attn_tc);
    if (p->cuda.q8_tiles != 0 && p->cuda.q8_tiles != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option q8_tiles %d: expected 0 or 1", p->cuda.q8_tiles);
    if (p->cuda.iq_stage_tables < -1 || p->cuda.iq_stage_tables > 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option iq_stage_tables %d: expected -1 (auto), 0 "
                        "or 1", p->cuda.iq_stage_tables);
    if (p->cuda.q8_sm60 != 0 && p->cuda.q8_sm60 != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "session option q8_sm60 %d: expected 0 or 1", p->cuda.q8_sm60);
    if (p->cuda.q8_sm60_bps < 0 || p->cuda.q8_sm60_bps > 32)
        return st_error(STRATA_ERR_INVALID_ARG, "session option q8_sm60_bps %d: expected 1..32 (0: the default, 4)",
                        p->cuda.q8_sm60_bps);
    return STRATA_OK;
}

/* The layer split (layer_split.c) against the devices here and NCCL; nothing asked of the machine
 * when no split option is set (the one-device session's check is unchanged). */
static strata_status st_check_split(const strata_model *model, const strata_session_params *p) {
    const strata_split_params *q = &p->split;
    int any = st_split_asked(q) || q->pipeline_windows || q->peer_device != -1;
    for (int i = 0; i < STRATA_MAX_STAGES; i++) any |= q->expert_cache[i] != 0;
    if (!any) return STRATA_OK;
    int32_t n_devices = 0;
    ST_TRY(strata_cuda_device_count(&n_devices));
    char why[256];
    const char *nccl_missing = NULL;
    if (q->peer_device >= 0 && st_nccl_load(NULL) != STRATA_OK) {
        snprintf(why, sizeof why, "%s", strata_last_error());
        st_error_clear();
        nccl_missing = why;
    }
    return st_split_check(p, model->hp.n_layer, (int)n_devices, nccl_missing);
}

strata_status st_session_params_check(const strata_model *model, const strata_session_params *p) {
    if (!model) return st_error(STRATA_ERR_INVALID_ARG, "session: model is NULL");
    if (model->vocab_only || !model->arch || !model->layers)
        return st_error(STRATA_ERR_INVALID_ARG, "session: the model was loaded vocab_only (no weights)");
    strata_status st = st_check_ranges(p);
    if (st == STRATA_OK) st = st_plan_check(p);
    if (st == STRATA_OK) st = st_check_split(model, p);
    if (st == STRATA_OK && p->n_ctx == 0 && model->hp.n_ctx_train <= 0)
        st = st_error(STRATA_ERR_INVALID_ARG, "session: n_ctx is 0 and the model has no n_ctx_train");
    return st;
}

/* GPU bytes a CUDA session needs besides its routed experts and scratch: every other tensor
 * (the file's tensor bytes less the routed experts'), the KV cache at n_ctx (the GPU's layout:
 * K and V of every layer, max(head_dim, head_dim_v) per head), the staging slots CPU layers
 * bring (one layer's worth with stage_experts, two more with stage_ahead: reserved whatever the
 * split, so a split that leaves layers on the CPU still fits), and an allowance of 512 MiB for
 * scratch, the driver and the kernels (the margin the expert cache's auto size keeps). */
#define ST_FIT_ALLOWANCE (512LL << 20)

strata_status st_session_fit_gpu_mem(const strata_model *model, strata_session_params *p, int32_t *fit) {
    *fit = -1;
    const st_hparams *hp = &model->hp;
    strata_placement_params *q = &p->placement;
    if (p->backend != STRATA_BACKEND_CUDA || hp->n_expert <= 0 || q->gpu_mem <= 0 || q->expert_cache != 0 ||
        q->n_cpu_moe != 0)
        return STRATA_OK;
    int64_t *lb = calloc((size_t)hp->n_layer, sizeof *lb);
    if (!lb) return st_error(STRATA_ERR_NOMEM, "session: out of memory");
    int64_t experts = 0;
    for (int32_t il = 0; il < hp->n_layer; il++) { /* a leading dense layer: 0 bytes (its FFN is
                                                      * in `other`), so the split passes over it */
        const st_layer *L = &model->layers[il];
        lb[il] = (int64_t)(st_tensor_bytes(&L->ffn_gate_exps) + st_tensor_bytes(&L->ffn_up_exps) +
                           st_tensor_bytes(&L->ffn_down_exps));
        experts += lb[il];
    }
    /* a slot of either tier holds the largest expert; the RAM tier's (aligned) size stands for it */
    const int64_t slot = (int64_t)st_ram_tier_slot_bytes(model);
    const int64_t stage = q->stage_experts == 0 ? 0 : (q->stage_ahead ? 3 : 1) * (int64_t)hp->n_expert * slot;
    const int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
    const int64_t hd = hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v;
    const int64_t kv = 2 * (int64_t)hp->n_layer * hp->n_head_kv * n_ctx * hd * (p->kv_type == STRATA_TYPE_F16 ? 2 : 4);
    const int64_t other = (int64_t)model->info.n_bytes - experts;
    const int64_t fixed = (other > 0 ? other : 0) + kv + stage + ST_FIT_ALLOWANCE;
    const int32_t n = st_plan_fit_layers(q->gpu_mem, fixed, lb, hp->n_layer);
    free(lb);
    if (n < 0)
        return st_error(STRATA_ERR_NOMEM, "gpu_mem %lld MiB holds not even the weights besides the routed experts "
                        "(%lld MiB), the KV cache at n_ctx %lld (%lld MiB), staging slots (%lld MiB) and %lld "
                        "MiB of scratch", (long long)(q->gpu_mem >> 20), (long long)(other >> 20),
                        (long long)n_ctx, (long long)(kv >> 20), (long long)(stage >> 20),
                        (long long)(ST_FIT_ALLOWANCE >> 20));
    q->n_cpu_moe = n >= hp->n_layer ? -1 : n;
    *fit = n;
    return st_plan_check(p); /* the combinations again, now with n_cpu_moe */
}

/* A RAM budget must hold one token's experts (the RAM tier's own rule, checked before it exists). */
static strata_status st_check_ram_budget(const strata_model *model, const strata_session_params *p) {
    if (p->placement.ram_budget <= 0) return STRATA_OK;
    const st_hparams *hp = &model->hp;
    if (hp->n_expert <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "ram_budget: the model has no routed experts");
    const size_t slot = st_ram_tier_slot_bytes(model);
    const int64_t n_slots = p->placement.ram_budget / (int64_t)slot;
    if (n_slots < hp->n_expert_used)
        return st_error(STRATA_ERR_INVALID_ARG, "ram_budget %lld bytes holds %lld experts of %zu bytes; "
                        "one token needs %d (at least %lld bytes)", (long long)p->placement.ram_budget,
                        (long long)n_slots, slot, (int)hp->n_expert_used,
                        (long long)((int64_t)hp->n_expert_used * (int64_t)slot));
    return STRATA_OK;
}

strata_status strata_placement_fit(const strata_model *model, const strata_session_params *params,
                                   int32_t *n_cpu_layers) {
    if (!model || !n_cpu_layers) return st_error(STRATA_ERR_INVALID_ARG, "strata_placement_fit: NULL argument");
    strata_session_params p = params ? *params : strata_session_default_params();
    p.backend = STRATA_BACKEND_CUDA;
    p.placement.expert_cache = 0;
    p.placement.n_cpu_moe = 0;
    if (p.placement.gpu_mem <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_placement_fit: gpu_mem %lld: the bytes to fit, > 0",
                        (long long)p.placement.gpu_mem);
    if (model->hp.n_expert <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "strata_placement_fit: the model has no routed experts");
    strata_status st = st_session_params_check(model, &p);
    int32_t fit = -1;
    if (st == STRATA_OK) st = st_session_fit_gpu_mem(model, &p, &fit);
    if (st == STRATA_OK) *n_cpu_layers = fit;
    return st;
}

strata_status strata_session_params_check(const strata_model *model,
                                          const strata_session_params *params) {
    strata_session_params p = params ? *params : strata_session_default_params();
    strata_status st = st_session_params_check(model, &p);
    int32_t fit = -1; /* gpu_mem alone: the split must fit, and then combine */
    if (st == STRATA_OK) st = st_session_fit_gpu_mem(model, &p, &fit);
    if (st == STRATA_OK) st = st_check_ram_budget(model, &p);
    if (st == STRATA_OK && p.backend != STRATA_BACKEND_CPU) {
        strata_backend_info bi;
        st = strata_backend_query(p.backend, &bi);
        if (st == STRATA_OK && !bi.available)
            st = st_error(STRATA_ERR_UNSUPPORTED, "session option backend %s: not usable here: %s",
                          bi.name ? bi.name : "?", bi.detail);
    }
    return st;
}
