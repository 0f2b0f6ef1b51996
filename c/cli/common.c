/* common.c - shared pieces of the model-running subcommands (see common.h): the top-K logprob
 * dump and KL estimate, and the stats lines. */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
