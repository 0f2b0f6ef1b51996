/* gpu_pass.h - the CUDA forward pass's entry points (forward_cuda.c, forward_cuda_setup.c) that
 * its backend table (backend_cuda.c) wraps, and the placement figures it reports. Compiled in every
 * build: without CUDA, create and forward return STRATA_ERR_UNSUPPORTED. */
#ifndef STRATA_GPU_PASS_H
#define STRATA_GPU_PASS_H

#include "session.h"

/* The GPU path (forward_cuda.c): uploads the weights and allocates the GPU KV cache and scratch
 * (s->gpu; on failure s->gpu may be partly built: st_gpu_free releases it); the same forward as
 * st_forward_batch with the CUDA kernels; the bytes of weights resident on the GPU. Without
 * CUDA in the build, create and forward return STRATA_ERR_UNSUPPORTED. */
strata_status st_gpu_create(strata_session *s);
void st_gpu_free(strata_session *s);
strata_status st_gpu_forward_batch(strata_session *s, const strata_token *tokens, int64_t T,
                                   float *logits, int all);
size_t st_gpu_weight_bytes(const strata_session *s);

/* The expert cache of stage i of the GPU session (0: the unsplit session's; a split's stages each
 * have their own, docs/MULTI_GPU.md), or NULL (none, or no such stage). */
st_gpu_tier *st_gpu_get_cache(const strata_session *s, int i);
/* Bytes of the pinned copy of the experts kept in RAM (pin_experts), 0 without one. */
int64_t st_gpu_pinned_bytes(const strata_session *s);
/* q8_tiles: the bytes of the Q8_0 tile copies made and the matrices left without one (no GPU
 * memory to spare); q8_sm60: the matrices whose decode GEMV reads its copy; a layer split's are
 * its stages' sums; all 0 without a GPU session. */
void st_gpu_tiles_stats(const strata_session *s, int64_t *bytes, int32_t *skipped, int32_t *sm60);
/* The GPU session's allocations of its context: the KV cache (every layer's K and V) and the
 * recurrent state kept across calls (qwen3next); 0 without a GPU session. */
void st_gpu_mem_stats(const strata_session *s, int64_t *kv_bytes, int64_t *state_bytes);
/* The CPU layers' decode split (cpu_misses): 0 none, 1 in the CPU's arithmetic (the same bits
 * whatever the share), 2 in the GPU's own (the bits follow the share). */
int st_gpu_split_mode(const strata_session *s);
/* The expert cache's split of its misses (cpu_misses): 0 none, 1 decode-sized calls in the CPU's
 * arithmetic for every slot (the same bits whatever the residency), 2 the hits in the GPU's own
 * (the bits follow the residency); a split's: its first stage with a cache (every stage decides
 * alike: the model's types). */
int st_gpu_cache_split_mode(const strata_session *s);
/* route_tail_skip: the slots the device dropped since create or the last reset (reset 1 zeroes
 * the count after reading it); 0 without it. */
int64_t st_gpu_tail_skipped(const strata_session *s, int reset);
/* With n_cpu_moe: the decode rate the CPU layers allow by the cost model's figures (per layer one
 * token's n_expert_used experts, split with PCIe as the split would, else one pool step), the
 * GPU's own time not counted; 0 without those figures. */
double st_gpu_plan_rate(const strata_session *s);
/* 1 when a GPU call of T tokens hands its CPU layers to the expert pool (cuda_doorbell): the
 * session's own workers then have no expert work in it. */
int st_gpu_pool_serves(const strata_session *s, int64_t T);
/* An MTP drafter's layer on the GPU (mtp_gpu.c; backend.h's mtp_attach, mtp_rows, mtp_detach):
 * STRATA_ERR_UNSUPPORTED without CUDA, for a split session and where the layer, its cache and
 * the hidden rows do not fit the GPU's room. */
strata_status st_gpu_mtp_attach(strata_session *s);
strata_status st_gpu_mtp_rows(strata_session *s, const strata_token *tok, int64_t T, int64_t pos0, int chained,
                              strata_token *next, float *logits);
void st_gpu_mtp_detach(strata_session *s);

#endif /* STRATA_GPU_PASS_H */
