/* test_gguf_hostile.c - the GGUF reader on malformed and hostile input: one case per validation
 * rule (status AND a substring of the message naming the field, and "offset" where a position is
 * known), every prefix of a valid file, and a few thousand deterministic random byte flips (which
 * must return OK or an error, never crash: run under ASan/UBSan). */
#include "strata.h"
#include "strata_gguf.h"
#include "test.h"
#include "gguf_build.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== helpers ================================================================================ */

/* Opens b (borrowed) and checks the status and that the message contains sub (and "offset"). */
static void expect_fail(const char *label, const gb_buf *b, strata_status want, const char *sub,
                        int need_offset) {
    strata_gguf *g = NULL;
    strata_status st = strata_gguf_open_memory(b->p, b->len, 1, NULL, &g);
    const char *msg = strata_last_error();
    if (getenv("STRATA_TEST_VERBOSE")) fprintf(stderr, "%-30s %s\n", label, msg);
    CHECK(st == want && g == NULL, "%s: got %s, want %s (%s)", label, strata_status_name(st),
          strata_status_name(want), msg);
    CHECK(strstr(msg, sub) != NULL, "%s: message lacks '%s': %s", label, sub, msg);
    if (need_offset) CHECK(strstr(msg, "offset") != NULL, "%s: message lacks 'offset': %s", label, msg);
    if (g) strata_gguf_free(g);
}

/* A file with one kv and one tensor info (name, dims, type, offset), padded to 32, then ndata
 * bytes of data. */
static void tfile(gb_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                  uint64_t offset, size_t ndata) {
    gb_header(b, 3, 1, 1);
    gb_kv_str(b, "general.architecture", "x");
    gb_tensor(b, name, n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, ndata);
}

/* A small valid file: 3 kvs (one string array), 2 tensors (f32 [8], q8_0 [32,2]). */
static void valid_file(gb_buf *b) {
    const uint64_t ne0[1] = {8}, ne1[2] = {32, 2};
    gb_header(b, 3, 2, 3);
    gb_kv_str(b, "general.architecture", "x");
    gb_kv(b, "tok", 9);
    gb_arr(b, 8, 2);
    gb_str(b, "ab");
    gb_str(b, "c");
    gb_kv_u32(b, "general.alignment", 32);
    gb_tensor(b, "w0", 1, ne0, 0, 0);
    gb_tensor(b, "w1", 2, ne1, 8, 32);
    gb_pad(b, 32);
    for (int i = 0; i < 32 + 68; i++) gb_u8(b, (uint8_t)i);
}

/* ==== header ================================================================================= */

static void test_header(void) {
    gb_buf b = {0};
    strata_gguf *g = NULL;
    CHECK(strata_gguf_open_memory("", 0, 1, NULL, &g) == STRATA_ERR_FORMAT, "empty");
    CHECK(strstr(strata_last_error(), "empty"), "empty msg: %s", strata_last_error());
    CHECK(strata_gguf_open_memory(NULL, 10, 1, NULL, &g) == STRATA_ERR_INVALID_ARG, "NULL data");
    CHECK(strata_gguf_open_memory("GGUF", 4, 1, NULL, NULL) == STRATA_ERR_INVALID_ARG, "NULL out");

    gb_bytes(&b, "GG", 2);
    expect_fail("2-byte file", &b, STRATA_ERR_FORMAT, "magic", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 0);
    b.p[0] = 'X';
    expect_fail("bad magic", &b, STRATA_ERR_FORMAT, "magic", 1);
    gb_free(&b);

    gb_header(&b, 1, 0, 0);
    expect_fail("version 1", &b, STRATA_ERR_FORMAT, "version", 1);
    gb_free(&b);
    gb_header(&b, 4, 0, 0);
    expect_fail("version 4", &b, STRATA_ERR_FORMAT, "version", 1);
    gb_free(&b);
    gb_header(&b, 0x03000000u, 0, 0); /* a big-endian v3 file read little-endian */
    expect_fail("big-endian", &b, STRATA_ERR_FORMAT, "big-endian", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 0);
    b.len -= 3;
    expect_fail("truncated n_kv", &b, STRATA_ERR_FORMAT, "n_kv", 1);
    gb_free(&b);

    gb_header(&b, 3, 1ull << 40, 0);
    expect_fail("huge n_tensors", &b, STRATA_ERR_FORMAT, "n_tensors", 1);
    gb_free(&b);
    gb_header(&b, 3, UINT64_MAX, 0);
    expect_fail("n_tensors UINT64_MAX", &b, STRATA_ERR_FORMAT, "n_tensors", 1);
    gb_free(&b);
    gb_header(&b, 3, 0, 1ull << 40);
    expect_fail("huge n_kv", &b, STRATA_ERR_FORMAT, "n_kv", 1);
    gb_free(&b);
    gb_header(&b, 3, 0, UINT64_MAX);
    expect_fail("n_kv UINT64_MAX", &b, STRATA_ERR_FORMAT, "n_kv", 1);
    gb_free(&b);

    /* n_tensors fits the bytes after the header, but not those left after the kvs */
    gb_header(&b, 3, 2, 1);
    gb_kv(&b, "k", 8);
    gb_str(&b, "0123456789abcdef0123456789abcdef0123");
    expect_fail("n_tensors after kvs", &b, STRATA_ERR_FORMAT, "n_tensors", 1);
    gb_free(&b);
}

/* ==== keys and values ======================================================================== */

static void test_kvs(void) {
    gb_buf b = {0};

    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 1000);
    gb_zeros(&b, 16);
    expect_fail("key length > bytes left", &b, STRATA_ERR_FORMAT, "bytes left", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 1ull << 50);
    gb_zeros(&b, 16);
    expect_fail("key length 2^50", &b, STRATA_ERR_FORMAT, "key 0 name length", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_u64(&b, (1u << 20) + 1);
    gb_zeros(&b, (1u << 20) + 16);
    expect_fail("overlong key", &b, STRATA_ERR_FORMAT, "limit", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "", 5);
    expect_fail("empty key", &b, STRATA_ERR_FORMAT, "empty", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_strn(&b, "a\0b", 3);
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    expect_fail("NUL in key", &b, STRATA_ERR_FORMAT, "NUL", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "bad.type", 13);
    gb_u32(&b, 0);
    expect_fail("bad value type", &b, STRATA_ERR_FORMAT, "bad.type' value type", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "bad.type", 0xffffffffu);
    gb_u32(&b, 0);
    expect_fail("value type 2^32-1", &b, STRATA_ERR_FORMAT, "value type", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "s", 8);
    gb_u64(&b, 1ull << 62);
    gb_zeros(&b, 8);
    expect_fail("huge string length", &b, STRATA_ERR_FORMAT, "string length", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "s", 8);
    gb_u64(&b, 10);
    gb_bytes(&b, "abc", 3);
    expect_fail("truncated string", &b, STRATA_ERR_FORMAT, "'s' value: string length", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "u", 10);
    gb_u32(&b, 1);
    expect_fail("truncated u64 value", &b, STRATA_ERR_FORMAT, "truncated", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "flag", 7);
    gb_u8(&b, 2);
    expect_fail("bool 2", &b, STRATA_ERR_FORMAT, "bool", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "arr", 9);
    gb_arr(&b, 14, 1);
    gb_u32(&b, 0);
    expect_fail("bad array elem type", &b, STRATA_ERR_FORMAT, "array element type", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "arr", 9);
    gb_arr(&b, 10, 1ull << 40);
    gb_zeros(&b, 64);
    expect_fail("array count too large", &b, STRATA_ERR_FORMAT, "array count", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "arr", 9);
    gb_arr(&b, 8, UINT64_MAX);
    gb_zeros(&b, 64);
    expect_fail("string array count UINT64_MAX", &b, STRATA_ERR_FORMAT, "array count", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "arr", 9);
    gb_arr(&b, 8, 2);
    gb_str(&b, "ok");
    gb_u64(&b, 1000);
    gb_zeros(&b, 8);
    expect_fail("string element too long", &b, STRATA_ERR_FORMAT, "array element 1", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "arr", 9);
    gb_arr(&b, 7, 3);
    gb_u8(&b, 1); gb_u8(&b, 0); gb_u8(&b, 9);
    expect_fail("bool array element 9", &b, STRATA_ERR_FORMAT, "array element 2", 1);
    gb_free(&b);

    /* nesting: 9 levels of arrays */
    gb_header(&b, 3, 0, 1);
    gb_kv(&b, "deep", 9);
    for (int i = 0; i < 8; i++) gb_arr(&b, 9, 1);
    gb_arr(&b, 4, 1);
    gb_u32(&b, 5);
    expect_fail("depth 9", &b, STRATA_ERR_FORMAT, "deeper than 8", 1);
    gb_free(&b);

    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "dup", 1);
    gb_kv_str(&b, "dup", "again");
    expect_fail("duplicate key", &b, STRATA_ERR_FORMAT, "duplicate key 'dup'", 1);
    gb_free(&b);

    /* alignment */
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_fail("alignment as string", &b, STRATA_ERR_FORMAT, "general.alignment", 1);
    CHECK(strstr(strata_last_error(), "uint32"), "type named: %s", strata_last_error());
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_u64(&b, "general.alignment", 32);
    expect_fail("alignment as u64", &b, STRATA_ERR_FORMAT, "general.alignment", 1);
    gb_free(&b);
    const uint32_t bad_align[3] = {0, 13, 2u << 20};
    const char *const bad_align_msg[3] = {"power of two", "power of two", "limit"};
    for (int i = 0; i < 3; i++) {
        char label[64];
        snprintf(label, sizeof label, "alignment %u", bad_align[i]);
        gb_header(&b, 3, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad_align[i]);
        expect_fail(label, &b, STRATA_ERR_FORMAT, bad_align_msg[i], 1);
        gb_free(&b);
    }

    /* split metadata of a lone image */
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "split.count", "3");
    expect_fail("split.count as string", &b, STRATA_ERR_FORMAT, "split.count", 1);
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_f32(&b, "split.no", 1.0f);
    expect_fail("split.no as float", &b, STRATA_ERR_FORMAT, "split.no", 1);
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_u16(&b, "split.count", 0);
    expect_fail("split.count 0", &b, STRATA_ERR_FORMAT, "split.count", 1);
    gb_free(&b);
}

/* ==== tensor infos and data ================================================================== */

static void test_tensors(void) {
    gb_buf b = {0};
    const uint64_t ne8[1] = {8};

    gb_header(&b, 3, 1, 0);
    gb_str(&b, "");
    gb_u32(&b, 1); gb_u64(&b, 8); gb_u32(&b, 0); gb_u64(&b, 0);
    gb_zeros(&b, 64);
    expect_fail("empty tensor name", &b, STRATA_ERR_FORMAT, "tensor 0 name", 1);
    gb_free(&b);

    gb_header(&b, 3, 1, 0);
    gb_u64(&b, 1ull << 33);
    gb_zeros(&b, 64);
    expect_fail("tensor name length", &b, STRATA_ERR_FORMAT, "tensor 0 name length", 1);
    gb_free(&b);

    /* names: 63 bytes load (ggml's GGML_MAX_NAME with its NUL), 64 and more do not */
    char name[80];
    memset(name, 'n', sizeof name);
    name[63] = 0;
    tfile(&b, name, 1, ne8, 0, 0, 64);
    strata_gguf *g63 = NULL;
    CHECK(strata_gguf_open_memory(b.p, b.len, 1, NULL, &g63) == STRATA_OK,
          "63-byte tensor name refused: %s", strata_last_error());
    strata_gguf_free(g63);
    gb_free(&b);
    name[63] = 'n';
    name[64] = 0;
    tfile(&b, name, 1, ne8, 0, 0, 64);
    expect_fail("64-byte tensor name", &b, STRATA_ERR_FORMAT, "limits tensor names to 64 bytes", 1);
    gb_free(&b);
    name[64] = 'n';
    name[79] = 0;
    tfile(&b, name, 1, ne8, 0, 0, 64);
    expect_fail("79-byte tensor name", &b, STRATA_ERR_FORMAT, "79 bytes", 1);
    gb_free(&b);

    tfile(&b, "w", 0, ne8, 0, 0, 64);
    expect_fail("n_dims 0", &b, STRATA_ERR_FORMAT, "'w' n_dims", 1);
    gb_free(&b);
    const uint64_t ne5[5] = {1, 1, 1, 1, 8};
    tfile(&b, "w", 5, ne5, 0, 0, 64);
    expect_fail("n_dims 5", &b, STRATA_ERR_FORMAT, "'w' n_dims", 1);
    gb_free(&b);

    const uint64_t ne_zero[2] = {8, 0};
    tfile(&b, "w", 2, ne_zero, 0, 0, 64);
    expect_fail("dim 0", &b, STRATA_ERR_FORMAT, "ne[1]", 1);
    gb_free(&b);
    const uint64_t ne_big[1] = {(1ull << 63) + 32};
    tfile(&b, "w", 1, ne_big, 0, 0, 64);
    expect_fail("dim > INT64_MAX", &b, STRATA_ERR_FORMAT, "ne[0]", 1);
    gb_free(&b);
    const uint64_t ne_prod[3] = {1ull << 32, 1ull << 20, 1ull << 20};
    tfile(&b, "w", 3, ne_prod, 0, 0, 64);
    expect_fail("dim product overflow", &b, STRATA_ERR_FORMAT, "overflows", 1);
    CHECK(strstr(strata_last_error(), "ne[2]"), "product names dim: %s", strata_last_error());
    gb_free(&b);
    const uint64_t ne_bytes[1] = {1ull << 62}; /* 2^62 f32 elements = 2^64 bytes */
    tfile(&b, "w", 1, ne_bytes, 0, 0, 64);
    expect_fail("byte size overflow", &b, STRATA_ERR_FORMAT, "byte size", 1);
    gb_free(&b);

    tfile(&b, "w", 1, ne8, 31, 0, 64);
    expect_fail("type 31", &b, STRATA_ERR_FORMAT, "'w' type", 1);
    gb_free(&b);
    tfile(&b, "w", 1, ne8, 4, 0, 64);
    expect_fail("type 4 (removed Q4_2)", &b, STRATA_ERR_FORMAT, "not a known tensor type", 1);
    gb_free(&b);
    tfile(&b, "w", 1, ne8, 1000, 0, 64);
    expect_fail("type 1000", &b, STRATA_ERR_FORMAT, "type", 1);
    gb_free(&b);

    const uint64_t ne33[1] = {33};
    tfile(&b, "w", 1, ne33, 2, 0, 64);
    expect_fail("q4_0 ne0=33", &b, STRATA_ERR_FORMAT, "block size 32", 1);
    CHECK(strstr(strata_last_error(), "q4_0"), "type named: %s", strata_last_error());
    gb_free(&b);

    tfile(&b, "w", 1, ne8, 0, 16, 64);
    expect_fail("misaligned offset", &b, STRATA_ERR_FORMAT, "alignment 32", 1);
    gb_free(&b);

    tfile(&b, "w", 1, ne8, 0, 64, 32);
    expect_fail("offset past EOF", &b, STRATA_ERR_FORMAT, "starts past the end", 1);
    gb_free(&b);
    tfile(&b, "w", 1, ne8, 0, 1ull << 62, 32);
    expect_fail("offset 2^62", &b, STRATA_ERR_FORMAT, "starts past the end", 1);
    gb_free(&b);
    tfile(&b, "w", 1, ne8, 0, 0, 31);
    expect_fail("tensor extends past EOF", &b, STRATA_ERR_FORMAT, "extends past the end", 1);
    gb_free(&b);

    /* tensor infos end exactly at EOF: the padded data section starts past it */
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "w", 1, ne8, 0, 0);
    expect_fail("data section past EOF", &b, STRATA_ERR_FORMAT, "data section", 1);
    gb_free(&b);

    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "w", 1, ne8, 0, 0);
    b.len -= 5;
    expect_fail("truncated tensor offset", &b, STRATA_ERR_FORMAT, "'w' data offset", 1);
    gb_free(&b);

    /* overlap: w0 f32[16] = 64 bytes at 0, w1 at 32 */
    const uint64_t ne16[1] = {16};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "w0", 1, ne16, 0, 0);
    gb_tensor(&b, "w1", 1, ne8, 0, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    expect_fail("overlapping tensors", &b, STRATA_ERR_FORMAT, "overlap", 1);
    CHECK(strstr(strata_last_error(), "'w0'") && strstr(strata_last_error(), "'w1'"),
          "both named: %s", strata_last_error());
    gb_free(&b);
    /* overlap listed out of order */
    gb_header(&b, 3, 3, 0);
    gb_tensor(&b, "late", 1, ne8, 0, 96);
    gb_tensor(&b, "w0", 1, ne16, 0, 0);
    gb_tensor(&b, "same", 1, ne8, 0, 96);
    gb_pad(&b, 32);
    gb_zeros(&b, 160);
    expect_fail("same offset", &b, STRATA_ERR_FORMAT, "overlap", 1);
    gb_free(&b);

    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "w", 1, ne8, 0, 0);
    gb_tensor(&b, "w", 1, ne8, 0, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    expect_fail("duplicate tensor name", &b, STRATA_ERR_FORMAT, "duplicate tensor name 'w'", 1);
    gb_free(&b);

    /* sanity: the unmodified valid file opens, so the cases above fail for their own reason */
    valid_file(&b);
    strata_gguf *g = NULL;
    CHECK(strata_gguf_open_memory(b.p, b.len, 1, NULL, &g) == STRATA_OK, "valid file: %s",
          strata_last_error());
    strata_gguf_free(g);
    gb_free(&b);
    tfile(&b, "w", 1, ne8, 0, 0, 32);
    g = NULL;
    CHECK(strata_gguf_open_memory(b.p, b.len, 1, NULL, &g) == STRATA_OK, "tfile base: %s",
          strata_last_error());
    strata_gguf_free(g);
    gb_free(&b);
}

/* ==== every prefix; random flips ============================================================= */

static void test_prefixes(void) {
    gb_buf b = {0};
    valid_file(&b);
    int bad_status = 0, no_offset = 0;
    for (size_t n = 0; n < b.len; n++) {
        strata_gguf *g = NULL;
        /* copy to an exact-size heap buffer so ASan sees any read past the prefix */
        uint8_t *p = malloc(n ? n : 1);
        memcpy(p, b.p, n);
        strata_status st = strata_gguf_open_memory(p, n, 1, NULL, &g);
        if (st != STRATA_ERR_FORMAT || g) {
            bad_status++;
            fprintf(stderr, "prefix %zu: %s\n", n, strata_status_name(st));
        }
        if (n > 0 && !strstr(strata_last_error(), "offset")) {
            no_offset++;
            fprintf(stderr, "prefix %zu: no offset in: %s\n", n, strata_last_error());
        }
        strata_gguf_free(g);
        free(p);
    }
    CHECK(bad_status == 0, "%d of %zu prefixes did not fail with FORMAT", bad_status, b.len);
    CHECK(no_offset == 0, "%d prefix messages lack an offset", no_offset);
    gb_free(&b);
}

/* Walks every value (recursively) and tensor so ASan checks each pointer the reader hands out. */
static uint64_t walk_value(const strata_gguf *g, const strata_gguf_value *v) {
    uint64_t h = (uint64_t)v->type;
    if (v->type == STRATA_GGUF_STRING) {
        for (uint64_t i = 0; i < v->v.str.len; i++) h += (unsigned char)v->v.str.ptr[i];
    } else if (v->type == STRATA_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->v.arr.count; i++) {
            strata_gguf_value e;
            if (strata_gguf_array_get(g, v, i, &e) == STRATA_OK) h += walk_value(g, &e);
        }
    } else {
        h += v->v.u64;
    }
    return h;
}

static void test_flips(void) {
    gb_buf b = {0};
    valid_file(&b);
    test_rng r = {0x5eed1234abcdull};
    int opened = 0, failed = 0, bad = 0;
    uint64_t sink = 0;
    uint8_t *p = malloc(b.len);
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(p, b.p, b.len);
        int nflip = 1 + (int)(test_rng_next(&r) % 4);
        for (int k = 0; k < nflip; k++) {
            size_t at = (size_t)(test_rng_next(&r) % b.len);
            unsigned long long x = test_rng_next(&r);
            p[at] = (x & 1) ? (uint8_t)(x >> 8) : (uint8_t)(p[at] ^ (1u << ((x >> 8) % 8)));
        }
        strata_gguf *g = NULL;
        strata_status st = strata_gguf_open_memory(p, b.len, 1, NULL, &g);
        if (st == STRATA_OK) {
            opened++;
            for (int64_t i = 0; i < strata_gguf_kv_count(g); i++) {
                strata_gguf_value v;
                if (strata_gguf_kv_value(g, i, &v) == STRATA_OK) sink += walk_value(g, &v);
                sink += strlen(strata_gguf_kv_key(g, i));
            }
            for (int64_t i = 0; i < strata_gguf_tensor_count(g); i++) {
                strata_tensor_info ti;
                if (strata_gguf_tensor_info(g, i, &ti) != STRATA_OK) { bad++; continue; }
                const uint8_t *d = ti.data;
                if (d < p || d + ti.n_bytes > p + b.len) bad++;
                else sink += d[0] + d[ti.n_bytes - 1];
            }
            strata_gguf_free(g);
        } else {
            failed++;
            if (st != STRATA_ERR_FORMAT || g || strata_last_error()[0] == '\0') bad++;
        }
    }
    free(p);
    CHECK(bad == 0, "%d flips gave a bad status, message or tensor range", bad);
    CHECK(opened > 0 && failed > 0, "flips: %d opened, %d failed (both expected)", opened, failed);
    fprintf(stderr, "flips: %d opened, %d rejected (checksum %llu)\n", opened, failed,
            (unsigned long long)sink);
    gb_free(&b);
}

int main(void) {
    test_header();
    test_kvs();
    test_tensors();
    test_prefixes();
    test_flips();
    return test_report();
}
