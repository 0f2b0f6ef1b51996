/* route_trace.h - --route-trace FILE: each layer's routing of every session, as JSON lines, and
 * --route-replay FILE: a recorded routing in place of the router's (route_trace.c). */
#ifndef STRATA_CLI_ROUTE_TRACE_H
#define STRATA_CLI_ROUTE_TRACE_H

#include "options.h"

/* With o->route_trace set: opens the file on first use (its header from the model) and attaches
 * it to session s. Prints failures and returns CLI_EXIT_FAIL, or 0 (also without a trace). */
int cli_route_trace_attach(const cli_opts *o, const strata_model *model, strata_session *s);
/* With o->route_replay set: the recorded routing attached to session s, said once a process on
 * stderr. Prints failures and returns CLI_EXIT_FAIL, or 0 (also without one). */
int cli_route_replay_attach(const cli_opts *o, strata_session *s);

#endif /* STRATA_CLI_ROUTE_TRACE_H */
