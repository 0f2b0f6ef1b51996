/* quantize.c - `strata quantize IN.gguf OUT.gguf --type T [-t N] [--allow-requantize]`: a thin
 * wrapper over strata_quantize_file that parses the options and reports what was converted. */
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
        "usage: strata quantize IN.gguf OUT.gguf --type TYPE [-t N] [--allow-requantize]\n"
        "\n"
        "Rewrites a model with its weights in TYPE: f32, f16, bf16, q8_0, q4_0, q4_K or q6_K\n"
        "(norms and other 1-D tensors stay as they are, routers f32; rows whose length does not\n"
        "fit TYPE's blocks fall back to q8_0). Metadata is copied, general.file_type updated.\n"
        "\n"
        "  -T, --type TYPE       the target type\n"
        "  -t, --threads N       worker threads (default: all cores)\n"
        "  --allow-requantize    let weights that are already quantized change type (as\n"
        "                        llama-quantize: refused without it, since requantizing loses\n"
        "                        more than quantizing from the float weights)\n");
}

static int is_opt(const char *a, const char *name) {
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

int cli_cmd_quantize(int argc, char **argv) {
    const char *paths[2] = {NULL, NULL};
    int n_paths = 0;
    const char *type_name = NULL;
    strata_quantize_params params = strata_quantize_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (is_opt(a, "--type") || strcmp(a, "-T") == 0) {
            type_name = opt_value(argc, argv, &i, is_opt(a, "--type") ? "--type" : "-T", &rc);
            if (!type_name) return rc;
        } else if (is_opt(a, "--threads") || strcmp(a, "-t") == 0) {
            const char *v = opt_value(argc, argv, &i, is_opt(a, "--threads") ? "--threads" : "-t", &rc);
            if (!v) return rc;
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || *end || end == v || n < 0 || n > 4096)
                return cli_usage_error("bad thread count '%s'", v);
            params.n_threads = (int)n;
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
    if (!type_name) return cli_usage_error("quantize needs --type (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)");
    strata_type type;
    if (strata_type_from_name(type_name, &type) != STRATA_OK)
        return cli_usage_error("unknown type '%s'", type_name);
    if (type != STRATA_TYPE_F32 && type != STRATA_TYPE_F16 && type != STRATA_TYPE_BF16 &&
        type != STRATA_TYPE_Q8_0 && type != STRATA_TYPE_Q4_0 && type != STRATA_TYPE_Q4_K &&
        type != STRATA_TYPE_Q6_K)
        return cli_usage_error("cannot quantize to %s (targets: f32, f16, bf16, q8_0, q4_0, q4_K, "
                               "q6_K)", strata_type_name(type));
    params.type = type;
    int rc = cli_check_readable(paths[0]);
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
    printf("wrote %s: %" PRId64 " tensors: %" PRId64 " to %s, %" PRId64 " to q8_0 (row length), "
           "%" PRId64 " kept\n", paths[1], stats.n_tensors, stats.n_quantized,
           strata_type_name(type), stats.n_fallback, stats.n_kept);
    printf("tensor data %s -> %s in %.2f s\n", cli_human_bytes((double)stats.bytes_in, hin, sizeof hin),
           cli_human_bytes((double)stats.bytes_out, hout, sizeof hout), secs);
    return 0;
}
