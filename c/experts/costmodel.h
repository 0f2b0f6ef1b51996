/* costmodel.h - where a missed expert is served: loaded over PCIe into a GPU cache slot (then
 * computed by the GPU) or computed by the CPU expert pool from RAM. The two run at the same time,
 * so a layer's misses are split between them: each miss goes, heaviest first, to the resource that
 * would finish it earlier given what is already queued there (list scheduling on two machines).
 * Costs come from measurements: the PCIe rate and per-copy latency (measured by the GPU side) and
 * the CPU's time to run one expert for r rows, t(r) = cpu_fixed + r * cpu_per_row (measured here
 * with the session's own kernels, st_cost_measure_cpu). --pcie-frac F overrides the choice: the
 * heaviest round(F * n) misses are loaded, the rest computed.
 * Pure functions, no state; thread-safe. */
#ifndef STRATA_EXPERT_COSTMODEL_H
#define STRATA_EXPERT_COSTMODEL_H

#include "ops.h"

#include <stdint.h>

typedef struct {
    double pcie_bytes_per_s;   /* host -> device copy rate of expert-sized copies */
    double pcie_latency_s;     /* fixed cost per copy */
    double gpu_s;              /* GPU compute of a loaded expert (small; 0 is fine) */
    double cpu_fixed_s;        /* CPU: one expert, t(r) = cpu_fixed_s + r * cpu_per_row_s */
    double cpu_per_row_s;
    /* The CPU's share of a split runs as one step on the pool (st_moe_ffn: every expert's rows in
     * one parallel region): measured that way (st_cost_measure_cpu_step), a share of experts
     * costs cpu_step_s once plus cpu_expert_s + (r - 1) * cpu_per_row_s each. 0 (unmeasured):
     * st_cost_decide prices each expert as a step of its own (t(r) above), which on the hosts
     * measured counted the pool's dispatch once per expert and sent too many to PCIe. */
    double cpu_step_s;
    double cpu_expert_s;
    double expert_bytes;       /* bytes of one expert (gate + up + down) */
    double pcie_frac;          /* < 0: choose by cost; 0..1: the share of misses to load */
} st_cost_params;

typedef struct {
    int32_t expert;            /* id */
    int32_t rows;              /* rows (tokens) of the step that need it */
    float weight;              /* largest gate weight among them (heaviest first) */
} st_miss;

/* Decides each of n misses: load[i] = 1 (over PCIe into a slot) or 0 (CPU pool). The order of
 * consideration is by weight, then rows, then id (deterministic). *makespan (may be NULL) gets the
 * predicted time until both resources are done. Returns the number loaded. With cpu_expert_s >
 * 0 the CPU's share costs cpu_step_s once (when it gets any) plus cpu_expert_s + (r - 1) *
 * cpu_per_row_s an expert. */
int st_cost_decide(const st_cost_params *p, const st_miss *misses, int n, uint8_t *load,
                   double *makespan);

/* A batch of a layer whose experts live in RAM (n_cpu_moe): stage it (copy its n routed experts
 * over PCIe and compute them on the GPU, what llama.cpp does for prompts) or compute it on the CPU
 * (t(rows[i]) for each expert, one after another on the pool; with the step figures measured,
 * cpu_expert_s > 0, the batch as one step: cpu_step_s once plus cpu_expert_s + (r - 1) *
 * cpu_per_row_s an expert, so the pool's dispatch is not counted once per expert). 1 when
 * staging is predicted ST_STAGE_MARGIN times faster; *t_copy and *t_cpu (may be NULL) get the
 * two predictions. pcie_frac is not used. */
#define ST_STAGE_MARGIN 2.0
/* Why 2: the copy rate is calibrated warm (best of 3 copies of one expert) and a staged batch's
 * copies run one after another before its kernels; on the H200, --cpu-moe decode steps staged by
 * the unmargined model took 1.9x the predicted copy time (27 tok/s against 39 on the CPU). */
int st_cost_stage(const st_cost_params *p, const int32_t *rows, int n, double *t_copy, double *t_cpu);

/* pool_pcie's table: for m = 0 .. n - 1 distinct missed experts of one row each (a decode step's),
 * how many the split sends to the GPU (st_cost_decide on m such misses), or with cap >= 0 simply
 * min(m, cap): out[m]. 0 where the decision could not be made (no memory). */
void st_cost_split_counts(const st_cost_params *p, int32_t n, int32_t cap, int32_t *out);

/* The decode rate n_cpu_layers CPU layers allow, k experts a token each (one row): a layer takes
 * one pool step for its k experts (cpu_step_s + k cpu_expert_s), or with split the makespan of
 * st_cost_decide on them (PCIe and the CPU at once); tokens a second over all the layers, the
 * GPU's own time not counted. 0 without the step figures (cpu_expert_s 0) or layers. */
double st_cost_plan_rate(const st_cost_params *p, int32_t k, int32_t n_cpu_layers, int split);

/* Measures cpu_fixed_s and cpu_per_row_s for experts like e (its types and shapes) on tp: the
 * expert step for 1 and for 8 rows, best of a few runs. 0 on success, -1 on no memory. */
int st_cost_measure_cpu(st_threadpool *tp, const st_expert *e, double *cpu_fixed_s,
                        double *cpu_per_row_s);

/* Measures cpu_step_s and cpu_expert_s on tp with the n_expert experts of one layer: one token's
 * step over 1 expert and over min(8, n_expert) distinct experts (best of 9, after an untimed
 * pass over the same experts; each run takes experts the previous runs did not read while there
 * are enough, so the weights come from memory as in a decode step, not from the caches). 0 on
 * success, -1 on no memory. */
int st_cost_measure_cpu_step(st_threadpool *tp, const st_expert *experts, int32_t n_expert,
                             double *cpu_step_s, double *cpu_expert_s);

#endif /* STRATA_EXPERT_COSTMODEL_H */
