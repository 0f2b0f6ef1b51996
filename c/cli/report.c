/* report.c - the start-up report (report.h): the lines on stderr that tell how a model and its
 * session were set up: the CPU kernels' level, DEGRADE_ZERO, a context past the training one,
 * a GPU session's expert placement and cost-model figures, why a session runs on the CPU and
 * the GPU-only flags it ignores, the threads --cpu-pin bound. Printing only: the decisions are
 * session_setup.c's. */
#include "report.h"

void cli_report_cpu_isa(const cli_opts *o) {
    if (!o->quiet)
        fprintf(stderr, "strata: --cpu-isa: the CPU kernels of the %s level (this CPU has %s)\n",
                strata_cpu_isa_name(strata_cpu_isa_active()), strata_cpu_isa_name(strata_cpu_isa_supported()));
}

void cli_report_degrade(const cli_opts *o) {
    if (o->degrade_zero)
        fprintf(stderr, "strata: DEGRADE_ZERO on (an approximation): in decode steps a routed expert "
                "that misses its deadline with gate weight < tau %.3g is dropped%s\n",
                (double)o->degrade_tau, o->degrade_eval ? "; evaluation mode: every routed slot "
                "counts as missed (CPU session)" : "");
}

void cli_report_tail_skip(const cli_opts *o) {
    if (o->route_tail_skip > 0.0f)
        fprintf(stderr, "strata: STRATA_ROUTE_TAIL_SKIP=%g (an approximation): each token's lightest routed "
                "experts are skipped while their routing weights sum to at most %g (never its heaviest)\n",
                (double)o->route_tail_skip, (double)o->route_tail_skip);
}

void cli_report_q8_sm60(const cli_opts *o) {
    if (o->q8_sm60) /* a GPU flag: a CPU session names it among those it ignores */
        fprintf(stderr, "strata: STRATA_Q8_SM60=1 (an approximation): the decode GEMV of the Q8_0 attention, "
                "dense FFN and output matrices takes the SM60 kernel over packed copies; not the exact "
                "kernels' bits (docs/OLDER_GPUS.md)\n");
}

void cli_report_context(const cli_opts *o, const strata_model_info *mi) {
    if (!o->ctx_warned && o->n_ctx > 0 && mi->n_ctx_train > 0 && o->n_ctx > mi->n_ctx_train)
        fprintf(stderr, "strata: warning: -c %d is past the model's training context of %d tokens; "
                "positions past it may give poor output\n", o->n_ctx, (int)mi->n_ctx_train);
}

/* The expert cache's size and where the experts kept in RAM are read from. */
static void cli_report_expert_memory(const cli_opts *o, const strata_model_info *mi,
                                     const strata_session_stats *cs) {
    if (o->expert_cache != 0)
        fprintf(stderr, "strata: GPU expert cache of %d slots (of %lld experts)\n",
                (int)cs->expert_cache_slots, (long long)mi->n_layer * mi->n_expert);
    if ((o->expert_cache != 0 || o->n_cpu_moe != 0 || cs->gpu_mem_cpu_layers > 0) && mi->n_expert > 0) {
        char hb[32];
        cli_human_bytes((double)cs->pinned_bytes, hb, sizeof hb);
        if (o->ram_budget > 0) {
            cli_human_bytes((double)o->ram_budget, hb, sizeof hb);
            fprintf(stderr, "strata: %s of page-locked RAM slots for routed experts; the others are "
                    "read from the file with O_DIRECT when routed\n", hb);
        } else if (cs->pinned_bytes > 0)
            fprintf(stderr, "strata: the experts kept in RAM are read from a pinned copy (%s)\n", hb);
        else
            fprintf(stderr, "strata: the experts kept in RAM are read from the file's mapping%s\n",
                    o->pin_experts < 0 ? " (not enough RAM available for a pinned copy)" : "");
    }
    if (o->iq_stage_tables >= 0 || cs->iq_stage_tables)
        fprintf(stderr, "strata: STRATA_IQ_STAGE_TABLES=%d%s: the grouped expert kernels read the IQ3 "
                "codebooks %s (same results)\n", (int)cs->iq_stage_tables, o->iq_stage_tables < 0 ?
                " (auto: this device's compute capability)" : "", cs->iq_stage_tables ?
                "from shared-memory copies" : "through the read-only cache");
    /* (an expert cache of auto size leaves no room for them by design: said in EXPERTS.md) */
    if (o->q8_tiles && o->expert_cache == 0 && cs->q8_tiles_skipped > 0)
        fprintf(stderr, "strata: --q8-tiles: %d Q8_0 matrices without a tile copy (no GPU memory to "
                "spare); their prompt batches read the blocks (same results, slower)\n",
                (int)cs->q8_tiles_skipped);
}

/* The cost model's figures for --cpu-misses (and the CPU layers' split). */
static void cli_report_cpu_misses(const cli_opts *o, const strata_session_stats *cs) {
    if ((o->expert_cache != 0 && o->cpu_misses == 1) || cs->cpu_split != 0)
        fprintf(stderr, "strata: --cpu-misses: PCIe %.1f GB/s (%.0f us a copy), CPU %.0f us + %.0f us "
                "an expert (+ %.0f us a further row); %s%s%s\n", cs->pcie_bytes_per_s / 1e9,
                cs->pcie_latency_s * 1e6, cs->cpu_share_step_s * 1e6, cs->cpu_share_expert_s * 1e6,
                cs->cpu_expert_per_row_s * 1e6,
                o->pcie_frac < 0 ? "each miss goes where it is predicted to finish first"
                                 : "the heaviest share of --pcie-frac misses is loaded, the rest computed",
                cs->cpu_split == 1 ? "; the CPU layers' GPU share in the CPU's arithmetic (same bits)"
                : cs->cpu_split == 2 ? "; the CPU layers' GPU share in its own arithmetic (bits follow the share)"
                                     : "",
                cs->cache_split == 1 ? "; decode steps' cache hits in the CPU's arithmetic (same bits)"
                : cs->cache_split == 2 ? "; the cache hits in the GPU's arithmetic (bits follow residency)"
                                       : "");
}

/* Which layers' routed experts run on the CPU, and --stage-experts auto's figures. cs is NULL
 * when the session's stats could not be read. */
static void cli_report_cpu_layers(const cli_opts *o, const strata_model_info *mi,
                                  const strata_session_stats *cs) {
    const int fit = cs && cs->gpu_mem_cpu_layers >= 0; /* --gpu-mem alone chose the split */
    const int n_cpu = fit ? cs->gpu_mem_cpu_layers : o->n_cpu_moe;
    if (fit) {
        char hb[32];
        fprintf(stderr, "strata: --gpu-mem %s: the static split that fits (on spread routing it beats an "
                "expert cache of the same memory; --expert-cache auto for a cache instead)\n",
                cli_human_bytes((double)o->gpu_mem, hb, sizeof hb));
    }
    if (n_cpu == 0 || mi->n_expert == 0) {
        if (fit) fprintf(stderr, "strata: every layer's routed experts fit on the GPU\n");
        return;
    }
    if (n_cpu < 0 || n_cpu >= mi->n_layer)
        fprintf(stderr, "strata: the routed experts of every layer run on the CPU\n");
    else
        fprintf(stderr, "strata: the routed experts of layers 0..%d run on the CPU, the "
                "rest on the GPU\n", n_cpu - 1);
    if (cs && cs->plan_decode_tok_s > 0)
        fprintf(stderr, "strata: expected decode: at most %.1f tok/s, the CPU layers' share of a token by "
                "the figures below (the GPU's own time not counted; [PROF] gives both)\n", cs->plan_decode_tok_s);
    if (o->stage_experts < 0 && o->expert_cache == 0 && o->ram_budget == 0 && cs)
        fprintf(stderr, "strata: --stage-experts auto: PCIe %.1f GB/s (%.0f us a copy), CPU "
                "%.0f us a step + %.0f us an expert + %.0f us a further row: each batch of a CPU "
                "layer goes where it is predicted to finish first\n", cs->pcie_bytes_per_s / 1e9,
                cs->pcie_latency_s * 1e6, cs->cpu_share_step_s * 1e6, cs->cpu_share_expert_s * 1e6,
                cs->cpu_expert_per_row_s * 1e6);
}

void cli_report_gpu_session(const cli_opts *o, const strata_model_info *mi, const strata_session *s) {
    strata_session_stats cs; /* the start-up lines below read the new session's stats */
    const int have = strata_session_get_stats(s, &cs) == STRATA_OK;
    if (o->quiet) return;
    if (have) {
        cli_report_expert_memory(o, mi, &cs);
        cli_report_cpu_misses(o, &cs);
    }
    cli_report_cpu_layers(o, mi, have ? &cs : NULL);
}

void cli_report_cpu_session(const cli_opts *o, const char *why) {
    if (why && why[0]) fprintf(stderr, "strata: running on the CPU: %s\n", why);
    if (o->n_gpu_only == 0) return;
    fputs("strata: warning: ignored on the CPU (GPU sessions only):", stderr);
    for (int i = 0; i < o->n_gpu_only; i++) fprintf(stderr, "%s %s", i ? "," : "", o->gpu_only[i]);
    fputc('\n', stderr);
}

void cli_report_defer(const cli_opts *o, const strata_session *s) {
    if (o->quiet) return;
    const char *bt = o->defer_below_text ? o->defer_below_text : "";
    if (!o->defer_cpu) {
        if (o->defer_below_given)
            fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU_BELOW=%s ignored: STRATA_VERIFY_DEFER_CPU is unset or 0\n", bt);
        return;
    }
    if (o->defer_below_bad)
        fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU_BELOW=%s is not a number above 0: 0.1 taken\n", bt);
    strata_session_stats st;
    if (strata_session_get_stats(s, &st) != STRATA_OK || st.defer_cpu == 0) {
        fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU=%s: off: only the CPU expert pool's layers defer "
                "(--doorbell with --cpu-moe or --n-cpu-moe on a GPU session)\n", o->defer_text);
        return;
    }
    if (st.defer_cpu == 2)
        fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU=check: every CPU expert row joins on time, summed "
                "in the deferred split's two parts (what the reordering alone changes)\n");
    else
        fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU=1 (an approximation): a CPU layer's late expert rows "
                "join the residual before the next layer's FFN, its attention running while the CPU finishes; "
                "the last layer never defers\n");
    const char *dflt = o->defer_below_given && !o->defer_below_bad ? "" : " (the default)";
    if (st.defer_cpu_below > 0.0f)
        fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU_BELOW=%g%s: a deferred layer waits for its CPU rows "
                "of routing weight >= %g; the lighter ones join late\n", (double)o->defer_below, dflt,
                (double)st.defer_cpu_below);
    else
        fprintf(stderr, "strata: STRATA_VERIFY_DEFER_CPU_BELOW=%g%s: every CPU row joins late (no split, no "
                "partial flag)\n", (double)o->defer_below, dflt);
}

void cli_report_cpu_pin(const cli_opts *o, int threads_pinned, int main_bound) {
    if (!o->quiet)
        fprintf(stderr, "strata: --cpu-pin: %d worker threads bound one per CPU%s\n", threads_pinned,
                main_bound ? ", the main thread to the first" : " (too few CPUs in the affinity set: none bound)");
}
