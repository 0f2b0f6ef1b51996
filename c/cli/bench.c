/* bench.c - `strata bench`: prompt-processing and decode throughput with llama-bench's meaning of
 * its flags, so the figures line up with llama.cpp's (../shared/bench/ANCHORS.md):
 *   -p N[,N..]  ppN: N prompt tokens evaluated as one call (batches of -b, default 2048 capped by
 *               the context), timed from the first token to the last logits
 *   -n N[,N..]  tgN: N tokens decoded one at a time (each waits for its logits)
 *   -w N[,N..]  wN: a verify window of N tokens (the newest token and N-1 drafts), one call of the
 *               decode path (strata_session_decode_gen) returning every row's logits, rolled back
 *               after each repetition; t/s counts the N rows, the pass time is N / t/s
 *   -d D[,D..]  depth: D tokens are put in the KV cache first (untimed), then each test runs on top
 *   -r R        repetitions (mean and sample standard deviation of tok/s)
 *   --no-warmup no untimed run first (by default, as llama-bench, each test runs once untimed
 *               before its repetitions: ppN the whole prompt, tgN one token)
 * Tokens are fixed pseudo-random ids (no sampling). Output: a markdown table (model, size,
 * backend, threads, test, t/s +- sd) on stdout; --json FILE writes the same rows. For tg rows the
 * table also gives the bytes one decoded token must read - the weights (every dense tensor once,
 * expert tensors top-k / n_expert of them, one embedding row) plus the KV cache it attends
 * (strata_model_kv_bytes_per_token: K and V of every layer that keeps them, latent attention's one
 * row, over depth + n/2 positions on average, at the cache type's width) - and those
 * bytes x tok/s: the effective bandwidth, and on the GPU its share of the device's copy rate
 * measured at the start (strata_backend_copy_rate; CEILINGS.md has the machine's rates). The
 * JSON gives weights and KV apart, and the copy rate. With placed experts (CPU layers, a cache,
 * a RAM budget) a line on stderr per row, and the JSON's "experts", say where the rows ran and
 * what moved over PCIe and from disk (with the disk bytes over the timed seconds). */
#include "session_setup.h"
#include "stats_print.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_MAX 16

typedef struct {
    int p[BENCH_MAX], n_p;
    int n[BENCH_MAX], n_n;
    int w[BENCH_MAX], n_w;
    int d[BENCH_MAX], n_d;
    int reps;
    int no_warmup;
    const char *json;
} bench_opts;

static int parse_list(const char *opt, const char *v, int *out, int *count) {
    *count = 0;
    const char *s = v;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > (1L << 24) || (*end && *end != ','))
            return cli_usage_error("bad value '%s' for %s (comma-separated counts)", v, opt);
        if (*count >= BENCH_MAX) return cli_usage_error("at most %d values for %s", BENCH_MAX, opt);
        out[(*count)++] = (int)x;
        s = *end ? end + 1 : end;
    }
    if (*count == 0) return cli_usage_error("option %s needs a value", opt);
    return 0;
}

/* Weight bytes of the model apart: *experts the merged expert tensors whole, *dense the rest (the
 * embedding table one row; a tied head read whole). */
static void weight_bytes(const strata_model *m, double *dense, double *experts) {
    const strata_gguf *g = strata_model_gguf(m);
    *dense = *experts = 0;
    for (int64_t i = 0; i < strata_gguf_tensor_count(g); i++) {
        strata_tensor_info ti;
        if (strata_gguf_tensor_info(g, i, &ti) != STRATA_OK) continue;
        if (strstr(ti.name, "_exps.")) *experts += (double)ti.n_bytes;
        else if (strcmp(ti.name, "token_embd.weight") == 0)
            *dense += (double)ti.n_bytes / (double)(ti.ne[1] > 0 ? ti.ne[1] : 1);
        else
            *dense += (double)ti.n_bytes;
    }
    if (strata_gguf_tensor_find(g, "output.weight") < 0) { /* tied: the head reads it all */
        int64_t te = strata_gguf_tensor_find(g, "token_embd.weight");
        strata_tensor_info ti;
        if (te >= 0 && strata_gguf_tensor_info(g, te, &ti) == STRATA_OK) *dense += (double)ti.n_bytes;
    }
}

/* The share of a layer's experts that n tokens routed independently touch: 1 - (1 - k/E)^n
 * (spread routing; trained models share more between neighbouring tokens). */
static double expert_share(const strata_model_info *mi, int n) {
    if (mi->n_expert <= 0) return 0.0;
    return 1.0 - pow(1.0 - (double)mi->n_expert_used / (double)mi->n_expert, n);
}

static void fill_tokens(strata_token *t, int64_t n, int32_t V, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (strata_token)((seed >> 33) % (uint64_t)V);
    }
}

static void usage(void) {
    printf("usage: strata bench -m MODEL.gguf [-p 512] [-n 128] [-d 0] [-r 3] [options]\n\n"
           "Prompt (ppN) and decode (tgN) throughput with llama-bench's meaning of -p/-n/-d/-r;\n"
           "lists are comma-separated (-d 0,16384). A markdown table on stdout.\n\n"
           "  -p N[,N]   prompt lengths (default 512; 0: none)\n"
           "  -n N[,N]   decode lengths (default 128; 0: none)\n"
           "  -w N[,N]   verify windows of N tokens (1..%d): one decode call returning every\n"
           "             row's logits, rolled back after (default none)\n"
           "  -d D[,D]   KV-cache depth before each test (default 0)\n"
           "  -r R       repetitions (default 3)\n"
           "  --no-warmup  no untimed run before each test's repetitions (default: one, as\n"
           "             llama-bench: the whole prompt for ppN, one token for tgN)\n"
           "  --json F   the rows as JSON\n"
           "  -b N       prompt tokens per forward pass (default 2048, capped by the context)\n"
           "  -t N, --gpu, --cpu, -ngl N, --kv-type, --profile: as for strata run (--profile\n"
           "             prints each test's time per phase on stderr)\n", STRATA_DRAFT_MAX + 1);
}

/* ---------------------------------------------------------------------------------------------
 * Arguments
 * ------------------------------------------------------------------------------------------- */

/* -p, -n, -d, -r or --json at argv[*i] with its value; 1 if it was one of them, 0 if not, or
 * CLI_EXIT_USAGE after the message. */
static int parse_bench_opt(bench_opts *b, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    int isp = strcmp(a, "-p") == 0, isn = strcmp(a, "-n") == 0, isd = strcmp(a, "-d") == 0;
    int isr = strcmp(a, "-r") == 0, isj = strcmp(a, "--json") == 0, isw = strcmp(a, "-w") == 0;
    if (!(isp || isn || isd || isr || isj || isw)) return 0;
    if (*i + 1 >= argc) return cli_usage_error("option '%s' needs a value", a);
    const char *v = argv[++*i];
    int rc = 0;
    if (isp) rc = parse_list(a, v, b->p, &b->n_p);
    else if (isn) rc = parse_list(a, v, b->n, &b->n_n);
    else if (isd) rc = parse_list(a, v, b->d, &b->n_d);
    else if (isw) {
        rc = parse_list(a, v, b->w, &b->n_w);
        for (int k = 0; !rc && k < b->n_w; k++)
            if (b->w[k] < 1 || b->w[k] > STRATA_DRAFT_MAX + 1)
                rc = cli_usage_error("bad value '%s' for -w (windows of 1..%d tokens)", v, STRATA_DRAFT_MAX + 1);
    }
    else if (isj) b->json = v;
    else {
        char *end;
        long x = strtol(v, &end, 10);
        if (end == v || *end || x < 1 || x > 1000)
            return cli_usage_error("bad value '%s' for -r (1..1000)", v);
        b->reps = (int)x;
    }
    return rc ? rc : 1;
}

/* The command line into o and b. 0 to go on, -1 after --help (exit 0), else the exit status. */
static int parse_args(int argc, char **argv, cli_opts *o, bench_opts *b) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(); return -1; }
        if (strcmp(a, "--no-warmup") == 0) {
            b->no_warmup = 1;
            continue;
        }
        int rc = parse_bench_opt(b, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        rc = cli_opts_parse(o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        return cli_usage_error("unknown option '%s' for bench", a);
    }
    if (!o->model) return cli_usage_error("no model (-m FILE)");
    return 0;
}

static int max_of(const int *v, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* Without -c, a context for the deepest test, checked here against the training one; -b capped
 * by the context. */
static void size_context(cli_opts *o, const bench_opts *b, const strata_model_info *mi) {
    const int max_w = max_of(b->w, b->n_w), max_n0 = max_of(b->n, b->n_n);
    const int max_p = max_of(b->p, b->n_p), max_n = max_n0 > max_w ? max_n0 : max_w, max_d = max_of(b->d, b->n_d);
    if (o->n_ctx == 0) {
        const int need = max_d + (max_p > max_n ? max_p : max_n);
        if (mi->n_ctx_train > 0 && need > mi->n_ctx_train)
            fprintf(stderr, "strata: warning: -d %d with tests of up to %d tokens reaches position %d, "
                    "past the model's training context of %d tokens\n", max_d,
                    max_p > max_n ? max_p : max_n, need, (int)mi->n_ctx_train);
        o->n_ctx = need + 16;
        o->ctx_warned = 1;
    }
    if (o->n_batch > o->n_ctx) o->n_batch = o->n_ctx;
}

/* ---------------------------------------------------------------------------------------------
 * The tests
 * ------------------------------------------------------------------------------------------- */

/* One bench run: the options, the model and session, and what the rows share. */
typedef struct {
    const cli_opts *o;
    const bench_opts *b;
    strata_model *m;
    strata_session *s;
    strata_model_info mi;
    strata_token *toks;  /* pseudo-random ids: the depth, then each test's tokens */
    float *logits;       /* [n_vocab] */
    FILE *jf;            /* --json, or NULL */
    double dense_bytes;  /* weight bytes every pass reads: the dense tensors, one embedding row */
    double expert_bytes; /* the routed experts' bytes, all of them */
    float *wlogits;      /* [max -w][n_vocab]: a window's rows */
    double copy_rate;    /* the device's copy rate (GPU sessions), else 0 */
    int on_gpu;
    const char *name;    /* the model file's name */
    char size[32];       /* its size, for people */
    int first_row;
} bench_run;

/* One test's result: tok/s mean and sample standard deviation over the repetitions, and the
 * timed seconds of all of them. */
typedef struct {
    double mean, sd, secs;
} bench_result;

/* Buffers, the copy rate (GPU sessions), the table header and the JSON file's opening. */
static int bench_begin(bench_run *r) {
    const int64_t ntok = (int64_t)max_of(r->b->d, r->b->n_d) + max_of(r->b->p, r->b->n_p) +
                         max_of(r->b->n, r->b->n_n) + max_of(r->b->w, r->b->n_w) + 1;
    r->toks = malloc(sizeof *r->toks * (size_t)ntok);
    r->logits = malloc(sizeof(float) * (size_t)r->mi.n_vocab);
    r->wlogits = malloc(sizeof(float) * (size_t)r->mi.n_vocab * (size_t)(max_of(r->b->w, r->b->n_w) + 1));
    r->jf = r->b->json ? fopen(r->b->json, "w") : NULL;
    if (!r->toks || !r->logits || !r->wlogits || (r->b->json && !r->jf))
        return !r->toks || !r->logits || !r->wlogits ? cli_fail("out of memory")
                                      : cli_fail("cannot write '%s': %s", r->b->json, strerror(errno));
    fill_tokens(r->toks, ntok, r->mi.n_vocab, 0x5eedULL);
    weight_bytes(r->m, &r->dense_bytes, &r->expert_bytes);
    cli_human_bytes((double)r->mi.n_bytes, r->size, sizeof r->size);
    r->name = strrchr(r->o->model, '/') ? strrchr(r->o->model, '/') + 1 : r->o->model;
    /* GPU rows: decode's bytes over the time as a share of the device's copy rate, measured here
     * (strata_backend_copy_rate) before any timed run */
    r->on_gpu = cli_session_on_gpu(r->o);
    r->copy_rate = 0.0;
    if (r->on_gpu && strata_backend_copy_rate(STRATA_BACKEND_CUDA, &r->copy_rate) != STRATA_OK) {
        fprintf(stderr, "strata: bench: no copy rate (%s)\n", strata_last_error());
        r->copy_rate = 0.0;
    }
    if (r->copy_rate > 0.0) fprintf(stderr, "strata: bench: device copy rate %.0f GB/s (read + write)\n", r->copy_rate / 1e9);
    printf("| model | size | backend | threads | test | t/s | decode bytes/token | GB/s | of copy rate |\n");
    printf("|---|---:|---|---:|---|---:|---:|---:|---:|\n");
    if (r->jf) {
        fputs("{\"model\": ", r->jf);
        cli_json_string(r->jf, r->name);
        fprintf(r->jf, ", \"bytes\": %llu, \"backend\": ", (unsigned long long)r->mi.n_bytes);
        cli_json_string(r->jf, r->o->backend_desc);
        fprintf(r->jf, ", \"copy_bytes_per_s\": %.0f", r->copy_rate);
        if (r->o->route_replay) { /* (the routing timed is the file's, not the model's) */
            fputs(", \"route_replay\": ", r->jf);
            cli_json_string(r->jf, r->o->route_replay);
        }
        fputs(", \"rows\": [", r->jf);
    }
    r->first_row = 1;
    return 0;
}

enum { KIND_PP, KIND_TG, KIND_W };
static const char *const KIND_NAME[] = {"pp", "tg", "w"};

/* One repetition of test kind of len tokens on top of the cache's contents. */
static strata_status bench_once(bench_run *r, int kind, const strata_token *in, int len) {
    strata_status st = STRATA_OK;
    if (kind == KIND_PP) return strata_session_decode(r->s, in, len, r->logits, 0);
    if (kind == KIND_W) return strata_session_decode_gen(r->s, in, len, r->wlogits, 1);
    for (int i = 0; i < len && st == STRATA_OK; i++) st = strata_session_decode(r->s, in + i, 1, r->logits, 0);
    return st;
}

/* Test kind of len tokens at depth: the untimed warm-up (ppN the whole prompt, wN the window, tgN
 * one token), then the repetitions (the session's stats count those only). */
static int bench_test(bench_run *r, int depth, int kind, int len, bench_result *res) {
    strata_session *s = r->s;
    double sum = 0, sum2 = 0;
    res->secs = 0;
    if (!r->b->no_warmup) { /* untimed: first launches, lazy module loads, cold caches */
        strata_status st = strata_session_truncate(s, depth);
        if (st == STRATA_OK) st = bench_once(r, kind, r->toks + depth, kind == KIND_TG ? 1 : len);
        if (st != STRATA_OK)
            return cli_fail("warmup of %s%d at depth %d: %s", KIND_NAME[kind], len, depth, strata_last_error());
    }
    strata_session_reset_stats(s);
    for (int rep = 0; rep < r->b->reps; rep++) {
        strata_status st = strata_session_truncate(s, depth);
        double t0 = cli_now();
        if (st == STRATA_OK) st = bench_once(r, kind, r->toks + depth, len);
        double dt = cli_now() - t0;
        res->secs += dt;
        if (st != STRATA_OK)
            return cli_fail("%s%d at depth %d: %s", KIND_NAME[kind], len, depth, strata_last_error());
        const double tps = len / dt;
        sum += tps;
        sum2 += tps * tps;
    }
    const int reps = r->b->reps;
    res->mean = sum / reps;
    res->sd = reps > 1 ? sqrt(fmax(0, (sum2 - sum * res->mean) / (reps - 1))) : 0;
    return 0;
}

/* The stats' expert placement: where the row's experts ran and what moved (every repetition
 * together), on stderr; 1 if the session places experts at all (CPU layers, a cache, staging). */
static int print_placed(const strata_session_stats *ps, const char *test, double secs) {
    const int placed = ps->expert_slots_cpu > 0 || ps->expert_cache_slots > 0 || ps->stage_batches > 0;
    if (placed)
        fprintf(stderr, "strata: %s: expert rows %lld on the GPU, %lld on the CPU; cache hits "
                "%lld, misses %lld; prefetch %lld issued, %lld timely, %lld late; batches "
                "staged %lld, on the CPU %lld (split %lld); PCIe %.2f GB; disk %.2f GB (%.2f GB/s of the "
                "timed runs)\n", test,
                (long long)ps->expert_slots_gpu, (long long)ps->expert_slots_cpu,
                (long long)ps->expert_cache_hits, (long long)ps->expert_cache_misses,
                (long long)ps->prefetch_issued, (long long)ps->prefetch_timely,
                (long long)ps->prefetch_late, (long long)ps->stage_batches,
                (long long)ps->cpu_batches, (long long)ps->split_batches, (double)ps->pcie_bytes / 1e9,
                (double)ps->disk_bytes / 1e9, secs > 0 ? (double)ps->disk_bytes / 1e9 / secs : 0.0);
    return placed;
}

/* The row in --json's file; "experts" when the session places them. */
static void json_row(bench_run *r, int depth, int kind, int len, const bench_result *res,
                     double tok_bytes, double kvbytes, const strata_session_stats *ps, int placed) {
    FILE *jf = r->jf;
    fprintf(jf, "%s\n  {\"test\": \"%s\", \"depth\": %d, \"n\": %d, \"tok_s\": %.4f, "
            "\"sd\": %.4f, \"reps\": %d, \"decode_bytes\": %.0f, \"kv_bytes\": %.0f",
            r->first_row ? "" : ",", KIND_NAME[kind], depth, len, res->mean, res->sd, r->b->reps,
            tok_bytes > 0 ? tok_bytes - kvbytes : 0.0, kvbytes);
    if (kind == KIND_W)
        fprintf(jf, ", \"pass_bytes\": %.0f, \"expert_share\": %.4f, \"pass_s\": %.9f", tok_bytes * len,
                expert_share(&r->mi, len), len / res->mean);
    if (placed)
        fprintf(jf, ", \"experts\": {\"rows_gpu\": %lld, \"rows_cpu\": %lld, \"cache_hits\": "
                "%lld, \"cache_misses\": %lld, \"prefetch_issued\": %lld, \"prefetch_timely\": "
                "%lld, \"prefetch_late\": %lld, \"batches_staged\": %lld, \"batches_cpu\": "
                "%lld, \"batches_split\": %lld, \"pcie_bytes\": %lld, \"pinned_bytes\": %lld, \"disk_bytes\": %lld, "
                "\"seconds\": %.6f}",
                (long long)ps->expert_slots_gpu, (long long)ps->expert_slots_cpu,
                (long long)ps->expert_cache_hits, (long long)ps->expert_cache_misses,
                (long long)ps->prefetch_issued, (long long)ps->prefetch_timely,
                (long long)ps->prefetch_late, (long long)ps->stage_batches,
                (long long)ps->cpu_batches, (long long)ps->split_batches, (long long)ps->pcie_bytes,
                (long long)ps->pinned_bytes, (long long)ps->disk_bytes, res->secs);
    fputc('}', jf);
    r->first_row = 0;
}

/* Bytes per token of a tgN or wN row (0 for ppN), *kv its KV-cache part. tgN: every dense tensor,
 * top-k of the experts and the KV cache over depth + len / 2 positions on average. wN: one pass
 * reads the dense tensors and the KV cache over depth + len once and the experts its tokens touch
 * (expert_share), over its len tokens. */
static double row_bytes(const bench_run *r, int depth, int kind, int len, double *kv) {
    const strata_model_info *mi = &r->mi;
    /* a position's K and V in every layer that keeps them (MLA: the latent row alone) */
    const int64_t kv_tok = strata_model_kv_bytes_per_token(r->m, r->o->kv_type);
    const double kv_pos = kv_tok > 0 ? (double)kv_tok : 0.0;
    *kv = 0;
    if (kind == KIND_TG) {
        *kv = kv_pos * (depth + 0.5 * len);
        return r->dense_bytes + r->expert_bytes * expert_share(mi, 1) + *kv;
    }
    if (kind == KIND_W) {
        *kv = kv_pos * (depth + len) / len;
        return (r->dense_bytes + r->expert_bytes * expert_share(mi, len)) / len + *kv;
    }
    return 0;
}

/* A test's table row on stdout, its --profile lines, the placement line and the JSON row. */
static void bench_row(bench_run *r, int depth, int kind, int len, const bench_result *res) {
    const cli_opts *o = r->o;
    char test[64];
    if (depth > 0) snprintf(test, sizeof test, "%s%d @ d%d", KIND_NAME[kind], len, depth);
    else snprintf(test, sizeof test, "%s%d", KIND_NAME[kind], len);
    char gbs[32] = "", share[32] = "", rowsz[32] = "";
    double kvbytes;
    const double tb = row_bytes(r, depth, kind, len, &kvbytes);
    if (tb > 0) {
        cli_human_bytes(tb, rowsz, sizeof rowsz);
        snprintf(gbs, sizeof gbs, "%.1f", tb * res->mean / 1e9);
        if (r->copy_rate > 0.0) snprintf(share, sizeof share, "%.1f%%", 100.0 * tb * res->mean / r->copy_rate);
    }
    char thr[16];
    if (o->n_threads > 0) snprintf(thr, sizeof thr, "%d", o->n_threads);
    else snprintf(thr, sizeof thr, "all");
    printf("| %s | %s | %s | %s | %s | %.2f ± %.2f | %s | %s | %s |\n", r->name, r->size,
           r->on_gpu ? "cuda" : "cpu", thr, test, res->mean, res->sd, rowsz, gbs, share);
    fflush(stdout);
    cli_print_profile(r->s, test);
    strata_session_stats ps;
    memset(&ps, 0, sizeof ps);
    strata_session_get_stats(r->s, &ps);
    const int placed = print_placed(&ps, test, res->secs);
    if (r->jf) json_row(r, depth, kind, len, res, tb, kvbytes, &ps, placed);
}

/* Every test at every depth: the cache filled to the depth (untimed), then each ppN, tgN and wN. */
static int bench_all(bench_run *r) {
    const bench_opts *b = r->b;
    for (int di = 0; di < b->n_d; di++) {
        const int depth = b->d[di];
        strata_session_reset(r->s);
        if (depth > 0 && strata_session_decode(r->s, r->toks, depth, NULL, 0) != STRATA_OK)
            return cli_fail("filling depth %d: %s", depth, strata_last_error());
        for (int kind = KIND_PP; kind <= KIND_W; kind++) {
            const int cnt = kind == KIND_PP ? b->n_p : kind == KIND_TG ? b->n_n : b->n_w;
            for (int ti = 0; ti < cnt; ti++) {
                const int len = kind == KIND_PP ? b->p[ti] : kind == KIND_TG ? b->n[ti] : b->w[ti];
                if (len <= 0) continue;
                bench_result res = {0, 0, 0};
                const int rc = bench_test(r, depth, kind, len, &res);
                if (rc) return rc;
                bench_row(r, depth, kind, len, &res);
            }
        }
    }
    if (r->jf) fprintf(r->jf, "\n]}\n");
    return 0;
}

int cli_cmd_bench(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    o.n_batch = 2048;
    bench_opts b = {.p = {512}, .n_p = 1, .n = {128}, .n_n = 1, .d = {0}, .n_d = 1, .reps = 3};
    int rc = parse_args(argc, argv, &o, &b);
    if (rc) return rc < 0 ? 0 : rc;

    bench_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.b = &b;
    if ((rc = cli_load_model(&o, &r.m, NULL))) return rc;
    strata_model_get_info(r.m, &r.mi);
    size_context(&o, &b, &r.mi);
    if ((rc = cli_new_session(&o, r.m, &r.s))) { strata_model_free(r.m); return rc; }
    rc = bench_begin(&r);
    if (!rc) rc = bench_all(&r);
    if (r.jf && fclose(r.jf) != 0 && !rc) rc = cli_fail("cannot write '%s': %s", b.json, strerror(errno));
    free(r.toks);
    free(r.logits);
    free(r.wlogits);
    strata_session_free(r.s);
    strata_model_free(r.m);
    return rc;
}
