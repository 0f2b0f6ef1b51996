/* slot_book.c - the slot book of the expert tiers (slot_book.h): slot states, the residency
 * policy (the least frequently used expert goes, by use counts that halve every `decay`
 * look-ups; ties to the least recently used) and counters, shared by the GPU and RAM tiers. */
#include "slot_book.h"

#include <stdlib.h>
#include <string.h>

int st_book_init(st_slot_book *ec, int32_t n_layer, int32_t n_expert, int32_t n_slots, int32_t decay) {
    memset(ec, 0, sizeof *ec);
    if (n_layer < 1 || n_expert < 1 || n_slots < 1 || decay < 1 || (int64_t)n_layer * n_expert > (1 << 30))
        return -1;
    const size_t n = (size_t)n_layer * (size_t)n_expert;
    ec->n_layer = n_layer;
    ec->n_expert = n_expert;
    ec->n_slots = n_slots;
    ec->decay = decay;
    ec->slots = calloc((size_t)n_slots, sizeof *ec->slots);
    ec->where = malloc(n * sizeof *ec->where);
    ec->uses = calloc(n, sizeof *ec->uses);
    if (!ec->slots || !ec->where || !ec->uses) {
        st_book_free(ec);
        return -1;
    }
    for (size_t i = 0; i < n; i++) ec->where[i] = -1;
    for (int32_t s = 0; s < n_slots; s++) ec->slots[s].layer = ec->slots[s].expert = -1;
    return 0;
}

void st_book_free(st_slot_book *ec) {
    if (!ec) return;
    free(ec->slots);
    free(ec->where);
    free(ec->uses);
    memset(ec, 0, sizeof *ec);
}

static int32_t st_cache_index(const st_slot_book *ec, int32_t layer, int32_t expert) {
    if (layer < 0 || layer >= ec->n_layer || expert < 0 || expert >= ec->n_expert) return -1;
    return layer * ec->n_expert + expert;
}

/* Every `decay` look-ups the use counts halve, so the policy follows a drifting workload. */
static void st_book_decay(st_slot_book *ec) {
    const size_t n = (size_t)ec->n_layer * (size_t)ec->n_expert;
    for (size_t i = 0; i < n; i++) ec->uses[i] >>= 1;
}

int32_t st_book_lookup(st_slot_book *ec, int32_t layer, int32_t expert) {
    const int32_t i = st_cache_index(ec, layer, expert);
    if (i < 0) return -1;
    ec->clock++;
    ec->c.lookups++;
    if (ec->uses[i] < UINT32_MAX) ec->uses[i]++;
    if (ec->c.lookups % ec->decay == 0) st_book_decay(ec);
    const int32_t s = ec->where[i];
    if (s < 0) {
        ec->c.misses++;
        return -1;
    }
    st_slot *sl = &ec->slots[s];
    if (sl->state != ST_SLOT_READY) { /* still being filled: a miss (a late prefetch) */
        ec->c.misses++;
        if (sl->prefetched) { ec->c.prefetch_hits_late++; sl->prefetched = 0; }
        return -1;
    }
    ec->c.hits++;
    if (sl->prefetched) { ec->c.prefetch_hits_timely++; sl->prefetched = 0; }
    sl->last_use = ec->clock;
    return s;
}

st_slot_state st_book_state_of(const st_slot_book *ec, int32_t layer, int32_t expert) {
    const int32_t i = st_cache_index(ec, layer, expert);
    if (i < 0 || ec->where[i] < 0) return ST_SLOT_EMPTY;
    return ec->slots[ec->where[i]].state;
}

/* The slot a claim would take: an EMPTY one, else the READY slot not held whose expert has the
 * fewest uses, the least recently used of those; -1 when none can be taken. */
static int32_t st_book_victim(const st_slot_book *ec) {
    int32_t pick = -1;
    uint32_t pick_uses = 0;
    for (int32_t s = 0; s < ec->n_slots; s++) {
        const st_slot *sl = &ec->slots[s];
        if (sl->state == ST_SLOT_EMPTY) return s;
        if (sl->state != ST_SLOT_READY || sl->users > 0) continue;
        const uint32_t u = ec->uses[sl->layer * ec->n_expert + sl->expert];
        if (pick < 0 || u < pick_uses || (u == pick_uses && sl->last_use < ec->slots[pick].last_use)) {
            pick = s;
            pick_uses = u;
        }
    }
    return pick;
}

int st_book_admits(const st_slot_book *ec, int32_t layer, int32_t expert) {
    const int32_t i = st_cache_index(ec, layer, expert);
    if (i < 0 || ec->where[i] >= 0) return 0;
    const int32_t v = st_book_victim(ec);
    if (v < 0) return 0;
    const st_slot *sl = &ec->slots[v];
    return sl->state == ST_SLOT_EMPTY || ec->uses[i] >= ec->uses[sl->layer * ec->n_expert + sl->expert];
}

int32_t st_book_claim(st_slot_book *ec, int32_t layer, int32_t expert, int prefetch) {
    const int32_t i = st_cache_index(ec, layer, expert);
    if (i < 0 || ec->where[i] >= 0) return -1;
    const int32_t pick = st_book_victim(ec);
    if (pick < 0) return -1;
    if (ec->slots[pick].state != ST_SLOT_EMPTY) { /* its old expert is evicted */
        st_slot *old = &ec->slots[pick];
        ec->where[old->layer * ec->n_expert + old->expert] = -1;
        ec->c.evictions++;
    }
    st_slot *sl = &ec->slots[pick];
    sl->state = ST_SLOT_LOADING;
    sl->layer = layer;
    sl->expert = expert;
    sl->users = 0;
    sl->prefetched = prefetch != 0;
    sl->last_use = ec->clock;
    ec->where[i] = pick;
    if (prefetch) ec->c.prefetch_claims++;
    return pick;
}

int st_book_publish(st_slot_book *ec, int32_t slot) {
    if (slot < 0 || slot >= ec->n_slots || ec->slots[slot].state != ST_SLOT_LOADING) return -1;
    ec->slots[slot].state = ST_SLOT_READY;
    return 0;
}

int st_book_abort(st_slot_book *ec, int32_t slot) {
    if (slot < 0 || slot >= ec->n_slots || ec->slots[slot].state != ST_SLOT_LOADING) return -1;
    st_slot *sl = &ec->slots[slot];
    ec->where[sl->layer * ec->n_expert + sl->expert] = -1;
    sl->state = ST_SLOT_EMPTY;
    sl->layer = sl->expert = -1;
    sl->prefetched = 0;
    return 0;
}

int st_book_acquire(st_slot_book *ec, int32_t slot) {
    if (slot < 0 || slot >= ec->n_slots || ec->slots[slot].state != ST_SLOT_READY) return -1;
    ec->slots[slot].users++;
    return 0;
}

int st_book_release(st_slot_book *ec, int32_t slot) {
    if (slot < 0 || slot >= ec->n_slots || ec->slots[slot].users <= 0) return -1;
    ec->slots[slot].users--;
    return 0;
}
