/* route_tail.h - st_route_tail_row: the route tail skip's rule on one token's routed slots, one
 * function for the CPU (c/experts/degrade.c) and the GPU (c/cuda/moe_router.cu's kernel), so that both
 * drop the same slots for the same weights. The slots are taken lightest first (ties: the later
 * slot first) and dropped (id -1) while the dropped weights sum to at most p; the heaviest slot is
 * never dropped, wts is never written; slots already -1 are passed over. k <= 64. Returns the
 * slots dropped. */
#ifndef STRATA_ROUTE_TAIL_H
#define STRATA_ROUTE_TAIL_H

#include <stdint.h>

#if defined(__CUDACC__)
#define ST_TAIL_FN static __host__ __device__ __forceinline__
#else
#define ST_TAIL_FN static inline
#endif

ST_TAIL_FN int st_route_tail_row(int32_t *id, const float *w, int k, float p) {
    int order[64]; /* slots lightest first; ties: the later slot first */
    for (int s = 0; s < k; s++) {
        int j = s;
        while (j > 0 && (w[order[j - 1]] > w[s] || (w[order[j - 1]] == w[s] && order[j - 1] < s))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = s;
    }
    float sum = 0.0f;
    int dropped = 0;
    for (int q = 0; q < k - 1; q++) { /* order[k - 1], the heaviest, always stays */
        const int s = order[q];
        if (id[s] < 0) continue;
        if (sum + w[s] > p) break;
        sum += w[s];
        id[s] = -1;
        dropped++;
    }
    return dropped;
}

#endif /* STRATA_ROUTE_TAIL_H */
