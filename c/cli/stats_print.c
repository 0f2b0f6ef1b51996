/* stats_print.c - what the model-running commands print about a session's work (stats_print.h):
 * run's footer (stderr) and --stats-json file, the KV cache's size, DEGRADE_ZERO's tally, the verify windows,
 * --profile's phase times and the [PROF] line: prompt and decode rates, where the routed experts
 * ran, what moved over PCIe and from disk. */
#include "stats_print.h"
#include "session_setup.h" /* cli_threads_used, cli_session_on_gpu */

#include <errno.h>
#include <string.h>

double cli_rate(double n, double s) { return s > 0 ? n / s : 0.0; }

/* ---------------------------------------------------------------------------------------------
 * Session stats
 * ------------------------------------------------------------------------------------------- */

void cli_print_degrade_stats(const strata_session *sess) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !st.degrade_zero) return;
    fprintf(stderr, "strata: DEGRADE_ZERO tau %.3g%s: zeroed %lld of %lld decode slots (%.2f%%), "
            "per layer %.2f%%..%.2f%%\n", (double)st.degrade_tau, st.degrade_eval ? " (eval)" : "",
            (long long)st.degrade_zeroed, (long long)st.degrade_slots,
            st.degrade_slots ? 100.0 * (double)st.degrade_zeroed / (double)st.degrade_slots : 0.0,
            100.0 * st.degrade_layer_min, 100.0 * st.degrade_layer_max);
}

void cli_print_tail_skip_stats(const strata_session *sess) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !(st.route_tail_skip > 0.0f)) return;
    const int64_t slots = st.expert_slots_gpu + st.expert_slots_cpu;
    fprintf(stderr, "strata: STRATA_ROUTE_TAIL_SKIP=%g: skipped %lld routed slots", (double)st.route_tail_skip,
            (long long)st.route_tail_skipped);
    if (slots > 0) fprintf(stderr, " of %lld (%.2f%%)", (long long)slots, 100.0 * (double)st.route_tail_skipped / (double)slots);
    fputc('\n', stderr);
}

void cli_print_q8_sm60_stats(const strata_session *sess) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || st.q8_sm60_mats <= 0) return;
    fprintf(stderr, "strata: STRATA_Q8_SM60=1: %d Q8_0 matrices decoded by the SM60 GEMV (an approximation)\n",
            (int)st.q8_sm60_mats);
}

void cli_print_kv_stats(const strata_session *sess, strata_type kv_type) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || (st.kv_bytes_per_token <= 0 && st.state_bytes <= 0))
        return;
    char pb[32], kb[32], sb[32], ab[32];
    fprintf(stderr, "strata: KV cache %s a token (%s), %s for %d positions",
            cli_human_bytes((double)st.kv_bytes_per_token, pb, sizeof pb), strata_type_name(kv_type),
            cli_human_bytes((double)st.kv_bytes, kb, sizeof kb), (int)strata_session_n_ctx(sess));
    if (st.state_bytes > 0)
        fprintf(stderr, " + recurrent state %s (%s allocated with its working buffers and rollback window)",
                cli_human_bytes((double)st.state_bytes, sb, sizeof sb),
                cli_human_bytes((double)st.state_alloc_bytes, ab, sizeof ab));
    fputc('\n', stderr);
}

void cli_print_defer_stats(const strata_session *sess) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !st.defer_cpu) return;
    fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU=%s: %lld CPU-layer calls %s\n",
            st.defer_cpu == 2 ? "check" : "1", (long long)st.defer_calls,
            st.defer_cpu == 2 ? "summed in the split's order" : st.defer_cpu_below > 0.0f ? "split, the light rows late"
                                                                                      : "with every CPU row late");
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
    fprintf(stderr, "[PROF] prompt %.2f tok/s | decode %.2f tok/s", prompt_tps, decode_tps);
    if (st.plan_decode_tok_s > 0) /* the start-up expectation beside the measured rate */
        fprintf(stderr, " (plan: at most %.1f, %.0f%% of it)", st.plan_decode_tok_s,
                100.0 * decode_tps / st.plan_decode_tok_s);
    fprintf(stderr, " | experts: %lld slot-rows from GPU memory, %lld on the CPU", (long long)st.expert_slots_gpu,
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

/* Verify windows (--spec): how many, the drafts they took and accepted, the tokens each gave; then
 * per drafter and --spec auto's policy (drafts.c). */
static void cli_print_spec_stats(const cli_opts *o, const strata_session *sess, const cli_drafts *d) {
    strata_spec_stats sp;
    if (o->spec == CLI_SPEC_NONE || strata_session_get_spec_stats(sess, &sp) != STRATA_OK) return;
    fprintf(stderr, "strata: speculative: %lld verify windows, %lld drafted, %lld accepted (%.1f%%), "
            "%.2f tokens a window\n", (long long)sp.windows, (long long)sp.drafted, (long long)sp.accepted,
            sp.drafted ? 100.0 * (double)sp.accepted / (double)sp.drafted : 0.0,
            sp.windows ? (double)sp.emitted / (double)sp.windows : 0.0);
    if (d) cli_drafts_print(d);
}

static void cli_json_spec(FILE *f, const strata_session *sess, const cli_drafts *d) {
    strata_spec_stats sp;
    if (strata_session_get_spec_stats(sess, &sp) != STRATA_OK) return;
    fprintf(f, ", \"spec_windows\": %lld, \"spec_drafted\": %lld, \"spec_accepted\": %lld, "
            "\"spec_emitted\": %lld", (long long)sp.windows, (long long)sp.drafted, (long long)sp.accepted,
            (long long)sp.emitted);
    if (d) cli_drafts_json(f, d);
}

/* ---------------------------------------------------------------------------------------------
 * Run's footer
 * ------------------------------------------------------------------------------------------- */

static int cli_write_stats_json(const cli_opts *o, const strata_model *model, const strata_session *sess,
                                const cli_run_stats *rs, uint64_t rss) {
    FILE *f = fopen(o->stats_json, "w");
    if (!f) return cli_fail("cannot write '%s': %s", o->stats_json, strerror(errno));
    strata_model_info mi;
    memset(&mi, 0, sizeof mi);
    strata_model_get_info(model, &mi);
    fputs("{\"model\": ", f);
    cli_json_string(f, o->model);
    fprintf(f, ", \"arch\": ");
    cli_json_string(f, mi.arch ? mi.arch : "");
    fprintf(f, ", \"backend\": ");
    cli_json_string(f, o->backend_desc);
    fprintf(f, ", \"n_threads\": %d, \"n_ctx\": %d, \"n_batch\": %d, \"kv_type\": \"%s\", "
            "\"seed\": %llu, \"load_s\": %.6f, \"n_prompt\": %lld, \"prompt_s\": %.6f, "
            "\"prompt_tok_s\": %.4f, \"ttft_s\": %.6f, \"n_gen\": %lld, \"gen_s\": %.6f, "
            "\"gen_tok_s\": %.4f, \"peak_rss_bytes\": %llu, \"context_full\": %s",
            cli_threads_used(o), (int)strata_session_n_ctx(sess), o->n_batch,
            strata_type_name(o->kv_type), (unsigned long long)o->sp.seed, rs->load_s,
            (long long)rs->n_prompt, rs->prompt_s, cli_rate((double)rs->n_prompt, rs->prompt_s), rs->ttft_s,
            (long long)rs->n_gen, rs->gen_s, cli_rate((double)rs->n_gen, rs->gen_s),
            (unsigned long long)rss, rs->ctx_full ? "true" : "false");
    strata_session_stats ds;
    if (strata_session_get_stats(sess, &ds) == STRATA_OK) /* the context's memory */
        fprintf(f, ", \"kv_bytes_per_token\": %lld, \"kv_bytes\": %lld, \"state_bytes\": %lld, "
                "\"state_alloc_bytes\": %lld", (long long)ds.kv_bytes_per_token, (long long)ds.kv_bytes,
                (long long)ds.state_bytes, (long long)ds.state_alloc_bytes);
    if (strata_session_get_stats(sess, &ds) == STRATA_OK && ds.degrade_zero) /* DEGRADE_ZERO's tally */
        fprintf(f, ", \"degrade_tau\": %.4f, \"degrade_eval\": %s, \"degrade_slots\": %lld, \"degrade_zeroed\": %lld",
                (double)ds.degrade_tau, ds.degrade_eval ? "true" : "false", (long long)ds.degrade_slots,
                (long long)ds.degrade_zeroed);
    if (strata_session_get_stats(sess, &ds) == STRATA_OK && ds.route_tail_skip > 0.0f)
        fprintf(f, ", \"route_tail_skip\": %.4f, \"route_tail_skipped\": %lld", (double)ds.route_tail_skip,
                (long long)ds.route_tail_skipped);
    if (strata_session_get_stats(sess, &ds) == STRATA_OK && ds.q8_sm60_mats > 0)
        fprintf(f, ", \"q8_sm60_mats\": %d", (int)ds.q8_sm60_mats);
    if (strata_session_get_stats(sess, &ds) == STRATA_OK && ds.defer_cpu) /* the deferral's tally */
        fprintf(f, ", \"defer_cpu\": \"%s\", \"defer_cpu_below\": %.4f, \"defer_calls\": %lld",
                ds.defer_cpu == 2 ? "check" : "1", (double)ds.defer_cpu_below, (long long)ds.defer_calls);
    if (o->spec != CLI_SPEC_NONE) cli_json_spec(f, sess, rs->drafts);
    if (rs->vp) {
        fputs(", \"verify_profile\": ", f);
        cli_vp_json(rs->vp, f);
    }
    fputs("}\n", f);
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad) return cli_fail("cannot write '%s': %s", o->stats_json, strerror(errno));
    return 0;
}

int cli_print_run_stats(const cli_opts *o, const strata_model *model, const strata_session *sess,
                        const cli_run_stats *rs) {
    uint64_t rss = cli_peak_rss();
    if (!o->quiet) {
        char hb[32];
        fprintf(stderr, "strata: load %.3f s | prompt %lld tokens, %.3f s, %.2f tok/s | "
                "first token %.3f s\n", rs->load_s, (long long)rs->n_prompt, rs->prompt_s,
                cli_rate((double)rs->n_prompt, rs->prompt_s), rs->ttft_s);
        fprintf(stderr, "strata: generated %lld tokens, %.3f s, %.2f tok/s | peak RSS %s | %s\n",
                (long long)rs->n_gen, rs->gen_s, cli_rate((double)rs->n_gen, rs->gen_s),
                cli_human_bytes((double)rss, hb, sizeof hb), o->backend_desc);
        cli_print_kv_stats(sess, o->kv_type);
        cli_print_degrade_stats(sess);
        cli_print_defer_stats(sess);
        cli_print_tail_skip_stats(sess);
        cli_print_q8_sm60_stats(sess);
        cli_print_spec_stats(o, sess, rs->drafts);
        if (rs->vp) cli_vp_print(rs->vp, stderr);
        cli_print_profile(sess, "(prompt and generation)");
        /* the [PROF] line: every GPU run (where the experts ran, what moved over PCIe); a CPU
         * run's with --profile */
        if (cli_session_on_gpu(o) || o->profile)
            cli_print_prof_line(sess, cli_session_on_gpu(o), cli_rate((double)rs->n_prompt, rs->prompt_s),
                                cli_rate((double)rs->n_gen, rs->gen_s));
    }
    return o->stats_json ? cli_write_stats_json(o, model, sess, rs, rss) : 0;
}
