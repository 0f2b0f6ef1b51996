/* gpu_tier.h - the GPU tier of routed experts (gpu_tier.c; CUDA builds): n slots of device memory,
 * each the size of the largest routed expert, whose residency the slot book (slot_book.h)
 * decides: the expert cache of CUDA sessions with expert_cache, and the stage slots that batches
 * of CPU layers are copied into. It knows the model's shape, the experts' host views and the RAM
 * tier it may load from, and adds the bytes it copies to a counter: nothing of sessions.
 *
 * create allocates n_slots device slots; table demand-loads the experts of ids ([n][K], host) of
 * layer il and gives the device pointer table; missed marks ids whose expert is not resident;
 * counters for the stats. */
#ifndef STRATA_GPU_TIER_H
#define STRATA_GPU_TIER_H

#include "model.h"
#include "ops.h"
#include "ram_tier.h"

typedef struct st_gpu_tier st_gpu_tier;

typedef struct {
    const st_hparams *hp;
    const st_expert *experts;  /* [n_layer][n_expert] the experts' host views: the loads' source */
    st_ram_tier *ram;          /* the RAM tier to load through, or NULL (the views' bytes) */
    int64_t *pcie_bytes;       /* the counter the loads' bytes are added to */
} st_gpu_tier_ctx;

strata_status st_gpu_tier_create(const st_gpu_tier_ctx *ctx, int32_t n_slots, st_gpu_tier **out);
size_t st_gpu_tier_slot_bytes(const st_gpu_tier_ctx *ctx);   /* the largest routed expert, aligned */
size_t st_gpu_tier_expert_bytes(const st_expert *e);         /* one expert as a slot lays it out */
void st_gpu_tier_free(st_gpu_tier *c);
strata_status st_gpu_tier_table(st_gpu_tier *c, int il, const int32_t *ids,
                                 int64_t n, int32_t K, int keep_held, void *stream, const void **d_table);
/* keep_held: the table's slots stay held (not evictable) until this call, made once the kernel
 * reading them is enqueued (so a prefetch issued in between cannot take them). */
void st_gpu_tier_release_held(st_gpu_tier *c);
/* Demand loads of later table calls as copies enqueued on `stream` (the compute stream the table
 * is used on) instead of synchronous ones, and the table uploaded the same way: the host goes on
 * (e.g. to compute the CPU's share) while they run. Stream order keeps a slot from being
 * overwritten before the kernels queued earlier have read it. Not with prefetch or a RAM tier
 * (their slots' states assume synchronous copies). */
strata_status st_gpu_tier_async_loads(st_gpu_tier *c, void *stream);
/* The PCIe figures of the cost model, measured with layer il's first expert copied into slot 0
 * (which must not be in use): bytes per second of an expert's copies, seconds of a small copy. */
strata_status st_gpu_tier_measure_pcie(st_gpu_tier *c, int il, double *bytes_per_s,
                                        double *latency_s);
/* Prefetch (gpu_prefetch): a copy stream and an event per slot. st_gpu_tier_prefetch claims free
 * slots for the experts of ids[n] (layer il) that have none and copies them on the copy stream
 * after the compute stream's work so far; a later table call makes its stream wait for the copies
 * it needs (counted late) or finds them done (timely). */
strata_status st_gpu_tier_enable_prefetch(st_gpu_tier *c);
strata_status st_gpu_tier_prefetch(st_gpu_tier *c, int il, const int32_t *ids,
                                    int64_t n, void *stream);
void st_gpu_tier_prefetch_counters(const st_gpu_tier *c, int64_t *issued, int64_t *timely, int64_t *late);
/* missed[i] = 1 when expert ids[i] (>= 0) of layer il is not resident: neither READY in a slot
 * nor a prefetch whose copy has completed (DEGRADE_ZERO's and the self-draft's miss test). */
void st_gpu_tier_missed(const st_gpu_tier *c, int il, const int32_t *ids, int64_t n, uint8_t *missed);
/* Misses computed by the expert pool (cuda_doorbell with expert_cache): the residency of every
 * layer as the device reads it inside a step with no host round trip: *d_where ([n_layer]
 * [n_expert] int32, nonzero: READY in a slot) and *d_tables ([n_layer][n_expert] st_cuda_expert,
 * the slots' descriptors); after the first call only the layers whose residency changed go up
 * again (synchronous copies: call it before the step's kernels are enqueued). */
strata_status st_gpu_tier_export(st_gpu_tier *c, const void **d_tables,
                                  const int32_t **d_where);
/* pool_pcie: the exported tables give a non-resident expert the descriptors of its host views
 * (the pinned copy, laid out as a slot; read by a kernel over PCIe under unified addressing)
 * instead of zeros; d_where still says 0 for it. Set before the first export. */
void st_gpu_tier_set_zero_copy(st_gpu_tier *c, int on);
/* After such a step: layer il's routed ids (n, host) are looked up (the use counts, the recency
 * clock, the hit and miss counters), and its missed experts loaded into slots (synchronous
 * copies) for the steps to come: into EMPTY slots while *empty lasts, then in place of the
 * slot book's victims while *budget lasts (both decremented); *resident (may be NULL) gets how many of the n
 * ids were resident during the step. st_gpu_tier_empty_slots: the EMPTY slots now. */
int32_t st_gpu_tier_empty_slots(const st_gpu_tier *c);
strata_status st_gpu_tier_after_step(st_gpu_tier *c, int il, const int32_t *ids, int64_t n,
                                      int32_t *empty, int32_t *budget, int64_t *resident);
/* Admission (placement cache_admit): a miss loaded for the steps to come (after_step) or chosen
 * for a load by a split takes a slot in place of a resident expert only when st_book_admits says
 * so; st_gpu_tier_admits asks for one expert. */
void st_gpu_tier_set_admit(st_gpu_tier *c, int on);
int st_gpu_tier_admits(const st_gpu_tier *c, int il, int32_t e);
/* Look-ups of layer il's experts that a split's CPU share computes (ids[n], host; -1 skipped):
 * each distinct one counted as a miss and a use, nothing loaded. */
void st_gpu_tier_count_misses(st_gpu_tier *c, int il, const int32_t *ids, int64_t n);
/* Zeroes the counters (strata_session_reset_stats). */
void st_gpu_tier_reset_counters(st_gpu_tier *c);
void st_gpu_tier_counters(const st_gpu_tier *c, int32_t *slots, int64_t *hits, int64_t *misses,
                           int64_t *bytes, double *layer_min, double *layer_max);
#endif /* STRATA_GPU_TIER_H */
