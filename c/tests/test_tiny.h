/* test_tiny.h - the trained default model (models/strata-tiny-moe-q8_0.gguf) for the C tests that
 * run on it: loaded from the repository root (where `make check` runs them), or the test skips
 * when the file is not there and fails when it is there but does not load. */
#ifndef STRATA_TEST_TINY_H
#define STRATA_TEST_TINY_H

#include "strata.h"
#include "test.h"

#include <unistd.h>

#define TEST_TINY_PATH "models/strata-tiny-moe-q8_0.gguf"

/* 1 with *m loaded (n_threads; 0: the library's default), else 0 after a SKIP or a failed CHECK. */
static inline int test_tiny_load(int32_t n_threads, strata_model **m) {
    *m = NULL;
    if (access(TEST_TINY_PATH, R_OK) != 0) {
        SKIP("%s not found (run from the repository root)", TEST_TINY_PATH);
        return 0;
    }
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = n_threads;
    if (strata_model_load(TEST_TINY_PATH, &mp, m) != STRATA_OK) {
        CHECK(0, "load %s: %s", TEST_TINY_PATH, strata_last_error());
        return 0;
    }
    return 1;
}

#endif /* STRATA_TEST_TINY_H */
