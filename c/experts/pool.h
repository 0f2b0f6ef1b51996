/* pool.h - the CPU expert pool: CPU threads that compute routed experts for rows another
 * processor (the GPU) publishes in a shared "doorbell", and raise a per-layer flag when the
 * output rows are written. The doorbell is plain memory on the CPU side: host-mapped pinned memory
 * in a GPU session (the GPU writes requests and polls flags through the mapping), malloc'd memory
 * in the tests (a thread plays the GPU).
 *
 * Protocol, per step (a decode step, a verify window or a prompt batch), for every layer in order
 * 0 .. n_layer-1, including layers without CPU work (T = 0):
 *   producer: writes T, the T input rows x[t], the routing ids[t][s] (an expert id for the slots
 *             the CPU computes, -1 for the others) and weights wts[t][s]; then stores
 *             req_seq = step number (release: everything before is visible when it is seen);
 *   pool:     waits for req_seq to reach its expected step number (acquire; a later one: a
 *             layer published empty ahead, st_pool_skip), computes
 *             out[t] = sum over slots s (in order) of wts[t][s] * FFN_ids[t][s](x[t]) with the
 *             same expert kernels as the CPU session (st_moe_ffn), writes out, then stores
 *             part_seq and done_seq = step number (release);
 *   producer: waits for done_seq (acquire) before reading out and adding it to its own part.
 * A split request (below > 0, out_light set; the deferral of verify windows, issue 32) has the
 * pool compute the slots of weight >= below first, into out, store part_seq, then the others
 * into out_light and store done_seq: a producer may take out after part_seq and out_light after
 * done_seq. Every call raises part_seq (before done_seq), split or not, T = 0 too, so a producer
 * waiting for it never waits on a layer that did not split.
 * A layer with rows set (the GPU expert cache's misses in the CPU's arithmetic) is served per
 * slot instead: rows[t][s] = FFN_ids[t][s](x[t]) for each slot with an id in [0, n_expert)
 * (st_moe_ffn_end_rows' rows; other slots' rows are not written, out is scratch), with no
 * weighted sum and no split (below and out_light are not read); the producer sums them with its
 * own slots' rows in slot order, as st_moe_ffn's combine does (st_moe_ffn's bits over all).
 * Step numbers start at 1 and increase by one per step; a layer's request of step s is only
 * published after the producer saw layer l-1's done flag of step s, as the GPU must (layer l's
 * input depends on layer l-1's output).
 *
 * The host announces each step with st_pool_step() before the producer starts it; between steps
 * the pool's threads sleep. The result is deterministic and equal, bit for bit, to st_moe_ffn on
 * the same rows (which does not depend on the thread count). */
#ifndef STRATA_EXPERT_POOL_H
#define STRATA_EXPERT_POOL_H

#include "ops.h"

#include <stdatomic.h>
#include <stdint.h>

/* One layer's request and response. Arrays are sized for max_T rows. */
typedef struct {
    _Atomic uint32_t req_seq;          /* producer -> pool */
    _Atomic uint32_t done_seq;         /* pool -> producer */
    _Atomic uint32_t part_seq;         /* pool -> producer: out holds the heavy rows (a split), or
                                          all of them; raised before done_seq on every call */
    int32_t T;                         /* rows of this request, 0..max_T */
    float below;                       /* > 0 with out_light: split at this routing weight */
    int32_t pad_;
    float *x;                          /* [max_T][n_embd] input rows */
    int32_t *ids;                      /* [max_T][k] expert ids, -1: not computed here */
    float *wts;                        /* [max_T][k] */
    float *out;                        /* [max_T][n_embd] (a split: the slots of weight >= below) */
    float *out_light;                  /* [max_T][n_embd] a split's other slots; NULL: none */
    float *rows;                       /* [max_T][k][n_embd] per-slot rows instead of out (above);
                                          NULL: the weighted sum into out */
} st_doorbell_layer;

typedef struct st_expert_pool st_expert_pool;

/* experts: [n_layer][n_expert] weight tables (host memory, e.g. views of the mapping), all of one
 * layer's experts of one type and shape; db: [n_layer] doorbells whose arrays hold max_T rows.
 * n_threads >= 1 CPU threads compute (one of them also polls). */
strata_status st_pool_create(const st_expert *experts, int32_t n_layer, int32_t n_expert,
                             int64_t n_embd, int64_t n_ff, int32_t k, int32_t max_T,
                             st_doorbell_layer *db, int n_threads, st_expert_pool **out);
/* Stops the threads (after the step in progress, if any) and frees the pool (not the doorbell). */
void st_pool_free(st_expert_pool *p);

/* Announces the next step: the pool wakes and serves every layer of it, then sleeps again. May be
 * called for step s+1 while step s is still being served (the pool serves them in order). Returns
 * the step number the producer must use. */
uint32_t st_pool_step(st_expert_pool *p);

/* Publishes layer l of step `step` as an empty request (T = 0): a layer that routes nothing (a
 * leading dense layer among the CPU layers). No-op for a NULL pool or l outside its layers. */
void st_pool_skip(st_expert_pool *p, int32_t l, uint32_t step);

/* For a producer that failed in the middle of step `step`: publishes every layer of it not yet
 * published as an empty request (T = 0), so the pool finishes the step and serves the next ones.
 * Whatever the producer still publishes for that step may be ignored; its results are not to be
 * used. */
void st_pool_abandon(st_expert_pool *p, uint32_t step);

/* Rows computed and seconds spent computing since create. */
void st_pool_counters(const st_expert_pool *p, int64_t *rows, double *seconds);

#endif /* STRATA_EXPERT_POOL_H */
