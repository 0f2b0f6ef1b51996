/* ops_ssm.h - the gated DeltaNet (qwen3next's linear attention) math on one token: the causal
 * depthwise conv step with its kernel state, the L2 norm, the gated delta rule on one value
 * head's recurrent state and the gated RMSNorm of its output (ops_ssm.c). */
#ifndef STRATA_OPS_SSM_H
#define STRATA_OPS_SSM_H

#include <stdint.h>

/* One step of a causal depthwise conv of width K over C channels: y[c] = silu(sum_j w[c][j] *
 * in_j[c]) with in_0..in_{K-2} the state's rows (oldest first) and in_{K-1} = x; the state then
 * drops its oldest row and takes x. w is (K, C) in ggml order: channel c's K taps contiguous. */
void st_ssm_conv_step(const float *w, float *state, const float *x, float *y, int64_t C, int64_t K);

/* x *= 1/sqrt(sum(x^2) + eps) (transformers' l2norm, FLA's form). */
void st_l2norm(float *x, int64_t n, float eps);

/* The gated delta rule of one value head for one token (transformers'
 * torch_recurrent_gated_delta_rule): S (dk x dv, row i = key dim i) decays by exp(g), then
 * S += k (x) beta (v - S^T k), and out = S^T q. q already L2-normed and scaled, k L2-normed. */
void st_gdn_step(float *S, const float *q, const float *k, const float *v, float g, float beta,
                 float *out, int64_t dk, int64_t dv);

/* y = rmsnorm(x) * w * silu(z) over n values (Qwen3NextRMSNormGated). y may alias x. */
void st_rmsnorm_gated(float *y, const float *x, const float *w, const float *z, int64_t n, float eps);

/* softplus with torch's (and ggml's) threshold: x above 20 passes through. */
float st_softplus(float x);

#endif /* STRATA_OPS_SSM_H */
