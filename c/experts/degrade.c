/* degrade.c - the DEGRADE_ZERO drop rule (degrade.h): per-position tau gate on missed slots,
 * decode windows only, rescue of each position's heaviest slot, no renormalization; and the
 * route tail skip's rule. */
#include "degrade.h"
#include "route_tail.h"

#include <stdlib.h>

int st_degrade_apply(const st_degrade_params *p, int prompt, int64_t S, int32_t k, int32_t *ids,
                     const float *wts, const uint8_t *missed, st_degrade_stats *stats, int il) {
    if (!p || !p->enabled || prompt || S < 1 || S > ST_DEGRADE_MAX_ROWS || k < 1) return 0;
    int dropped = 0;
    for (int64_t t = 0; t < S; t++) {
        int32_t *id = ids + t * k;
        const float *w = wts + t * k;
        int kept = 0, heaviest = 0;
        int drop[64];
        const int kk = k < 64 ? k : 64; /* routers choose at most a few dozen experts */
        for (int s = 0; s < kk; s++) {
            const int miss = p->eval || (missed && missed[t * k + s]);
            drop[s] = miss && id[s] >= 0 && w[s] < p->tau;
            kept += !drop[s];
            if (w[s] > w[heaviest]) heaviest = s;
        }
        if (kept == 0) drop[heaviest] = 0; /* rescue: keep this position's heaviest slot */
        for (int s = 0; s < kk; s++)
            if (drop[s]) { id[s] = -1; dropped++; }
    }
    if (stats && il >= 0 && il < stats->n_layer) {
        stats->eligible[il] += S * k;
        stats->zeroed[il] += dropped;
        stats->eligible_total += S * k;
        stats->zeroed_total += dropped;
    }
    return dropped;
}

int st_degrade_drop_missed(int64_t n, int32_t *ids, const uint8_t *missed) {
    int dropped = 0;
    for (int64_t i = 0; i < n; i++)
        if (missed[i] && ids[i] >= 0) {
            ids[i] = -1;
            dropped++;
        }
    return dropped;
}

int st_degrade_stats_init(st_degrade_stats *s, int32_t n_layer) {
    s->n_layer = n_layer;
    s->eligible_total = s->zeroed_total = 0;
    s->eligible = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *s->eligible);
    s->zeroed = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *s->zeroed);
    if (!s->eligible || !s->zeroed) {
        st_degrade_stats_free(s);
        return -1;
    }
    return 0;
}

void st_degrade_stats_free(st_degrade_stats *s) {
    if (!s) return;
    free(s->eligible);
    free(s->zeroed);
    s->eligible = s->zeroed = NULL;
    s->n_layer = 0;
}

int64_t st_route_tail_skip(int64_t T, int32_t k, int32_t *ids, const float *wts, float p) {
    if (!(p > 0.0f) || k < 2) return 0;
    const int kk = k < 64 ? k : 64;
    int64_t dropped = 0;
    for (int64_t t = 0; t < T; t++) dropped += st_route_tail_row(ids + t * k, wts + t * k, kk, p);
    return dropped;
}
