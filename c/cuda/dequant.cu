/* dequant.cu - dequantize on the GPU: the kernels, the one dispatch point over types, and the
 * host convenience entry of cuda_backend.h.
 *
 * Work split: one thread per group of four consecutive output floats (8 threads per 32-weight
 * block), grid-stride loop, 64-bit indices. A warp thus reads 4 whole blocks (e.g. 136 contiguous
 * bytes of Q8_0) and writes 512 contiguous bytes, as one float4 per thread when the output is
 * 16-byte aligned. The K-quants use the same split (64 threads per 256-weight block).
 * c/cuda/dev/dequant_check.cu times this against other splits. */
#include "dequant.cuh"

/* ---- kernels -------------------------------------------------------------------------------- */

/* Stores v[0..3] at dst (dst 16-byte aligned when VEC). */
template <bool VEC>
static __device__ __forceinline__ void st_store4(float *dst, const float v[4]) {
    if (VEC) {
        *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) dst[k] = v[k];
    }
}

/* src: n_groups / (QK/4) blocks of D -> dst: 4 * n_groups floats. */
template <class D, bool VEC>
static __global__ void __launch_bounds__(256)
st_k_dequant_blocks(const uint8_t *__restrict__ src, float *__restrict__ dst, int64_t n_groups) {
    st_pdl_enter();
    constexpr int G = D::QK / 4; /* groups per block */
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups; g += stride) {
        const int64_t b = g / G;
        const int j = (int)(g - b * G);
        float v[4];
        D::group(src + b * D::BYTES, j, v);
        st_store4<VEC>(dst + 4 * g, v);
    }
}

/* src: n elements of a plain type D -> dst: n floats. Thread per four elements; the last group
 * may be short. */
template <class D, bool VEC>
static __global__ void __launch_bounds__(256)
st_k_dequant_plain(const uint8_t *__restrict__ src, float *__restrict__ dst, int64_t n) {
    st_pdl_enter();
    const int64_t n_groups = (n + 3) / 4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups; g += stride) {
        const int64_t i = 4 * g;
        if (i + 4 <= n) {
            float v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = D::one(src + (i + k) * D::BYTES);
            st_store4<VEC>(dst + i, v);
        } else {
            for (int64_t k = i; k < n; k++) dst[k] = D::one(src + k * D::BYTES);
        }
    }
}

/* ---- launch helpers ------------------------------------------------------------------------- */

static const int ST_DQ_THREADS = 256;

template <class D>
static strata_status st_launch_blocks(const void *src, float *dst, int64_t n, cudaStream_t s) {
    const int64_t n_groups = n / 4;
    const unsigned grid = st_cuda_grid(n_groups, ST_DQ_THREADS);
    const uint8_t *p = (const uint8_t *)src;
    if (((uintptr_t)dst & 15) == 0)
        st_launch(st_k_dequant_blocks<D, true>, grid, ST_DQ_THREADS, 0, s, p, dst, n_groups);
    else
        st_launch(st_k_dequant_blocks<D, false>, grid, ST_DQ_THREADS, 0, s, p, dst, n_groups);
    ST_CUDA_CHECK_LAUNCH("st_k_dequant_blocks");
    return STRATA_OK;
}

template <class D>
static strata_status st_launch_plain(const void *src, float *dst, int64_t n, cudaStream_t s) {
    const unsigned grid = st_cuda_grid((n + 3) / 4, ST_DQ_THREADS);
    const uint8_t *p = (const uint8_t *)src;
    if (((uintptr_t)dst & 15) == 0)
        st_launch(st_k_dequant_plain<D, true>, grid, ST_DQ_THREADS, 0, s, p, dst, n);
    else
        st_launch(st_k_dequant_plain<D, false>, grid, ST_DQ_THREADS, 0, s, p, dst, n);
    ST_CUDA_CHECK_LAUNCH("st_k_dequant_plain");
    return STRATA_OK;
}

/* ---- entry points --------------------------------------------------------------------------- */

extern "C" int st_cuda_dequant_supports(strata_type type) {
    switch (type) {
    case STRATA_TYPE_F32: case STRATA_TYPE_F16: case STRATA_TYPE_BF16:
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q5_1:
    case STRATA_TYPE_Q8_0: case STRATA_TYPE_Q8_1: case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_Q2_K: case STRATA_TYPE_Q3_K: case STRATA_TYPE_Q4_K: case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K: case STRATA_TYPE_Q8_K:
    case STRATA_TYPE_IQ4_XS: case STRATA_TYPE_IQ3_XXS: case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ2_XXS: case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ1_S: case STRATA_TYPE_IQ1_M: case STRATA_TYPE_MXFP4:
        return 1;
    default:
        return 0;
    }
}

/* Checks the arguments both entries share. */
static strata_status st_dequant_check_args(const char *fn, strata_type type, const void *src,
                                           const float *dst, int64_t n) {
    if (!st_cuda_dequant_supports(type))
        return st_error(STRATA_ERR_UNSUPPORTED, "%s: type %s (%d) has no GPU dequantize kernel", fn,
                        strata_type_name(type), (int)type);
    const int64_t qk = strata_type_block_size(type);
    if (n < 0 || n % qk != 0)
        return st_error(STRATA_ERR_INVALID_ARG, "%s: n = %lld is not a non-negative multiple of "
                        "%s's block size %lld", fn, (long long)n, strata_type_name(type),
                        (long long)qk);
    if (n > 0 && (!src || !dst))
        return st_error(STRATA_ERR_INVALID_ARG, "%s: NULL %s", fn, !src ? "src" : "dst");
    return STRATA_OK;
}

/* The one dispatch point over types. Arguments already checked. */
static strata_status st_dequant_dispatch(strata_type type, const void *src, float *dst, int64_t n,
                                         cudaStream_t s) {
    switch (type) {
    case STRATA_TYPE_Q8_0: return st_launch_blocks<st_dq_q8_0>(src, dst, n, s);
    case STRATA_TYPE_Q4_0: return st_launch_blocks<st_dq_q4_0>(src, dst, n, s);
    case STRATA_TYPE_Q4_1: return st_launch_blocks<st_dq_q4_1>(src, dst, n, s);
    case STRATA_TYPE_Q5_0: return st_launch_blocks<st_dq_q5_0>(src, dst, n, s);
    case STRATA_TYPE_Q5_1: return st_launch_blocks<st_dq_q5_1>(src, dst, n, s);
    case STRATA_TYPE_Q8_1: return st_launch_blocks<st_dq_q8_1>(src, dst, n, s);
    case STRATA_TYPE_IQ4_NL: return st_launch_blocks<st_dq_iq4_nl>(src, dst, n, s);
    case STRATA_TYPE_Q2_K: return st_launch_blocks<st_dq_q2_K>(src, dst, n, s);
    case STRATA_TYPE_Q3_K: return st_launch_blocks<st_dq_q3_K>(src, dst, n, s);
    case STRATA_TYPE_Q4_K: return st_launch_blocks<st_dq_q4_K>(src, dst, n, s);
    case STRATA_TYPE_Q5_K: return st_launch_blocks<st_dq_q5_K>(src, dst, n, s);
    case STRATA_TYPE_Q6_K: return st_launch_blocks<st_dq_q6_K>(src, dst, n, s);
    case STRATA_TYPE_Q8_K: return st_launch_blocks<st_dq_q8_K>(src, dst, n, s);
    case STRATA_TYPE_IQ4_XS: return st_launch_blocks<st_dq_iq4_xs>(src, dst, n, s);
    case STRATA_TYPE_IQ3_XXS: return st_launch_blocks<st_dq_iq3_xxs>(src, dst, n, s);
    case STRATA_TYPE_IQ3_S: return st_launch_blocks<st_dq_iq3_s>(src, dst, n, s);
    case STRATA_TYPE_IQ2_XXS: return st_launch_blocks<st_dq_iq2_xxs>(src, dst, n, s);
    case STRATA_TYPE_IQ2_XS: return st_launch_blocks<st_dq_iq2_xs>(src, dst, n, s);
    case STRATA_TYPE_IQ2_S: return st_launch_blocks<st_dq_iq2_s>(src, dst, n, s);
    case STRATA_TYPE_IQ1_S: return st_launch_blocks<st_dq_iq1_s>(src, dst, n, s);
    case STRATA_TYPE_IQ1_M: return st_launch_blocks<st_dq_iq1_m>(src, dst, n, s);
    case STRATA_TYPE_MXFP4: return st_launch_blocks<st_dq_mxfp4>(src, dst, n, s);
    case STRATA_TYPE_F16: return st_launch_plain<st_dq_f16>(src, dst, n, s);
    case STRATA_TYPE_BF16: return st_launch_plain<st_dq_bf16>(src, dst, n, s);
    case STRATA_TYPE_F32: return st_launch_plain<st_dq_f32>(src, dst, n, s);
    default: break;
    }
    return st_error(STRATA_ERR_INTERNAL, "st_dequant_dispatch: type %d passed the check", (int)type);
}

extern "C" strata_status st_cuda_dequantize(strata_type type, const void *d_src, float *d_dst,
                                            int64_t n, void *stream) {
    ST_TRY(st_dequant_check_args("st_cuda_dequantize", type, d_src, d_dst, n));
    if (n == 0) return STRATA_OK;
    const uintptr_t src_align = type == STRATA_TYPE_F32 ? 4 : type == STRATA_TYPE_MXFP4 ? 1 : 2;
    if ((uintptr_t)d_src & (src_align - 1))
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_dequantize: src %p is not %d-byte aligned",
                        d_src, (int)src_align);
    if ((uintptr_t)d_dst & 3)
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_dequantize: dst %p is not 4-byte aligned",
                        (void *)d_dst);
    ST_TRY(st_cuda_require("st_cuda_dequantize"));
    return st_dequant_dispatch(type, d_src, d_dst, n, (cudaStream_t)stream);
}

extern "C" strata_status st_cuda_dequantize_host(strata_type type, const void *src, int64_t n,
                                                 float *dst) {
    ST_TRY(st_dequant_check_args("st_cuda_dequantize_host", type, src, dst, n));
    if (n == 0) return STRATA_OK;
    ST_TRY(st_cuda_require("st_cuda_dequantize_host"));

    const int64_t src_bytes = strata_row_bytes(type, n);
    int64_t dst_bytes;
    if (src_bytes < 0 || st_mul_overflow_i64(n, (int64_t)sizeof(float), &dst_bytes))
        return st_error(STRATA_ERR_INVALID_ARG, "st_cuda_dequantize_host: n = %lld too large",
                        (long long)n);

    void *d_src = NULL, *d_dst = NULL;
    strata_status st = st_cuda_malloc(&d_src, (size_t)src_bytes);
    if (st == STRATA_OK) st = st_cuda_malloc(&d_dst, (size_t)dst_bytes);
    if (st == STRATA_OK) st = st_cuda_memcpy_h2d(d_src, src, (size_t)src_bytes);
    if (st == STRATA_OK) st = st_dequant_dispatch(type, d_src, (float *)d_dst, n, 0);
    /* The copy back waits for the kernel, and reports an error that happened inside it. */
    if (st == STRATA_OK) st = st_cuda_memcpy_d2h(dst, d_dst, (size_t)dst_bytes);
    /* Frees even after a failure; the first error's message is the one kept. */
    if (st == STRATA_OK) {
        st = st_cuda_free(d_src);
        strata_status st2 = st_cuda_free(d_dst);
        if (st == STRATA_OK) st = st2;
    } else {
        (void)cudaFree(d_src);
        (void)cudaFree(d_dst);
        (void)cudaGetLastError();
    }
    return st;
}
