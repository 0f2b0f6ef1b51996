/* test_cuda_split.c - the layer split of a CUDA session (issue 36, c/engine/cuda/stages.c,
 * docs/MULTI_GPU.md) against the unsplit session: on one card, stages on the same device repeated
 * (split_device 0,0 and 0,0,0) must give the unsplit logits BIT FOR BIT, since each layer runs the
 * same kernels: a prompt (one call of 40 tokens: the prompt tiles; and in calls of 7: the GEMV),
 * then decode steps (CUDA graphs on: each stage its own), a verify window of 5 rolled back to its
 * first 2 tokens, and more steps after the rollback. Models: the trained default model
 * (models/strata-tiny-moe-q8_0.gguf, Q8_0), a random qwen3moe (f32, 4 layers) and a random
 * deepseek2 (latent attention, 2 leading dense layers). With two or more devices the same runs over
 * devices 0,1 (a peer copy or the pinned host rows); with fewer that part skips, saying so; a split
 * over a device that is not there is refused naming it. With n_cpu_moe (the first layers' routed
 * experts on the CPU, each stage that holds some handing them down itself) the split must give
 * the unsplit n_cpu_moe session's bits: a count inside the first stage (the host hand-off alone),
 * one that crosses into the second (prompt batches of 32 or more staged to each stage's slots,
 * the decode split by its default, auto: the CPU's bits whatever the share), and every layer's
 * (cpu_moe) over three stages with cpu_warm. With expert_cache each stage has a cache of its own
 * for its layers (compare_split_cache: the unsplit session with one cache of their total slots,
 * the same bits; with gpu_prefetch, auto, cpu_misses where its split is exact, n_cpu_moe). In CUDA builds, with or without a GPU: the
 * session's tile figures (st_gpu_tiles_stats) of a split are its stages' sums, on states made by
 * hand. Without a usable GPU everything else skips. */
#include "model_build.h"
#include "strata.h"
#include "test.h"

#ifdef STRATA_HAVE_CUDA
#include "forward_cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NP = 40, NS = 6, NW = 5, NKEEP = 2, NA = 4 }; /* prompt, steps, window, kept, steps after */
#define ROWS (NP + NS + NW + NA)

/* Every logit row of the sequence: the prompt (calls of `chunk` tokens, all rows), NS decode
 * steps, a verify window of NW (all rows) of which NKEEP are kept (truncate), NA steps after. */
static strata_status run(const strata_model *m, const strata_session_params *sp, int chunk, int32_t V,
                         float *out, strata_session_stats *stats) {
    strata_token toks[ROWS];
    for (int i = 0; i < ROWS; i++) toks[i] = (strata_token)((i * 37 + 11) % (V > 1 ? V - 1 : 1) + 1);
    strata_session *s = NULL;
    strata_status st = strata_session_create(m, sp, &s);
    if (st != STRATA_OK) return st;
    int64_t r = 0;
    while (r < NP && st == STRATA_OK) { /* (r moves by the call's own n: NP need not divide by chunk) */
        const int64_t n = NP - r < chunk ? NP - r : chunk;
        st = strata_session_decode(s, toks + r, n, out + (size_t)r * V, 1);
        r += n;
    }
    for (int i = 0; i < NS && st == STRATA_OK; i++, r++)
        st = strata_session_decode_gen(s, toks + r, 1, out + (size_t)r * V, 0);
    if (st == STRATA_OK) st = strata_session_decode_gen(s, toks + r, NW, out + (size_t)r * V, 1);
    if (st == STRATA_OK) st = strata_session_truncate(s, (int32_t)(NP + NS + NKEEP));
    r += NW;
    for (int i = 0; i < NA && st == STRATA_OK; i++, r++) /* after the rollback: the window's tail again */
        st = strata_session_decode_gen(s, toks + NP + NS + NKEEP + i, 1, out + (size_t)r * V, 0);
    if (stats && st == STRATA_OK) st = strata_session_get_stats(s, stats);
    strata_session_free(s);
    return st;
}

static strata_session_params base_params(void) {
    strata_session_params sp = strata_session_default_params();
    sp.backend = STRATA_BACKEND_CUDA;
    sp.n_ctx = 128;
    sp.n_batch = 64;
    sp.n_threads = 2;
    sp.cuda.graphs = 1;
    return sp;
}

/* The CPU layers' options of a comparison (both sessions): n_cpu_moe 0 for none. */
typedef struct {
    int32_t n_cpu_moe, stage_experts;
    int cpu_misses, cpu_warm;
} cpu_opts;

static const cpu_opts NO_CPU = {0, -1, -1, 0};

/* The split over devices dev[0..n-1] (layers as even as the count allows) against the unsplit run,
 * both with the CPU layers of co. */
static void compare_split_cpu(const char *what, const strata_model *m, int n, const int32_t *dev, int chunk,
                              const cpu_opts *co) {
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int32_t V = mi.n_vocab, L = mi.n_layer;
    /* a guard row after the ROWS rows of each: no call may write past them */
    float *a = calloc((size_t)(ROWS + 1) * V, sizeof *a), *b = calloc((size_t)(ROWS + 1) * V, sizeof *b);
    for (size_t i = (size_t)ROWS * V; i < (size_t)(ROWS + 1) * V; i++) a[i] = b[i] = -12345.0f;
    strata_session_params sp = base_params();
    sp.placement.n_cpu_moe = co->n_cpu_moe;
    sp.placement.stage_experts = co->stage_experts;
    sp.placement.cpu_misses = co->cpu_misses;
    sp.placement.cpu_warm = co->cpu_warm;
    strata_status st = run(m, &sp, chunk, V, a, NULL);
    CHECK(st == STRATA_OK, "%s: unsplit run: %s", what, strata_last_error());
    sp.split.n_stages = n;
    for (int i = 0; i < n; i++) {
        sp.split.layers[i] = L / n + (i < L % n);
        sp.split.device[i] = dev[i];
    }
    const strata_status st2 = run(m, &sp, chunk, V, b, NULL);
    CHECK(st2 == STRATA_OK, "%s: split run: %s", what, strata_last_error());
    if (st == STRATA_OK && st2 == STRATA_OK) {
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < (size_t)ROWS * V; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && diff++ == 0) first = i;
        CHECK(diff == 0, "%s (%d stages, chunk %d, n_cpu_moe %d): %zu logits differ in bits, the first at row "
              "%zu (%g vs %g)", what, n, chunk, (int)co->n_cpu_moe, diff, first / (size_t)V, (double)a[first],
              (double)b[first]);
    }
    size_t over = 0;
    for (size_t i = (size_t)ROWS * V; i < (size_t)(ROWS + 1) * V; i++) over += a[i] != -12345.0f || b[i] != -12345.0f;
    CHECK(over == 0, "%s (%d stages, chunk %d): %zu logits written past the %d rows", what, n, chunk, over, ROWS);
    free(a);
    free(b);
}

static void compare_split(const char *what, const strata_model *m, int n, const int32_t *dev, int chunk) {
    compare_split_cpu(what, m, n, dev, chunk, &NO_CPU);
}

/* n_cpu_moe under a split of two stages on device 0 (three for cpu_moe), each against the unsplit
 * session with the same options. */
static void check_cpu_moe(const char *what, const strata_model *m) {
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int32_t L = mi.n_layer, same2[2] = {0, 0}, same3[3] = {0, 0, 0};
    if (L < 4) {
        SKIP("%s: n_cpu_moe under a split needs 4 layers (a count inside stage 0 and one past it); %d", what,
             (int)L);
        return;
    }
    const cpu_opts inside = {1, 0, 0, 0};                  /* stage 0's first layer; the host hand-off */
    const cpu_opts across = {(L + 1) / 2 + 1, 32, -1, 0}; /* into stage 1; staging, the decode split */
    const cpu_opts all = {-1, 0, 0, 1};                    /* cpu_moe; cpu_warm within each stage */
    compare_split_cpu(what, m, 2, same2, NP, &inside);
    compare_split_cpu(what, m, 2, same2, 7, &inside);
    compare_split_cpu(what, m, 2, same2, NP, &across);
    compare_split_cpu(what, m, 2, same2, 7, &across);
    compare_split_cpu(what, m, 3, same3, NP, &all);
}

/* An expert cache per stage (split.expert_cache; docs/MULTI_GPU.md), against the unsplit session
 * with one cache of the stages' total slots: the same bits. The cache's kernels read each expert
 * through a table of descriptors pointing into its slots (moe_block.c's CACHED mode, the grouped
 * kernel of the resident mode over another table), so a layer's values do not depend on which
 * experts are resident, nor where, nor on the evictions each cache's slot book made: the split's
 * smaller caches give the unsplit cache's bits. With cpu_misses that holds where the split of the
 * misses is exact (stats cache_split 1: calls of up to 8 tokens compute every slot, hit or miss, in
 * the CPU's arithmetic, commit 886c6f1), so those runs feed the prompt in calls of 7 (every call
 * decode-sized) and are compared only there; elsewhere (cache_split 2) the bits follow the
 * residency and the share, and the case skips. */
typedef struct {
    int n, chunk;            /* stages, prompt call size */
    int32_t cache[3];        /* expert_cache (stage 0's), expert_cache_device1, 2 (0: the default) */
    int cpu_misses, prefetch;
    int32_t n_cpu_moe;
} cache_case;

static void compare_split_cache(const char *what, const strata_model *m, const cache_case *cc) {
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int32_t V = mi.n_vocab, L = mi.n_layer;
    float *a = calloc((size_t)(ROWS + 1) * V, sizeof *a), *b = calloc((size_t)(ROWS + 1) * V, sizeof *b);
    strata_session_params sp = base_params();
    sp.placement.expert_cache = cc->cache[0];
    sp.placement.cpu_misses = cc->cpu_misses;
    sp.placement.gpu_prefetch = cc->prefetch;
    sp.placement.n_cpu_moe = cc->n_cpu_moe;
    sp.placement.stage_experts = 0;
    sp.split.n_stages = cc->n;
    for (int i = 0; i < cc->n; i++) {
        sp.split.layers[i] = L / cc->n + (i < L % cc->n);
        sp.split.device[i] = 0;
        if (i > 0) sp.split.expert_cache[i] = cc->cache[i];
    }
    strata_session_stats ss, us;
    memset(&ss, 0, sizeof ss);
    memset(&us, 0, sizeof us);
    strata_status st = run(m, &sp, cc->chunk, V, b, &ss);
    CHECK(st == STRATA_OK, "%s: split run with caches %d,%d,%d: %s", what, (int)cc->cache[0], (int)cc->cache[1],
          (int)cc->cache[2], strata_last_error());
    if (st == STRATA_OK && cc->cpu_misses && ss.cache_split != 1) {
        SKIP("%s: cpu_misses with per-stage caches: the split is not exact here (cache_split %d), its bits follow "
             "the residency", what, (int)ss.cache_split);
        free(a);
        free(b);
        return;
    }
    /* the caches are there and used: at least one layer's experts, every stage's look-ups counted */
    CHECK(st != STRATA_OK || (ss.expert_cache_slots >= mi.n_expert && ss.expert_cache_hits + ss.expert_cache_misses > 0),
          "%s: split caches: %d slots, %lld hits, %lld misses", what, (int)ss.expert_cache_slots,
          (long long)ss.expert_cache_hits, (long long)ss.expert_cache_misses);
    strata_session_params up = sp; /* the unsplit session: one cache of the stages' total slots */
    up.split = strata_session_default_params().split;
    up.placement.expert_cache = ss.expert_cache_slots;
    const strata_status st2 = st == STRATA_OK ? run(m, &up, cc->chunk, V, a, &us) : st;
    CHECK(st2 == STRATA_OK, "%s: unsplit run with %d slots: %s", what, (int)ss.expert_cache_slots, strata_last_error());
    if (st == STRATA_OK && st2 == STRATA_OK) {
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < (size_t)ROWS * V; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && diff++ == 0) first = i;
        CHECK(diff == 0, "%s (%d stages, caches %d,%d,%d, chunk %d, cpu_misses %d, prefetch %d, n_cpu_moe %d): %zu "
              "logits differ in bits from the unsplit %d-slot cache's, the first at row %zu (%g vs %g)", what, cc->n,
              (int)cc->cache[0], (int)cc->cache[1], (int)cc->cache[2], cc->chunk, cc->cpu_misses, cc->prefetch,
              (int)cc->n_cpu_moe, diff, (int)ss.expert_cache_slots, first / (size_t)V, (double)a[first],
              (double)b[first]);
        CHECK(us.expert_cache_slots == ss.expert_cache_slots, "%s: unsplit slots %d, the split's %d", what,
              (int)us.expert_cache_slots, (int)ss.expert_cache_slots);
    }
    free(a);
    free(b);
}

/* Per-stage expert caches: stage 0 one layer's experts (evictions all along), stage 1 by default
 * (scaled by its MoE layers) or named; prefetch within each stage; auto over three stages sharing
 * the card; cpu_misses (exact split, calls of 7); with n_cpu_moe 1 (stage 0's first layer on the
 * CPU, the rest cached). */
static void check_caches(const char *what, const strata_model *m) {
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    const int32_t X = mi.n_expert;
    if (X <= 0) return;
    const cache_case cases[] = {
        {2, NP, {X, 0, 0}, 0, 0, 0},
        {2, 7, {X, X + X / 2, 0}, 0, 1, 0},
        {3, NP, {-1, 0, 0}, 0, 0, 0},
        {2, 7, {X, X, 0}, 1, 0, 0},
        {2, NP, {X, 0, 0}, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) compare_split_cache(what, m, &cases[i]);
}

static void check_model(const char *what, const strata_model *m, int n_dev) {
    const int32_t same2[2] = {0, 0}, same3[3] = {0, 0, 0}, two[2] = {0, 1};
    compare_split(what, m, 2, same2, NP);
    compare_split(what, m, 2, same2, 7);
    compare_split(what, m, 3, same3, NP);
    check_cpu_moe(what, m);
    check_caches(what, m);
    if (n_dev >= 2) compare_split(what, m, 2, two, NP);
    else SKIP("%s: a split over devices 0,1 needs two GPUs; this machine has %d", what, n_dev);
}

static strata_model *load(const char *path) {
    strata_model *m = NULL;
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = 2;
    if (strata_model_load(path, &mp, &m) != STRATA_OK) {
        CHECK(0, "load %s: %s", path, strata_last_error());
        return NULL;
    }
    return m;
}

/* deepseek2 as test_dense_lead.c writes it: 4 layers, the first 2 dense. */
static int write_deepseek2(const char *path) {
    static const mla_spec S = {.n_embd = 64, .n_head = 4, .kv_lora = 32, .n_rot = 16, .qk_nope = 16, .v_head = 16,
                               .n_ff = 96, .n_ff_exp = 32, .n_expert = 16, .n_dense = 2};
    f32_file f;
    if (!f32_file_create(&f, path, 0x5DEECE66DULL)) return 0;
    st_gguf_writer *w = f.w;
    const struct { const char *k; uint32_t v; } keys[] = {
        {"deepseek2.context_length", 256}, {"deepseek2.embedding_length", 64}, {"deepseek2.block_count", 4},
        {"deepseek2.feed_forward_length", 96}, {"deepseek2.expert_feed_forward_length", 32},
        {"deepseek2.expert_count", 16}, {"deepseek2.expert_used_count", 4}, {"deepseek2.expert_shared_count", 1},
        {"deepseek2.leading_dense_block_count", 2}, {"deepseek2.expert_gating_func", 2}};
    st_gguf_writer_set_str(w, "general.architecture", "deepseek2");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) st_gguf_writer_set_u32(w, keys[i].k, keys[i].v);
    mla_write_attn_keys(w, &S);
    st_gguf_writer_set_f32(w, "deepseek2.attention.layer_norm_rms_epsilon", 1e-6f);
    st_gguf_writer_set_f32(w, "deepseek2.rope.freq_base", 10000.0f);
    st_gguf_writer_set_f32(w, "deepseek2.expert_weights_scale", 2.5f);
    st_gguf_writer_set_bool(w, "deepseek2.expert_weights_norm", 1);
    int ok = f32_add(&f, "token_embd.weight", 64, 64, 1, 0.5f, 0.0f) &&
             f32_add(&f, "output_norm.weight", 64, 1, 1, 0.1f, 1.0f) &&
             f32_add(&f, "output.weight", 64, 64, 1, 0.2f, 0.0f);
    for (int il = 0; il < 4 && ok; il++) ok = mla_add_layer(&f, &S, il);
    return f32_file_finish(&f, ok, "deepseek2");
}

static void test_models(int n_dev) {
    const char *tiny = "models/strata-tiny-moe-q8_0.gguf";
    strata_model *m = NULL;
    if (access(tiny, R_OK) != 0) SKIP("%s not found (run from the repository root)", tiny);
    else if ((m = load(tiny))) check_model("tiny-moe q8_0", m, n_dev);
    strata_model_free(m);

    char path[64];
    snprintf(path, sizeof path, "/tmp/strata_split_%d.gguf", (int)getpid());
    spec s = base_spec("qwen3moe");
    s.n_layer = 4;
    s.head_dim = 64; /* what the GPU attention takes */
    s.n_vocab = 64;
    if (write_model(&s, path) && (m = load(path))) check_model("qwen3moe f32", m, n_dev);
    strata_model_free(m);
    m = NULL;
    if (write_deepseek2(path) && (m = load(path))) check_model("deepseek2 mla", m, n_dev);
    strata_model_free(m);
    unlink(path);
}

/* A split over a device that is not there: refused at create, naming it. */
static void test_missing_device(int n_dev) {
    strata_session_params sp = base_params();
    const char *tiny = "models/strata-tiny-moe-q8_0.gguf";
    strata_model *m = access(tiny, R_OK) == 0 ? load(tiny) : NULL;
    if (!m) return;
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    sp.split.n_stages = 2;
    sp.split.layers[0] = mi.n_layer - 1, sp.split.layers[1] = 1;
    sp.split.device[0] = 0, sp.split.device[1] = n_dev;
    strata_session *s = NULL;
    const strata_status st = strata_session_create(m, &sp, &s);
    char want[96];
    snprintf(want, sizeof want, "split_device %d of stage 1: no such CUDA device", n_dev);
    CHECK(st == STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), want), "got %d '%s'", (int)st,
          strata_last_error());
    strata_session_free(s);
    strata_model_free(m);
}

#ifdef STRATA_HAVE_CUDA
/* st_gpu_tiles_stats (the q8_tiles / q8_sm60 figures of strata_session_stats) without a device:
 * stage states with counts of their own by hand, first alone (an unsplit session: its own), then
 * as three stages of one split (every stage's counted, not stage 0's alone). */
static void test_tiles_stats(void) {
    strata_session *s = calloc(1, sizeof *s);
    st_gpu *g[3] = {calloc(1, sizeof(st_gpu)), calloc(1, sizeof(st_gpu)), calloc(1, sizeof(st_gpu))};
    if (!s || !g[0] || !g[1] || !g[2]) {
        CHECK(0, "tiles stats: out of memory");
        free(s); free(g[0]); free(g[1]); free(g[2]);
        return;
    }
    for (int i = 0; i < 3; i++) {
        g[i]->tiles_bytes = (size_t)1000 << i;
        g[i]->tiles_skipped = i + 1;
        g[i]->sm60_mats = 10 * (i + 1);
    }
    int64_t bytes = -1;
    int32_t skipped = -1, sm60 = -1;
    st_gpu_tiles_stats(s, &bytes, &skipped, &sm60);
    CHECK(bytes == 0 && skipped == 0 && sm60 == 0, "tiles stats, no GPU state: %lld %d %d", (long long)bytes,
          (int)skipped, (int)sm60);
    s->gpu = g[0];
    st_gpu_tiles_stats(s, &bytes, &skipped, &sm60);
    CHECK(bytes == 1000 && skipped == 1 && sm60 == 10, "tiles stats, unsplit: %lld %d %d", (long long)bytes,
          (int)skipped, (int)sm60);
    if (st_gpu_stages_new(g[0], 3) == STRATA_OK) {
        st_gpu_stages_put(g[0]->stages, 1, g[1]);
        st_gpu_stages_put(g[0]->stages, 2, g[2]);
        st_gpu_tiles_stats(s, &bytes, &skipped, &sm60);
        CHECK(bytes == 7000 && skipped == 6 && sm60 == 60,
              "tiles stats, 3 stages: %lld bytes, %d skipped, %d sm60 (want 7000, 6, 60: every stage's)",
              (long long)bytes, (int)skipped, (int)sm60);
    } else {
        CHECK(0, "stages table: %s", strata_last_error());
    }
    free(g[0]->stages); /* (the table alone: calloc'd, nothing in it to release) */
    free(g[0]); free(g[1]); free(g[2]);
    free(s);
}
#endif

int main(void) {
#ifdef STRATA_HAVE_CUDA
    test_tiles_stats();
#endif
    strata_backend_info bi;
    int32_t n_dev = 0;
    if (strata_backend_query(STRATA_BACKEND_CUDA, &bi) != STRATA_OK || !bi.available ||
        strata_cuda_device_count(&n_dev) != STRATA_OK || n_dev < 1) {
        SKIP("no usable CUDA device: %s", bi.detail);
        return test_report();
    }
    test_models((int)n_dev);
    test_missing_device((int)n_dev);
    return test_report();
}
