/* gpu_tier.c - the GPU tier of routed experts (gpu_tier.h): the expert cache of CUDA sessions
 * (expert_cache) and the stage slots. n slots of device memory, each the size of the model's
 * largest routed expert, managed by the slot book (slot_book.c: the least frequently used expert
 * goes). When a layer's routing
 * (copied to the host) needs an expert that is not resident, its bytes are copied from the
 * model's mapping into a slot over PCIe (a demand load) before the grouped expert kernel runs; the
 * layer's per-expert pointer table then points into the slots. The kernel and the bytes are those
 * of the all-resident session, so the results are bit-identical to it (placement invariance).
 *
 * Demand loads are synchronous: the copy of a slot waits for earlier kernels (the copies run on the
 * legacy default stream, which the session's blocking stream is ordered with), so a slot is never
 * overwritten while a kernel may still read it, and never read before its copy completed.
 *
 * Prefetch (gpu_prefetch) copies predicted experts on a copy stream not ordered with the legacy
 * stream: each prefetch claims a LOADING slot, its copies start after an event of the compute
 * stream (every kernel enqueued so far; the slots of the kernel about to be enqueued are held), and
 * record the slot's event. A table call that needs a prefetched slot makes the compute stream wait
 * for that event (late) or finds it done (timely), publishes the slot and holds it for the call;
 * unneeded prefetches are published once their event completed, so a slot whose copy may be in
 * flight is never READY for a demand load to evict. The CPU pool for misses comes next. */
#include "gpu_tier.h"
#include "ram_tier.h"
#include "slot_book.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t st_gpu_tier_expert_bytes(const st_expert *e) {
    return st_round_up(st_tensor_bytes(&e->gate), 256) + st_round_up(st_tensor_bytes(&e->up), 256) +
           st_round_up(st_tensor_bytes(&e->down), 256);
}

size_t st_gpu_tier_slot_bytes(const st_gpu_tier_ctx *ctx) {
    const st_hparams *hp = ctx->hp;
    const size_t nx = (size_t)hp->n_layer * (size_t)(hp->n_expert > 0 ? hp->n_expert : 0);
    size_t largest = 0;
    for (size_t i = 0; i < nx; i++) {
        const size_t b = st_gpu_tier_expert_bytes(&ctx->experts[i]);
        if (b > largest) largest = b;
    }
    return largest;
}

#ifndef STRATA_HAVE_CUDA

strata_status st_gpu_tier_create(const st_gpu_tier_ctx *ctx, int32_t n_slots, st_gpu_tier **out) {
    (void)ctx; (void)n_slots; *out = NULL;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}
void st_gpu_tier_free(st_gpu_tier *c) { (void)c; }
strata_status st_gpu_tier_table(st_gpu_tier *c, int il, const int32_t *ids,
                                 int64_t n, int32_t K, int keep_held, void *stream, const void **d_table) {
    (void)c; (void)il; (void)ids; (void)n; (void)K; (void)keep_held; (void)stream;
    *d_table = NULL;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}
void st_gpu_tier_release_held(st_gpu_tier *c) { (void)c; }
strata_status st_gpu_tier_async_loads(st_gpu_tier *c, void *stream) {
    (void)c; (void)stream;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}
strata_status st_gpu_tier_measure_pcie(st_gpu_tier *c, int il, double *bytes_per_s,
                                        double *latency_s) {
    (void)c; (void)il; *bytes_per_s = *latency_s = 0;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}
strata_status st_gpu_tier_enable_prefetch(st_gpu_tier *c) {
    (void)c;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}
strata_status st_gpu_tier_prefetch(st_gpu_tier *c, int il, const int32_t *ids,
                                    int64_t n, void *stream) {
    (void)c; (void)il; (void)ids; (void)n; (void)stream;
    return STRATA_OK;
}
void st_gpu_tier_prefetch_counters(const st_gpu_tier *c, int64_t *issued, int64_t *timely, int64_t *late) {
    (void)c; *issued = *timely = *late = 0;
}
void st_gpu_tier_set_admit(st_gpu_tier *c, int on) { (void)c; (void)on; }
void st_gpu_tier_set_zero_copy(st_gpu_tier *c, int on) { (void)c; (void)on; }
int st_gpu_tier_admits(const st_gpu_tier *c, int il, int32_t e) { (void)c; (void)il; (void)e; return 1; }
void st_gpu_tier_count_misses(st_gpu_tier *c, int il, const int32_t *ids, int64_t n) {
    (void)c; (void)il; (void)ids; (void)n;
}
void st_gpu_tier_missed(const st_gpu_tier *c, int il, const int32_t *ids, int64_t n, uint8_t *missed) {
    (void)c; (void)il; (void)ids; memset(missed, 0, (size_t)n);
}
void st_gpu_tier_counters(const st_gpu_tier *c, int32_t *slots, int64_t *hits, int64_t *misses,
                           int64_t *bytes, double *layer_min, double *layer_max) {
    (void)c; *slots = 0; *hits = *misses = *bytes = 0; *layer_min = *layer_max = 0;
}
void st_gpu_tier_reset_counters(st_gpu_tier *c) { (void)c; }
strata_status st_gpu_tier_export(st_gpu_tier *c, const void **d_tables,
                                  const int32_t **d_where) {
    (void)c; *d_tables = NULL; *d_where = NULL;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}
int32_t st_gpu_tier_empty_slots(const st_gpu_tier *c) {
    (void)c;
    return 0;
}
strata_status st_gpu_tier_after_step(st_gpu_tier *c, int il, const int32_t *ids, int64_t n,
                                      int32_t *empty, int32_t *budget, int64_t *resident) {
    (void)c; (void)il; (void)ids; (void)n; (void)empty; (void)budget;
    if (resident) *resident = 0;
    return st_error(STRATA_ERR_UNSUPPORTED, "expert_cache: built without CUDA");
}

#else

#include "cuda_backend.h"
#include "cuda_moe.h"

#define TRY_CACHE(expr) do { strata_status st_ = (expr); if (st_ != STRATA_OK) return st_; } while (0)

struct st_gpu_tier {
    st_gpu_tier_ctx ctx;          /* the model's shape, the experts' host views, the RAM tier */
    st_slot_book book;
    uint8_t *d_mem;               /* device: n_slots * slot_bytes */
    size_t slot_bytes;
    st_cuda_expert *h_table;      /* [n_expert] host copy of the current layer's table */
    st_cuda_expert *d_table;      /* [n_expert] device */
    int32_t n_expert, n_layer;
    int64_t loaded_bytes;
    int64_t *layer_lookups, *layer_hits;   /* [n_layer] */
    int32_t *held;                /* [2 n_slots] slots held during one table call (a prefetched slot
                                     may be held twice: when settled and when looked up; with a RAM
                                     tier, a resident one: before the claims and when looked up) */
    int32_t *miss;                /* [n_expert] with a RAM tier: the call's experts not resident */
    uint32_t *ram_seen, ram_call; /* [n_expert] its pass's stamps, as seen / call */
    int32_t n_held;
    uint32_t *seen;               /* [n_expert] the table call that last met each expert */
    uint32_t call;                /* table calls so far */
    /* prefetch (st_gpu_tier_enable_prefetch): copies on their own stream, one event per slot */
    void *copy_stream;
    void **slot_event;            /* [n_slots] completes when the slot's prefetch copy has */
    uint8_t *pending;             /* [n_slots] 1: LOADING by a prefetch not yet published */
    int32_t n_pending;
    void *ev_now;                 /* the compute stream's progress when a prefetch was issued */
    void *load_stream;            /* st_gpu_tier_async_loads: demand loads enqueued here */
    st_cuda_expert *h_ring[2];    /* pinned tables uploaded on it, alternately */
    void *ring_event[2];          /* completes when that table's upload has */
    int ring;                     /* the next one to fill */
    int64_t pf_issued, pf_timely, pf_late;
    int admit;                    /* st_gpu_tier_set_admit */
    int zero_copy;                /* st_gpu_tier_set_zero_copy */
    /* st_gpu_tier_export: every layer's residency and descriptors, host and device copies */
    uint64_t version;             /* bumped by every claim (an eviction) and publish */
    uint64_t exported;            /* the version last uploaded, 0: never */
    st_cuda_expert *h_all, *d_all; /* [n_layer * n_expert] */
    int32_t *h_where, *d_where;    /* [n_layer * n_expert] */
};

void st_gpu_tier_free(st_gpu_tier *c) {
    if (!c) return;
    char err[512]; /* the last error (a failed create's reason) outlives the frees */
    snprintf(err, sizeof err, "%s", strata_last_error());
    if (c->copy_stream) (void)st_cuda_stream_synchronize(c->copy_stream);
    for (int32_t i = 0; c->slot_event && i < c->book.n_slots; i++) st_cuda_event_destroy(c->slot_event[i]);
    st_cuda_event_destroy(c->ev_now);
    for (int i = 0; i < 2; i++) {
        st_cuda_event_destroy(c->ring_event[i]);
        st_cuda_host_free(c->h_ring[i]);
    }
    st_cuda_stream_destroy(c->copy_stream);
    free(c->slot_event);
    free(c->pending);
    st_cuda_free(c->d_mem);
    st_cuda_free(c->d_table);
    st_cuda_free(c->d_all);
    st_cuda_free(c->d_where);
    st_error(STRATA_OK, "%s", err);
    st_book_free(&c->book);
    free(c->h_table);
    free(c->layer_lookups);
    free(c->seen);
    free(c->layer_hits);
    free(c->held);
    free(c->miss);
    free(c->ram_seen);
    free(c->h_all);
    free(c->h_where);
    free(c);
}

strata_status st_gpu_tier_create(const st_gpu_tier_ctx *ctx, int32_t n_slots, st_gpu_tier **out) {
    *out = NULL;
    const st_hparams *hp = ctx->hp;
    if (hp->n_expert <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "expert_cache: the model has no routed experts");
    /* one layer call may need every expert of its layer (a long prompt): they must fit beside the
     * pinned ones */
    if (n_slots < hp->n_expert)
        return st_error(STRATA_ERR_INVALID_ARG, "expert_cache %d slots: at least one layer's %d "
                        "experts are needed", (int)n_slots, (int)hp->n_expert);
    st_gpu_tier *c = calloc(1, sizeof *c);
    if (!c) return st_error(STRATA_ERR_NOMEM, "expert cache: out of memory");
    const size_t nx = (size_t)hp->n_layer * (size_t)hp->n_expert;
    c->ctx = *ctx;
    c->slot_bytes = st_gpu_tier_slot_bytes(ctx);
    c->n_expert = hp->n_expert;
    c->n_layer = hp->n_layer;
    c->layer_lookups = calloc((size_t)hp->n_layer, sizeof *c->layer_lookups);
    c->seen = calloc((size_t)hp->n_expert, sizeof *c->seen);
    c->layer_hits = calloc((size_t)hp->n_layer, sizeof *c->layer_hits);
    const int32_t slots = (int32_t)((size_t)n_slots < nx ? (size_t)n_slots : nx);
    strata_status st = STRATA_OK;
    if (st_book_init(&c->book, hp->n_layer, hp->n_expert, slots, st_book_decay_for(slots)) != 0 ||
        !(c->h_table = calloc((size_t)hp->n_expert, sizeof *c->h_table)) || !c->layer_lookups ||
        !c->layer_hits || !c->seen || !(c->held = calloc(2 * (size_t)slots, sizeof *c->held)) ||
        !(c->miss = calloc((size_t)hp->n_expert, sizeof *c->miss)) ||
        !(c->ram_seen = calloc((size_t)hp->n_expert, sizeof *c->ram_seen)))
        st = st_error(STRATA_ERR_NOMEM, "expert cache: out of memory");
    if (st == STRATA_OK) {
        st = st_cuda_malloc((void **)&c->d_mem, (size_t)slots * c->slot_bytes);
        if (st != STRATA_OK)
            st = st_error(st, "expert cache: %d slots of %zu bytes: %s", (int)slots, c->slot_bytes,
                          strata_last_error());
    }
    if (st == STRATA_OK)
        st = st_cuda_malloc((void **)&c->d_table, sizeof *c->d_table * (size_t)hp->n_expert);
    if (st != STRATA_OK) {
        st_gpu_tier_free(c);
        return st;
    }
    *out = c;
    return STRATA_OK;
}

/* The device descriptor of expert view v (host bytes) placed at device address p. */
static st_cuda_mat st_slot_mat(const st_tensor *v, const uint8_t *p) {
    st_cuda_mat m;
    memset(&m, 0, sizeof m);
    m.type = v->type;
    m.data = p;
    m.ne0 = v->ne[0];
    m.ne1 = v->ne[1];
    m.row_bytes = v->row_bytes;
    return m;
}

/* The device descriptors of the expert in slot w (views: its layer's host views). */
static st_cuda_expert st_slot_expert(const st_gpu_tier *c, const st_expert *v, int32_t w) {
    const uint8_t *p = c->d_mem + (size_t)w * c->slot_bytes;
    const size_t g = st_round_up(st_tensor_bytes(&v->gate), 256);
    const size_t u = st_round_up(st_tensor_bytes(&v->up), 256);
    st_cuda_expert x;
    x.gate = st_slot_mat(&v->gate, p);
    x.up = st_slot_mat(&v->up, p + g);
    x.down = st_slot_mat(&v->down, p + g + u);
    return x;
}

/* The device descriptors of an expert read in place from its host views (pool_pcie: the pinned
 * copy, each matrix 256-byte aligned as in a slot; a kernel reads it over PCIe). */
static st_cuda_expert st_host_expert(const st_expert *v) {
    st_cuda_expert x;
    x.gate = st_slot_mat(&v->gate, (const uint8_t *)v->gate.data);
    x.up = st_slot_mat(&v->up, (const uint8_t *)v->up.data);
    x.down = st_slot_mat(&v->down, (const uint8_t *)v->down.data);
    return x;
}

strata_status st_gpu_tier_enable_prefetch(st_gpu_tier *c) {
    const int32_t n = c->book.n_slots;
    c->slot_event = calloc((size_t)n, sizeof *c->slot_event);
    c->pending = calloc((size_t)n, 1);
    if (!c->slot_event || !c->pending) return st_error(STRATA_ERR_NOMEM, "expert prefetch: out of memory");
    /* not ordered with the legacy stream: the synchronous copies there (routing down, demand
     * loads into other slots) must not wait for prefetches in flight */
    TRY_CACHE(st_cuda_stream_create_nonblocking(&c->copy_stream));
    TRY_CACHE(st_cuda_event_create(&c->ev_now));
    for (int32_t i = 0; i < n; i++) TRY_CACHE(st_cuda_event_create(&c->slot_event[i]));
    return STRATA_OK;
}

/* A prefetched slot's copy is known complete (its event, or the copy stream synchronized): READY. */
static void st_gpu_tier_land(st_gpu_tier *c, int32_t slot) {
    st_book_publish(&c->book, slot);
    c->version++;
    c->pending[slot] = 0;
    c->n_pending--;
}

/* Prefetched slots: those whose copy completed become READY; with `needed` (layer il's experts
 * of this call, host ids[n]), each still LOADING one is made READY for the compute stream
 * (stream waits for its copy on the device) and counted late, the others timely. */
static strata_status st_gpu_tier_settle(st_gpu_tier *c, int il, const int32_t *ids, int64_t n,
                                         void *stream) {
    if (!c->pending || c->n_pending == 0) return STRATA_OK;
    const int32_t X = c->n_expert;
    for (int64_t i = 0; i < n; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X) continue;
        const int32_t slot = c->book.where[(size_t)il * (size_t)X + (size_t)e];
        if (slot < 0 || !c->pending[slot]) continue;
        if (st_cuda_event_done(c->slot_event[slot])) {
            c->pf_timely++;
        } else {
            TRY_CACHE(st_cuda_stream_wait_event(stream, c->slot_event[slot]));
            c->pf_late++;
        }
        /* READY for the compute stream, which is ordered after the copy (timely: done already) */
        st_gpu_tier_land(c, slot);
        /* held for this call: a demand load of another expert (a synchronous copy, not ordered
         * with the copy stream) must not take a slot whose copy may still be in flight */
        st_book_acquire(&c->book, slot);
        c->held[c->n_held++] = slot;
    }
    for (int32_t slot = 0; slot < c->book.n_slots && c->n_pending > 0; slot++)
        if (c->pending[slot] && st_cuda_event_done(c->slot_event[slot])) st_gpu_tier_land(c, slot);
    return STRATA_OK;
}

/* An expert's three matrices (host bytes of src) into slot over PCIe: enqueued on stream, or
 * synchronous copies when it is NULL. One copy when the host bytes are laid out as the slot's
 * (the pinned experts, st_gpu_pin_experts), else one a matrix. */
static strata_status st_gpu_tier_copy_in(st_gpu_tier *c, int32_t slot, const st_expert *src,
                                          void *stream) {
    uint8_t *p = c->d_mem + (size_t)slot * c->slot_bytes;
    const st_tensor *m[3] = {&src->gate, &src->up, &src->down};
    size_t b[3], off[3], at = 0;
    int one = 1; /* the three matrices sit at the slot's offsets from the first */
    for (int k = 0; k < 3; k++) {
        b[k] = st_tensor_bytes(m[k]);
        off[k] = at;
        one &= (const uint8_t *)m[k]->data == (const uint8_t *)m[0]->data + at;
        at += st_round_up(b[k], 256);
    }
    if (one) {
        const size_t n = off[2] + b[2];
        if (stream) TRY_CACHE(st_cuda_memcpy_async(p, m[0]->data, n, 1, stream));
        else TRY_CACHE(st_cuda_memcpy_h2d(p, m[0]->data, n));
    } else
        for (int k = 0; k < 3; k++) {
            if (stream) TRY_CACHE(st_cuda_memcpy_async(p + off[k], m[k]->data, b[k], 1, stream));
            else TRY_CACHE(st_cuda_memcpy_h2d(p + off[k], m[k]->data, b[k]));
        }
    /* counted once every copy is enqueued (or done): a failed one counts nothing */
    const int64_t bytes = (int64_t)(b[0] + b[1] + b[2]);
    c->loaded_bytes += bytes;
    *c->ctx.pcie_bytes += bytes;
    return STRATA_OK;
}

strata_status st_gpu_tier_prefetch(st_gpu_tier *c, int il, const int32_t *ids,
                                    int64_t n, void *stream) {
    if (!c->copy_stream) return STRATA_OK;
    const int32_t X = c->n_expert;
    const st_expert *views = c->ctx.experts + (size_t)il * (size_t)X;
    /* the copies overwrite evicted slots: they start after every kernel enqueued so far (the
     * slots of kernels not yet enqueued are held, so never evicted here) */
    TRY_CACHE(st_cuda_event_record(c->ev_now, stream));
    TRY_CACHE(st_cuda_stream_wait_event(c->copy_stream, c->ev_now));
    for (int64_t i = 0; i < n; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X || st_book_state_of(&c->book, il, e) != ST_SLOT_EMPTY) continue;
        if (c->n_pending >= c->book.n_slots / 2) break; /* at most half the slots in flight */
        const int32_t slot = st_book_claim(&c->book, il, e, 1);
        c->version++;
        if (slot < 0) break;
        strata_status st = st_gpu_tier_copy_in(c, slot, &views[e], c->copy_stream);
        if (st == STRATA_OK) st = st_cuda_event_record(c->slot_event[slot], c->copy_stream);
        if (st != STRATA_OK) {
            (void)st_cuda_stream_synchronize(c->copy_stream);
            st_book_abort(&c->book, slot);
            return st;
        }
        c->pending[slot] = 1;
        c->n_pending++;
        c->pf_issued++;
    }
    return STRATA_OK;
}

void st_gpu_tier_prefetch_counters(const st_gpu_tier *c, int64_t *issued, int64_t *timely, int64_t *late) {
    *issued = c ? c->pf_issued : 0;
    *timely = c ? c->pf_timely : 0;
    *late = c ? c->pf_late : 0;
}

static double st_gc_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

strata_status st_gpu_tier_measure_pcie(st_gpu_tier *c, int il, double *bytes_per_s,
                                        double *latency_s) {
    /* one expert of layer il (its three copies, from where the session reads it: the mapping or
     * the pinned copy) into slot 0, best of 3; one 4 KiB copy, best of 5. Slot 0 is then free
     * again (its book entry untouched). */
    const st_expert *e = &c->ctx.experts[(size_t)il * (size_t)c->n_expert];
    const st_tensor *m[3] = {&e->gate, &e->up, &e->down};
    double best = INFINITY, bytes = 0;
    for (int k = 0; k < 3; k++) bytes += (double)st_tensor_bytes(m[k]);
    for (int rep = 0; rep < 3; rep++) {
        TRY_CACHE(st_cuda_synchronize());
        const double t0 = st_gc_now();
        uint8_t *p = c->d_mem;
        for (int k = 0; k < 3; k++) {
            const size_t b = st_tensor_bytes(m[k]);
            TRY_CACHE(st_cuda_memcpy_h2d(p, m[k]->data, b));
            p += st_round_up(b, 256);
        }
        const double t = st_gc_now() - t0;
        if (t < best) best = t;
    }
    double lat = INFINITY;
    const size_t small = st_tensor_bytes(m[0]) < 4096 ? st_tensor_bytes(m[0]) : 4096;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = st_gc_now();
        TRY_CACHE(st_cuda_memcpy_h2d(c->d_mem, m[0]->data, small));
        const double t = st_gc_now() - t0;
        if (t < lat) lat = t;
    }
    *latency_s = lat;
    *bytes_per_s = best > 3 * lat ? bytes / (best - 3 * lat) : bytes / best;
    return STRATA_OK;
}

void st_gpu_tier_release_held(st_gpu_tier *c) {
    for (int32_t i = 0; i < c->n_held; i++) st_book_release(&c->book, c->held[i]);
    c->n_held = 0;
}

strata_status st_gpu_tier_async_loads(st_gpu_tier *c, void *stream) {
    if (c->copy_stream) return STRATA_OK; /* prefetch: its slot states assume synchronous loads */
    for (int i = 0; i < 2; i++) {
        if (!c->h_ring[i])
            TRY_CACHE(st_cuda_host_alloc((void **)&c->h_ring[i], sizeof *c->h_table * (size_t)c->n_expert));
        if (!c->ring_event[i]) TRY_CACHE(st_cuda_event_create(&c->ring_event[i]));
    }
    c->load_stream = stream;
    return STRATA_OK;
}

strata_status st_gpu_tier_table(st_gpu_tier *c, int il, const int32_t *ids,
                                 int64_t n, int32_t K, int keep_held, void *stream, const void **d_table) {
    const int32_t X = c->n_expert;
    const st_expert *views = c->ctx.experts + (size_t)il * (size_t)X;
    const st_expert *src = views; /* where demand loads copy from: the mapping (or pinned copy) */
    strata_status st = STRATA_OK;
    st_gpu_tier_release_held(c);
    TRY_CACHE(st_gpu_tier_settle(c, il, ids, n * K, stream));
    if (c->ctx.ram) {
        /* past the RAM budget (ram_budget): the experts this call must load come from the RAM
         * tier, which reads those not in its pinned slots from the file with O_DIRECT. Resident
         * experts are held first, so the claims below cannot evict one that was not listed. */
        int32_t nm = 0;
        if (++c->ram_call == 0) {
            memset(c->ram_seen, 0, sizeof *c->ram_seen * (size_t)X);
            c->ram_call = 1;
        }
        for (int64_t i = 0; i < n * K; i++) {
            const int32_t e = ids[i];
            if (e < 0 || e >= X || c->ram_seen[e] == c->ram_call) continue;
            c->ram_seen[e] = c->ram_call;
            const int32_t w = c->book.where[(size_t)il * (size_t)X + (size_t)e];
            if (w >= 0 && c->book.slots[w].state == ST_SLOT_READY) {
                st_book_acquire(&c->book, w);
                c->held[c->n_held++] = w;
            } else {
                c->miss[nm++] = e;
            }
        }
        if (nm > 0) {
            st = st_ram_tier_table(c->ctx.ram, il, nm, c->miss, 1, &src);
            if (st != STRATA_OK) {
                st_ram_tier_release(c->ctx.ram);
                st_gpu_tier_release_held(c);
                return st;
            }
        }
    }
    if (++c->call == 0) { /* the stamps wrapped: start them over */
        memset(c->seen, 0, sizeof *c->seen * (size_t)X);
        c->call = 1;
    }
    for (int64_t i = 0; i < n * K && st == STRATA_OK; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X) continue;
        if (c->seen[e] == c->call) continue; /* already made resident for this call */
        c->seen[e] = c->call;
        int32_t slot = st_book_lookup(&c->book, il, e);
        c->layer_lookups[il]++;
        c->layer_hits[il] += slot >= 0;
        if (slot < 0) { /* a demand load: the expert's three matrices over PCIe into a free slot */
            slot = st_book_claim(&c->book, il, e, 0);
            c->version++;
            if (slot < 0 && c->n_pending > 0) { /* prefetches hold the free slots: let them land */
                st = st_cuda_stream_synchronize(c->copy_stream);
                for (int32_t q = 0; q < c->book.n_slots && st == STRATA_OK; q++)
                    if (c->pending[q]) st_gpu_tier_land(c, q);
                if (st != STRATA_OK) break;
                slot = st_book_claim(&c->book, il, e, 0);
                c->version++;
            }
            if (slot < 0) {
                st = st_error(STRATA_ERR_INTERNAL, "expert cache: no free slot for layer %d expert %d",
                              il, (int)e);
                break;
            }
            st = st_gpu_tier_copy_in(c, slot, &src[e], c->ctx.ram ? NULL : c->load_stream);
            if (st != STRATA_OK) {
                st_book_abort(&c->book, slot);
                break;
            }
            st_book_publish(&c->book, slot);
            c->version++;
        }
        st_book_acquire(&c->book, slot); /* not evicted by a later miss of this same call */
        c->held[c->n_held++] = slot;
        c->h_table[e] = st_slot_expert(c, &views[e], slot);
    }
    /* the copies were synchronous: the RAM tier's slots are free to be reused */
    if (c->ctx.ram) st_ram_tier_release(c->ctx.ram);
    /* the slots may be reused once the kernel is enqueued: a later copy into one waits for it
     * (keep_held: the caller enqueues the kernel first, then st_gpu_tier_release_held) */
    if (!keep_held || st != STRATA_OK) st_gpu_tier_release_held(c);
    if (st != STRATA_OK) return st;
    /* the whole table goes up (entries of experts not routed here are never read); with async
     * loads, enqueued from one of two pinned copies (a pageable source may make the copy wait
     * for the stream), the one whose previous upload has completed */
    if (c->load_stream && !c->ctx.ram) {
        const int r = c->ring;
        if (!st_cuda_event_done(c->ring_event[r])) st = st_cuda_stream_synchronize(c->load_stream);
        if (st == STRATA_OK) {
            memcpy(c->h_ring[r], c->h_table, sizeof *c->h_table * (size_t)X);
            st = st_cuda_memcpy_async(c->d_table, c->h_ring[r], sizeof *c->h_table * (size_t)X, 1, c->load_stream);
        }
        if (st == STRATA_OK) st = st_cuda_event_record(c->ring_event[r], c->load_stream);
        c->ring ^= 1;
    } else {
        st = st_cuda_memcpy_h2d(c->d_table, c->h_table, sizeof *c->h_table * (size_t)X);
    }
    if (st != STRATA_OK) return st;
    *d_table = c->d_table;
    return STRATA_OK;
}

strata_status st_gpu_tier_export(st_gpu_tier *c, const void **d_tables,
                                  const int32_t **d_where) {
    const size_t nx = (size_t)c->n_layer * (size_t)c->n_expert;
    if (!c->d_all) {
        c->h_all = calloc(nx, sizeof *c->h_all);
        c->h_where = calloc(nx, sizeof *c->h_where);
        if (!c->h_all || !c->h_where) return st_error(STRATA_ERR_NOMEM, "expert cache: out of memory");
        TRY_CACHE(st_cuda_malloc((void **)&c->d_where, sizeof *c->d_where * nx));
        TRY_CACHE(st_cuda_malloc((void **)&c->d_all, sizeof *c->d_all * nx));
    }
    if (c->exported != c->version + 1) { /* + 1: version 0 is exported too */
        /* only the layers whose residency changed go up again (a slot's address names its
         * bytes: an entry changed when its flag or its gate matrix's address did) */
        const size_t X = (size_t)c->n_expert;
        for (size_t l = 0; l < (size_t)c->n_layer; l++) {
            int dirty = c->exported == 0;
            for (size_t i = l * X; i < (l + 1) * X; i++) {
                const int32_t w = c->book.where[i];
                const int ready = w >= 0 && c->book.slots[w].state == ST_SLOT_READY;
                if (ready) {
                    const st_cuda_expert x = st_slot_expert(c, &c->ctx.experts[i], w);
                    dirty |= !c->h_where[i] || c->h_all[i].gate.data != x.gate.data;
                    c->h_all[i] = x;
                } else {
                    dirty |= c->h_where[i] != 0;
                    if (c->zero_copy) c->h_all[i] = st_host_expert(&c->ctx.experts[i]);
                    else memset(&c->h_all[i], 0, sizeof c->h_all[i]);
                }
                c->h_where[i] = ready;
            }
            if (!dirty) continue;
            TRY_CACHE(st_cuda_memcpy_h2d(c->d_where + l * X, c->h_where + l * X, sizeof *c->h_where * X));
            TRY_CACHE(st_cuda_memcpy_h2d(c->d_all + l * X, c->h_all + l * X, sizeof *c->h_all * X));
        }
        c->exported = c->version + 1;
    }
    *d_tables = c->d_all;
    *d_where = c->d_where;
    return STRATA_OK;
}

int32_t st_gpu_tier_empty_slots(const st_gpu_tier *c) {
    int32_t n = 0;
    for (int32_t i = 0; i < c->book.n_slots; i++) n += c->book.slots[i].state == ST_SLOT_EMPTY;
    return n;
}

/* Each distinct expert of ids[n] (layer il; -1 and out of range skipped) looked up once: the
 * slot book's use count and hit or miss, the layer's counters; the missed ones into miss[] when
 * it is not NULL. Returns how many missed. Nothing is loaded. */
static int32_t st_gpu_tier_look_up(st_gpu_tier *c, int il, const int32_t *ids, int64_t n, int32_t *miss) {
    if (++c->call == 0) { /* the stamps wrapped: start them over */
        memset(c->seen, 0, sizeof *c->seen * (size_t)c->n_expert);
        c->call = 1;
    }
    int32_t nm = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= c->n_expert || c->seen[e] == c->call) continue;
        c->seen[e] = c->call;
        const int32_t slot = st_book_lookup(&c->book, il, e);
        c->layer_lookups[il]++;
        c->layer_hits[il] += slot >= 0;
        if (slot < 0 && miss) miss[nm] = e;
        nm += slot < 0;
    }
    return nm;
}

strata_status st_gpu_tier_after_step(st_gpu_tier *c, int il, const int32_t *ids, int64_t n,
                                      int32_t *empty, int32_t *budget, int64_t *resident) {
    const int32_t X = c->n_expert;
    const st_expert *views = c->ctx.experts + (size_t)il * (size_t)X;
    int64_t res = 0;
    /* residency during the step: what the export gave the device (nothing changed since) */
    for (int64_t i = 0; i < n; i++) res += ids[i] >= 0 && ids[i] < X && c->h_where[(size_t)il * (size_t)X + (size_t)ids[i]];
    if (resident) *resident = res;
    const int32_t nm = st_gpu_tier_look_up(c, il, ids, n, c->miss);
    /* loads for the steps to come: into EMPTY slots freely (a claim takes those first), in
     * place of an LRU expert only while the budget lasts */
    for (int32_t q = 0; q < nm && (*empty > 0 || *budget > 0); q++) {
        const int32_t e = c->miss[q];
        if (*empty <= 0 && c->admit && !st_book_admits(&c->book, il, e)) continue;
        const int32_t slot = st_book_claim(&c->book, il, e, 0);
        c->version++;
        if (slot < 0) break;
        if (*empty > 0) (*empty)--;
        else (*budget)--;
        const strata_status st = st_gpu_tier_copy_in(c, slot, &views[e], NULL);
        if (st != STRATA_OK) {
            st_book_abort(&c->book, slot);
            return st;
        }
        st_book_publish(&c->book, slot);
    }
    return STRATA_OK;
}

void st_gpu_tier_set_admit(st_gpu_tier *c, int on) { c->admit = on != 0; }
void st_gpu_tier_set_zero_copy(st_gpu_tier *c, int on) { c->zero_copy = on != 0; }

int st_gpu_tier_admits(const st_gpu_tier *c, int il, int32_t e) {
    return !c->admit || st_book_admits(&c->book, il, e);
}

void st_gpu_tier_count_misses(st_gpu_tier *c, int il, const int32_t *ids, int64_t n) {
    (void)st_gpu_tier_look_up(c, il, ids, n, NULL);
}

void st_gpu_tier_missed(const st_gpu_tier *c, int il, const int32_t *ids, int64_t n, uint8_t *missed) {
    const int32_t X = c->n_expert;
    for (int64_t i = 0; i < n; i++) {
        const int32_t e = ids[i];
        if (e < 0) { missed[i] = 0; continue; }
        const int32_t slot = e < X ? c->book.where[(size_t)il * (size_t)X + (size_t)e] : -1;
        int ready = slot >= 0 && c->book.slots[slot].state == ST_SLOT_READY;
        /* a prefetch whose copy has completed is resident: the table call lands it (settle)
         * before any claim could take its slot */
        if (!ready && slot >= 0 && c->pending && c->pending[slot] && st_cuda_event_done(c->slot_event[slot]))
            ready = 1;
        missed[i] = (uint8_t)!ready;
    }
}

void st_gpu_tier_reset_counters(st_gpu_tier *c) {
    if (!c) return;
    memset(&c->book.c, 0, sizeof c->book.c);
    c->loaded_bytes = 0;
    c->pf_issued = c->pf_timely = c->pf_late = 0;
    for (int32_t il = 0; il < c->n_layer; il++) c->layer_lookups[il] = c->layer_hits[il] = 0;
}

void st_gpu_tier_counters(const st_gpu_tier *c, int32_t *slots, int64_t *hits, int64_t *misses,
                           int64_t *bytes, double *layer_min, double *layer_max) {
    *slots = c ? c->book.n_slots : 0;
    *hits = c ? c->book.c.hits : 0;
    *misses = c ? c->book.c.misses : 0;
    *bytes = c ? c->loaded_bytes : 0;
    *layer_min = *layer_max = 0;
    int any = 0;
    for (int32_t il = 0; c && il < c->n_layer; il++) {
        if (!c->layer_lookups[il]) continue;
        const double r = (double)c->layer_hits[il] / (double)c->layer_lookups[il];
        if (!any || r < *layer_min) *layer_min = r;
        if (!any || r > *layer_max) *layer_max = r;
        any = 1;
    }
}

#endif /* STRATA_HAVE_CUDA */
