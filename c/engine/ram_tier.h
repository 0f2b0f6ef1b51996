/* ram_tier.h - the RAM tier of routed experts for sessions with a RAM budget (ram_tier.c). */
#ifndef STRATA_RAM_TIER_H
#define STRATA_RAM_TIER_H

#include "session.h"

/* The RAM tier (ram_tier.c): create sizes the slots from budget bytes (and lowers n_batch so a
 * layer call's distinct experts fit); table makes every expert of ids resident, holds their slots
 * and points *table at views of them; release lets the slots go; counters for the stats. */
strata_status st_ram_tier_create(strata_session *s, int64_t budget, int pipe);
/* Bytes of one RAM slot: the largest expert's three matrices, each 64-byte aligned, rounded up
 * for O_DIRECT. */
size_t st_ram_tier_slot_bytes(const strata_model *m);
void st_ram_tier_free(strata_session *s);
strata_status st_ram_tier_table(strata_session *s, int il, int64_t T, const int32_t *ids,
                                int32_t K, const st_expert **table);
void st_ram_tier_release(strata_session *s);
void st_ram_tier_reset_counters(strata_session *s);
void st_ram_tier_counters(const strata_session *s, int64_t *hits, int64_t *misses, int64_t *disk_bytes,
                          int64_t *pf_issued, int64_t *pf_timely, int64_t *pf_late);
/* Pipelined mode: starts reading layer il's predicted experts (ids [T][K]) into free slots. */
void st_ram_tier_prefetch(strata_session *s, int il, int64_t T, const int32_t *ids, int32_t K);
int32_t st_ram_tier_slots(const strata_session *s);
/* Smallest and largest per-layer hit rate of the RAM tier (0 when it has none). */
void st_ram_tier_layer_hits(const strata_session *s, double *min, double *max);
/* missed[i] = 1 when expert ids[i] of layer il is neither resident nor in a completed load (what
 * DEGRADE_ZERO may drop instead of reading it from disk). */
void st_ram_tier_missed(const strata_session *s, int il, int64_t T, const int32_t *ids, int32_t K,
                        uint8_t *missed);

#endif /* STRATA_RAM_TIER_H */
