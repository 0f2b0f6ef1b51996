/* bench.c - `strata bench`: prompt-processing and decode throughput with llama-bench's meaning of
 * its flags, so the figures line up with llama.cpp's (../shared/bench/ANCHORS.md):
 *   -p N[,N..]  ppN: N prompt tokens evaluated as one call (batches of -b, default 2048 capped by
 *               the context), timed from the first token to the last logits
 *   -n N[,N..]  tgN: N tokens decoded one at a time (each waits for its logits)
 *   -d D[,D..]  depth: D tokens are put in the KV cache first (untimed), then each test runs on top
 *   -r R        repetitions (mean and sample standard deviation of tok/s)
 *   --no-warmup no untimed run first (by default, as llama-bench, each test runs once untimed
 *               before its repetitions: ppN the whole prompt, tgN one token)
 * Tokens are fixed pseudo-random ids (no sampling). Output: a markdown table (model, size,
 * backend, threads, test, t/s +- sd) on stdout; --json FILE writes the same rows. For tg rows the
 * table also gives the bytes one decoded token must read - the weights (every dense tensor once,
 * expert tensors top-k / n_expert of them, one embedding row) plus the KV cache it attends (K and
 * V of every layer over depth + n/2 positions on average, at the cache type's width) - and those
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

/* Weight bytes one decoded token reads: dense tensors whole, merged expert tensors k/n of them,
 * the embedding table one row. */
static double decode_bytes(const strata_model *m, const strata_model_info *mi) {
    const strata_gguf *g = strata_model_gguf(m);
    double b = 0;
    for (int64_t i = 0; i < strata_gguf_tensor_count(g); i++) {
        strata_tensor_info ti;
        if (strata_gguf_tensor_info(g, i, &ti) != STRATA_OK) continue;
        if (strstr(ti.name, "_exps.") && mi->n_expert > 0)
            b += (double)ti.n_bytes * mi->n_expert_used / mi->n_expert;
        else if (strcmp(ti.name, "token_embd.weight") == 0)
            b += (double)ti.n_bytes / (double)(ti.ne[1] > 0 ? ti.ne[1] : 1);
        else
            b += (double)ti.n_bytes;
    }
    if (strata_gguf_tensor_find(g, "output.weight") < 0) { /* tied: the head reads it all */
        int64_t te = strata_gguf_tensor_find(g, "token_embd.weight");
        strata_tensor_info ti;
        if (te >= 0 && strata_gguf_tensor_info(g, te, &ti) == STRATA_OK) b += (double)ti.n_bytes;
    }
    return b;
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
           "  -d D[,D]   KV-cache depth before each test (default 0)\n"
           "  -r R       repetitions (default 3)\n"
           "  --no-warmup  no untimed run before each test's repetitions (default: one, as\n"
           "             llama-bench: the whole prompt for ppN, one token for tgN)\n"
           "  --json F   the rows as JSON\n"
           "  -b N       prompt tokens per forward pass (default 2048, capped by the context)\n"
           "  -t N, --gpu, --cpu, -ngl N, --kv-type, --profile: as for strata run (--profile\n"
           "             prints each test's time per phase on stderr)\n");
}

int cli_cmd_bench(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    o.n_batch = 2048;
    bench_opts b = {.p = {512}, .n_p = 1, .n = {128}, .n_n = 1, .d = {0}, .n_d = 1, .reps = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(); return 0; }
        if (strcmp(a, "--no-warmup") == 0) {
            b.no_warmup = 1;
            continue;
        }
        int isp = strcmp(a, "-p") == 0, isn = strcmp(a, "-n") == 0, isd = strcmp(a, "-d") == 0;
        int isr = strcmp(a, "-r") == 0, isj = strcmp(a, "--json") == 0;
        if (isp || isn || isd || isr || isj) {
            if (i + 1 >= argc) return cli_usage_error("option '%s' needs a value", a);
            const char *v = argv[++i];
            int rc = 0;
            if (isp) rc = parse_list(a, v, b.p, &b.n_p);
            else if (isn) rc = parse_list(a, v, b.n, &b.n_n);
            else if (isd) rc = parse_list(a, v, b.d, &b.n_d);
            else if (isj) b.json = v;
            else {
                char *end;
                long x = strtol(v, &end, 10);
                if (end == v || *end || x < 1 || x > 1000)
                    return cli_usage_error("bad value '%s' for -r (1..1000)", v);
                b.reps = (int)x;
            }
            if (rc) return rc;
            continue;
        }
        int rc = cli_opts_parse(&o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        return cli_usage_error("unknown option '%s' for bench", a);
    }
    if (!o.model) return cli_usage_error("no model (-m FILE)");

    strata_model *m = NULL;
    int rc = cli_load_model(&o, &m, NULL);
    if (rc) return rc;
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    int max_p = 0, max_n = 0, max_d = 0;
    for (int i = 0; i < b.n_p; i++) max_p = b.p[i] > max_p ? b.p[i] : max_p;
    for (int i = 0; i < b.n_n; i++) max_n = b.n[i] > max_n ? b.n[i] : max_n;
    for (int i = 0; i < b.n_d; i++) max_d = b.d[i] > max_d ? b.d[i] : max_d;
    if (o.n_ctx == 0) { /* a context for the deepest test, checked here against the training one */
        const int need = max_d + (max_p > max_n ? max_p : max_n);
        if (mi.n_ctx_train > 0 && need > mi.n_ctx_train)
            fprintf(stderr, "strata: warning: -d %d with tests of up to %d tokens reaches position %d, "
                    "past the model's training context of %d tokens\n", max_d,
                    max_p > max_n ? max_p : max_n, need, (int)mi.n_ctx_train);
        o.n_ctx = need + 16;
        o.ctx_warned = 1;
    }
    if (o.n_batch > o.n_ctx) o.n_batch = o.n_ctx;
    strata_session *s = NULL;
    if ((rc = cli_new_session(&o, m, &s))) { strata_model_free(m); return rc; }

    const int64_t ntok = (int64_t)max_d + max_p + max_n + 1;
    strata_token *toks = malloc(sizeof *toks * (size_t)ntok);
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
    FILE *jf = b.json ? fopen(b.json, "w") : NULL;
    if (!toks || !logits || (b.json && !jf)) {
        rc = !toks || !logits ? cli_fail("out of memory") : cli_fail("cannot write '%s': %s", b.json, strerror(errno));
        goto done;
    }
    fill_tokens(toks, ntok, mi.n_vocab, 0x5eedULL);
    const double dbytes = decode_bytes(m, &mi);
    char size[32], rowsz[32];
    cli_human_bytes((double)mi.n_bytes, size, sizeof size);
    const char *name = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
    /* GPU rows: decode's bytes over the time as a share of the device's copy rate, measured here
     * (strata_backend_copy_rate) before any timed run */
    const int on_gpu = strncmp(o.backend_desc, "cuda", 4) == 0;
    double copy_rate = 0.0;
    if (on_gpu && strata_backend_copy_rate(STRATA_BACKEND_CUDA, &copy_rate) != STRATA_OK) {
        fprintf(stderr, "strata: bench: no copy rate (%s)\n", strata_last_error());
        copy_rate = 0.0;
    }
    if (copy_rate > 0.0) fprintf(stderr, "strata: bench: device copy rate %.0f GB/s (read + write)\n", copy_rate / 1e9);
    printf("| model | size | backend | threads | test | t/s | decode bytes/token | GB/s | of copy rate |\n");
    printf("|---|---:|---|---:|---|---:|---:|---:|---:|\n");
    if (jf) {
        fputs("{\"model\": ", jf);
        cli_json_string(jf, name);
        fprintf(jf, ", \"bytes\": %llu, \"backend\": ", (unsigned long long)mi.n_bytes);
        cli_json_string(jf, o.backend_desc);
        fprintf(jf, ", \"copy_bytes_per_s\": %.0f, \"rows\": [", copy_rate);
    }
    int first_row = 1;
    for (int di = 0; di < b.n_d; di++) {
        const int depth = b.d[di];
        strata_session_reset(s);
        if (depth > 0 && strata_session_decode(s, toks, depth, NULL, 0) != STRATA_OK) {
            rc = cli_fail("filling depth %d: %s", depth, strata_last_error());
            goto done;
        }
        for (int kind = 0; kind < 2; kind++) {
            const int cnt = kind == 0 ? b.n_p : b.n_n;
            for (int ti = 0; ti < cnt; ti++) {
                const int len = kind == 0 ? b.p[ti] : b.n[ti];
                if (len <= 0) continue;
                double sum = 0, sum2 = 0, secs = 0;
                if (!b.no_warmup) { /* untimed: first launches, lazy module loads, cold caches */
                    strata_status st = strata_session_truncate(s, depth);
                    if (st == STRATA_OK) st = strata_session_decode(s, toks + depth, kind == 0 ? len : 1, logits, 0);
                    if (st != STRATA_OK) {
                        rc = cli_fail("warmup of %s%d at depth %d: %s", kind ? "tg" : "pp", len, depth,
                                      strata_last_error());
                        goto done;
                    }
                }
                strata_session_reset_stats(s);
                for (int r = 0; r < b.reps; r++) {
                    strata_status st = strata_session_truncate(s, depth);
                    const strata_token *in = toks + depth;
                    double t0 = cli_now();
                    if (kind == 0) {
                        if (st == STRATA_OK) st = strata_session_decode(s, in, len, logits, 0);
                    } else {
                        for (int i = 0; i < len && st == STRATA_OK; i++)
                            st = strata_session_decode(s, in + i, 1, logits, 0);
                    }
                    double dt = cli_now() - t0;
                    secs += dt;
                    if (st != STRATA_OK) {
                        rc = cli_fail("%s%d at depth %d: %s", kind ? "tg" : "pp", len, depth,
                                      strata_last_error());
                        goto done;
                    }
                    const double tps = len / dt;
                    sum += tps;
                    sum2 += tps * tps;
                }
                const double mean = sum / b.reps;
                const double sd = b.reps > 1 ? sqrt(fmax(0, (sum2 - sum * mean) / (b.reps - 1))) : 0;
                char test[64];
                if (depth > 0) snprintf(test, sizeof test, "%s%d @ d%d", kind ? "tg" : "pp", len, depth);
                else snprintf(test, sizeof test, "%s%d", kind ? "tg" : "pp", len);
                char gbs[32] = "", share[32] = "";
                rowsz[0] = '\0';
                /* KV bytes a decoded token reads: K and V of every layer over the positions it
                 * attends, on average depth + len / 2 */
                const double kv_el = o.kv_type == STRATA_TYPE_F32 ? 4.0 : 2.0;
                const double kvbytes = kind == 1 ? 2.0 * mi.n_layer * mi.n_head_kv * (double)mi.head_dim *
                                                       kv_el * (depth + 0.5 * len) : 0.0;
                if (kind == 1) {
                    cli_human_bytes(dbytes + kvbytes, rowsz, sizeof rowsz);
                    snprintf(gbs, sizeof gbs, "%.1f", (dbytes + kvbytes) * mean / 1e9);
                    if (copy_rate > 0.0)
                        snprintf(share, sizeof share, "%.1f%%", 100.0 * (dbytes + kvbytes) * mean / copy_rate);
                }
                char thr[16];
                if (o.n_threads > 0) snprintf(thr, sizeof thr, "%d", o.n_threads);
                else snprintf(thr, sizeof thr, "all");
                printf("| %s | %s | %s | %s | %s | %.2f ± %.2f | %s | %s | %s |\n", name, size,
                       on_gpu ? "cuda" : "cpu", thr, test, mean, sd, rowsz, gbs, share);
                fflush(stdout);
                cli_print_profile(s, test);
                /* where the row's experts ran and what moved (every repetition together) */
                strata_session_stats ps;
                memset(&ps, 0, sizeof ps);
                strata_session_get_stats(s, &ps);
                const int placed = ps.expert_slots_cpu > 0 || ps.expert_cache_slots > 0 || ps.stage_batches > 0;
                if (placed)
                    fprintf(stderr, "strata: %s: expert rows %lld on the GPU, %lld on the CPU; cache hits "
                            "%lld, misses %lld; prefetch %lld issued, %lld timely, %lld late; batches "
                            "staged %lld, on the CPU %lld; PCIe %.2f GB; disk %.2f GB (%.2f GB/s of the "
                            "timed runs)\n", test,
                            (long long)ps.expert_slots_gpu, (long long)ps.expert_slots_cpu,
                            (long long)ps.expert_cache_hits, (long long)ps.expert_cache_misses,
                            (long long)ps.prefetch_issued, (long long)ps.prefetch_timely,
                            (long long)ps.prefetch_late, (long long)ps.stage_batches,
                            (long long)ps.cpu_batches, (double)ps.pcie_bytes / 1e9,
                            (double)ps.disk_bytes / 1e9, secs > 0 ? (double)ps.disk_bytes / 1e9 / secs : 0.0);
                if (jf) {
                    fprintf(jf, "%s\n  {\"test\": \"%s\", \"depth\": %d, \"n\": %d, \"tok_s\": %.4f, "
                            "\"sd\": %.4f, \"reps\": %d, \"decode_bytes\": %.0f, \"kv_bytes\": %.0f",
                            first_row ? "" : ",", kind ? "tg" : "pp", depth, len, mean, sd, b.reps,
                            kind ? dbytes : 0.0, kvbytes);
                    if (placed)
                        fprintf(jf, ", \"experts\": {\"rows_gpu\": %lld, \"rows_cpu\": %lld, \"cache_hits\": "
                                "%lld, \"cache_misses\": %lld, \"prefetch_issued\": %lld, \"prefetch_timely\": "
                                "%lld, \"prefetch_late\": %lld, \"batches_staged\": %lld, \"batches_cpu\": "
                                "%lld, \"pcie_bytes\": %lld, \"pinned_bytes\": %lld, \"disk_bytes\": %lld, "
                                "\"seconds\": %.6f}",
                                (long long)ps.expert_slots_gpu, (long long)ps.expert_slots_cpu,
                                (long long)ps.expert_cache_hits, (long long)ps.expert_cache_misses,
                                (long long)ps.prefetch_issued, (long long)ps.prefetch_timely,
                                (long long)ps.prefetch_late, (long long)ps.stage_batches,
                                (long long)ps.cpu_batches, (long long)ps.pcie_bytes,
                                (long long)ps.pinned_bytes, (long long)ps.disk_bytes, secs);
                    fputc('}', jf);
                    first_row = 0;
                }
            }
        }
    }
    if (jf) fprintf(jf, "\n]}\n");
done:
    if (jf && fclose(jf) != 0 && !rc) rc = cli_fail("cannot write '%s': %s", b.json, strerror(errno));
    free(toks);
    free(logits);
    strata_session_free(s);
    strata_model_free(m);
    return rc;
}
