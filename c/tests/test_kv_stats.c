/* test_kv_stats.c - the context's memory figures (strata_model_kv_bytes_per_token,
 * strata_model_state_bytes, strata_session_stats' kv_bytes_per_token / kv_bytes / state_bytes /
 * state_alloc_bytes) against numbers worked out by hand from the shapes:
 *   - the shape function at real checkpoints' shapes: a GQA model (OLMoE-1B-7B), DeepSeek-V3 (MLA:
 *     one row of kv_lora + rope a layer, no V), gpt-oss-120b (its sliding-window layers keep every
 *     position, as Strata's cache does: counted in full) and Qwen3-Next-80B-A3B (its 12 attention
 *     layers only; the 36 DeltaNet layers' state apart);
 *   - CPU sessions of synthetic llama, olmoe and qwen3next files (c/tests/model_build.h) in f16 and
 *     f32: the per-token figure as 2 x layers x KV heads x head_dim x element (qwen3next: its
 *     attention layers), the allocation n_ctx times it, the recurrent state by hand;
 *   - where CUDA is usable, the same files' GPU sessions: the same per-token and state figures,
 *     the GPU's own allocation (K and V per layer, each rounded up to 256 bytes) and the state it
 *     keeps with its rollback window (at least the state); else those checks are skipped.
 * The deepseek2 session's figures are checked in test_dense_lead.c. */
#include "model.h"
#include "model_build.h"
#include "strata.h"
#include "test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- the shape function at real shapes ------------------------------------------------------ */

static st_hparams gqa(int32_t n_layer, int32_t n_head_kv, int32_t hd) {
    st_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = n_layer;
    hp.n_head_kv = n_head_kv;
    hp.head_dim = hp.head_dim_v = hd;
    return hp;
}

static void test_real_shapes(void) {
    /* OLMoE-1B-7B: 16 layers of 16 KV heads of 128 */
    st_hparams hp = gqa(16, 16, 128);
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_F16) == 2ull * 16 * 16 * 128 * 2, "olmoe f16");
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_F32) == 2ull * 16 * 16 * 128 * 4, "olmoe f32");
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_Q8_0) == 0, "q8_0 is no cache type");
    CHECK(st_recurrent_state_bytes(&hp) == 0, "no recurrent state");
    /* DeepSeek-V3: 61 layers, kv_lora 512 + rope 64 in one row (the loader's head_dim), no V */
    hp = gqa(61, 1, 512 + 64);
    hp.head_dim_v = 512;
    hp.n_lora_kv = 512;
    hp.n_rot = 64;
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_F16) == 61ull * 576 * 2, "deepseek-v3 f16: %llu",
          (unsigned long long)st_kv_bytes_per_token(&hp, STRATA_TYPE_F16));
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_F16) == 70272, "deepseek-v3: 68.6 KiB a token");
    /* gpt-oss-120b: 36 layers of 8 KV heads of 64, every other one sliding over 128 positions */
    hp = gqa(36, 8, 64);
    hp.n_swa = 128;
    hp.swa_period = 2;
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_F16) == 36ull * 2 * 8 * 64 * 2, "gpt-oss-120b f16");
    /* Qwen3-Next-80B-A3B: 48 layers, every 4th attends (2 KV heads of 256); DeltaNet layers of 16
     * key heads, 32 value heads of 128, conv width 4 */
    hp = gqa(48, 2, 256);
    hp.full_attn_interval = 4;
    hp.ssm_d_conv = 4;
    hp.ssm_d_state = 128;
    hp.ssm_n_group = 16;
    hp.ssm_dt_rank = 32;
    hp.ssm_d_inner = 32 * 128;
    CHECK(st_kv_bytes_per_token(&hp, STRATA_TYPE_F16) == 12ull * 2 * 2 * 256 * 2, "qwen3next f16");
    const unsigned long long conv_ch = 2 * 16 * 128 + 32 * 128;
    CHECK(st_recurrent_state_bytes(&hp) == 36ull * (32 * 128 * 128 + 3 * conv_ch) * 4, "qwen3next state: %llu",
          (unsigned long long)st_recurrent_state_bytes(&hp));
}

/* ---- sessions of synthetic files ------------------------------------------------------------ */

/* The spec's figures by hand: a position's K and V in each attention layer; the DeltaNet layers'
 * state (each value head's d x d, the conv's last conv - 1 inputs of 2 nk d + nv d channels). */
static long long hand_kv(const spec *s, int el) {
    const int n_att = s->ssm_interval ? s->n_layer / s->ssm_interval : s->n_layer;
    return 2LL * n_att * s->n_head_kv * s->head_dim * el;
}

static long long hand_state(const spec *s) {
    if (!s->ssm_interval) return 0;
    const long long n_rec = s->n_layer - s->n_layer / s->ssm_interval, d = s->ssm_d;
    return n_rec * (s->ssm_nv * d * d + (s->ssm_conv - 1) * (2 * s->ssm_nk * d + s->ssm_nv * d)) * 4;
}

static void check_session(const strata_model *m, const spec *s, strata_backend_kind be, strata_type kvt,
                          const char *what) {
    enum { N_CTX = 48 };
    strata_session_params sp = strata_session_default_params();
    sp.backend = be;
    sp.n_ctx = N_CTX;
    sp.n_threads = 2;
    sp.kv_type = kvt;
    strata_session *sess = NULL;
    if (strata_session_create(m, &sp, &sess) != STRATA_OK) {
        CHECK(0, "%s: session: %s", what, strata_last_error());
        return;
    }
    const strata_token toks[3] = {1, 2, 3};
    CHECK(strata_session_decode(sess, toks, 3, NULL, 0) == STRATA_OK, "%s: decode: %s", what, strata_last_error());
    strata_session_stats st;
    CHECK(strata_session_get_stats(sess, &st) == STRATA_OK, "%s: stats", what);
    const int el = kvt == STRATA_TYPE_F32 ? 4 : 2;
    const long long per = hand_kv(s, el);
    CHECK(st.kv_bytes_per_token == per, "%s: kv_bytes_per_token %lld, by hand %lld", what,
          (long long)st.kv_bytes_per_token, per);
    CHECK(strata_model_kv_bytes_per_token(m, kvt) == per, "%s: the model's figure", what);
    CHECK(st.state_bytes == hand_state(s), "%s: state_bytes %lld, by hand %lld", what, (long long)st.state_bytes,
          hand_state(s));
    if (be == STRATA_BACKEND_CPU) {
        CHECK(st.kv_bytes == N_CTX * per, "%s: kv_bytes %lld, n_ctx x %lld", what, (long long)st.kv_bytes, per);
    } else { /* K and V of each attention layer, each rounded up to 256 bytes */
        const long long one = ((long long)N_CTX * s->n_head_kv * s->head_dim * el + 255) / 256 * 256;
        CHECK(st.kv_bytes == 2 * one * (per / (2LL * s->n_head_kv * s->head_dim * el)),
              "%s: GPU kv_bytes %lld", what, (long long)st.kv_bytes);
    }
    if (s->ssm_interval)
        CHECK(st.state_alloc_bytes > st.state_bytes, "%s: state allocated %lld, the state %lld", what,
              (long long)st.state_alloc_bytes, (long long)st.state_bytes);
    else
        CHECK(st.state_alloc_bytes == 0, "%s: no state allocated", what);
    strata_session_reset_stats(sess); /* not counters: they stay */
    strata_session_stats st2;
    strata_session_get_stats(sess, &st2);
    CHECK(st2.kv_bytes == st.kv_bytes && st2.kv_bytes_per_token == st.kv_bytes_per_token &&
          st2.state_alloc_bytes == st.state_alloc_bytes, "%s: reset leaves them", what);
    strata_session_free(sess);
}

static void test_arch(const char *arch, int gpu) {
    spec s = base_spec(arch);
    s.head_dim = 64; /* what the GPU attention takes */
    if (s.n_ff_shexp) s.n_ff_shexp = 64;
    char path[64];
    snprintf(path, sizeof path, "/tmp/strata_kv_stats_%d.gguf", (int)getpid());
    strata_model *m = NULL;
    const int ok = write_model(&s, path) && strata_model_load(path, NULL, &m) == STRATA_OK;
    unlink(path);
    if (!ok) { CHECK(0, "%s: could not build the model: %s", arch, strata_last_error()); return; }
    char what[64];
    for (int t = 0; t < 2; t++) {
        const strata_type kvt = t ? STRATA_TYPE_F32 : STRATA_TYPE_F16;
        snprintf(what, sizeof what, "%s cpu %s", arch, strata_type_name(kvt));
        check_session(m, &s, STRATA_BACKEND_CPU, kvt, what);
        snprintf(what, sizeof what, "%s cuda %s", arch, strata_type_name(kvt));
        if (gpu) check_session(m, &s, STRATA_BACKEND_CUDA, kvt, what);
    }
    CHECK(strata_model_kv_bytes_per_token(m, STRATA_TYPE_Q8_0) == -1, "%s: q8_0 refused", arch);
    CHECK(strata_model_state_bytes(m) == hand_state(&s), "%s: the model's state figure", arch);
    strata_model_free(m);
}

int main(void) {
    test_real_shapes();
    CHECK(strata_model_kv_bytes_per_token(NULL, STRATA_TYPE_F16) == -1 && strata_model_state_bytes(NULL) == -1,
          "NULL model");
    strata_backend_info bi;
    const int gpu = strata_backend_query(STRATA_BACKEND_CUDA, &bi) == STRATA_OK && bi.available;
    const char *archs[] = {"llama", "olmoe", "qwen3next"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) test_arch(archs[i], gpu);
    if (!gpu) SKIP("GPU sessions: CUDA unavailable: %s", bi.detail);
    return test_report();
}
