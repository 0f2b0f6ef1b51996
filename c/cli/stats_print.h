/* stats_print.h - what the model-running commands print about a finished (or running) session
 * (stats_print.c): run's footer and --stats-json, DEGRADE_ZERO's tally, --profile's phase
 * times, and the [PROF] line. */
#ifndef STRATA_CLI_STATS_PRINT_H
#define STRATA_CLI_STATS_PRINT_H

#include "drafts.h"
#include "options.h"
#include "verify_profile.h"

/* n / s, or 0 when s is not positive. */
double cli_rate(double n, double s);

/* What a run measured, for its footer. */
typedef struct {
    double load_s, prompt_s, gen_s, ttft_s;
    int64_t n_prompt, n_gen;
    int ctx_full;
    const cli_drafts *drafts;         /* --spec's drafters and policies, or NULL */
    const cli_verify_profile *vp;     /* --verify-profile's table, or NULL */
} cli_run_stats;

/* Run's footer: load, prompt and first-token times, then generated tokens, peak RSS and the
 * backend on stderr (not with --quiet), the KV cache's size, DEGRADE_ZERO's tally, --profile's phases and the
 * [PROF] line (every GPU run; a CPU run's with --profile); then --stats-json's file. Returns
 * 0 or CLI_EXIT_FAIL after a failed write. */
int cli_print_run_stats(const cli_opts *o, const strata_model *model, const strata_session *sess,
                        const cli_run_stats *rs);
/* The context's memory (a line on stderr): the KV cache's bytes a token in kv_type (the session's)
 * and as allocated for n_ctx positions, and a recurrent model's state (from the shapes, and as
 * the backend allocated it with the rollback window). */
void cli_print_kv_stats(const strata_session *sess, strata_type kv_type);
/* When DEGRADE_ZERO is on: one stderr line with what it dropped (tau, zeroed slots, share, per-layer
 * min/max share). Nothing when it is off. */
void cli_print_degrade_stats(const strata_session *sess);
/* STRATA_VERIFY_DEFER_CPU's tally (a line on stderr), when the session defers. */
void cli_print_defer_stats(const strata_session *sess);
/* The route tail skip's tally (a line on stderr), when it is on. */
void cli_print_tail_skip_stats(const strata_session *sess);
/* --q8-sm60: how many matrices took the SM60 GEMV (nothing when off). */
void cli_print_q8_sm60_stats(const strata_session *sess);
/* The [PROF] line on stderr: prompt and decode tok/s, where routed experts ran (slot-rows from GPU
 * memory and on the CPU, per-layer GPU share), bytes over PCIe and from disk, zeroed slots; gpu 0
 * (a CPU session) leaves out the GPU-only fields. */
void cli_print_prof_line(const strata_session *sess, int gpu, double prompt_tps, double decode_tps);
/* With --profile: one stderr line per phase set, milliseconds per token and share of the total. */
void cli_print_profile(const strata_session *sess, const char *what);

#endif /* STRATA_CLI_STATS_PRINT_H */
