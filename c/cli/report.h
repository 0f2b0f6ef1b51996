/* report.h - the start-up report of the model-running commands: the lines on stderr that say
 * how a session was set up (report.c). Called by session_setup.c as it loads the model and
 * creates the session. */
#ifndef STRATA_CLI_REPORT_H
#define STRATA_CLI_REPORT_H

#include "options.h"

/* --cpu-isa: the kernels' level and the CPU's. Nothing with --quiet. */
void cli_report_cpu_isa(const cli_opts *o);
/* DEGRADE_ZERO on: what it drops (tau; the evaluation mode). Nothing when it is off. */
void cli_report_degrade(const cli_opts *o);
/* The route tail skip's line, when it is on. */
void cli_report_tail_skip(const cli_opts *o);
/* --q8-sm60 ($STRATA_Q8_SM60=1): an approximation, said at start-up. */
void cli_report_q8_sm60(const cli_opts *o);
/* A warning when -c is past the model's training context (unless bench already said so). */
void cli_report_context(const cli_opts *o, const strata_model_info *mi);
/* A GPU session: its expert cache, where the experts kept in RAM are read from, Q8_0 tile copies
 * left out, the cost model's figures, which layers' experts run on the CPU. Nothing with
 * --quiet. */
void cli_report_gpu_session(const cli_opts *o, const strata_model_info *mi, const strata_session *s);
/* A CPU session: why, when the GPU was the default (one line), and the GPU-only flags given,
 * which it ignores (one warning line). */
void cli_report_cpu_session(const cli_opts *o, const char *why);
/* STRATA_VERIFY_DEFER_CPU and _BELOW (--defer-cpu, --defer-cpu-below): one line each for what
 * the session does with them (or why they are ignored). */
void cli_report_defer(const cli_opts *o, const strata_session *s);
/* --cpu-pin: how many worker threads were bound, and whether the main thread was. Nothing with
 * --quiet. */
void cli_report_cpu_pin(const cli_opts *o, int threads_pinned, int main_bound);

#endif /* STRATA_CLI_REPORT_H */
