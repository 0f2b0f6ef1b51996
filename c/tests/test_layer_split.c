/* test_layer_split.c - the layer split's rules (c/experts/layer_split.c, issue 36) and NCCL's
 * run-time loader (c/engine/cuda/nccl.c), without a GPU: the proportional split (each stage at
 * least one layer, largest remainders, the sum kept), the resolution of given and auto stages (a
 * device named twice shares its memory), every refusal with the option it names (counts that do
 * not sum, devices that do not exist, CPU sessions, the options that need two devices or NCCL,
 * the placement options a split does not take), each stage's expert cache (the counts, their
 * defaults, auto's shares), the one-device session asked nothing; then NCCL
 * absent (a library that is not there, one that is not NCCL) with its reason. */
#include "layer_split.h"
#include "nccl.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static void test_proportional(void) {
    int32_t out[8];
    const double even[2] = {1, 1};
    st_split_proportional(24, 2, even, out);
    CHECK(out[0] == 12 && out[1] == 12, "24 over two equal devices: %d,%d", out[0], out[1]);
    const double w3[3] = {80, 40, 40};
    st_split_proportional(25, 3, w3, out);
    CHECK(out[0] + out[1] + out[2] == 25, "the sum is kept: %d", out[0] + out[1] + out[2]);
    CHECK(out[0] == 12 && out[1] == 7 && out[2] == 6, "80:40:40 of 25 (one each, 22 by share): %d,%d,%d",
          out[0], out[1], out[2]);
    const double tiny[2] = {1e12, 1};
    st_split_proportional(4, 2, tiny, out);
    CHECK(out[0] == 3 && out[1] == 1, "a device with almost nothing still gets a layer: %d,%d", out[0], out[1]);
    const double same[4] = {5, 5, 5, 5};
    st_split_proportional(4, 4, same, out);
    CHECK(out[0] == 1 && out[1] == 1 && out[2] == 1 && out[3] == 1, "as many stages as layers: one each");
}

static void test_resolve(void) {
    strata_session_params p = strata_session_default_params();
    st_layer_split sp;
    p.split.n_stages = 3;
    p.split.layers[0] = 10, p.split.layers[1] = 4, p.split.layers[2] = 10;
    p.split.device[0] = 0, p.split.device[1] = 0, p.split.device[2] = 1;
    st_split_resolve(&p.split, 24, 2, NULL, &sp);
    CHECK(sp.n_stages == 3 && sp.first[0] == 0 && sp.first[1] == 10 && sp.first[2] == 14 && sp.first[3] == 24,
          "given: consecutive ranges 0,10,14,24 (%d,%d,%d,%d)", sp.first[0], sp.first[1], sp.first[2], sp.first[3]);
    CHECK(sp.device[0] == 0 && sp.device[1] == 0 && sp.device[2] == 1, "the devices as given");
    CHECK(st_split_stage_of(&sp, 0) == 0 && st_split_stage_of(&sp, 13) == 1 && st_split_stage_of(&sp, 23) == 2,
          "the stage of a layer");
    strata_split_params a = strata_session_default_params().split;
    a.auto_layers = 1; /* no stages given: one per device */
    const int64_t free2[2] = {60LL << 30, 20LL << 30};
    st_split_resolve(&a, 24, 2, free2, &sp);
    CHECK(sp.n_stages == 2 && sp.first[1] == 18 && sp.device[1] == 1, "auto 60:20 GiB of 24 layers: 18 + 6 (%d)",
          sp.first[1]);
    a.n_stages = 3; /* device 0 named twice shares its 60 GiB: 30:30:20 */
    a.device[0] = 0, a.device[1] = 0, a.device[2] = 1;
    st_split_resolve(&a, 24, 2, free2, &sp);
    CHECK(sp.first[1] == 9 && sp.first[2] == 18 && sp.first[3] == 24, "auto 30:30:20 of 24: 9,9,6 (%d,%d,%d)",
          sp.first[1], sp.first[2] - sp.first[1], sp.first[3] - sp.first[2]);
    CHECK(st_split_stage_of(&(st_layer_split){0}, 5) == 0, "no split: stage 0");
}

/* The check's status, and its message containing want. */
static void refuse(const strata_session_params *p, int32_t n_layer, int n_dev, const char *nccl, strata_status st,
                   const char *want) {
    const strata_status got = st_split_check(p, n_layer, n_dev, nccl);
    CHECK(got == st && strstr(strata_last_error(), want), "want %d '%s', got %d '%s'", (int)st, want, (int)got,
          strata_last_error());
}

static strata_session_params split2(int32_t a, int32_t b, int32_t d0, int32_t d1) {
    strata_session_params p = strata_session_default_params();
    p.backend = STRATA_BACKEND_CUDA;
    p.split.n_stages = 2;
    p.split.layers[0] = a, p.split.layers[1] = b;
    p.split.device[0] = d0, p.split.device[1] = d1;
    return p;
}

static void test_check(void) {
    strata_session_params p = strata_session_default_params();
    CHECK(st_split_check(&p, 24, 0, NULL) == STRATA_OK, "no split, no device: fine");
    p = split2(12, 12, 0, 0);
    CHECK(st_split_check(&p, 24, 1, NULL) == STRATA_OK, "12,12 on device 0 twice, one device: fine");
    p = split2(12, 12, 0, 1);
    CHECK(st_split_check(&p, 24, 2, NULL) == STRATA_OK, "12,12 on devices 0,1 of two: fine");
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "split_device 1 of stage 1: no such CUDA device (this machine has 1");
    refuse(&p, 24, 0, NULL, STRATA_ERR_UNSUPPORTED, "no CUDA device here");
    p = split2(12, 10, 0, 0);
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "layer_split sums to 22 layers; the model has 24");
    p = split2(24, 0, 0, 0);
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "stage 1 has 0 layers");
    p = split2(12, 12, 0, 0);
    p.backend = STRATA_BACKEND_CPU;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "layer_split is for CUDA sessions");
    p = split2(12, 12, 0, 0);
    p.split.n_stages = 9;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "9 stages (1..8");
    p = split2(1, 1, 0, 0);
    p.split.n_stages = 3, p.split.layers[2] = 1;
    refuse(&p, 2, 1, NULL, STRATA_ERR_INVALID_ARG, "3 stages for 2 layers");
    p = split2(12, 12, 0, 0);
    p.split.auto_layers = 1;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "split auto chooses layer_split itself");
    p = split2(12, 12, 0, 0);
    p.split.pipeline_windows = 1;
    refuse(&p, 24, 1, NULL, STRATA_ERR_UNSUPPORTED, "pipeline_windows needs stages on two distinct CUDA devices");
    p = split2(12, 12, 0, 1);
    p.split.pipeline_windows = 1;
    refuse(&p, 24, 2, NULL, STRATA_ERR_UNSUPPORTED, "pipeline_windows: not built yet");
    p = strata_session_default_params();
    p.split.pipeline_windows = 1;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "pipeline_windows needs a layer split");
    p = strata_session_default_params();
    p.split.peer_device = 1;
    refuse(&p, 24, 2, "libnccl.so.2 not found", STRATA_ERR_UNSUPPORTED, "peer_device needs NCCL: libnccl.so.2 not found");
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "peer_device 1: no such CUDA device");
    refuse(&p, 24, 2, NULL, STRATA_ERR_UNSUPPORTED, "peer_device (experts on another device over NCCL): not built yet");
    p = split2(12, 12, 0, 0);
    p.split.expert_cache[1] = 64; /* a stage's cache without stage 0's */
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "expert_cache_device1 needs expert_cache");
    p.placement.expert_cache = 64;
    CHECK(st_split_check(&p, 24, 1, NULL) == STRATA_OK, "expert_cache 64, expert_cache_device1 64: taken (%s)",
          strata_last_error());
    p.split.expert_cache[1] = 0, p.split.expert_cache[2] = 64;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "expert_cache_device2: the split has 2 stages");
    p.split.expert_cache[2] = 0, p.split.expert_cache[0] = 64;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "expert_cache_device0: stage 0's cache is expert_cache");
    /* expert_cache under a split (auto or a count, with cpu_misses, gpu_prefetch, cache_admit, and
     * with n_cpu_moe): taken, a cache per stage */
    for (int i = 0; i < 3; i++) {
        p = split2(12, 12, 0, 0);
        p.placement.expert_cache = i == 0 ? -1 : 64;
        p.placement.cpu_misses = i == 1, p.placement.gpu_prefetch = i == 1, p.placement.cache_admit = i == 1;
        p.placement.n_cpu_moe = i == 2 ? 4 : 0;
        p.split.expert_cache[1] = i == 1 ? -1 : 0;
        const strata_status st = st_split_check(&p, 24, 1, NULL);
        CHECK(st == STRATA_OK, "expert_cache case %d under a split: taken, got %d '%s'", i, (int)st,
              strata_last_error());
    }
    /* n_cpu_moe is taken (inside stage 0, across the stages, every layer), with what it brings */
    const int32_t cpu_counts[3] = {4, 16, -1};
    for (int i = 0; i < 3; i++) {
        p = split2(12, 12, 0, 0);
        p.placement.n_cpu_moe = cpu_counts[i];
        p.placement.stage_experts = 32, p.placement.cpu_warm = 1, p.placement.stage_ahead = 1;
        strata_status st = st_split_check(&p, 24, 1, NULL);
        CHECK(st == STRATA_OK, "n_cpu_moe %d under a split: taken, got %d '%s'", (int)cpu_counts[i], (int)st,
              strata_last_error());
    }
    /* and what it does not take yet, with it or alone, each named */
    static const char *const not_yet[5] = {"gpu_mem", "ram_budget", "doorbell", "route_tail_skip", "degrade_zero"};
    for (int i = 0; i < 5; i++) {
        p = split2(12, 12, 0, 0);
        p.placement.n_cpu_moe = 4;
        p.placement.expert_cache = i == 2 ? 64 : 0; /* (the doorbell with a cache as well) */
        if (i == 0) p.placement.gpu_mem = (int64_t)1 << 30;
        if (i == 1) p.placement.ram_budget = (int64_t)1 << 30;
        if (i == 2) p.placement.doorbell = 1;
        if (i == 3) p.route_tail_skip = 0.1f;
        if (i == 4) p.degrade_zero = 1;
        char want[96];
        snprintf(want, sizeof want, "layer_split with %s: not built yet", not_yet[i]);
        refuse(&p, 24, 1, NULL, STRATA_ERR_UNSUPPORTED, want);
    }
}

/* Each stage's expert cache (st_split_caches): stage 0 expert_cache, a named stage its own, the
 * others scaled by their MoE layers over stage 0's or auto, none without MoE layers, held to the
 * stage's own experts; auto stages share a device's room; a named count below n_expert refused. */
static void test_caches(void) {
    strata_split_params q = strata_session_default_params().split;
    st_layer_split sp;
    q.n_stages = 4;
    q.layers[0] = 8, q.layers[1] = 8, q.layers[2] = 4, q.layers[3] = 4;
    q.device[0] = 0, q.device[1] = 0, q.device[2] = 1, q.device[3] = 0;
    st_split_resolve(&q, 24, 2, NULL, &sp);
    int32_t moe[4] = {6, 8, 4, 4}, slots[4], share[4]; /* stage 0: two leading dense layers */
    CHECK(st_split_caches(&q, 0, 16, &sp, moe, slots, share) == STRATA_OK && !slots[0] && !slots[1] &&
          !slots[2] && !slots[3], "no expert_cache: no stage has one");
    CHECK(st_split_caches(&q, 60, 16, &sp, moe, slots, share) == STRATA_OK, "60: %s", strata_last_error());
    CHECK(slots[0] == 60 && slots[1] == 80 && slots[2] == 40 && slots[3] == 40,
          "60 for stage 0's 6 MoE layers: 80, 40, 40 by theirs (%d,%d,%d,%d)", slots[0], slots[1], slots[2], slots[3]);
    CHECK(share[0] == 1 && share[1] == 1 && share[3] == 1, "counts: share 1");
    CHECK(st_split_caches(&q, 20, 16, &sp, moe, slots, share) == STRATA_OK && slots[2] == 16 && slots[1] == 27,
          "20: stage 2's 13.3 up to one layer's 16, stage 1's 26.7 up to 27 (%d, %d)", slots[2], slots[1]);
    CHECK(st_split_caches(&q, 5000, 16, &sp, moe, slots, share) == STRATA_OK && slots[0] == 96 && slots[1] == 128,
          "5000: held to each stage's own experts, 6 x 16 and 8 x 16 (%d, %d)", slots[0], slots[1]);
    q.expert_cache[2] = 50, q.expert_cache[3] = -1;
    CHECK(st_split_caches(&q, 60, 16, &sp, moe, slots, share) == STRATA_OK && slots[2] == 50 && slots[3] == -1 &&
          slots[1] == 80 && share[3] == 1, "named: 50 and auto (%d, %d)", slots[2], slots[3]);
    q.expert_cache[2] = 0, q.expert_cache[3] = 0;
    CHECK(st_split_caches(&q, -1, 16, &sp, moe, slots, share) == STRATA_OK && slots[0] == -1 && slots[1] == -1 &&
          slots[2] == -1 && slots[3] == -1, "auto: every stage auto");
    CHECK(share[0] == 3 && share[1] == 2 && share[2] == 1 && share[3] == 1,
          "auto on device 0 three times (stages 0, 1, 3), device 1 once: shares 3,2,1,1 (%d,%d,%d,%d)", share[0],
          share[1], share[2], share[3]);
    moe[0] = 0; /* stage 0 all dense: no cache there; the others take expert_cache itself */
    CHECK(st_split_caches(&q, 60, 16, &sp, moe, slots, share) == STRATA_OK && slots[0] == 0 && slots[1] == 60 &&
          slots[2] == 60, "stage 0 without MoE layers: none there, 60 each after (%d,%d,%d)", slots[0], slots[1],
          slots[2]);
    moe[0] = 6;
    q.expert_cache[1] = 8;
    const strata_status st = st_split_caches(&q, 60, 16, &sp, moe, slots, share);
    CHECK(st == STRATA_ERR_INVALID_ARG &&
              strstr(strata_last_error(), "expert_cache_device1 8 slots: at least one layer's 16 experts"),
          "a named count below n_expert: %d '%s'", (int)st, strata_last_error());
}

static void test_nccl_absent(void) {
    st_nccl n;
    strata_status st = st_nccl_open("libstrata-no-such-nccl.so.2", &n);
    CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "libstrata-no-such-nccl.so.2 not found"),
          "an absent library: %d '%s'", (int)st, strata_last_error());
    CHECK(n.lib == NULL, "nothing kept open");
    st = st_nccl_open("libm.so.6", &n);
    CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "libm.so.6 is not NCCL: it lacks ncclGetErrorString"),
          "a library that is not NCCL: %d '%s'", (int)st, strata_last_error());
    const st_nccl *lib = NULL;
    st = st_nccl_load(&lib);
    if (st == STRATA_OK) {
        CHECK(lib && lib->version >= 20000, "libnccl.so.2 here: version %d", lib ? lib->version : 0);
        CHECK(st_nccl_check(lib, 1, "a test") == STRATA_ERR_BACKEND && strstr(strata_last_error(), "NCCL error in a test"),
              "a failing result's message: '%s'", strata_last_error());
    } else {
        CHECK(st == STRATA_ERR_UNSUPPORTED && strstr(strata_last_error(), "libnccl.so.2"),
              "no NCCL here: '%s'", strata_last_error());
        CHECK(st_nccl_load(NULL) == st, "the answer is kept");
    }
    CHECK(st_nccl_all_to_all(NULL, NULL, 2, NULL, NULL, 1, ST_NCCL_FLOAT32, 4, NULL) == STRATA_ERR_INVALID_ARG,
          "all-to-all without NCCL: refused");
}

int main(void) {
    test_proportional();
    test_resolve();
    test_check();
    test_caches();
    test_nccl_absent();
    return test_report();
}
