/* q8_sm60_check.cu - check-and-time program for the SM60 Q8_0 decode GEMV (c/cuda/q8_sm60.cu,
 * q8_sm60 / STRATA_Q8_SM60=1): on the dense Q8_0 shapes of the supported architectures it serves
 * (attention projections and output heads of Qwen3-30B-A3B, OLMoE-1B-7B, Mixtral-8x7B,
 * Qwen1.5-MoE-A2.7B and Granite-3.0 1B/3B MoE; a dense FFN's SwiGLU; DeepSeek-V2-Lite is not an
 * architecture Strata loads) at 1-8 columns, it checks the kernel against a double-precision CPU
 * reference (max |err| / max |ref| per column < 1e-5 of the exact int32 block sums times the scales;
 * c/tests/q8_sm60_case.h, shared with test_cuda_mmv), then times it and the usual kernels on the
 * same matrices. GB/s: packed weights + Q8_1 activations + y per call over the mean time of
 * ITERS calls (host clock around a synchronized loop; matrices smaller than the L2 are read from
 * it, so the heads and Mixtral's rows are the meaningful bandwidth figures). Without a usable GPU it
 * prints why and exits 0 (a skip).
 *
 * Build (from the repository root; a CUDA build of the library first, with the card's arch, and
 * NVCC_EXTRA=-DSTRATA_NO_DP4A=1 to test the form without dp4a on any card):
 *   make CUDA_ARCH=90 BUILD=build OUTDIR=. build/libstrata.a
 *   nvcc -O3 -std=c++17 -arch=sm_90 -DSTRATA_HAVE_CUDA=1 -Ic/include -Ic/core -Ic/format/quant \
 *        -Ic/cuda -Ic/tests tools/q8_sm60_check.cu build/libstrata.a -o /tmp/q8_sm60_check \
 *        -lpthread -ldl -lrt
 * or `make q8-sm60-check` (builds $(BUILD)/q8_sm60_check and runs it).
 * Run:  /tmp/q8_sm60_check [ITERS [BPS]]   (ITERS default 50; BPS: persistent blocks per SM,
 *       default 4, as a session's --q8-sm60-bps). Exit status 1 when a check fails. */
extern "C" {
#include "strata.h"
#include "common.h" /* st_f32_to_fp16, st_fp16_to_f32 */
#include "cuda_backend.h"
#include "cuda_mmq.h"
#include "cuda_mmv.h"
}
#include "q8_sm60_case.h"

#include <stdio.h>
#include <stdlib.h>

struct q8s_shape {
    const char *name;
    int64_t ne0, ne1;
    int fused;
};

static const q8s_shape shapes[] = {
    {"qwen3-30b-a3b attn_q", 2048, 4096, 0},  {"qwen3-30b-a3b attn_k/v", 2048, 512, 0},
    {"qwen3-30b-a3b attn_o", 4096, 2048, 0},  {"qwen3-30b-a3b output", 2048, 151936, 0},
    {"olmoe attn_q/k/v/o", 2048, 2048, 0},    {"olmoe output", 2048, 50304, 0},
    {"mixtral attn_q/o", 4096, 4096, 0},      {"mixtral attn_k/v", 4096, 1024, 0},
    {"mixtral output", 4096, 32000, 0},       {"qwen1.5-moe attn_q/k/v/o", 2048, 2048, 0},
    {"qwen1.5-moe output", 2048, 151936, 0},  {"granite-moe-1b attn_q/o", 1024, 1024, 0},
    {"granite-moe-1b attn_k/v", 1024, 512, 0}, {"granite-moe-1b output", 1024, 49155, 0},
    {"granite-moe-3b attn_q/o", 1536, 1536, 0}, {"granite-moe-3b output", 1536, 49155, 0},
    {"dense ffn gate/up (swiglu)", 2048, 5632, 1}, {"dense ffn down", 5632, 2048, 0},
};

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 50;
    if (argc > 2) q8s_case_bps = atoi(argv[2]);
    int ok = 0;
    char why[256];
    if (st_cuda_probe(&ok, why, sizeof why) != STRATA_OK || !ok) {
        printf("skip: no usable GPU (%s)\n", why);
        return 0;
    }
    printf("device: %s\n", why);
    printf("%-28s %6s %7s %2s  %-8s %9s %9s %8s %9s\n", "shape", "ne0", "ne1", "nc", "kernel", "max_rel",
           "us", "GB/s", "usual_us");
    int fails = 0, n = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const q8s_shape &s = shapes[k];
        for (int nc = 1; nc <= 8; nc++) {
            const q8s_result r = q8s_run(s.ne0, s.ne1, nc, s.fused, 0xC0FFEEULL + 131 * k + (uint64_t)nc, iters);
            const bool good = r.st == STRATA_OK && r.max_rel < 1e-5 && !r.unwritten && !r.guard_bad &&
                              (r.taken || r.usual_diff == 0);
            fails += !good;
            n++;
            printf("%-28s %6lld %7lld %2d  %-8s %9.2e %9.2f %8.1f %9.2f%s\n", s.name, (long long)s.ne0,
                   (long long)s.ne1, nc, r.taken ? "sm60" : "declined", r.max_rel, r.us, r.gbs, r.us_usual,
                   good ? "" : "  FAIL");
            if (r.st != STRATA_OK) printf("  error: %s\n", strata_last_error());
            if (r.unwritten || r.guard_bad || r.usual_diff)
                printf("  %d unwritten, %d guard words changed, %d outputs differ from the usual kernel\n",
                       r.unwritten, r.guard_bad, r.usual_diff);
        }
    }
    printf("%d of %d cases pass\n", n - fails, n);
    return fails ? 1 : 0;
}
