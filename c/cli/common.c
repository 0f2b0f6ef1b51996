/* common.c - shared pieces of the model-running subcommands (see common.h): model/session setup,
 * and the top-K logprob dump and KL estimate. */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Model, session, tokens, files
 * ------------------------------------------------------------------------------------------- */

int cli_load_model(const cli_opts *o, strata_model **model, double *load_s) {
    if (o->cpu_isa) { /* process-wide, before the model is read and any thread computes */
        strata_cpu_isa l;
        if (cli_cpu_isa_from_name(o->cpu_isa, &l) != 0)
            return cli_fail("bad value '%s' for --cpu-isa / $STRATA_CPU_ISA (scalar, avx2, avx512 or best)", o->cpu_isa);
        if (strata_cpu_isa_set(l) != STRATA_OK) return cli_fail("--cpu-isa %s: %s", o->cpu_isa, strata_last_error());
        if (!o->quiet)
            fprintf(stderr, "strata: --cpu-isa: the CPU kernels of the %s level (this CPU has %s)\n",
                    strata_cpu_isa_name(strata_cpu_isa_active()), strata_cpu_isa_name(strata_cpu_isa_supported()));
    }
    int rc = cli_check_readable(o->model);
    if (rc) return rc;
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = o->n_threads;
    mp.mlock = o->mlock;
    mp.hugepages = o->hugepages;
    mp.use_mmap = !o->no_mmap;
    double t0 = cli_now();
    if (strata_model_load(o->model, &mp, model) != STRATA_OK)
        return cli_fail("cannot load '%s': %s", o->model, cli_lib_error());
    if (load_s) *load_s = cli_now() - t0;
    return 0;
}

/* A one-line progress bar on stderr, redrawn in place; cleared when done reaches total. */
static void cli_progress_bar(const char *what, int64_t done, int64_t total, void *ud) {
    (void)ud;
    if (total <= 0) return;
    const int width = 30, fill = (int)(width * (double)done / (double)total);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : ' ';
    bar[width] = '\0';
    if (done >= total) fprintf(stderr, "\r\033[K");
    else if (strcmp(what, "upload") == 0)
        fprintf(stderr, "\rstrata: %s [%s] %.1f / %.1f GiB", what, bar, (double)done / 1073741824.0,
                (double)total / 1073741824.0);
    else
        fprintf(stderr, "\rstrata: %s [%s] %lld / %lld tokens", what, bar, (long long)done, (long long)total);
    fflush(stderr);
}

static int cli_new_session_inner(cli_opts *o, const strata_model *model, strata_session **out);

/* --cpu-pin: the session binds its workers to CPUs 1.. of this thread's affinity set; this
 * thread, which runs as the pool's thread 0, then takes the set's first CPU. */
static void cli_pin_main_thread(const cli_opts *o, strata_session *s) {
    cpu_set_t set;
    strata_session_stats st;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || strata_session_get_stats(s, &st) != STRATA_OK) return;
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &set)) first = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    if (first >= 0) CPU_SET(first, &one);
    const int ok = first >= 0 && st.threads_pinned > 0 && sched_setaffinity(0, sizeof one, &one) == 0;
    if (!o->quiet)
        fprintf(stderr, "strata: --cpu-pin: %d worker threads bound one per CPU%s\n", (int)st.threads_pinned,
                ok ? ", the main thread to the first" : " (too few CPUs in the affinity set: none bound)");
}

int cli_new_session(cli_opts *o, const strata_model *model, strata_session **out) {
    const int rc = cli_new_session_inner(o, model, out);
    if (rc == 0 && o->cpu_pin && *out) cli_pin_main_thread(o, *out);
    return rc;
}

/* The start-up lines of a GPU session: its expert cache, where the experts kept in RAM are read
 * from, Q8_0 tile copies left out, the cost model's figures, which layers' experts run on the
 * CPU. Nothing with --quiet. */
static void cli_gpu_session_lines(const cli_opts *o, const strata_model_info *mi, const strata_session *s) {
    strata_session_stats cs; /* the start-up lines below read the new session's stats */
    const int have = strata_session_get_stats(s, &cs) == STRATA_OK;
    if (o->quiet) return;
    if (o->expert_cache != 0 && have)
        fprintf(stderr, "strata: GPU expert cache of %d slots (of %lld experts)\n",
                (int)cs.expert_cache_slots, (long long)mi->n_layer * mi->n_expert);
    if ((o->expert_cache != 0 || o->n_cpu_moe != 0) && mi->n_expert > 0 && have) {
        char hb[32];
        cli_human_bytes((double)cs.pinned_bytes, hb, sizeof hb);
        if (o->ram_budget > 0) {
            cli_human_bytes((double)o->ram_budget, hb, sizeof hb);
            fprintf(stderr, "strata: %s of page-locked RAM slots for routed experts; the others are "
                    "read from the file with O_DIRECT when routed\n", hb);
        } else if (cs.pinned_bytes > 0)
            fprintf(stderr, "strata: the experts kept in RAM are read from a pinned copy (%s)\n", hb);
        else
            fprintf(stderr, "strata: the experts kept in RAM are read from the file's mapping%s\n",
                    o->pin_experts < 0 ? " (not enough RAM available for a pinned copy)" : "");
    }
    /* (an expert cache of auto size leaves no room for them by design: said in EXPERTS.md) */
    if (o->q8_tiles && o->expert_cache == 0 && have && cs.q8_tiles_skipped > 0)
        fprintf(stderr, "strata: --q8-tiles: %d Q8_0 matrices without a tile copy (no GPU memory to "
                "spare); their prompt batches read the blocks (same results, slower)\n",
                (int)cs.q8_tiles_skipped);
    if (have && ((o->expert_cache != 0 && o->cpu_misses == 1) || cs.cpu_split != 0))
        fprintf(stderr, "strata: --cpu-misses: PCIe %.1f GB/s (%.0f us a copy), CPU %.0f us + %.0f us "
                "an expert (+ %.0f us a further row); %s%s\n", cs.pcie_bytes_per_s / 1e9,
                cs.pcie_latency_s * 1e6, cs.cpu_share_step_s * 1e6, cs.cpu_share_expert_s * 1e6,
                cs.cpu_expert_per_row_s * 1e6,
                o->pcie_frac < 0 ? "each miss goes where it is predicted to finish first"
                                 : "the heaviest share of --pcie-frac misses is loaded, the rest computed",
                cs.cpu_split == 1 ? "; the CPU layers' GPU share in the CPU's arithmetic (same bits)"
                : cs.cpu_split == 2 ? "; the CPU layers' GPU share in its own arithmetic (bits follow the share)"
                                    : "");
    if (o->n_cpu_moe != 0 && mi->n_expert > 0) {
        if (o->n_cpu_moe < 0 || o->n_cpu_moe >= mi->n_layer)
            fprintf(stderr, "strata: the routed experts of every layer run on the CPU\n");
        else
            fprintf(stderr, "strata: the routed experts of layers 0..%d run on the CPU, the "
                    "rest on the GPU\n", o->n_cpu_moe - 1);
        if (o->stage_experts < 0 && o->expert_cache == 0 && o->ram_budget == 0 && have)
            fprintf(stderr, "strata: --stage-experts auto: PCIe %.1f GB/s (%.0f us a copy), CPU "
                    "%.0f us + %.0f us per row for one expert: each batch of a CPU layer goes "
                    "where it is predicted to finish first\n", cs.pcie_bytes_per_s / 1e9,
                    cs.pcie_latency_s * 1e6, cs.cpu_expert_fixed_s * 1e6, cs.cpu_expert_per_row_s * 1e6);
    }
}

/* A CPU session: why, when the GPU was the default (one line), and the GPU-only flags given,
 * which it ignores (one warning line). */
static void cli_cpu_session_lines(const cli_opts *o, const char *why) {
    if (why && why[0]) fprintf(stderr, "strata: running on the CPU: %s\n", why);
    if (o->n_gpu_only == 0) return;
    fputs("strata: warning: ignored on the CPU (GPU sessions only):", stderr);
    for (int i = 0; i < o->n_gpu_only; i++) fprintf(stderr, "%s %s", i ? "," : "", o->gpu_only[i]);
    fputc('\n', stderr);
}

static void cli_session_params(const cli_opts *o, strata_session_params *sp) {
    *sp = strata_session_default_params();
    if (!o->quiet && isatty(2)) sp->progress = cli_progress_bar; /* off when stderr is not a tty */
    sp->n_ctx = o->n_ctx;
    sp->n_batch = o->n_batch;
    sp->kv_type = o->kv_type;
    sp->n_threads = o->n_threads;
    sp->degrade_zero = o->degrade_zero;
    sp->degrade_tau = o->degrade_tau;
    sp->degrade_eval = o->degrade_eval;
    sp->profile = o->profile;
    sp->cuda.graphs = o->cuda_graphs;
    sp->cuda.pdl = o->cuda_pdl;
    sp->placement.n_cpu_moe = o->n_cpu_moe;
    sp->placement.stage_experts = o->stage_experts;
    sp->cuda.attn_tc = o->attn_tc;
    sp->placement.pin_experts = o->pin_experts;
    sp->cpu_pin = o->cpu_pin;
    sp->placement.gpu_prefetch = o->gpu_prefetch;
    sp->placement.cpu_warm = o->cpu_warm;
    sp->cuda.q8_tiles = o->q8_tiles;
    sp->placement.doorbell = o->doorbell;
    sp->placement.cpu_misses = o->cpu_misses;
    sp->placement.pcie_frac = o->pcie_frac;
    sp->placement.ram_budget = o->ram_budget;
    sp->placement.expert_cache = o->expert_cache;
    sp->placement.gpu_mem = o->gpu_mem;
    sp->placement.pipe = o->pipe;
}

static int cli_new_session_inner(cli_opts *o, const strata_model *model, strata_session **out) {
    if (o->no_amx) strata_cpu_amx_set(0); /* process-wide, before any thread computes */
    strata_session_params sp;
    cli_session_params(o, &sp);
    char why[400] = ""; /* why a session whose backend was left to the CLI runs on the CPU */
    const int chosen = o->gpu == -1;
    /* the RAM tier serves CPU sessions, and GPU sessions whose experts are cached or on the CPU */
    if (o->ram_budget > 0 && o->gpu != 1 && o->expert_cache == 0 && o->n_cpu_moe == 0) {
        o->gpu = 0;
        if (chosen)
            snprintf(why, sizeof why, "--ram-budget without --expert-cache or --cpu-moe / --n-cpu-moe "
                     "is for CPU sessions");
    }
    if (o->degrade_zero)
        fprintf(stderr, "strata: DEGRADE_ZERO on (an approximation): in decode steps a routed expert "
                "that misses its deadline with gate weight < tau %.3g is dropped%s\n",
                (double)o->degrade_tau, o->degrade_eval ? "; evaluation mode: every routed slot "
                "counts as missed (CPU session)" : "");
    if (o->degrade_eval && o->gpu != 1) { /* the evaluation mode runs on the CPU */
        if (o->gpu == -1) snprintf(why, sizeof why, "--degrade-eval runs on CPU sessions only");
        o->gpu = 0;
    }
    strata_model_info mi;
    memset(&mi, 0, sizeof mi);
    strata_model_get_info(model, &mi);
    if (!o->ctx_warned && o->n_ctx > 0 && mi.n_ctx_train > 0 && o->n_ctx > mi.n_ctx_train)
        fprintf(stderr, "strata: warning: -c %d is past the model's training context of %d tokens; "
                "positions past it may give poor output\n", o->n_ctx, (int)mi.n_ctx_train);
    if (o->gpu == 2) { /* -ngl N > 0: all layers or an error (no partial layer offload) */
        if (o->ngl < mi.n_layer && o->ngl != 99)
            return cli_fail("-ngl %d: only 0 (CPU) or all %d layers (or 99) are supported; expert "
                            "placement options come with the expert-offloading release", o->ngl,
                            (int)mi.n_layer);
        o->gpu = 1;
    }
    strata_backend_info bi;
    memset(&bi, 0, sizeof bi);
    strata_backend_query(STRATA_BACKEND_CUDA, &bi);
    if (o->gpu == -1 && !bi.available)
        snprintf(why, sizeof why, "CUDA is not usable: %s", bi.detail[0] ? bi.detail : "no detail");
    if (o->gpu != 0 && (bi.available || o->gpu == 1)) {
        sp.backend = STRATA_BACKEND_CUDA;
        if (strata_session_create(model, &sp, out) == STRATA_OK) {
            snprintf(o->backend_desc, sizeof o->backend_desc, "cuda (%s)", bi.detail);
            cli_gpu_session_lines(o, &mi, *out);
            return 0;
        }
        if (o->gpu == 1) return cli_fail("cannot create a GPU session: %s", cli_lib_error());
        snprintf(why, sizeof why, "%s", strata_last_error()[0] ? cli_lib_error() : "the GPU session failed "
                 "(no reason given)");
        sp.backend = STRATA_BACKEND_CPU;
    }
    if (strata_session_create(model, &sp, out) != STRATA_OK)
        return cli_fail("cannot create a session: %s", cli_lib_error());
    snprintf(o->backend_desc, sizeof o->backend_desc, "cpu");
    cli_cpu_session_lines(o, why);
    return 0;
}

int cli_tokenize(const strata_model *model, const char *text, size_t len, int add_special,
                 int parse_special, strata_token **toks, int64_t *n) {
    int64_t cap = (int64_t)len + 8, need = 0;
    strata_token *buf = malloc((size_t)cap * sizeof *buf);
    if (!buf) return cli_fail("out of memory tokenizing %zu bytes", len);
    strata_status st = strata_tokenize(model, text, (int64_t)len, add_special, parse_special, buf,
                                       cap, &need);
    if (st == STRATA_ERR_RANGE && need > cap) {
        strata_token *b2 = realloc(buf, (size_t)need * sizeof *buf);
        if (!b2) { free(buf); return cli_fail("out of memory for %lld tokens", (long long)need); }
        buf = b2;
        cap = need;
        st = strata_tokenize(model, text, (int64_t)len, add_special, parse_special, buf, cap, &need);
    }
    if (st != STRATA_OK) {
        free(buf);
        return cli_fail("tokenize: %s", strata_last_error());
    }
    *toks = buf;
    *n = need;
    return 0;
}

int cli_model_adds_bos(const strata_model *model) {
    strata_token t[4];
    int64_t n = 0;
    strata_token bos = strata_token_bos(model);
    if (bos < 0) return 0;
    if (strata_tokenize(model, "", 0, 1, 0, t, 4, &n) != STRATA_OK) return 0;
    return n >= 1 && t[0] == bos;
}

/* ---------------------------------------------------------------------------------------------
 * Top-K logprob rows
 * ------------------------------------------------------------------------------------------- */

int cli_topk_init(cli_topk *t, int32_t n_vocab, int k) {
    memset(t, 0, sizeof *t);
    if (k > n_vocab) k = n_vocab;
    t->n_vocab = n_vocab;
    t->k = k;
    t->ids = malloc((size_t)k * sizeof *t->ids);
    t->lp = malloc((size_t)k * sizeof *t->lp);
    if (!t->ids || !t->lp) {
        cli_topk_free(t);
        return cli_fail("out of memory for top-%d rows", k);
    }
    return 0;
}

void cli_topk_free(cli_topk *t) {
    free(t->ids);
    free(t->lp);
    t->ids = NULL;
    t->lp = NULL;
}

void cli_topk_row(cli_topk *t, const float *logits) {
    int32_t V = t->n_vocab;
    int k = t->k, n = 0;
    double mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    t->lse = mx + log(sum);
    /* insertion into a descending list of k; strict '>' keeps the lower id first on ties */
    for (int32_t i = 0; i < V; i++) {
        double l = logits[i];
        if (n == k && !(l > t->lp[k - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && l > t->lp[j - 1]) {
            t->lp[j] = t->lp[j - 1];
            t->ids[j] = t->ids[j - 1];
            j--;
        }
        t->lp[j] = l;
        t->ids[j] = i;
    }
    for (int j = 0; j < n; j++) t->lp[j] -= t->lse;
}

void cli_logpos_header(FILE *f, const char *model, int32_t n_vocab, int k, const char *extra) {
    fputs("{\"strata_logpos\": 1, \"model\": ", f);
    cli_json_string(f, model ? model : "");
    fprintf(f, ", \"n_vocab\": %d, \"top_k\": %d%s}\n", (int)n_vocab, k, extra ? extra : "");
}

void cli_logpos_line(FILE *f, int64_t pos, int64_t next, const cli_topk *t) {
    fprintf(f, "{\"pos\": %lld, \"token\": ", (long long)pos);
    if (next < 0) fputs("null", f);
    else fprintf(f, "%lld", (long long)next);
    fputs(", \"top\": [", f);
    for (int j = 0; j < t->k; j++)
        fprintf(f, "%s[%d, %.9g]", j ? ", " : "", (int)t->ids[j], t->lp[j]);
    fputs("]}\n", f);
}

double cli_kl_topk(const double *lp_a, const double *lp_b, int k) {
    double kl = 0.0, sa = 0.0, sb = 0.0;
    for (int i = 0; i < k; i++) {
        double a = exp(lp_a[i]), b = exp(lp_b[i]);
        sa += a;
        sb += b;
        if (a > 0.0) kl += a * (lp_a[i] - lp_b[i]);
    }
    double ra = 1.0 - sa, rb = 1.0 - sb;
    if (ra > 1e-12) kl += ra * (log(ra) - log(rb > 1e-300 ? rb : 1e-300));
    return kl < 0.0 ? 0.0 : kl;
}

void cli_print_degrade_stats(const strata_session *sess) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !st.degrade_zero) return;
    fprintf(stderr, "strata: DEGRADE_ZERO tau %.3g%s: zeroed %lld of %lld decode slots (%.2f%%), "
            "per layer %.2f%%..%.2f%%\n", (double)st.degrade_tau, st.degrade_eval ? " (eval)" : "",
            (long long)st.degrade_zeroed, (long long)st.degrade_slots,
            st.degrade_slots ? 100.0 * (double)st.degrade_zeroed / (double)st.degrade_slots : 0.0,
            100.0 * st.degrade_layer_min, 100.0 * st.degrade_layer_max);
}

void cli_print_profile(const strata_session *sess, const char *what) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !st.profile || st.forward_tokens == 0)
        return;
    double tot = 0;
    for (int i = 0; i < STRATA_PHASE_COUNT; i++) tot += st.phase_seconds[i];
    fprintf(stderr, "strata: profile %s (%lld passes, %lld tokens, %.3f ms/token):", what,
            (long long)st.forward_calls, (long long)st.forward_tokens,
            1e3 * tot / (double)st.forward_tokens);
    for (int i = 0; i < STRATA_PHASE_COUNT; i++)
        fprintf(stderr, " %s %.3f (%.0f%%)", strata_phase_name((strata_phase)i),
                1e3 * st.phase_seconds[i] / (double)st.forward_tokens,
                tot > 0 ? 100.0 * st.phase_seconds[i] / tot : 0.0);
    fputc('\n', stderr);
    if (st.predict_slots > 0)
        fprintf(stderr, "strata: profile %s: next-layer experts predicted at the previous layer's "
                "router: %.1f%% of %lld routed slots\n", what,
                100.0 * (double)st.predict_hits / (double)st.predict_slots, (long long)st.predict_slots);
}

int cli_threads_used(const cli_opts *o) {
    if (o->n_threads > 0) return o->n_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The [PROF] line of a CPU session: no GPU memory, GPU share, PCIe or hand-off fields. */
static void cli_print_prof_line_cpu(const strata_session_stats *st, double prompt_tps, double decode_tps) {
    char db[32];
    fprintf(stderr, "[PROF] prompt %.2f tok/s | decode %.2f tok/s | experts: %lld slot-rows on the CPU",
            prompt_tps, decode_tps, (long long)st->expert_slots_cpu);
    if (st->expert_cache_slots > 0)
        fprintf(stderr, " | RAM slots %d: %lld hits, %lld misses (per-layer hit rate %.0f%%..%.0f%%) | "
                "prefetch %lld: %lld timely, %lld late", (int)st->expert_cache_slots,
                (long long)st->expert_cache_hits, (long long)st->expert_cache_misses,
                100.0 * st->layer_hit_rate_min, 100.0 * st->layer_hit_rate_max,
                (long long)st->prefetch_issued, (long long)st->prefetch_timely, (long long)st->prefetch_late);
    fprintf(stderr, " | disk %s | zeroed %lld\n", cli_human_bytes((double)st->disk_bytes, db, sizeof db),
            (long long)st->degrade_zeroed);
}

void cli_print_prof_line(const strata_session *sess, int gpu, double prompt_tps, double decode_tps) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK) return;
    if (!gpu) {
        cli_print_prof_line_cpu(&st, prompt_tps, decode_tps);
        return;
    }
    char pb[32], db[32];
    fprintf(stderr, "[PROF] prompt %.2f tok/s | decode %.2f tok/s | experts: %lld slot-rows from GPU "
            "memory, %lld on the CPU", prompt_tps, decode_tps, (long long)st.expert_slots_gpu,
            (long long)st.expert_slots_cpu);
    if (st.expert_slots_gpu + st.expert_slots_cpu > 0)
        fprintf(stderr, " (per-layer GPU share %.0f%%..%.0f%%)", 100.0 * st.layer_gpu_share_min,
                100.0 * st.layer_gpu_share_max);
    if (st.expert_cache_slots > 0)
        fprintf(stderr, " | %s slots %d: %lld hits, %lld misses (per-layer hit rate %.0f%%..%.0f%%) | "
                "prefetch %lld: %lld timely, %lld late", st.expert_slots_gpu > 0 ? "GPU" : "RAM",
                (int)st.expert_cache_slots,
                (long long)st.expert_cache_hits, (long long)st.expert_cache_misses,
                100.0 * st.layer_hit_rate_min, 100.0 * st.layer_hit_rate_max,
                (long long)st.prefetch_issued, (long long)st.prefetch_timely, (long long)st.prefetch_late);
    else
        fprintf(stderr, " | no cache, no prefetch");
    if (st.cpu_warm_bytes > 0)
        fprintf(stderr, " | CPU warm %s (next-layer prediction %.0f%% right)",
                cli_human_bytes((double)st.cpu_warm_bytes, pb, sizeof pb),
                st.predict_slots ? 100.0 * (double)st.predict_hits / (double)st.predict_slots : 0.0);
    if (st.cpu_hand_offs > 0)
        fprintf(stderr, " | %lld CPU hand-offs: %.1f us waited + %.1f us computed each", (long long)st.cpu_hand_offs,
                1e6 * st.cpu_hand_wait_s / (double)st.cpu_hand_offs, 1e6 * st.cpu_step_s / (double)st.cpu_hand_offs);
    if (st.cpu_split)
        fprintf(stderr, " | CPU layers' decode split, the GPU's share in %s", st.cpu_split == 1
                ? "the CPU's arithmetic (the CPU-only bits)" : "its own arithmetic (bits follow the share)");
    fprintf(stderr, " | PCIe %s | disk %s | zeroed %lld\n",
            cli_human_bytes((double)st.pcie_bytes, pb, sizeof pb),
            cli_human_bytes((double)st.disk_bytes, db, sizeof db), (long long)st.degrade_zeroed);
}
