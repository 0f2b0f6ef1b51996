/* test_slot_book.c - the expert tiers' slot book (c/experts/slot_book.c): every slot-state
 * transition and the refused ones, eviction by use counts (ties: least recently used), slots
 * held by a consumer and slots being filled never evicted or returned, counts that decay with the
 * workload, admission, prefetch counters (timely and late),
 * and a long random walk checking the invariants after every operation. */
#include "slot_book.h"
#include "test.h"

#include <string.h>

static void test_transitions(void) {
    st_slot_book ec;
    CHECK(st_book_init(&ec, 0, 8, 4, 10) == -1, "0 layers refused");
    CHECK(st_book_init(&ec, 2, 8, 0, 10) == -1, "0 slots refused");
    CHECK(st_book_init(&ec, 2, 8, 4, 0) == -1, "decay 0 refused");
    CHECK(st_book_init(&ec, 2, 8, 3, 1000) == 0, "init");
    CHECK(st_book_lookup(&ec, 0, 1) == -1 && ec.c.misses == 1, "empty cache: a miss");
    CHECK(st_book_state_of(&ec, 0, 1) == ST_SLOT_EMPTY, "no slot: EMPTY");
    int32_t s = st_book_claim(&ec, 0, 1, 0);
    CHECK(s >= 0 && ec.slots[s].state == ST_SLOT_LOADING, "claim: LOADING");
    CHECK(st_book_claim(&ec, 0, 1, 0) == -1, "an expert with a slot cannot claim another");
    CHECK(st_book_lookup(&ec, 0, 1) == -1, "a LOADING slot is never returned");
    CHECK(st_book_acquire(&ec, s) == -1, "a LOADING slot cannot be held");
    CHECK(st_book_state_of(&ec, 0, 1) == ST_SLOT_LOADING, "state_of LOADING");
    CHECK(st_book_publish(&ec, s) == 0 && ec.slots[s].state == ST_SLOT_READY, "publish: READY");
    CHECK(st_book_publish(&ec, s) == -1, "READY cannot be published again");
    CHECK(st_book_abort(&ec, s) == -1, "READY cannot be aborted");
    CHECK(st_book_lookup(&ec, 0, 1) == s && ec.c.hits == 1, "READY: a hit");
    CHECK(st_book_release(&ec, s) == -1, "release without acquire refused");
    CHECK(st_book_acquire(&ec, s) == 0 && st_book_release(&ec, s) == 0, "acquire/release");
    int32_t t = st_book_claim(&ec, 1, 7, 0);
    CHECK(t >= 0 && t != s && st_book_abort(&ec, t) == 0, "abort a LOADING slot");
    CHECK(ec.slots[t].state == ST_SLOT_EMPTY && st_book_state_of(&ec, 1, 7) == ST_SLOT_EMPTY,
          "abort: the slot is EMPTY, the expert has none");
    CHECK(st_book_claim(&ec, 2, 0, 0) == -1 && st_book_claim(&ec, 0, 8, 0) == -1,
          "out-of-range layer or expert refused");
    CHECK(st_book_publish(&ec, 3) == -1 && st_book_publish(&ec, -1) == -1, "bad slot refused");
    st_book_free(&ec);
}

static int32_t fill(st_slot_book *ec, int32_t layer, int32_t expert) {
    int32_t s = st_book_claim(ec, layer, expert, 0);
    if (s >= 0) st_book_publish(ec, s);
    return s;
}

static void test_lru_and_holds(void) {
    st_slot_book ec;
    st_book_init(&ec, 1, 16, 3, 1000);
    int32_t a = fill(&ec, 0, 0), b = fill(&ec, 0, 1), c = fill(&ec, 0, 2);
    CHECK(a >= 0 && b >= 0 && c >= 0, "three slots filled");
    st_book_lookup(&ec, 0, 0);
    st_book_lookup(&ec, 0, 2);
    st_book_lookup(&ec, 0, 1); /* one use each; LRU order now: 0, 2, 1 */
    int32_t d = st_book_claim(&ec, 0, 3, 0);
    CHECK(d == a && st_book_state_of(&ec, 0, 0) == ST_SLOT_EMPTY && ec.c.evictions == 1,
          "equal uses: the least recently used expert (0) is evicted");
    st_book_publish(&ec, d);
    /* expert 2 is now least recently used: hold it, so 1 goes instead */
    st_book_lookup(&ec, 0, 3);
    CHECK(st_book_acquire(&ec, c) == 0, "hold expert 2");
    int32_t e = st_book_claim(&ec, 0, 4, 0);
    CHECK(e == b && st_book_state_of(&ec, 0, 2) == ST_SLOT_READY, "a held slot is never evicted");
    /* every slot held or loading: nothing can be claimed */
    CHECK(st_book_acquire(&ec, d) == 0, "hold expert 3");
    CHECK(st_book_claim(&ec, 0, 5, 0) == -1, "all slots held or LOADING: claim refused");
    st_book_release(&ec, c);
    st_book_release(&ec, d);
    CHECK(st_book_claim(&ec, 0, 5, 0) >= 0, "released: claim succeeds");
    st_book_free(&ec);
}

/* The policy is frequency first: an expert used often survives a stream of experts used once,
 * however long ago its last use; the counts decay, so a new favourite takes over. */
static void test_frequency(void) {
    st_slot_book ec;
    st_book_init(&ec, 1, 32, 4, 50); /* counts halve every 50 lookups */
    fill(&ec, 0, 9);
    for (int i = 0; i < 30; i++) st_book_lookup(&ec, 0, 9);
    for (int e = 0; e < 3; e++) {
        fill(&ec, 0, e);
        st_book_lookup(&ec, 0, e);
    }
    /* expert 9 is the least recently used, yet survives a stream of new experts */
    for (int e = 10; e < 20; e++) {
        st_book_lookup(&ec, 0, e); /* a miss counts a use, as a layer's routing does */
        const int32_t s = fill(&ec, 0, e);
        CHECK(s >= 0 && ec.slots[s].expert == e, "new expert %d takes a slot", e);
        st_book_lookup(&ec, 0, e);
    }
    CHECK(st_book_state_of(&ec, 0, 9) == ST_SLOT_READY, "the frequently used expert stays resident");
    /* 19 used far more from now on: 9's count halves away and 9 is the one to go */
    for (int i = 0; i < 400; i++) st_book_lookup(&ec, 0, 19);
    CHECK(ec.uses[19] > ec.uses[9], "the counts follow the workload (%u against %u)", ec.uses[19], ec.uses[9]);
    for (int e = 20; e < 24; e++) {
        st_book_lookup(&ec, 0, e);
        fill(&ec, 0, e);
    }
    CHECK(st_book_state_of(&ec, 0, 19) == ST_SLOT_READY, "the new favourite stays");
    CHECK(st_book_state_of(&ec, 0, 9) == ST_SLOT_EMPTY, "the old one went");
    st_book_free(&ec);
}

static void test_prefetch_counters(void) {
    st_slot_book ec;
    st_book_init(&ec, 2, 8, 4, 1000);
    int32_t s = st_book_claim(&ec, 1, 3, 1);
    CHECK(st_book_lookup(&ec, 1, 3) == -1 && ec.c.prefetch_hits_late == 1 && ec.c.misses == 1,
          "a prefetch still loading at its deadline: late, a miss");
    st_book_publish(&ec, s);
    CHECK(st_book_lookup(&ec, 1, 3) == s && ec.c.prefetch_hits_timely == 0, "counted once");
    int32_t t = st_book_claim(&ec, 1, 4, 1);
    st_book_publish(&ec, t);
    CHECK(st_book_lookup(&ec, 1, 4) == t && ec.c.prefetch_hits_timely == 1, "a timely prefetch");
    CHECK(ec.c.prefetch_claims == 2 && ec.c.lookups == 3 && ec.c.hits == 2, "counters");
    st_book_free(&ec);
}

/* Invariants: where[] and the slots agree, no expert in two slots, held slots READY. */
static int consistent(const st_slot_book *ec) {
    for (int32_t s = 0; s < ec->n_slots; s++) {
        const st_slot *sl = &ec->slots[s];
        if (sl->state == ST_SLOT_EMPTY) {
            if (sl->layer != -1 || sl->users != 0) return 0;
            continue;
        }
        if (ec->where[sl->layer * ec->n_expert + sl->expert] != s) return 0;
        if (sl->users > 0 && sl->state != ST_SLOT_READY) return 0;
    }
    for (int32_t i = 0; i < ec->n_layer * ec->n_expert; i++) {
        const int32_t s = ec->where[i];
        if (s >= 0 && (ec->slots[s].layer * ec->n_expert + ec->slots[s].expert != i ||
                       ec->slots[s].state == ST_SLOT_EMPTY))
            return 0;
    }
    return 1;
}

static void test_random_walk(void) {
    st_slot_book ec;
    st_book_init(&ec, 3, 12, 6, 37);
    test_rng r = {7};
    int ok = 1, held_moved = 0, loading_returned = 0;
    int32_t held[6];
    int n_held = 0;
    for (int it = 0; it < 200000; it++) {
        const int op = (int)(test_rng_next(&r) % 6);
        const int32_t l = (int32_t)(test_rng_next(&r) % 3), e = (int32_t)(test_rng_next(&r) % 12);
        const int32_t s = (int32_t)(test_rng_next(&r) % 6);
        if (op == 0) {
            const int32_t got = st_book_lookup(&ec, l, e);
            if (got >= 0 && ec.slots[got].state != ST_SLOT_READY) loading_returned = 1;
        } else if (op == 1) {
            st_book_claim(&ec, l, e, (int)(test_rng_next(&r) & 1));
        } else if (op == 2) {
            st_book_publish(&ec, s);
        } else if (op == 3 && test_rng_next(&r) % 4 == 0) {
            st_book_abort(&ec, s);
        } else if (op == 4 && n_held < 6 && st_book_acquire(&ec, s) == 0) {
            held[n_held++] = s * 10000 + ec.slots[s].layer * 100 + ec.slots[s].expert;
        } else if (op == 5 && n_held > 0) {
            const int32_t h = held[--n_held];
            st_book_release(&ec, h / 10000);
        }
        for (int i = 0; i < n_held; i++) {
            const st_slot *sl = &ec.slots[held[i] / 10000];
            if (sl->layer * 100 + sl->expert != held[i] % 10000 || sl->state != ST_SLOT_READY)
                held_moved = 1;
        }
        ok &= consistent(&ec);
    }
    CHECK(ok, "slots and the expert map agree after every one of 200000 random operations");
    CHECK(!held_moved, "a held slot never changed owner or state");
    CHECK(!loading_returned, "lookup never returned a slot that was not READY");
    CHECK(ec.c.hits + ec.c.misses == ec.c.lookups, "every lookup is a hit or a miss");
    CHECK(ec.c.prefetch_hits_timely + ec.c.prefetch_hits_late <= ec.c.prefetch_claims,
          "prefetch outcomes never exceed prefetch claims");
    st_book_free(&ec);
}

/* Admission (st_book_admits): an EMPTY slot admits anyone; then only an expert looked up at
 * least as often as the one a claim would evict; held slots are not victims; nothing counted. */
static void test_admission(void) {
    st_slot_book ec;
    st_book_init(&ec, 2, 8, 2, 1000);
    CHECK(st_book_admits(&ec, 0, 5) == 1, "an EMPTY slot admits a never-seen expert");
    fill(&ec, 0, 0);
    fill(&ec, 0, 1);
    for (int i = 0; i < 3; i++) st_book_lookup(&ec, 0, 0);
    st_book_lookup(&ec, 0, 1); /* uses: expert 0: 3, expert 1: 1 (the victim) */
    const int64_t lookups = ec.c.lookups;
    CHECK(st_book_admits(&ec, 1, 4) == 0, "a never-seen expert is not admitted over a used one");
    st_book_lookup(&ec, 1, 4);
    CHECK(st_book_admits(&ec, 1, 4) == 1, "as many uses as the victim: admitted");
    CHECK(ec.c.lookups == lookups + 1, "admits counts nothing");
    CHECK(st_book_admits(&ec, 0, 0) == 0, "an expert with a slot is not admitted again");
    CHECK(st_book_admits(&ec, 2, 0) == 0 && st_book_admits(&ec, 0, 9) == 0, "out of range: 0");
    const int32_t v = ec.where[1];
    st_book_acquire(&ec, v); /* the victim is held: expert 0 (3 uses) is the one a claim takes */
    CHECK(st_book_admits(&ec, 1, 4) == 0, "held victim skipped: 1 use does not beat 3");
    st_book_release(&ec, v);
    int32_t s = st_book_claim(&ec, 1, 4, 0);
    CHECK(s == v && st_book_state_of(&ec, 0, 1) == ST_SLOT_EMPTY, "the admitted claim takes the victim's slot");
    st_book_publish(&ec, s);
    st_book_acquire(&ec, ec.where[0]);
    st_book_acquire(&ec, s);
    CHECK(st_book_admits(&ec, 1, 6) == 0, "every slot held: nothing admitted");
    st_book_free(&ec);
}

int main(void) {
    test_transitions();
    test_admission();
    test_lru_and_holds();
    test_frequency();
    test_prefetch_counters();
    test_random_walk();
    return test_report();
}
