/* test_model.c - the model loader (strata_model_load): the trained tiny OLMoE of ../shared
 * (hyperparameters against its README, parameter counts against a recount from the raw tensor
 * list, per-expert views against the raw bytes), the vocabulary-only files of ../shared/vocab,
 * small random f32 GGUF files written with the
 * internal writer for every supported architecture (hyperparameters, traits, every bound view
 * against the tensor of the same name, tied output, Mixtral's per-expert tensors, quantized
 * weights), and the error cases: each with its status and a message substring. */
#include "model.h"
#include "model_build.h"
#include "strata.h"
#include "strata_gguf.h"
#include "strata_quant.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ==== helpers ================================================================================ */

static char tmp_path[256];

static int has(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

/* The raw bytes of tensor `name` in the file (NULL if absent). */
static const uint8_t *raw(const strata_model *m, const char *name, strata_tensor_info *ti) {
    int64_t i = strata_gguf_tensor_find(strata_model_gguf(m), name);
    if (i < 0) return NULL;
    if (strata_gguf_tensor_info(strata_model_gguf(m), i, ti) != STRATA_OK) return NULL;
    return ti->data;
}

/* A bound view must point at the tensor of its name, with that tensor's shape and type. */
static void check_view(const strata_model *m, const st_tensor *t, const char *name) {
    strata_tensor_info ti;
    const uint8_t *p = raw(m, name, &ti);
    CHECK(p != NULL, "tensor %s absent from file", name);
    if (!p) return;
    CHECK(t->data == p, "%s: view data %p, file data %p", name, (const void *)t->data,
          (const void *)p);
    CHECK(t->type == ti.type, "%s: type %d vs %d", name, (int)t->type, (int)ti.type);
    CHECK(t->ne[0] == ti.ne[0] && t->ne[1] == ti.ne[1] && t->ne[2] == ti.ne[2],
          "%s: ne (%lld,%lld,%lld) vs (%lld,%lld,%lld)", name, (long long)t->ne[0],
          (long long)t->ne[1], (long long)t->ne[2], (long long)ti.ne[0], (long long)ti.ne[1],
          (long long)ti.ne[2]);
    CHECK(t->row_bytes * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] == ti.n_bytes,
          "%s: row_bytes %zu", name, t->row_bytes);
    CHECK(t->name && strcmp(t->name, name) == 0, "%s: name %s", name, t->name ? t->name : "?");
}

/* Every expert slice equals the raw bytes at offset e * n_bytes / n_expert. */
static void check_experts(const strata_model *m, const st_tensor *t, const char *name) {
    strata_tensor_info ti;
    const uint8_t *p = raw(m, name, &ti);
    if (!p) { CHECK(0, "%s absent", name); return; }
    int64_t n_exp = ti.ne[2];
    uint64_t per = ti.n_bytes / (uint64_t)n_exp;
    int ok = 1;
    for (int64_t e = 0; e < n_exp; e++) {
        st_tensor x = st_tensor_expert(t, e);
        if (x.data != p + (uint64_t)e * per || x.ne[2] != 1 || x.ne[1] != ti.ne[1] ||
            memcmp(x.data, p + (uint64_t)e * per, per) != 0 ||
            st_tensor_row(t, e, ti.ne[1] - 1) != x.data + (size_t)(ti.ne[1] - 1) * x.row_bytes)
            ok = 0;
    }
    CHECK(ok, "%s: expert views differ from the raw bytes", name);
}

/* ==== the trained tiny model ================================================================= */

static void test_tiny(void) {
    const char *shared = getenv("STRATA_SHARED");
    char path[512];
    snprintf(path, sizeof path, "%s/models/strata-tiny-moe-q8_0.gguf", shared ? shared : "../shared");
    if (access(path, R_OK) != 0) {
        SKIP("%s absent: tiny-model checks not run (set STRATA_SHARED)", path);
        return;
    }
    strata_model *m = NULL;
    strata_status st = strata_model_load(path, NULL, &m);
    CHECK(st == STRATA_OK, "load %s: %s", path, strata_last_error());
    if (!m) return;
    strata_model_info in;
    CHECK(strata_model_get_info(m, &in) == STRATA_OK, "get_info");
    CHECK(strcmp(in.arch, "olmoe") == 0, "arch %s", in.arch);
    CHECK(strcmp(in.name, "strata-tiny-moe") == 0, "name %s", in.name);
    CHECK(in.n_layer == 6 && in.n_embd == 256 && in.n_head == 4 && in.n_head_kv == 4 &&
          in.head_dim == 64, "attention shape %d %d %d %d %d", in.n_layer, in.n_embd, in.n_head,
          in.n_head_kv, in.head_dim);
    CHECK(in.n_expert == 32 && in.n_expert_used == 4 && in.n_ff_exp == 128 && in.n_ff == 0 &&
          in.n_ff_shexp == 0, "experts %d %d %d %d %d", in.n_expert, in.n_expert_used,
          in.n_ff_exp, in.n_ff, in.n_ff_shexp);
    CHECK(in.n_ctx_train == 1024 && in.n_vocab == 8192, "ctx %d vocab %d", in.n_ctx_train,
          in.n_vocab);
    CHECK(in.vocab_only == 0, "vocab_only");
    CHECK(m->arch && m->arch->id == ST_ARCH_OLMOE && m->arch->rope == ST_ROPE_NEOX &&
          m->arch->qk_norm == ST_QKNORM_FULL, "traits");
    CHECK(m->hp.expert_weights_norm == 0, "olmoe must not renormalize top-k");
    CHECK(fabsf(m->hp.norm_eps - 1e-5f) < 1e-9f && m->hp.rope_freq_base == 10000.0f &&
          m->hp.n_rot == 64 && m->hp.rope_scaling == ST_ROPE_SCALING_NONE &&
          m->hp.rope_freq_scale == 1.0f, "eps %g base %g rot %d", (double)m->hp.norm_eps,
          (double)m->hp.rope_freq_base, m->hp.n_rot);
    CHECK(m->n_threads > 0, "n_threads %d", m->n_threads);
    CHECK(m->vocab != NULL, "the tiny model's vocabulary is loaded with it");

    /* Recount from the raw tensor list: all weights; active = non-expert weights with one
     * embedding row, plus top-k/n_expert of the expert weights. */
    const strata_gguf *g = strata_model_gguf(m);
    int64_t total = 0, active = 0;
    uint64_t bytes = 0;
    for (int64_t i = 0; i < strata_gguf_tensor_count(g); i++) {
        strata_tensor_info ti;
        strata_gguf_tensor_info(g, i, &ti);
        total += ti.n_elements;
        bytes += ti.n_bytes;
        if (strstr(ti.name, "_exps.")) active += ti.n_elements / 32 * 4;
        else if (strcmp(ti.name, "token_embd.weight") == 0) active += ti.ne[0];
        else active += ti.n_elements;
    }
    CHECK(in.n_params == total && total == 24697088, "n_params %lld (recount %lld)",
          (long long)in.n_params, (long long)total);
    CHECK(in.n_params_active == active && active > 5500000 && active < 6500000,
          "n_params_active %lld (recount %lld)", (long long)in.n_params_active, (long long)active);
    CHECK(in.n_bytes == bytes, "n_bytes %llu vs %llu", (unsigned long long)in.n_bytes,
          (unsigned long long)bytes);

    check_view(m, &m->tok_embd, "token_embd.weight");
    check_view(m, &m->output, "output.weight");
    check_view(m, &m->output_norm, "output_norm.weight");
    CHECK(m->tok_embd.type == STRATA_TYPE_Q8_0 && m->output.data != m->tok_embd.data, "untied");
    char name[128];
    for (int il = 0; il < 6; il++) {
        const st_layer *L = &m->layers[il];
#define V(field, nm) do { snprintf(name, sizeof name, "blk.%d." nm, il); check_view(m, &L->field, name); } while (0)
        V(attn_norm, "attn_norm.weight");
        V(wq, "attn_q.weight");
        V(wk, "attn_k.weight");
        V(wv, "attn_v.weight");
        V(wo, "attn_output.weight");
        V(q_norm, "attn_q_norm.weight");
        V(k_norm, "attn_k_norm.weight");
        V(ffn_norm, "ffn_norm.weight");
        V(ffn_gate_inp, "ffn_gate_inp.weight");
        V(ffn_gate_exps, "ffn_gate_exps.weight");
        V(ffn_up_exps, "ffn_up_exps.weight");
        V(ffn_down_exps, "ffn_down_exps.weight");
#undef V
        CHECK(L->q_norm.ne[0] == 256 && L->k_norm.ne[0] == 256, "full q/k norm width");
        CHECK(L->ffn_gate_exps.ne[0] == 256 && L->ffn_gate_exps.ne[1] == 128 &&
              L->ffn_gate_exps.ne[2] == 32 && L->ffn_down_exps.ne[0] == 128 &&
              L->ffn_down_exps.ne[1] == 256, "expert shapes");
        CHECK(L->bq.data == NULL && L->ffn_gate.data == NULL && L->ffn_up_shexp.data == NULL,
              "absent tensors stay NULL");
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
        check_experts(m, &L->ffn_gate_exps, name);
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
        check_experts(m, &L->ffn_up_exps, name);
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
        check_experts(m, &L->ffn_down_exps, name);
    }
    /* An expert view is usable on its own: dequantized row 5 of expert 17 of layer 2's up
     * projection equals the dequantized raw bytes at the independently computed offset. */
    {
        const st_tensor *t = &m->layers[2].ffn_up_exps;
        st_tensor x = st_tensor_expert(t, 17);
        strata_tensor_info ti;
        const uint8_t *p = raw(m, "blk.2.ffn_up_exps.weight", &ti);
        float a[256], b[256];
        uint64_t off = ti.n_bytes / 32 * 17 + (uint64_t)5 * 34 * (256 / 32);
        CHECK(strata_dequantize_row(x.type, st_tensor_row(&x, 0, 5), a, 256) == STRATA_OK &&
              strata_dequantize_row(STRATA_TYPE_Q8_0, p + off, b, 256) == STRATA_OK &&
              memcmp(a, b, sizeof a) == 0, "expert row dequantization");
    }
    strata_model_free(m);

    /* use_mmap 0 reads the file: same info. */
    strata_model_params mp = strata_model_default_params();
    mp.use_mmap = 0;
    mp.n_threads = 3;
    st = strata_model_load(path, &mp, &m);
    CHECK(st == STRATA_OK, "load without mmap: %s", strata_last_error());
    if (m) {
        CHECK(m->n_threads == 3 && m->info.n_params == total, "threads %d", m->n_threads);
        strata_model_free(m);
    }

    /* mlock and hugepages, mapped and read: the same bytes as a plain load. As root (or with a
     * large enough RLIMIT_MEMLOCK) the lock succeeds; otherwise it fails naming the limit, which
     * a soft limit of 0 forces for a non-root process. */
    {
        strata_model *plain = NULL;
        CHECK(strata_model_load(path, NULL, &plain) == STRATA_OK, "plain load: %s", strata_last_error());
        for (int mm = 0; plain && mm < 2; mm++) {
            strata_model_params lp = strata_model_default_params();
            lp.use_mmap = mm;
            lp.mlock = 1;
            lp.hugepages = 1;
            strata_model *lm = NULL;
            st = strata_model_load(path, &lp, &lm);
            struct rlimit rl;
            const int may_lock = geteuid() == 0 || (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
                                                    (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)(64 << 20)));
            if (st == STRATA_OK) {
                strata_tensor_info a, b;
                const uint8_t *pa = raw(plain, "blk.2.ffn_up_exps.weight", &a), *pb = raw(lm, "blk.2.ffn_up_exps.weight", &b);
                CHECK(pa && pb && a.n_bytes == b.n_bytes && memcmp(pa, pb, (size_t)a.n_bytes) == 0,
                      "mlock + hugepages (mmap %d): tensor bytes differ", mm);
                strata_model_free(lm);
            } else {
                CHECK(!may_lock && st == STRATA_ERR_IO && strstr(strata_last_error(), "RLIMIT_MEMLOCK"),
                      "mlock (mmap %d): %s", mm, strata_last_error());
            }
        }
        strata_model_free(plain);
        struct rlimit rl;
        if (geteuid() != 0 && getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
            struct rlimit zero = rl;
            zero.rlim_cur = 0;
            if (setrlimit(RLIMIT_MEMLOCK, &zero) == 0) {
                strata_model_params lp = strata_model_default_params();
                lp.mlock = 1;
                strata_model *lm = NULL;
                st = strata_model_load(path, &lp, &lm);
                CHECK(st == STRATA_ERR_IO && lm == NULL && strstr(strata_last_error(), "ulimit -l"),
                      "mlock under a zero limit: %s", strata_last_error());
                setrlimit(RLIMIT_MEMLOCK, &rl);
            }
        } else {
            SKIP("mlock refusal: running as root (CAP_IPC_LOCK ignores RLIMIT_MEMLOCK)");
        }
    }

    /* vocab_only: just the tokenizer. */
    mp = strata_model_default_params();
    mp.vocab_only = 1;
    st = strata_model_load(path, &mp, &m);
    CHECK(st == STRATA_OK, "vocab_only load: %s", strata_last_error());
    if (m) {
        strata_model_get_info(m, &in);
        CHECK(in.vocab_only == 1 && in.n_vocab == 8192 && m->layers == NULL && m->vocab,
              "vocab_only info: %d %d", in.vocab_only, in.n_vocab);
        strata_model_free(m);
    }
}

/* ==== vocabulary-only files ================================================================== */

/* The ../shared/vocab files hold a tokenizer and no weights; gpt-2's architecture ("gpt2") is not
 * one Strata runs, which vocab_only loading must not mind. */
static void test_vocab_files(void) {
    const char *shared = getenv("STRATA_SHARED");
    const char *names[] = {"gpt-2", "qwen2", "llama-bpe", "llama-spm"};
    for (int i = 0; i < 4; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared ? shared : "../shared",
                 names[i]);
        if (access(path, R_OK) != 0) { SKIP("%s absent", path); continue; }
        strata_model *m = NULL;
        strata_model_params p = strata_model_default_params();
        if (i == 0) {
            strata_status st = strata_model_load(path, &p, &m);
            CHECK(st == STRATA_ERR_UNSUPPORTED && m == NULL &&
                  has(strata_last_error(), "unknown architecture 'gpt2'"),
                  "full load of a gpt2 file: %s %s", strata_status_name(st), strata_last_error());
        }
        p.vocab_only = 1;
        strata_status st = strata_model_load(path, &p, &m);
        CHECK(st == STRATA_OK, "vocab_only %s: %s", names[i], strata_last_error());
        if (!m) continue;
        strata_model_info in;
        strata_model_get_info(m, &in);
        CHECK(in.vocab_only == 1 && in.n_vocab > 1000 && m->layers == NULL && m->vocab != NULL,
              "vocab_only %s: n_vocab %d", names[i], in.n_vocab);
        CHECK(i != 0 || (m->arch == NULL && strcmp(in.arch, "gpt2") == 0), "gpt2 arch kept");
        strata_model_free(m);
    }
}

/* ==== synthetic files ======================================================================== */

static strata_status load_spec(const spec *s, strata_model **m) {
    *m = NULL;
    if (!write_model(s, tmp_path)) { CHECK(0, "could not write the %s file", s->arch); return STRATA_ERR_IO; }
    strata_status st = strata_model_load(tmp_path, NULL, m);
    unlink(tmp_path);
    return st;
}

/* Every field of every layer points at its tensor (or is NULL when the file lacks it). */
static void check_all_views(const strata_model *m, const spec *s) {
    check_view(m, &m->tok_embd, "token_embd.weight");
    check_view(m, &m->output_norm, "output_norm.weight");
    if (s->tied) CHECK(m->output.data == m->tok_embd.data && m->output.ne[1] == s->n_vocab,
                       "%s: tied output must alias token_embd", s->arch);
    else check_view(m, &m->output, "output.weight");
    char n[160];
    for (int il = 0; il < s->n_layer; il++) {
        const st_layer *L = &m->layers[il];
#define V(field, nm) do { snprintf(n, sizeof n, "blk.%d." nm, il); check_view(m, &L->field, n); } while (0)
#define NONE(field) CHECK(L->field.data == NULL, "%s: " #field " should be absent", s->arch)
        V(attn_norm, "attn_norm.weight"); V(wq, "attn_q.weight"); V(wk, "attn_k.weight");
        V(wv, "attn_v.weight"); V(wo, "attn_output.weight"); V(ffn_norm, "ffn_norm.weight");
        if (s->bias) { V(bq, "attn_q.bias"); V(bk, "attn_k.bias"); V(bv, "attn_v.bias"); }
        else { NONE(bq); NONE(bk); NONE(bv); }
        NONE(bo);
        if (s->qk) { V(q_norm, "attn_q_norm.weight"); V(k_norm, "attn_k_norm.weight"); }
        else { NONE(q_norm); NONE(k_norm); }
        if (!s->n_expert) {
            V(ffn_gate, "ffn_gate.weight"); V(ffn_up, "ffn_up.weight"); V(ffn_down, "ffn_down.weight");
            NONE(ffn_gate_inp); NONE(ffn_gate_exps);
        } else {
            NONE(ffn_gate); NONE(ffn_up); NONE(ffn_down);
            V(ffn_gate_inp, "ffn_gate_inp.weight");
            if (!s->split_experts) {
                V(ffn_gate_exps, "ffn_gate_exps.weight"); V(ffn_up_exps, "ffn_up_exps.weight");
                V(ffn_down_exps, "ffn_down_exps.weight");
                snprintf(n, sizeof n, "blk.%d.ffn_up_exps.weight", il);
                check_experts(m, &L->ffn_up_exps, n);
                snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", il);
                check_experts(m, &L->ffn_down_exps, n);
            } else { /* each expert view is the per-expert tensor */
                int ok = L->ffn_gate_exps.ne[2] == s->n_expert;
                for (int e = 0; e < s->n_expert; e++) {
                    strata_tensor_info ti;
                    const char *parts[3] = {"ffn_gate", "ffn_up", "ffn_down"};
                    const st_tensor *ts[3] = {&L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps};
                    for (int k = 0; k < 3; k++) {
                        snprintf(n, sizeof n, "blk.%d.%s.%d.weight", il, parts[k], e);
                        const uint8_t *p = raw(m, n, &ti);
                        st_tensor x = st_tensor_expert(ts[k], e);
                        if (!p || x.data != p || x.ne[0] != ti.ne[0] || x.ne[1] != ti.ne[1]) ok = 0;
                    }
                }
                CHECK(ok, "per-expert tensors as one merged view");
            }
            if (s->n_ff_shexp) {
                V(ffn_gate_shexp, "ffn_gate_shexp.weight"); V(ffn_up_shexp, "ffn_up_shexp.weight");
                V(ffn_down_shexp, "ffn_down_shexp.weight");
                if (s->shexp_gate) V(ffn_gate_inp_shexp, "ffn_gate_inp_shexp.weight");
                else NONE(ffn_gate_inp_shexp);
            } else {
                NONE(ffn_gate_shexp); NONE(ffn_gate_inp_shexp);
            }
        }
#undef V
#undef NONE
    }
}

/* Trait table restated from llama.cpp / transformers, independent of arch.c. */
static void test_traits(void) {
    struct { const char *name; st_arch_id id; st_rope_style rope; st_qknorm qk; int topk, shexp, granite; } want[] = {
        {"llama", ST_ARCH_LLAMA, ST_ROPE_NORM, ST_QKNORM_NONE, 1, 0, 0},
        {"qwen2", ST_ARCH_QWEN2, ST_ROPE_NEOX, ST_QKNORM_NONE, 0, 0, 0},
        {"qwen3", ST_ARCH_QWEN3, ST_ROPE_NEOX, ST_QKNORM_HEAD, 0, 0, 0},
        {"qwen2moe", ST_ARCH_QWEN2MOE, ST_ROPE_NEOX, ST_QKNORM_NONE, 0, 1, 0},
        {"qwen3moe", ST_ARCH_QWEN3MOE, ST_ROPE_NEOX, ST_QKNORM_HEAD, 1, 0, 0},
        {"olmoe", ST_ARCH_OLMOE, ST_ROPE_NEOX, ST_QKNORM_FULL, 0, 0, 0},
        {"granitemoe", ST_ARCH_GRANITEMOE, ST_ROPE_NORM, ST_QKNORM_NONE, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const st_arch *a = st_arch_find(want[i].name);
        CHECK(a && a->id == want[i].id && a->rope == want[i].rope && a->qk_norm == want[i].qk &&
              a->norm_topk_default == want[i].topk && a->shexp_gated == want[i].shexp &&
              a->granite_scales == want[i].granite && strcmp(a->name, want[i].name) == 0,
              "traits of %s", want[i].name);
    }
    CHECK(st_arch_find("mamba") == NULL && st_arch_find(NULL) == NULL && st_arch_find("") == NULL,
          "unknown names");
}

static void test_archs(void) {
    const char *archs[] = {"llama", "qwen2", "qwen3", "olmoe", "qwen2moe", "qwen3moe",
                           "granitemoe", "mixtral"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        spec s = base_spec(archs[i]);
        strata_model *m;
        strata_status st = load_spec(&s, &m);
        CHECK(st == STRATA_OK, "load %s: %s", archs[i], strata_last_error());
        if (!m) continue;
        strata_model_info in;
        strata_model_get_info(m, &in);
        CHECK(strcmp(in.arch, s.arch) == 0 && strcmp(in.name, "synthetic") == 0, "%s: names", archs[i]);
        CHECK(in.n_layer == 2 && in.n_embd == 64 && in.n_head == 4 && in.n_head_kv == 2 &&
              in.head_dim == s.head_dim && in.n_vocab == 50 && in.n_ctx_train == 256,
              "%s: sizes %d %d %d %d %d %d", archs[i], in.n_layer, in.n_embd, in.n_head,
              in.n_head_kv, in.head_dim, in.n_vocab);
        CHECK(in.n_ff == s.n_ff && in.n_expert == s.n_expert && in.n_expert_used == s.n_used &&
              in.n_ff_exp == s.n_ff_exp && in.n_ff_shexp == s.n_ff_shexp,
              "%s: ffn %d %d %d %d %d", archs[i], in.n_ff, in.n_expert, in.n_expert_used,
              in.n_ff_exp, in.n_ff_shexp);
        CHECK(m->hp.head_dim_v == s.head_dim && m->hp.n_rot == s.head_dim &&
              fabsf(m->hp.norm_eps - 1e-6f) < 1e-12f && m->hp.rope_freq_base == 500000.0f,
              "%s: hp", archs[i]);
        CHECK(m->hp.expert_weights_norm == (s.n_expert ? m->arch->norm_topk_default : m->hp.expert_weights_norm),
              "%s: expert_weights_norm", archs[i]);
        if (s.yarn)
            CHECK(m->hp.rope_scaling == ST_ROPE_SCALING_YARN && m->hp.rope_freq_scale == 0.25f &&
                  m->hp.yarn_orig_ctx == 64 && m->hp.yarn_ext_factor == 1.0f &&
                  m->hp.yarn_attn_factor == 1.0f && m->hp.yarn_beta_fast == 32.0f &&
                  m->hp.yarn_beta_slow == 1.0f, "%s: yarn", archs[i]);
        else
            CHECK(m->hp.rope_scaling == ST_ROPE_SCALING_NONE && m->hp.rope_freq_scale == 1.0f &&
                  m->hp.yarn_ext_factor == 0.0f, "%s: no rope scaling", archs[i]);
        if (s.granite)
            CHECK(m->hp.embedding_scale == 12.0f && m->hp.residual_scale == 0.22f &&
                  m->hp.attention_scale == 0.0078125f && m->hp.logit_scale == 8.0f,
                  "%s: granite multipliers", archs[i]);
        else
            CHECK(m->hp.embedding_scale == 1.0f && m->hp.residual_scale == 1.0f &&
                  m->hp.attention_scale == 0.0f && m->hp.logit_scale == 1.0f, "%s: unit scales",
                  archs[i]);
        /* parameter count: recount from the spec */
        int64_t E = 64, V = 50, hd = s.head_dim, nq = 4 * hd, nk = 2 * hd;
        int64_t per = E * 2 + E * nq * 2 + E * nk * 2 + (s.bias ? nq + 2 * nk : 0) +
                      (s.qk == 1 ? nq + nk : s.qk == 2 ? 2 * hd : 0);
        int64_t exp = 0;
        if (s.n_expert) {
            per += E * s.n_expert + (s.shexp_gate ? E : 0) + 3 * E * s.n_ff_shexp;
            exp = 3 * E * s.n_ff_exp * s.n_expert;
        } else {
            per += 3 * E * s.n_ff;
        }
        int64_t total = E * V + E + (s.tied ? 0 : E * V) + 2 * (per + exp);
        int64_t active = (s.tied ? E * V : E) + E + (s.tied ? 0 : E * V) +
                         2 * (per + (s.n_expert ? exp / s.n_expert * s.n_used : 0));
        CHECK(in.n_params == total, "%s: n_params %lld vs %lld", archs[i], (long long)in.n_params,
              (long long)total);
        CHECK(in.n_params_active == active, "%s: active %lld vs %lld", archs[i],
              (long long)in.n_params_active, (long long)active);
        check_all_views(m, &s);
        strata_model_free(m);
    }

    /* variants: Mixtral per-expert tensors stored back to back; q8_0 attention weights;
     * head_count_kv as a per-layer array; an olmoe with tied output and explicit head size. */
    spec s = base_spec("mixtral");
    s.split_experts = 1;
    strata_model *m;
    CHECK(load_spec(&s, &m) == STRATA_OK, "split experts: %s", strata_last_error());
    if (m) { check_all_views(m, &s); strata_model_free(m); }

    s = base_spec("qwen2moe");
    s.q8 = 1;
    s.kv_array = 1;
    CHECK(load_spec(&s, &m) == STRATA_OK, "q8_0 + kv array: %s", strata_last_error());
    if (m) {
        CHECK(m->layers[1].wq.type == STRATA_TYPE_Q8_0 && m->layers[1].wq.row_bytes == 2 * 34 &&
              m->hp.n_head_kv == 2, "q8_0 views");
        check_all_views(m, &s);
        strata_model_free(m);
    }

    s = base_spec("olmoe");
    s.tied = 1;
    s.head_dim = 24; /* key_length != embedding_length / head_count */
    CHECK(load_spec(&s, &m) == STRATA_OK, "olmoe explicit head size: %s", strata_last_error());
    if (m) {
        CHECK(m->hp.head_dim == 24 && m->layers[0].q_norm.ne[0] == 96 &&
              m->layers[0].k_norm.ne[0] == 48 && m->layers[0].wo.ne[0] == 96, "head size 24");
        check_all_views(m, &s);
        strata_model_free(m);
    }

}

/* <arch>.expert_weights_norm (a bool) overrides the per-architecture default both ways: the
 * base file is copied through the writer with the key added. */
static void test_weights_norm_key(void) {
    const char *archs[2] = {"olmoe", "qwen3moe"};
    for (int i = 0; i < 2; i++) {
        spec s = base_spec(archs[i]);
        if (!write_model(&s, tmp_path)) { CHECK(0, "write"); continue; }
        /* rewrite with the bool key added: copy every key and tensor through the writer */
        strata_gguf *g = NULL;
        CHECK(strata_gguf_open(tmp_path, NULL, &g) == STRATA_OK, "reopen");
        if (!g) continue;
        char path2[300];
        snprintf(path2, sizeof path2, "%s.2", tmp_path);
        st_gguf_writer *w = NULL;
        st_gguf_writer_create(path2, 32, &w);
        for (int64_t k = 0; k < strata_gguf_kv_count(g); k++) {
            strata_gguf_value v;
            strata_gguf_kv_value(g, k, &v);
            st_gguf_writer_set_value(w, strata_gguf_kv_key(g, k), g, &v);
        }
        char key[64];
        snprintf(key, sizeof key, "%s.expert_weights_norm", archs[i]);
        int want = i == 0; /* the opposite of each default */
        st_gguf_writer_set_bool(w, key, want);
        for (int64_t t = 0; t < strata_gguf_tensor_count(g); t++) {
            strata_tensor_info ti;
            strata_gguf_tensor_info(g, t, &ti);
            st_gguf_writer_add_tensor(w, ti.name, ti.type, ti.n_dims, ti.ne, ti.data);
        }
        CHECK(st_gguf_writer_finish(w) == STRATA_OK, "finish: %s", strata_last_error());
        st_gguf_writer_free(w);
        strata_gguf_free(g);
        unlink(tmp_path);
        strata_model *m = NULL;
        CHECK(strata_model_load(path2, NULL, &m) == STRATA_OK, "load: %s", strata_last_error());
        if (m) {
            CHECK(m->hp.expert_weights_norm == want, "%s: expert_weights_norm key %d -> %d",
                  archs[i], want, m->hp.expert_weights_norm);
            strata_model_free(m);
        }
        unlink(path2);
    }
}

/* ==== error cases ============================================================================ */

static void expect_fail(const spec *s, strata_status want, const char *substr, const char *what) {
    strata_model *m = (strata_model *)1;
    strata_status st = load_spec(s, &m);
    CHECK(st == want && m == NULL && has(strata_last_error(), substr),
          "%s: got %s \"%s\", want %s with \"%s\"", what, strata_status_name(st),
          strata_last_error(), strata_status_name(want), substr);
    if (st == STRATA_OK && m) strata_model_free(m);
}

static void test_errors(void) {
    spec s = base_spec("olmoe");
    s.arch = "mamba9";
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "unknown architecture 'mamba9'", "unknown arch");

    s = base_spec("olmoe");
    s.drop_key = "general.architecture";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "general.architecture", "no architecture key");

    s = base_spec("olmoe");
    s.drop_tensor = "blk.1.ffn_up_exps.weight";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "missing tensor 'blk.1.ffn_up_exps.weight'",
                "missing tensor");

    s = base_spec("olmoe");
    s.drop_tensor = "blk.0.attn_k_norm.weight";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "blk.0.attn_k_norm.weight", "missing k norm");

    s = base_spec("qwen2");
    s.drop_tensor = "blk.1.attn_v.bias";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "blk.1.attn_v.bias", "qwen2 without v bias");

    s = base_spec("qwen2moe");
    s.drop_tensor = "blk.0.ffn_gate_inp_shexp.weight";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "ffn_gate_inp_shexp", "qwen2moe without shared gate");

    s = base_spec("olmoe");
    s.drop_tensor = "token_embd.weight";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "token_embd.weight", "no embeddings");

    s = base_spec("olmoe");
    s.reshape_tensor = "blk.0.attn_k.weight";
    expect_fail(&s, STRATA_ERR_FORMAT,
                "tensor 'blk.0.attn_k.weight': shape (64, 48), expected (64, 32)", "wrong shape");

    s = base_spec("olmoe");
    s.reshape_tensor = "blk.1.ffn_down_exps.weight";
    expect_fail(&s, STRATA_ERR_FORMAT, "shape (32, 80, 8), expected (32, 64, 8)",
                "wrong expert shape");

    s = base_spec("qwen3");
    s.reshape_tensor = "output.weight";
    s.tied = 0;
    expect_fail(&s, STRATA_ERR_FORMAT, "tensor 'output.weight': shape (64, 66), expected (64, 50)",
                "wrong output shape");

    s = base_spec("olmoe");
    s.u32_key = "olmoe.expert_used_count";
    s.u32_val = 9;
    expect_fail(&s, STRATA_ERR_FORMAT, "'olmoe.expert_used_count' (9) exceeds", "top-k > experts");

    s = base_spec("olmoe");
    s.u32_key = "olmoe.expert_count";
    s.u32_val = 0;
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "needs experts", "olmoe without experts");

    s = base_spec("olmoe");
    s.n_head_kv = 1;
    s.u32_key = "olmoe.attention.head_count";
    s.u32_val = 5;
    expect_fail(&s, STRATA_ERR_FORMAT, "does not divide 'olmoe.embedding_length'",
                "heads not dividing the embedding");

    s = base_spec("llama");
    s.u32_key = "llama.attention.head_count_kv";
    s.u32_val = 3;
    expect_fail(&s, STRATA_ERR_FORMAT, "head_count_kv' (3) must divide", "kv heads");

    s = base_spec("olmoe");
    s.drop_key = "olmoe.attention.layer_norm_rms_epsilon";
    expect_fail(&s, STRATA_ERR_NOT_FOUND,
                "missing required key 'olmoe.attention.layer_norm_rms_epsilon'", "missing eps");

    s = base_spec("qwen3");
    s.drop_key = "qwen3.block_count";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "missing required key 'qwen3.block_count'",
                "missing block_count");

    s = base_spec("llama");
    s.drop_key = "llama.feed_forward_length";
    expect_fail(&s, STRATA_ERR_NOT_FOUND, "llama.feed_forward_length", "dense without n_ff");

    s = base_spec("olmoe");
    s.retype_tensor = "blk.0.attn_q.weight";
    s.retype = STRATA_TYPE_I32;
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "tensor 'blk.0.attn_q.weight': type i32",
                "i32 weights");

    s = base_spec("olmoe");
    s.retype_tensor = "blk.1.ffn_norm.weight";
    s.retype = STRATA_TYPE_F16;
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "blk.1.ffn_norm.weight': type f16, expected f32",
                "f16 norm");

    s = base_spec("olmoe");
    s.extra_tensor = "blk.0.mystery.weight";
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "'blk.0.mystery.weight' is not used", "extra tensor");

    s = base_spec("llama");
    s.extra_tensor = "rope_freqs.weight";
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "rope_freqs.weight", "llama3 rope factors");

    s = base_spec("mixtral");
    s.split_experts = 2;
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "not stored back to back", "interleaved experts");

    s = base_spec("qwen2moe");
    s.kv_array = 1;
    s.kv_array_uneven = 1;
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "per-layer values differ", "uneven layers");

    s = base_spec("qwen3moe");
    s.str_key = "qwen3moe.rope.scaling.type";
    s.str_val = "longrope";
    expect_fail(&s, STRATA_ERR_UNSUPPORTED, "rope scaling type 'longrope'", "longrope");

    s = base_spec("qwen3");
    s.str_key = "qwen3.context_length";
    s.str_val = "long";
    expect_fail(&s, STRATA_ERR_TYPE, "qwen3.context_length", "string where a number belongs");

    s = base_spec("qwen2");
    s.u32_key = "qwen2.expert_count";
    s.u32_val = 4;
    expect_fail(&s, STRATA_ERR_FORMAT, "is dense", "dense arch with experts");

    s = base_spec("qwen3");
    s.u32_key = "qwen3.rope.dimension_count";
    s.u32_val = 33;
    expect_fail(&s, STRATA_ERR_FORMAT, "rope.dimension_count", "odd n_rot");

    /* arguments and files */
    strata_model *m = (strata_model *)1;
    CHECK(strata_model_load(NULL, NULL, &m) == STRATA_ERR_INVALID_ARG && m == NULL, "NULL path");
    CHECK(strata_model_load("x", NULL, NULL) == STRATA_ERR_INVALID_ARG, "NULL out");
    CHECK(strata_model_load("/nonexistent/model.gguf", NULL, &m) == STRATA_ERR_IO && m == NULL,
          "missing file: %s", strata_last_error());
    strata_model_info in;
    CHECK(strata_model_get_info(NULL, &in) == STRATA_ERR_INVALID_ARG, "info NULL");
    CHECK(strata_model_gguf(NULL) == NULL, "gguf NULL");
    strata_model_free(NULL);
    strata_model_params p = strata_model_default_params();
    CHECK(p.use_mmap == 1 && p.vocab_only == 0 && p.n_threads == 0, "defaults");

    /* vocab_only on a file without a tokenizer fails (the error comes from the tokenizer) */
    s = base_spec("llama");
    s.arch = "mamba9";
    if (write_model(&s, tmp_path)) {
        p.vocab_only = 1;
        strata_status st = strata_model_load(tmp_path, &p, &m);
        CHECK(st != STRATA_OK && m == NULL && strata_last_error()[0],
              "vocab_only without tokenizer: %s", strata_status_name(st));
        unlink(tmp_path);
    }
}

int main(void) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/strata_test_model_%d.gguf", (int)getpid());
    test_traits();
    test_tiny();
    test_vocab_files();
    test_archs();
    test_weights_norm_key();
    test_errors();
    unlink(tmp_path);
    return test_report();
}
