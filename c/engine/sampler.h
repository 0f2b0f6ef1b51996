/* sampler.h - the sampler's internal hooks (sampler.c; the sampler itself is public, strata.h). */
#ifndef STRATA_SAMPLER_H
#define STRATA_SAMPLER_H

#include "strata.h"

/* on = 1: every strata_sampler_sample call takes the full chain over the whole vocabulary instead
 * of the one-pass top-k path (which gives the same tokens); for the tests that show it. */
void st_sampler_force_full(strata_sampler *s, int on);

#endif /* STRATA_SAMPLER_H */
