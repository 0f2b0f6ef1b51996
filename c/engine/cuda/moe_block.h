/* moe_block.h - the MoE block of the GPU forward pass (moe_block.c) as the layer loop
 * (forward_cuda.c) calls it: route, the experts chunk by chunk in their placement, then the join
 * (forward_cuda.c) of the rows it leaves; the expert pool's part of a call; and the helpers of
 * forward_cuda.c the block shares. Not a public header: CUDA builds of those two files only. */
#ifndef STRATA_MOE_BLOCK_H
#define STRATA_MOE_BLOCK_H

#include "forward_cuda.h"

#ifdef STRATA_HAVE_CUDA

/* One call of a layer's MoE block over the T rows of g->xn (the FFN's norm), from its routing to
 * the join. */
typedef struct {
    int il;
    int64_t T;
    int r1;           /* the one-token router made the routing (top-k included) */
    const float *out; /* the rows the join adds to the residual: g->proj, or a decode step's CPU
                         row read from the mapped hand-off memory (g->d_proj) */
} st_moe_call;

/* The router, top-k (one-token calls) and shared-expert gate of layer il for T rows. */
strata_status st_gpu_moe_route(strata_session *s, int il, int64_t T, st_moe_call *mc);
/* The routed and shared experts of the call, per chunk of g->moe_tokens rows: the placement mode
 * chosen and run, the expert kernel; their rows left in mc->out. */
strata_status st_gpu_moe_experts(strata_session *s, st_moe_call *mc);
/* A layer outside the trunk's placement whose routed experts are all on the GPU (an MTP drafter's,
 * mtp_gpu.c): router, top-k, the routed and shared experts of T rows into g->proj; nothing
 * counted, staged, cached or handed to the pool. */
strata_status st_gpu_moe_resident(strata_session *s, int il, int64_t T);
/* cpu_warm: a warm of the CPU's caches stopped (its bytes counted), and its prediction scored
 * against the routing ids[0 .. n) (ids NULL: not scored). */
void st_gpu_warm_end(strata_session *s, const int32_t *ids, int64_t n);
/* cuda_doorbell, a call the pool serves: the step announced before the layers; after the
 * output, the pool-miss mode's bookkeeping and the check that the pool answered. */
strata_status st_gpu_pool_begin(strata_session *s);
strata_status st_gpu_pool_end(strata_session *s, int64_t T);

/* forward_cuda.c: y[t] = W x[t] for T rows (tiles or GEMV slices); profile mode's phase mark. */
strata_status st_gpu_mm(st_gpu *g, const st_cuda_mat *W, const float *x, int64_t T, float *y);
strata_status st_gpu_mark(strata_session *s, strata_phase phase);

#endif /* STRATA_HAVE_CUDA */
#endif /* STRATA_MOE_BLOCK_H */
