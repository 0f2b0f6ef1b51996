/* moe_exact.cu - the routed expert FFN in the CPU's arithmetic (cuda_moe.h, "CPU-exact rows"):
 * each (token, slot) row the GPU computes here has the bits st_moe_ffn_end_rows gives for it on
 * an AVX-512 host, so a CPU layer's decode step can hand any share of its experts to the GPU
 * (the --cpu-misses split) without changing a bit of the result. What the CPU does, step for step:
 *   1. activations: x (and later h) quantized as quantize.c's st_quantize_row_q8_K (Q4_K, Q5_K,
 *      Q6_K weights) or st_quantize_row_q8_0 (Q8_0, Q4_0): the same max (first of equal
 *      magnitudes), the same IEEE divisions and roundings;
 *   2. dots as dot_avx512.c's exact-block-sum kernels: each (super-)block's integer sums exactly
 *      (any order: integers), then the float steps in the CPU's order - K-quants: acc = fma(S,
 *      d_x d, acc) and accm = fma(M, d_x dmin, accm) super-block by super-block, out = acc - accm;
 *      Q8_0 / Q4_0: 16 accumulators (block b into b mod 16) and the CPU's sum tree;
 *   3. h = silu(g) * u with st_det_expf (c/core/det_expf.h: the CPU's silu since this file);
 *   4. the caller's combine, st_cuda_moe_combine_rows: st_moe_combine's products and sums in
 *      slot order, each rounded on its own (the CPU is built with -ffp-contract=off).
 * Every float step below is an explicit __f*_rn intrinsic: nvcc contracts a * b + c into an fma
 * by default, which would change the bits. Speed is secondary (decode-sized calls, a warp per
 * output row and pair; the experts' PCIe copies dominate the split's GPU side).
 * test_cuda_moe checks each type's rows bit for bit against st_moe_ffn_end_rows. */
#include "common.cuh"

extern "C" {
#include "cuda_moe.h"
}
#include "det_expf.h"

#define ST_XW 4 /* warps a block in the dot kernels */

/* ---- activations: quantize.c's two quantizers -------------------------------------------- */

/* st_round_i8 of quantize.c: clamp to +-127, truncate, step away from zero on a remainder of at
 * least one half (NaN -> 0). */
static __device__ __forceinline__ int st_x_round_i8(float x) {
    x = x > 127.0f ? 127.0f : x;
    x = x < -127.0f ? -127.0f : x;
    if (x != x) return 0;
    int i = __float2int_rz(x);
    const float f = __fsub_rn(x, (float)i);
    i += (f >= 0.5f) - (f <= -0.5f);
    return i;
}

/* Row r of n values (x + r * n) into Q8_K (q8k 1) or Q8_0 blocks at dst + r * rb; rows whose
 * ids[r] is outside [0, n_expert) are skipped (ids NULL: every row). One warp a block: Q8_K, 8
 * values a lane; Q8_0, one a lane. */
static __global__ void __launch_bounds__(32 * ST_XW)
st_k_x_quant(const float *x, int64_t n, int64_t rows, const int32_t *ids, int32_t n_expert, int q8k,
             uint8_t *dst, size_t rb) {
    st_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t nbr = q8k ? n / 256 : n / 32; /* blocks a row */
    const int64_t gw = (int64_t)blockIdx.x * ST_XW + (threadIdx.x >> 5);
    if (gw >= rows * nbr) return;
    const int64_t r = gw / nbr, b = gw - r * nbr;
    if (ids && (ids[r] < 0 || ids[r] >= n_expert)) return;
    if (q8k) {
        const float *xb = x + r * n + b * 256 + lane * 8;
        uint8_t *yb = dst + r * rb + b * sizeof(block_q8_K);
        float v[8], bax = 0.0f, bv = 0.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < 8; j++) { /* strictly greater: the first of equal magnitudes */
            v[j] = xb[j];
            const float ax = fabsf(v[j]);
            if (ax > bax) { bax = ax; bv = v[j]; bi = lane * 8 + j; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float oax = __shfl_xor_sync(0xffffffffu, bax, o), ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oax > bax || (oax == bax && oi < bi)) { bax = oax; bv = ov; bi = oi; }
        }
        int8_t q[8];
        float d = 0.0f;
        if (bax == 0.0f) {
#pragma unroll
            for (int j = 0; j < 8; j++) q[j] = 0;
        } else {
            const float iscale = __fdiv_rn(-127.0f, bv);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int t = __float2int_rn(__fmul_rn(iscale, v[j]));
                q[j] = (int8_t)(t < 127 ? t : 127);
            }
            d = __fdiv_rn(1.0f, iscale);
        }
        int s = 0; /* bsums: lanes 2g and 2g + 1 hold group g's 16 */
#pragma unroll
        for (int j = 0; j < 8; j++) s += q[j];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        block_q8_K *y = (block_q8_K *)yb;
#pragma unroll
        for (int j = 0; j < 8; j++) y->qs[lane * 8 + j] = q[j];
        if ((lane & 1) == 0) y->bsums[lane >> 1] = (int16_t)s;
        if (lane == 0) y->d = d;
    } else {
        const float v = x[r * n + b * 32 + lane];
        float amax = fabsf(v);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = __fdiv_rn(amax, 127.0f);
        const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
        block_q8_0 *y = (block_q8_0 *)(dst + r * rb + b * sizeof(block_q8_0));
        y->qs[lane] = (int8_t)st_x_round_i8(__fmul_rn(v, id));
        if (lane == 0) y->d = __half_as_ushort(__float2half_rn(d));
    }
}

/* ---- dots: dot_avx512.c's arithmetic, one warp a (weight row, activation row) ---------------- */

static __device__ __forceinline__ uint32_t st_x_u32(const uint8_t *p) { /* 4 bytes, any alignment */
    return st_ld_u8(p) | st_ld_u8(p + 1) << 8 | st_ld_u8(p + 2) << 16 | st_ld_u8(p + 3) << 24;
}
static __device__ __forceinline__ int st_x_i32(const int8_t *p) { return (int)st_x_u32((const uint8_t *)p); }

/* Scale and min j of a Q4_K / Q5_K super-block's 12 packed bytes (quant.h's st_get_scale_min_k4). */
static __device__ __forceinline__ void st_x_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = st_ld_u8(q + j) & 63;
        *m = st_ld_u8(q + j + 4) & 63;
    } else {
        *sc = (st_ld_u8(q + j + 4) & 0xF) | ((st_ld_u8(q + j - 4) >> 6) << 4);
        *m = (st_ld_u8(q + j + 4) >> 4) | ((st_ld_u8(q + j) >> 6) << 4);
    }
}

/* The float steps of a K-quant row, super-blocks b0 .. b0 + 7 (fewer at the row's end), lanes
 * 4q .. 4q + 3 holding parts of super-block b0 + q's S and M (Q6_K: O): the parts summed
 * (exactly: integers), then acc = fma(S, d_x d, acc), accm = fma(M, d_x dmin, accm) in order
 * (Q6_K: accm = fma(O, 32 d_x d, accm); every lane computes the same chain). */
template <int Q6>
static __device__ __forceinline__ void st_x_chain8(int S, int M, const uint8_t *w, size_t bs, const block_q8_K *y,
                                                  int64_t b0, int64_t nb, float *acc, float *accm) {
    S += __shfl_xor_sync(0xffffffffu, S, 1);
    S += __shfl_xor_sync(0xffffffffu, S, 2);
    M += __shfl_xor_sync(0xffffffffu, M, 1);
    M += __shfl_xor_sync(0xffffffffu, M, 2);
#pragma unroll
    for (int q = 0; q < 8; q++) {
        const int Sq = __shfl_sync(0xffffffffu, S, 4 * q), Mq = __shfl_sync(0xffffffffu, M, 4 * q);
        if (b0 + q >= nb) break;
        const uint8_t *blk = w + (size_t)(b0 + q) * bs;
        const float dx = y[b0 + q].d;
        if (Q6) { /* d at byte 208 */
            const float dd = __fmul_rn(dx, st_dev_fp16(st_ld_u16(blk + 208)));
            *acc = __fmaf_rn(__int2float_rn(Sq), dd, *acc);
            *accm = __fmaf_rn(__int2float_rn(Mq), __fmul_rn(32.0f, dd), *accm);
        } else { /* d, dmin at bytes 0, 2 */
            *acc = __fmaf_rn(__int2float_rn(Sq), __fmul_rn(dx, st_dev_fp16(st_ld_u16(blk))), *acc);
            *accm = __fmaf_rn(__int2float_rn(Mq), __fmul_rn(dx, st_dev_fp16(st_ld_u16(blk + 2))), *accm);
        }
    }
}

/* Q4_K (Q5 0) / Q5_K (Q5 1) against Q8_K: lane = 4 * (super-block of the pass) + c, c taking
 * sub-blocks 2c (low nibbles of qs[32c ..]) and 2c + 1 (high nibbles). */
template <int Q5>
static __device__ float st_x_dot_q45k(const uint8_t *w, const block_q8_K *y, int64_t n) {
    const int lane = threadIdx.x & 31, c = lane & 3;
    const size_t bs = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const int64_t nb = n / 256;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        const int64_t b = b0 + (lane >> 2);
        int S = 0, M = 0;
        if (b < nb) {
            const uint8_t *blk = w + (size_t)b * bs;
            const uint8_t *qs = blk + (Q5 ? 48 : 16) + 32 * c, *qh = blk + 16;
            const int8_t *xq = y[b].qs + 64 * c;
            int s0, m0, s1, m1;
            st_x_scale_min(2 * c, blk + 4, &s0, &m0);
            st_x_scale_min(2 * c + 1, blk + 4, &s1, &m1);
            int dlo = 0, dhi = 0;
#pragma unroll
            for (int i = 0; i < 32; i += 4) {
                const uint32_t q4 = __ldg((const unsigned int *)(qs + i));
                uint32_t lo = q4 & 0x0F0F0F0Fu, hi = (q4 >> 4) & 0x0F0F0F0Fu;
                if (Q5) { /* bit 2c (low) and 2c + 1 (high) of qh[i ..]: + 16 */
                    const uint32_t h = __ldg((const unsigned int *)(qh + i));
                    lo |= ((h >> (2 * c)) & 0x01010101u) << 4;
                    hi |= ((h >> (2 * c + 1)) & 0x01010101u) << 4;
                }
                dlo = __dp4a((int)lo, *(const int *)(xq + i), dlo); /* Q8_K rows: 4-byte aligned */
                dhi = __dp4a((int)hi, *(const int *)(xq + 32 + i), dhi);
            }
            S = s0 * dlo + s1 * dhi;
            const int16_t *bsum = y[b].bsums + 4 * c;
            M = m0 * (bsum[0] + bsum[1]) + m1 * (bsum[2] + bsum[3]);
        }
        st_x_chain8<0>(S, M, w, bs, y, b0, nb, &acc, &accm);
    }
    return __fsub_rn(acc, accm);
}

/* Q6_K against Q8_K: lane c of a super-block's 4 takes weights 64c .. 64c + 63 (half h = c / 2),
 * u = low | high << 4 in 0..63, groups of 16 with int8 scales; S = sum sc_g dot(u_g, x_g),
 * O = sum sc_g bsum_g (the CPU's q = u - 32 as accm's 32 d_x d O). */
static __device__ float st_x_dot_q6k(const uint8_t *w, const block_q8_K *y, int64_t n) {
    const int lane = threadIdx.x & 31, c = lane & 3, h = c >> 1, half = c & 1;
    const int64_t nb = n / 256;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        const int64_t b = b0 + (lane >> 2);
        int S = 0, O = 0;
        if (b < nb) {
            const uint8_t *blk = w + (size_t)b * sizeof(block_q6_K);
            const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(blk + 192);
            const int8_t *xq = y[b].qs + 64 * c;
#pragma unroll
            for (int g = 0; g < 4; g++) { /* group 4c + g: weights 64c + 16g .. */
                int dg = 0;
#pragma unroll
                for (int i4 = 0; i4 < 16; i4 += 4) {
                    uint32_t u = 0;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = 16 * g + i4 + e; /* 0..63 within the lane's 64 */
                        const uint32_t lo = (st_ld_u8(ql + i) >> (4 * half)) & 0xF;
                        const uint32_t hb = (st_ld_u8(qh + (i & 31)) >> (2 * (2 * half + (i >> 5)))) & 3;
                        u |= (lo | hb << 4) << (8 * e);
                    }
                    dg = __dp4a((int)u, *(const int *)(xq + 16 * g + i4), dg);
                }
                const int s = (int)(int8_t)st_ld_u8((const uint8_t *)(sc + 4 * c + g));
                S += s * dg;
                O += s * y[b].bsums[4 * c + g];
            }
        }
        st_x_chain8<1>(S, O, w, sizeof(block_q6_K), y, b0, nb, &acc, &accm);
    }
    return __fsub_rn(acc, accm);
}

/* Q8_0 (Q40 0) / Q4_0 (Q40 1) against Q8_0: block b's exact sum S_b into accumulator b mod 16
 * (lane k < 16 holds acc_k; per pass of 32 blocks it adds blocks k then k + 16), then the CPU's
 * tree: acc_k + acc_{k+8}, + 4 apart, + 2, + 1. */
template <int Q40>
static __device__ float st_x_dot_q80(const uint8_t *w, const uint8_t *x, int64_t n) {
    const int lane = threadIdx.x & 31;
    const size_t bs = Q40 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    const int64_t nb = n / 32;
    float acc = 0.0f;
    for (int64_t b0 = 0; b0 < nb; b0 += 32) {
        const int64_t b = b0 + lane;
        int S = 0;
        float sc = 0.0f;
        if (b < nb) {
            const uint8_t *blk = w + (size_t)b * bs;
            const uint8_t *xb = x + (size_t)b * sizeof(block_q8_0);
            const int8_t *xq = (const int8_t *)(xb + 2);
            if (Q40) {
#pragma unroll
                for (int i = 0; i < 16; i += 4) {
                    const uint32_t q4 = st_x_u32(blk + 2 + i);
                    /* nibble - 8 as signed bytes: (nibble ^ 8) - 8 keeps the borrow in each byte */
                    const uint32_t lo = q4 & 0x0F0F0F0Fu, hi = (q4 >> 4) & 0x0F0F0F0Fu;
                    const int l8 = (int)__vsub4(lo, 0x08080808u), h8 = (int)__vsub4(hi, 0x08080808u);
                    S = __dp4a(l8, st_x_i32(xq + i), S);
                    S = __dp4a(h8, st_x_i32(xq + 16 + i), S);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 32; i += 4) S = __dp4a(st_x_i32((const int8_t *)blk + 2 + i), st_x_i32(xq + i), S);
            }
            sc = __fmul_rn(st_dev_fp16(st_ld_u16(blk)), st_dev_fp16(st_ld_u16(xb)));
        }
        const int S2 = __shfl_down_sync(0xffffffffu, S, 16);
        const float sc2 = __shfl_down_sync(0xffffffffu, sc, 16);
        if (lane < 16) {
            if (b < nb) acc = __fmaf_rn(__int2float_rn(S), sc, acc);
            if (b + 16 < nb) acc = __fmaf_rn(__int2float_rn(S2), sc2, acc);
        }
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, o));
    return __shfl_sync(0xffffffffu, acc, 0);
}

template <int TYPE>
static __device__ __forceinline__ float st_x_dot(const uint8_t *w, const uint8_t *x, int64_t n) {
    if (TYPE == STRATA_TYPE_Q4_K) return st_x_dot_q45k<0>(w, (const block_q8_K *)x, n);
    if (TYPE == STRATA_TYPE_Q5_K) return st_x_dot_q45k<1>(w, (const block_q8_K *)x, n);
    if (TYPE == STRATA_TYPE_Q6_K) return st_x_dot_q6k(w, (const block_q8_K *)x, n);
    if (TYPE == STRATA_TYPE_Q4_0) return st_x_dot_q80<1>(w, x, n);
    return st_x_dot_q80<0>(w, x, n);
}

/* ---- the FFN's two matmuls ------------------------------------------------------------------ */

/* gate/up: warp = row r of n_ff, block y = pair p (token p / k); h[p][r] = silu(g) * u. */
template <int TYPE>
static __global__ void __launch_bounds__(32 * ST_XW)
st_k_x_gate_up(const st_cuda_expert *experts, int32_t n_expert, const int32_t *ids, int32_t k,
               const uint8_t *xq, size_t rb_x, int64_t n_embd, int64_t n_ff, float *h) {
    st_pdl_enter();
    const int64_t p = blockIdx.y, r = (int64_t)blockIdx.x * ST_XW + (threadIdx.x >> 5);
    const int32_t e = ids[p];
    if (e < 0 || e >= n_expert || r >= n_ff) return;
    const st_cuda_expert *X = &experts[e];
    const uint8_t *x = xq + (size_t)(p / k) * rb_x;
    const float g = st_x_dot<TYPE>((const uint8_t *)X->gate.data + (size_t)r * X->gate.row_bytes, x, n_embd);
    const float u = st_x_dot<TYPE>((const uint8_t *)X->up.data + (size_t)r * X->up.row_bytes, x, n_embd);
    if ((threadIdx.x & 31) == 0) h[p * n_ff + r] = __fmul_rn(st_det_silu(g), u);
}

/* down: warp = row r of n_embd, block y = pair p; rows[p][r] = down_e[r] . hq[p]. */
template <int TYPE>
static __global__ void __launch_bounds__(32 * ST_XW)
st_k_x_down(const st_cuda_expert *experts, int32_t n_expert, const int32_t *ids, const uint8_t *hq,
            size_t rb_h, int64_t n_embd, int64_t n_ff, float *rows) {
    st_pdl_enter();
    const int64_t p = blockIdx.y, r = (int64_t)blockIdx.x * ST_XW + (threadIdx.x >> 5);
    const int32_t e = ids[p];
    if (e < 0 || e >= n_expert || r >= n_embd) return;
    const st_cuda_expert *X = &experts[e];
    const float y = st_x_dot<TYPE>((const uint8_t *)X->down.data + (size_t)r * X->down.row_bytes,
                                   hq + (size_t)p * rb_h, n_ff);
    if ((threadIdx.x & 31) == 0) rows[p * n_embd + r] = y;
}

/* out[t][i] = sum over valid slots in order of wts * row (rows_a where ids_a is valid, else
 * rows_b): the first product, then each sum and product rounded on its own (st_moe_combine). */
static __global__ void __launch_bounds__(256)
st_k_x_combine(const int32_t *ids, const int32_t *ids_a, const float *rows_a, const float *rows_b,
               const float *wts, int64_t T, int32_t k, int64_t n_embd, int32_t n_expert, float *out) {
    st_pdl_enter();
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < T * n_embd;
         g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = g / n_embd, i = g - t * n_embd;
        float o = 0.0f;
        int first = 1;
        for (int32_t s = 0; s < k; s++) {
            const int64_t q = t * k + s;
            if (ids[q] < 0 || ids[q] >= n_expert) continue;
            const float *row = ids_a[q] >= 0 && ids_a[q] < n_expert ? rows_a : rows_b;
            const float v = __fmul_rn(wts[q], row[q * n_embd + i]);
            o = first ? v : __fadd_rn(o, v);
            first = 0;
        }
        out[g] = o;
    }
}

/* ---- entries ------------------------------------------------------------------------------ */

int st_cuda_moe_exact_supports(strata_type gate_up, strata_type down) {
    const auto ok = [](strata_type t) {
        return t == STRATA_TYPE_Q4_0 || t == STRATA_TYPE_Q8_0 || t == STRATA_TYPE_Q4_K ||
               t == STRATA_TYPE_Q5_K || t == STRATA_TYPE_Q6_K;
    };
    return ok(gate_up) && ok(down);
}

static int st_x_q8k(strata_type t) { return t == STRATA_TYPE_Q4_K || t == STRATA_TYPE_Q5_K || t == STRATA_TYPE_Q6_K; }
static size_t st_x_rb(strata_type t, int64_t n) {
    return st_x_q8k(t) ? (size_t)(n / 256) * sizeof(block_q8_K) : (size_t)(n / 32) * sizeof(block_q8_0);
}
static size_t st_x_al(size_t b) { return (b + 255) & ~(size_t)255; }

/* A row's bytes at the wider of the two activation types (either may be the call's). */
static size_t st_x_rbmax(int64_t n) {
    const size_t a = st_x_rb(STRATA_TYPE_Q4_K, n), b = st_x_rb(STRATA_TYPE_Q8_0, n);
    return a > b ? a : b;
}

size_t st_cuda_moe_exact_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    const size_t P = (size_t)T * (size_t)k;
    return st_x_al((size_t)T * st_x_rbmax(n_embd)) + st_x_al(P * (size_t)n_ff * sizeof(float)) +
           st_x_al(P * st_x_rbmax(n_ff));
}

template <int TYPE>
static void st_x_launch_gu(dim3 grid, cudaStream_t s, const st_cuda_moe_args *a, const uint8_t *xq, size_t rb_x, float *h) {
    st_launch(st_k_x_gate_up<TYPE>, grid, 32 * ST_XW, 0, s, a->experts, a->n_expert, a->ids, a->k, xq, rb_x,
              a->n_embd, a->n_ff, h);
}
template <int TYPE>
static void st_x_launch_down(dim3 grid, cudaStream_t s, const st_cuda_moe_args *a, const uint8_t *hq, size_t rb_h,
                             float *rows) {
    st_launch(st_k_x_down<TYPE>, grid, 32 * ST_XW, 0, s, a->experts, a->n_expert, a->ids, hq, rb_h, a->n_embd,
              a->n_ff, rows);
}

#define ST_X_SWITCH(type, LAUNCH, ...)                                                         \
    switch (type) {                                                                            \
    case STRATA_TYPE_Q4_K: LAUNCH<STRATA_TYPE_Q4_K>(__VA_ARGS__); break;                       \
    case STRATA_TYPE_Q5_K: LAUNCH<STRATA_TYPE_Q5_K>(__VA_ARGS__); break;                       \
    case STRATA_TYPE_Q6_K: LAUNCH<STRATA_TYPE_Q6_K>(__VA_ARGS__); break;                       \
    case STRATA_TYPE_Q4_0: LAUNCH<STRATA_TYPE_Q4_0>(__VA_ARGS__); break;                       \
    default: LAUNCH<STRATA_TYPE_Q8_0>(__VA_ARGS__); break;                                     \
    }

strata_status st_cuda_moe_exact_rows(const st_cuda_moe_args *a, float *rows, void *stream) {
    if (!a || !a->experts || !a->x || !a->ids || !rows || !a->ws || a->T < 1 || a->k < 1 || a->n_expert < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "moe exact rows: bad arguments");
    if (a->type_gate != a->type_up || !st_cuda_moe_exact_supports(a->type_gate, a->type_down))
        return st_error(STRATA_ERR_UNSUPPORTED, "moe exact rows: types %s/%s not supported",
                        strata_type_name(a->type_gate), strata_type_name(a->type_down));
    if (a->b_gate || a->b_up || a->b_down || a->act != 0)
        return st_error(STRATA_ERR_UNSUPPORTED, "moe exact rows: expert biases and gpt-oss's activation "
                        "are st_cuda_moe_ffn's only");
    const int64_t E = a->n_embd, F = a->n_ff;
    if (E % (st_x_q8k(a->type_gate) ? 256 : 32) || F % (st_x_q8k(a->type_down) ? 256 : 32))
        return st_error(STRATA_ERR_INVALID_ARG, "moe exact rows: widths %lld/%lld not whole blocks",
                        (long long)E, (long long)F);
    if (a->T * a->k > 65535) /* a grid row a pair */
        return st_error(STRATA_ERR_INVALID_ARG, "moe exact rows: %lld pairs (at most 65535; decode-sized calls)",
                        (long long)(a->T * a->k));
    if (a->ws_bytes < st_cuda_moe_exact_wsize(a->T, a->k, E, F))
        return st_error(STRATA_ERR_INVALID_ARG, "moe exact rows: workspace too small");
    ST_TRY(st_cuda_require("moe exact rows"));
    const cudaStream_t s = (cudaStream_t)stream;
    const int64_t P = a->T * a->k;
    const size_t rb_x = st_x_rb(a->type_gate, E), rb_h = st_x_rb(a->type_down, F);
    /* the workspace as st_cuda_moe_exact_wsize lays it out: xq (T rows), h, hq */
    uint8_t *xq = (uint8_t *)a->ws;
    float *h = (float *)(xq + st_x_al((size_t)a->T * st_x_rbmax(E)));
    uint8_t *hq = (uint8_t *)h + st_x_al((size_t)P * (size_t)F * sizeof(float));
    const int64_t xblocks = a->T * (st_x_q8k(a->type_gate) ? E / 256 : E / 32);
    st_launch(st_k_x_quant, st_cuda_grid(xblocks, ST_XW), 32 * ST_XW, 0, s, a->x, E, a->T, (const int32_t *)NULL,
              a->n_expert, st_x_q8k(a->type_gate), xq, rb_x);
    ST_CUDA_CHECK_LAUNCH("st_k_x_quant");
    const dim3 ggu((unsigned)((F + ST_XW - 1) / ST_XW), (unsigned)P);
    ST_X_SWITCH(a->type_gate, st_x_launch_gu, ggu, s, a, xq, rb_x, h)
    ST_CUDA_CHECK_LAUNCH("st_k_x_gate_up");
    const int64_t hblocks = P * (st_x_q8k(a->type_down) ? F / 256 : F / 32);
    st_launch(st_k_x_quant, st_cuda_grid(hblocks, ST_XW), 32 * ST_XW, 0, s, (const float *)h, F, P, a->ids,
              a->n_expert, st_x_q8k(a->type_down), hq, rb_h);
    ST_CUDA_CHECK_LAUNCH("st_k_x_quant");
    const dim3 gd((unsigned)((E + ST_XW - 1) / ST_XW), (unsigned)P);
    ST_X_SWITCH(a->type_down, st_x_launch_down, gd, s, a, hq, rb_h, rows)
    ST_CUDA_CHECK_LAUNCH("st_k_x_down");
    return STRATA_OK;
}

strata_status st_cuda_moe_combine_rows(const int32_t *ids, const int32_t *ids_a, const float *rows_a,
                                       const float *rows_b, const float *wts, int64_t T, int32_t k,
                                       int64_t n_embd, int32_t n_expert, float *out, void *stream) {
    if (!ids || !ids_a || !rows_a || !rows_b || !wts || !out || T < 0 || k < 1 || n_embd < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "moe combine rows: bad arguments");
    if (T == 0) return STRATA_OK;
    ST_TRY(st_cuda_require("moe combine rows"));
    st_launch(st_k_x_combine, st_cuda_grid(T * n_embd, 256), 256, 0, (cudaStream_t)stream, ids, ids_a, rows_a,
              rows_b, wts, T, k, n_embd, n_expert, out);
    ST_CUDA_CHECK_LAUNCH("st_k_x_combine");
    return STRATA_OK;
}
