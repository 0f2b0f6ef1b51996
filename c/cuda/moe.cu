/* moe.cu - the grouped MoE step on the GPU (cuda_moe.h): the grouped expert FFN (st_cuda_moe_ffn),
 * the type queries, the routing doorbell's buffers and the CPU expert pool's doorbell kernels
 * (st_cuda_pool_*). The router kernels and their entry points (st_cuda_moe_route*,
 * st_cuda_moe_router1*, st_cuda_route_tail_skip) are moe_router.cu's; the q8_1 quantization both
 * use is moe_q8.cuh's.
 *
 * Expert FFN pipeline (all on one stream, no host round trip):
 *   1. plan     one CTA groups the T*k (token, slot) pairs by expert: pairs of one expert in
 *               ascending order, cut into groups of up to ST_MOE_MAXG (8); groups are numbered in
 *               the order of their first pair. Out-of-range ids join no group.
 *   2. quantize x to q8_1 (dp4a gate/up types) - one warp per 32-block.
 *   3. gate+up  grid (n_ff / (4 * 32 / LPR), T*k): CTA y = group, each warp 32 / LPR rows r of
 *               gate and of up of the group's expert for all the group's tokens, LPR lanes a row
 *               (32 for rows of 64+ chunks, else 16 or 8); h[pair][r] = silu(g) * u.
 *   4. quantize h to q8_1 (dp4a down types).
 *   5. down     the same grid over n_embd rows: y[pair][r] = down_e[r] . h[pair].
 *   6. combine  out[t][i] (=|+=) sum over s = 0..k-1, in that order, of wts[t][s] * y[t*k+s][i].
 * A one-token call whose x the router quantized (st_cuda_moe_router1 of moe_router.cu, args.xq)
 * has no plan (block y of the gate/up GEMV takes pair y) and runs 5-6 as one kernel
 * (st_k_moe_down1).
 * Every output element is reduced by one warp's lanes in a fixed order: runs are bit-identical.
 * Prompt batches (st_moe_mmq_wanted: many pairs per expert, tile types) take steps 1-5 on the
 * tensor cores instead (mmq.cu: a device plan of 64-pair tiles per expert, f16 tiles of the
 * weights), then the same combine.
 *
 * dp4a types (q8_1 activations): Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, and through moe.cuh's st_w_mmv
 * (the decoders of mmv.cuh / iq_decode.cuh) IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
 * IQ1_M, MXFP4. Fallback types (weights decoded to
 * f32 on the fly with dequant.cuh, f32 activations, st_k_moe_mv_f32: a warp a row, a lane a
 * chunk, no router q8_1 row, no fused down + combine): F32, F16, BF16, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * Q2_K, Q3_K, of which Q3_K, Q5_0, Q4_1, Q5_1 and IQ4_NL take the dp4a kernels too unless a
 * build sets STRATA_MOE_DP4A_EXT=0 (st_moe_gemv_q8). docs/ARCHITECTURE.md ("The decode expert path") has the
 * launch geometry. c/cuda/dev/moe_check.cu checks and times this. */
#include "mmq.cuh"
#include "mmv.cuh"
#include "moe_q8.cuh"

extern "C" {
#include "cuda_moe.h"
#include "cuda_mmq.h"
}
#include "det_expf.h"

#include <math.h>
#include <type_traits>

/* ---- q8_1 activations ------------------------------------------------------------------------ */

/* n_rows rows of n floats (row stride ld floats) -> q8_1 rows of n / 32 blocks (36 bytes each).
 * One warp per block, lane = element. d = amax / 127 rounded to fp16 first, q = round(x / d), so
 * that q * d (the value the dot sees) is as close to x as q8_1 allows; s = d * sum(q). The bodies
 * (st_moe_q8_lane, st_moe_quant_body) are moe_q8.cuh's. */
static __global__ void __launch_bounds__(256)
st_k_moe_quant_q8_1(const float *__restrict__ x, int64_t ld, int64_t n_rows, int64_t n,
                    block_q8_1 *__restrict__ q) {
    st_pdl_enter();
    st_moe_quant_body(x, ld, n_rows, n, q, blockIdx.x, gridDim.x);
}

static strata_status st_moe_quantize(const float *x, int64_t ld, int64_t n_rows, int64_t n,
                                     void *q, cudaStream_t s) {
    const int64_t n_blocks = n_rows * (n / 32);
    if (n_blocks == 0) return STRATA_OK;
    st_launch(st_k_moe_quant_q8_1, st_cuda_grid(n_blocks * 32, 256), 256, 0, s, x, ld, n_rows, n,
                                                                          (block_q8_1 *)q);
    ST_CUDA_CHECK_LAUNCH("st_k_moe_quant_q8_1");
    return STRATA_OK;
}

/* ---- plan ------------------------------------------------------------------------------------ */

/* One CTA of blockDim.x >= P threads (P <= 1024): thread p handles pair p. */
static __device__ __forceinline__ void st_moe_plan_body(const int32_t *__restrict__ ids, int P, int n_expert,
                                                        st_moe_group *groups, int *n_groups) {
    __shared__ int s_id[1024];
    __shared__ int s_lead[1024];
    const int p = threadIdx.x;
    int e = -1;
    if (p < P) {
        e = ids[p];
        if (e < 0 || e >= n_expert) e = -1;
    }
    s_id[p] = e;
    __syncthreads();
    int rank = 0, total = 0;
    if (e >= 0) {
        for (int q = 0; q < P; q++) {
            const int m = s_id[q] == e;
            rank += m & (q < p);
            total += m;
        }
    }
    const int lead = e >= 0 && rank % ST_MOE_MAXG == 0;
    s_lead[p] = lead;
    __syncthreads();
    if (e >= 0) {
        /* the leader of this pair's group: the pair of this expert with rank chunk * MAXG */
        const int want = rank - rank % ST_MOE_MAXG;
        int seen = 0, leader = p;
        for (int q = 0; q < P; q++) {
            if (s_id[q] != e) continue;
            if (seen == want) { leader = q; break; }
            seen++;
        }
        int g = 0;
        for (int q = 0; q < leader; q++) g += s_lead[q];
        groups[g].pair[rank % ST_MOE_MAXG] = p;
        if (lead) {
            groups[g].expert = e;
            const int left = total - rank;
            groups[g].n = left < ST_MOE_MAXG ? left : ST_MOE_MAXG;
        }
    }
    if (p == 0) {
        int n = 0;
        for (int q = 0; q < P; q++) n += s_lead[q];
        *n_groups = n;
    }
}

static __global__ void __launch_bounds__(1024)
st_k_moe_plan(const int32_t *__restrict__ ids, int P, int n_expert, st_moe_group *groups,
              int *n_groups) {
    st_pdl_enter();
    st_moe_plan_body(ids, P, n_expert, groups, n_groups);
}

/* The plan (block 0) and the q8_1 rows of x (the other blocks) in one launch: the two kernels'
 * bodies, so the same results. blockDim.x: P rounded up to a warp, at least 256 ... 1024. */
static __global__ void __launch_bounds__(1024)
st_k_moe_plan_quant(const int32_t *__restrict__ ids, int P, int n_expert, st_moe_group *groups, int *n_groups,
                    const float *__restrict__ x, int64_t ld, int64_t n_rows, int64_t n, block_q8_1 *__restrict__ q) {
    st_pdl_enter();
    if (blockIdx.x == 0) st_moe_plan_body(ids, P, n_expert, groups, n_groups);
    else st_moe_quant_body(x, ld, n_rows, n, q, (int64_t)blockIdx.x - 1, (int64_t)gridDim.x - 1);
}

/* ---- grouped GEMV kernels -------------------------------------------------------------------- */

/* One-token calls with counters (st_cuda_moe_args.sync) quantize h inside the gate/up kernel
 * instead of a launch of their own: off by default until measured (each gate/up block then ends
 * with a fence and an atomic, and the last of each group with the quantization: a tail that may
 * cost more than the launch saves); -DST_MOE_GU_Q8=1 turns it on at build time (A/B),
 * st_cuda_moe_set_gu_q8 at run time (the tests). */
#ifndef ST_MOE_GU_Q8
#define ST_MOE_GU_Q8 0
#endif
static int st_moe_gu_q8 = ST_MOE_GU_Q8;
extern "C" void st_cuda_moe_set_gu_q8(int on) { st_moe_gu_q8 = on != 0; }

#define ST_MOE_WARPS 4 /* warps per CTA, each serving 32 / LPR rows (st_moe_mv_lpr) */

static __device__ __forceinline__ float st_moe_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float st_moe_silu(float g) { return g / (1.0f + expf(-g)); }

/* Parameters shared by both GEMV stages. GATED: rows of gate and up, activation row of pair p is
 * p / k (its token), output h[p][r] = silu(gate . x) * (up . x). Not GATED: rows of down,
 * activation row = p, output y[p][r]. */
struct st_moe_mv_params {
    const st_cuda_expert *experts;
    const st_moe_group *groups;
    const int *n_groups;
    const void *act;      /* q8_1 rows (dp4a) or f32 rows (fallback) */
    size_t act_rb;        /* bytes per activation row */
    int act_div;          /* activation row = pair / act_div */
    int64_t n_chunks;     /* row length / 32 */
    int64_t n_rows;
    float *out;           /* [P][n_rows] */
    int max_pairs;        /* the most pairs a group can hold: min(T, ST_MOE_MAXG) */
    const int32_t *ids;   /* set for a one-token call without a plan: group y = pair y, expert
                           * ids[y] (none when outside [0, n_expert)) */
    int n_expert;
    block_q8_1 *hq;       /* GATED one-token call: also h's q8_1 rows ([pair][n_rows / 32] blocks,
                           * st_moe_quantize's bits), by the last block of each 32-row group */
    unsigned *cnt;        /* with hq: [pairs][n_rows / 32] counters, 0 before and after */
    const float *b0, *b1; /* [n_expert][n_rows] biases or NULL: GATED gate's (b0) and up's (b1),
                           * added before the activation; else down's (b0), added to y */
    int oai;              /* GATED: gpt-oss's clamped SwiGLU (st_det_swiglu_oai) */
};

/* Row r of expert e's output from its dot products (gate g and up u; down: g alone): the biases
 * and the activation as the CPU's st_moe_act, the down bias as its combine adds it (y + b). With
 * no biases and SwiGLU: silu(g) * u and g, as before them. */
template <bool GATED>
static __device__ __forceinline__ float st_moe_row_out(const st_moe_mv_params &p, int e, int64_t r, float g,
                                                       float u) {
    if (p.b0) g = __fadd_rn(g, p.b0[(size_t)e * (size_t)p.n_rows + (size_t)r]);
    if (!GATED) return g;
    if (p.b1) u = __fadd_rn(u, p.b1[(size_t)e * (size_t)p.n_rows + (size_t)r]);
    return p.oai ? st_det_swiglu_oai(g, u) : st_moe_silu(g) * u;
}

/* Block y's group: the plan's, or pair y alone (p.ids). false: no group (the block exits). */
static __device__ __forceinline__ bool st_moe_block_group(const st_moe_mv_params &p, st_moe_group &G) {
    const int y = (int)blockIdx.y;
    if (p.ids) {
        const int e = p.ids[y];
        if (e < 0 || e >= p.n_expert) return false;
        G.expert = e;
        G.n = 1;
        G.pair[0] = y;
        return true;
    }
    if (y >= *p.n_groups) return false;
    G = p.groups[y];
    return true;
}

/* Q4_K chunks through the tiles' aligned fetch (a 16-byte header and 32 bytes of nibbles, 3
 * vector loads) instead of load's ~20 16-bit loads: the same values (finish is load to the bit).
 * ST_MOE_MV_FETCH=0 at build time restores the 16-bit loads (an A/B of bench/device/device_gpu.sh). */
#ifndef ST_MOE_MV_FETCH
#define ST_MOE_MV_FETCH 1
#endif
template <class W>
static __device__ __forceinline__ void st_moe_mv_chunk(const uint8_t *row, int64_t c, st_w32 &w) {
    if constexpr (ST_MOE_MV_FETCH && std::is_same<W, st_w_q4_K>::value) {
        st_wraw raw;
        W::fetch(row, c, raw);
        W::finish(raw, c, w);
    } else {
        W::load(row, c, w);
    }
}

/* Lanes per row: a warp serves 32 / LPR rows, each lane every LPR-th chunk of its row, so short
 * rows (the down projection's 768 or 1024 weights: 24 or 32 chunks) keep every lane busy with
 * two or three chunks instead of one. The row's lanes are summed by xor shuffles below LPR
 * (LPR 32: the order of the one-row-per-warp kernel, the same bits). */
static int st_moe_mv_lpr(int64_t n_chunks) {
#ifdef ST_MOE_MV_LPR
    return ST_MOE_MV_LPR;
#else
    return n_chunks >= 64 ? 32 : n_chunks >= 32 ? 16 : 8;
#endif
}

#ifndef ST_MOE_MV_L2PF
#define ST_MOE_MV_L2PF 1 /* 0 at build time: no L2 prefetch of the weight rows (A/B) */
#endif
static __device__ __forceinline__ void st_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Activation rows in shared memory (SM): the block first copies its group's q8_1 rows with
 * coalesced 4-byte loads, then each lane reads its chunk's 9 words from there. Read from global
 * memory instead, a warp's load of 32 lanes' 36-byte blocks spans 9 cache lines per instruction
 * (81 L1 wavefronts a chunk), which made the gate/up GEMV L1-bound (15.5 us for 14 MB of qwen3
 * weights, ncu). The values and the order of the sums are the same either way: the same bits.
 * NG: the most pairs a group can hold for this launch (1 for a one-token call, whose k experts
 * are distinct; else ST_MOE_MAXG), which sizes the accumulators and the copy. */
template <class W, bool GATED, int LPR, int NG, bool SM>
static __global__ void __launch_bounds__(32 * ST_MOE_WARPS) st_k_moe_mv_q8(const st_moe_mv_params p) {
    extern __shared__ uint32_t s_act[]; /* SM: NG rows of n_chunks * 9 words */
    st_pdl_enter();
    constexpr int RPW = 32 / LPR;
    st_moe_group G;
    if (!st_moe_block_group(p, G)) return; /* uniform per block */
    st_w_stage<W>(); /* the staged codebooks (STRATA_IQ_STAGE_TABLES), before any decode */
    const int gn = G.n < NG ? G.n : NG;
    const int rw = (int)p.n_chunks * 9; /* words per activation row */
    const int64_t r_warp = ((int64_t)blockIdx.x * ST_MOE_WARPS + threadIdx.x / 32) * RPW;
    const st_cuda_expert *E = p.experts + G.expert;
    const st_cuda_mat *M0 = GATED ? &E->gate : &E->down;
    if (SM) {
        /* the warp's weight rows on their way into L2 while the block copies the activations
         * (the loads below wait behind the barrier; the copy is a round trip of its own) */
        if (ST_MOE_MV_L2PF && r_warp < p.n_rows) {
            const int64_t nr = p.n_rows - r_warp < RPW ? p.n_rows - r_warp : RPW;
            const int64_t lines = (nr * (int64_t)M0->row_bytes + 127) / 128;
            const uint8_t *b0 = (const uint8_t *)M0->data + r_warp * M0->row_bytes;
            const uint8_t *b1 = GATED ? (const uint8_t *)E->up.data + r_warp * E->up.row_bytes : nullptr;
            for (int64_t i = threadIdx.x & 31; i < lines; i += 32) {
                st_prefetch_l2(b0 + 128 * i);
                if (GATED) st_prefetch_l2(b1 + 128 * i);
            }
        }
        for (int j = 0; j < gn; j++) {
            const uint32_t *src = (const uint32_t *)((const uint8_t *)p.act + (size_t)(G.pair[j] / p.act_div) * p.act_rb);
            for (int i = (int)threadIdx.x; i < rw; i += 32 * ST_MOE_WARPS) s_act[j * rw + i] = __ldg(src + i);
        }
        __syncthreads();
    }
    if (r_warp >= p.n_rows) return; /* uniform per warp */
    const int lane = threadIdx.x & 31, cl = lane % LPR;
    const int64_t r_lane = r_warp + lane / LPR;
    const bool live = r_lane < p.n_rows;
    const int64_t r = live ? r_lane : p.n_rows - 1; /* a spare lane reads a real row, writes nothing */
    const uint8_t *w0 = (const uint8_t *)M0->data + r * M0->row_bytes;
    const uint8_t *w1 = GATED ? (const uint8_t *)E->up.data + r * E->up.row_bytes : nullptr;
    const uint8_t *arow[NG];
    float acc0[NG], acc1[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        acc0[j] = acc1[j] = 0.0f;
        const int pr = j < G.n ? G.pair[j] : G.pair[0];
        arow[j] = SM ? nullptr : (const uint8_t *)p.act + (size_t)(pr / p.act_div) * p.act_rb;
    }
#pragma unroll 2
    for (int64_t c = cl; c < p.n_chunks; c += LPR) {
        st_w32 a0, a1;
        st_moe_mv_chunk<W>(w0, c, a0);
        if (GATED) st_moe_mv_chunk<W>(w1, c, a1);
#pragma unroll
        for (int j = 0; j < NG; j++) {
            if (j < G.n) {
                float da;
                int a[8];
                if (SM) {
                    const uint32_t *as = s_act + j * rw + (int)c * 9;
                    da = st_dev_fp16(as[0] & 0xFFFFu);
#pragma unroll
                    for (int i = 0; i < 8; i++) a[i] = (int)as[1 + i];
                } else {
                    const uint8_t *ab = arow[j] + c * (int64_t)sizeof(block_q8_1);
                    da = st_dev_fp16(st_ld_u16(ab));
                    const int *aq = (const int *)(ab + 4);
#pragma unroll
                    for (int i = 0; i < 8; i++) a[i] = __ldg(aq + i);
                }
                acc0[j] += da * st_w32_dot<W>(a0, a);
                if (GATED) acc1[j] += da * st_w32_dot<W>(a1, a);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NG; j++) {
        if (j < G.n) {
            float g = acc0[j], u = GATED ? acc1[j] : 0.0f;
#pragma unroll
            for (int o = LPR / 2; o > 0; o >>= 1) {
                g += __shfl_xor_sync(0xffffffffu, g, o);
                if (GATED) u += __shfl_xor_sync(0xffffffffu, u, o);
            }
            if (cl == 0 && live) p.out[(size_t)G.pair[j] * p.n_rows + r] = st_moe_row_out<GATED>(p, G.expert, r, g, u);
        }
    }
    /* One-token call with hq: the 32 / RB blocks of a 32-row group count themselves in; the last
     * quantizes the group's 32 values of h (read back through L2) into its q8_1 block, which
     * takes the quantize launch's place (a block holds RB = 4..16 rows, and n_rows is a multiple
     * of 32: every warp of the grid reaches this point). */
    if (GATED && p.hq) { /* G.n == 1: a one-token call */
        constexpr int RB = ST_MOE_WARPS * RPW;
        static_assert(32 % RB == 0, "rows a block divide a q8_1 block");
        const int grp = (int)(((int64_t)blockIdx.x * RB) / 32), nb = (int)(p.n_rows / 32);
        if (st_last_block(p.cnt + (size_t)blockIdx.y * nb + grp, 32 / RB) && threadIdx.x < 32) {
            const float v = __ldcg(p.out + (size_t)G.pair[0] * p.n_rows + (size_t)grp * 32 + threadIdx.x);
            uint32_t ds;
            const int qi = st_moe_q8_lane(v, &ds);
            block_q8_1 *blk = p.hq + (size_t)G.pair[0] * nb + grp;
            blk->qs[threadIdx.x] = (int8_t)qi;
            if (threadIdx.x == 0) *(uint32_t *)blk = ds;
        }
    }
}

/* One token's down projection and combine in one launch (p.ids set, k <= ST_MOE_DOWN1_MAXK):
 * block b computes rows b * RB .. b * RB + RB - 1 of every slot's expert, warp s slot s (its
 * activation row copied into shared memory by the warp; RG groups of 32 / LPR rows, each row's
 * dot as st_k_moe_mv_q8 computes it for a one-pair group: the same bits), then one thread a row
 * adds the k rows in slot order as st_k_moe_combine does. Dynamic shared memory: k activation
 * rows of n_chunks * 9 words, then k * RB floats. (Each warp quantizing its own row of h instead
 * of the quantize launch measured 6% slower: docs/PERFORMANCE.md.) */
#define ST_MOE_DOWN1_MAXK 16
template <class W, int LPR, int RG>
static __global__ void __launch_bounds__(32 * ST_MOE_DOWN1_MAXK)
st_k_moe_down1(const st_moe_mv_params p, const float *__restrict__ wts, int k, int accumulate,
               float *__restrict__ out) {
    extern __shared__ uint32_t s_act[];
    constexpr int RPW = 32 / LPR, RB = RPW * RG;
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31), cl = lane % LPR;
    const int rw = (int)p.n_chunks * 9;
    const int64_t r0 = (int64_t)blockIdx.x * RB;
    float *ys = (float *)(s_act + (size_t)k * rw); /* [k][RB] */
    st_w_stage<W>(); /* the staged codebooks (constant tables: before the wait) */
    /* The routing and the expert table were written two kernels back (the router, or copies
     * before the gate/up kernel): this kernel starts only after the quantization before it
     * passed its own wait, which follows the gate/up kernel's completion, which followed
     * theirs. So the warp's weight rows start into L2 before griddepcontrol.wait, overlapping
     * the quantization of the SwiGLU rows. */
    const int e = p.ids[warp];
    const bool live_e = e >= 0 && e < p.n_expert; /* uniform per warp */
    const st_cuda_mat *M = live_e ? &p.experts[e].down : nullptr;
    if (ST_MOE_MV_L2PF && live_e) {
        const int64_t nr = p.n_rows - r0 < RB ? p.n_rows - r0 : RB;
        const int64_t lines = (nr * (int64_t)M->row_bytes + 127) / 128;
        const uint8_t *b0 = (const uint8_t *)M->data + r0 * M->row_bytes;
        for (int64_t i = lane; i < lines; i += 32) st_prefetch_l2(b0 + 128 * i);
    }
    st_pdl_enter();
    if (live_e) {
        uint32_t *sa = s_act + (size_t)warp * rw; /* the pair's q8_1 row, copied by the warp */
        const uint32_t *src = (const uint32_t *)((const uint8_t *)p.act + (size_t)warp * p.act_rb);
        for (int i = lane; i < rw; i += 32) sa[i] = __ldg(src + i);
        __syncwarp();
#pragma unroll
        for (int g = 0; g < RG; g++) {
            const int64_t r_lane = r0 + g * RPW + lane / LPR;
            const bool live = r_lane < p.n_rows;
            const uint8_t *w0 = (const uint8_t *)M->data + (live ? r_lane : p.n_rows - 1) * M->row_bytes;
            float acc = 0.0f;
#pragma unroll 2
            for (int64_t c = cl; c < p.n_chunks; c += LPR) {
                st_w32 a0;
                st_moe_mv_chunk<W>(w0, c, a0);
                const uint32_t *as = sa + (int)c * 9;
                const float da = st_dev_fp16(as[0] & 0xFFFFu);
                int a[8];
#pragma unroll
                for (int i = 0; i < 8; i++) a[i] = (int)as[1 + i];
                acc += da * st_w32_dot<W>(a0, a);
            }
#pragma unroll
            for (int o = LPR / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (cl == 0) ys[warp * RB + g * RPW + lane / LPR] = live ? st_moe_row_out<false>(p, e, r_lane, acc, 0.0f) : acc;
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < RB && r0 + (int)threadIdx.x < p.n_rows) {
        const int64_t r = r0 + threadIdx.x;
        float o = 0.0f;
        for (int s = 0; s < k; s++) {
            const int es = p.ids[s];
            if (es < 0 || es >= p.n_expert) continue;
            /* separate multiply and add, as st_k_moe_combine */
            o = __fadd_rn(o, __fmul_rn(wts[s], ys[s * RB + threadIdx.x]));
        }
        out[r] = accumulate ? __fadd_rn(out[r], o) : o;
    }
}

/* The f32 fallback: a warp a row, lane l chunks l, l + 32, ... of it decoded to floats and
 * multiplied with the group's f32 activation rows. SM (one-token calls, STRATA_MOE_F32_SMEM):
 * the block first copies the pair's activation row into shared memory, chunk c's 32 floats at
 * 33 c (the lanes' chunks then fall in different banks), and the lanes read it there instead of
 * 32 loads a chunk that each touch 32 cache lines; NG (1 for one-token calls with SM, else
 * ST_MOE_MAXG) sizes the accumulators. The values and the order of every sum are the same
 * either way: the same bits. */
template <class D, bool GATED, int NG, bool SM>
static __global__ void __launch_bounds__(32 * ST_MOE_WARPS) st_k_moe_mv_f32(const st_moe_mv_params p) {
    extern __shared__ float s_xf[]; /* SM: n_chunks * 33 floats */
    st_pdl_enter();
    st_moe_group G;
    if (!st_moe_block_group(p, G)) return;
    if (SM) {
        const float *src = (const float *)((const uint8_t *)p.act + (size_t)(G.pair[0] / p.act_div) * p.act_rb);
        const int n = (int)p.n_chunks * 32;
        for (int i = (int)threadIdx.x; i < n; i += 32 * ST_MOE_WARPS) s_xf[(i >> 5) * 33 + (i & 31)] = __ldg(src + i);
        __syncthreads();
    }
    const int64_t r = (int64_t)blockIdx.x * ST_MOE_WARPS + threadIdx.x / 32;
    if (r >= p.n_rows) return;
    const int lane = threadIdx.x & 31;
    const st_cuda_expert *E = p.experts + G.expert;
    const st_cuda_mat *M0 = GATED ? &E->gate : &E->down;
    const uint8_t *w0 = (const uint8_t *)M0->data + r * M0->row_bytes;
    const uint8_t *w1 = GATED ? (const uint8_t *)E->up.data + r * E->up.row_bytes : nullptr;
    const float *arow[NG];
    float acc0[NG], acc1[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        acc0[j] = acc1[j] = 0.0f;
        const int pr = j < G.n ? G.pair[j] : G.pair[0];
        arow[j] = (const float *)((const uint8_t *)p.act + (size_t)(pr / p.act_div) * p.act_rb);
    }
    for (int64_t c = lane; c < p.n_chunks; c += 32) {
        float v0[32], v1[32];
        st_fb_chunk<D>(w0, c, v0);
        if (GATED) st_fb_chunk<D>(w1, c, v1);
#pragma unroll
        for (int j = 0; j < NG; j++) {
            if (j < G.n) {
                const float *xa = arow[j] + 32 * c;
                const float *xs = s_xf + 33 * c;
                float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
                for (int i = 0; i < 32; i++) {
                    const float xv = SM ? xs[i] : __ldg(xa + i);
                    s0 += v0[i] * xv;
                    if (GATED) s1 += v1[i] * xv;
                }
                acc0[j] += s0;
                if (GATED) acc1[j] += s1;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NG; j++) {
        if (j < G.n) {
            const float g = st_moe_warp_sum(acc0[j]);
            const float u = GATED ? st_moe_warp_sum(acc1[j]) : 0.0f;
            if (lane == 0) p.out[(size_t)G.pair[j] * p.n_rows + r] = st_moe_row_out<GATED>(p, G.expert, r, g, u);
        }
    }
}

/* ---- combine --------------------------------------------------------------------------------- */

static __global__ void __launch_bounds__(256)
st_k_moe_combine(const float *__restrict__ y, const int32_t *__restrict__ ids,
                 const float *__restrict__ wts, int64_t T, int k, int n_expert, int64_t n,
                 int accumulate, float *__restrict__ out) {
    st_pdl_enter();
    const int64_t total = T * n, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t t = i / n, col = i - t * n;
        float o = 0.0f;
        for (int s = 0; s < k; s++) {
            const int64_t pr = t * k + s;
            const int e = ids[pr];
            if (e < 0 || e >= n_expert) continue;
            /* separate multiply and add, as the CPU's combine (no FMA contraction) */
            o = __fadd_rn(o, __fmul_rn(wts[pr], y[pr * n + col]));
        }
        out[i] = accumulate ? __fadd_rn(out[i], o) : o;
    }
}

/* ---- dispatch -------------------------------------------------------------------------------- */

extern "C" int st_cuda_moe_type_dp4a(strata_type type) {
    switch (type) {
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q8_0: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K: case STRATA_TYPE_IQ4_XS: case STRATA_TYPE_IQ3_XXS: case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ2_XXS: case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S: case STRATA_TYPE_IQ1_S:
    case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

/* STRATA_MOE_DP4A_EXT (default 1; -DSTRATA_MOE_DP4A_EXT=0 in NVCC_EXTRA for the old form, an
 * A/B of bench/device): Q3_K, Q5_0, Q4_1, Q5_1 and IQ4_NL experts take the q8_1 / dp4a GEMVs
 * (st_k_moe_mv_q8, st_k_moe_down1) through mmv.cuh's decoders (moe.cuh's st_w_mmv, which the
 * dense decode GEMV already reads them with) instead of st_k_moe_mv_f32; a one-token call then
 * also takes the router's q8_1 row and the fused down + combine. 0: the f32 fallback and its
 * bits. The prompt tiles (mmq.cu) are the same either way. */
#ifndef STRATA_MOE_DP4A_EXT
#define STRATA_MOE_DP4A_EXT 1
#endif

/* Whether the grouped GEMVs read q8_1 activations for this type (st_cuda_moe_type_dp4a's
 * types, and STRATA_MOE_DP4A_EXT's). */
static int st_moe_gemv_q8(strata_type type) {
    if (st_cuda_moe_type_dp4a(type)) return 1;
    if (!STRATA_MOE_DP4A_EXT) return 0;
    switch (type) {
    case STRATA_TYPE_Q3_K: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_1:
    case STRATA_TYPE_IQ4_NL:
        return 1;
    default:
        return 0;
    }
}

extern "C" int st_cuda_moe_type_gemv_q8(strata_type type) { return st_moe_gemv_q8(type); }

extern "C" int st_cuda_moe_supports(strata_type type) {
    if (st_cuda_moe_type_dp4a(type)) return 1;
    switch (type) {
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16: case STRATA_TYPE_Q4_1:
    case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q5_1: case STRATA_TYPE_IQ4_NL: case STRATA_TYPE_Q2_K:
    case STRATA_TYPE_Q3_K:
        return 1;
    default:
        return 0;
    }
}

#ifndef ST_MOE_MV_SMEM
#define ST_MOE_MV_SMEM 1 /* 0 at build time: activation rows read from global memory (A/B) */
#endif
/* Dynamic shared memory a launch may take without the opt-in: 48 KB less the staged codebooks. */
template <class W>
static size_t st_moe_smem_cap() {
    return 48 * 1024 - (st_w_staged<W>::value ? ST_IQ_STAGE_BYTES : 0);
}

/* STRATA_IQ_STAGE_TABLES: the IQ3 codebooks and the sign masks read from shared memory copies
 * (st_iq_tab_smem) by the grouped kernels; the same bits either way. */
static int st_moe_iq_stage = 0;
extern "C" void st_cuda_moe_set_iq_stage(int on) { st_moe_iq_stage = on != 0; }
extern "C" int st_cuda_iq_stage_default(int cc_major, int cc_minor) { return cc_major == 6 && cc_minor == 0; }

template <class W, bool GATED, int NG, bool SM>
static void st_moe_launch_lpr(int lpr, dim3 grid, size_t smem, const st_moe_mv_params &p, cudaStream_t s) {
    if (lpr == 32) st_launch(st_k_moe_mv_q8<W, GATED, 32, NG, SM>, grid, 32 * ST_MOE_WARPS, smem, s, p);
    else if (lpr == 16) st_launch(st_k_moe_mv_q8<W, GATED, 16, NG, SM>, grid, 32 * ST_MOE_WARPS, smem, s, p);
    else st_launch(st_k_moe_mv_q8<W, GATED, 8, NG, SM>, grid, 32 * ST_MOE_WARPS, smem, s, p);
}

template <class W, bool GATED>
static strata_status st_moe_launch_q8(const st_moe_mv_params &p, unsigned gy, cudaStream_t s) {
    const int lpr = st_moe_mv_lpr(p.n_chunks);
    const int64_t rows_per_block = (int64_t)ST_MOE_WARPS * (32 / lpr);
    const dim3 grid((unsigned)((p.n_rows + rows_per_block - 1) / rows_per_block), gy);
    /* one pair a group for a one-token call; the activation rows in shared memory when they fit */
    const bool one = p.max_pairs == 1;
    const size_t smem = (size_t)(one ? 1 : ST_MOE_MAXG) * (size_t)p.n_chunks * sizeof(block_q8_1);
    const bool sm = ST_MOE_MV_SMEM && smem <= st_moe_smem_cap<W>();
    if (one && sm) st_moe_launch_lpr<W, GATED, 1, true>(lpr, grid, smem, p, s);
    else if (sm) st_moe_launch_lpr<W, GATED, ST_MOE_MAXG, true>(lpr, grid, smem, p, s);
    else st_moe_launch_lpr<W, GATED, ST_MOE_MAXG, false>(lpr, grid, 0, p, s);
    ST_CUDA_CHECK_LAUNCH(GATED ? "st_k_moe_mv_q8 (gate/up)" : "st_k_moe_mv_q8 (down)");
    return STRATA_OK;
}

/* STRATA_MOE_F32_SMEM (default 1; 0 for the old form, an A/B of bench/device and moe_check):
 * one-token calls of the f32 fallback read their activation row from shared memory
 * (st_k_moe_mv_f32's SM; the same bits). */
#ifndef STRATA_MOE_F32_SMEM
#define STRATA_MOE_F32_SMEM 1
#endif

template <class D, bool GATED>
static strata_status st_moe_launch_f32(const st_moe_mv_params &p, unsigned gy, cudaStream_t s) {
    const dim3 grid((unsigned)((p.n_rows + ST_MOE_WARPS - 1) / ST_MOE_WARPS), gy);
    const size_t smem = (size_t)p.n_chunks * 33 * sizeof(float);
    bool sm = false;
    if constexpr (STRATA_MOE_F32_SMEM) {
        sm = p.max_pairs == 1 && smem <= 48 * 1024;
        if (sm) st_launch(st_k_moe_mv_f32<D, GATED, 1, true>, grid, 32 * ST_MOE_WARPS, smem, s, p);
    }
    if (!sm) st_launch(st_k_moe_mv_f32<D, GATED, ST_MOE_MAXG, false>, grid, 32 * ST_MOE_WARPS, 0, s, p);
    ST_CUDA_CHECK_LAUNCH(GATED ? "st_k_moe_mv_f32 (gate/up)" : "st_k_moe_mv_f32 (down)");
    return STRATA_OK;
}

/* The one dispatch point over weight types (both stages). */
template <bool GATED>
static strata_status st_moe_mv(strata_type type, const st_moe_mv_params &p, unsigned gy,
                               cudaStream_t s) {
    switch (type) {
    case STRATA_TYPE_Q4_0: return st_moe_launch_q8<st_w_q4_0, GATED>(p, gy, s);
    case STRATA_TYPE_Q8_0: return st_moe_launch_q8<st_w_q8_0, GATED>(p, gy, s);
    case STRATA_TYPE_Q4_K: return st_moe_launch_q8<st_w_q4_K, GATED>(p, gy, s);
    case STRATA_TYPE_Q5_K: return st_moe_launch_q8<st_w_q5_K, GATED>(p, gy, s);
    case STRATA_TYPE_Q6_K: return st_moe_launch_q8<st_w_q6_K, GATED>(p, gy, s);
    case STRATA_TYPE_IQ4_XS: return st_moe_launch_q8<st_w_mmv<st_mmv_iq4_xs>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ3_XXS:
        return st_moe_iq_stage ? st_moe_launch_q8<st_w_mmv<st_iq3_xxs_dec<st_iq_tab_smem>>, GATED>(p, gy, s)
                               : st_moe_launch_q8<st_w_mmv<st_mmv_iq3_xxs>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ3_S:
        return st_moe_iq_stage ? st_moe_launch_q8<st_w_mmv<st_iq3_s_dec<st_iq_tab_smem>>, GATED>(p, gy, s)
                               : st_moe_launch_q8<st_w_mmv<st_mmv_iq3_s>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ2_XXS: return st_moe_launch_q8<st_w_mmv<st_mmv_iq2_xxs>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ2_XS: return st_moe_launch_q8<st_w_mmv<st_mmv_iq2_xs>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ2_S: return st_moe_launch_q8<st_w_mmv<st_mmv_iq2_s>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ1_S: return st_moe_launch_q8<st_w_mmv<st_mmv_iq1_s>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ1_M: return st_moe_launch_q8<st_w_mmv<st_mmv_iq1_m>, GATED>(p, gy, s);
    case STRATA_TYPE_MXFP4: return st_moe_launch_q8<st_w_mmv<st_mmv_mxfp4>, GATED>(p, gy, s);
    case STRATA_TYPE_F32: return st_moe_launch_f32<st_fb_plain<st_dq_f32>, GATED>(p, gy, s);
    case STRATA_TYPE_F16: return st_moe_launch_f32<st_fb_plain<st_dq_f16>, GATED>(p, gy, s);
    case STRATA_TYPE_BF16: return st_moe_launch_f32<st_fb_plain<st_dq_bf16>, GATED>(p, gy, s);
#if STRATA_MOE_DP4A_EXT
    case STRATA_TYPE_Q4_1: return st_moe_launch_q8<st_w_mmv<st_mmv_q4_1>, GATED>(p, gy, s);
    case STRATA_TYPE_Q5_0: return st_moe_launch_q8<st_w_mmv<st_mmv_q5_0>, GATED>(p, gy, s);
    case STRATA_TYPE_Q5_1: return st_moe_launch_q8<st_w_mmv<st_mmv_q5_1>, GATED>(p, gy, s);
    case STRATA_TYPE_IQ4_NL: return st_moe_launch_q8<st_w_mmv<st_mmv_iq4_nl>, GATED>(p, gy, s);
    case STRATA_TYPE_Q3_K: return st_moe_launch_q8<st_w_mmv<st_mmv_q3_K>, GATED>(p, gy, s);
#else
    case STRATA_TYPE_Q4_1: return st_moe_launch_f32<st_dq_q4_1, GATED>(p, gy, s);
    case STRATA_TYPE_Q5_0: return st_moe_launch_f32<st_dq_q5_0, GATED>(p, gy, s);
    case STRATA_TYPE_Q5_1: return st_moe_launch_f32<st_dq_q5_1, GATED>(p, gy, s);
    case STRATA_TYPE_IQ4_NL: return st_moe_launch_f32<st_dq_iq4_nl, GATED>(p, gy, s);
    case STRATA_TYPE_Q3_K: return st_moe_launch_f32<st_dq_q3_K, GATED>(p, gy, s);
#endif
    case STRATA_TYPE_Q2_K: return st_moe_launch_f32<st_dq_q2_K, GATED>(p, gy, s);
    default:
        return st_error(STRATA_ERR_UNSUPPORTED, "st_cuda_moe_ffn: type %s (%d) has no expert kernel",
                        strata_type_name(type), (int)type);
    }
}

/* st_k_moe_down1's shared memory for k pairs and rows of n_chunks chunks: k q8_1 rows and k x RB
 * results (RB <= 8); 0 when it would pass 48 KB (the caller takes the down kernel and the
 * combine instead). */
static size_t st_moe_down1_smem(int k, int64_t n_chunks, size_t cap) {
    const size_t smem = (size_t)k * ((size_t)n_chunks * sizeof(block_q8_1) + 8 * sizeof(float));
    return smem <= cap ? smem : 0;
}

/* st_k_moe_down1's launch: RG row groups a warp (2, 1 for rows of 32 lanes). */
template <class W, int LPR>
static bool st_moe_launch_down1_lpr(const st_moe_mv_params &p, const float *wts, int k, int accumulate,
                                    float *out, cudaStream_t s) {
    constexpr int RG = LPR == 32 ? 1 : 2, RB = (32 / LPR) * RG;
    const size_t smem = st_moe_down1_smem(k, p.n_chunks, st_moe_smem_cap<W>());
    if (!smem) return false;
    const unsigned grid = (unsigned)((p.n_rows + RB - 1) / RB);
    st_launch(st_k_moe_down1<W, LPR, RG>, grid, 32 * k, smem, s, p, wts, k, accumulate, out);
    return true;
}

template <class W>
static bool st_moe_launch_down1(const st_moe_mv_params &p, const float *wts, int k, int accumulate, float *out,
                                cudaStream_t s) {
    const int lpr = st_moe_mv_lpr(p.n_chunks);
    if (lpr == 32) return st_moe_launch_down1_lpr<W, 32>(p, wts, k, accumulate, out, s);
    if (lpr == 16) return st_moe_launch_down1_lpr<W, 16>(p, wts, k, accumulate, out, s);
    return st_moe_launch_down1_lpr<W, 8>(p, wts, k, accumulate, out, s);
}

/* The dispatch of st_k_moe_down1 over the dp4a types; false: not launched. */
static bool st_moe_down1(strata_type type, const st_moe_mv_params &p, const float *wts, int k, int accumulate,
                         float *out, cudaStream_t s) {
    switch (type) {
    case STRATA_TYPE_Q4_0: return st_moe_launch_down1<st_w_q4_0>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q8_0: return st_moe_launch_down1<st_w_q8_0>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q4_K: return st_moe_launch_down1<st_w_q4_K>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q5_K: return st_moe_launch_down1<st_w_q5_K>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q6_K: return st_moe_launch_down1<st_w_q6_K>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ4_XS: return st_moe_launch_down1<st_w_mmv<st_mmv_iq4_xs>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ3_XXS:
        return st_moe_iq_stage ? st_moe_launch_down1<st_w_mmv<st_iq3_xxs_dec<st_iq_tab_smem>>>(p, wts, k, accumulate, out, s)
                               : st_moe_launch_down1<st_w_mmv<st_mmv_iq3_xxs>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ3_S:
        return st_moe_iq_stage ? st_moe_launch_down1<st_w_mmv<st_iq3_s_dec<st_iq_tab_smem>>>(p, wts, k, accumulate, out, s)
                               : st_moe_launch_down1<st_w_mmv<st_mmv_iq3_s>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ2_XXS: return st_moe_launch_down1<st_w_mmv<st_mmv_iq2_xxs>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ2_XS: return st_moe_launch_down1<st_w_mmv<st_mmv_iq2_xs>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ2_S: return st_moe_launch_down1<st_w_mmv<st_mmv_iq2_s>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ1_S: return st_moe_launch_down1<st_w_mmv<st_mmv_iq1_s>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ1_M: return st_moe_launch_down1<st_w_mmv<st_mmv_iq1_m>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_MXFP4: return st_moe_launch_down1<st_w_mmv<st_mmv_mxfp4>>(p, wts, k, accumulate, out, s);
#if STRATA_MOE_DP4A_EXT
    case STRATA_TYPE_Q4_1: return st_moe_launch_down1<st_w_mmv<st_mmv_q4_1>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q5_0: return st_moe_launch_down1<st_w_mmv<st_mmv_q5_0>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q5_1: return st_moe_launch_down1<st_w_mmv<st_mmv_q5_1>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_IQ4_NL: return st_moe_launch_down1<st_w_mmv<st_mmv_iq4_nl>>(p, wts, k, accumulate, out, s);
    case STRATA_TYPE_Q3_K: return st_moe_launch_down1<st_w_mmv<st_mmv_q3_K>>(p, wts, k, accumulate, out, s);
#endif
    default: return false;
    }
}

/* ---- doorbell -------------------------------------------------------------------------------- */

extern "C" strata_status st_cuda_doorbell_alloc(st_cuda_doorbell *db, int64_t max_tokens, int32_t k) {
    if (!db) return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_doorbell_alloc: NULL db");
    memset(db, 0, sizeof *db);
    if (max_tokens < 1 || k < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_doorbell_alloc: max_tokens %lld, k %d",
                        (long long)max_tokens, (int)k);
    const size_t n = (size_t)max_tokens * (size_t)k;
    void *h = NULL, *d = NULL;
    ST_TRY(st_cuda_host_alloc_mapped(&h, &d, n * (sizeof(int32_t) + sizeof(float))));
    db->h_ids = (int32_t *)h;
    db->h_wts = (float *)((int32_t *)h + n);
    db->d_ids = (int32_t *)d;
    db->d_wts = (float *)((int32_t *)d + n);
    db->max_tokens = max_tokens;
    db->k = k;
    return STRATA_OK;
}

extern "C" strata_status st_cuda_doorbell_free(st_cuda_doorbell *db) {
    if (!db || !db->h_ids) return STRATA_OK;
    void *h = db->h_ids;
    memset(db, 0, sizeof *db);
    return st_cuda_host_free(h);
}

/* ---- the CPU expert pool's doorbell (c/experts/pool.h) ----------------------------------------- */

/* System-scope release store / acquire load of a 32-bit word (host-mapped memory shared with
 * CPU threads, which use C11 release / acquire on the same words). */
static __device__ __forceinline__ void st_st_release_sys(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ uint32_t st_ld_acquire_sys(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* One block: the T rows and their routing into the mapped request arrays, every thread's writes
 * made visible system-wide, then T and the step number (the pool acquires req, then reads).
 * With where (the layer's residency, nonzero: in a GPU slot): the pool gets -1 for the resident
 * experts, ids_gpu (device) the resident ones and -1 for the rest, hist a copy of the ids. With
 * zc_of_m too ([T k + 1]: how many of M distinct missed experts the GPU reads from host memory
 * itself): the first zc_of_m[M] distinct missed experts in slot order go to the GPU as well
 * (ids_gpu), their hist entries marked ST_POOL_ZC_FLAG. */
static __global__ void __launch_bounds__(256)
st_k_pool_publish(const float *__restrict__ x, const int32_t *__restrict__ ids, const float *__restrict__ wts,
                  int T, int64_t n_embd, int k, float *m_x, int32_t *m_ids, float *m_wts, int32_t *m_T,
                  uint32_t *m_req, const uint32_t *__restrict__ d_step, const int32_t *__restrict__ where,
                  int n_expert, int32_t *__restrict__ ids_gpu, int32_t *__restrict__ hist,
                  const int32_t *__restrict__ zc_of_m) {
    st_pdl_enter();
    __shared__ int32_t zc[ST_POOL_ZC_MAX];
    __shared__ int n_zc;
    if (threadIdx.x == 0) { /* the distinct missed experts in slot order; the first J of them */
        int m = 0, nz = 0;
        if (where && zc_of_m) {
            int32_t seen[ST_POOL_ZC_MAX];
            for (int i = 0; i < T * k; i++) {
                const int32_t e = ids[i];
                if (e < 0 || e >= n_expert || where[e] != 0) continue;
                bool dup = false;
                for (int j = 0; j < m && j < ST_POOL_ZC_MAX && !dup; j++) dup = seen[j] == e;
                if (dup) continue;
                if (m < ST_POOL_ZC_MAX) seen[m] = e;
                m++;
            }
            nz = zc_of_m[m < T * k ? m : T * k]; /* (m counts a repeat past the list as new) */
            nz = nz < m ? nz : m;
            nz = nz < ST_POOL_ZC_MAX ? nz : ST_POOL_ZC_MAX;
            for (int j = 0; j < nz; j++) zc[j] = seen[j];
        }
        n_zc = nz;
    }
    __syncthreads();
    const int64_t nx = (int64_t)T * n_embd;
    for (int64_t i = threadIdx.x; i < nx; i += blockDim.x) m_x[i] = x[i];
    for (int i = (int)threadIdx.x; i < T * k; i += (int)blockDim.x) {
        const int32_t e = ids[i];
        bool z = false;
        for (int j = 0; j < n_zc && !z; j++) z = zc[j] == e;
        const bool gpu = z || (where && e >= 0 && e < n_expert && where[e] != 0);
        m_ids[i] = gpu ? -1 : e;
        m_wts[i] = wts[i];
        if (ids_gpu) ids_gpu[i] = gpu ? e : -1;
        if (hist) hist[i] = z ? (e | ST_POOL_ZC_FLAG) : e;
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        *(volatile int32_t *)m_T = T;
        __threadfence_system();
        st_st_release_sys(m_req, *d_step);
    }
}

/* ~10 s at the H200's clocks: a pool that never answers flags an error instead of hanging */
#define ST_POOL_TIMEOUT_CYCLES 20000000000LL

/* One block: thread 0 waits for the pool's done word to reach the step (or the timeout, which
 * sets *d_err and writes zeros), then the block copies the pool's rows out of mapped memory
 * (volatile loads: every read goes to the host's memory). */
static __global__ void __launch_bounds__(256)
st_k_pool_wait(const uint32_t *m_done, const uint32_t *__restrict__ d_step, const float *m_out, int64_t n,
               float *__restrict__ out, int32_t *d_err, int32_t code) {
    st_pdl_enter();
    __shared__ int ok;
    if (threadIdx.x == 0) {
        const uint32_t step = *d_step;
        const long long t0 = clock64();
        int good = 1;
        while (st_ld_acquire_sys(m_done) != step) {
            if (clock64() - t0 > ST_POOL_TIMEOUT_CYCLES) {
                good = 0;
                atomicCAS(d_err, 0, code);
                break;
            }
            __nanosleep(500);
        }
        __threadfence_system();
        ok = good;
    }
    __syncthreads();
    const volatile float *src = m_out;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = ok ? src[i] : 0.0f;
}

extern "C" strata_status st_cuda_pool_publish(const float *d_x, const int32_t *d_ids, const float *d_wts,
                                              int64_t T, int64_t n_embd, int32_t k, float *m_x, int32_t *m_ids,
                                              float *m_wts, int32_t *m_T, uint32_t *m_req,
                                              const uint32_t *d_step, void *stream) {
    static const char *fn = "st_cuda_pool_publish";
    if (T < 0 || T > 65536 || n_embd < 1 || k < 1 || !d_x || !d_ids || !d_wts || !m_x || !m_ids || !m_wts ||
        !m_T || !m_req || !d_step)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, n_embd %lld, k %d or a NULL pointer", fn,
                        (long long)T, (long long)n_embd, (int)k);
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_pool_publish, 1, 256, 0, (cudaStream_t)stream, d_x, d_ids, d_wts, (int)T, n_embd, (int)k,
              m_x, m_ids, m_wts, m_T, m_req, d_step, (const int32_t *)NULL, 0, (int32_t *)NULL,
              (int32_t *)NULL, (const int32_t *)NULL);
    ST_CUDA_CHECK_LAUNCH("st_k_pool_publish");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_pool_publish_split(const float *d_x, const int32_t *d_ids, const float *d_wts,
                                                    int64_t T, int64_t n_embd, int32_t k, const int32_t *d_where,
                                                    int32_t n_expert, int32_t *d_ids_gpu, int32_t *d_hist,
                                                    const int32_t *d_zc_of_m, float *m_x, int32_t *m_ids,
                                                    float *m_wts, int32_t *m_T, uint32_t *m_req,
                                                    const uint32_t *d_step, void *stream) {
    static const char *fn = "st_cuda_pool_publish_split";
    if (T < 0 || T > 65536 || n_embd < 1 || k < 1 || n_expert < 1 || !d_x || !d_ids || !d_wts || !d_where ||
        !d_ids_gpu || !m_x || !m_ids || !m_wts || !m_T || !m_req || !d_step)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, n_embd %lld, k %d, n_expert %d or a NULL pointer",
                        fn, (long long)T, (long long)n_embd, (int)k, (int)n_expert);
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_pool_publish, 1, 256, 0, (cudaStream_t)stream, d_x, d_ids, d_wts, (int)T, n_embd, (int)k,
              m_x, m_ids, m_wts, m_T, m_req, d_step, d_where, (int)n_expert, d_ids_gpu, d_hist, d_zc_of_m);
    ST_CUDA_CHECK_LAUNCH("st_k_pool_publish");
    return STRATA_OK;
}

extern "C" strata_status st_cuda_pool_wait(const uint32_t *m_done, const uint32_t *d_step, const float *m_out,
                                           int64_t n, float *d_out, int32_t *d_err, int32_t code, void *stream) {
    static const char *fn = "st_cuda_pool_wait";
    if (n < 0 || !m_done || !d_step || (n > 0 && (!m_out || !d_out)) || !d_err || code < 1)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n %lld or a NULL pointer", fn, (long long)n);
    ST_TRY(st_cuda_require(fn));
    st_launch(st_k_pool_wait, 1, 256, 0, (cudaStream_t)stream, m_done, d_step, m_out, n, d_out, d_err, code);
    ST_CUDA_CHECK_LAUNCH("st_k_pool_wait");
    return STRATA_OK;
}

/* ---- entry points ---------------------------------------------------------------------------- */

/* Workspace sections (each 256-aligned). */
struct st_moe_ws {
    int *n_groups;
    st_moe_group *groups;
    void *xq;   /* [T] q8_1 rows of n_embd */
    float *h;   /* [P][n_ff] */
    void *hq;   /* [P] q8_1 rows of n_ff */
    float *y;   /* [P][n_embd] */
    size_t bytes;
};

static st_moe_ws st_moe_ws_layout(uint8_t *base, int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    const size_t P = (size_t)T * (size_t)k;
    st_moe_ws w;
    size_t o = 0;
    w.n_groups = (int *)(base + o);          o += st_round_up(sizeof(int), 256);
    w.groups = (st_moe_group *)(base + o);   o += st_round_up(P * sizeof(st_moe_group), 256);
    w.xq = base + o;                         o += st_round_up((size_t)T * (size_t)(n_embd / 32) * sizeof(block_q8_1), 256);
    w.h = (float *)(base + o);               o += st_round_up(P * (size_t)n_ff * sizeof(float), 256);
    w.hq = base + o;                         o += st_round_up(P * (size_t)(n_ff / 32) * sizeof(block_q8_1), 256);
    w.y = (float *)(base + o);               o += st_round_up(P * (size_t)n_embd * sizeof(float), 256);
    w.bytes = o;
    return w;
}

extern "C" size_t st_cuda_moe_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff) {
    if (T < 1 || k < 1 || n_embd < 1 || n_ff < 1) return 0;
    const size_t gemv = st_moe_ws_layout(NULL, T, k, n_embd, n_ff).bytes;
    const size_t tiles = st_moe_mmq_wsize(T, k, n_embd, n_ff);
    return gemv > tiles ? gemv : tiles;
}

extern "C" strata_status st_cuda_moe_ffn(const st_cuda_moe_args *a, void *stream) {
    static const char *fn = "st_cuda_moe_ffn";
    if (!a) return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL args", fn);
    if (a->T == 0) return STRATA_OK;
    if (a->T < 0 || a->k < 1 || a->n_expert < 1 || a->T * (int64_t)a->k > ST_CUDA_MOE_MAX_PAIRS)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld, k %d, n_expert %d (need T * k <= %d)",
                        fn, (long long)a->T, (int)a->k, (int)a->n_expert, ST_CUDA_MOE_MAX_PAIRS);
    if (!a->experts || !a->x || !a->ids || !a->wts || !a->out || !a->ws)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL pointer argument", fn);
    if (a->type_gate != a->type_up)
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: gate %s and up %s of different types", fn,
                        strata_type_name(a->type_gate), strata_type_name(a->type_up));
    const strata_type ty[2] = {a->type_gate, a->type_down};
    for (int i = 0; i < 2; i++)
        if (!st_cuda_moe_supports(ty[i]))
            return st_error(STRATA_ERR_UNSUPPORTED, "%s: type %s (%d) has no expert kernel", fn,
                            strata_type_name(ty[i]), (int)ty[i]);
    const int64_t qg = strata_type_block_size(a->type_gate), qd = strata_type_block_size(a->type_down);
    if (a->n_embd < 32 || a->n_ff < 32 || a->n_embd % 32 || a->n_ff % 32 || qg < 1 || qd < 1 ||
        a->n_embd % qg || a->n_ff % qd)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n_embd %lld, n_ff %lld must be multiples of 32 "
                        "and of the block sizes (%s %lld, %s %lld)", fn, (long long)a->n_embd,
                        (long long)a->n_ff, strata_type_name(a->type_gate), (long long)qg,
                        strata_type_name(a->type_down), (long long)qd);
    if (a->act != 0 && a->act != 1)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: act %d (0 SwiGLU, 1 gpt-oss's)", fn, a->act);
    if (((uintptr_t)a->ws & 255) != 0 || ((uintptr_t)a->x & 3) != 0 || ((uintptr_t)a->out & 3) != 0 ||
        ((uintptr_t)a->xq & 3) != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: ws must be 256-byte, x, xq and out 4-byte aligned", fn);
    const int tiles = st_moe_mmq_wanted(a);
    if (!tiles && a->T * (int64_t)a->k > 1024)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: T %lld x k %d pairs need the tile path (types "
                        "%s/%s, x 16-byte aligned, n_expert <= 4096); the GEMV path takes 1024", fn,
                        (long long)a->T, (int)a->k, strata_type_name(a->type_gate),
                        strata_type_name(a->type_down));
    const st_moe_ws w = st_moe_ws_layout((uint8_t *)a->ws, a->T, a->k, a->n_embd, a->n_ff);
    const size_t need = tiles ? st_moe_mmq_wsize(a->T, a->k, a->n_embd, a->n_ff) : w.bytes;
    if (a->ws_bytes < need)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: workspace of %zu bytes, need %zu", fn,
                        a->ws_bytes, need);
    ST_TRY(st_cuda_require(fn));
    cudaStream_t s = (cudaStream_t)stream;
    const int P = (int)(a->T * a->k);

    if (tiles) { /* a prompt batch: tensor-core tiles per expert (mmq.cu), then the combine */
        const float *y = NULL;
        ST_TRY(st_moe_mmq_ffn(a, s, &y));
        st_launch(st_k_moe_combine, st_cuda_grid(a->T * a->n_embd, 256), 256, 0, s, 
            y, a->ids, a->wts, a->T, a->k, a->n_expert, a->n_embd, a->accumulate, a->out);
        ST_CUDA_CHECK_LAUNCH("st_k_moe_combine");
        return STRATA_OK;
    }

    /* 1. plan (and x's q8_1 rows in the same launch for the dp4a types); none for a one-token
     * call whose x the router quantized: block y of the GEMVs takes pair y */
    const int dp4a_g = st_moe_gemv_q8(a->type_gate), dp4a_d = st_moe_gemv_q8(a->type_down);
    const int direct = a->xq && a->T == 1 && dp4a_g && dp4a_d && a->k <= ST_MOE_DOWN1_MAXK;
    if (direct) {
    } else if (dp4a_g) {
        const unsigned bt = (unsigned)((P + 31) & ~31) < 256u ? 256u : (unsigned)((P + 31) & ~31);
        const int64_t qw = a->T * (a->n_embd / 32); /* one warp per q8_1 block */
        const unsigned qb = (unsigned)((qw + bt / 32 - 1) / (bt / 32));
        st_launch(st_k_moe_plan_quant, 1 + (qb < 1 ? 1 : qb), bt, 0, s, a->ids, P, a->n_expert, w.groups, w.n_groups,
                                                                  a->x, a->n_embd, a->T, a->n_embd,
                                                                  (block_q8_1 *)w.xq);
        ST_CUDA_CHECK_LAUNCH("st_k_moe_plan_quant");
    } else {
        st_launch(st_k_moe_plan, 1, (unsigned)((P + 31) & ~31), 0, s, a->ids, P, a->n_expert, w.groups, w.n_groups);
        ST_CUDA_CHECK_LAUNCH("st_k_moe_plan");
    }

    /* 2-3. gate + up */
    st_moe_mv_params p;
    p.experts = a->experts;
    p.groups = w.groups;
    p.n_groups = w.n_groups;
    p.act_div = a->k;
    p.max_pairs = a->T < ST_MOE_MAXG ? (int)a->T : ST_MOE_MAXG;
    p.n_chunks = a->n_embd / 32;
    p.n_rows = a->n_ff;
    p.out = w.h;
    p.ids = direct ? a->ids : NULL;
    p.n_expert = a->n_expert;
    /* a one-token call with counters: the gate/up kernel writes h's q8_1 rows too */
    const int64_t n_cnt = (int64_t)P * (a->n_ff / 32);
    const bool hq_fused = st_moe_gu_q8 && direct && a->sync && a->n_sync >= n_cnt;
    p.hq = hq_fused ? (block_q8_1 *)w.hq : NULL;
    p.cnt = hq_fused ? (unsigned *)a->sync : NULL;
    p.b0 = a->b_gate;
    p.b1 = a->b_up;
    p.oai = a->act == 1;
    if (dp4a_g) {
        p.act = direct ? a->xq : w.xq;
        p.act_rb = (size_t)(a->n_embd / 32) * sizeof(block_q8_1);
    } else {
        p.act = a->x;
        p.act_rb = (size_t)a->n_embd * sizeof(float);
    }
    ST_TRY(st_moe_mv<true>(a->type_gate, p, (unsigned)P, s));

    /* 4-5. down */
    p.act_div = 1;
    p.n_chunks = a->n_ff / 32;
    p.n_rows = a->n_embd;
    p.out = w.y;
    /* 4. h as q8_1; 5-6. one token: down and the combine in one launch */
    const bool d1 = direct && st_moe_down1_smem(a->k, p.n_chunks, 48 * 1024) != 0;
    p.hq = NULL;
    p.cnt = NULL;
    p.b0 = a->b_down;
    p.b1 = NULL;
    p.oai = 0;
    if (dp4a_d) {
        if (!hq_fused) ST_TRY(st_moe_quantize(w.h, a->n_ff, P, a->n_ff, w.hq, s));
        p.act = w.hq;
        p.act_rb = (size_t)(a->n_ff / 32) * sizeof(block_q8_1);
    } else {
        p.act = w.h;
        p.act_rb = (size_t)a->n_ff * sizeof(float);
    }
    if (d1 && st_moe_down1(a->type_down, p, a->wts, a->k, a->accumulate, a->out, s)) {
        ST_CUDA_CHECK_LAUNCH("st_k_moe_down1");
        return STRATA_OK;
    }
    ST_TRY(st_moe_mv<false>(a->type_down, p, (unsigned)P, s));

    /* 6. combine */
    st_launch(st_k_moe_combine, st_cuda_grid(a->T * a->n_embd, 256), 256, 0, s, 
        w.y, a->ids, a->wts, a->T, a->k, a->n_expert, a->n_embd, a->accumulate, a->out);
    ST_CUDA_CHECK_LAUNCH("st_k_moe_combine");
    return STRATA_OK;
}
