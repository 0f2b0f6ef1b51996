/* mtp.h - the MTP drafter (mtp_cpu.c): the model's nextn layer proposing the next tokens from the
 * target's final hidden states, behind strata_drafter_mtp_create (drafter.c). The layer runs on
 * the session's device where its backend can put it there (a CUDA session: mtp_gpu.c), else on
 * the CPU (a CPU session, or a CUDA session copying its hidden states down: forward_cuda.c). */
#ifndef STRATA_MTP_H
#define STRATA_MTP_H

#include "session.h"

typedef struct st_mtp st_mtp;

/* Attaches to s (a session of a model with MTP layers bound): from now on s keeps every
 * position's final-normed hidden state (on the device with the layer, else s->mtp_h); positions
 * decoded before have none (their MTP rows see zeros). *out is set first, so a failure leaves
 * what was built for st_mtp_free. */
strata_status st_mtp_create(strata_session *s, st_mtp **out);
/* Where the layer runs: "on the GPU (cuda)", "on the CPU", "on the CPU (why not on the GPU)". */
const char *st_mtp_where(const st_mtp *d);
/* Detaches from the session (the layer's device state or s->mtp_h freed) and frees d. */
void st_mtp_free(st_mtp *d);
/* Up to max greedy drafts after the history h (the session's tokens and the newest one). */
strata_status st_mtp_propose(st_mtp *d, const strata_token *h, int64_t nh, int32_t max, strata_token *out,
                             int32_t *n_out);

#endif /* STRATA_MTP_H */
