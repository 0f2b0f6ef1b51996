/* profile.c - phase timing of forward passes (profile.h) and the phases' names. */
#include "profile.h"
#include "session.h"

#include <time.h>

double st_prof_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void st_prof_start(strata_session *s) {
    if (s->profile) s->prof_t = st_prof_clock();
}

void st_prof_mark(strata_session *s, strata_phase phase) {
    if (!s->profile) return;
    const double t = st_prof_clock();
    s->prof[phase] += t - s->prof_t;
    s->prof_t = t;
}

const char *strata_phase_name(strata_phase phase) {
    static const char *const names[STRATA_PHASE_COUNT] = {"embed", "qkv", "attention", "attn_out",
                                                          "router", "experts", "shared", "output"};
    return (int)phase >= 0 && phase < STRATA_PHASE_COUNT ? names[phase] : "?";
}
