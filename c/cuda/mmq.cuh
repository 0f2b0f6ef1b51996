/* mmq.cuh - the tensor-core tile of the prefill matrix family (mmq.cu), shared by the dense entry
 * points and the grouped-expert path that st_cuda_moe_ffn (moe.cu) takes for large batches.
 *
 * Kernel shape: a block of 4 warps computes a tile of 64 activation rows x 64 weight rows. The
 * activations were quantized once per call as the GEMV's q8_1 (st_k_mq_act: int8 quants, a scale
 * per 32, sums per 16). Per step of 64 weights a thread decodes one 32-weight chunk of one weight
 * row into its integer quants and per-16 scales (st_mq_chunk) and copies one chunk of activation
 * quants; each warp then multiplies its 32 x 32 quarter, one slice at a time (32 deep, or 16
 * for types with a scale per 16 weights), with mma.sync m16n8k16 (f16 inputs, f32 accumulators):
 * integers below 2^11 whose sums stay below 2^24, so every slice's dot is exact, and scales it
 * into the accumulators as the dp4a GEMV does: acc += dx * (sw * dot + mw * sum(qx)). The tiles thus compute the GEMV's function (only
 * the order of the f32 scale products differs). A dense Q8_0 matrix with a tile copy
 * (cuda_mmq.h, st_cuda_mmq_tiles_make) skips the decoding: its quant rows and block-major scales
 * go into shared memory by cp.async (st_k_mmq_i8's RP form), the same values, the same bits. GLU tiles decode a second matrix (up); the
 * epilogue applies silu(gate) * up. Results are staged through shared memory and written with
 * row and column bounds, so no output outside [0, count) x [0, N) is touched.
 *
 * Row sets: dense calls cover rows 64 y .. 64 y + 63 of x (blockIdx.y = y). Grouped calls read a
 * tile list (expert, first sorted pair, count) made on the device by st_k_mmq_plan. Gate/up
 * tiles gather their activation rows through the sorted pair list (token = pair / k) and write
 * the sorted rows of h; down tiles read h's sorted rows and scatter their outputs back to pair
 * order, where the GEMV path's combine (moe.cu) sums them in slot order.
 *
 * gpt-oss's experts (biases, clamped SwiGLU): the epilogues add the biases and apply the
 * activation as the GEMV path's st_moe_row_out does (the same operations on the tiles' sums).
 * st_moe_mmq_wanted routes such calls here unless built with -DSTRATA_MMQ_OAI=0 (NVCC_EXTRA),
 * which keeps them on the GEMV path. */
#ifndef STRATA_CUDA_MMQ_CUH
#define STRATA_CUDA_MMQ_CUH

#include "moe.cuh"
#include "cuda_moe.h"

#define ST_MMQ_BM 64            /* activation rows per tile */
#define ST_MMQ_BN 64            /* weight rows per tile */
#define ST_MMQ_BK 64            /* weights per step: two 32-weight chunks */
#define ST_MMQ_LDS (ST_MMQ_BK + 8)  /* halves per shared row (16 bytes of padding) */
#define ST_MMQ_LDC (ST_MMQ_BN + 4)  /* floats per staged output row */
#define ST_MMQ_THREADS 128

/* Tile kernel modes (st_k_mmq's MODE) */
#define ST_MMQ_PLAIN 0
#define ST_MMQ_GLU_FUSED 1   /* gate and up tiles of 64 outputs side by side in registers */
#define ST_MMQ_GLU_PAIRED 2  /* 32 gate rows and their 32 up rows as one plain tile (default) */

/* One tile of a grouped call: rows start .. start + count - 1 of the sorted pairs, expert e. */
struct st_mmq_tile {
    int32_t e, start, count, pad;
};

/* Activation rows quantized as q8 (st_k_mq_act): row r has K quants q[r * K ...] (f16, exact
 * integers), K / 32 scales d[r * K / 32 ...] and K / 16 sums of quants s[r * K / 16 ...]. */
struct st_mq_act_rows {
    __half *q;
    int8_t *q8;   /* the same quants as bytes (the int8 tiles) */
    float *d, *s;
    int64_t K;
};

/* Where a tile's weights, activation rows and outputs are. */
struct st_mmq_args {
    /* grouped: the expert table and which matrices (0: gate, and up for GLU; 2: down) */
    const st_cuda_expert *table;
    int which;
    /* dense: the matrices (w1: up for GLU) */
    const uint8_t *w0, *w1;
    size_t rb0, rb1;
    const uint8_t *q0, *q1;     /* dense Q8_0: w0's and w1's tile copies (cuda_mmq.h), or NULL */
    int64_t N, K;               /* weight rows, weights per row (a multiple of 32) */
    st_mq_act_rows act;         /* activation rows (st_k_mq_act), K values each */
    const int32_t *x_order;     /* non-NULL: x row of tile row i = x_order[start + i] / k_div */
    int k_div;
    const int32_t *y_order;     /* non-NULL: y row of tile row i = y_order[start + i] */
    const st_mmq_tile *tiles;   /* grouped: tile list and its length (device); NULL: dense */
    const int32_t *n_tiles;
    int64_t T;                  /* dense: activation rows */
    float *y;                   /* output row i of the tile at y + (start + i) * ldy (or y_order) */
    int64_t ldy;
    /* grouped, gpt-oss (STRATA_MMQ_OAI builds take them): per-expert biases [n_expert][N] or
     * NULL, as st_cuda_moe_args's: GLU tiles b0 gate's, b1 up's (before the activation), plain
     * tiles b0 down's (added to the output); oai: gpt-oss's clamped SwiGLU (st_det_swiglu_oai) */
    const float *b0, *b1;
    int oai;
};

/* Internal: the grouped expert FFN through the tiles up to the per-pair outputs (called by
 * st_cuda_moe_ffn, which checked the arguments and combines *y_pairs: [T * k][n_embd] in pair
 * order, inside the workspace), and the workspace it needs. */
size_t st_moe_mmq_wsize(int64_t T, int32_t k, int64_t n_embd, int64_t n_ff);
strata_status st_moe_mmq_ffn(const st_cuda_moe_args *a, cudaStream_t s, const float **y_pairs);
/* 1 when st_cuda_moe_ffn should take the tile path for this call. Calls with expert biases or
 * act 1 (gpt-oss) too, unless built with -DSTRATA_MMQ_OAI=0 (st_cuda_moe_tiles_oai). */
int st_moe_mmq_wanted(const st_cuda_moe_args *a);

#endif /* STRATA_CUDA_MMQ_CUH */
