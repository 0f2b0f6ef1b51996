/* test_dense_lead.c - expert placement of a model whose first layers are dense (deepseek2's
 * leading_dense_block_count): a synthetic deepseek2 file (random f32 weights through the GGUF
 * writer: latent attention, 2 dense layers then 2 MoE layers of 16 experts in 4 groups of which 2
 * are used, sigmoid scores with a selection bias, top-4 renormalized x2.5, one ungated shared
 * expert) run by CPU sessions:
 *   - the RAM tier (ram_budget of 5 expert slots: misses read from the file) gives the logits of
 *     all-resident experts bit for bit, for a prompt and token-by-token steps, with the misses
 *     and look-ups counted for the 2 MoE layers only (tokens x k x 2: the dense layers route
 *     nothing);
 *   - the GPU memory fit (st_session_fit_gpu_mem) counts layer indices as llama.cpp's
 *     --n-cpu-moe: over a range of budgets it gives 0 (all on the GPU), 3 (the dense layers and
 *     layer 2) or every layer, never a split that ends among the dense layers;
 *   - st_layer_has_experts and the layer counts of model.h;
 *   - the latent KV cache's bytes a token in the session stats (kv_lora + rope a layer, no V).
 * GPU half (where CUDA is usable and the session is not refused for latent attention):
 * --n-cpu-moe 2 (only dense layers on the "CPU") bit-identical to all on the GPU, and the
 * GPU's greedy tokens equal to the CPU's over the prompt. */
#include "test.h"
#include "strata.h"
#include "gguf_writer.h"
#include "model.h"
#include "model_build.h"
#include "session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NL = 4, ND = 2, E = 64, H = 4, R = 32, NR = 16, NOPE = 16, HV = 16, X = 16, K = 4, FE = 32,
       FD = 96, V = 64, G = 4, GU = 2, NT = 10 };

static char g_path[256];
static const mla_spec MLA = {.n_embd = E, .n_head = H, .kv_lora = R, .n_rot = NR, .qk_nope = NOPE, .v_head = HV,
                             .n_ff = FD, .n_ff_exp = FE, .n_expert = X, .n_dense = ND};

static void key_u32(st_gguf_writer *w, const char *k, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "deepseek2.%s", k);
    st_gguf_writer_set_u32(w, key, v);
}

/* The deepseek2 file: llama.cpp's MLA layout (key_length = kv_lora + rope, value_length =
 * kv_lora, the trained widths in *_mla), attn_q without a low rank. */
static int write_deepseek2(const char *path) {
    f32_file f;
    if (!f32_file_create(&f, path, 0x5DEECE66DULL)) return 0;
    st_gguf_writer *w = f.w;
    st_gguf_writer_set_str(w, "general.architecture", "deepseek2");
    st_gguf_writer_set_str(w, "general.name", "synthetic dense-lead");
    key_u32(w, "context_length", 256);
    key_u32(w, "embedding_length", E);
    key_u32(w, "block_count", NL);
    mla_write_attn_keys(w, &MLA);
    st_gguf_writer_set_f32(w, "deepseek2.attention.layer_norm_rms_epsilon", 1e-6f);
    st_gguf_writer_set_f32(w, "deepseek2.rope.freq_base", 10000.0f);
    key_u32(w, "feed_forward_length", FD);
    key_u32(w, "expert_feed_forward_length", FE);
    key_u32(w, "expert_count", X);
    key_u32(w, "expert_used_count", K);
    key_u32(w, "expert_shared_count", 1);
    key_u32(w, "leading_dense_block_count", ND);
    key_u32(w, "expert_gating_func", 2);
    key_u32(w, "expert_group_count", G);
    key_u32(w, "expert_group_used_count", GU);
    st_gguf_writer_set_f32(w, "deepseek2.expert_weights_scale", 2.5f);
    st_gguf_writer_set_bool(w, "deepseek2.expert_weights_norm", 1);
    int ok = f32_add(&f, "token_embd.weight", E, V, 1, 0.5f, 0.0f) &&
             f32_add(&f, "output_norm.weight", E, 1, 1, 0.1f, 1.0f) &&
             f32_add(&f, "output.weight", E, V, 1, 0.2f, 0.0f);
    for (int il = 0; il < NL && ok; il++) ok = mla_add_layer(&f, &MLA, il);
    return f32_file_finish(&f, ok, "deepseek2");
}

/* NT prompt logits (every row), then NT steps of one token each: 2 * NT rows of V. */
static strata_status run(const strata_model *m, strata_session_params sp, float *out, strata_session_stats *stats) {
    static const strata_token toks[2 * NT] = {3, 17, 42, 5, 9, 60, 1, 33, 28, 11, 7, 50, 2, 19, 44, 8, 63, 21, 30, 12};
    strata_session *s = NULL;
    strata_status st = strata_session_create(m, &sp, &s);
    if (st != STRATA_OK) return st;
    st = strata_session_decode(s, toks, NT, out, 1);
    for (int i = 0; i < NT && st == STRATA_OK; i++)
        st = strata_session_decode(s, toks + NT + i, 1, out + (size_t)(NT + i) * V, 0);
    if (st == STRATA_OK && stats) st = strata_session_get_stats(s, stats);
    strata_session_free(s);
    return st;
}

static strata_session_params params(strata_backend_kind backend) {
    strata_session_params sp = strata_session_default_params();
    sp.backend = backend;
    sp.n_ctx = 64;
    sp.n_batch = 16;
    sp.n_threads = 2;
    return sp;
}

static void test_model_shape(const strata_model *m) {
    int dense_ok = 1;
    for (int il = 0; il < NL; il++) dense_ok &= st_layer_has_experts(&m->layers[il]) == (il >= ND);
    CHECK(dense_ok, "layers 0..%d dense, the rest with experts", ND - 1);
    CHECK(st_model_moe_layers(m, NL) == NL - ND && st_model_moe_layers(m, ND) == 0 && st_model_moe_layers(m, ND + 1) == 1,
          "layers with experts below n");
    CHECK(st_model_first_moe_layer(m, 0) == ND && st_model_first_moe_layer(m, ND + 1) == ND + 1,
          "first layer with experts");
    CHECK(m->hp.n_layer_dense_lead == ND && m->hp.n_ff == FD && m->hp.n_ff_shexp == FE, "dense lead %d, n_ff %d",
          (int)m->hp.n_layer_dense_lead, (int)m->hp.n_ff);
}

/* The latent cache's figures (strata_session_stats): one row of kv_lora + rope a layer, no V, in
 * the session's kv_type; n_ctx of them allocated on the CPU (on the GPU, where it runs, each
 * layer's rounded up to 256 bytes); no recurrent state. */
static void test_kv_latent(const strata_model *m) {
    for (int be = 0; be < 2; be++)
        for (int t = 0; t < 2; t++) {
            strata_session_params sp = params(be ? STRATA_BACKEND_CUDA : STRATA_BACKEND_CPU);
            sp.kv_type = t ? STRATA_TYPE_F32 : STRATA_TYPE_F16;
            const long long el = t ? 4 : 2, per = (long long)NL * (R + NR) * el;
            strata_session *s = NULL;
            if (strata_session_create(m, &sp, &s) != STRATA_OK) {
                if (be) continue; /* no GPU here: test_gpu says so */
                CHECK(0, "cpu session: %s", strata_last_error());
                return;
            }
            strata_session_stats st;
            CHECK(strata_session_get_stats(s, &st) == STRATA_OK, "stats");
            const long long one = ((long long)sp.n_ctx * (R + NR) * el + 255) / 256 * 256;
            CHECK(st.kv_bytes_per_token == per && strata_model_kv_bytes_per_token(m, sp.kv_type) == per,
                  "%s %s: kv_bytes_per_token %lld, by hand %lld", be ? "cuda" : "cpu", t ? "f32" : "f16",
                  (long long)st.kv_bytes_per_token, per);
            CHECK(st.kv_bytes == (be ? NL * one : sp.n_ctx * per), "%s: kv_bytes %lld", be ? "cuda" : "cpu",
                  (long long)st.kv_bytes);
            CHECK(st.state_bytes == 0 && st.state_alloc_bytes == 0, "no recurrent state");
            strata_session_free(s);
        }
}

/* All-resident vs a RAM budget of 5 slots: the same bits; the look-ups of the MoE layers only. */
static void test_ram_tier(const strata_model *m, float *ref) {
    const size_t n = (size_t)2 * NT * V;
    float *got = malloc(sizeof(float) * n);
    strata_session_stats rs;
    memset(&rs, 0, sizeof rs);
    strata_status st = run(m, params(STRATA_BACKEND_CPU), ref, NULL);
    CHECK(st == STRATA_OK, "CPU session, experts resident: %s", strata_last_error());
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(ref[i]) != 0;
    CHECK(finite, "finite logits");
    strata_session_params sp = params(STRATA_BACKEND_CPU);
    const int64_t expert = (int64_t)3 * FE * E * (int64_t)sizeof(float);
    sp.placement.ram_budget = 5 * expert + expert / 2;
    st = run(m, sp, got, &rs);
    CHECK(st == STRATA_OK, "CPU session, ram_budget of 5 experts: %s", strata_last_error());
    if (st == STRATA_OK) {
        CHECK(!memcmp(ref, got, sizeof(float) * n), "ram_budget: bit-identical logits (prompt and steps)");
        const int64_t lookups = rs.expert_cache_hits + rs.expert_cache_misses;
        CHECK(rs.expert_cache_slots == 5, "5 slots (%d)", (int)rs.expert_cache_slots);
        CHECK(rs.expert_cache_misses > 0, "misses read from the file: %lld", (long long)rs.expert_cache_misses);
        CHECK(lookups == (int64_t)2 * NT * K * (NL - ND), "look-ups %lld: tokens x k x %d MoE layers (%d)",
              (long long)lookups, NL - ND, 2 * NT * K * (NL - ND));
        printf("ram budget of 5 experts: %lld hits, %lld misses\n", (long long)rs.expert_cache_hits,
               (long long)rs.expert_cache_misses);
    }
    free(got);
}

/* gpu_mem alone: the static split over budgets from too small to everything. */
static void test_fit(const strata_model *m) {
    const int64_t layer = (int64_t)3 * FE * E * X * (int64_t)sizeof(float);
    int seen[NL + 2] = {0}, bad = 0, ok_calls = 0;
    for (int64_t gm = 1 << 20; gm < ((int64_t)600 << 20); gm += layer / 4) {
        strata_session_params p = params(STRATA_BACKEND_CUDA);
        p.placement.gpu_mem = gm;
        int32_t fit = -1;
        const strata_status st = st_session_fit_gpu_mem(m, &p, &fit);
        st_error_clear();
        if (st != STRATA_OK) continue;
        ok_calls++;
        if (fit < 0 || fit > NL || (fit > 0 && fit < ND + 1)) bad++;
        else seen[fit]++;
    }
    CHECK(ok_calls > 0 && bad == 0, "fit: %d budgets fitted, %d splits inside the dense layers", ok_calls, bad);
    CHECK(seen[0] > 0 && seen[ND + 1] > 0 && seen[NL] > 0, "fit: all on the GPU (%d), layers 0..%d on the CPU (%d), "
          "every layer (%d)", seen[0], ND, seen[ND + 1], seen[NL]);
}

/* GPU half: skips while CUDA is unusable or latent attention is refused on it. */
static void test_gpu(const strata_model *m, const float *ref) {
    const size_t n = (size_t)2 * NT * V;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    strata_status st = run(m, params(STRATA_BACKEND_CUDA), a, NULL);
    if (st != STRATA_OK) {
        SKIP("GPU half: %s", strata_last_error());
        free(a); free(b);
        return;
    }
    strata_session_params sp = params(STRATA_BACKEND_CUDA);
    sp.placement.n_cpu_moe = ND; /* only the dense layers: nothing moves */
    st = run(m, sp, b, NULL);
    CHECK(st == STRATA_OK && !memcmp(a, b, sizeof(float) * n), "GPU: n_cpu_moe %d (dense layers) bit-identical to "
          "all on the GPU: %s", ND, st == STRATA_OK ? "compared" : strata_last_error());
    int agree = 0;
    for (int r = 0; r < 2 * NT; r++) {
        int ia = 0, ic = 0;
        for (int v = 1; v < V; v++) {
            if (a[(size_t)r * V + v] > a[(size_t)r * V + ia]) ia = v;
            if (ref[(size_t)r * V + v] > ref[(size_t)r * V + ic]) ic = v;
        }
        agree += ia == ic;
    }
    CHECK(agree >= 2 * NT - 1, "GPU vs CPU: top-1 of %d of %d rows", agree, 2 * NT);
    free(a); free(b);
}

int main(void) {
    snprintf(g_path, sizeof g_path, "/tmp/strata_dense_lead_%d.gguf", (int)getpid());
    CHECK(write_deepseek2(g_path), "write the deepseek2 file");
    strata_model_params mp = strata_model_default_params();
    strata_model *m = NULL;
    const strata_status st = strata_model_load(g_path, &mp, &m);
    CHECK(st == STRATA_OK, "load: %s", strata_last_error());
    if (st == STRATA_OK) {
        float *ref = malloc(sizeof(float) * (size_t)2 * NT * V);
        test_model_shape(m);
        test_kv_latent(m);
        test_ram_tier(m, ref);
        test_fit(m);
        test_gpu(m, ref);
        free(ref);
        strata_model_free(m);
    }
    unlink(g_path);
    return test_report();
}
