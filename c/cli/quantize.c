/* quantize.c - `strata quantize IN.gguf OUT.gguf --type T [--type-experts T] [--type-dense T]
 * [--type-down T] [-t N] [--allow-requantize] [--imatrix FILE]`: a thin wrapper over strata_quantize_file that
 * parses the options and reports what was converted. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Value of option argv[*i] given as "--opt VALUE" or "--opt=VALUE"; NULL (after a usage message
 * in *rc) if missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *rc) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) == 0 && a[n] == '=') return a + n + 1;
    if (*i + 1 >= argc) {
        *rc = cli_usage_error("option '%s' needs a value", name);
        return NULL;
    }
    return argv[++*i];
}

static void quantize_usage(FILE *f) {
    fprintf(f,
        "usage: strata quantize IN.gguf OUT.gguf --type TYPE [--type-experts TYPE]\n"
        "                       [--type-dense TYPE] [--type-down TYPE] [-t N] [--allow-requantize]\n"
        "                       [--imatrix IMATRIX.gguf]\n"
        "\n"
        "Rewrites a model with its weights in TYPE: f32, f16, bf16, q8_0, q4_0, q2_K, q3_K, q4_K,\n"
        "q5_K, q6_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq4_nl, iq4_xs or mxfp4\n"
        "(norms and other 1-D tensors stay as they are, routers f32; rows whose length does not\n"
        "fit a type's blocks fall back to q8_0). Metadata is copied, general.file_type set from\n"
        "TYPE. Mixes as real low-bit files have: the three options below override TYPE for their\n"
        "tensors (--type may be left out when all three are given; the file type is then the\n"
        "experts'). With --imatrix the IQ types (iq1_s, iq1_m, iq2_*, iq3_*, iq4_nl, iq4_xs)\n"
        "weigh each weight's error by its column's importance (as llama-quantize; K types and\n"
        "the rest ignore it); without one iq2_xxs, iq2_xs and iq1_s use uniform importance,\n"
        "which llama-quantize refuses: make one with `strata imatrix` for low-bit files.\n"
        "\n"
        "  -T, --type TYPE         the target type\n"
        "  --type-experts TYPE     expert tensors (ffn_*_exps) but ffn_down_exps\n"
        "  --type-dense TYPE       every other weight (attention, embeddings, output, dense FFN)\n"
        "                          but ffn_down\n"
        "  --type-down TYPE        ffn_down and ffn_down_exps (llama-quantize's mixes keep them a\n"
        "                          step higher than the experts)\n"
        "  -t, --threads N         worker threads (default: all cores)\n"
        "  --allow-requantize      let weights that are already quantized change type (as\n"
        "                          llama-quantize: refused without it, since requantizing loses\n"
        "                          more than quantizing from the float weights)\n"
        "  --imatrix FILE          an importance matrix (llama.cpp's GGUF imatrix format, from\n"
        "                          `strata imatrix` or llama-imatrix): per tensor and expert,\n"
        "                          the mean squared input of each column; an entry whose shape\n"
        "                          is not its tensor's is refused\n");
}

/* Parses a type name into *out; a usage error naming the option if it is unknown or no target. */
static int parse_target(const char *opt, const char *name, strata_type *out) {
    if (strata_type_from_name(name, out) != STRATA_OK)
        return cli_usage_error("%s: unknown type '%s'", opt, name);
    if (!strata_type_can_quantize(*out) || *out == STRATA_TYPE_Q8_K)
        return cli_usage_error("cannot quantize to %s (targets: f32, f16, bf16, q8_0, q4_0, q2_K, "
                               "q3_K, q4_K, q5_K, q6_K, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, "
                               "iq3_xxs, iq3_s, iq4_nl, iq4_xs, mxfp4)", strata_type_name(*out));
    return 0;
}

static int is_opt(const char *a, const char *name) {
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

int cli_cmd_quantize(int argc, char **argv) {
    const char *paths[2] = {NULL, NULL};
    int n_paths = 0;
    /* --type, --type-experts, --type-dense, --type-down */
    static const char *const type_opts[4] = {"--type", "--type-experts", "--type-dense", "--type-down"};
    const char *type_names[4] = {NULL, NULL, NULL, NULL};
    strata_quantize_params params = strata_quantize_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0, k = strcmp(a, "-T") == 0 ? 0 : -1;
        for (int j = 0; j < 4 && k < 0; j++)
            if (is_opt(a, type_opts[j])) k = j;
        if (k >= 0) {
            type_names[k] = opt_value(argc, argv, &i, k == 0 && a[1] == 'T' ? "-T" : type_opts[k], &rc);
            if (!type_names[k]) return rc;
        } else if (is_opt(a, "--threads") || strcmp(a, "-t") == 0) {
            const char *v = opt_value(argc, argv, &i, is_opt(a, "--threads") ? "--threads" : "-t", &rc);
            if (!v) return rc;
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || *end || end == v || n < 0 || n > 4096)
                return cli_usage_error("bad thread count '%s'", v);
            params.n_threads = (int)n;
        } else if (is_opt(a, "--imatrix")) {
            params.imatrix = opt_value(argc, argv, &i, "--imatrix", &rc);
            if (!params.imatrix) return rc;
        } else if (strcmp(a, "--allow-requantize") == 0) {
            params.allow_requantize = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            quantize_usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("unknown option '%s'", a);
        } else if (n_paths < 2) {
            paths[n_paths++] = a;
        } else {
            return cli_usage_error("quantize takes an input and an output file ('%s' is extra)", a);
        }
    }
    if (n_paths < 2) return cli_usage_error("quantize needs an input and an output file");
    if (!type_names[0] && !(type_names[1] && type_names[2] && type_names[3]))
        return cli_usage_error("quantize needs --type (or all of --type-experts, --type-dense and "
                               "--type-down)");
    strata_type types[4] = {STRATA_TYPE_COUNT, (strata_type)-1, (strata_type)-1, (strata_type)-1};
    for (int j = 0; j < 4; j++) {
        if (!type_names[j]) continue;
        int rc = parse_target(type_opts[j], type_names[j], &types[j]);
        if (rc) return rc;
    }
    params.type = type_names[0] ? types[0] : types[1];
    params.type_experts = (int)types[1];
    params.type_dense = (int)types[2];
    params.type_down = (int)types[3];
    int rc = cli_check_readable(paths[0]);
    if (!rc && params.imatrix) rc = cli_check_readable(params.imatrix);
    if (rc) return rc;

    strata_quantize_stats stats;
    memset(&stats, 0, sizeof stats);
    params.stats = &stats;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    strata_status st = strata_quantize_file(paths[0], paths[1], &params);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != STRATA_OK) return cli_fail("%s", cli_lib_error()); /* parameters named as flags */
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    char hin[32], hout[32];
    char to[192];
    if (type_names[1] || type_names[2] || type_names[3])
        snprintf(to, sizeof to, "converted (experts %s, dense %s, down %s)",
                 strata_type_name((int)types[1] < 0 ? params.type : types[1]),
                 strata_type_name((int)types[2] < 0 ? params.type : types[2]),
                 strata_type_name((int)types[3] < 0 ? params.type : types[3]));
    else
        snprintf(to, sizeof to, "to %s", strata_type_name(params.type));
    printf("wrote %s: %" PRId64 " tensors: %" PRId64 " %s, %" PRId64 " to q8_0 (row length), "
           "%" PRId64 " kept\n", paths[1], stats.n_tensors, stats.n_quantized, to,
           stats.n_fallback, stats.n_kept);
    if (params.imatrix)
        printf("importance matrix %s: %" PRId64 " tensors quantized with their entry, %" PRId64
               " without (no entry)\n", params.imatrix, stats.n_importance, stats.n_no_importance);
    printf("tensor data %s -> %s in %.2f s\n", cli_human_bytes((double)stats.bytes_in, hin, sizeof hin),
           cli_human_bytes((double)stats.bytes_out, hout, sizeof hout), secs);
    return 0;
}
