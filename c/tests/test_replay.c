/* test_replay.c - the route replay file (c/experts/replay.c): a good file's rows (layer il mod
 * the file's layers, position p mod its steps, 1/k weights over the valid ids), and every kind of
 * malformed or mismatched file refused with its reason, nothing leaked (run under ASan in CI). */
#include "replay.h"
#include "test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char g_path[128];

/* text as the file, then st_replay_load with a model of 32 experts, top-2. */
static strata_status load(const char *text, st_replay **r) {
    FILE *f = fopen(g_path, "wb");
    if (!f) return STRATA_ERR_IO;
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return st_replay_load(g_path, 32, 2, r);
}

static void test_rows(void) {
    st_replay *r = NULL;
    /* 2 layers, 3 steps: step s layer l = {10 s + l, -1 or 20 + l} */
    CHECK(load("strata-route-replay 1 2 32 2 3\n0 20 1 21\n10 -1 11 -1\n20 20 21 21\n", &r) == STRATA_OK && r,
          "a good file loads: %s", strata_last_error());
    if (!r) return;
    CHECK(r->n_layer == 2 && r->n_expert == 32 && r->k == 2 && r->n_steps == 3, "its header");
    int32_t ids[8];
    float w[8];
    st_replay_rows(r, 3, 1, 4, ids, w); /* layer 3 -> 1; positions 1, 2, 3 -> 0, 4 -> 1 */
    const int32_t want[8] = {11, -1, 21, 21, 1, 21, 11, -1};
    const float ww[8] = {1.0f, 0.0f, 0.5f, 0.5f, 0.5f, 0.5f, 1.0f, 0.0f};
    CHECK(!memcmp(ids, want, sizeof want), "rows: layer il mod layers, position mod steps");
    CHECK(!memcmp(w, ww, sizeof ww), "weights: 1/k over the valid ids, 0 for -1");
    st_replay_free(r);
}

static void test_refused(void) {
    static const struct { const char *text, *why; } bad[] = {
        {"", "not a route replay file"},
        {"strata-route-trace 1 1 32 2 1\n1 2\n", "not a route replay file"},
        {"strata-route-replay 2 1 32 2 1\n1 2\n", "not a route replay file"},
        {"strata-route-replay 1 0 32 2 1\n", "not a route replay file"},
        {"strata-route-replay 1 1 32 2 99999999999\n", "not a route replay file"},
        {"strata-route-replay 1 1 32 4 1\n1 2 3 4\n", "top-4"},
        {"strata-route-replay 1 1 64 2 1\n1 2\n", "of 64 experts"},
        {"strata-route-replay 1 1 32 2 2\n1 2 3\n", "missing"},
        {"strata-route-replay 1 1 32 2 1\n1 32\n", "outside -1..31"},
        {"strata-route-replay 1 1 32 2 1\n1 -2\n", "outside -1..31"},
        {"strata-route-replay 1 1 32 2 1\n1 2x\n", "missing"},
        {"strata-route-replay 1 1 32 2 1\n1 2 3\n", "more than"},
        {"strata-route-replay 1 4096 32 2 100000000\n", "too many"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st_replay *r = (st_replay *)1;
        const strata_status st = load(bad[i].text, &r);
        CHECK(st != STRATA_OK && r == NULL && strstr(strata_last_error(), bad[i].why),
              "file %zu refused saying \"%s\": %s", i, bad[i].why, strata_last_error());
    }
    st_replay *r = NULL;
    CHECK(st_replay_load("/nonexistent/strata.replay", 32, 2, &r) == STRATA_ERR_IO && !r &&
              strstr(strata_last_error(), "cannot open"), "a missing file: %s", strata_last_error());
}

int main(void) {
    snprintf(g_path, sizeof g_path, "/tmp/strata_test_replay_%d", (int)getpid());
    test_rows();
    test_refused();
    unlink(g_path);
    return test_report();
}
