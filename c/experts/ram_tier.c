/* ram_tier.c - the RAM tier of routed experts for sessions with a RAM budget (ram_budget; CUDA
 * sessions: the source of the GPU expert cache's loads and of the CPU's layers, in page-locked
 * slots): n_slots slots of RAM, each the size of the model's largest expert, managed by the
 * slot book (c/experts/slot_book.c: the least frequently used expert goes) and filled from the GGUF by
 * the O_DIRECT reader (c/experts/stream.c) when a layer's routing needs an expert that is not
 * resident. The CPU expert step then reads the slots through a per-layer table. The bytes are the
 * file's, so the results are bit-identical to reading the mapping (which the tier never touches
 * for routed experts, so they do not become resident through it).
 *
 * Pipelined mode (pipe): after a layer's routing, the experts predicted
 * for the next layer (its norm and router applied to the hidden state then) are claimed (LOADING)
 * and read by a background thread while this layer computes. Only the session's thread touches
 * the cache: the reader thread fills the slot's bytes and raises the slot's fill flag; a layer
 * that needs a LOADING slot waits for the flag (a late prefetch) and publishes it before reading,
 * so a slot being filled is never read. */
#include "ram_tier.h"
#include "slot_book.h"
#include "stream.h"
#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.h"
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t shard[3];
    uint64_t off[3];              /* file offsets of the expert's gate, up and down slices */
    size_t bytes[3];
} st_expert_loc;

struct st_ram_tier {
    const st_hparams *hp;
    const st_expert *views;       /* [n_layer * n_expert] the experts as the model maps them */
    st_slot_book cache;
    uint8_t *mem;                 /* n_slots * slot_bytes, ST_READER_ALIGN-aligned */
    int mem_pinned;               /* mem is page-locked (CUDA sessions: st_cuda_host_alloc) */
    size_t slot_bytes;
    st_reader **readers;          /* [n_shards], opened on first use */
    uint32_t n_shards;
    const strata_gguf *gguf;
    st_expert_loc *loc;           /* [n_layer * n_expert] */
    st_expert *table;             /* [n_expert] the current layer's table */
    int32_t *held;                /* [n_slots] slots acquired for the current layer */
    int32_t n_held;
    _Atomic int64_t disk_bytes;
    int64_t fills;
    /* pipelined mode: one reader thread, a queue of fills, a fill flag per slot */
    int pipe;
    pthread_t worker;
    int worker_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    int stop;
    int32_t *queue;               /* [n_slots] ring of slots to fill */
    int32_t q_head, q_len;
    const st_expert_loc **q_loc;  /* [n_slots] location of each queued slot's expert */
    _Atomic int *fill;            /* [n_slots] 0 idle, 1 queued or reading, 2 filled, 3 failed */
    int32_t *inflight;            /* [n_slots] slots claimed by prefetches, not yet published */
    int32_t n_inflight;
    st_reader **wreaders;         /* [n_shards] the reader thread's own readers */
    int64_t pf_issued, pf_timely, pf_late;
    int64_t *layer_lookups, *layer_hits;  /* [n_layer] */
    uint32_t *seen;               /* [n_expert] the table call that last met each expert */
    uint32_t call;                /* table calls so far */
};

static void *st_ram_worker(void *arg);

void st_ram_tier_free(st_ram_tier *t) {
    if (!t) return;
    if (t->worker_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_broadcast(&t->cv_job);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->worker, NULL);
    }
    if (t->pipe) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv_job);
        pthread_cond_destroy(&t->cv_done);
    }
    if (t->wreaders)
        for (uint32_t i = 0; i < t->n_shards; i++) st_reader_close(t->wreaders[i]);
    free(t->wreaders);
    free(t->queue);
    free(t->q_loc);
    free((void *)t->fill);
    free(t->inflight);
    free(t->layer_lookups);
    free(t->seen);
    free(t->layer_hits);
    if (t->readers)
        for (uint32_t i = 0; i < t->n_shards; i++) st_reader_close(t->readers[i]);
    free(t->readers);
    st_book_free(&t->cache);
#ifdef STRATA_HAVE_CUDA
    if (t->mem_pinned) st_cuda_host_free(t->mem);
    else
#endif
        free(t->mem);
    free(t->loc);
    free(t->table);
    free(t->held);
    free(t);
}

/* Where expert e of merged tensor v lies in its file. */
static strata_status st_locate(const strata_gguf *g, const st_tensor *v, int64_t e, uint32_t *shard,
                               uint64_t *off, size_t *bytes) {
    const int64_t i = strata_gguf_tensor_find(g, v->name);
    strata_tensor_info ti;
    if (i < 0 || strata_gguf_tensor_info(g, i, &ti) != STRATA_OK)
        return st_error(STRATA_ERR_INTERNAL, "ram tier: tensor %s not found", v->name);
    *bytes = (size_t)v->ne[1] * v->row_bytes;
    *off = ti.file_offset + (uint64_t)e * (uint64_t)*bytes;
    *shard = ti.shard;
    return STRATA_OK;
}

size_t st_ram_tier_slot_bytes(const strata_model *m) {
    size_t largest = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const st_layer *L = &m->layers[il];
        const st_tensor *v[3] = {&L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps};
        size_t tot = 0; /* every expert of a tensor has the same bytes: ne[1] rows */
        for (int k = 0; k < 3; k++) tot += st_round_up((size_t)v[k]->ne[1] * v[k]->row_bytes, 64);
        if (tot > largest) largest = tot;
    }
    return st_round_up(largest, ST_READER_ALIGN);
}

/* The tier's parts: the slots and their bookkeeping, the readers, the reader thread; *out is set
 * first, so a failure leaves what was built for st_ram_tier_free. */
static strata_status st_ram_tier_build(const st_ram_tier_params *p, st_ram_tier **out, int32_t *max_batch) {
    const strata_model *m = p->model;
    const st_hparams *hp = &m->hp;
    const int64_t budget = p->budget;
    if (hp->n_expert <= 0)
        return st_error(STRATA_ERR_INVALID_ARG, "ram_budget: the model has no routed experts");
    st_ram_tier *t = calloc(1, sizeof *t);
    if (!t) return st_error(STRATA_ERR_NOMEM, "ram tier: out of memory");
    *out = t;
    t->hp = hp;
    t->views = p->experts;
    t->gguf = strata_model_gguf(m);
    const size_t nx = (size_t)hp->n_layer * (size_t)hp->n_expert;
    t->loc = calloc(nx, sizeof *t->loc);
    if (!t->loc) return st_error(STRATA_ERR_NOMEM, "ram tier: out of memory");
    for (int il = 0; il < hp->n_layer; il++) {
        const st_layer *L = &m->layers[il];
        const st_tensor *v[3] = {&L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps};
        if (!L->ffn_gate_exps.data) continue; /* a leading dense layer routes nothing */
        for (int32_t e = 0; e < hp->n_expert; e++) {
            st_expert_loc *l = &t->loc[(size_t)il * (size_t)hp->n_expert + (size_t)e];
            for (int k = 0; k < 3; k++) {
                strata_status st = st_locate(t->gguf, v[k], e, &l->shard[k], &l->off[k], &l->bytes[k]);
                if (st != STRATA_OK) return st;
            }
        }
    }
    t->slot_bytes = st_ram_tier_slot_bytes(m);
    const int64_t n_slots = budget / (int64_t)t->slot_bytes;
    if (n_slots < hp->n_expert_used)
        return st_error(STRATA_ERR_INVALID_ARG, "ram_budget %lld bytes holds %lld experts of %zu bytes; "
                        "one token needs %d (at least %lld bytes)", (long long)budget,
                        (long long)n_slots, t->slot_bytes, (int)hp->n_expert_used,
                        (long long)((int64_t)hp->n_expert_used * (int64_t)t->slot_bytes));
    const int32_t slots = (int32_t)(n_slots < (int64_t)nx ? n_slots : (int64_t)nx);
    if (st_book_init(&t->cache, hp->n_layer, hp->n_expert, slots, st_book_decay_for(slots)) != 0)
        return st_error(STRATA_ERR_NOMEM, "ram tier: out of memory");
#ifdef STRATA_HAVE_CUDA
    /* CUDA sessions: page-locked slots, so the disk's O_DIRECT reads land where the GPU cache's
     * copies read at the pinned PCIe rate (falls back to plain memory, at the pageable rate) */
    if (p->pinned) {
        void *pm = NULL;
        if (st_cuda_host_alloc(&pm, (size_t)slots * t->slot_bytes) == STRATA_OK) {
            if (((uintptr_t)pm & (ST_READER_ALIGN - 1)) == 0) {
                t->mem = pm;
                t->mem_pinned = 1;
            } else {
                st_cuda_host_free(pm);
            }
        }
        st_error_clear();
    }
#endif
    if (!t->mem && posix_memalign((void **)&t->mem, ST_READER_ALIGN, (size_t)slots * t->slot_bytes) != 0)
        return st_error(STRATA_ERR_NOMEM, "ram tier: out of memory for %d slots of %zu bytes", (int)slots,
                        t->slot_bytes);
    t->n_shards = strata_gguf_shard_count(t->gguf);
    t->readers = calloc(t->n_shards ? t->n_shards : 1, sizeof *t->readers);
    t->table = calloc((size_t)hp->n_expert, sizeof *t->table);
    t->held = calloc((size_t)slots, sizeof *t->held);
    t->layer_lookups = calloc((size_t)hp->n_layer, sizeof *t->layer_lookups);
    t->seen = calloc((size_t)hp->n_expert, sizeof *t->seen);
    t->layer_hits = calloc((size_t)hp->n_layer, sizeof *t->layer_hits);
    if (!t->readers || !t->table || !t->held || !t->layer_lookups || !t->layer_hits || !t->seen)
        return st_error(STRATA_ERR_NOMEM, "ram tier: out of memory");
    if (p->pipe) {
        t->queue = calloc((size_t)slots, sizeof *t->queue);
        t->q_loc = calloc((size_t)slots, sizeof *t->q_loc);
        t->fill = calloc((size_t)slots, sizeof *t->fill);
        t->inflight = calloc((size_t)slots, sizeof *t->inflight);
        t->wreaders = calloc(t->n_shards ? t->n_shards : 1, sizeof *t->wreaders);
        if (!t->queue || !t->q_loc || !t->fill || !t->inflight || !t->wreaders)
            return st_error(STRATA_ERR_NOMEM, "ram tier: out of memory");
        for (int32_t i = 0; i < slots; i++) atomic_init(&t->fill[i], 0);
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv_job, NULL);
        pthread_cond_init(&t->cv_done, NULL);
        t->pipe = 1;
        if (pthread_create(&t->worker, NULL, st_ram_worker, t) != 0)
            return st_error(STRATA_ERR_INTERNAL, "ram tier: pthread_create failed");
        t->worker_started = 1;
    }
    /* a layer call needs its distinct experts (at most T * k, at most n_expert) resident at once */
    if (slots < hp->n_expert) {
        const int32_t tmax = slots / hp->n_expert_used;
        if (*max_batch > tmax) *max_batch = tmax;
    }
    return STRATA_OK;
}

strata_status st_ram_tier_create(const st_ram_tier_params *p, st_ram_tier **out, int32_t *max_batch) {
    *out = NULL;
    st_ram_tier *t = NULL;
    const strata_status st = st_ram_tier_build(p, &t, max_batch);
    if (st != STRATA_OK) {
        st_ram_tier_free(t);
        return st;
    }
    *out = t;
    return STRATA_OK;
}

int32_t st_ram_tier_slots(const st_ram_tier *t) { return t ? t->cache.n_slots : 0; }

/* Reads expert l into dst with readers (the session's, or the reader thread's own). */
static strata_status st_ram_fill(st_ram_tier *t, st_reader **readers, const st_expert_loc *l,
                                 uint8_t *dst) {
    st_read_range r[3];
    size_t at = 0;
    for (int k = 0; k < 3; k++) {
        const uint32_t sh = l->shard[k];
        if (sh >= t->n_shards) return st_error(STRATA_ERR_INTERNAL, "ram tier: shard %u", sh);
        if (!readers[sh]) {
            const char *path = strata_gguf_shard_path(t->gguf, sh);
            strata_status st = st_reader_open(path, 1, 4, 0, &readers[sh]);
            if (st != STRATA_OK) return st;
        }
        r[k].offset = l->off[k];
        r[k].bytes = l->bytes[k];
        r[k].dst = dst + at;
        at += st_round_up(l->bytes[k], 64);
    }
    /* the three ranges of one expert usually lie in one shard; read them shard by shard */
    for (int k = 0; k < 3; k++) {
        strata_status st = st_reader_read(readers[l->shard[k]], &r[k], 1);
        if (st != STRATA_OK) return st;
        atomic_fetch_add(&t->disk_bytes, (int64_t)l->bytes[k]);
    }
    return STRATA_OK;
}

/* ---- pipelined mode: the reader thread ------------------------------------------------------ */

static void *st_ram_worker(void *arg) {
    st_ram_tier *t = arg;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (!t->stop && t->q_len == 0) pthread_cond_wait(&t->cv_job, &t->mu);
        if (t->q_len == 0) { /* stop, and nothing left to read */
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        const int32_t slot = t->queue[t->q_head];
        const st_expert_loc *l = t->q_loc[t->q_head];
        t->q_head = (t->q_head + 1) % t->cache.n_slots;
        t->q_len--;
        pthread_mutex_unlock(&t->mu);
        const strata_status st = st_ram_fill(t, t->wreaders, l, t->mem + (size_t)slot * t->slot_bytes);
        pthread_mutex_lock(&t->mu);
        atomic_store_explicit(&t->fill[slot], st == STRATA_OK ? 2 : 3, memory_order_release);
        pthread_cond_broadcast(&t->cv_done);
        pthread_mutex_unlock(&t->mu);
    }
}

/* Waits for a queued slot's fill; 1 if it had to wait (the prefetch was late). */
static int st_ram_wait_fill(st_ram_tier *t, int32_t slot) {
    if (atomic_load_explicit(&t->fill[slot], memory_order_acquire) >= 2) return 0;
    pthread_mutex_lock(&t->mu);
    while (atomic_load_explicit(&t->fill[slot], memory_order_acquire) < 2)
        pthread_cond_wait(&t->cv_done, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return 1;
}

/* Publishes (or, after a failed read, empties) prefetched slot i of the in-flight list; if wait,
 * waits for its fill first. Returns 1 if the slot is no longer in flight. */
static int st_ram_settle(st_ram_tier *t, int32_t i, int wait) {
    const int32_t slot = t->inflight[i];
    if (!wait && atomic_load_explicit(&t->fill[slot], memory_order_acquire) < 2) return 0;
    if (wait) st_ram_wait_fill(t, slot);
    if (atomic_load_explicit(&t->fill[slot], memory_order_acquire) == 2) st_book_publish(&t->cache, slot);
    else st_book_abort(&t->cache, slot); /* a later need reads it synchronously, with the error */
    atomic_store_explicit(&t->fill[slot], 0, memory_order_relaxed);
    t->inflight[i] = t->inflight[--t->n_inflight];
    return 1;
}

/* Publishes every finished prefetch (wait: every prefetch, waiting for the reader thread). */
static void st_ram_reap(st_ram_tier *t, int wait) {
    for (int32_t i = 0; i < t->n_inflight;)
        if (!st_ram_settle(t, i, wait)) i++;
}

void st_ram_tier_prefetch(st_ram_tier *t, int il, int64_t T, const int32_t *ids, int32_t K) {
    if (!t || !t->pipe) return;
    const int32_t X = t->hp->n_expert;
    /* leave room: at most half the slots in flight, so the next layer can still claim its misses */
    const int32_t limit = t->cache.n_slots / 2;
    for (int64_t i = 0; i < T * K && t->n_inflight < limit; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X || st_book_state_of(&t->cache, il, e) != ST_SLOT_EMPTY) continue;
        const int32_t slot = st_book_claim(&t->cache, il, e, 1);
        if (slot < 0) break;
        atomic_store_explicit(&t->fill[slot], 1, memory_order_relaxed);
        t->inflight[t->n_inflight++] = slot;
        t->pf_issued++;
        pthread_mutex_lock(&t->mu);
        const int32_t at = (t->q_head + t->q_len) % t->cache.n_slots;
        t->queue[at] = slot;
        t->q_loc[at] = &t->loc[(size_t)il * (size_t)X + (size_t)e];
        t->q_len++;
        pthread_cond_signal(&t->cv_job);
        pthread_mutex_unlock(&t->mu);
    }
}

strata_status st_ram_tier_table(st_ram_tier *t, int il, int64_t T, const int32_t *ids,
                                int32_t K, const st_expert **table) {
    const int32_t X = t->hp->n_expert;
    const st_expert *views = t->views + (size_t)il * (size_t)X;
    t->n_held = 0;
    if (++t->call == 0) { /* the stamps wrapped: start them over */
        memset(t->seen, 0, sizeof *t->seen * (size_t)X);
        t->call = 1;
    }
    if (t->pipe) st_ram_reap(t, 0); /* finished prefetches become READY (and evictable) */
    for (int64_t i = 0; i < T * K; i++) {
        const int32_t e = ids[i];
        if (e < 0 || e >= X) continue;
        if (t->seen[e] == t->call) continue; /* already made resident for this call */
        t->seen[e] = t->call;
        int late = 0;
        if (t->pipe && st_book_state_of(&t->cache, il, e) == ST_SLOT_LOADING) {
            /* prefetched: wait for the reader thread if it is still at it, then publish */
            for (int32_t k = 0; k < t->n_inflight; k++) {
                const int32_t sl = t->inflight[k];
                if (t->cache.slots[sl].layer != il || t->cache.slots[sl].expert != e) continue;
                late = atomic_load_explicit(&t->fill[sl], memory_order_acquire) < 2;
                t->pf_late += late;
                t->pf_timely += !late;
                st_ram_settle(t, k, 1);
                break;
            }
        }
        int32_t slot = st_book_lookup(&t->cache, il, e);
        t->layer_lookups[il]++;
        t->layer_hits[il] += slot >= 0 && !late;
        if (slot < 0) {
            slot = st_book_claim(&t->cache, il, e, 0);
            if (slot < 0 && t->pipe) { /* the free slots are still being filled: let them finish */
                st_ram_reap(t, 1);
                slot = st_book_claim(&t->cache, il, e, 0);
            }
            if (slot < 0)
                return st_error(STRATA_ERR_INTERNAL, "ram tier: no free slot for layer %d expert %d "
                                "(%d slots)", il, (int)e, (int)t->cache.n_slots);
            strata_status st = st_ram_fill(t, t->readers, &t->loc[(size_t)il * (size_t)X + (size_t)e],
                                           t->mem + (size_t)slot * t->slot_bytes);
            if (st != STRATA_OK) {
                st_book_abort(&t->cache, slot);
                return st;
            }
            t->fills++;
            st_book_publish(&t->cache, slot);
        }
        st_book_acquire(&t->cache, slot);
        t->held[t->n_held++] = slot;
        /* the view of the slot: the mapping's shapes and types, the slot's bytes */
        const st_expert_loc *l = &t->loc[(size_t)il * (size_t)X + (size_t)e];
        uint8_t *p = t->mem + (size_t)slot * t->slot_bytes;
        t->table[e] = views[e];
        t->table[e].gate.data = p;
        t->table[e].up.data = p + st_round_up(l->bytes[0], 64);
        t->table[e].down.data = p + st_round_up(l->bytes[0], 64) + st_round_up(l->bytes[1], 64);
    }
    *table = t->table;
    return STRATA_OK;
}

void st_ram_tier_release(st_ram_tier *t) {
    for (int32_t i = 0; i < t->n_held; i++) st_book_release(&t->cache, t->held[i]);
    t->n_held = 0;
}

/* Zeroes the counters (strata_session_reset_stats). */
void st_ram_tier_reset_counters(st_ram_tier *t) {
    if (!t) return;
    memset(&t->cache.c, 0, sizeof t->cache.c);
    atomic_store(&t->disk_bytes, 0);
    t->pf_issued = t->pf_timely = t->pf_late = 0;
    for (int32_t il = 0; il < t->hp->n_layer; il++) t->layer_lookups[il] = t->layer_hits[il] = 0;
}

void st_ram_tier_counters(const st_ram_tier *t, int64_t *hits, int64_t *misses, int64_t *disk_bytes,
                          int64_t *pf_issued, int64_t *pf_timely, int64_t *pf_late) {
    /* a prefetch that was still being read when its layer needed it missed its deadline: a miss */
    *hits = t ? t->cache.c.hits - t->pf_late : 0;
    *misses = t ? t->cache.c.misses + t->pf_late : 0;
    *disk_bytes = t ? atomic_load(&((st_ram_tier *)t)->disk_bytes) : 0;
    *pf_issued = t ? t->pf_issued : 0;
    *pf_timely = t ? t->pf_timely : 0;
    *pf_late = t ? t->pf_late : 0;
}

void st_ram_tier_missed(const st_ram_tier *t, int il, int64_t T, const int32_t *ids, int32_t K,
                        uint8_t *missed) {
    for (int64_t i = 0; i < T * K; i++) {
        const st_slot_state st = ids[i] < 0 ? ST_SLOT_READY : st_book_state_of(&t->cache, il, ids[i]);
        int ready = st == ST_SLOT_READY;
        if (st == ST_SLOT_LOADING && t->pipe) /* a prefetch that already finished is a completed load */
            for (int32_t k = 0; k < t->n_inflight && !ready; k++) {
                const int32_t sl = t->inflight[k];
                ready = t->cache.slots[sl].layer == il && t->cache.slots[sl].expert == ids[i] &&
                        atomic_load_explicit(&t->fill[sl], memory_order_acquire) == 2;
            }
        missed[i] = (uint8_t)!ready;
    }
}

void st_ram_tier_layer_hits(const st_ram_tier *t, double *min, double *max) {
    int any = 0;
    *min = *max = 0;
    for (int32_t il = 0; t && il < t->hp->n_layer; il++) {
        if (!t->layer_lookups[il]) continue;
        const double r = (double)t->layer_hits[il] / (double)t->layer_lookups[il];
        if (!any || r < *min) *min = r;
        if (!any || r > *max) *max = r;
        any = 1;
    }
}
