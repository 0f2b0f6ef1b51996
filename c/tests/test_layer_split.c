/* test_layer_split.c - the layer split's rules (c/experts/layer_split.c, issue 36) and NCCL's
 * run-time loader (c/engine/cuda/nccl.c), without a GPU: the proportional split (each stage at
 * least one layer, largest remainders, the sum kept), the resolution of given and auto stages (a
 * device named twice shares its memory), every refusal with the option it names (counts that do
 * not sum, devices that do not exist, CPU sessions, the options that need two devices or NCCL,
 * the placement options a split does not take), the one-device session asked nothing; then NCCL
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
    p.split.expert_cache[1] = 64;
    refuse(&p, 24, 1, NULL, STRATA_ERR_UNSUPPORTED, "expert_cache_device1: per-stage expert caches are not built yet");
    p.split.expert_cache[1] = 0, p.split.expert_cache[2] = 64;
    refuse(&p, 24, 1, NULL, STRATA_ERR_INVALID_ARG, "expert_cache_device2: the split has 2 stages");
    p = split2(12, 12, 0, 0);
    p.placement.expert_cache = -1;
    refuse(&p, 24, 1, NULL, STRATA_ERR_UNSUPPORTED, "layer_split with expert_cache: not built yet");
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
    static const char *const not_yet[6] = {"gpu_mem", "ram_budget", "doorbell", "gpu_prefetch", "route_tail_skip",
                                           "degrade_zero"};
    for (int i = 0; i < 6; i++) {
        p = split2(12, 12, 0, 0);
        p.placement.n_cpu_moe = 4;
        if (i == 0) p.placement.gpu_mem = (int64_t)1 << 30;
        if (i == 1) p.placement.ram_budget = (int64_t)1 << 30;
        if (i == 2) p.placement.doorbell = 1;
        if (i == 3) p.placement.gpu_prefetch = 1;
        if (i == 4) p.route_tail_skip = 0.1f;
        if (i == 5) p.degrade_zero = 1;
        char want[96];
        snprintf(want, sizeof want, "layer_split with %s: not built yet", not_yet[i]);
        refuse(&p, 24, 1, NULL, STRATA_ERR_UNSUPPORTED, want);
    }
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
    test_nccl_absent();
    return test_report();
}
