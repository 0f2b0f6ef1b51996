/* test_expert_costmodel.c - load-or-compute decisions for missed experts (c/experts/costmodel.c):
 * the extremes (free PCIe: load all; no PCIe: compute all), the balanced split and its makespan,
 * experts needed by many rows going to the GPU, --pcie-frac loading the heaviest share, the same
 * plan for any input order, the CPU's share priced as one step, and the CPU cost measurements
 * on real experts. */
#include "costmodel.h"
#include "quant.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static st_cost_params base(void) {
    st_cost_params p;
    memset(&p, 0, sizeof p);
    p.expert_bytes = 1e6;
    p.pcie_bytes_per_s = 1e9;  /* 1 ms per expert */
    p.cpu_fixed_s = 1e-3;      /* 1 ms per expert, whatever the rows */
    p.pcie_frac = -1;
    return p;
}

static void test_decide(void) {
    st_miss m[10];
    uint8_t load[10];
    for (int i = 0; i < 10; i++) { m[i].expert = i; m[i].rows = 1; m[i].weight = 0.5f - 0.01f * (float)i; }
    st_cost_params p = base();
    double span = 0;

    p.pcie_bytes_per_s = 1e15;
    CHECK(st_cost_decide(&p, m, 10, load, &span) == 10, "free PCIe: every miss loaded");
    p.pcie_bytes_per_s = 0;
    CHECK(st_cost_decide(&p, m, 10, load, &span) == 0 && fabs(span - 10e-3) < 1e-12,
          "no PCIe: every miss computed, 10 ms");

    p = base();
    int n = st_cost_decide(&p, m, 10, load, &span);
    CHECK(n == 5 && fabs(span - 5e-3) < 1e-12, "equal costs: half each, 5 ms (%d loaded, %.3g s)", n, span);
    CHECK(load[0] == 1 && load[1] == 0 && load[2] == 1, "heaviest first, ties to the GPU");

    /* rows: copy 2 ms; CPU 0.5 ms + 1 ms per row. A miss of 8 rows (8.5 ms on the CPU) is loaded,
     * misses of one row (1.5 ms) are computed while the copy runs. */
    p = base();
    p.pcie_bytes_per_s = 5e8;
    p.cpu_fixed_s = 0.5e-3;
    p.cpu_per_row_s = 1e-3;
    st_miss r[3] = {{7, 8, 0.1f}, {3, 1, 0.3f}, {4, 1, 0.2f}};
    uint8_t lr[3];
    n = st_cost_decide(&p, r, 3, lr, &span);
    CHECK(lr[0] == 1 && lr[1] == 0 && n >= 1, "the 8-row expert is loaded, a 1-row one computed");

    /* forced share: the heaviest round(0.3 * 10) = 3 */
    p = base();
    p.pcie_frac = 0.3;
    n = st_cost_decide(&p, m, 10, load, NULL);
    CHECK(n == 3 && load[0] && load[1] && load[2] && !load[3], "pcie-frac 0.3 loads the 3 heaviest");
    p.pcie_frac = 0;
    CHECK(st_cost_decide(&p, m, 10, load, NULL) == 0, "pcie-frac 0 loads none");
    p.pcie_frac = 1;
    CHECK(st_cost_decide(&p, m, 10, load, NULL) == 10, "pcie-frac 1 loads all");

    /* the same plan whatever the input order */
    p = base();
    p.cpu_per_row_s = 0.3e-3;
    st_miss a[8], b[8];
    uint8_t la[8], lb[8];
    for (int i = 0; i < 8; i++) {
        a[i].expert = 10 + i; a[i].rows = 1 + i % 3; a[i].weight = (float)((i * 5) % 8) * 0.05f;
        b[7 - i] = a[i];
    }
    st_cost_decide(&p, a, 8, la, NULL);
    st_cost_decide(&p, b, 8, lb, NULL);
    int same = 1;
    for (int i = 0; i < 8; i++) same &= la[i] == lb[7 - i];
    CHECK(same, "decisions do not depend on the input order");
    CHECK(st_cost_decide(&p, a, 0, la, &span) == 0 && span == 0, "no misses: nothing to do");
}

/* The CPU's share priced as one step (cpu_step_s once, cpu_expert_s an expert): a quiet H100
 * host's qwen3 figures (a copy 7 us + 2.6 MB at 53 GB/s = 56 us; the step 22 us + 23 us an
 * expert, 16 us a further row) send 2 of 8 one-row misses to PCIe, where pricing each expert
 * as a step of its own (45 us) sent 4 and the host waited for the copies. */
static void test_decide_step(void) {
    st_cost_params p;
    memset(&p, 0, sizeof p);
    p.pcie_frac = -1;
    p.expert_bytes = 2.6e6;
    p.pcie_bytes_per_s = 2.6e6 / 49e-6;
    p.pcie_latency_s = 7e-6;
    p.cpu_fixed_s = 29e-6;
    p.cpu_per_row_s = 16e-6;
    st_miss m[8];
    uint8_t load[8];
    for (int i = 0; i < 8; i++) { m[i].expert = 3 * i; m[i].rows = 1; m[i].weight = 0.3f - 0.02f * (float)i; }
    double span = 0;
    int n = st_cost_decide(&p, m, 8, load, &span);
    CHECK(n == 4, "each expert a step of its own (45 us): 4 of 8 loaded (%d)", n);
    p.cpu_step_s = 22e-6;
    p.cpu_expert_s = 23e-6;
    n = st_cost_decide(&p, m, 8, load, &span);
    CHECK(n == 2 && load[1] && load[4] && !load[0] && !load[2] && !load[7],
          "one step, 22 us + 23 us an expert: 2 of 8 loaded, the 2nd and 5th heaviest (%d)", n);
    CHECK(fabs(span - 160e-6) < 1e-9, "predicted 160 us (22 + 6 x 23 on the CPU, 112 on PCIe): %.4g", span);
    /* the step's fixed cost only when the CPU gets any: a free PCIe link loads everything */
    p.pcie_bytes_per_s = 1e15;
    p.pcie_latency_s = 0;
    CHECK(st_cost_decide(&p, m, 8, load, &span) == 8 && span < 1e-6, "free PCIe: all 8 loaded");
    /* rows past the first cost per_row each: a 4-row miss is 23 + 3 x 16 = 71 us on the CPU */
    p.pcie_bytes_per_s = 2.6e6 / 49e-6;
    p.pcie_latency_s = 7e-6;
    p.cpu_step_s = 0;
    st_miss r[1] = {{5, 4, 0.5f}};
    CHECK(st_cost_decide(&p, r, 1, load, &span) == 1 && fabs(span - 56e-6) < 1e-9,
          "a 4-row miss (71 us on the CPU) is loaded (56 us)");
    r[0].rows = 2; /* 39 us */
    CHECK(st_cost_decide(&p, r, 1, load, &span) == 0 && fabs(span - 39e-6) < 1e-9,
          "a 2-row miss (39 us) is computed");
}

/* Stage a CPU layer's batch or compute it: decode steps (1 row per expert) stay on the CPU when a
 * copy costs more than a row, prompts (many rows per expert) are staged. */
static void test_stage(void) {
    st_cost_params p = base();      /* copy 1 ms per expert, CPU 1 ms for one row */
    p.cpu_fixed_s = 0.2e-3;
    p.cpu_per_row_s = 0.8e-3;
    int32_t one[8] = {1, 1, 1, 1, 1, 1, 1, 1}, many[4] = {40, 31, 25, 64};
    double tc = 0, tu = 0;
    CHECK(st_cost_stage(&p, one, 8, &tc, &tu) == 0 && fabs(tc - 8e-3) < 1e-12 && fabs(tu - 8e-3) < 1e-12,
          "one row each: equal, not staged (copy %.3g, cpu %.3g)", tc, tu);
    CHECK(st_cost_stage(&p, many, 4, &tc, &tu) == 1 && tc < tu, "many rows: staged (copy %.3g, cpu %.3g)", tc, tu);
    CHECK(st_cost_stage(&p, many, 0, &tc, &tu) == 0 && tc == 0 && tu == 0, "nothing routed");
    /* the margin: a copy predicted 1.5x faster than the CPU is not taken, 2.5x is */
    p.cpu_fixed_s = 0.0;
    p.cpu_per_row_s = 1.5e-3;
    CHECK(st_cost_stage(&p, one, 8, &tc, &tu) == 0 && tc < tu, "1.5x faster predicted: not staged");
    p.cpu_per_row_s = 2.5e-3;
    CHECK(st_cost_stage(&p, one, 8, &tc, &tu) == 1, "2.5x faster predicted: staged");
    /* the step figures measured: a decode batch priced as one pool step, its dispatch once (the
     * figures of an H200 start-up whose one-expert timing caught a slow dispatch: 107 us + 16 us a
     * row an expert staged every decode step; as one step it stays on the CPU) */
    p = base();
    p.pcie_bytes_per_s = 52.1e9;
    p.pcie_latency_s = 9e-6;
    p.expert_bytes = 2.95e6;
    p.cpu_fixed_s = 107e-6;
    p.cpu_per_row_s = 16e-6;
    p.cpu_step_s = 96e-6;
    p.cpu_expert_s = 24e-6;
    CHECK(st_cost_stage(&p, one, 8, &tc, &tu) == 0 && fabs(tu - (96e-6 + 8 * 24e-6)) < 1e-12,
          "step figures: one step of 8 experts (cpu %.3g s), not staged", tu);
    int32_t big[8] = {64, 64, 64, 64, 64, 64, 64, 64};
    CHECK(st_cost_stage(&p, big, 8, &tc, &tu) == 1 && fabs(tu - (96e-6 + 8 * (24e-6 + 63 * 16e-6))) < 1e-12,
          "step figures: 64 rows an expert staged (cpu %.3g s, copy %.3g s)", tu, tc);
    p.pcie_bytes_per_s = 0;
    CHECK(st_cost_stage(&p, many, 4, NULL, NULL) == 0, "no PCIe: never staged");
}

/* The plan's rate: n CPU layers of one pool step each, or of the split's makespan. */
static void test_plan_rate(void) {
    st_cost_params p;
    memset(&p, 0, sizeof p);
    p.pcie_frac = -1;
    CHECK(st_cost_plan_rate(&p, 8, 48, 0) == 0.0, "no step figures: no plan");
    p.cpu_step_s = 33e-6;
    p.cpu_expert_s = 34e-6;
    p.cpu_per_row_s = 25e-6;
    const double r = st_cost_plan_rate(&p, 8, 48, 0);
    CHECK(fabs(r - 1.0 / (48 * (33e-6 + 8 * 34e-6))) < 1e-9, "one pool step a layer: %.2f tok/s", r);
    CHECK(st_cost_plan_rate(&p, 8, 0, 0) == 0.0 && st_cost_plan_rate(&p, 0, 48, 0) == 0.0, "no layers or experts: 0");
    p.expert_bytes = 2.64e6; /* the H200 host's figures: the split sends some experts over PCIe */
    p.pcie_bytes_per_s = 51.4e9;
    p.pcie_latency_s = 8e-6;
    const double rs = st_cost_plan_rate(&p, 8, 48, 1);
    CHECK(rs > r && rs < 2.0 * r, "the split's makespan beats the CPU alone (%.1f against %.1f tok/s)", rs, r);
}

/* pool_pcie's table: min(m, cap) with a cap; else the cost model's split of m one-row misses: at
 * most m, never fewer for more misses, some but not all of 8 with the H200 host's figures (the
 * count st_cost_decide gives), none without PCIe. */
static void test_split_counts(void) {
    st_cost_params p;
    memset(&p, 0, sizeof p);
    p.pcie_frac = -1;
    int32_t out[33];
    st_cost_split_counts(&p, 33, 3, out);
    CHECK(out[0] == 0 && out[2] == 2 && out[3] == 3 && out[32] == 3, "a cap: min(m, 3) (%d %d %d %d)", out[0],
          out[2], out[3], out[32]);
    p.cpu_step_s = 33e-6;
    p.cpu_expert_s = 34e-6;
    p.cpu_per_row_s = 25e-6;
    p.expert_bytes = 2.64e6;
    p.pcie_bytes_per_s = 51.4e9;
    p.pcie_latency_s = 8e-6;
    st_cost_split_counts(&p, 33, -1, out);
    int ok = out[0] == 0;
    for (int m = 1; m < 33; m++) ok = ok && out[m] >= 0 && out[m] <= m && out[m] >= out[m - 1];
    CHECK(ok && out[8] > 0 && out[8] < 8, "the cost model's split: 0 <= J(m) <= m, growing; J(8) = %d", out[8]);
    uint8_t ld[8];
    st_miss ms[8];
    for (int i = 0; i < 8; i++) ms[i] = (st_miss){i, 1, 1.0f};
    CHECK(out[8] == st_cost_decide(&p, ms, 8, ld, NULL), "J(8) is st_cost_decide's count");
    p.pcie_bytes_per_s = 0; /* no PCIe: nothing to the GPU */
    st_cost_split_counts(&p, 9, -1, out);
    CHECK(out[8] == 0, "no PCIe: J(8) = %d", out[8]);
}

static void test_measure(void) {
    const int64_t E = 256, F = 256;
    const size_t rb = (size_t)strata_row_bytes(STRATA_TYPE_Q8_0, E);
    uint8_t *g = calloc(F, rb), *u = calloc(F, rb), *d = calloc(E, rb);
    st_expert e = {0};
    memset(&e, 0, sizeof e);
    st_tensor t = {STRATA_TYPE_Q8_0, g, {E, F, 1}, rb, "gate"};
    e.gate = t;
    t.data = u; e.up = t;
    t.data = d; t.ne[0] = F; t.ne[1] = E; e.down = t;
    double fixed = -1, per_row = -1;
    CHECK(st_cost_measure_cpu(NULL, &e, &fixed, &per_row) == 0, "measure");
    printf("CPU expert cost (256 x 256 q8_0, one thread): %.2f us fixed + %.2f us per row\n",
           fixed * 1e6, per_row * 1e6);
    CHECK(fixed >= 0 && per_row >= 0 && fixed + per_row > 0 && fixed + per_row < 0.1,
          "a plausible cost: %.3g + %.3g s", fixed, per_row);
    free(g); free(u); free(d);
}

/* The CPU's share measured as a step over a layer's experts: 10 experts of 256 x 256 q8_0. */
static void test_measure_step(void) {
    const int64_t E = 256, F = 256;
    const int32_t X = 10;
    const size_t rb = (size_t)strata_row_bytes(STRATA_TYPE_Q8_0, E);
    uint8_t *w = calloc((size_t)X * 3 * F, rb);
    st_expert ex[10] = {0};
    memset(ex, 0, sizeof ex);
    for (int i = 0; i < X; i++) {
        uint8_t *b = w + (size_t)i * 3 * F * rb;
        for (size_t j = 0; j < 3 * F * rb; j += 97) b[j] = (uint8_t)(j * 31 + i); /* (scales too) */
        st_tensor t = {STRATA_TYPE_Q8_0, b, {E, F, 1}, rb, "gate"};
        ex[i].gate = t;
        t.data = b + F * rb; ex[i].up = t;
        t.data = b + 2 * F * rb; t.ne[0] = F; t.ne[1] = E; ex[i].down = t;
    }
    double step = -1, per_expert = -1;
    CHECK(st_cost_measure_cpu_step(NULL, ex, X, &step, &per_expert) == 0, "measure the step");
    printf("CPU share (256 x 256 q8_0 experts, one thread): %.2f us a step + %.2f us an expert\n",
           step * 1e6, per_expert * 1e6);
    CHECK(step >= 0 && per_expert > 0 && step + per_expert < 0.1, "a plausible cost: %.3g + %.3g s", step, per_expert);
    CHECK(st_cost_measure_cpu_step(NULL, ex, 1, &step, &per_expert) == 0 && per_expert > 0 && step == 0,
          "one expert in the layer: all of it per expert");
    free(w);
}

int main(void) {
    test_decide();
    test_decide_step();
    test_stage();
    test_plan_rate();
    test_split_counts();
    test_measure();
    test_measure_step();
    return test_report();
}
