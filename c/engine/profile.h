/* profile.h - phase timing of forward passes (strata_session_params.profile): st_prof_start marks
 * the start of a pass, st_prof_mark(s, phase) adds the time since the last mark to phase. Both are
 * no-ops with profile off. Used by every backend's forward pass. */
#ifndef STRATA_PROFILE_H
#define STRATA_PROFILE_H

#include "strata.h"

struct strata_session;

double st_prof_clock(void); /* monotonic seconds */
void st_prof_start(struct strata_session *s);
void st_prof_mark(struct strata_session *s, strata_phase phase);

#endif /* STRATA_PROFILE_H */
