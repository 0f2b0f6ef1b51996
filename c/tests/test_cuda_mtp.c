/* test_cuda_mtp.c - the MTP drafter (strata_drafter_mtp_create) of CUDA sessions, on three
 * synthetic files with an MTP layer (random f32 weights through the GGUF writer): deepseek2 (latent
 * attention, a leading dense layer, scored routing in groups, a shared expert; the MTP layer
 * sharing the trunk's embedding and head, as DeepSeek-V3's), glm4moe (GQA with q/k/v biases,
 * per-head q/k norms, partial NEOX rope, a leading dense layer, a shared expert; the MTP layer with
 * its own embedding and head, as GLM-4.5's) and qwen3next (gated DeltaNet layers 0 and 2 around a
 * gated full-attention layer, softmax routing, a sigmoid-gated shared expert; the MTP layer a gated
 * full-attention layer sharing the trunk's embedding and head, as Qwen3-Next's). On each:
 *   - CPU (always): the drafter proposes drafts along a teacher-forced text, and greedy decoding
 *     through verify windows with its drafts gives plain greedy's tokens, some drafts accepted
 *     and some rejected (acceptance printed; the MTP layer's eh_proj is near the identity on the
 *     embedding half, glm4moe's own embedding and head near the trunk's, qwen3next's output
 *     projections small, so that its drafts agree with the trunk at times); qwen3next's drafter
 *     needs no CPU recurrent state: created and proposing with the session's s->rs hidden (NULL),
 *     it gives the drafts it gives with it, at every step (s->rs is what a CUDA session lacks);
 *   - GPU (skipped, saying why, where CUDA is unusable), the MTP layer on the GPU (mtp_gpu.c:
 *     the default wherever it fits): the drafter says so, and its drafts are the CPU session's
 *     and those of the layer run on the CPU from the GPU's hidden rows on at least 90% of the
 *     steps (printed); the layer on the CPU (s->mtp_on_cpu, the fallback): the hidden rows the GPU
 *     session hands it (s->mtp_h) match the CPU session's (NMSE <= 1e-6), and its drafts are
 *     exactly those of a CPU session's drafter fed the GPU's hidden rows; an attached drafter,
 *     proposing between the steps, leaves the GPU's logits bit for bit; greedy decoding with MTP
 *     drafts gives the GPU's plain greedy tokens for the placements all resident, CUDA graphs,
 *     --cpu-moe and --expert-cache with n_expert slots (the MTP layer's experts on the GPU in
 *     each) and with the layer on the CPU (acceptance printed). */
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

enum { NL = 3, ND = 1, E = 64, V = 64, FD = 96, FE = 32,
       /* deepseek2 */ H = 4, R = 32, NR = 16, NOPE = 16, HV = 16, X = 16, K = 4, G = 4, GU = 2,
       /* glm4moe (head_dim 64: the GPU's) */ GH = 4, GKV = 2, GHD = 64, GROPE = 32, GX = 8, GK = 2,
       /* qwen3next (head_dim 64; DeltaNet widths % 32: the GPU's) */ QH = 4, QKV = 2, QHD = 64, QROT = 16,
       QX = 8, QK = 2, QFS = 64, SNK = 2, SNV = 4, SD = 32, SCONV = 4, SINT = 2,
       P = 8, NSTEP = 24, MAXD = 4, NGEN = 32, NCTX = 128 };

enum { DS2, GLM, Q3N }; /* the files */
static const char *const ARCH[] = {"deepseek2", "glm4moe", "qwen3next"};

static strata_token g_toks[P + NSTEP + 1]; /* the teacher-forced text */

/* ---- the files ------------------------------------------------------------------------------ */

/* deepseek2's layers; glm4moe's FFN is theirs with its own expert count (its attention is not) */
static const mla_spec DS = {.n_embd = E, .n_head = H, .kv_lora = R, .n_rot = NR, .qk_nope = NOPE, .v_head = HV,
                            .n_ff = FD, .n_ff_exp = FE, .n_expert = X, .n_dense = ND};
static const mla_spec GLM_FFN = {.n_embd = E, .n_ff = FD, .n_ff_exp = FE, .n_expert = GX, .n_dense = ND};

static void key_u32(st_gguf_writer *w, const char *arch, const char *k, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    st_gguf_writer_set_u32(w, key, v);
}

static void key_f32(st_gguf_writer *w, const char *arch, const char *k, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    st_gguf_writer_set_f32(w, key, v);
}

/* qwen3next's own keys: Qwen3-Next's layout scaled down (every SINT-th layer full attention). */
static void write_keys_q3n(st_gguf_writer *w, const char *A) {
    key_u32(w, A, "attention.head_count", QH);
    key_u32(w, A, "attention.head_count_kv", QKV);
    key_u32(w, A, "attention.key_length", QHD);
    key_u32(w, A, "attention.value_length", QHD);
    key_u32(w, A, "rope.dimension_count", QROT);
    key_f32(w, A, "rope.freq_base", 10000000.0f);
    key_u32(w, A, "expert_count", QX);
    key_u32(w, A, "expert_used_count", QK);
    key_u32(w, A, "expert_feed_forward_length", FE);
    key_u32(w, A, "expert_shared_feed_forward_length", QFS);
    key_u32(w, A, "ssm.conv_kernel", SCONV);
    key_u32(w, A, "ssm.inner_size", SNV * SD);
    key_u32(w, A, "ssm.state_size", SD);
    key_u32(w, A, "ssm.time_step_rank", SNV);
    key_u32(w, A, "ssm.group_count", SNK);
    key_u32(w, A, "full_attention_interval", SINT);
}

static void write_keys(st_gguf_writer *w, int kind) {
    const char *A = ARCH[kind];
    const int glm = kind == GLM;
    st_gguf_writer_set_str(w, "general.architecture", A);
    st_gguf_writer_set_str(w, "general.name", "synthetic mtp");
    key_u32(w, A, "context_length", 256);
    key_u32(w, A, "embedding_length", E);
    key_u32(w, A, "block_count", NL + 1);
    key_u32(w, A, "nextn_predict_layers", 1);
    key_f32(w, A, "attention.layer_norm_rms_epsilon", 1e-6f);
    if (kind == Q3N) {
        write_keys_q3n(w, A);
        return;
    }
    key_u32(w, A, "feed_forward_length", FD);
    key_u32(w, A, "expert_feed_forward_length", FE);
    key_u32(w, A, "expert_shared_count", 1);
    key_u32(w, A, "leading_dense_block_count", ND);
    key_u32(w, A, "expert_gating_func", 2);
    key_f32(w, A, "expert_weights_scale", 2.5f);
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", A);
    st_gguf_writer_set_bool(w, key, 1);
    if (glm) {
        key_u32(w, A, "attention.head_count", GH);
        key_u32(w, A, "attention.head_count_kv", GKV);
        key_u32(w, A, "attention.key_length", GHD);
        key_u32(w, A, "attention.value_length", GHD);
        key_u32(w, A, "rope.dimension_count", GROPE);
        key_f32(w, A, "rope.freq_base", 1000000.0f);
        key_u32(w, A, "expert_count", GX);
        key_u32(w, A, "expert_used_count", GK);
    } else {
        mla_write_attn_keys(w, &DS);
        key_f32(w, A, "rope.freq_base", 10000.0f);
        key_u32(w, A, "expert_count", X);
        key_u32(w, A, "expert_used_count", K);
        key_u32(w, A, "expert_group_count", G);
        key_u32(w, A, "expert_group_used_count", GU);
    }
}

/* The MTP layer's eh_proj (E rows of 2E) plus the identity on the embedding half: its rows then
 * start from the token's own embedding, as the trunk's residual does, so its drafts agree with
 * the trunk often enough for windows to accept some. */
static void eh_identity(float *w) {
    for (int o = 0; o < E; o++) w[(size_t)o * 2 * E + (size_t)o] += 1.0f;
}

/* qwen3next's layer il (il == NL: the MTP layer, a full-attention layer): the output projections
 * (attn_output, ssm_out, the experts' and shared expert's down) small, so that the trunk and the
 * MTP layer are each near a bigram map through the shared head and their drafts agree at times. */
static int write_layer_q3n(f32_file *f, int il) {
    char n[128];
    const int64_t dk = SNK * SD, di = SNV * SD, nq = QH * QHD, nk = QKV * QHD;
#define T(nm, a, b, c, amp, base) (snprintf(n, sizeof n, "blk.%d." nm, il), f32_add(f, n, a, b, c, amp, base))
    int ok = T("attn_norm.weight", E, 1, 1, 0.1f, 1.0f);
    if (il < NL && (il + 1) % SINT != 0) /* a gated DeltaNet layer */
        ok = ok && T("attn_qkv.weight", E, 2 * dk + di, 1, 0.2f, 0.0f) && T("attn_gate.weight", E, di, 1, 0.2f, 0.0f) &&
             T("ssm_ba.weight", E, 2 * SNV, 1, 0.2f, 0.0f) && T("ssm_conv1d.weight", SCONV, 2 * dk + di, 1, 0.3f, 0.0f) &&
             T("ssm_dt.bias", SNV, 1, 1, 0.2f, 0.0f) && T("ssm_a", SNV, 1, 1, 0.2f, -0.5f) &&
             T("ssm_norm.weight", SD, 1, 1, 0.1f, 1.0f) && T("ssm_out.weight", di, E, 1, 0.02f, 0.0f);
    else
        ok = ok && T("attn_q.weight", E, 2 * nq, 1, 0.2f, 0.0f) && T("attn_k.weight", E, nk, 1, 0.2f, 0.0f) &&
             T("attn_v.weight", E, nk, 1, 0.2f, 0.0f) && T("attn_q_norm.weight", QHD, 1, 1, 0.1f, 1.0f) &&
             T("attn_k_norm.weight", QHD, 1, 1, 0.1f, 1.0f) && T("attn_output.weight", nq, E, 1, 0.02f, 0.0f);
    ok = ok && T("post_attention_norm.weight", E, 1, 1, 0.1f, 1.0f) && T("ffn_gate_inp.weight", E, QX, 1, 0.5f, 0.0f) &&
         T("ffn_gate_exps.weight", E, FE, QX, 0.2f, 0.0f) && T("ffn_up_exps.weight", E, FE, QX, 0.2f, 0.0f) &&
         T("ffn_down_exps.weight", FE, E, QX, 0.02f, 0.0f) && T("ffn_gate_inp_shexp.weight", E, 1, 1, 0.2f, 0.0f) &&
         T("ffn_gate_shexp.weight", E, QFS, 1, 0.2f, 0.0f) && T("ffn_up_shexp.weight", E, QFS, 1, 0.2f, 0.0f) &&
         T("ffn_down_shexp.weight", QFS, E, 1, 0.02f, 0.0f);
    if (ok && il == NL) /* eh_proj: near the identity on the embedding half (see eh_identity) */
        ok = T("nextn.eh_proj.weight", 2 * E, E, 1, 0.05f, 0.0f) && T("nextn.enorm.weight", E, 1, 1, 0.1f, 1.0f) &&
             T("nextn.hnorm.weight", E, 1, 1, 0.1f, 1.0f) && T("nextn.shared_head_norm.weight", E, 1, 1, 0.1f, 1.0f);
#undef T
    if (ok && il == NL) eh_identity(f->bufs[f->n_bufs - 4]); /* (3 norms after it) */
    return ok;
}

/* Layer il's tensors (il == NL: the MTP layer, its nextn parts too). */
static int write_layer(f32_file *f, int kind, int il) {
    if (kind == Q3N) return write_layer_q3n(f, il);
    const int glm = kind == GLM;
    char n[128];
#define T(nm, a, b, c, amp, base) (snprintf(n, sizeof n, "blk.%d." nm, il), f32_add(f, n, a, b, c, amp, base))
    int ok;
    if (glm)
        ok = T("attn_norm.weight", E, 1, 1, 0.1f, 1.0f) &&
             T("attn_q.weight", E, GH * GHD, 1, 0.2f, 0.0f) && T("attn_q.bias", GH * GHD, 1, 1, 0.05f, 0.0f) &&
             T("attn_k.weight", E, GKV * GHD, 1, 0.2f, 0.0f) && T("attn_k.bias", GKV * GHD, 1, 1, 0.05f, 0.0f) &&
             T("attn_v.weight", E, GKV * GHD, 1, 0.2f, 0.0f) && T("attn_v.bias", GKV * GHD, 1, 1, 0.05f, 0.0f) &&
             T("attn_q_norm.weight", GHD, 1, 1, 0.1f, 1.0f) && T("attn_k_norm.weight", GHD, 1, 1, 0.1f, 1.0f) &&
             T("attn_output.weight", GH * GHD, E, 1, 0.05f, 0.0f) &&
             T("post_attention_norm.weight", E, 1, 1, 0.1f, 1.0f);
    else
        ok = mla_add_attention(f, &DS, il);
    ok = ok && mla_add_ffn(f, glm ? &GLM_FFN : &DS, il);
    if (ok && il == NL) { /* eh_proj: near the identity on the embedding half (see eh_identity) */
        ok = T("nextn.eh_proj.weight", 2 * E, E, 1, 0.05f, 0.0f) && T("nextn.enorm.weight", E, 1, 1, 0.1f, 1.0f) &&
             T("nextn.hnorm.weight", E, 1, 1, 0.1f, 1.0f) && T("nextn.shared_head_norm.weight", E, 1, 1, 0.1f, 1.0f);
        if (ok && glm) /* GLM-4.5's MTP layer has its own embedding and head: here the trunk's
                        * (token_embd, output: bufs[0], [2]) plus a little noise */
            ok = T("nextn.embed_tokens.weight", E, V, 1, 0.02f, 0.0f) &&
                 T("nextn.shared_head_head.weight", E, V, 1, 0.02f, 0.0f);
        for (int i = 0; ok && glm && i < E * V; i++) {
            f->bufs[f->n_bufs - 2][i] += f->bufs[0][i];
            f->bufs[f->n_bufs - 1][i] += f->bufs[2][i];
        }
    }
#undef T
    if (ok && il == NL) eh_identity(f->bufs[f->n_bufs - (glm ? 6 : 4)]); /* (3 norms, glm's 2 after it) */
    return ok;
}

static int write_mtp_file(const char *path, int kind) {
    f32_file f;
    if (!f32_file_create(&f, path, kind == GLM ? 0x61A4D5ULL : kind == Q3N ? 0x3E47A1ULL : 0xD5EE92ULL)) return 0;
    write_keys(f.w, kind);
    int ok = f32_add(&f, "token_embd.weight", E, V, 1, 0.5f, 0.0f) &&
             f32_add(&f, "output_norm.weight", E, 1, 1, 0.1f, 1.0f) &&
             f32_add(&f, "output.weight", E, V, 1, 0.2f, 0.0f);
    for (int il = 0; il <= NL && ok; il++) ok = write_layer(&f, kind, il);
    return f32_file_finish(&f, ok, path);
}

/* ---- sessions ------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    strata_backend_kind backend;
    int graphs, n_cpu_moe;
    int expert_cache; /* 1: as many GPU slots as a layer has experts */
    int mtp_cpu;      /* the MTP layer on the CPU (s->mtp_on_cpu) */
} placement;

static const placement CPU = {"cpu", STRATA_BACKEND_CPU, 0, 0, 0, 0};
static const placement GPU[] = {
    {"gpu, all resident", STRATA_BACKEND_CUDA, 0, 0, 0, 0},
    {"gpu, CUDA graphs", STRATA_BACKEND_CUDA, 1, 0, 0, 0},
    {"gpu, --cpu-moe", STRATA_BACKEND_CUDA, 0, -1, 0, 0},
    {"gpu, --expert-cache n_expert", STRATA_BACKEND_CUDA, 0, 0, 1, 0}, /* (half the routed experts) */
    {"gpu, the MTP layer on the CPU", STRATA_BACKEND_CUDA, 0, 0, 0, 1},
};
static const placement *const GPU_MTP_CPU = &GPU[4];

static strata_session *new_session(const strata_model *m, const placement *pl) {
    strata_session_params sp = strata_session_default_params();
    sp.backend = pl->backend;
    sp.n_ctx = NCTX;
    sp.n_batch = 16;
    sp.n_threads = 2;
    sp.kv_type = STRATA_TYPE_F32; /* (the MTP layer's own cache is f32) */
    sp.cuda.graphs = pl->graphs;
    sp.placement.n_cpu_moe = pl->n_cpu_moe;
    sp.placement.expert_cache = pl->expert_cache ? m->hp.n_expert : 0; /* the fewest slots it takes */
    strata_session *s = NULL;
    CHECK(strata_session_create(m, &sp, &s) == STRATA_OK, "%s: session: %s", pl->name, strata_last_error());
    if (s) s->mtp_on_cpu = pl->mtp_cpu;
    return s;
}

/* The drafter's layer is where the placement wants it: on the GPU for a GPU session (the small
 * files' layer always fits), unless asked for the CPU. */
static void check_where(const strata_drafter *d, const placement *pl) {
    const char *w = strata_drafter_describe(d);
    const int gpu = pl->backend == STRATA_BACKEND_CUDA && !pl->mtp_cpu;
    CHECK(strstr(w, gpu ? "on the GPU" : "on the CPU") != NULL, "%s: the drafter says \"%s\"", pl->name, w);
}

/* The drafts along the teacher-forced text: after the prompt and after each of NSTEP further
 * tokens, up to MAXD drafts (drafts[i][..], counts n[i]); h (when given; the layer on the CPU)
 * gets the session's hidden rows. mirror (when given; the layer on the CPU): the same walk by a
 * CPU session whose drafter reads this session's hidden rows, its drafts into mirror. 1 when every
 * call succeeded. */
typedef strata_token walk_drafts[NSTEP][MAXD];

static int draft_walk(const strata_model *m, const placement *pl, walk_drafts drafts, int32_t *n, float *h,
                      walk_drafts mirror, int32_t *mn) {
    strata_session *s = new_session(m, pl), *c = mirror ? new_session(m, &CPU) : NULL;
    strata_drafter *d = NULL, *dc = NULL;
    strata_status st = s && (!mirror || c) ? strata_drafter_mtp_create(s, &d) : STRATA_ERR_INVALID_ARG;
    if (st == STRATA_OK && c) st = strata_drafter_mtp_create(c, &dc);
    if (st == STRATA_OK) check_where(d, pl);
    if (st == STRATA_OK && (h || mirror) && !s->mtp_h) st = STRATA_ERR_INVALID_ARG; /* (the layer is on the GPU) */
    if (st == STRATA_OK) st = strata_session_decode(s, g_toks, P, NULL, 0);
    if (st == STRATA_OK && c) st = strata_session_decode(c, g_toks, P, NULL, 0);
    for (int i = 0; i < NSTEP && st == STRATA_OK; i++) {
        const int64_t nh = P + i + 1;
        st = strata_drafter_propose(d, g_toks, nh, MAXD, drafts[i], &n[i]);
        if (st == STRATA_OK && c) { /* the GPU's hidden rows so far, read by the CPU's drafter */
            memcpy(c->mtp_h, s->mtp_h, sizeof(float) * (size_t)((nh - 1) * E));
            st = strata_drafter_propose(dc, g_toks, nh, MAXD, mirror[i], &mn[i]);
        }
        if (st == STRATA_OK) st = strata_session_decode(s, g_toks + nh - 1, 1, NULL, 0);
        if (st == STRATA_OK && c) st = strata_session_decode(c, g_toks + nh - 1, 1, NULL, 0);
    }
    CHECK(st == STRATA_OK, "%s: the drafts along the text: %s", pl->name, strata_last_error());
    if (st == STRATA_OK && h) memcpy(h, s->mtp_h, sizeof(float) * (size_t)((P + NSTEP) * E));
    strata_drafter_free(d);
    strata_drafter_free(dc);
    strata_session_free(s);
    strata_session_free(c);
    return st == STRATA_OK;
}

/* Steps whose drafts are the same in a and b. */
static int same_steps(walk_drafts a, const int32_t *na, walk_drafts b, const int32_t *nb) {
    int same = 0;
    for (int i = 0; i < NSTEP; i++) same += na[i] == nb[i] && !memcmp(a[i], b[i], sizeof(strata_token) * (size_t)na[i]);
    return same;
}

/* Greedy decoding of NGEN tokens after the prompt: one token a step (use_mtp 0) or through verify
 * windows of the MTP drafter's drafts (up to MAXD); the windows' counts into ss. */
static int greedy_run(const strata_model *m, const placement *pl, int use_mtp, strata_token *out,
                      strata_spec_stats *ss) {
    strata_session *s = new_session(m, pl);
    strata_sampler_params spp = strata_sampler_default_params();
    spp.temperature = 0.0f;
    strata_sampler *smp = NULL;
    strata_drafter *d = NULL;
    float *lg = malloc(sizeof(float) * V);
    strata_status st = s && lg ? strata_sampler_create(&spp, V, &smp) : STRATA_ERR_NOMEM;
    if (st == STRATA_OK && use_mtp) st = strata_drafter_mtp_create(s, &d);
    if (st == STRATA_OK && use_mtp) check_where(d, pl);
    if (st == STRATA_OK) st = strata_session_decode(s, g_toks, P, lg, 0);
    strata_token hist[P + NGEN + MAXD + 2], last = 0;
    memcpy(hist, g_toks, sizeof(strata_token) * P);
    int64_t nh = P;
    int n = 0;
    if (st == STRATA_OK) st = strata_sampler_sample(smp, lg, &last);
    if (st == STRATA_OK) out[n++] = last;
    memset(ss, 0, sizeof *ss);
    while (st == STRATA_OK && n < NGEN) {
        strata_token draft[STRATA_DRAFT_MAX], got[STRATA_DRAFT_MAX + 1];
        int32_t nd = 0, ng = 0;
        hist[nh++] = last;
        if (!use_mtp) {
            st = strata_session_decode_gen(s, &last, 1, lg, 0);
            if (st == STRATA_OK) st = strata_sampler_sample(smp, lg, &last);
            out[n++] = last;
            continue;
        }
        st = strata_drafter_propose(d, hist, nh, MAXD, draft, &nd);
        if (st == STRATA_OK) st = strata_session_speculate(s, smp, last, draft, nd, got, &ng);
        for (int i = 0; st == STRATA_OK && i < ng && n < NGEN; i++) out[n++] = got[i];
        for (int i = 0; i + 1 < ng; i++) hist[nh++] = got[i];
        if (ng > 0) last = got[ng - 1];
    }
    CHECK(st == STRATA_OK, "%s: greedy run (mtp %d): %s", pl->name, use_mtp, strata_last_error());
    if (st == STRATA_OK && use_mtp) strata_session_get_spec_stats(s, ss);
    free(lg);
    strata_drafter_free(d);
    strata_sampler_free(smp);
    strata_session_free(s);
    return st == STRATA_OK;
}

/* Greedy tokens with MTP drafts equal to plain greedy's on placement pl; acceptance printed. */
static void check_spec(const strata_model *m, const char *model, const placement *pl) {
    strata_token plain[NGEN], with_mtp[NGEN];
    strata_spec_stats ss;
    memset(plain, 0, sizeof plain);
    memset(with_mtp, 0xff, sizeof with_mtp);
    if (!greedy_run(m, pl, 0, plain, &ss) || !greedy_run(m, pl, 1, with_mtp, &ss)) return;
    const double rate = ss.drafted ? 100.0 * (double)ss.accepted / (double)ss.drafted : 0.0;
    printf("%s, %s: --spec mtp: %lld of %lld drafts accepted (%.1f%%) in %lld windows\n", model, pl->name,
           (long long)ss.accepted, (long long)ss.drafted, rate, (long long)ss.windows);
    CHECK(!memcmp(plain, with_mtp, sizeof plain), "%s, %s: greedy tokens with MTP drafts are plain greedy's", model,
          pl->name);
    CHECK(ss.windows > 0 && ss.accepted < ss.drafted, "%s, %s: windows ran, some drafts rejected (%lld of %lld)",
          model, pl->name, (long long)ss.accepted, (long long)ss.drafted);
    if (pl->backend == STRATA_BACKEND_CPU) /* (the GPU's count may differ by a near-tie: printed) */
        CHECK(ss.accepted > 0, "%s, %s: some drafts accepted", model, pl->name);
}

/* ---- the checks ----------------------------------------------------------------------------- */

/* An attached drafter (its layer on the GPU, proposing before each step, its rows computed in the
 * session's scratch) leaves the GPU session's logits (the prompt's rows, then single steps) bit
 * for bit. */
static void check_logits_untouched(const strata_model *m, const char *model) {
    float *a = malloc(sizeof(float) * (size_t)(2 * P) * V), *b = malloc(sizeof(float) * (size_t)(2 * P) * V);
    strata_status st = a && b ? STRATA_OK : STRATA_ERR_NOMEM;
    for (int with = 0; with < 2 && st == STRATA_OK; with++) {
        float *o = with ? b : a;
        strata_session *s = new_session(m, &GPU[0]);
        strata_drafter *d = NULL;
        st = s ? STRATA_OK : STRATA_ERR_INVALID_ARG;
        if (st == STRATA_OK && with) st = strata_drafter_mtp_create(s, &d);
        if (st == STRATA_OK) st = strata_session_decode(s, g_toks, P, o, 1);
        for (int i = 0; i < P && st == STRATA_OK; i++) {
            strata_token dr[MAXD];
            int32_t nd = 0;
            if (with) st = strata_drafter_propose(d, g_toks, P + i + 1, MAXD, dr, &nd);
            if (st == STRATA_OK) st = strata_session_decode(s, g_toks + P + i, 1, o + (size_t)(P + i) * V, 0);
        }
        strata_drafter_free(d);
        strata_session_free(s);
    }
    CHECK(st == STRATA_OK && !memcmp(a, b, sizeof(float) * (size_t)(2 * P) * V),
          "%s: the GPU's logits with an MTP drafter attached are those without: %s", model,
          st == STRATA_OK ? "compared" : strata_last_error());
    free(a);
    free(b);
}

static void check_gpu(const strata_model *m, const char *model, walk_drafts cpu, const int32_t *ncpu,
                      const float *hcpu) {
    static walk_drafts gpu, mir, dev;
    int32_t ngpu[NSTEP], nmir[NSTEP], ndev[NSTEP];
    float *hgpu = malloc(sizeof(float) * (size_t)((P + NSTEP) * E));
    if (!hgpu || !draft_walk(m, GPU_MTP_CPU, gpu, ngpu, hgpu, mir, nmir)) {
        free(hgpu);
        return;
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < (int64_t)(P + NSTEP) * E; i++) {
        num += ((double)hgpu[i] - hcpu[i]) * ((double)hgpu[i] - hcpu[i]);
        den += (double)hcpu[i] * hcpu[i];
    }
    const double nmse = den > 0 ? num / den : num;
    const int same_mirror = same_steps(gpu, ngpu, mir, nmir), same_cpu = same_steps(gpu, ngpu, cpu, ncpu);
    printf("%s: GPU hidden rows vs CPU's: NMSE %.3g; GPU drafts = the CPU drafter's on the GPU's rows at %d of %d "
           "steps, = the CPU session's at %d of %d\n", model, nmse, same_mirror, NSTEP, same_cpu, NSTEP);
    CHECK(nmse <= 1e-6, "%s: the GPU's hidden rows match the CPU's (NMSE %.3g)", model, nmse);
    CHECK(same_mirror == NSTEP, "%s: GPU drafts are the CPU drafter's on the same rows (%d of %d)", model, same_mirror,
          NSTEP);
    CHECK(same_cpu * 10 >= NSTEP * 9, "%s: GPU drafts are the CPU session's at >= 90%% of the steps (%d of %d)", model,
          same_cpu, NSTEP);
    free(hgpu);
    if (draft_walk(m, &GPU[0], dev, ndev, NULL, NULL, NULL)) { /* the layer on the GPU */
        const int dev_cpu = same_steps(dev, ndev, cpu, ncpu), dev_host = same_steps(dev, ndev, gpu, ngpu);
        printf("%s: the MTP layer on the GPU: its drafts = the CPU session's at %d of %d steps, = the layer's on "
               "the CPU from the GPU's rows at %d of %d\n", model, dev_cpu, NSTEP, dev_host, NSTEP);
        CHECK(dev_cpu * 10 >= NSTEP * 9, "%s: the GPU layer's drafts are the CPU session's at >= 90%% of the steps "
              "(%d of %d)", model, dev_cpu, NSTEP);
        CHECK(dev_host * 10 >= NSTEP * 9, "%s: the GPU layer's drafts are the CPU layer's on the GPU's rows at >= 90%% "
              "of the steps (%d of %d)", model, dev_host, NSTEP);
    }
    check_logits_untouched(m, model);
    for (size_t p = 0; p < sizeof GPU / sizeof GPU[0]; p++) check_spec(m, model, &GPU[p]);
}

/* qwen3next: the drafter needs no CPU recurrent state (a CUDA session has none). A CPU session's
 * drafter, created and proposing with s->rs hidden (NULL; restored for the session's own decode
 * calls, whose DeltaNet layers need it), gives the drafts it gives with s->rs there (cpu, ncpu:
 * draft_walk's) at every step; a read of s->rs would crash the test. */
static void check_no_rs(const strata_model *m, walk_drafts cpu, const int32_t *ncpu) {
    static walk_drafts got;
    int32_t n[NSTEP];
    strata_session *s = new_session(m, &CPU);
    if (!s) return;
    st_rs *rs = s->rs;
    CHECK(rs != NULL, "qwen3next: a CPU session has a recurrent state");
    strata_drafter *d = NULL;
    s->rs = NULL;
    strata_status st = strata_drafter_mtp_create(s, &d);
    s->rs = rs;
    CHECK(st == STRATA_OK, "qwen3next: a drafter without s->rs: %s", strata_last_error());
    if (st == STRATA_OK) st = strata_session_decode(s, g_toks, P, NULL, 0);
    for (int i = 0; i < NSTEP && st == STRATA_OK; i++) {
        const int64_t nh = P + i + 1;
        s->rs = NULL;
        st = strata_drafter_propose(d, g_toks, nh, MAXD, got[i], &n[i]);
        s->rs = rs;
        if (st == STRATA_OK) st = strata_session_decode(s, g_toks + nh - 1, 1, NULL, 0);
    }
    CHECK(st == STRATA_OK, "qwen3next: the drafts without s->rs: %s", strata_last_error());
    if (st == STRATA_OK) {
        const int same = same_steps(got, n, cpu, ncpu);
        CHECK(same == NSTEP, "qwen3next: drafts without s->rs are those with it (%d of %d steps)", same, NSTEP);
    }
    strata_drafter_free(d);
    strata_session_free(s);
}

/* A history token outside the vocabulary (the newest, or one past the drafter's kept rows) is
 * refused with the reason, nothing read out of bounds (the tests run under ASan in CI). */
static void check_bad_token(const strata_model *m, const placement *pl) {
    strata_session *s = new_session(m, pl);
    strata_drafter *d = NULL;
    strata_status st = s ? strata_drafter_mtp_create(s, &d) : STRATA_ERR_INVALID_ARG;
    if (st == STRATA_OK) st = strata_session_decode(s, g_toks, P, NULL, 0);
    strata_token h[P + 1], out[MAXD];
    memcpy(h, g_toks, sizeof h);
    int32_t n = 0;
    const strata_token bad[2] = {V, -1};
    for (int i = 0; i < 2 && st == STRATA_OK; i++) {
        h[P] = bad[i];
        const strata_status got = strata_drafter_propose(d, h, P + 1, MAXD, out, &n);
        CHECK(got == STRATA_ERR_INVALID_ARG && n == 0 && strstr(strata_last_error(), "outside the vocabulary"),
              "%s: history token %d refused: %s", pl->name, (int)bad[i], strata_last_error());
    }
    h[P] = g_toks[P];
    if (st == STRATA_OK) st = strata_drafter_propose(d, h, P + 1, MAXD, out, &n);
    CHECK(st == STRATA_OK && n == MAXD, "%s: the drafter drafts after a refused history: %s", pl->name,
          strata_last_error());
    strata_drafter_free(d);
    strata_session_free(s);
}

static void run_model(int kind, int gpu_ok) {
    const char *model = ARCH[kind];
    char path[256];
    snprintf(path, sizeof path, "/tmp/strata_cuda_mtp_%s_%d.gguf", model, (int)getpid());
    CHECK(write_mtp_file(path, kind), "%s: write the file", model);
    strata_model_params mp = strata_model_default_params();
    strata_model *m = NULL;
    const strata_status st = strata_model_load(path, &mp, &m);
    unlink(path);
    CHECK(st == STRATA_OK, "%s: load: %s", model, strata_last_error());
    if (st != STRATA_OK) return;
    CHECK(m->n_mtp == 1 && m->hp.n_layer == NL, "%s: %d trunk layers and %d MTP layer bound", model, m->hp.n_layer,
          m->n_mtp);
    static walk_drafts cpu;
    int32_t ncpu[NSTEP];
    float *hcpu = malloc(sizeof(float) * (size_t)((P + NSTEP) * E));
    if (hcpu && draft_walk(m, &CPU, cpu, ncpu, hcpu, NULL, NULL)) {
        int full = 0;
        for (int i = 0; i < NSTEP; i++) full += ncpu[i] == MAXD;
        CHECK(full == NSTEP, "%s: %d drafts at each of %d steps (%d)", model, MAXD, NSTEP, full);
        check_spec(m, model, &CPU);
        check_bad_token(m, &CPU);
        if (gpu_ok) check_bad_token(m, &GPU[0]);
        if (kind == Q3N) check_no_rs(m, cpu, ncpu);
        if (gpu_ok) check_gpu(m, model, cpu, ncpu, hcpu);
    }
    free(hcpu);
    strata_model_free(m);
}

int main(void) {
    test_rng r = {0x7E57A7ULL};
    for (int i = 0; i < P + NSTEP + 1; i++) g_toks[i] = (strata_token)(test_rng_next(&r) % V);
    strata_backend_info bi;
    CHECK(strata_backend_query(STRATA_BACKEND_CUDA, &bi) == STRATA_OK, "backend query");
    if (!bi.available) SKIP("the GPU half: CUDA unavailable: %s", bi.detail);
    else printf("GPU: %s\n", bi.detail);
    run_model(DS2, bi.available);
    run_model(GLM, bi.available);
    run_model(Q3N, bi.available);
    return test_report();
}
