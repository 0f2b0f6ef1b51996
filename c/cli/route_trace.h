/* route_trace.h - --route-trace FILE: each layer's routing of every session, as JSON lines
 * (route_trace.c). */
#ifndef STRATA_CLI_ROUTE_TRACE_H
#define STRATA_CLI_ROUTE_TRACE_H

#include "options.h"

/* With o->route_trace set: opens the file on first use (its header from the model) and attaches
 * it to session s. Prints failures and returns CLI_EXIT_FAIL, or 0 (also without a trace). */
int cli_route_trace_attach(const cli_opts *o, const strata_model *model, strata_session *s);

#endif /* STRATA_CLI_ROUTE_TRACE_H */
