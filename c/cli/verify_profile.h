/* verify_profile.h - --verify-profile / STRATA_VERIFY_PROFILE=1: where a verify window's time goes,
 * by window length: drafting (host timer), the forward pass's phases (the session's profile
 * timers: attention, dense, router, experts, the wait for CPU experts, output) and acceptance with
 * the rest of the call, and the tokens each window gave; a table at exit (verify_profile.c). */
#ifndef STRATA_CLI_VERIFY_PROFILE_H
#define STRATA_CLI_VERIFY_PROFILE_H

#include "options.h"

#include <stdio.h>

enum { CLI_VP_DRAFT, CLI_VP_ATTN, CLI_VP_DENSE, CLI_VP_ROUTER, CLI_VP_EXPERTS, CLI_VP_WAIT, CLI_VP_OUTPUT,
       CLI_VP_ACCEPT, CLI_VP_COUNT };

typedef struct {
    int64_t n;                  /* windows (or plain steps) of this length */
    int64_t tokens;             /* tokens they gave */
    double s[CLI_VP_COUNT];     /* seconds by part, summed */
} cli_vp_row;

typedef struct {
    cli_vp_row rows[STRATA_DRAFT_MAX + 1]; /* [k]: windows of k drafts; [0] plain steps */
    strata_session_stats before;           /* the session's stats when the pass began */
    double t0;                             /* and the time */
} cli_verify_profile;

/* Before a window's (or plain step's) pass on s. */
void cli_vp_begin(cli_verify_profile *vp, const strata_session *s);
/* After it: k drafts verified (0: a plain step), tokens it gave, draft_s spent drafting them. */
void cli_vp_end(cli_verify_profile *vp, const strata_session *s, int32_t k, int32_t tokens, double draft_s);
/* The table on f, one row per length seen and a total. */
void cli_vp_print(const cli_verify_profile *vp, FILE *f);
/* The rows as a JSON array value ([{"drafts": k, "windows": n, "tokens": t, "ms": {...}}, ...]). */
void cli_vp_json(const cli_verify_profile *vp, FILE *f);

#endif /* STRATA_CLI_VERIFY_PROFILE_H */
