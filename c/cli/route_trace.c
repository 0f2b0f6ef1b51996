/* route_trace.c - --route-trace FILE: every session the command makes writes each layer's routing
 * into one file of JSON lines (strata_session_set_route_trace): a header naming the model's shape,
 * then one line per layer and forward pass: {"layer", "pos" (the batch's first position), "n"
 * (its tokens), "ids" and "w" (n x k, row-major: each token's experts and gate weights), "pred"
 * (the experts the previous layer predicted for this one, or null)}. bench/routing_stats.py reads
 * it. The file is opened once per process and closed at exit. --route-replay FILE attaches a
 * recorded routing to every session (strata_session_set_route_replay). */
#include "route_trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static FILE *cli_trace_file;

static void cli_trace_close(void) {
    if (cli_trace_file) fclose(cli_trace_file);
    cli_trace_file = NULL;
}

static void cli_trace_ints(FILE *f, const char *key, const int32_t *v, int64_t n) {
    fprintf(f, ", \"%s\": ", key);
    if (!v) { fputs("null", f); return; }
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", (int)v[i]);
    fputc(']', f);
}

static void cli_trace_layer(int32_t layer, int32_t pos0, int64_t n, int32_t k, const int32_t *ids,
                            const float *w, const int32_t *pred, void *ud) {
    FILE *f = ud;
    fprintf(f, "{\"layer\": %d, \"pos\": %d, \"n\": %lld", (int)layer, (int)pos0, (long long)n);
    cli_trace_ints(f, "ids", ids, n * k);
    fputs(", \"w\": [", f);
    for (int64_t i = 0; i < n * k; i++) fprintf(f, i ? ",%.6g" : "%.6g", (double)w[i]);
    fputc(']', f);
    cli_trace_ints(f, "pred", pred, n * k);
    fputs("}\n", f);
}

int cli_route_trace_attach(const cli_opts *o, const strata_model *model, strata_session *s) {
    if (!o->route_trace) return 0;
    if (!cli_trace_file) {
        cli_trace_file = fopen(o->route_trace, "w");
        if (!cli_trace_file)
            return cli_fail("--route-trace %s: cannot open: %s", o->route_trace, strerror(errno));
        atexit(cli_trace_close);
        strata_model_info mi;
        memset(&mi, 0, sizeof mi);
        strata_model_get_info(model, &mi);
        fputs("{\"strata_route_trace\": 1, \"model\": ", cli_trace_file);
        cli_json_string(cli_trace_file, o->model ? o->model : "");
        fprintf(cli_trace_file, ", \"arch\": ");
        cli_json_string(cli_trace_file, mi.arch ? mi.arch : "");
        fprintf(cli_trace_file, ", \"n_layer\": %d, \"n_expert\": %d, \"k\": %d}\n", (int)mi.n_layer,
                (int)mi.n_expert, (int)mi.n_expert_used);
    }
    if (strata_session_set_route_trace(s, cli_trace_layer, cli_trace_file) != STRATA_OK)
        return cli_fail("--route-trace: %s (use --cpu)", cli_lib_error());
    return 0;
}

int cli_route_replay_attach(const cli_opts *o, strata_session *s) {
    static int said;
    if (!o->route_replay) return 0;
    if (strata_session_set_route_replay(s, o->route_replay) != STRATA_OK)
        return cli_fail("--route-replay %s: %s", o->route_replay, cli_lib_error());
    if (!said++ && !o->quiet)
        fprintf(stderr, "strata: route replay: every MoE layer routes as %s says, not as the model does "
                "(benchmarks only: the text is not the model's)\n", o->route_replay);
    return 0;
}
