/* slot_book.h - the slot book of an expert tier (no CUDA here): the GPU expert cache and the RAM
 * tier each keep one. n_slots slots, each sized for the model's largest expert and holding at
 * most one expert (layer, id) at a time; the slot states; the residency policy (evict the
 * least frequently used expert by decayed use counts, ties to the least recently used: chosen on
 * routing traces, docs/EXPERTS.md); hit, miss and prefetch counters. The placement code drives it: it claims a slot before copying an expert's bytes into
 * it, publishes it when the copy completed, and reads a slot only while it is READY.
 *
 * Slot states and transitions (every other transition is refused with -1):
 *
 *     EMPTY --claim--> LOADING --publish--> READY --claim (evicted for another expert)--> LOADING
 *                         \--abort--> EMPTY
 *
 *   - a LOADING slot is never returned by lookup: a consumer cannot read a slot being filled;
 *   - a READY slot held by a consumer (acquire .. release) is never evicted; EMPTY slots go
 *     first, then the READY slot whose expert has the fewest uses (each look-up of an expert,
 *     resident or not, counts one; every `decay` look-ups all counts halve, so the policy follows
 *     a drifting workload), the least recently used among equals.
 *
 * Not thread-safe: one owner (the placement thread) calls everything. */
#ifndef STRATA_SLOT_BOOK_H
#define STRATA_SLOT_BOOK_H

#include <stdint.h>

typedef enum { ST_SLOT_EMPTY = 0, ST_SLOT_LOADING = 1, ST_SLOT_READY = 2 } st_slot_state;

typedef struct {
    st_slot_state state;
    int32_t layer, expert;     /* owner; -1 when EMPTY */
    int32_t users;             /* acquire count */
    int prefetched;            /* claimed by a prefetch and not yet looked up */
    uint64_t last_use;         /* lookup clock of the last hit (LRU) */
} st_slot;

typedef struct {
    int64_t lookups, hits, misses;      /* a lookup of a LOADING slot counts as a miss (late) */
    int64_t prefetch_claims;            /* slots claimed by prefetches */
    int64_t prefetch_hits_timely;       /* first lookup after a prefetch found it READY */
    int64_t prefetch_hits_late;         /* ... found it still LOADING */
    int64_t evictions;                  /* READY slots given to another expert */
} st_slot_counters;

typedef struct {
    int32_t n_layer, n_expert, n_slots;
    int32_t decay;                      /* lookups between halvings of the use counts */
    st_slot *slots;                     /* [n_slots] */
    int32_t *where;                     /* [n_layer * n_expert] slot of each expert, -1 if none */
    uint32_t *uses;                     /* [n_layer * n_expert] decayed use counts */
    uint64_t clock;
    st_slot_counters c;
} st_slot_book;

/* decay >= 1: look-ups between halvings of the use counts. 0 on success, -1 on a bad argument or
 * no memory. */
int st_book_init(st_slot_book *ec, int32_t n_layer, int32_t n_expert, int32_t n_slots, int32_t decay);
/* The decay the tiers use for n slots: the counts of many look-ups of the whole cache, long enough
 * for frequency to count, short enough to follow a change of text. */
static inline int32_t st_book_decay_for(int32_t n_slots) {
    return n_slots > (1 << 26) ? (1 << 30) : 16 * (n_slots > 0 ? n_slots : 1);
}
void st_book_free(st_slot_book *ec);

/* The slot holding (layer, expert) READY, or -1 (absent, or still LOADING). Counts a lookup, a hit
 * or a miss, and the expert's use (for the policy). */
int32_t st_book_lookup(st_slot_book *ec, int32_t layer, int32_t expert);
/* The state of (layer, expert): EMPTY when it has no slot. No counting. */
st_slot_state st_book_state_of(const st_slot_book *ec, int32_t layer, int32_t expert);

/* Admission: 1 if a claim for (layer, expert), which has no slot, would take an EMPTY slot or
 * evict an expert with no more uses than it has (TinyLFU's rule); 0 otherwise. No counting. */
int st_book_admits(const st_slot_book *ec, int32_t layer, int32_t expert);
/* Claims a slot for (layer, expert), which must have none: an EMPTY slot, else the READY slot not
 * held whose expert has the fewest uses, the least recently used among equals (its old expert is
 * evicted). The slot becomes LOADING. Returns
 * the slot, or -1 when the expert already has a slot or no slot can be taken. */
int32_t st_book_claim(st_slot_book *ec, int32_t layer, int32_t expert, int prefetch);
/* LOADING -> READY once the copy completed (0), or -1 if the slot is not LOADING. */
int st_book_publish(st_slot_book *ec, int32_t slot);
/* LOADING -> EMPTY after a failed copy (0), or -1 if the slot is not LOADING. */
int st_book_abort(st_slot_book *ec, int32_t slot);

/* A consumer holds a READY slot while it computes with it (0), or -1 if not READY. */
int st_book_acquire(st_slot_book *ec, int32_t slot);
int st_book_release(st_slot_book *ec, int32_t slot);

#endif /* STRATA_SLOT_BOOK_H */
