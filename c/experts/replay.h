/* replay.h - a recorded routing in place of the router's (strata_session_set_route_replay;
 * benchmarks only): the decode steps of a routing trace, written by `bench/routing_stats.py
 * TRACE --replay-out FILE`, replayed so that a model's expert placement can be timed on another
 * model's routing (a trained model's, on a synthetic file of the same expert count and top-k).
 * Layer il of a call at positions pos0.. takes the trace's layer il mod its layers at step
 * (pos0 + t) mod its steps, each valid expert weighted 1/k: the same routing for the same
 * position however the calls are batched or rolled back. The file is text:
 *   strata-route-replay 1 N_LAYER N_EXPERT K N_STEPS
 *   then N_STEPS x N_LAYER x K integers (an expert id, or -1: no expert), whitespace-separated.
 * Read whole and parsed with bounds checks; a malformed file is refused with the reason. */
#ifndef STRATA_REPLAY_H
#define STRATA_REPLAY_H

#include "strata.h"

#include <stdint.h>

typedef struct st_replay {
    int32_t n_layer, n_expert, k;  /* the trace's */
    int64_t n_steps;
    int32_t *ids;                  /* [n_steps][n_layer][k], -1: no expert */
} st_replay;

/* The file at path, checked against the model's expert count and top-k (the trace's k must be
 * model_k; its experts below model_experts). *out NULL on failure. */
strata_status st_replay_load(const char *path, int32_t model_experts, int32_t model_k, st_replay **out);
void st_replay_free(st_replay *r);
/* Rows t = 0..T-1 of a call at positions pos0..: ids[t k + j] and wts[t k + j] for layer il. */
void st_replay_rows(const st_replay *r, int il, int64_t pos0, int64_t T, int32_t *ids, float *wts);

#endif /* STRATA_REPLAY_H */
