/* cuda_deltanet.h - the C interface of the GPU kernels of qwen3next's gated DeltaNet layers (the
 * CPU's c/engine/cpu/linear_attn_cpu.c and c/compute/cpu/ops_ssm.c, step by step): the causal
 * depthwise conv with SiLU over a batch of tokens with its kernel state, the gated delta rule with
 * each value head's d x d state (q/k L2 norms and the gates (g, beta) of the ssm_ba row inside),
 * the gated RMSNorm of its output, and the two steps of the gated full-attention layers (each
 * head's [query, gate] rows split, the attention output times sigmoid(gate)).
 *
 * File: c/cuda/deltanet.cu (kernel geometry in deltanet.cuh). Plain C declarations with C
 * linkage; only in builds with STRATA_HAVE_CUDA. The rules of cuda_ops.h hold: d_* are device
 * pointers (f32, 4-byte aligned), strides in floats, arguments checked first
 * (STRATA_ERR_INVALID_ARG), then the device (STRATA_ERR_UNSUPPORTED), kernels enqueued on stream
 * without waiting, STRATA_ERR_BACKEND naming a failed launch, T == 0 a no-op.
 *
 * Batch invariance: the conv and the delta rule walk the call's tokens in order inside the
 * kernel, each token's arithmetic the same whatever T is (the state carried in registers from
 * one token to the next is the state a call ending there leaves in memory), so a prompt in one
 * call, in pieces or token by token leaves the same state and gives the same outputs, bit for
 * bit. The other kernels are per row. */
#ifndef STRATA_CUDA_DELTANET_H
#define STRATA_CUDA_DELTANET_H

#include "strata.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A DeltaNet layer's shape: nk key heads, nv value heads (a multiple of nk: value head h reads
 * key head h / (nv / nk)), head size d (keys and values), conv width K; the conv's channels are
 * C = 2 * nk * d + nv * d (q heads, k heads, v heads). eps: the L2 norms' (the model's norm eps). */
typedef struct st_cuda_gdn_shape {
    int32_t nk, nv, d, K;
    float eps;
} st_cuda_gdn_shape;

/* 1 if the kernels take this shape: d in {16, 32, 64, 128}, 1 <= K <= 8, nv % nk == 0. */
int st_cuda_gdn_supports(const st_cuda_gdn_shape *s);

/* The conv over T tokens: x [T][C] (row stride ldx >= C), w [C][K] (channel c's K taps, oldest
 * input first: ggml's ssm_conv1d), state [K-1][C] (the last K-1 inputs, oldest first; advanced);
 * y[t][c] = silu(sum_j w[c][j] * in_j) with in_0..in_{K-2} the inputs before x[t], into y [T][C].
 * History: when d_hist is not NULL and *d_hrow >= 0 (device int), x's rows are also copied to
 * d_hist + (*d_hrow + t) * C (the rollback window's rows; *d_hrow + T <= the history's rows). */
strata_status st_cuda_gdn_conv(const st_cuda_gdn_shape *s, const float *d_w, float *d_state, const float *d_x,
                               int64_t ldx, float *d_y, int64_t T, float *d_hist, const int32_t *d_hrow,
                               void *stream);

/* The gated delta rule over T tokens: y [T][C] the conv's outputs (q heads, k heads, v heads; q
 * and k L2-normed here, q also scaled by 1/sqrt(d)); ba [T][2*nv] (row stride ldba) the ssm_ba
 * rows (per key head, its value heads' b then a): beta = sigmoid(b), g = A[h] * softplus(a +
 * dt[h]); state [nv][d][d] (row i = key dim i; advanced): S = S * exp(g), S += k (x) beta (v -
 * S^T k), out[t][h*d + j] = (S^T q)[j], out [T][nv*d]. History: as st_cuda_gdn_conv, ba's rows
 * to d_hist + (*d_hrow + t) * 2 * nv. */
strata_status st_cuda_gdn_rule(const st_cuda_gdn_shape *s, const float *d_y, const float *d_ba, int64_t ldba,
                               const float *d_A, const float *d_dt, float *d_state, float *d_out, int64_t T,
                               float *d_hist, const int32_t *d_hrow, void *stream);

/* In place over T rows of nv heads of d values (row stride nv * d): x = rmsnorm(x) * w * silu(z)
 * per head (w: d floats; z [T][nv*d]; the sum of squares in double as st_rmsnorm). */
strata_status st_cuda_gdn_norm(float *d_x, const float *d_z, const float *d_w, int64_t nv, int64_t d, int64_t T,
                               float eps, void *stream);

/* qwen3next's attention inputs: qg [T][n_head][2][hd] (each head's query then its gate) into
 * q [T][n_head*hd] and gate [T][n_head*hd]. */
strata_status st_cuda_qgate_split(const float *d_qg, float *d_q, float *d_gate, int64_t n_head, int64_t hd,
                                  int64_t T, void *stream);

/* y[i] *= sigmoid(gate[i]) for i < n (1 / (1 + expf(-gate)), as st_sigmoid). */
strata_status st_cuda_mul_sigmoid(float *d_y, const float *d_gate, int64_t n, void *stream);

/* bytes from d_src to d_dst, device to device, ordered on stream. */
strata_status st_cuda_copy_d2d(void *d_dst, const void *d_src, size_t bytes, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_CUDA_DELTANET_H */
