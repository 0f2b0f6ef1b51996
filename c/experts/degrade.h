/* degrade.h - DEGRADE_ZERO, the opt-in approximation of expert offloading: a routed expert that
 * missed its deadline (at its layer's FFN launch it is neither in a GPU slot nor in a completed
 * load, and is not placed on the CPU) is dropped instead of waited for, when its gate weight for
 * that position is below tau. The rule, exactly (docs/DEGRADE_ZERO.md):
 *   - decode only: decode steps and verify windows of S <= 4 rows; never while reading a prompt;
 *   - miss-only: hits are never dropped;
 *   - per position: slot (t, s) is dropped when it missed and wts[t][s] < tau, on that position's
 *     own weight (an expert shared by several positions is kept for those at or above tau);
 *   - rescue: no position is left with zero routed experts (its heaviest slot is kept);
 *   - no renormalization: surviving weights are left byte-identical, the dropped mass is lost.
 * Off (enabled 0) is the identity. STRATA_DEGRADE_EVAL makes every routed slot count as missed
 * (no cache, no timing) so quality tables are reproducible: the worst case per tau.
 * Pure functions over caller-owned arrays; thread-safe. */
#ifndef STRATA_DEGRADE_H
#define STRATA_DEGRADE_H

#include <stdint.h>

#define ST_DEGRADE_MAX_ROWS 4      /* the largest window (S) in which slots may be dropped */
#define ST_DEGRADE_TAU_DEFAULT 0.03f

typedef struct {
    int enabled;                   /* DEGRADE_ZERO / --degrade-zero */
    float tau;                     /* DEGRADE_TAU / --degrade-tau (default 0.03) */
    int eval;                      /* STRATA_DEGRADE_EVAL / --degrade-eval: every slot missed */
} st_degrade_params;

/* Counters of one session, per layer and in total (eligible = routed slots of decode steps with
 * the approximation on, i.e. where a drop was allowed). */
typedef struct {
    int32_t n_layer;
    int64_t *eligible;             /* [n_layer] */
    int64_t *zeroed;               /* [n_layer] */
    int64_t eligible_total, zeroed_total;
} st_degrade_stats;

/* The self-draft's rule (strata_drafter_self_create): every slot whose expert missed is dropped
 * (id -1), with no tau, no rescue and no counting: a draft step uses only the experts already in
 * the fast tier. n = rows x k slots; returns the slots dropped. */
int st_degrade_drop_missed(int64_t n, int32_t *ids, const uint8_t *missed);

/* Marks the dropped slots of one layer's routing: S rows x k slots, ids/wts [S][k], missed [S][k]
 * (1: the slot's expert missed; NULL: none missed, unless p->eval, which counts every slot as
 * missed). A dropped slot's id becomes -1 (the expert kernels skip ids outside [0, n_expert));
 * wts is never written. prompt: 1 while reading a prompt (never drops). Returns the number of
 * dropped slots and, when stats is not NULL, adds to layer il's counters. */
int st_degrade_apply(const st_degrade_params *p, int prompt, int64_t S, int32_t k, int32_t *ids,
                     const float *wts, const uint8_t *missed, st_degrade_stats *stats, int il);

/* The route tail skip (route_tail_skip p, an opt-in approximation): in each of T rows of k slots
 * (ids/wts [T][k]) the slots are taken lightest first (ties: the later slot first) and dropped
 * (id -1) while the dropped weights sum to at most p; the heaviest slot is never dropped, wts is
 * never written. p <= 0 is the identity. Returns the slots dropped. */
int64_t st_route_tail_skip(int64_t T, int32_t k, int32_t *ids, const float *wts, float p);

/* Allocates zeroed counters for n_layer layers (0 on success, -1 out of memory); free releases. */
int st_degrade_stats_init(st_degrade_stats *s, int32_t n_layer);
void st_degrade_stats_free(st_degrade_stats *s);

#endif /* STRATA_DEGRADE_H */
