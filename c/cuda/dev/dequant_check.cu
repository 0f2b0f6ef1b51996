/* dequant_check.cu - standalone check-and-time program for the GPU dequantize kernels (in the
 * manner of llm.c's dev/cuda): several Q8_0 kernel variants over 1 GiB of random blocks, each
 * checked against a CPU reference and timed with CUDA events, reported as GB/s of bytes read plus
 * written next to a device-to-device copy measured on the spot (the H200 copies at ~4.1-4.3 TB/s).
 * Then the library's kernel shape for the other block types, timed only (the bit-exact checks of
 * every type live in c/tests/test_cuda_dequant.c).
 *
 * Build (from the repository root, no Makefile needed):
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Ic/include -Ic/core -Ic/format/quant -Ic/cuda \
 *        c/cuda/dev/dequant_check.cu -o /tmp/dequant_check
 * Run:  /tmp/dequant_check [results.json] [GiB of Q8_0, default 1]
 *
 * Variants (Q8_0, 34-byte blocks of 32 weights):
 *   lib4    one thread per 4 outputs, 16-bit loads, float4 store (what c/cuda/dequant.cu runs)
 *           with one thread per group (grid not capped)
 *   lib4cs  the same with streaming (evict-first) stores
 *   lib4cap the same with the grid capped at 64 blocks per SM (grid-stride loop does the rest)
 *   t8      one thread per 8 outputs, two float4 stores
 *   t32     one thread per block (32 outputs): few threads, strided stores
 *   smem    a CTA copies 64 blocks (2176 bytes) to shared memory with coalesced 32-bit loads,
 *           then each thread decodes 4 outputs from shared memory */
#include "dequant.cuh"
#include "dev_common.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>


/* ---- CPU reference -------------------------------------------------------------------------- */

static float host_fp16(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    float f;
    if (exp == 0) f = ldexpf((float)man, -24);
    else if (exp == 31) { uint32_t b = 0x7f800000u | (man << 13); memcpy(&f, &b, 4); }
    else f = ldexpf((float)(man | 0x400u), (int)exp - 25);
    uint32_t b;
    memcpy(&b, &f, 4);
    b |= sign;
    memcpy(&f, &b, 4);
    return f;
}

static void cpu_q8_0(const uint8_t *src, float *dst, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const uint8_t *blk = src + b * 34;
        const float d = host_fp16((uint16_t)(blk[0] | (blk[1] << 8)));
        for (int j = 0; j < 32; j++) dst[b * 32 + j] = (float)(int8_t)blk[2 + j] * d;
    }
}

/* ---- kernel variants ------------------------------------------------------------------------ */

/* lib4: the library's split (c/cuda/dequant.cu st_k_dequant_blocks), any decoder D. */
template <class D, bool CS = false>
__global__ void __launch_bounds__(256) k_lib4(const uint8_t *__restrict__ src,
                                              float *__restrict__ dst, int64_t n_groups) {
    constexpr int G = D::QK / 4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_groups; g += stride) {
        const int64_t b = g / G;
        float v[4];
        D::group(src + b * D::BYTES, (int)(g - b * G), v);
        if (CS) __stcs((float4 *)(dst + 4 * g), make_float4(v[0], v[1], v[2], v[3]));
        else *(float4 *)(dst + 4 * g) = make_float4(v[0], v[1], v[2], v[3]);
    }
}

/* t8: thread per 8 outputs of Q8_0. */
__global__ void __launch_bounds__(256) k_t8(const uint8_t *__restrict__ src,
                                            float *__restrict__ dst, int64_t n_oct) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_oct; g += stride) {
        const int64_t b = g >> 2;
        const int j = (int)(g & 3);
        float v[8];
        st_dq_q8_0::group(src + b * 34, 2 * j, v);
        st_dq_q8_0::group(src + b * 34, 2 * j + 1, v + 4);
        float4 *o = (float4 *)(dst + 8 * g);
        o[0] = make_float4(v[0], v[1], v[2], v[3]);
        o[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
}

/* t32: thread per Q8_0 block. */
__global__ void __launch_bounds__(256) k_t32(const uint8_t *__restrict__ src,
                                             float *__restrict__ dst, int64_t n_blocks) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < n_blocks; b += stride) {
        float4 *o = (float4 *)(dst + 32 * b);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float v[4];
            st_dq_q8_0::group(src + b * 34, j, v);
            o[j] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

/* smem: 256 threads, 64 blocks per tile; src 4-byte aligned (cudaMalloc'd). Tail tile guarded. */
#define SM_BLOCKS 64
__global__ void __launch_bounds__(256) k_smem(const uint8_t *__restrict__ src,
                                              float *__restrict__ dst, int64_t n_blocks) {
    __shared__ uint32_t tile[SM_BLOCKS * 34 / 4]; /* 544 words */
    const int64_t n_tiles = (n_blocks + SM_BLOCKS - 1) / SM_BLOCKS;
    for (int64_t t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        const int64_t b0 = t * SM_BLOCKS;
        const int nb = (int)min((int64_t)SM_BLOCKS, n_blocks - b0);
        const int words = (nb * 34 + 3) / 4;
        const uint32_t *w = (const uint32_t *)(src + b0 * 34); /* 2176 * t: 4-byte aligned */
        __syncthreads();
        for (int i = threadIdx.x; i < words; i += blockDim.x) tile[i] = __ldg(w + i);
        __syncthreads();
        const uint8_t *tb = (const uint8_t *)tile;
        for (int g = threadIdx.x; g < nb * 8; g += blockDim.x) {
            const int b = g >> 3, j = g & 7;
            const uint8_t *blk = tb + b * 34;
            const float d = st_dev_fp16(*(const uint16_t *)blk);
            const uint8_t *q = blk + 2 + 4 * j;
            float4 o;
            o.x = __fmul_rn((float)(int8_t)q[0], d);
            o.y = __fmul_rn((float)(int8_t)q[1], d);
            o.z = __fmul_rn((float)(int8_t)q[2], d);
            o.w = __fmul_rn((float)(int8_t)q[3], d);
            *(float4 *)(dst + (b0 + b) * 32 + 4 * j) = o;
        }
    }
}

/* Counts positions where a and b differ bitwise. */
__global__ void k_diff(const uint32_t *a, const uint32_t *b, int64_t n, unsigned long long *count) {
    unsigned long long c = 0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c += a[i] != b[i];
    if (c) atomicAdd(count, c);
}

/* ---- timing --------------------------------------------------------------------------------- */

struct Result { const char *name; double ms_min, ms_mean, gbps; long long mismatches; };

template <class F>
static void time_it(F launch, int iters, double *ms_min, double *ms_mean) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) launch();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    double sum = 0, best = 1e30;
    for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        sum += ms;
        if (ms < best) best = ms;
    }
    CK(cudaGetLastError());
    *ms_min = best;
    *ms_mean = sum / iters;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

/* As the library (st_cuda_grid): one thread per item, up to the grid limit. */
static unsigned grid_for(int64_t work, int threads, int sms) {
    (void)sms;
    int64_t b = (work + threads - 1) / threads, cap = 0x7fffffff;
    return (unsigned)(b < cap ? (b < 1 ? 1 : b) : cap);
}

/* As many blocks of D as fit both the source bytes and the n_out output floats. */
template <class D, bool CS = false>
static Result time_type(const char *name, const uint8_t *d_src, int64_t src_bytes, float *d_dst,
                        int64_t n_out, int sms) {
    int64_t n_blocks = src_bytes / D::BYTES;
    if (n_blocks > n_out / D::QK) n_blocks = n_out / D::QK;
    const int64_t n_groups = n_blocks * (D::QK / 4);
    Result r = {name, 0, 0, 0, -1};
    time_it([&] { k_lib4<D, CS><<<grid_for(n_groups, 256, sms), 256>>>(d_src, d_dst, n_groups); }, 10,
            &r.ms_min, &r.ms_mean);
    const double bytes = (double)n_blocks * D::BYTES + (double)n_blocks * D::QK * 4;
    r.gbps = bytes / (r.ms_min * 1e-3) / 1e9;
    return r;
}

/* ---- main ----------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    const char *json_path = argc > 1 ? argv[1] : NULL;
    const double gib = argc > 2 ? atof(argv[2]) : 1.0;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, compute %d.%d, %d SMs, %.1f GiB\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30));
    const int sms = prop.multiProcessorCount;

    /* 1 GiB of Q8_0: random bytes, random finite non-zero fp16 scales. */
    const int64_t n_blocks = (int64_t)(gib * (1ull << 30)) / 34 / SM_BLOCKS * SM_BLOCKS;
    const int64_t n = n_blocks * 32, src_bytes = n_blocks * 34, dst_bytes = n * 4;
    printf("Q8_0: %lld blocks = %.3f GiB in, %.3f GiB out\n", (long long)n_blocks,
           src_bytes / 1073741824.0, dst_bytes / 1073741824.0);
    std::vector<uint8_t> h_src((size_t)src_bytes);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i + 8 <= h_src.size(); i += 8) {
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        const uint64_t v = s * 2685821657736338717ull;
        memcpy(&h_src[i], &v, 8);
    }
    for (int64_t b = 0; b < n_blocks; b++) {
        uint16_t h = (uint16_t)(h_src[b * 34] | (h_src[b * 34 + 1] << 8));
        if (((h >> 10) & 0x1f) == 0x1f) h ^= 0x4000;
        if ((h & 0x7fff) == 0) h |= 0x3c00;
        h_src[b * 34] = (uint8_t)h;
        h_src[b * 34 + 1] = (uint8_t)(h >> 8);
    }
    std::vector<float> h_ref((size_t)n);
    cpu_q8_0(h_src.data(), h_ref.data(), n_blocks);

    uint8_t *d_src;
    float *d_dst, *d_lib;
    unsigned long long *d_count;
    CK(cudaMalloc(&d_src, (size_t)src_bytes));
    CK(cudaMalloc(&d_dst, (size_t)dst_bytes));
    CK(cudaMalloc(&d_lib, (size_t)dst_bytes));
    CK(cudaMalloc(&d_count, sizeof *d_count));
    CK(cudaMemcpy(d_src, h_src.data(), (size_t)src_bytes, cudaMemcpyHostToDevice));

    std::vector<Result> results;
    const double q8_bytes = (double)src_bytes + (double)dst_bytes;

    /* Copy ceiling: device-to-device copy of the output size (read + written). */
    {
        Result r = {"memcpy_d2d", 0, 0, 0, 0};
        time_it([&] { CK(cudaMemcpyAsync(d_dst, d_lib, (size_t)dst_bytes, cudaMemcpyDeviceToDevice)); },
                10, &r.ms_min, &r.ms_mean);
        r.gbps = 2.0 * dst_bytes / (r.ms_min * 1e-3) / 1e9;
        results.push_back(r);
    }

    /* lib4 first: its output is checked against the CPU in full and becomes the reference for
     * the others (compared on the device). */
    {
        Result r = {"q8_0_lib4", 0, 0, 0, 0};
        const int64_t ng = n / 4;
        time_it([&] { k_lib4<st_dq_q8_0><<<grid_for(ng, 256, sms), 256>>>(d_src, d_lib, ng); }, 10,
                &r.ms_min, &r.ms_mean);
        std::vector<float> h_got((size_t)n);
        CK(cudaMemcpy(h_got.data(), d_lib, (size_t)dst_bytes, cudaMemcpyDeviceToHost));
        long long bad = 0, nans = 0;
        for (int64_t i = 0; i < n; i++) {
            bad += memcmp(&h_got[i], &h_ref[i], 4) != 0;
            nans += isnan(h_got[i]);
        }
        r.mismatches = bad + nans;
        r.gbps = q8_bytes / (r.ms_min * 1e-3) / 1e9;
        results.push_back(r);
    }

    auto check_vs_lib = [&](Result &r) {
        CK(cudaMemset(d_count, 0, sizeof *d_count));
        k_diff<<<sms * 8, 256>>>((const uint32_t *)d_dst, (const uint32_t *)d_lib, n, d_count);
        unsigned long long c = 0;
        CK(cudaMemcpy(&c, d_count, sizeof c, cudaMemcpyDeviceToHost));
        r.mismatches = (long long)c;
        r.gbps = q8_bytes / (r.ms_min * 1e-3) / 1e9;
        results.push_back(r);
    };
    {
        Result r = {"q8_0_lib4cs", 0, 0, 0, 0};
        CK(cudaMemset(d_dst, 0, (size_t)dst_bytes));
        const int64_t ng = n / 4;
        time_it([&] { k_lib4<st_dq_q8_0, true><<<grid_for(ng, 256, sms), 256>>>(d_src, d_dst, ng); },
                10, &r.ms_min, &r.ms_mean);
        check_vs_lib(r);
    }
    {
        Result r = {"q8_0_lib4cap", 0, 0, 0, 0};
        CK(cudaMemset(d_dst, 0, (size_t)dst_bytes));
        const int64_t ng = n / 4;
        time_it([&] { k_lib4<st_dq_q8_0><<<(unsigned)sms * 64, 256>>>(d_src, d_dst, ng); },
                10, &r.ms_min, &r.ms_mean);
        check_vs_lib(r);
    }
    {
        Result r = {"q8_0_t8", 0, 0, 0, 0};
        CK(cudaMemset(d_dst, 0, (size_t)dst_bytes));
        const int64_t no = n / 8;
        time_it([&] { k_t8<<<grid_for(no, 256, sms), 256>>>(d_src, d_dst, no); }, 10, &r.ms_min, &r.ms_mean);
        check_vs_lib(r);
    }
    {
        Result r = {"q8_0_t32", 0, 0, 0, 0};
        CK(cudaMemset(d_dst, 0, (size_t)dst_bytes));
        time_it([&] { k_t32<<<grid_for(n_blocks, 256, sms), 256>>>(d_src, d_dst, n_blocks); }, 10,
                &r.ms_min, &r.ms_mean);
        check_vs_lib(r);
    }
    {
        Result r = {"q8_0_smem", 0, 0, 0, 0};
        CK(cudaMemset(d_dst, 0, (size_t)dst_bytes));
        const int64_t tiles = n_blocks / SM_BLOCKS;
        const unsigned grid = (unsigned)tiles;
        time_it([&] { k_smem<<<grid, 256>>>(d_src, d_dst, n_blocks); }, 10, &r.ms_min, &r.ms_mean);
        check_vs_lib(r);
    }

    /* The library's split for the other types, over the same source bytes (random blocks are
     * well-formed enough for timing; scales may be inf/nan here, which costs nothing). */
    results.push_back(time_type<st_dq_q4_0>("q4_0_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq4_nl>("iq4_nl_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q2_K>("q2_K_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q3_K>("q3_K_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q4_K>("q4_K_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q5_K>("q5_K_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q6_K>("q6_K_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq4_xs>("iq4_xs_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq3_xxs>("iq3_xxs_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq3_s>("iq3_s_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq2_xxs>("iq2_xxs_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq2_xs>("iq2_xs_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq2_s>("iq2_s_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq1_s>("iq1_s_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_iq1_m>("iq1_m_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_mxfp4>("mxfp4_lib4", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q4_K, true>("q4_K_lib4cs", d_src, src_bytes, d_dst, n, sms));
    results.push_back(time_type<st_dq_q6_K, true>("q6_K_lib4cs", d_src, src_bytes, d_dst, n, sms));

    const double copy_gbps = results[0].gbps;
    printf("\n%-12s %10s %10s %10s %8s %12s\n", "variant", "ms(min)", "ms(mean)", "GB/s", "%copy",
           "mismatches");
    int failed = 0;
    for (const Result &r : results) {
        printf("%-12s %10.3f %10.3f %10.1f %7.1f%% %12lld\n", r.name, r.ms_min, r.ms_mean, r.gbps,
               100.0 * r.gbps / copy_gbps, r.mismatches);
        if (r.mismatches > 0) failed = 1;
    }
    printf("(GB/s = bytes read + written / best time; mismatches -1 = timed only; the H200's "
           "copy rate is ~4100-4300 GB/s)\n");
    printf("%s\n", failed ? "RESULT: FAIL (a variant differs from the CPU reference)" : "RESULT: OK");

    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (f) {
            fprintf(f, "{\n  \"device\": \"%s\",\n  \"q8_0_blocks\": %lld,\n  \"ok\": %s,\n  \"results\": [\n",
                    prop.name, (long long)n_blocks, failed ? "false" : "true");
            for (size_t i = 0; i < results.size(); i++) {
                const Result &r = results[i];
                fprintf(f, "    {\"name\": \"%s\", \"ms_min\": %.4f, \"ms_mean\": %.4f, \"gbps\": %.1f, "
                        "\"frac_of_copy\": %.3f, \"mismatches\": %lld}%s\n", r.name, r.ms_min,
                        r.ms_mean, r.gbps, r.gbps / copy_gbps, r.mismatches,
                        i + 1 < results.size() ? "," : "");
            }
            fprintf(f, "  ]\n}\n");
            fclose(f);
        }
    }
    CK(cudaFree(d_src));
    CK(cudaFree(d_dst));
    CK(cudaFree(d_lib));
    CK(cudaFree(d_count));
    return failed;
}
