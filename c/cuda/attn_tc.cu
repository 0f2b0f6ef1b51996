/* attn_tc.cu - the attention kernels on the tensor cores (attn.cuh): st_k_attn_tc, flash
 * attention for prompt batches (64+ rows per KV head), and st_k_attn_dtc, flash-decoding for
 * decode steps and short verify windows (at most 16 rows per KV head) at depth, with the pieces
 * they share (K/V tiles by cp.async, the query fragments, the mask and the online softmax on mma
 * fragments). attn.cu picks the kernel, makes the plan and runs the combine pass. */
#include "attn.cuh"
#include "mma.cuh"

#include <stdint.h>
#include <math.h>

/* ---- prefill on the tensor cores (flash attention) --------------------------------------------- */


size_t st_attn_tc_smem(int hd) { /* two stages of K and V tiles; from stage 1 on, first the queries */
    constexpr int BN = ST_ATTN_TC_BNP, BM = ST_ATTN_TC_BM, QLS = ST_ATTN_TC_QL_SMEM; /* (rows) */
    const int stages = 4 * BN, with_q = 2 * BN + (QLS ? 1 : 2) * BM; /* Ql past the stages if QLS */
    return (size_t)((with_q > stages ? with_q : stages) + (QLS ? BM : 0)) * (size_t)(hd + 8) * sizeof(__half);
}

/* Copies positions pb..pb+BNT-1 of K and V (zeros past last) into a stage by a block of NTH
 * threads: cp.async, 16 bytes a copy, 8 + 8 per thread at head_dim 128, 64 positions and 128
 * threads. Position 0 stands in as the (unread) source of a zero fill. */
template <int HD, int NTH = 128, int BNT = ST_ATTN_TC_BN>
static __device__ __forceinline__ void st_attn_tc_fetch(__half *Ks, __half *Vs, const __half *Kb,
                                                        const __half *Vb, int64_t pb, int64_t last) {
    constexpr int CH = HD / 8, LDS = HD + 8;
#pragma unroll
    for (int idx = (int)threadIdx.x; idx < BNT * CH; idx += NTH) {
        const int pp = idx / CH, ch = idx - pp * CH;
        const int64_t p = pb + pp;
        const bool ok = p <= last;
        const size_t off = (size_t)(ok ? p : 0) * HD + (size_t)ch * 8;
        st_cp_async16(Ks + pp * LDS + ch * 8, Kb + off, ok);
        st_cp_async16(Vs + pp * LDS + ch * 8, Vb + off, ok);
    }
}

/* ---- pieces shared by the tensor-core kernels (st_k_attn_tc, st_k_attn_dtc) ------------------ */

/* Query rows r_first .. r_first + n - 1 of KV head hk (row r: token r / G, query head
 * hk * G + r % G; rows from R on are zero), scaled by qscale, into Qh [n][LDS] as f16 and, SPLIT,
 * the remainders into Ql; by a block of NTH threads. */
template <int HD, bool SPLIT, int NTH = 128>
static __device__ __forceinline__ void st_attn_stage_q(const st_attn_args &a, int hk, int G, int R, int r_first,
                                                       int n, float qscale, __half *Qh, __half *Ql, int LDS) {
    for (int idx = (int)threadIdx.x; idx < n * HD; idx += NTH) {
        const int lr = idx / HD, d = idx - lr * HD, r = r_first + lr;
        float qv = 0.0f;
        if (r < R) {
            const int t = r / G, h = hk * G + (r - t * G);
            qv = a.q[(int64_t)t * a.ldq + (int64_t)h * HD + d] * qscale;
        }
        const __half qh = __float2half_rn(qv);
        Qh[lr * LDS + d] = qh;
        if (SPLIT) Ql[lr * LDS + d] = __float2half_rn(qv - __half2float(qh));
    }
}

/* The A fragments of staged query rows row0 .. row0 + 15 (hi, and lo when SPLIT). */
template <int KS, bool SPLIT>
static __device__ __forceinline__ void st_attn_q_frags(uint32_t (&qf)[KS][4], uint32_t (&ql)[SPLIT ? KS : 1][4],
                                                       const __half *Qh, const __half *Ql, int row0, int lane,
                                                       int LDS) {
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        st_ldsm_x4(qf[ks], Qh + (row0 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
        if (SPLIT) st_ldsm_x4(ql[ks], Ql + (row0 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
    }
}

/* The causal mask of NT n8 score blocks at positions pb + 8 nt + 2 tq + e: -inf past e0 (the
 * lane's first row's last position) and past e1 (its second row's). */
template <int NT>
static __device__ __forceinline__ void st_attn_mask(float (&sc)[NT][4], int64_t pb, int tq, int64_t e0, int64_t e1) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t p = pb + nt * 8 + 2 * tq + e;
            if (p > e0) sc[nt][e] = -INFINITY;
            if (p > e1) sc[nt][2 + e] = -INFINITY;
        }
}

/* One online-softmax step (base 2) of a warp's 16 rows over NT n8 score blocks: the running
 * maxima m (a quad's four lanes agree by shuffles), the scores become probabilities, the sums l
 * rescaled and added to; c0 / c1 get the factors the accumulators must be rescaled by. */
template <int NT>
static __device__ __forceinline__ void st_attn_softmax_step(float (&sc)[NT][4], float &m0, float &m1, float &l0,
                                                            float &l1, float &c0, float &c1) {
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    c0 = mx0 == -INFINITY ? 1.0f : exp2f(m0 - mx0); /* 0 while m0 is -inf */
    c1 = mx1 == -INFINITY ? 1.0f : exp2f(m1 - mx1);
    const float b0 = mx0 == -INFINITY ? 0.0f : mx0, b1 = mx1 == -INFINITY ? 0.0f : mx1;
    float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float p0 = exp2f(sc[nt][e] - b0); /* -inf - b: 0 */
            const float p1 = exp2f(sc[nt][2 + e] - b1);
            sc[nt][e] = p0;
            sc[nt][2 + e] = p1;
            rs0 += p0;
            rs1 += p1;
        }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        rs0 += __shfl_xor_sync(0xffffffffu, rs0, off);
        rs1 += __shfl_xor_sync(0xffffffffu, rs1, off);
    }
    l0 = fmaf(l0, c0, rs0);
    l1 = fmaf(l1, c1, rs1);
    m0 = mx0;
    m1 = mx1;
}

/* Probabilities of 16 positions (score blocks s0, s1: the C layout is the A fragment layout) as
 * the f16 A fragment pa and, SPLIT, the remainders' fragment pl. */
template <bool SPLIT>
static __device__ __forceinline__ void st_attn_p_frags(const float (&s0)[4], const float (&s1)[4], uint32_t (&pa)[4],
                                                       uint32_t (&pl)[4]) {
    pa[0] = st_h2(s0[0], s0[1]);
    pa[1] = st_h2(s0[2], s0[3]);
    pa[2] = st_h2(s1[0], s1[1]);
    pa[3] = st_h2(s1[2], s1[3]);
    pl[0] = pl[1] = pl[2] = pl[3] = 0u;
    if (SPLIT) {
#pragma unroll
        for (int i = 0; i < 4; i++) { /* pa[i] holds s(i/2)[2(i%2)], [2(i%2) + 1] */
            const float *sv = i < 2 ? s0 : s1;
            const float2 h = __half22float2(*(const __half2 *)&pa[i]);
            pl[i] = st_h2(sv[2 * (i & 1)] - h.x, sv[2 * (i & 1) + 1] - h.y);
        }
    }
}

/* Flash attention for long batches (prefill) over an f16 cache, head_dim 64 or 128. A block of
 * BM / 16 warps (4 by default; 8 measured slower) serves BM query rows of one KV head (rows as
 * in st_k_attn: token-major, the G query heads of the KV head), each warp 16 of them; it walks
 * the positions of its chunk up to its last row's in tiles of 64, K and V through shared memory
 * in two stages: the next tile's cp.async copies are in flight while the warps compute on this
 * one. Per tile a warp computes its 16 x 64 scores with mma.sync m16n8k16 (queries rounded to
 * f16 once, scaled by scale * log2 e), masks the causal limit (only in tiles that reach past
 * the block's first row's limit), updates its rows' running max and sum (online softmax in base
 * 2, f32), and adds P * V with P rounded to f16 (ldmatrix.trans for V). Tiles in a fixed order,
 * so deterministic.
 * n_chunks == 1: every output row written once, normalized. n_chunks > 1 (blockIdx.y = chunk):
 * unnormalized partials with their max (natural log units, as st_k_attn writes them) and sum,
 * merged in chunk order by st_k_attn_combine. SQ / SP: each query / each probability is carried
 * as two f16 numbers, hi = f16(x) and lo = f16(x - hi), and multiplied twice (hi and lo against
 * the same f16 K or V fragment, f32 accumulation): products within ~2^-22 of f32; K and V are
 * f16 in the cache, so exact either way. attn_tc 2: both (twice single f16's mma work); attn_tc
 * 3: the probabilities only (3/4 of it; below single f16's NMSE, but on an H100 the default
 * model's KL against the CPU was 2.35e-4 against single's 1.82e-4 and split's 6.9e-5; the queries
 * alone split, tried and removed: 1.89e-4). Only both split keep the KL under 1e-4. */
#ifndef ST_ATTN_TC_MINB_P
#define ST_ATTN_TC_MINB_P 1 /* blocks an SM asked of the single-query kernels (3: <= 170 registers) */
#endif
#ifndef ST_ATTN_TC_MINB_S
#define ST_ATTN_TC_MINB_S 1 /* the same for the split-query kernel (the default) */
#endif
template <int HD, bool SQ, bool SP>
static __global__ void __launch_bounds__(2 * ST_ATTN_TC_BM, SQ ? ST_ATTN_TC_MINB_S : ST_ATTN_TC_MINB_P)
st_k_attn_tc(const st_attn_args a) {
    st_pdl_enter();
    constexpr int BM = ST_ATTN_TC_BM, BN = ST_ATTN_TC_BNP, LDS = HD + 8, NTH = 2 * BM; /* 32 a warp of 16 rows */
    constexpr bool QLS = SQ && ST_ATTN_TC_QL_SMEM; /* the queries' lo parts read from shared memory */
    constexpr int KS = HD / 16, NT = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) unsigned char st_attn_tc_sm[];
    __half *const S0 = (__half *)st_attn_tc_sm; /* stage s: K at S0 + 2s * BN * LDS, V after it */
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int g = lane >> 2, tq = lane & 3;
    const int rg = (int)blockIdx.x, c = (int)blockIdx.y, hk = (int)blockIdx.z;
    const int G = a.group, R = a.T * G;
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const int r_first = rg * BM;
    const float qscale = a.scale * 1.4426950408889634f; /* log2(e): exp2 below */
    const __half *Kb = (const __half *)a.k + (size_t)hk * (size_t)a.n_ctx * HD;
    const __half *Vb = (const __half *)a.v + (size_t)hk * (size_t)a.n_ctx * HD;

    /* this chunk's positions: [p_begin, p_end], the end clipped to the block's last row's */
    const int64_t last = pos0 + (min(R, r_first + BM) - 1) / G;
    const int64_t p_begin = (int64_t)c * a.chunk;
    const int64_t p_end = min(last, p_begin + a.chunk - 1);
    const int n_tiles = p_end >= p_begin ? (int)((p_end - p_begin) / BN + 1) : 0;
    if (n_tiles > 0) st_attn_tc_fetch<HD, NTH, BN>(S0, S0 + BN * LDS, Kb, Vb, p_begin, p_end);
    st_cp_async_commit();

    /* this warp's 16 query rows as f16 A fragments, staged from stage 1 on (hi, then lo; QLS: lo
     * past the stages, where it stays for the tiles to read) */
    __half *const Qh = S0 + 2 * BN * LDS;
    __half *const Ql = QLS ? S0 + (4 * BN > 2 * BN + BM ? 4 * BN : 2 * BN + BM) * LDS : Qh + BM * LDS;
    st_attn_stage_q<HD, SQ, NTH>(a, hk, G, R, r_first, BM, qscale, Qh, Ql, LDS);
    __syncthreads();
    uint32_t qf[KS][4], ql[SQ && !QLS ? KS : 1][4];
    st_attn_q_frags<KS, SQ && !QLS>(qf, ql, Qh, Ql, warp * 16, lane, LDS);
    __syncthreads(); /* stage 1 is the next tile's */

    const int r0 = r_first + warp * 16 + g, r1 = r0 + 8;
    const int64_t lim0 = r0 < R ? pos0 + r0 / G : -1, lim1 = r1 < R ? pos0 + r1 / G : -1;
    const int64_t lim_first = pos0 + r_first / G; /* the least limit of the block's rows */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

    for (int it = 0; it < n_tiles; it++) {
        const int64_t pb = p_begin + (int64_t)it * BN;
        if (it + 1 < n_tiles) {
            __half *Kn = S0 + 2 * ((it + 1) & 1) * BN * LDS;
            st_attn_tc_fetch<HD, NTH, BN>(Kn, Kn + BN * LDS, Kb, Vb, pb + BN, p_end);
        }
        st_cp_async_commit();
        st_cp_async_wait<1>(); /* this tile's copies (the group before the one just closed) */
        __syncthreads();
        const __half *Ks = S0 + 2 * (it & 1) * BN * LDS, *Vs = Ks + BN * LDS;
        /* scores of this warp's 16 rows against the tile's 64 positions */
        float sc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t qls[4];
            if (QLS) st_ldsm_x4(qls, Ql + (warp * 16 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t bf[4];
                st_ldsm_x4(bf, Ks + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS + ks * 16 +
                                        ((lane >> 3) & 1) * 8);
                st_mma16816(sc[2 * np], qf[ks], bf[0], bf[1]);
                st_mma16816(sc[2 * np + 1], qf[ks], bf[2], bf[3]);
                if (SQ) {
                    const uint32_t *qlo = QLS ? qls : ql[SQ && !QLS ? ks : 0];
                    st_mma16816(sc[2 * np], qlo, bf[0], bf[1]);
                    st_mma16816(sc[2 * np + 1], qlo, bf[2], bf[3]);
                }
            }
        }
        /* causal mask (tiles past the least limit only; the zero-filled positions past p_end
         * are past every row's limit or the chunk's end), running max, probabilities (base 2) */
        if (pb + BN - 1 > lim_first || pb + BN - 1 > p_end)
            st_attn_mask<NT>(sc, pb, tq, min(lim0, p_end), min(lim1, p_end));
        float c0, c1;
        st_attn_softmax_step<NT>(sc, m0, m1, l0, l1, c0, c1);
        /* the accumulators' rescale, skipped when no row of the warp has a new maximum (the
         * usual case deep in a long context): x * 1.0f is x, so the same bits either way */
        if (!__all_sync(0xffffffffu, c0 == 1.0f && c1 == 1.0f))
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                o[dt][0] *= c0; o[dt][1] *= c0;
                o[dt][2] *= c1; o[dt][3] *= c1;
            }
        /* O += P V: P's accumulator layout is the A fragment layout, 16 positions at a time */
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[4], pl[4];
            st_attn_p_frags<SP>(sc[2 * kk], sc[2 * kk + 1], pa, pl);
#pragma unroll
            for (int dp = 0; dp < DT / 2; dp++) {
                uint32_t bf[4];
                st_ldsm_x4_t(bf, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS +
                                          dp * 16 + (lane >> 4) * 8);
                st_mma16816(o[2 * dp], pa, bf[0], bf[1]);
                st_mma16816(o[2 * dp + 1], pa, bf[2], bf[3]);
                if (SP) {
                    st_mma16816(o[2 * dp], pl, bf[0], bf[1]);
                    st_mma16816(o[2 * dp + 1], pl, bf[2], bf[3]);
                }
            }
        }
        __syncthreads(); /* this stage is refilled by the next iteration's copies */
    }
    st_cp_async_wait<0>();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int r = hr ? r1 : r0;
        if (r >= R) continue;
        const float lsum = hr ? l1 : l0;
        const int t = r / G, h = hk * G + (r - t * G);
        if (a.n_chunks == 1) { /* every live row saw position 0, so l > 0 */
            float *out = a.out + (int64_t)t * a.ldo + (int64_t)h * HD;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                out[dt * 8 + 2 * tq] = __fdiv_rn(o[dt][2 * hr], lsum);
                out[dt * 8 + 2 * tq + 1] = __fdiv_rn(o[dt][2 * hr + 1], lsum);
            }
        } else { /* a chunk wholly past this row's limit leaves m -inf, l 0, o 0 */
            float *pr = a.part + ((size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks + (size_t)c) * (HD + 2);
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                pr[dt * 8 + 2 * tq] = o[dt][2 * hr];
                pr[dt * 8 + 2 * tq + 1] = o[dt][2 * hr + 1];
            }
            if (tq == 0) {
                const float mb = hr ? m1 : m0;
                pr[HD] = mb == -INFINITY ? -INFINITY : mb * 0.6931471805599453f; /* ln 2 */
                pr[HD + 1] = lsum;
            }
        }
    }
}

/* Chunks for the tensor-core kernel: one pass when the row blocks fill ST_ATTN_TC_FULL percent
 * of the SMs, else enough chunks of at least ST_ATTN_TC_MIN_CHUNK positions for about 2 blocks
 * an SM, within ws_cap. */
#ifndef ST_ATTN_TC_FULL
#define ST_ATTN_TC_FULL 100
#endif
int st_attn_tc_chunks(int64_t blocks, int64_t np, int64_t T, const st_cuda_attn_shape *s,
                             size_t ws_cap, int sm_count, int64_t *chunk_out) {
    const bool full = blocks * 100 >= (int64_t)sm_count * ST_ATTN_TC_FULL;
    const int64_t n = full ? 1 : st_cdiv(2 * (int64_t)sm_count, blocks);
    *chunk_out = st_attn_split(n, np, ST_ATTN_TC_MIN_CHUNK, ST_ATTN_TC_BN, st_attn_part_bytes(s, T), ws_cap);
    return (int)st_cdiv(np, *chunk_out);
}

template <int HD>
static strata_status st_attn_tc_launch(const st_attn_args &a, int n_kv, st_attn_tc_prec prec, cudaStream_t s) {
    const int R = a.T * a.group;
    const dim3 grid((unsigned)((R + ST_ATTN_TC_BM - 1) / ST_ATTN_TC_BM), (unsigned)a.n_chunks, (unsigned)n_kv);
    const size_t smem = st_attn_tc_smem(HD);
    auto kern = prec == ST_ATTN_TC_SPLIT_P    ? st_k_attn_tc<HD, false, true>
                : prec == ST_ATTN_TC_SPLIT_QP ? st_k_attn_tc<HD, true, true>
                                              : st_k_attn_tc<HD, false, false>;
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    st_launch(kern, grid, 2 * ST_ATTN_TC_BM, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_attn_tc");
    return STRATA_OK;
}

/* ---- decode on the tensor cores: at most 16 rows per KV head ----------------------------------- */

static_assert(ST_ATTN_TC_BN == 64, "st_k_attn_dtc shares st_attn_tc_fetch's 64-position, 128-thread tiles");
static_assert(ST_ATTN_TC_BN % ST_ATTN_TC_BNP == 0 && ST_ATTN_TC_BNP % 16 == 0,
              "the prefill tiles divide the chunks (multiples of ST_ATTN_TC_BN) in steps of 16");

size_t st_attn_dtc_smem(int hd) { /* the stages; the warps' merge reuses them */
    return (size_t)ST_ATTN_DTC_STAGES * 2 * ST_ATTN_TC_BN * (size_t)(hd + 8) * sizeof(__half);
}

/* Flash-decoding on the tensor cores for calls of at most 16 rows per KV head (a decode step's G
 * query heads, short verify windows) over an f16 cache, head_dim 64 or 128. A block of 4 warps
 * serves one KV head and one chunk of positions; the chunk's K and V go through shared memory in
 * tiles of 64 positions by cp.async, 3 stages (two tiles in flight while the warps work on one:
 * st_k_attn_dec's loads waited on each 32-position tile, ~1 TB/s at depth 16K). Warp w takes
 * positions 16w .. 16w + 15 of every tile: its 16 rows (queries split hi + lo f16 as in
 * st_k_attn_tc, rows past T * G zero) against 16 positions with mma m16n8k16, the causal mask,
 * its own running max and sum (base 2), and P (hi + lo) times the 16 V rows. The warps' states
 * are merged in warp order in shared memory, then the block writes the normalized output (one
 * chunk) or (acc, max in natural-log units, sum) partials for st_k_attn_combine. Fixed order
 * throughout: deterministic. SPLIT false: single f16 operands (shape.tc 1). */
template <int HD, bool SPLIT>
static __global__ void __launch_bounds__(128, 2)
st_k_attn_dtc(const st_attn_args a) {
    constexpr int BN = ST_ATTN_TC_BN, LDS = HD + 8, KS = HD / 16, DT = HD / 8, NS = ST_ATTN_DTC_STAGES;
    extern __shared__ __align__(128) unsigned char st_attn_dtc_sm[];
    __half *const S0 = (__half *)st_attn_dtc_sm; /* stage s: K at S0 + 2s * BN * LDS, V after it */
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int g = lane >> 2, tq = lane & 3;
    const int c = (int)blockIdx.x, hk = (int)blockIdx.y;
    const int G = a.group, RR = a.T * G; /* live rows, <= 16 */
    const int64_t pos0 = a.pos_dev ? (int64_t)*a.pos_dev : a.pos0;
    const float qscale = a.scale * 1.4426950408889634f; /* log2(e): exp2 below */
    const __half *Kb = (const __half *)a.k + (size_t)hk * (size_t)a.n_ctx * HD;
    const __half *Vb = (const __half *)a.v + (size_t)hk * (size_t)a.n_ctx * HD;

    /* this chunk's positions [p_begin, p_end], the end clipped to the last row's limit */
    const int64_t p_begin = (int64_t)c * a.chunk;
    const int64_t p_end = min(pos0 + (RR - 1) / G, p_begin + a.chunk - 1);
    const int n_tiles = p_end >= p_begin ? (int)((p_end - p_begin) / BN + 1) : 0;
    /* Only positions pos0 on are written by the kernels this one waits for (the K/V store of
     * this step's rows; pos_dev was copied before the step): a chunk whose first NS - 1 tiles end
     * before pos0 starts their copies, and sends its later tiles' rows before pos0 towards L2,
     * before griddepcontrol.wait, overlapping the kernels before it (the q/k/v GEMV's tail,
     * RoPE and the store). The copies are the same either way: the same bits. */
    auto first_tiles = [&]() { /* tiles 0 .. NS - 2 into their stages, a commit group each */
#pragma unroll
        for (int s = 0; s < NS - 1; s++) {
            if (s < n_tiles) st_attn_tc_fetch<HD>(S0 + 2 * s * BN * LDS, S0 + (2 * s + 1) * BN * LDS, Kb, Vb,
                                                  p_begin + (int64_t)s * BN, p_end);
            st_cp_async_commit();
        }
    };
    const bool early = ST_ATTN_DTC_EARLY && p_begin + (int64_t)(NS - 1) * BN <= pos0;
    if (early) {
        first_tiles();
        /* rows p_begin + (NS - 1) BN .. min(p_end, pos0 - 1): 128-byte lines of K and V */
        const int64_t q0 = p_begin + (int64_t)(NS - 1) * BN, q1 = min(p_end, pos0 - 1);
        constexpr int LPP = HD * 2 / 128; /* lines a position */
        for (int64_t i = threadIdx.x; q0 <= q1 && i < (q1 - q0 + 1) * LPP; i += 128) {
            const size_t off = (size_t)q0 * HD + (size_t)i * 64; /* 64 halves a line */
            st_attn_prefetch_l2(Kb + off);
            st_attn_prefetch_l2(Vb + off);
        }
    }
    st_pdl_enter();
    if (!early) first_tiles();

    /* the 16 query rows as f16 A fragments (every warp the same), staged through the last stage */
    __half *const Qh = S0 + 2 * (NS - 1) * BN * LDS, *const Ql = Qh + 16 * LDS;
    st_attn_stage_q<HD, SPLIT>(a, hk, G, RR, 0, 16, qscale, Qh, Ql, LDS);
    __syncthreads();
    uint32_t qf[KS][4], ql[SPLIT ? KS : 1][4];
    st_attn_q_frags<KS, SPLIT>(qf, ql, Qh, Ql, 0, lane, LDS);
    __syncthreads(); /* the last stage is the loop's */

    const int r0 = g, r1 = g + 8; /* this lane's rows in the C fragments */
    const int64_t e0 = r0 < RR ? min(pos0 + r0 / G, p_end) : -1; /* last position each row sees */
    const int64_t e1 = r1 < RR ? min(pos0 + r1 / G, p_end) : -1;
    const int64_t e_least = min(pos0, p_end); /* no live row stops before it */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

    for (int it = 0; it < n_tiles; it++) {
        st_cp_async_wait<NS - 2>(); /* this tile's copies (groups of later tiles may be pending) */
        __syncthreads();            /* ... everyone's; and every warp is done with tile it - 1 */
        if (it + NS - 1 < n_tiles) { /* into tile it - 1's stage */
            __half *Kn = S0 + 2 * ((it + NS - 1) % NS) * BN * LDS;
            st_attn_tc_fetch<HD>(Kn, Kn + BN * LDS, Kb, Vb, p_begin + (int64_t)(it + NS - 1) * BN, p_end);
        }
        st_cp_async_commit();
        const __half *Ks = S0 + 2 * (it % NS) * BN * LDS + warp * 16 * LDS, *Vs = Ks + BN * LDS;
        const int64_t pb = p_begin + (int64_t)it * BN + warp * 16; /* this warp's 16 positions */
        /* scores: 16 rows x 16 positions (two n8 blocks) */
        float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t bf[4];
            st_ldsm_x4(bf, Ks + (((lane >> 4) << 3) + (lane & 7)) * LDS + ks * 16 + ((lane >> 3) & 1) * 8);
            st_mma16816(sc[0], qf[ks], bf[0], bf[1]);
            st_mma16816(sc[1], qf[ks], bf[2], bf[3]);
            if (SPLIT) {
                st_mma16816(sc[0], ql[ks], bf[0], bf[1]);
                st_mma16816(sc[1], ql[ks], bf[2], bf[3]);
            }
        }
        /* causal mask and the chunk's end (zero-filled positions past p_end), only where some
         * position passes a row's last; dead rows (q = 0) score 0 and are never written */
        if (pb + 15 > e_least) st_attn_mask<2>(sc, pb, tq, e0, e1);
        float c0, c1;
        st_attn_softmax_step<2>(sc, m0, m1, l0, l1, c0, c1);
        /* O = O * corr + P V: the scores' C layout is P's A fragment layout */
        uint32_t pa[4], pl[4];
        st_attn_p_frags<SPLIT>(sc[0], sc[1], pa, pl);
#pragma unroll
        for (int dp = 0; dp < DT / 2; dp++) {
            o[2 * dp][0] *= c0; o[2 * dp][1] *= c0; o[2 * dp][2] *= c1; o[2 * dp][3] *= c1;
            o[2 * dp + 1][0] *= c0; o[2 * dp + 1][1] *= c0; o[2 * dp + 1][2] *= c1; o[2 * dp + 1][3] *= c1;
            uint32_t bf[4];
            st_ldsm_x4_t(bf, Vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 + (lane >> 4) * 8);
            st_mma16816(o[2 * dp], pa, bf[0], bf[1]);
            st_mma16816(o[2 * dp + 1], pa, bf[2], bf[3]);
            if (SPLIT) {
                st_mma16816(o[2 * dp], pl, bf[0], bf[1]);
                st_mma16816(o[2 * dp + 1], pl, bf[2], bf[3]);
            }
        }
    }
    st_cp_async_wait<0>();
    __syncthreads(); /* the stages become the merge area */

    /* merge the 4 warps in order: Ms/Ls [warp][16] (base 2), Os [warp][16][HD] */
    float *const Ms = (float *)st_attn_dtc_sm, *const Ls = Ms + 4 * 16, *const Os = Ls + 4 * 16;
    if (tq == 0) {
        Ms[warp * 16 + r0] = m0; Ms[warp * 16 + r1] = m1;
        Ls[warp * 16 + r0] = l0; Ls[warp * 16 + r1] = l1;
    }
#pragma unroll
    for (int dt = 0; dt < DT; dt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            Os[(warp * 16 + r0) * HD + dt * 8 + 2 * tq + e] = o[dt][e];
            Os[(warp * 16 + r1) * HD + dt * 8 + 2 * tq + e] = o[dt][2 + e];
        }
    __syncthreads();
    for (int idx = (int)threadIdx.x; idx < RR * HD; idx += 128) {
        const int r = idx / HD, d = idx - r * HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, Ms[w * 16 + r]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY)
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float mw = Ms[w * 16 + r];
                if (mw == -INFINITY) continue; /* a warp whose positions all passed this row's */
                const float e = exp2f(mw - M);
                L = fmaf(Ls[w * 16 + r], e, L);
                O = fmaf(Os[(w * 16 + r) * HD + d], e, O);
            }
        const int t = r / G, h = hk * G + (r - t * G);
        if (a.n_chunks == 1) {
            a.out[(int64_t)t * a.ldo + (int64_t)h * HD + d] = __fdiv_rn(O, L); /* position 0 is seen */
        } else { /* a chunk wholly past this row's last position leaves M -inf, L 0, O 0 */
            float *pr = a.part + ((size_t)((int64_t)t * a.n_head + h) * (size_t)a.n_chunks + (size_t)c) * (HD + 2);
            pr[d] = O;
            if (d == 0) {
                pr[HD] = M == -INFINITY ? -INFINITY : M * 0.6931471805599453f; /* ln 2 */
                pr[HD + 1] = L;
            }
        }
    }
}

template <int HD>
static strata_status st_attn_dtc_launch(const st_attn_args &a, int n_kv, st_attn_tc_prec prec, cudaStream_t s) {
    const size_t smem = st_attn_dtc_smem(HD);
    auto kern = prec != ST_ATTN_TC_SINGLE ? st_k_attn_dtc<HD, true> : st_k_attn_dtc<HD, false>;
    if (smem > 48 * 1024)
        ST_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    st_launch(kern, dim3((unsigned)a.n_chunks, (unsigned)n_kv), 128, smem, s, a);
    ST_CUDA_CHECK_LAUNCH("st_k_attn_dtc");
    return STRATA_OK;
}

strata_status st_attn_tc_run(const st_attn_args &a, int hd, int n_kv, st_attn_tc_prec prec, cudaStream_t s) {
    return hd == 64 ? st_attn_tc_launch<64>(a, n_kv, prec, s) : st_attn_tc_launch<128>(a, n_kv, prec, s);
}

strata_status st_attn_dtc_run(const st_attn_args &a, int hd, int n_kv, st_attn_tc_prec prec, cudaStream_t s) {
    return hd == 64 ? st_attn_dtc_launch<64>(a, n_kv, prec, s) : st_attn_dtc_launch<128>(a, n_kv, prec, s);
}
