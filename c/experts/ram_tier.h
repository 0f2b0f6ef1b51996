/* ram_tier.h - the RAM tier of routed experts (ram_tier.c): for sessions with a RAM budget, a
 * number of expert-sized RAM slots (page-locked for CUDA sessions) filled from the GGUF with
 * O_DIRECT when a layer's routing needs an expert that is not resident; the slot book
 * (slot_book.h) decides residency. It knows the model and its experts' views, nothing of sessions.
 *
 *     st_ram_tier_params p = {model, experts, budget, pipe, pinned};
 *     st_ram_tier_create(&p, &tier, &n_batch);           // n_batch lowered to what the slots hold
 *     st_ram_tier_table(tier, il, T, ids, K, &table);    // layer il's experts resident, their views
 *     ... compute with table ...
 *     st_ram_tier_release(tier);
 */
#ifndef STRATA_RAM_TIER_H
#define STRATA_RAM_TIER_H

#include "model.h"
#include "ops.h"

typedef struct st_ram_tier st_ram_tier;

typedef struct {
    const strata_model *model;
    const st_expert *experts;  /* [n_layer][n_expert] the routed experts' views into the mapping */
    int64_t budget;            /* bytes of RAM for the slots: at least one token's experts */
    int pipe;                  /* a reader thread reads predicted experts ahead (st_ram_tier_prefetch) */
    int pinned;                /* page-locked slots (CUDA sessions), where the allocation succeeds */
} st_ram_tier_params;

/* Sizes the slots from the budget and lowers *max_batch so a layer call's distinct experts fit. */
strata_status st_ram_tier_create(const st_ram_tier_params *p, st_ram_tier **out, int32_t *max_batch);
void st_ram_tier_free(st_ram_tier *t); /* NULL: nothing */
/* Bytes of one RAM slot: the largest expert's three matrices, each 64-byte aligned, rounded up
 * for O_DIRECT. */
size_t st_ram_tier_slot_bytes(const strata_model *m);
/* Makes every expert of ids ([T][K], layer il) resident, holds their slots and points *table at
 * views of them ([n_expert]); st_ram_tier_release lets the slots go. */
strata_status st_ram_tier_table(st_ram_tier *t, int il, int64_t T, const int32_t *ids,
                                int32_t K, const st_expert **table);
void st_ram_tier_release(st_ram_tier *t);
/* Pipelined mode: starts reading layer il's predicted experts (ids [T][K]) into free slots. */
void st_ram_tier_prefetch(st_ram_tier *t, int il, int64_t T, const int32_t *ids, int32_t K);
/* missed[i] = 1 when expert ids[i] of layer il is neither resident nor in a completed load (what
 * DEGRADE_ZERO may drop instead of reading it from disk). */
void st_ram_tier_missed(const st_ram_tier *t, int il, int64_t T, const int32_t *ids, int32_t K,
                        uint8_t *missed);
/* Counters for the statistics (0 for a NULL tier); reset zeroes them. */
void st_ram_tier_reset_counters(st_ram_tier *t);
void st_ram_tier_counters(const st_ram_tier *t, int64_t *hits, int64_t *misses, int64_t *disk_bytes,
                          int64_t *pf_issued, int64_t *pf_timely, int64_t *pf_late);
int32_t st_ram_tier_slots(const st_ram_tier *t);
/* Smallest and largest per-layer hit rate (0 when it has none). */
void st_ram_tier_layer_hits(const st_ram_tier *t, double *min, double *max);

#endif /* STRATA_RAM_TIER_H */
