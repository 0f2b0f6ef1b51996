/* session_setup.c - a model and its session from the options (session_setup.h). The options
 * that go unchanged into strata_model_params and strata_session_params are one table each: a
 * row per option, {cli_opts field, params field, type}, so a new knob is one row. What is more
 * than a copy stays in code: use_mmap (the negation of --no-mmap), the progress bar (only on a
 * terminal, not with --quiet) and the backend, which the CLI chooses (--gpu, --cpu, -ngl, or the
 * GPU when usable, with the reason on stderr when it is the CPU). The lines it prints about the
 * set-up are report.c's. */
#include "session_setup.h"
#include "report.h"
#include "route_trace.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Options into the library's parameters
 * ------------------------------------------------------------------------------------------- */

/* One option copied unchanged: its offset in cli_opts and in the params struct, and its size;
 * the field has the same type on both sides (checked at compile time). The values are already
 * settled when they are copied: defaults from the environment by cli_opts_init, "auto" as -1 by
 * the parser (options.c), so that a row never needs logic. */
typedef struct {
    size_t opt, param, size;
} cli_param_row;

#define CLI_PARAM_ROW(params, type, opt, param)                                                   \
    {offsetof(cli_opts, opt) + CLI_TYPE_CHECK(type, ((cli_opts *)0)->opt),                         \
     offsetof(params, param) + CLI_TYPE_CHECK(type, ((params *)0)->param), sizeof(type)}
#define CLI_MODEL(type, opt, param) CLI_PARAM_ROW(strata_model_params, type, opt, param)
#define CLI_SESSION(type, opt, param) CLI_PARAM_ROW(strata_session_params, type, opt, param)

static const cli_param_row cli_model_rows[] = {
    CLI_MODEL(int, n_threads, n_threads),
    CLI_MODEL(int, mlock, mlock),
    CLI_MODEL(int, hugepages, hugepages),
};

static const cli_param_row cli_session_rows[] = {
    CLI_SESSION(int, n_ctx, n_ctx),
    CLI_SESSION(int, n_batch, n_batch),
    CLI_SESSION(strata_type, kv_type, kv_type),
    CLI_SESSION(int, n_threads, n_threads),
    CLI_SESSION(int, cpu_pin, cpu_pin),
    CLI_SESSION(int, degrade_zero, degrade_zero),
    CLI_SESSION(float, degrade_tau, degrade_tau),
    CLI_SESSION(int, degrade_eval, degrade_eval),
    CLI_SESSION(float, route_tail_skip, route_tail_skip),
    CLI_SESSION(int, profile, profile),
    /* where routed experts live and move */
    CLI_SESSION(int, n_cpu_moe, placement.n_cpu_moe),
    CLI_SESSION(int, expert_cache, placement.expert_cache),
    CLI_SESSION(int64_t, gpu_mem, placement.gpu_mem),
    CLI_SESSION(int64_t, ram_budget, placement.ram_budget),
    CLI_SESSION(int, pipe, placement.pipe),
    CLI_SESSION(int, stage_experts, placement.stage_experts),
    CLI_SESSION(int, cpu_misses, placement.cpu_misses),
    CLI_SESSION(float, pcie_frac, placement.pcie_frac),
    CLI_SESSION(int, pin_experts, placement.pin_experts),
    CLI_SESSION(int, gpu_prefetch, placement.gpu_prefetch),
    CLI_SESSION(int, doorbell, placement.doorbell),
    CLI_SESSION(int, cpu_warm, placement.cpu_warm),
    CLI_SESSION(int, cache_admit, placement.cache_admit),
    CLI_SESSION(int, pool_pcie, placement.pool_pcie),
    CLI_SESSION(int, stage_ahead, placement.stage_ahead),
    CLI_SESSION(int, stage_split, placement.stage_split),
    CLI_SESSION(int, defer_cpu, placement.defer_cpu),
    CLI_SESSION(float, defer_below, placement.defer_cpu_below),
    /* several GPUs */
    CLI_SESSION(strata_split_params, split, split),
    /* CUDA kernels */
    CLI_SESSION(int, cuda_graphs, cuda.graphs),
    CLI_SESSION(int, cuda_pdl, cuda.pdl),
    CLI_SESSION(int, attn_tc, cuda.attn_tc),
    CLI_SESSION(int, q8_tiles, cuda.q8_tiles),
    CLI_SESSION(int, iq_stage_tables, cuda.iq_stage_tables),
    CLI_SESSION(int, q8_sm60, cuda.q8_sm60),
    CLI_SESSION(int, q8_sm60_bps, cuda.q8_sm60_bps),
};

static void cli_copy_rows(void *params, const cli_opts *o, const cli_param_row *rows, size_t n) {
    for (size_t k = 0; k < n; k++)
        memcpy((char *)params + rows[k].param, (const char *)o + rows[k].opt, rows[k].size);
}

static strata_model_params cli_model_params(const cli_opts *o) {
    strata_model_params mp = strata_model_default_params();
    cli_copy_rows(&mp, o, cli_model_rows, sizeof cli_model_rows / sizeof cli_model_rows[0]);
    mp.use_mmap = !o->no_mmap; /* the option says the opposite */
    return mp;
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


/* The session's parameters; the backend is left to cli_new_session_inner. */
static strata_session_params cli_session_params(const cli_opts *o) {
    strata_session_params sp = strata_session_default_params();
    cli_copy_rows(&sp, o, cli_session_rows, sizeof cli_session_rows / sizeof cli_session_rows[0]);
    if (!o->quiet && isatty(2)) sp.progress = cli_progress_bar; /* off when stderr is not a tty */
    return sp;
}

/* ---------------------------------------------------------------------------------------------
 * Model and session
 * ------------------------------------------------------------------------------------------- */

int cli_load_model(const cli_opts *o, strata_model **model, double *load_s) {
    if (o->cpu_isa) { /* process-wide, before the model is read and any thread computes */
        strata_cpu_isa l;
        if (cli_cpu_isa_from_name(o->cpu_isa, &l) != 0)
            return cli_fail("bad value '%s' for --cpu-isa / $STRATA_CPU_ISA (scalar, avx2, avx512 or best)", o->cpu_isa);
        if (strata_cpu_isa_set(l) != STRATA_OK) return cli_fail("--cpu-isa %s: %s", o->cpu_isa, strata_last_error());
        cli_report_cpu_isa(o);
    }
    int rc = cli_check_readable(o->model);
    if (rc) return rc;
    strata_model_params mp = cli_model_params(o);
    double t0 = cli_now();
    if (strata_model_load(o->model, &mp, model) != STRATA_OK)
        return cli_fail("cannot load '%s': %s", o->model, cli_lib_error());
    if (load_s) *load_s = cli_now() - t0;
    return 0;
}

/* Settles o->gpu: 0 the CPU, 1 the GPU (required), -1 the GPU if usable; *bi gets the CUDA
 * backend's state and why (size bytes) the reason a session left to the CLI runs on the CPU. */
static int cli_choose_backend(cli_opts *o, const strata_model_info *mi, strata_backend_info *bi,
                              char *why, size_t size) {
    const int chosen = o->gpu == -1;
    /* the RAM tier serves CPU sessions, and GPU sessions whose experts are cached or on the CPU */
    if (o->ram_budget > 0 && o->gpu != 1 && o->expert_cache == 0 && o->n_cpu_moe == 0) {
        o->gpu = 0;
        if (chosen)
            snprintf(why, size, "--ram-budget without --expert-cache or --cpu-moe / --n-cpu-moe "
                     "is for CPU sessions");
    }
    if (o->degrade_eval && o->gpu != 1) { /* the evaluation mode runs on the CPU */
        if (o->gpu == -1) snprintf(why, size, "--degrade-eval runs on CPU sessions only");
        o->gpu = 0;
    }
    if (o->gpu == 2) { /* -ngl N > 0: all layers or an error (no partial layer offload) */
        if (o->ngl < mi->n_layer && o->ngl != 99)
            return cli_fail("-ngl %d: only 0 (CPU) or all %d layers (or 99) are supported; expert "
                            "placement options come with the expert-offloading release", o->ngl,
                            (int)mi->n_layer);
        o->gpu = 1;
    }
    memset(bi, 0, sizeof *bi);
    strata_backend_query(STRATA_BACKEND_CUDA, bi);
    if (o->gpu == -1 && !bi->available)
        snprintf(why, size, "CUDA is not usable: %s", bi->detail[0] ? bi->detail : "no detail");
    return 0;
}

static int cli_new_session_inner(cli_opts *o, const strata_model *model, strata_session **out) {
    if (o->no_amx) strata_cpu_amx_set(0); /* process-wide, before any thread computes */
    strata_session_params sp = cli_session_params(o);
    strata_model_info mi;
    memset(&mi, 0, sizeof mi);
    strata_model_get_info(model, &mi);
    cli_report_degrade(o);
    cli_report_tail_skip(o);
    cli_report_q8_sm60(o);
    cli_report_context(o, &mi);
    char why[400] = ""; /* why a session whose backend was left to the CLI runs on the CPU */
    strata_backend_info bi;
    const int rc = cli_choose_backend(o, &mi, &bi, why, sizeof why);
    if (rc) return rc;
    if (o->gpu != 0 && (bi.available || o->gpu == 1)) {
        sp.backend = STRATA_BACKEND_CUDA;
        if (strata_session_create(model, &sp, out) == STRATA_OK) {
            snprintf(o->backend_desc, sizeof o->backend_desc, "cuda (%s)", bi.detail);
            cli_report_gpu_session(o, &mi, *out);
            cli_report_defer(o, *out);
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
    cli_report_cpu_session(o, why);
    cli_report_defer(o, *out);
    return 0;
}

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
    cli_report_cpu_pin(o, (int)st.threads_pinned, ok);
}

int cli_new_session(cli_opts *o, const strata_model *model, strata_session **out) {
    if (o->verify_profile) o->profile = 1; /* its table reads the phase timers */
    int rc = cli_new_session_inner(o, model, out);
    if (rc == 0 && o->cpu_pin && *out) cli_pin_main_thread(o, *out);
    if (rc == 0 && *out && ((rc = cli_route_trace_attach(o, model, *out)) != 0 ||
                            (rc = cli_route_replay_attach(o, *out)) != 0)) {
        strata_session_free(*out);
        *out = NULL;
    }
    return rc;
}

int cli_session_on_gpu(const cli_opts *o) { return strncmp(o->backend_desc, "cuda", 4) == 0; }

int cli_threads_used(const cli_opts *o) {
    if (o->n_threads > 0) return o->n_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---------------------------------------------------------------------------------------------
 * Tokens
 * ------------------------------------------------------------------------------------------- */

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
