/* layer_split.h - the layer split (strata_split_params, docs/MULTI_GPU.md): its options checked
 * against the model's layer count and the CUDA devices there are, and resolved once, at create,
 * into stages of consecutive layers, each with its device. Every rule about the split, and its
 * message, is here (layer_split.c); the CUDA set-up builds one stage per entry and the forward
 * pass hands the hidden state from stage to stage (c/engine/cuda/stages.c). Pure arithmetic: the
 * callers ask the devices (count, free memory) and NCCL. */
#ifndef STRATA_LAYER_SPLIT_H
#define STRATA_LAYER_SPLIT_H

#include "strata.h"

typedef struct st_layer_split {
    int32_t n_stages;                      /* 0: no split (the one-device session) */
    int32_t first[STRATA_MAX_STAGES + 1];  /* stage i runs layers first[i] .. first[i + 1] - 1 */
    int32_t device[STRATA_MAX_STAGES];     /* stage i's CUDA device */
} st_layer_split;

/* 1 when the parameters ask for a split (layers given or auto). */
int st_split_asked(const strata_split_params *q);

/* The split options of p on their own and with the rest of p, against n_layer and the n_devices
 * CUDA devices there are; nccl_missing: NULL where NCCL loads, else why not (peer_device needs
 * it). STRATA_OK or the error a create would fail with, naming the options. */
strata_status st_split_check(const strata_session_params *p, int32_t n_layer, int n_devices,
                             const char *nccl_missing);

/* n_layer layers over n stages in proportion to weight[i] (> 0), each stage at least one layer,
 * by largest remainder (ties to the earlier stage): out[0..n-1], summing to n_layer. n <= n_layer. */
void st_split_proportional(int32_t n_layer, int32_t n, const double *weight, int32_t *out);

/* The stages of checked options: layers as given, or auto in proportion to each stage's share of
 * its device's free memory (dev_free[d] bytes of device d, shared equally among the stages naming
 * d; NULL when not auto). With auto and n_stages 0, one stage per device 0 .. n_devices - 1. */
void st_split_resolve(const strata_split_params *q, int32_t n_layer, int n_devices, const int64_t *dev_free,
                      st_layer_split *out);

/* Each stage's expert cache (docs/MULTI_GPU.md), with expert_cache the session's (placement; 0: no
 * stage has one), n_expert routed experts a layer, sp the resolved stages and moe[i] the layers of
 * stage i with routed experts: slots[i] > 0 slots, -1 auto, 0 none. Stage 0 takes expert_cache,
 * stage i >= 1 q->expert_cache[i] where nonzero, else expert_cache -1 (auto) or expert_cache
 * scaled by its MoE layers over stage 0's (rounded up; expert_cache itself where stage 0 has
 * none), at least n_expert. A stage without MoE layers has none; a count is held to the stage's
 * own experts (moe[i] x n_expert). share[i] (auto only, else 1): the auto stages from i on that
 * name stage i's device, which its free memory is shared among. An expert_cache_deviceI below
 * n_expert is refused, naming it (stage 0's count is the cache's own check). */
strata_status st_split_caches(const strata_split_params *q, int32_t expert_cache, int32_t n_expert,
                              const st_layer_split *sp, const int32_t *moe, int32_t *slots, int32_t *share);

/* The stage that runs layer il (0 without a split). */
static inline int st_split_stage_of(const st_layer_split *sp, int32_t il) {
    int i = 0;
    while (i + 1 < sp->n_stages && il >= sp->first[i + 1]) i++;
    return i;
}

#endif /* STRATA_LAYER_SPLIT_H */
