/* ops_ssm.h - the gated DeltaNet (qwen3next's linear attention) math (ops_ssm.c): the causal
 * depthwise conv step with its kernel state, the L2 norm, the chunked gated delta rule on one
 * value head (rows appended to an open chunk, the chunk closed into the next start state) and the
 * gated RMSNorm of its output. */
#ifndef STRATA_OPS_SSM_H
#define STRATA_OPS_SSM_H

#include <stdint.h>

/* One step of a causal depthwise conv of width K over C channels: y[c] = silu(sum_j w[c][j] *
 * in_j[c]) with in_0..in_{K-2} the state's rows (oldest first) and in_{K-1} = x; the state then
 * drops its oldest row and takes x. w is (K, C) in ggml order: channel c's K taps contiguous. */
void st_ssm_conv_step(const float *w, float *state, const float *x, float *y, int64_t C, int64_t K);

/* x *= 1/sqrt(sum(x^2) + eps) (transformers' l2norm, FLA's form). */
void st_l2norm(float *x, int64_t n, float eps);

/* The chunk length of the chunked gated delta rule: chunks start at positions 0, C, 2C, ... */
#define ST_GDN_CHUNK 64

/* One value head's open chunk of the chunked gated delta rule (transformers'
 * torch_chunk_gated_delta_rule, chunk by chunk, row by row): the state at the chunk's first row
 * (S, dk x dv, row i = key dim i; the recurrent form's S after the previous chunk) and, per row r
 * appended so far, its key k_r, its cumulative log decay G_r = g_0 + ... + g_r within the chunk,
 * and its corrected value u_r = beta_r (v_r - e^{G_r} S^T k_r - sum_{j<r} e^{G_r-G_j} (k_r.k_j) u_j)
 * (the rows of transformers' v_new). */
typedef struct {
    const float *S;   /* [dk][dv] */
    const float *k;   /* [dk][ST_GDN_CHUNK]: key r's dim e at k[e * ST_GDN_CHUNK + r] (L2-normed);
                         the caller writes key i before appending row i */
    float *u;         /* [ST_GDN_CHUNK][dv] */
    float *G;         /* [ST_GDN_CHUNK] */
    int64_t dk, dv;   /* dv <= 1024 (hparams.c) */
} st_gdn_chunk;

/* Appends rows i0 .. i0 + n - 1 (i0 + n <= ST_GDN_CHUNK) to the chunk: row b has query q + b * ldq
 * (L2-normed and scaled), value v + b * ldv, g[b * ldgb], beta[b * ldgb]; its u and G are stored
 * and its output out + b * ldo = e^{G_i} S^T q + sum_{j<=i} e^{G_i-G_j} (q.k_j) u_j. Row i's
 * arithmetic reads S and rows 0..i only, in a fixed order: the same bits however the rows are
 * split between calls. */
void st_gdn_chunk_rows(const st_gdn_chunk *c, int64_t i0, int64_t n, const float *q, int64_t ldq,
                       const float *v, int64_t ldv, const float *g, const float *beta, int64_t ldgb,
                       float *out, int64_t ldo);

/* The state after the chunk's n rows: S_next = e^{G_{n-1}} S + sum_j e^{G_{n-1}-G_j} k_j (x) u_j
 * (S_next must not alias S). */
void st_gdn_chunk_close(const st_gdn_chunk *c, int64_t n, float *S_next);

/* The gated delta rule of one value head for one token, in the recurrent form (transformers'
 * torch_recurrent_gated_delta_rule): S (dk x dv, row i = key dim i) decays by exp(g), then
 * S += k (x) beta (v - S^T k), and out = S^T q. q already L2-normed and scaled, k L2-normed. The
 * sessions use the chunked form above; this is the reference of the GPU kernels' check
 * (c/cuda/dev/deltanet_check.cu), whose token loop computes this form. */
void st_gdn_step(float *S, const float *q, const float *k, const float *v, float g, float beta,
                 float *out, int64_t dk, int64_t dv);

/* y = rmsnorm(x) * w * silu(z) over n values (Qwen3NextRMSNormGated). y may alias x. */
void st_rmsnorm_gated(float *y, const float *x, const float *w, const float *z, int64_t n, float eps);

/* softplus with torch's (and ggml's) threshold: x above 20 passes through. */
float st_softplus(float x);

#endif /* STRATA_OPS_SSM_H */
