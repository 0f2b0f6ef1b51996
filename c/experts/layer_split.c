/* layer_split.c - the layer split's rules (layer_split.h): each option's range, the stages'
 * layers and devices against the model and the machine, the options that need several real
 * devices or NCCL, the placement options a split does not take yet (it takes n_cpu_moe and the
 * expert cache, one per stage), the resolution into stages (auto: in proportion to free device
 * memory) and each stage's expert cache slots. */
#include "layer_split.h"
#include "common.h"

#include <string.h>

int st_split_asked(const strata_split_params *q) { return q->n_stages > 0 || q->auto_layers; }

/* The stage count a split resolves to: as given, or with auto and none given one per device. */
static int32_t st_split_count(const strata_split_params *q, int n_devices) {
    return q->n_stages > 0 ? q->n_stages : (q->auto_layers ? n_devices : 0);
}

/* How many distinct devices the n stages name. */
static int st_split_distinct(const strata_split_params *q, int32_t n) {
    int d = 0;
    for (int32_t i = 0; i < n; i++) {
        int seen = 0;
        for (int32_t j = 0; j < i; j++) seen |= q->device[j] == q->device[i];
        d += !seen;
    }
    return d;
}

/* The options on their own: ranges and flags. */
static strata_status st_split_ranges(const strata_split_params *q) {
    if (q->n_stages < 0 || q->n_stages > STRATA_MAX_STAGES)
        return st_error(STRATA_ERR_INVALID_ARG, "layer_split: %d stages (1..%d, or 0 for none)", (int)q->n_stages,
                        STRATA_MAX_STAGES);
    if (q->auto_layers != 0 && q->auto_layers != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "split auto_layers %d: expected 0 or 1", q->auto_layers);
    if (q->pipeline_windows != 0 && q->pipeline_windows != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "pipeline_windows %d: expected 0 or 1", q->pipeline_windows);
    if (q->peer_device < -1)
        return st_error(STRATA_ERR_INVALID_ARG, "peer_device %d: a CUDA device, or -1 for none", (int)q->peer_device);
    for (int i = 0; i < STRATA_MAX_STAGES; i++)
        if (q->expert_cache[i] < -1)
            return st_error(STRATA_ERR_INVALID_ARG, "expert_cache_device%d %d: slots, -1 auto or 0 none", i,
                            (int)q->expert_cache[i]);
    return STRATA_OK;
}

/* The stages' layers and devices: counts summing to n_layer, devices that exist. */
static strata_status st_split_stages(const strata_split_params *q, int32_t n, int32_t n_layer, int n_devices) {
    if (n_devices <= 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "layer_split: no CUDA device here (strata_cuda_device_count 0)");
    if (n > n_layer)
        return st_error(STRATA_ERR_INVALID_ARG, "layer_split: %d stages for %d layers (each stage needs a layer)",
                        (int)n, (int)n_layer);
    for (int32_t i = 0; i < n; i++)
        if (q->device[i] < 0 || q->device[i] >= n_devices)
            return st_error(STRATA_ERR_INVALID_ARG, "split_device %d of stage %d: no such CUDA device (this "
                            "machine has %d: 0..%d)", (int)q->device[i], (int)i, n_devices, n_devices - 1);
    int64_t sum = 0;
    for (int32_t i = 0; i < STRATA_MAX_STAGES; i++) {
        if (q->auto_layers && q->layers[i] != 0)
            return st_error(STRATA_ERR_INVALID_ARG, "split auto chooses layer_split itself: give one of them");
        if (q->auto_layers || i >= n) continue;
        if (q->layers[i] < 1)
            return st_error(STRATA_ERR_INVALID_ARG, "layer_split: stage %d has %d layers (each stage needs at "
                            "least 1; or split auto)", (int)i, (int)q->layers[i]);
        sum += q->layers[i];
    }
    if (!q->auto_layers && sum != n_layer)
        return st_error(STRATA_ERR_INVALID_ARG, "layer_split sums to %lld layers; the model has %d",
                        (long long)sum, (int)n_layer);
    return STRATA_OK;
}

/* The options that need more than the split of layers: several real devices, NCCL (each says
 * what it needs, then that it is not built yet); a stage's cache names a stage there is. */
static strata_status st_split_beyond(const strata_split_params *q, int32_t n, int n_devices,
                                     const char *nccl_missing) {
    if (q->pipeline_windows) {
        const int d = st_split_distinct(q, n);
        if (d < 2)
            return st_error(STRATA_ERR_UNSUPPORTED, "pipeline_windows needs stages on two distinct CUDA devices "
                            "(split_device names %d; this machine has %d)", d, n_devices);
        return st_error(STRATA_ERR_UNSUPPORTED, "pipeline_windows: not built yet (docs/MULTI_GPU.md)");
    }
    if (q->peer_device >= 0) {
        if (q->peer_device >= n_devices)
            return st_error(STRATA_ERR_INVALID_ARG, "peer_device %d: no such CUDA device (this machine has %d)",
                            (int)q->peer_device, n_devices);
        if (nccl_missing) return st_error(STRATA_ERR_UNSUPPORTED, "peer_device needs NCCL: %s", nccl_missing);
        return st_error(STRATA_ERR_UNSUPPORTED, "peer_device (experts on another device over NCCL): not built "
                        "yet (docs/MULTI_GPU.md)");
    }
    for (int i = 0; i < STRATA_MAX_STAGES; i++) {
        if (q->expert_cache[i] == 0) continue;
        if (i == 0)
            return st_error(STRATA_ERR_INVALID_ARG, "expert_cache_device0: stage 0's cache is expert_cache");
        if (i >= n)
            return st_error(STRATA_ERR_INVALID_ARG, "expert_cache_device%d: the split has %d stages", i, (int)n);
    }
    return STRATA_OK;
}

/* The session options a split does not take yet. A split takes n_cpu_moe (the first layers' routed
 * experts on the CPU, the host hand-off of each stage that holds some, with staging and the
 * decode split per stage) and expert_cache (a cache per stage for its own layers, with
 * cpu_misses and gpu_prefetch within the stage); the stages' caches are all there or none. */
static strata_status st_split_combinations(const strata_session_params *p) {
    const strata_placement_params *q = &p->placement;
    for (int i = 1; i < STRATA_MAX_STAGES && q->expert_cache == 0; i++)
        if (p->split.expert_cache[i] != 0)
            return st_error(STRATA_ERR_INVALID_ARG, "expert_cache_device%d needs expert_cache (stage 0's cache: "
                            "a split's stages all have an expert cache or none)", i);
    const char *what = q->gpu_mem > 0           ? "gpu_mem"
                       : q->ram_budget > 0      ? "ram_budget"
                       : q->doorbell            ? "doorbell"
                       : p->route_tail_skip > 0 ? "route_tail_skip"
                       : p->degrade_zero        ? "degrade_zero"
                                                : NULL;
    if (what)
        return st_error(STRATA_ERR_UNSUPPORTED, "layer_split with %s: not built yet (a split keeps its "
                        "layers' experts resident, in a cache per stage, or with n_cpu_moe the first "
                        "layers' on the CPU; docs/MULTI_GPU.md)", what);
    return STRATA_OK;
}

strata_status st_split_check(const strata_session_params *p, int32_t n_layer, int n_devices,
                             const char *nccl_missing) {
    const strata_split_params *q = &p->split;
    ST_TRY(st_split_ranges(q));
    const int32_t n = st_split_count(q, n_devices);
    if (!st_split_asked(q)) {
        if (q->pipeline_windows)
            return st_error(STRATA_ERR_INVALID_ARG, "pipeline_windows needs a layer split (layer_split or split auto)");
        return st_split_beyond(q, 0, n_devices, nccl_missing);
    }
    if (p->backend != STRATA_BACKEND_CUDA)
        return st_error(STRATA_ERR_INVALID_ARG, "layer_split is for CUDA sessions (backend cuda)");
    ST_TRY(st_split_stages(q, n, n_layer, n_devices));
    ST_TRY(st_split_beyond(q, n, n_devices, nccl_missing));
    return st_split_combinations(p);
}

void st_split_proportional(int32_t n_layer, int32_t n, const double *weight, int32_t *out) {
    double total = 0.0, rem[STRATA_MAX_STAGES];
    for (int32_t i = 0; i < n; i++) total += weight[i];
    int32_t given = 0;
    for (int32_t i = 0; i < n; i++) { /* one layer each, the rest by share */
        const double share = (double)(n_layer - n) * (total > 0.0 ? weight[i] / total : 1.0 / n);
        out[i] = 1 + (int32_t)share;
        rem[i] = share - (double)(int32_t)share;
        given += out[i];
    }
    while (given < n_layer) { /* the largest remainders take the layers left */
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (rem[i] > rem[best]) best = i;
        out[best]++;
        rem[best] = -1.0;
        given++;
    }
}

void st_split_resolve(const strata_split_params *q, int32_t n_layer, int n_devices, const int64_t *dev_free,
                      st_layer_split *out) {
    memset(out, 0, sizeof *out);
    const int32_t n = st_split_count(q, n_devices);
    out->n_stages = n;
    int32_t layers[STRATA_MAX_STAGES];
    for (int32_t i = 0; i < n; i++) {
        out->device[i] = q->n_stages > 0 ? q->device[i] : i;
        layers[i] = q->layers[i];
    }
    if (q->auto_layers) {
        double w[STRATA_MAX_STAGES] = {0};
        for (int32_t i = 0; i < n; i++) {
            int sharing = 0;
            for (int32_t j = 0; j < n; j++) sharing += out->device[j] == out->device[i];
            w[i] = dev_free ? (double)dev_free[out->device[i]] / sharing : 1.0;
        }
        st_split_proportional(n_layer, n, w, layers);
    }
    for (int32_t i = 0; i < n; i++) out->first[i + 1] = out->first[i] + layers[i];
}

/* Stage i's cache before the share: as given, or the default of a stage not named. */
static int32_t st_split_cache_of(const strata_split_params *q, int32_t expert_cache, int32_t n_expert,
                                 const int32_t *moe, int i) {
    if (expert_cache == 0 || moe[i] == 0) return 0;
    if (i == 0) return expert_cache;
    if (q->expert_cache[i] != 0) return q->expert_cache[i];
    if (expert_cache < 0) return -1;
    if (moe[0] == 0) return expert_cache;
    const int64_t v = ((int64_t)expert_cache * moe[i] + moe[0] - 1) / moe[0];
    return v < n_expert ? n_expert : (int32_t)(v > INT32_MAX ? INT32_MAX : v);
}

strata_status st_split_caches(const strata_split_params *q, int32_t expert_cache, int32_t n_expert,
                              const st_layer_split *sp, const int32_t *moe, int32_t *slots, int32_t *share) {
    const int32_t n = sp->n_stages;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = st_split_cache_of(q, expert_cache, n_expert, moe, i);
        if (i > 0 && v > 0 && v < n_expert && q->expert_cache[i] != 0)
            return st_error(STRATA_ERR_INVALID_ARG, "expert_cache_device%d %d slots: at least one layer's %d "
                            "experts are needed", (int)i, (int)v, (int)n_expert);
        const int64_t own = (int64_t)moe[i] * n_expert; /* the stage's own experts: no more slots */
        if (v > 0 && v > own) v = (int32_t)own;
        slots[i] = v;
    }
    for (int32_t i = 0; i < n; i++) {
        share[i] = 1;
        if (slots[i] >= 0) continue;
        share[i] = 0;
        for (int32_t j = i; j < n; j++) share[i] += slots[j] < 0 && sp->device[j] == sp->device[i];
    }
    return STRATA_OK;
}
