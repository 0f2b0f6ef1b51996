/* test_abi.c - the ABI conventions every call relies on: version, status names, thread-local
 * error messages, type table. */
#include "strata.h"
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void *other_thread(void *arg) {
    (void)arg;
    /* A failing call on this thread must not touch the main thread's message. */
    strata_type t;
    strata_type_from_name("no-such-type-in-thread", &t);
    return (void *)(strata_last_error()[0] != '\0' ? (void *)1 : NULL);
}

int main(void) {
    /* version */
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR,
             STRATA_VERSION_PATCH);
    CHECK(strcmp(strata_version(), want) == 0, "version '%s' != '%s'", strata_version(), want);
    CHECK(strata_version_number() ==
              STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH,
          "version number %d", strata_version_number());
    CHECK(strata_abi_version() == STRATA_ABI_VERSION, "ABI %d, header %d", strata_abi_version(),
          STRATA_ABI_VERSION);

    /* status names */
    CHECK(strcmp(strata_status_name(STRATA_OK), "STRATA_OK") == 0, "ok name");
    CHECK(strcmp(strata_status_name(STRATA_ERR_FORMAT), "STRATA_ERR_FORMAT") == 0, "format name");
    CHECK(strcmp(strata_status_name((strata_status)-1000), "STRATA_ERR_UNKNOWN") == 0, "unknown");

    /* thread-local errors */
    strata_type t = STRATA_TYPE_F32;
    strata_status s = strata_type_from_name("q9_Z", &t);
    CHECK(s == STRATA_ERR_NOT_FOUND, "status %d", s);
    CHECK(strstr(strata_last_error(), "q9_Z") != NULL, "message '%s'", strata_last_error());
    char saved[512];
    snprintf(saved, sizeof saved, "%s", strata_last_error());
    pthread_t th;
    void *other_set = NULL;
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, &other_set);
    CHECK(other_set != NULL, "the other thread saw its own message");
    CHECK(strcmp(saved, strata_last_error()) == 0, "message changed by another thread: '%s'",
          strata_last_error());
    CHECK(strata_type_from_name(NULL, &t) == STRATA_ERR_INVALID_ARG, "NULL name");

    /* type table */
    CHECK(strata_type_from_name("Q4_k", &t) == STRATA_OK && t == STRATA_TYPE_Q4_K, "case-insensitive");
    CHECK(strata_type_block_size(STRATA_TYPE_Q4_K) == 256 && strata_type_block_bytes(STRATA_TYPE_Q4_K) == 144, "q4_K");
    CHECK(strata_type_block_size(STRATA_TYPE_Q8_0) == 32 && strata_type_block_bytes(STRATA_TYPE_Q8_0) == 34, "q8_0");
    CHECK(strata_row_bytes(STRATA_TYPE_Q4_0, 64) == 36, "row bytes q4_0");
    CHECK(strata_row_bytes(STRATA_TYPE_Q4_0, 33) == -1, "row not a multiple of the block");
    CHECK(strata_row_bytes(STRATA_TYPE_F16, 7) == 14, "f16 row");
    CHECK(strata_row_bytes(STRATA_TYPE_Q8_0, INT64_MAX - 31) == -1, "overflow detected");
    CHECK(!strata_type_is_known(4) && !strata_type_is_known(31) && !strata_type_is_known(-1) &&
              !strata_type_is_known(STRATA_TYPE_COUNT), "removed/out-of-range ids unknown");
    CHECK(strcmp(strata_type_name((strata_type)5), "unknown") == 0, "name of a removed id");
    int n_known = 0;
    for (int i = 0; i < STRATA_TYPE_COUNT; i++) {
        if (!strata_type_is_known(i)) continue;
        n_known++;
        strata_type back;
        CHECK(strata_type_from_name(strata_type_name((strata_type)i), &back) == STRATA_OK && (int)back == i,
              "name round trip of %d", i);
    }
    CHECK(n_known == 32, "known types: %d", n_known);
    return test_report();
}
