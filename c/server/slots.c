/* slots.c - the server's slots (server_impl.h): each request takes the free slot whose cached
 * tokens share the longest prefix with its prompt, requests waiting in arrival order (tickets),
 * and gives it back with its session's stats kept for /metrics. */
#include "server_impl.h"

static int32_t srv_common_prefix(const srv_slot *s, const strata_token *p, int32_t n) {
    int32_t k = 0;
    while (k < n && k < s->n_tokens && s->tokens[k] == p[k]) k++;
    return k;
}

srv_slot *srv_slot_acquire(srv_ctx *c, const strata_token *prompt, int32_t n) {
    pthread_mutex_lock(&c->mu);
    if (c->stopping || c->m.queued >= c->cfg->queue) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    const uint64_t ticket = c->next_ticket++;
    c->m.queued++;
    srv_slot *best = NULL;
    for (;;) {
        if (c->stopping) { /* (its ticket is never served: nobody comes after the stop) */
            c->m.queued--;
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        if (ticket == c->serving) { /* this request's turn: the best free slot, if any */
            int32_t best_k = -1;
            for (int i = 0; i < c->n_slots; i++) {
                srv_slot *s = &c->slots[i];
                if (s->busy) continue;
                const int32_t k = srv_common_prefix(s, prompt, n);
                if (k > best_k) { best = s; best_k = k; }
            }
            if (best) break;
        }
        pthread_cond_wait(&c->cv, &c->mu);
    }
    best->busy = 1;
    c->serving++;
    c->m.queued--;
    c->m.processing++;
    pthread_cond_broadcast(&c->cv); /* the next ticket may take another free slot */
    pthread_mutex_unlock(&c->mu);
    return best;
}

void srv_slot_release(srv_ctx *c, srv_slot *s) {
    strata_session_stats st;
    strata_spec_stats sp;
    const int have = strata_session_get_stats(s->session, &st) == STRATA_OK;
    const int have_sp = strata_session_get_spec_stats(s->session, &sp) == STRATA_OK;
    pthread_mutex_lock(&c->mu);
    if (have) s->stats = st;
    if (have_sp) s->spec = sp;
    s->busy = 0;
    c->m.processing--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

