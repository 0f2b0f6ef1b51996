/* route_scored.cuh - the scored routing of one token on the device (st_route_scored of
 * c/compute/cpu/ops_moe.c, DeepSeek's router): softmax or sigmoid scores, a selection bias added
 * for the choice only, group-limited top-k (the n_group_used groups with the best sum of their
 * top two selection scores), the chosen unbiased scores as weights (gpt-oss: the logits choose,
 * the weights are a softmax over the k chosen), renormalized (sum clamped at 2^-14) and scaled. Included by moe_router.cu only (its router kernels call st_moe_route_scored_row);
 * st_route_better / st_route_key come from there. */
#ifndef STRATA_ROUTE_SCORED_CUH
#define STRATA_ROUTE_SCORED_CUH

#define ST_ROUTE_SCORED_MAX_EXPERT 2048 /* dynamic shared memory: 12 bytes an expert */
#define ST_ROUTE_MAX_GROUPS 64

/* A layer's routing rule as the kernels take it (by value). by_logit: softmax without bias or
 * groups but with a scale: the selection by logits as st_route_topk's (the CPU's path there),
 * no clamp of the sum. */
struct st_route_dev {
    int n_expert, k, norm, sigmoid, n_groups, n_group_used, by_logit;
    int softmax_weight; /* gpt-oss: scores are the logits; the k weights a softmax of theirs */
    float scale;
    const float *bias; /* [n_expert] or NULL */
    const float *logit_bias; /* [n_expert] or NULL: st_k_moe_router1 adds it to its logits */
};

/* The float a rank key (st_route_key) was made of (-0 comes back as +0, NaN as a NaN). */
static __device__ __forceinline__ float st_route_key_value(unsigned long long key) {
    const uint32_t hi = (uint32_t)(key >> 32);
    return __uint_as_float((hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi);
}

/* The best two of (a, b) and (c, d) (each pair best first): the top two of the four values. */
static __device__ __forceinline__ void st_route_top2_merge(float &a, float &b, float c, float d) {
    const float hi = a > c ? a : c, lo = a > c ? c : a;
    const float nb = d > b ? d : b;
    a = hi;
    b = lo > nb ? lo : nb;
}

/* Groups: each group's top-two sum of the selection scores (a warp a group), then the
 * n_group_used best groups (ties: lower index) by one thread; the keys of the other groups' experts
 * set to 0 (below every candidate). */
static __device__ __forceinline__ void st_route_groups_dev(const st_route_dev &c, unsigned long long *s_key) {
    __shared__ float s_gs[ST_ROUTE_MAX_GROUPS];
    __shared__ int s_keep[ST_ROUTE_MAX_GROUPS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int G = c.n_groups, per = c.n_expert / G;
    for (int g = warp; g < G; g += nw) {
        float a = -INFINITY, b = -INFINITY;
        for (int i = lane; i < per; i += 32) {
            const unsigned long long kk = s_key[g * per + i]; /* 0: no candidate (-inf) */
            st_route_top2_merge(a, b, kk ? st_route_key_value(kk) : -INFINITY, -INFINITY);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float oa = __shfl_xor_sync(0xffffffffu, a, o), ob = __shfl_xor_sync(0xffffffffu, b, o);
            st_route_top2_merge(a, b, oa, ob);
        }
        if (lane == 0) { s_gs[g] = a + b; s_keep[g] = 0; }
    }
    __syncthreads();
    if (tid == 0)
        for (int s = 0; s < c.n_group_used; s++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!s_keep[g] && (best < 0 || s_gs[g] > s_gs[best])) best = g;
            s_keep[best] = 1;
        }
    __syncthreads();
    for (int e = tid; e < c.n_expert; e += blockDim.x)
        if (!s_keep[e / per]) s_key[e] = 0ull;
    __syncthreads();
}

/* Token t's routing from its n_expert logits at l (read through L2, as st_moe_route_row), by one
 * CTA; dynamic shared memory: n_expert 64-bit keys, then n_expert float scores. */
static __device__ __forceinline__ void st_moe_route_scored_row(const float *l, const st_route_dev &c, int64_t t,
                                                               int32_t *ids0, float *wts0, int32_t *ids1,
                                                               float *wts1) {
    extern __shared__ unsigned long long s_keys[];
    unsigned long long *s_key = s_keys;
    float *s_p = (float *)(s_keys + c.n_expert);
    __shared__ float s_rv[ST_ROUTE_THREADS / 32];
    __shared__ double s_rs[ST_ROUTE_THREADS / 32];
    __shared__ float s_mx;
    __shared__ double s_sum;
    __shared__ int s_ids[ST_ROUTE_MAX_K];
    __shared__ float s_w[ST_ROUTE_MAX_K];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int X = c.n_expert;

    if (c.sigmoid) {
        for (int e = tid; e < X; e += blockDim.x) s_p[e] = 1.0f / (1.0f + expf(-__ldcg(l + e)));
    } else if (c.softmax_weight) { /* the logits choose; the softmax over the chosen below */
        for (int e = tid; e < X; e += blockDim.x) s_p[e] = __ldcg(l + e);
    } else { /* softmax as st_moe_route_row: max, then the sum of exp in double */
        float mx = -INFINITY;
        for (int e = tid; e < X; e += blockDim.x) {
            const float v = __ldcg(l + e);
            s_p[e] = v;
            mx = v > mx ? v : mx;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float w = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = w > mx ? w : mx;
        }
        if (lane == 0) s_rv[warp] = mx;
        __syncthreads();
        if (tid == 0) {
            float m = -INFINITY;
            for (int w = 0; w < nw; w++) m = s_rv[w] > m ? s_rv[w] : m;
            s_mx = m;
        }
        __syncthreads();
        mx = s_mx;
        double sum = 0.0;
        for (int e = tid; e < X; e += blockDim.x) sum += (double)expf(s_p[e] - mx);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) s_rs[warp] = sum;
        __syncthreads();
        if (tid == 0) {
            double s = 0.0;
            for (int w = 0; w < nw; w++) s += s_rs[w];
            s_sum = s;
        }
        __syncthreads();
        for (int e = tid; e < X; e += blockDim.x) { /* each thread rewrites only its own entries */
            const float v = s_p[e];
            if (c.by_logit) s_key[e] = st_route_key(v, e);
            s_p[e] = (float)((double)expf(v - mx) / s_sum);
        }
    }
    if (!c.by_logit) /* selection scores: score + bias; -inf is no candidate (the CPU skips it) */
        for (int e = tid; e < X; e += blockDim.x) {
            const float sel = s_p[e] + (c.bias ? c.bias[e] : 0.0f);
            s_key[e] = sel == -INFINITY ? 0ull : st_route_key(sel, e);
        }
    __syncthreads();
    if (c.n_groups > 1) st_route_groups_dev(c, s_key);

    /* top-k: an expert's rank is the count of larger keys (keys are distinct: the index is in
     * them); key 0 is no candidate */
    for (int e = tid; e < X; e += blockDim.x) {
        const unsigned long long ke = s_key[e];
        if (ke == 0ull) continue;
        int rank = 0;
        for (int j = 0; j < X && rank < c.k; j++) rank += s_key[j] > ke;
        if (rank < c.k) s_ids[rank] = e;
    }
    __syncthreads();
    if (tid < c.k) s_w[tid] = s_p[s_ids[tid]];
    __syncthreads();
    if (tid < c.k) { /* the sum in slot order by each thread, as the CPU's loop */
        float v = s_w[tid];
        if (c.softmax_weight) { /* softmax over the k chosen logits, as st_route_scored */
            float mx = s_w[0], tot = 0.0f;
            for (int s = 1; s < c.k; s++) mx = s_w[s] > mx ? s_w[s] : mx;
            for (int s = 0; s < c.k; s++) tot = __fadd_rn(tot, expf(s_w[s] - mx));
            v = __fdiv_rn(expf(v - mx), tot);
        }
        if (c.norm) {
            float tot = 0.0f;
            for (int s = 0; s < c.k; s++) tot = __fadd_rn(tot, s_w[s]);
            if (!c.by_logit && tot < 6.103515625e-5f) tot = 6.103515625e-5f; /* llama.cpp's clamp */
            v = __fdiv_rn(v, tot);
        }
        if (c.scale != 1.0f) v = __fmul_rn(v, c.scale);
        const int64_t o = t * c.k + tid;
        if (ids0) { ids0[o] = s_ids[tid]; wts0[o] = v; }
        if (ids1) { ids1[o] = s_ids[tid]; wts1[o] = v; }
    }
}

#endif /* STRATA_ROUTE_SCORED_CUH */
