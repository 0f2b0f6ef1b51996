/* moe_block.c - the MoE block of the GPU forward pass (forward_cuda.c's layer loop calls it
 * between the attention and the join): a layer's router, top-k and shared-expert gate (route),
 * then, per chunk of g->moe_tokens tokens, the placement mode of the chunk's routed experts
 * chosen (resident, the GPU expert cache, the stage slots, the host's expert step, the doorbell
 * expert pool, the cache's misses by the pool), the mode run (place), the grouped expert kernel
 * and what joins its rows in g->proj (compute), and the shared expert. The block leaves its
 * output rows for the join (the residual and the next layer's norm, forward_cuda.c). Also the
 * placement's helpers: a CPU layer's hand-down, cpu_warm, the RAM tier's pipe, the cpu_misses
 * and stage_split splits, the next layer's expert prediction, and the expert pool's part of a call (the step
 * announced before the layers, its bookkeeping after the output). */
#include "moe_block.h"
#include "replay.h"

#include <stdlib.h>
#include <string.h>

#ifdef STRATA_HAVE_CUDA

/* ---------------------------------------------------------------------------------------------
 * The next layer's expert prediction (gpu_prefetch, pipe); a CPU layer's hand-down; cpu_warm
 * ------------------------------------------------------------------------------------------- */

/* Layer il's routing rule (st_route_scored's, ops.h) for the device kernels. */
static st_cuda_route_cfg st_gpu_route_cfg(const strata_session *s, int il) {
    const st_hparams *hp = &s->model->hp;
    st_cuda_route_cfg c;
    memset(&c, 0, sizeof c);
    c.n_expert = hp->n_expert;
    c.k = hp->n_expert_used;
    c.sigmoid = hp->gating == ST_GATING_SIGMOID;
    c.softmax_weight = hp->gating == ST_GATING_SOFTMAX_WEIGHT;
    c.norm = hp->expert_weights_norm;
    c.scale = hp->expert_weights_scale;
    c.n_groups = hp->n_expert_groups;
    c.n_group_used = hp->n_group_used;
    c.d_bias = s->gpu->layers[il].exp_probs_b;
    return c;
}

/* Enqueues the prediction of layer il + 1's experts for rows t0 .. t0 + tn (tn <= 8) from layer
 * il's residual (layer il + 1's FFN norm and router applied to it, as the CPU session's --pipe
 * does) and the copy of the ids into g->h_pf_ids (pinned): there once the stream has passed it. */
static strata_status st_gpu_predict_next(strata_session *s, int il, int64_t t0, int64_t tn) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd;
    const int32_t K = hp->n_expert_used;
    const st_gpu_layer *Nx = &g->layers[il + 1];
    TRY(st_cuda_rmsnorm(g->pf_x, E, g->x + t0 * E, E, Nx->ffn_norm, E, 1, tn, hp->norm_eps, g->stream));
    TRY(st_gpu_mm(g, &Nx->router, g->pf_x, tn, g->pf_logits));
    if (Nx->router_b) TRY(st_cuda_add_bias(g->pf_logits, hp->n_expert, Nx->router_b, hp->n_expert, tn, g->stream));
    const st_cuda_route_cfg rc = st_gpu_route_cfg(s, il + 1);
    TRY(st_cuda_moe_route_cfg(&rc, g->pf_logits, tn, g->pf_ids, g->pf_wts, NULL, g->stream));
    return st_cuda_memcpy_async(g->h_pf_ids, g->pf_ids, sizeof(int32_t) * (size_t)(tn * K), 0, g->stream);
}

/* pipe (decode-sized calls past the RAM budget): whether layer il predicts layer il + 1's experts. */
static int st_gpu_pipe_layer(const strata_session *s, int il, int64_t tn) {
    return s->gpu->pipe && tn <= 8 && il + 1 < s->model->hp.n_layer;
}

/* pipe: once the stream has passed st_gpu_predict_next's copy (the caller waited for the
 * stream), the RAM tier starts reading layer il + 1's predicted experts that are not in GPU
 * slots while layer il computes; st_ram_tier_table waits for a read still in flight. */
static void st_gpu_pipe_issue(strata_session *s, int il, int64_t tn) {
    st_gpu *g = s->gpu;
    int32_t n = (int32_t)(tn * s->model->hp.n_expert_used);
    if (g->cache && !st_plan_layer_on_cpu(&s->plan, il + 1)) { /* experts already in GPU slots need no read */
        st_gpu_tier_missed(g->cache, il + 1, g->h_pf_ids, n, g->h_pf_missed);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (g->h_pf_missed[i]) g->h_pf_ids[k++] = g->h_pf_ids[i];
        n = k;
    }
    st_ram_tier_prefetch(s->ram, il + 1, 1, g->h_pf_ids, n);
}

/* cpu_warm: whether layer il's hand-down (rows of a call of tn tokens) also predicts layer
 * il + 1, a CPU layer too, for the CPU threads to warm; one of this state's layers (a split's
 * stage holds the router and norm of its own layers only; l1 is n_layer without a split). */
static int st_gpu_warm_layer(const strata_session *s, int il, int64_t tn) {
    return s->gpu->warm_on && tn <= 8 && il + 1 < s->gpu->l1 && st_plan_layer_on_cpu(&s->plan, il + 1);
}

/* A CPU layer's hand-down: rows t0 .. t0 + tn of xn, their routing ids and weights into the
 * pinned h_ rows (asynchronous copies, or none when the decode step's router wrote them there:
 * g->hand_ready), then the wait for them. warm: behind the copies the GPU
 * predicts layer il + 1's experts (their ids reach h_pf_ids while the CPU computes this layer;
 * ev_pred marks them), and only the copies are waited for. */
static strata_status st_gpu_hand_down(strata_session *s, int il, int64_t t0, int64_t tn, int warm) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, K = hp->n_expert_used;
    if (!g->hand_ready) { /* else the router wrote them into the mapped rows */
        TRY(st_cuda_memcpy_async(g->h_xn + t0 * E, g->xn + t0 * E, sizeof(float) * (size_t)(tn * E), 0, g->stream));
        TRY(st_cuda_memcpy_async(g->h_ids + t0 * K, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K), 0,
                                 g->stream));
        TRY(st_cuda_memcpy_async(g->h_wts + t0 * K, g->wts + t0 * K, sizeof(float) * (size_t)(tn * K), 0,
                                 g->stream));
    }
    g->hand_ready = 0;
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E) + (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
    if (warm) {
        TRY(st_cuda_event_record(g->ev_hand, g->stream));
        TRY(st_gpu_predict_next(s, il, t0, tn));
        TRY(st_cuda_event_record(g->ev_pred, g->stream));
        s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
    }
    const double t = st_prof_clock();
    const strata_status st = warm ? st_cuda_event_synchronize(g->ev_hand) : st_cuda_stream_synchronize(g->stream);
    s->hand_wait_s += st_prof_clock() - t;
    s->hand_offs++;
    return st;
}

/* cpu_warm: the routing of a CPU layer is here: the warm of its predicted experts stops (its
 * bytes counted) and the prediction is scored against the routing ids[0 .. n). */
void st_gpu_warm_end(strata_session *s, const int32_t *ids, int64_t n) {
    st_gpu *g = s->gpu;
    if (!g->warm_on) return;
    s->warm_bytes += st_moe_warm_stop(s->tp, &g->warm);
    if (!g->warm_n || !ids) return;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < g->warm_n; j++)
            if (g->warm_ids[j] == ids[i]) { s->pred_hits++; break; }
    s->pred_slots += n;
    g->warm_n = 0;
}

/* cpu_warm: once the CPU has computed layer il, its threads start reading layer il + 1's
 * predicted experts (the ids came down behind the hand-down) while the GPU goes on. */
static strata_status st_gpu_warm_begin(strata_session *s, int il, int64_t tn) {
    st_gpu *g = s->gpu;
    const int32_t X = s->model->hp.n_expert, K = s->model->hp.n_expert_used;
    TRY(st_cuda_event_synchronize(g->ev_pred)); /* long done: the CPU's step took longer */
    const int64_t n = tn * K;
    memcpy(g->warm_ids, g->h_pf_ids, sizeof(int32_t) * (size_t)n);
    g->warm_n = n;
    st_moe_warm_start(s->tp, &g->warm, s->experts + (size_t)(il + 1) * (size_t)X, X, g->warm_ids, n);
    return STRATA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The routed expert kernel's arguments; cpu_misses (the split of misses between loads and the CPU)
 * ------------------------------------------------------------------------------------------- */

/* The grouped expert kernel's arguments for rows t0 .. t0+tn-1 of layer il's routed experts:
 * the expert table (device) and the routed ids to compute (-1: another side's), weighted by the
 * routing's weights, written into g->proj (not accumulated). */
static st_cuda_moe_args st_gpu_routed_args(const strata_session *s, int il, int64_t t0, int64_t tn,
                                           const void *table, const int32_t *ids) {
    const st_hparams *hp = &s->model->hp;
    const st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_embd, K = hp->n_expert_used;
    st_cuda_moe_args a;
    memset(&a, 0, sizeof a);
    a.experts = table;
    a.n_expert = hp->n_expert;
    a.type_gate = a.type_up = G->exp_type_gu;
    a.type_down = G->exp_type_down;
    a.n_embd = E;
    a.n_ff = hp->n_ff_exp;
    a.x = g->xn + t0 * E;
    a.xq = tn == 1 && g->xq_ready ? g->moe_xq : NULL; /* from the one-token router */
    a.T = tn;
    a.ids = ids;
    a.wts = g->wts + t0 * K;
    a.k = (int32_t)K;
    a.out = g->proj + t0 * E;
    a.accumulate = 0;
    a.ws = g->moe_ws;
    a.ws_bytes = g->moe_ws_bytes;
    a.sync = g->sync + ST_GPU_SYNC_MOE; /* one-token calls: h quantized in the gate/up kernel */
    a.n_sync = ST_GPU_SYNC - ST_GPU_SYNC_MOE;
    a.b_gate = G->b_gate_exps; /* gpt-oss (the table's ids are the experts': its rows follow) */
    a.b_up = G->b_up_exps;
    a.b_down = G->b_down_exps;
    a.act = hp->expert_act_oai ? 1 : 0;
    return a;
}

/* cpu_misses: the distinct experts of the P routed slots ids (host; those with missed[i] set, or
 * every valid one when missed is NULL) listed in g->misses with their rows and heaviest weight,
 * g->miss_of[e] their index (the caller resets it to -1). Returns how many. */
static int st_gpu_list_misses(st_gpu *g, const int32_t *ids, const float *wts, int64_t P, int32_t X,
                              const uint8_t *missed) {
    int nm = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X || (missed && !missed[i])) continue;
        int32_t m = g->miss_of[e];
        if (m < 0) {
            m = g->miss_of[e] = nm++;
            g->misses[m].expert = e;
            g->misses[m].rows = 0;
            g->misses[m].weight = 0.0f;
        }
        g->misses[m].rows++;
        if (wts[i] > g->misses[m].weight) g->misses[m].weight = wts[i];
    }
    return nm;
}

/* cpu_misses: the missed experts of this call (ids, host, tn x K) split by the cost model into
 * loads and the CPU's share. When the CPU takes some, *split = 1, *gids = the GPU's ids (the CPU's
 * as -1, also uploaded to g->ids_split), g->h_ids_cpu = the CPU's (the rest -1), and the call's
 * normalized rows and weights are down in s->xn / s->wts for the CPU's step. */
static strata_status st_gpu_split_misses(strata_session *s, int il, int64_t t0, int64_t tn,
                                         const int32_t *ids, int *split, const int32_t **gids) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const int64_t E = hp->n_embd, P = tn * K;
    float *wts = s->wts + t0 * K;
    if (!s->degrade.enabled) /* (DEGRADE_ZERO brought them down already) */
        TRY(st_cuda_memcpy_d2h(wts, g->wts + t0 * K, sizeof(float) * (size_t)P));
    st_gpu_tier_missed(g->cache, il, ids, P, s->missed);
    const int nm = st_gpu_list_misses(g, ids, wts, P, X, s->missed);
    *split = 0;
    if (nm > 0) st_cost_decide(&s->cost, g->misses, nm, g->miss_load, NULL);
    for (int m = 0; m < nm; m++) /* cache_admit: a load that would evict a more used expert */
        if (g->miss_load[m] && !st_gpu_tier_admits(g->cache, il, g->misses[m].expert)) g->miss_load[m] = 0;
    int64_t ncpu = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        const int cpu = e >= 0 && e < X && g->miss_of[e] >= 0 && !g->miss_load[g->miss_of[e]];
        g->h_ids_gpu[i] = cpu ? -1 : e;
        g->h_ids_cpu[i] = cpu ? e : -1;
        ncpu += cpu;
    }
    for (int m = 0; m < nm; m++) g->miss_of[g->misses[m].expert] = -1;
    if (ncpu == 0) return STRATA_OK;
    st_gpu_tier_count_misses(g->cache, il, g->h_ids_cpu, P);
    *split = 1;
    *gids = g->h_ids_gpu;
    s->slots_cpu[il] += ncpu;
    s->slots_gpu[il] -= ncpu;
    TRY(st_cuda_memcpy_h2d(g->ids_split + t0 * K, g->h_ids_gpu, sizeof(int32_t) * (size_t)P));
    TRY(st_cuda_memcpy_d2h(s->xn + t0 * E, g->xn + t0 * E, sizeof(float) * (size_t)(tn * E)));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)P + sizeof(float) * (size_t)(tn * E + P));
    return STRATA_OK;
}

/* cpu_misses with CPU layers (n_cpu_moe), decode-sized calls, and stage_split's prompt-sized
 * ones: every routed expert of the layer is a miss. The cost model (or pcie_frac) picks the
 * experts to copy over PCIe into the stage slots, heaviest first: by gate weight, or with by_rows
 * (prompts) by rows. ids, wts: the call's routing on the host (tn x K). *n_gpu, *n_cpu: the
 * slot-rows each side takes (*n_gpu 0: the CPU computes the layer as without the split);
 * g->h_ids_cpu then has the CPU's ids (-1 for the GPU's), g->h_ids_gpu the GPU's (-1 for the
 * CPU's). */
static void st_gpu_split_decide(strata_session *s, const int32_t *ids, const float *wts, int64_t tn, int by_rows,
                                int64_t *n_gpu, int64_t *n_cpu) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const int64_t P = tn * K;
    *n_gpu = *n_cpu = 0;
    const int nm = st_gpu_list_misses(g, ids, wts, P, X, NULL);
    if (by_rows)
        for (int m = 0; m < nm; m++) g->misses[m].weight = (float)g->misses[m].rows;
    const int nl = nm > 0 ? st_cost_decide(&s->cost, g->misses, nm, g->miss_load, NULL) : 0;
    int64_t ng = 0, nc = 0;
    for (int64_t i = 0; i < P; i++) {
        const int32_t e = ids[i];
        const int gpu = e >= 0 && e < X && g->miss_load[g->miss_of[e]];
        g->h_ids_gpu[i] = gpu ? e : -1;
        g->h_ids_cpu[i] = gpu ? -1 : e;
        ng += gpu;
        nc += !gpu && e >= 0 && e < X;
    }
    for (int m = 0; m < nm; m++) g->miss_of[g->misses[m].expert] = -1;
    if (nl == 0 || ng == 0) return;
    *n_gpu = ng;
    *n_cpu = nc;
}

/* Whether a split call of tn tokens gives the CPU's bits (split_exact: decode-sized calls only;
 * stage_split's prompt-sized ones run the GPU's own kernel). */
static int st_gpu_split_exact(const st_gpu *g, int64_t tn) { return g->split_exact && tn <= ST_POOL_T; }

/* The GPU's share of a split CPU layer (st_gpu_split_decide): its experts' copies enqueued on the
 * compute stream (st_gpu_tier_async_loads), then its kernel, while the pool computes the CPU's
 * share: into g->proj (the caller adds the CPU's sum), or with exact its rows per slot in the
 * CPU's arithmetic into g->rows_gpu (the caller combines both sides' rows). */
static strata_status st_gpu_split_enqueue(strata_session *s, int il, int64_t t0, int64_t tn, int exact) {
    st_gpu *g = s->gpu;
    const int32_t K = s->model->hp.n_expert_used;
    const int64_t P = tn * K;
    const void *table = NULL;
    TRY(st_gpu_tier_table(g->stage, il, g->h_ids_gpu, tn, K, 0, g->stream, &table));
    /* the GPU's ids go up from the pinned ring beside the hand-off rows (the next layer's
     * routing wait covers this copy before they are written again) */
    int32_t *hg = g->h_split_ids + t0 * K;
    memcpy(hg, g->h_ids_gpu, sizeof(int32_t) * (size_t)P);
    TRY(st_cuda_memcpy_async(g->ids_split + t0 * K, hg, sizeof(int32_t) * (size_t)P, 1, g->stream));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)P);
    st_cuda_moe_args a = st_gpu_routed_args(s, il, t0, tn, table, g->ids_split + t0 * K);
    if (exact) {
        a.ws = g->exact_ws;
        a.ws_bytes = g->exact_ws_bytes;
        return st_cuda_moe_exact_rows(&a, g->rows_gpu, g->stream);
    }
    return st_cuda_moe_ffn(&a, g->stream);
}

/* ---------------------------------------------------------------------------------------------
 * The block: route; per chunk choose the mode, place, compute; the shared expert
 * ------------------------------------------------------------------------------------------- */

/* Where a chunk's routed experts are computed (st_gpu_moe_choose). */
typedef enum {
    ST_MOE_RESIDENT,    /* the layer's experts all in device memory: the kernel reads G->experts */
    ST_MOE_CACHED,      /* the GPU expert cache: the routing down, the misses loaded into its slots
                         * (with cpu_misses some computed by the CPU), the kernel reads the slots */
    ST_MOE_STAGED,      /* a CPU layer in a long enough batch: the batch's experts copied into the
                         * stage slots, the kernel reads them there */
    ST_MOE_HOST,        /* a CPU layer: rows and routing handed down to the host's expert step, its
                         * result up (with cpu_split or stage_split a share of the experts on
                         * the GPU) */
    ST_MOE_POOL,        /* a CPU layer of a decode-sized call: the doorbell expert pool computes it,
                         * published and awaited by kernels, no host wait */
    ST_MOE_POOL_MISSES, /* a cache layer of a decode-sized call with the pool: the hits on the GPU,
                         * the misses by the pool (the split made on the device); pm_exact: both
                         * sides' rows per slot in the CPU's arithmetic, summed in slot order */
    ST_MOE_DROPPED,     /* a CPU layer in a self-draft step: its routed experts dropped (the draft
                         * is the model with its GPU-resident experts only), the rows zero */
} st_moe_mode;

/* One chunk of a layer's MoE call, rows t0 .. t0 + tn: its mode and what placing it leaves for
 * the expert kernel and the steps after it. */
typedef struct {
    int il;
    int64_t t0, tn;
    st_moe_mode mode;
    const void *table;   /* the expert table the routed kernel reads */
    const int32_t *ids;  /* the routed ids it computes (device; -1: another side's) */
    int cpu_layer;       /* the CPU computes the routed experts (HOST, POOL): no routed kernel */
    int staged;          /* a CPU layer's experts are staged to the GPU for this batch */
    int ids_down;        /* the routing is in s->ids (host) */
    int handed;          /* a CPU layer's rows, routing and weights are in the pinned h_ rows */
    int warm;            /* cpu_warm: the hand-down predicted layer il + 1 */
    int pf;              /* gpu_prefetch: the next layer's predicted experts load meanwhile */
    int pipe;            /* pipe: the next layer's prediction rides on this layer's routing wait */
    int pm;              /* the pool computes the cache's misses (POOL_MISSES) */
    int split;           /* cpu_misses: some misses of this chunk are the CPU's */
    int exact;           /* cache_exact (decode-sized) or pm_exact: every slot's row in the CPU's
                          * arithmetic, the GPU's and the CPU's (the pool's) combined in slot order */
} st_moe_chunk;

/* The router's logits of the T rows of g->xn (its bias added: gpt-oss) into g->router. */
static strata_status st_gpu_router_rows(st_gpu *g, const st_gpu_layer *G, int32_t X, int64_t T) {
    TRY(st_gpu_mm(g, &G->router, g->xn, T, g->router));
    if (G->router_b) TRY(st_cuda_add_bias(g->router, X, G->router_b, X, T, g->stream));
    return STRATA_OK;
}

/* The shared expert's gate of the T rows (qwen2moe's sigmoid) into g->shgate, where it has one. */
static strata_status st_gpu_shared_gate(st_gpu *g, const st_gpu_layer *G, int64_t T) {
    if (!G->shexp || !G->shexp_gate_inp.data) return STRATA_OK;
    TRY(st_gpu_mm(g, &G->shexp_gate_inp, g->xn, T, g->shgate));
    return st_cuda_sigmoid(g->shgate, g->shgate, T, g->stream);
}

/* Route: the router (a decode step: router GEMV, routing and the experts' q8_1 row of xn in one
 * launch; else the router GEMV, its top-k per chunk) and the shared expert's gate, for the T rows
 * of g->xn (the FFN's norm, fused into the attention's residual). */
strata_status st_gpu_moe_route(strata_session *s, int il, int64_t T, st_moe_call *mc) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    mc->il = il;
    mc->T = T;
    mc->out = g->proj;
    mc->r1 = T == 1 && g->moe_xq && st_cuda_moe_router1_supports(&G->router, X, K) &&
             !s->replay; /* (a replayed routing replaces the ids after the router: moe_choose) */
    /* a CPU layer's decode step: the router also writes xn, ids and weights into the mapped
     * hand-down rows */
    g->hand_ready = mc->r1 && g->d_xn && st_plan_layer_on_cpu(&s->plan, il) && !st_gpu_pool_call(s, T) &&
                    !g->d_tail && !s->self_draft; /* (the tail skip changes the ids after the router;
                                                     * a self-draft step hands nothing down) */
    st_cuda_route_cfg rc = st_gpu_route_cfg(s, il);
    rc.d_logit_bias = G->router_b; /* (gpt-oss) the one-token router adds it itself */
    if (mc->r1) {
        TRY(st_cuda_moe_router1_cfg(&G->router, g->xn, &rc, g->router, g->ids, g->wts,
                                    g->hand_ready ? &g->hand_db : NULL, g->moe_xq, g->hand_ready ? g->d_xn : NULL,
                                    g->sync + ST_GPU_SYNC_ROUTER, g->stream));
    } else {
        TRY(st_gpu_router_rows(g, G, X, T));
    }
    g->xq_ready = mc->r1;
    return st_gpu_shared_gate(g, G, T);
}

/* stage_experts (a CPU layer, not a pool call): whether the chunk's experts are staged to the GPU,
 * by the threshold, or (auto) by the cost model on the batch's routing, brought down for it;
 * counted as a staged or a CPU batch. */
static strata_status st_gpu_stage_decide(strata_session *s, st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, t0 = c->t0, tn = c->tn;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    if (s->plan.stage_experts > 0) {
        c->staged = tn >= s->plan.stage_experts;
    } else { /* auto: the routing down, then the cost model on this batch */
        int32_t *ids = s->ids + t0 * K;
        if (tn * E <= 16384) { /* decode-sized: the CPU's inputs come down with the
                                * routing, one wait for both (usually the CPU's) */
            c->warm = st_gpu_warm_layer(s, c->il, tn);
            TRY(st_gpu_hand_down(s, c->il, t0, tn, c->warm));
            memcpy(ids, g->h_ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K));
            c->handed = 1;
        } else {
            TRY(st_cuda_memcpy_d2h(ids, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K)));
            s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
        }
        c->ids_down = 1;
        int nd = 0;
        for (int64_t i = 0; i < tn * K; i++) {
            const int32_t e = ids[i];
            if (e < 0 || e >= X) continue;
            if (g->stage_rows[e]++ == 0) g->stage_list[nd++] = e;
        }
        for (int q = 0; q < nd; q++) { /* rows of the distinct experts, then reset */
            const int32_t e = g->stage_list[q];
            g->stage_list[q] = g->stage_rows[e];
            g->stage_rows[e] = 0;
        }
        c->staged = st_cost_stage(&s->cost, g->stage_list, nd, NULL, NULL);
    }
    if (c->staged) s->stage_batches++;
    else s->cpu_batches++;
    return STRATA_OK;
}

/* strata_session_set_route_replay (benchmarks): rows t0 .. t0 + tn of layer il take the recorded
 * routing, written into pinned rows of the layer's own (the copies of every layer of a call may
 * be in flight at once; a call ends synchronized) and copied up over the router's ids and weights
 * in stream order. */
static strata_status st_gpu_replay(strata_session *s, int il, int64_t t0, int64_t tn) {
    st_gpu *g = s->gpu;
    const int64_t K = s->model->hp.n_expert_used, per = (int64_t)s->n_batch * K;
    if (!g->h_replay_ids) {
        const size_t n = (size_t)(s->model->hp.n_layer * per);
        TRY(st_cuda_host_alloc((void **)&g->h_replay_ids, sizeof(int32_t) * n));
        TRY(st_cuda_host_alloc((void **)&g->h_replay_wts, sizeof(float) * n));
    }
    int32_t *ids = g->h_replay_ids + il * per + t0 * K;
    float *wts = g->h_replay_wts + il * per + t0 * K;
    st_replay_rows(s->replay, il, s->n_past + t0, tn, ids, wts);
    TRY(st_cuda_memcpy_async(g->ids + t0 * K, ids, sizeof(int32_t) * (size_t)(tn * K), 1, g->stream));
    TRY(st_cuda_memcpy_async(g->wts + t0 * K, wts, sizeof(float) * (size_t)(tn * K), 1, g->stream));
    s->pcie_bytes += (int64_t)(2 * sizeof(float) * (size_t)(tn * K));
    return STRATA_OK;
}

/* Choose a chunk's mode: its top-k (unless the one-token router made it), then by the layer's
 * place (st_plan_layer_on_cpu), a CPU layer's staging decision, the call's size (the pool serves
 * decode-sized calls) and the expert cache; its slot-rows counted by side. */
static strata_status st_gpu_moe_choose(strata_session *s, const st_moe_call *mc, int64_t t0, int64_t tn,
                                       st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int il = mc->il;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    memset(c, 0, sizeof *c);
    c->il = il;
    c->t0 = t0;
    c->tn = tn;
    c->table = g->layers[il].experts;
    c->ids = g->ids + t0 * K;
    if (!mc->r1) {
        const st_cuda_route_cfg rc = st_gpu_route_cfg(s, il);
        TRY(st_cuda_moe_route_cfg(&rc, g->router + t0 * X, tn, g->ids + t0 * K, g->wts + t0 * K, NULL, g->stream));
    }
    if (s->replay) TRY(st_gpu_replay(s, il, t0, tn));
    if (g->d_tail) /* route_tail_skip: the light tail of each token's slots dropped on the device */
        TRY(st_cuda_route_tail_skip(g->ids + t0 * K, g->wts + t0 * K, tn, K, s->tail_skip, g->d_tail, g->stream));
    TRY(st_gpu_mark(s, STRATA_PHASE_ROUTER));
    /* a self-draft step drops a CPU layer's routed experts: nothing staged, handed down or counted */
    const int dropped = st_plan_layer_on_cpu(&s->plan, il) && s->self_draft;
    /* a CPU layer's experts are staged to the GPU for a long enough batch */
    if (st_plan_layer_on_cpu(&s->plan, il) && !dropped && g->stage && s->plan.stage_experts != 0 &&
        !st_gpu_pool_call(s, mc->T))
        TRY(st_gpu_stage_decide(s, c));
    /* prefetch the next layer's experts: decode-sized calls of cache layers; within this state's
     * layers (a split's stage: the next stage holds the next layer's router and its own cache) */
    c->pf = g->prefetch && !s->self_draft && tn <= 8 && il + 1 < g->l1 && !st_plan_layer_on_cpu(&s->plan, il) &&
            !st_plan_layer_on_cpu(&s->plan, il + 1);
    c->cpu_layer = st_plan_layer_on_cpu(&s->plan, il) && !c->staged;
    /* cuda_doorbell with a cache, decode-sized: the pool computes the misses while the
     * GPU computes the hits (slot-rows counted after the step, from its routing) */
    c->pm = !c->cpu_layer && g->pool_misses && st_gpu_pool_call(s, mc->T);
    if (c->cpu_layer) s->slots_cpu[il] += dropped ? 0 : tn * K;
    else if (!c->pm) s->slots_gpu[il] += tn * K;
    /* pipe: the next layer's prediction rides on this layer's wait for its routing */
    c->pipe = !dropped && !c->staged && st_gpu_pipe_layer(s, il, tn) && (c->cpu_layer || g->cache);
    if (dropped) c->mode = ST_MOE_DROPPED;
    else if (c->staged) c->mode = ST_MOE_STAGED;
    else if (c->cpu_layer) c->mode = st_gpu_pool_call(s, mc->T) ? ST_MOE_POOL : ST_MOE_HOST;
    else if (c->pm) c->mode = ST_MOE_POOL_MISSES;
    else if (g->cache) c->mode = ST_MOE_CACHED;
    else c->mode = ST_MOE_RESIDENT;
    return STRATA_OK;
}

/* STAGED: the routing down (unless the staging decision brought it), the batch's experts copied
 * into the stage slots, whose table the kernel reads. */
static strata_status st_gpu_moe_staged(strata_session *s, st_moe_chunk *c) {
    st_gpu *g = s->gpu;
    const int32_t K = s->model->hp.n_expert_used;
    const int64_t t0 = c->t0, tn = c->tn;
    int32_t *ids = s->ids + t0 * K;
    st_gpu_warm_end(s, NULL, 0); /* the GPU computes this CPU layer: no warm wanted */
    if (!c->ids_down) {
        TRY(st_cuda_memcpy_d2h(ids, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K)));
        s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
    }
    return st_gpu_tier_table(g->ahead ? g->ahead : g->stage, c->il, ids, tn, K, 0, g->stream, &c->table);
}

/* stage_ahead: after a staged layer's last chunk is enqueued, the next layer's experts, when it is
 * a CPU layer too, start on the ahead tier's copy stream (behind the kernels enqueued so far, so
 * no slot a queued kernel reads is overwritten); its staged batch then finds them loading or done
 * (st_gpu_tier_table settles them, the compute stream waiting on the copies still running). */
static strata_status st_gpu_stage_ahead(strata_session *s, const st_moe_call *mc, const st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    if (!g->ahead || c->mode != ST_MOE_STAGED || c->t0 + c->tn < mc->T || c->il + 1 >= g->l1 ||
        !st_plan_layer_on_cpu(&s->plan, c->il + 1)) /* (l1: the next layer is this state's) */
        return STRATA_OK;
    return st_gpu_tier_prefetch(g->ahead, c->il + 1, g->ahead_ids, hp->n_expert, g->stream);
}

/* DEGRADE_ZERO (a cache layer, the routing ids down): light missed experts are not loaded; the
 * weights come down for the decision, the ids it changed go back up. */
static strata_status st_gpu_degrade_zero(strata_session *s, const st_moe_chunk *c, int32_t *ids) {
    st_gpu *g = s->gpu;
    const int32_t K = s->model->hp.n_expert_used;
    const int64_t t0 = c->t0, tn = c->tn;
    TRY(st_cuda_memcpy_d2h(s->wts + t0 * K, g->wts + t0 * K, sizeof(float) * (size_t)(tn * K)));
    if (!s->degrade.eval) st_gpu_tier_missed(g->cache, c->il, ids, tn * K, s->missed);
    if (st_degrade_apply(&s->degrade, !s->gen_phase, tn, K, ids, s->wts + t0 * K,
                         s->degrade.eval ? NULL : s->missed, &s->dstats, c->il) > 0)
        TRY(st_cuda_memcpy_h2d(g->ids + t0 * K, ids, sizeof(int32_t) * (size_t)(tn * K)));
    return STRATA_OK;
}

/* A self-draft step (a cache layer, the routing down): every missed expert dropped, the ids it
 * changed go back up; nothing is loaded. */
static strata_status st_gpu_self_draft_drop(strata_session *s, const st_moe_chunk *c, int32_t *ids) {
    st_gpu *g = s->gpu;
    const int32_t K = s->model->hp.n_expert_used;
    st_gpu_tier_missed(g->cache, c->il, ids, c->tn * K, s->missed);
    if (st_degrade_drop_missed(c->tn * K, ids, s->missed) > 0)
        TRY(st_cuda_memcpy_h2d(g->ids + c->t0 * K, ids, sizeof(int32_t) * (size_t)(c->tn * K)));
    return STRATA_OK;
}

/* CACHED: the routing down (DEGRADE_ZERO: light misses dropped; a self-draft step: all); cpu_misses: the misses split
 * between loads and the CPU (the kernel then reads g->ids_split; with cache_exact, decode-sized
 * and not a self-draft step, the exact rows, split or not); the misses loaded into the cache's
 * slots, whose table the kernel reads. */
static strata_status st_gpu_moe_cached(strata_session *s, st_moe_chunk *c) {
    st_gpu *g = s->gpu;
    const int il = c->il;
    const int32_t K = s->model->hp.n_expert_used;
    const int64_t t0 = c->t0, tn = c->tn;
    int32_t *ids = s->ids + t0 * K;
    TRY(st_cuda_memcpy_d2h(ids, g->ids + t0 * K, sizeof(int32_t) * (size_t)(tn * K)));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(tn * K));
    if (s->self_draft) TRY(st_gpu_self_draft_drop(s, c, ids));
    else if (s->degrade.enabled) TRY(st_gpu_degrade_zero(s, c, ids));
    const int32_t *gids = ids; /* the experts the GPU computes */
    if (g->split && !s->self_draft) TRY(st_gpu_split_misses(s, il, t0, tn, ids, &c->split, &gids));
    if (c->split) c->ids = g->ids_split + t0 * K;
    c->exact = g->cache_exact && tn <= ST_POOL_T && !s->self_draft;
    TRY(st_gpu_tier_table(g->cache, il, gids, tn, K, c->pf, g->stream, &c->table));
    if (c->pf) { /* layer il + 1's router on this residual: its predicted experts start
                  * loading on the copy stream while this layer computes (this layer's
                  * slots stay held until its kernel is enqueued) */
        TRY(st_gpu_predict_next(s, il, t0, tn));
        TRY(st_cuda_stream_synchronize(g->stream));
        TRY(st_gpu_tier_prefetch(g->cache, il + 1, g->h_pf_ids, tn * K, g->stream));
    }
    if (c->pipe) st_gpu_pipe_issue(s, il, tn); /* the next layer's reads start */
    return STRATA_OK;
}

/* POOL: the expert pool (cuda_doorbell) computes the CPU layer: the rows and routing published
 * into the layer's mapped request, the pool's rows awaited on the device and copied into
 * g->proj; the host goes on enqueueing (the CPU layers are the first ones: db[il]). defer_cpu
 * (not the last layer): the heavy rows awaited at the pool's partial flag (the split), or none
 * (every row deferred: g->proj zeroed); the rest join after the next layer's attention
 * (st_gpu_defer_join). check: both parts awaited here, added in that order. */
static strata_status st_gpu_moe_pool(strata_session *s, const st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, tn = c->tn;
    const int32_t K = hp->n_expert_used;
    st_doorbell_layer *r = &g->db[c->il];
    TRY(st_cuda_pool_publish(g->xn, g->ids, g->wts, tn, E, K, st_gpu_db_dev(g, r->x),
                             st_gpu_db_dev(g, r->ids), st_gpu_db_dev(g, r->wts),
                             st_gpu_db_dev(g, &r->T), st_gpu_db_dev(g, &r->req_seq), g->d_step,
                             g->stream));
    const int defer = g->defer && c->il + 1 < hp->n_layer;
    const int split = defer && r->out_light; /* the pool computes the heavy rows first */
    if (!defer) {
        TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, r->out), tn * E,
                              g->proj, g->d_err, ST_POOL_WAIT_DONE, g->stream));
    } else if (g->defer == 2) { /* check: on time, the two parts added in the deferred order */
        if (split) {
            TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->part_seq), g->d_step, st_gpu_db_dev(g, r->out), tn * E,
                                  g->proj, g->d_err, ST_POOL_WAIT_PART, g->stream));
            TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, r->out_light),
                                  tn * E, g->defer_part, g->d_err, ST_POOL_WAIT_DONE, g->stream));
            TRY(st_cuda_add(g->proj, g->proj, g->defer_part, 1.0f, tn * E, g->stream));
        } else {
            TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, r->out), tn * E,
                                  g->proj, g->d_err, ST_POOL_WAIT_DONE, g->stream));
        }
        s->defer_calls++;
    } else {
        if (split)
            TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->part_seq), g->d_step, st_gpu_db_dev(g, r->out), tn * E,
                                  g->proj, g->d_err, ST_POOL_WAIT_PART, g->stream));
        else
            TRY(st_cuda_memset_async(g->proj, 0, sizeof(float) * (size_t)(tn * E), g->stream));
        g->defer_pending = c->il;
        g->defer_src = split ? r->out_light : r->out;
        s->defer_calls++;
    }
    s->pcie_bytes += (int64_t)(2 * sizeof(float) * (size_t)(tn * E) +
                               (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
    if (g->stage) s->cpu_batches++; /* as the staging decision counts a CPU batch */
    return STRATA_OK;
}

/* HOST, the CPU's step on the pool's workers over the hand-off rows (the CPU's share of the ids
 * when the GPU takes ng slot-rows); the host enqueues the GPU's share (copies and kernel)
 * meanwhile, then joins the step. exact: both sides give rows per slot in the CPU's arithmetic,
 * summed on the GPU in slot order, so the result is the CPU's alone whatever the share. */
static strata_status st_gpu_host_step(strata_session *s, const st_moe_chunk *c, const st_expert *ex, int64_t ng,
                                      int64_t nc) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, t0 = c->t0, tn = c->tn;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    float *hx = g->h_xn + t0 * E, *hw = g->h_wts + t0 * K, *hp_ = g->h_proj + t0 * E;
    int32_t *hi = g->h_ids + t0 * K;
    const int cpu_step = !ng || nc, exact = ng && st_gpu_split_exact(g, tn);
    const double t_step = st_prof_clock();
    if (cpu_step) st_moe_ffn_begin(s->tp, ex, X, hx, tn, ng ? g->h_ids_cpu : hi, hw, K, hp_, s->moe_ws);
    const strata_status est = ng ? st_gpu_split_enqueue(s, c->il, t0, tn, exact) : STRATA_OK;
    if (cpu_step && exact) st_moe_ffn_end_rows(s->tp, s->moe_ws, g->h_rows);
    else if (cpu_step) st_moe_ffn_end(s->tp, s->moe_ws);
    s->cpu_step_s += st_prof_clock() - t_step;
    if (s->ram) st_ram_tier_release(s->ram);
    return est;
}

/* The exact joins' last step: rows t0 .. t0 + tn summed in slot order into g->proj, as the CPU's
 * st_moe_ffn sums them, from the GPU's rows (g->rows_gpu: the slots of gids) and the CPU's nc
 * slots' rows (g->h_rows: read from the mapped memory, or copied up first; none: not read). */
static strata_status st_gpu_exact_combine(strata_session *s, int64_t t0, int64_t tn, const int32_t *gids, int64_t nc) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    const float *cr = g->rows_gpu; /* (no CPU rows: not read) */
    if (nc) {
        cr = g->d_rows;
        if (!cr) {
            TRY(st_cuda_memcpy_async(g->rows_cpu, g->h_rows, sizeof(float) * (size_t)(tn * K * E), 1, g->stream));
            cr = g->rows_cpu;
        }
        s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(nc * E));
    }
    return st_cuda_moe_combine_rows(g->ids + t0 * K, gids, g->rows_gpu, cr, g->wts + t0 * K, tn, K, E, X,
                                    g->proj + t0 * E, g->stream);
}

/* HOST with a split (the GPU took ng slot-rows, the CPU nc): the GPU's slot-rows counted there,
 * both sides joined in g->proj. */
static strata_status st_gpu_host_join_split(strata_session *s, const st_moe_chunk *c, int64_t ng, int64_t nc) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int il = c->il;
    const int64_t E = hp->n_embd, t0 = c->t0, tn = c->tn;
    const int32_t K = hp->n_expert_used;
    s->slots_cpu[il] -= ng;
    s->slots_gpu[il] += ng;
    if (st_gpu_split_exact(g, tn)) { /* both sides' rows summed in slot order */
        TRY(st_gpu_exact_combine(s, t0, tn, g->ids_split + t0 * K, nc));
    } else if (nc) { /* the GPU's sum is in g->proj: the CPU's added, read from the
                      * mapped rows or copied up first */
        const float *cp = g->d_proj ? g->d_proj + t0 * E : g->cpu_part;
        if (!g->d_proj)
            TRY(st_cuda_memcpy_async(g->cpu_part, g->h_proj + t0 * E, sizeof(float) * (size_t)(tn * E), 1,
                                     g->stream));
        TRY(st_cuda_add(g->proj + t0 * E, g->proj + t0 * E, cp, 1.0f, tn * E, g->stream));
    }
    return STRATA_OK;
}

/* HOST: a CPU layer's experts in RAM: rows and routing down (pinned, async, one wait), the CPU's
 * step, the result up (async: the stream's next kernels wait for it; the next hand-off's wait
 * covers it before h_proj is written again), or read by the join from the mapped row. cpu_warm:
 * the next CPU layer's predicted experts warmed once the step is done. */
static strata_status st_gpu_moe_host(strata_session *s, st_moe_call *mc, st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[c->il];
    const int il = c->il;
    const int64_t E = hp->n_embd, t0 = c->t0, tn = c->tn;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E));
    float *hw = g->h_wts + t0 * K, *hp_ = g->h_proj + t0 * E;
    int32_t *hi = g->h_ids + t0 * K;
    if (!c->handed) {
        c->warm = st_gpu_warm_layer(s, il, tn);
        TRY(st_gpu_hand_down(s, il, t0, tn, c->warm));
    }
    st_gpu_warm_end(s, hi, tn * K); /* this layer's routing is here */
    const st_expert *ex = s->experts + (size_t)il * (size_t)X;
    if (s->ram) { /* past the RAM budget: the routed experts from the RAM tier's slots
                   * (read from the file with O_DIRECT when not there) */
        if (s->degrade.enabled) { /* DEGRADE_ZERO: a light expert not in the tier's slots (nor in a
                                   * completed read) is dropped instead of read, as in a CPU session */
            st_ram_tier_missed(s->ram, il, tn, hi, K, s->missed);
            st_degrade_apply(&s->degrade, !s->gen_phase, tn, K, hi, hw, s->missed, &s->dstats, il);
        }
        const strata_status rst = st_ram_tier_table(s->ram, il, tn, hi, K, &ex);
        if (rst == STRATA_OK && c->pipe) st_gpu_pipe_issue(s, il, tn); /* reads while the CPU computes */
        if (rst != STRATA_OK) {
            st_ram_tier_release(s->ram);
            return rst;
        }
    }
    /* cpu_misses (decode-sized) or stage_split (prompt-sized): a share of the experts over PCIe
     * to the GPU, the rest here */
    int64_t ng = 0, nc = 0;
    if (g->cpu_split && tn <= ST_POOL_T) st_gpu_split_decide(s, hi, hw, tn, 0, &ng, &nc);
    else if (g->stage_split && tn > ST_POOL_T) {
        st_gpu_split_decide(s, hi, hw, tn, 1, &ng, &nc);
        s->split_batches += ng > 0;
    }
    TRY(st_gpu_host_step(s, c, ex, ng, nc));
    if (ng) TRY(st_gpu_host_join_split(s, c, ng, nc));
    else if (g->d_proj && mc->T == 1 && !G->shexp) /* the join reads the mapped row */
        mc->out = g->d_proj;
    else
        TRY(st_cuda_memcpy_async(g->proj + t0 * E, hp_, sizeof(float) * (size_t)(tn * E), 1, g->stream));
    if (c->warm) TRY(st_gpu_warm_begin(s, il, tn)); /* while the GPU goes on */
    return STRATA_OK;
}

/* POOL_MISSES: the split on the device: the pool gets the missed slots (-1 for the resident
 * ones), g->pm_ids the resident ones, which the kernel computes from the layer's exported
 * table (pm_exact: the CPU-exact rows, the pool's per slot); the routing is kept for the
 * bookkeeping after the step (which counts pm_exact's rows up, as it knows the misses). */
static strata_status st_gpu_moe_pool_misses(strata_session *s, st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int il = c->il;
    const int64_t E = hp->n_embd, tn = c->tn;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    st_doorbell_layer *r = &g->db[il];
    TRY(st_cuda_pool_publish_split(g->xn, g->ids, g->wts, tn, E, K, g->pm_where + (size_t)il * (size_t)X, X,
                                   g->pm_ids, g->pm_hist + (size_t)il * ST_POOL_T * (size_t)K, g->d_zc_of_m,
                                   st_gpu_db_dev(g, r->x), st_gpu_db_dev(g, r->ids), st_gpu_db_dev(g, r->wts),
                                   st_gpu_db_dev(g, &r->T), st_gpu_db_dev(g, &r->req_seq), g->d_step,
                                   g->stream));
    c->table = (const st_cuda_expert *)g->pm_tables + (size_t)il * (size_t)X;
    c->ids = g->pm_ids;
    c->exact = g->pm_exact; /* (a pool call: decode-sized; never a self-draft step) */
    s->pcie_bytes += (int64_t)((c->exact ? 1 : 2) * sizeof(float) * (size_t)(tn * E) +
                               (sizeof(int32_t) + sizeof(float)) * (size_t)(tn * K));
    return STRATA_OK;
}

/* Place a chunk: run its mode, which leaves the experts where the kernel reads them (c->table,
 * c->ids) or has the CPU compute them; with pipe the next layer's prediction enqueued first. */
static strata_status st_gpu_moe_place(strata_session *s, st_moe_call *mc, st_moe_chunk *c) {
    if (c->mode == ST_MOE_STAGED) TRY(st_gpu_moe_staged(s, c));
    if (c->pipe) TRY(st_gpu_predict_next(s, c->il, c->t0, c->tn)); /* (never staged) */
    switch (c->mode) {
    case ST_MOE_CACHED: return st_gpu_moe_cached(s, c);
    case ST_MOE_HOST: return st_gpu_moe_host(s, mc, c);
    case ST_MOE_POOL: return st_gpu_moe_pool(s, c);
    case ST_MOE_POOL_MISSES: return st_gpu_moe_pool_misses(s, c);
    case ST_MOE_DROPPED: /* the rows the join adds: zero */
        return st_cuda_memset_async(s->gpu->proj + c->t0 * s->model->hp.n_embd, 0,
                                    sizeof(float) * (size_t)(c->tn * s->model->hp.n_embd), s->gpu->stream);
    case ST_MOE_RESIDENT: /* the layer's own table */
    case ST_MOE_STAGED:
        break;
    }
    return STRATA_OK;
}

/* cpu_misses (CACHED): the CPU's misses, computed while the GPU computes the rest, then added. */
static strata_status st_gpu_cpu_misses_join(strata_session *s, const st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, t0 = c->t0, tn = c->tn;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    st_moe_ffn(s->tp, s->experts + (size_t)c->il * (size_t)X, X, s->xn + t0 * E, tn, g->h_ids_cpu,
               s->wts + t0 * K, K, s->proj + t0 * E, s->moe_ws);
    TRY(st_cuda_memcpy_h2d(g->cpu_part, s->proj + t0 * E, sizeof(float) * (size_t)(tn * E)));
    s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)(tn * E));
    return st_cuda_add(g->proj + t0 * E, g->proj + t0 * E, g->cpu_part, 1.0f, tn * E, g->stream);
}

/* cpu_misses with cache_exact (a decode-sized chunk): the GPU's slots' rows are being computed in
 * the CPU's arithmetic (g->rows_gpu); the CPU's misses' rows meanwhile (st_moe_ffn_end_rows), read
 * from the mapped rows or copied up, then both sides' rows summed in slot order into g->proj, as
 * the CPU's st_moe_ffn sums them: the CPU's result whatever the residency and the share
 * (st_gpu_exact_combine, as a split CPU layer's join). */
static strata_status st_gpu_cache_exact_join(strata_session *s, const st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, t0 = c->t0, tn = c->tn;
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    int64_t nc = 0;
    if (c->split) {
        st_moe_ffn_begin(s->tp, s->experts + (size_t)c->il * (size_t)X, X, s->xn + t0 * E, tn, g->h_ids_cpu,
                         s->wts + t0 * K, K, s->proj + t0 * E, s->moe_ws);
        st_moe_ffn_end_rows(s->tp, s->moe_ws, g->h_rows);
        for (int64_t i = 0; i < tn * K; i++) nc += g->h_ids_cpu[i] >= 0;
    }
    return st_gpu_exact_combine(s, t0, tn, c->ids, nc);
}

/* POOL_MISSES: the pool's answer joins the GPU's: its sum copied out of the mapped out rows and
 * added; pm_exact: the wait alone, then the GPU's rows (g->rows_gpu) and the pool's (read in
 * place from the layer's mapped rows) summed in slot order into g->proj, as the CPU's
 * st_moe_ffn sums them: the CPU's result whatever the residency. */
static strata_status st_gpu_pool_misses_join(strata_session *s, const st_moe_chunk *c) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t E = hp->n_embd, tn = c->tn;
    st_doorbell_layer *r = &g->db[c->il];
    if (!c->exact) {
        TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, st_gpu_db_dev(g, r->out), tn * E,
                              g->pm_part, g->d_err, ST_POOL_WAIT_DONE, g->stream));
        return st_cuda_add(g->proj, g->proj, g->pm_part, 1.0f, tn * E, g->stream);
    }
    TRY(st_cuda_pool_wait(st_gpu_db_dev(g, &r->done_seq), g->d_step, NULL, 0, NULL, g->d_err, ST_POOL_WAIT_DONE,
                          g->stream));
    return st_cuda_moe_combine_rows(g->ids, g->pm_ids, g->rows_gpu, st_gpu_db_dev(g, r->rows), g->wts, tn,
                                    hp->n_expert_used, E, hp->n_expert, g->proj, g->stream);
}

/* Compute a placed chunk: the grouped expert kernel over c->table and c->ids into g->proj (every
 * mode but the CPU's; exact: the CPU-exact rows into g->rows_gpu), then what joins its rows there:
 * the pool's rows (POOL_MISSES; exact: both sides' rows combined), the CPU's misses (cpu_misses;
 * exact: likewise); a prefetch's held slots released after the kernel. */
static strata_status st_gpu_moe_compute(strata_session *s, const st_moe_chunk *c) {
    st_gpu *g = s->gpu;
    if (!c->cpu_layer) {
        st_cuda_moe_args a = st_gpu_routed_args(s, c->il, c->t0, c->tn, c->table, c->ids);
        if (c->exact) {
            a.ws = g->exact_ws;
            a.ws_bytes = g->exact_ws_bytes;
            TRY(st_cuda_moe_exact_rows(&a, g->rows_gpu, g->stream));
        } else {
            TRY(st_cuda_moe_ffn(&a, g->stream));
        }
    }
    if (c->pf) st_gpu_tier_release_held(g->cache);
    if (c->pm) TRY(st_gpu_pool_misses_join(s, c)); /* (the pool computed meanwhile) */
    else if (c->exact) TRY(st_gpu_cache_exact_join(s, c));
    else if (c->split) TRY(st_gpu_cpu_misses_join(s, c));
    return STRATA_OK;
}

/* The shared expert of rows t0 .. t0 + tn: a one-expert table, weight = its gate or 1, added to
 * the routed experts' rows in g->proj. */
static strata_status st_gpu_moe_shared(strata_session *s, int il, int64_t t0, int64_t tn) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    st_cuda_moe_args a = st_gpu_routed_args(s, il, t0, tn, G->shexp, g->zeros);
    a.n_expert = 1;
    a.b_gate = a.b_up = a.b_down = NULL; /* the routed experts' */
    a.act = 0;
    a.type_gate = a.type_up = G->sh_type_gu;
    a.type_down = G->sh_type_down;
    a.n_ff = hp->n_ff_shexp;
    a.wts = (G->shexp_gate_inp.data ? g->shgate : g->ones) + t0;
    a.k = 1;
    a.accumulate = 1;
    return st_cuda_moe_ffn(&a, g->stream);
}

/* The routed (and shared) experts of a routed call, chunk by chunk: choose the mode, place,
 * compute, then the shared expert. mc->out: the rows the join adds to the residual. */
strata_status st_gpu_moe_experts(strata_session *s, st_moe_call *mc) {
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[mc->il];
    for (int64_t t0 = 0; t0 < mc->T; t0 += g->moe_tokens) {
        const int64_t tn = mc->T - t0 < g->moe_tokens ? mc->T - t0 : g->moe_tokens;
        st_moe_chunk c;
        TRY(st_gpu_moe_choose(s, mc, t0, tn, &c));
        TRY(st_gpu_moe_place(s, mc, &c));
        TRY(st_gpu_moe_compute(s, &c));
        TRY(st_gpu_stage_ahead(s, mc, &c));
        TRY(st_gpu_mark(s, STRATA_PHASE_EXPERTS));
        if (G->shexp) TRY(st_gpu_moe_shared(s, mc->il, t0, tn));
    }
    g->xq_ready = 0;
    return STRATA_OK;
}

strata_status st_gpu_moe_resident(strata_session *s, int il, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const st_gpu_layer *G = &g->layers[il];
    const int32_t X = hp->n_expert, K = hp->n_expert_used;
    TRY(st_gpu_mark(s, STRATA_PHASE_ROUTER));
    TRY(st_gpu_router_rows(g, G, X, T));
    TRY(st_gpu_shared_gate(g, G, T));
    g->xq_ready = 0; /* (the routed kernel quantizes its rows itself) */
    const st_cuda_route_cfg rc = st_gpu_route_cfg(s, il);
    for (int64_t t0 = 0; t0 < T; t0 += g->moe_tokens) {
        const int64_t tn = T - t0 < g->moe_tokens ? T - t0 : g->moe_tokens;
        TRY(st_cuda_moe_route_cfg(&rc, g->router + t0 * X, tn, g->ids + t0 * K, g->wts + t0 * K, NULL, g->stream));
        const st_cuda_moe_args a = st_gpu_routed_args(s, il, t0, tn, G->experts, g->ids + t0 * K);
        TRY(st_cuda_moe_ffn(&a, g->stream));
        if (G->shexp) TRY(st_gpu_moe_shared(s, il, t0, tn));
    }
    return st_gpu_mark(s, STRATA_PHASE_EXPERTS);
}

/* ---------------------------------------------------------------------------------------------
 * The expert pool's part of a call (cuda_doorbell)
 * ------------------------------------------------------------------------------------------- */

/* A call the pool serves (st_gpu_pool_call), before its layers: the step announced to the pool
 * and its number up. */
strata_status st_gpu_pool_begin(strata_session *s) {
    st_gpu *g = s->gpu;
    if (g->pool_misses) /* the cache's residency as the step's kernels will read it */
        TRY(st_gpu_tier_export(g->cache, &g->pm_tables, &g->pm_where));
    *g->h_step = st_pool_step(g->pool);
    g->pool_open = 1;
    /* the pool waits for every CPU layer's request: the leading dense layers, which route
     * nothing, are published empty */
    for (int32_t il = 0; il < s->model->hp.n_layer && s->model->hp.n_layer_dense_lead > 0; il++)
        if (!st_layer_has_experts(&s->model->layers[il])) st_pool_skip(g->pool, il, *g->h_step);
    return st_cuda_memcpy_async(g->d_step, g->h_step, sizeof(uint32_t), 1, g->stream);
}

/* Experts a decode step of the pool-miss mode may load in place of others for the steps after
 * it (synchronous copies between steps); loads into EMPTY slots are not limited. */
#define ST_POOL_LOADS_PER_STEP 4

/* pool_pcie: a layer's routing of the step as it came down (n = T k; ex: the layer's expert
 * views), the entries of the experts the GPU read from the pinned copy unmarked
 * (ST_POOL_ZC_FLAG); their slot-rows returned, the bytes of those distinct experts in *bytes. */
static int64_t st_gpu_pool_zc_rows(const st_expert *ex, int32_t *ids, int64_t n, int64_t *bytes) {
    int64_t rows = 0;
    *bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || !(ids[i] & ST_POOL_ZC_FLAG)) continue;
        ids[i] &= ~ST_POOL_ZC_FLAG;
        rows++;
        int seen = 0;
        for (int64_t j = 0; j < i && !seen; j++) seen = ids[j] == ids[i];
        if (!seen) *bytes += (int64_t)st_gpu_tier_expert_bytes(&ex[ids[i]]);
    }
    return rows;
}

/* After a decode step of the pool-miss mode: its routing comes down (one copy), each cache
 * layer's ids are looked up (the use counts and recency, hit and miss counters), the slot-rows counted as
 * the device split them (resident and pool_pcie's share: GPU), and the missed experts loaded for
 * the steps to come: into EMPTY slots, then up to ST_POOL_LOADS_PER_STEP evicting, the layers
 * taken from g->pm_first on, which moves one layer a step (from layer 0 every step, the first
 * layers' misses spent the budget and the later layers' residency never moved once full). */
static strata_status st_gpu_pool_misses_after(strata_session *s, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *g = s->gpu;
    const int64_t K = hp->n_expert_used, R = ST_POOL_T;
    TRY(st_cuda_memcpy_d2h(g->h_pm_hist, g->pm_hist, sizeof(int32_t) * (size_t)(hp->n_layer * R * K)));
    s->pcie_bytes += (int64_t)(sizeof(int32_t) * (size_t)(hp->n_layer * T * K));
    int32_t budget = ST_POOL_LOADS_PER_STEP, empty = st_gpu_tier_empty_slots(g->cache);
    const int32_t first = g->pm_first;
    g->pm_first = (first + 1) % hp->n_layer;
    for (int j = 0; j < hp->n_layer; j++) {
        const int il = (first + j) % hp->n_layer;
        if (st_plan_layer_on_cpu(&s->plan, il)) continue;
        int64_t res = 0, zb = 0; /* zb: the GPU's reads of the pinned copy */
        const int64_t zr = g->d_zc_of_m ? st_gpu_pool_zc_rows(s->experts + (size_t)il * (size_t)hp->n_expert,
                                                              g->h_pm_hist + il * R * K, T * K, &zb)
                                        : 0;
        TRY(st_gpu_tier_after_step(g->cache, il, g->h_pm_hist + il * R * K, T * K, &empty, &budget, &res));
        s->slots_gpu[il] += res + zr;
        s->slots_cpu[il] += T * K - res - zr;
        s->pcie_bytes += zb;
        if (g->pm_exact) s->pcie_bytes += (int64_t)(sizeof(float) * (size_t)((T * K - res - zr) * hp->n_embd));
    }
    return STRATA_OK;
}

/* A call the pool served, after its output: the pool-miss mode's bookkeeping, then whether the
 * pool answered every layer (a pool that never answered: the stream went on with zeros, so say
 * so). */
strata_status st_gpu_pool_end(strata_session *s, int64_t T) {
    st_gpu *g = s->gpu;
    if (g->pool_misses) TRY(st_gpu_pool_misses_after(s, T));
    int32_t err = 0;
    TRY(st_cuda_memcpy_d2h(&err, g->d_err, sizeof err));
    if (err) {
        static const char *const flag[4] = {"?", "a layer's done flag", "a deferred layer's partial flag (its heavy rows)",
                                            "a deferred layer's done flag (before the next layer's FFN)"};
        TRY(st_cuda_memset(g->d_err, 0, sizeof err));
        return st_error(STRATA_ERR_BACKEND, "gpu session: the CPU expert pool did not answer a "
                        "layer's request within ~10 s (cuda_doorbell; the GPU waited on %s)",
                        flag[err >= 1 && err <= 3 ? err : 0]);
    }
    return STRATA_OK;
}

#endif /* STRATA_HAVE_CUDA */
