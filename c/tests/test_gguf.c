/* test_gguf.c - the GGUF reader on well-formed input: every value type (v2 and v3), nested and
 * string arrays, typed getters and their errors, tensor listing and data, alignment, file opening
 * with and without mmap, split models (3 shards in a temp dir), and the real files of ../shared.
 * Expected values are the ones the test wrote with gguf_build.h (or, for ../shared, facts read
 * with the Python gguf package and the raw header bytes). */
#include "strata.h"
#include "strata_gguf.h"
#include "test.h"
#include "gguf_build.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== helpers ================================================================================ */

static strata_gguf *open_mem(const gb_buf *b) {
    strata_gguf *g = NULL;
    strata_status st = strata_gguf_open_memory(b->p, b->len, 0, NULL, &g);
    CHECK(st == STRATA_OK, "open_memory: %s: %s", strata_status_name(st), strata_last_error());
    return g;
}

static int str_eq(const strata_gguf_value *v, const char *s) {
    return v->type == STRATA_GGUF_STRING && v->v.str.len == strlen(s) &&
           memcmp(v->v.str.ptr, s, v->v.str.len) == 0;
}

static int value_of(const strata_gguf *g, const char *key, strata_gguf_value *v) {
    int64_t i = strata_gguf_kv_find(g, key);
    if (i < 0) return 0;
    return strata_gguf_kv_value(g, i, v) == STRATA_OK;
}

/* ==== every value type ======================================================================= */

static void build_all_types(gb_buf *b, uint32_t version) {
    gb_header(b, version, 0, 16);
    gb_kv(b, "t.u8", 0); gb_u8(b, 200);
    gb_kv(b, "t.i8", 1); gb_u8(b, (uint8_t)-100);
    gb_kv(b, "t.u16", 2); gb_u16(b, 60000);
    gb_kv(b, "t.i16", 3); gb_u16(b, (uint16_t)-30000);
    gb_kv(b, "t.u32", 4); gb_u32(b, 4000000000u);
    gb_kv(b, "t.i32", 5); gb_u32(b, (uint32_t)-2000000000);
    gb_kv(b, "t.f32", 6); gb_f32(b, 1.5f);
    gb_kv(b, "t.bool", 7); gb_u8(b, 1);
    gb_kv(b, "t.str", 8); gb_str(b, "hello");
    gb_kv(b, "t.arr", 9); gb_arr(b, 5, 3); gb_u32(b, 1); gb_u32(b, (uint32_t)-2); gb_u32(b, 3);
    gb_kv(b, "t.u64", 10); gb_u64(b, 9223372036854775813ull);
    gb_kv(b, "t.i64", 11); gb_u64(b, (uint64_t)-4611686018427387904ll);
    gb_kv(b, "t.f64", 12); gb_f64(b, 3.25);
    gb_kv(b, "t.false", 7); gb_u8(b, 0);
    gb_kv(b, "t.emptystr", 8); gb_str(b, "");
    gb_kv(b, "t.strarr", 9); gb_arr(b, 8, 3); gb_str(b, "a"); gb_str(b, ""); gb_str(b, "ccc");
}

static void test_all_types(uint32_t version) {
    gb_buf b = {0};
    build_all_types(&b, version);
    strata_gguf *g = open_mem(&b);
    if (!g) { gb_free(&b); return; }
    CHECK(strata_gguf_version(g) == version, "version %u", strata_gguf_version(g));
    CHECK(strata_gguf_alignment(g) == 32, "default alignment %u", strata_gguf_alignment(g));
    CHECK(strata_gguf_kv_count(g) == 16, "kv count %lld", (long long)strata_gguf_kv_count(g));
    CHECK(strata_gguf_tensor_count(g) == 0, "tensors");
    CHECK(strata_gguf_shard_count(g) == 1, "shards");
    CHECK(strcmp(strata_gguf_shard_path(g, 0), "<memory>") == 0, "shard path");
    CHECK(strata_gguf_shard_path(g, 1) == NULL, "shard path 1");
    CHECK(strcmp(strata_gguf_kv_key(g, 0), "t.u8") == 0, "key 0 in file order");
    CHECK(strcmp(strata_gguf_kv_key(g, 12), "t.f64") == 0, "key 12 in file order");
    CHECK(strata_gguf_kv_key(g, 16) == NULL && strata_gguf_kv_key(g, -1) == NULL, "key range");
    CHECK(strata_gguf_kv_find(g, "t.f64") == 12, "find");
    CHECK(strata_gguf_kv_find(g, "t.nope") == -1, "find missing");
    CHECK(strata_gguf_kv_find(g, "t.u") == -1, "find prefix");

    strata_gguf_value v;
    CHECK(value_of(g, "t.u8", &v) && v.type == STRATA_GGUF_UINT8 && v.v.u64 == 200, "u8");
    CHECK(value_of(g, "t.i8", &v) && v.type == STRATA_GGUF_INT8 && v.v.i64 == -100, "i8");
    CHECK(value_of(g, "t.u16", &v) && v.type == STRATA_GGUF_UINT16 && v.v.u64 == 60000, "u16");
    CHECK(value_of(g, "t.i16", &v) && v.type == STRATA_GGUF_INT16 && v.v.i64 == -30000, "i16");
    CHECK(value_of(g, "t.u32", &v) && v.type == STRATA_GGUF_UINT32 && v.v.u64 == 4000000000u, "u32");
    CHECK(value_of(g, "t.i32", &v) && v.type == STRATA_GGUF_INT32 && v.v.i64 == -2000000000, "i32");
    CHECK(value_of(g, "t.f32", &v) && v.type == STRATA_GGUF_FLOAT32 && v.v.f64 == 1.5, "f32");
    CHECK(value_of(g, "t.bool", &v) && v.type == STRATA_GGUF_BOOL && v.v.u64 == 1, "bool");
    CHECK(value_of(g, "t.false", &v) && v.type == STRATA_GGUF_BOOL && v.v.u64 == 0, "bool 0");
    CHECK(value_of(g, "t.str", &v) && str_eq(&v, "hello"), "str");
    CHECK(value_of(g, "t.emptystr", &v) && str_eq(&v, ""), "empty str");
    CHECK(value_of(g, "t.u64", &v) && v.type == STRATA_GGUF_UINT64 &&
          v.v.u64 == 9223372036854775813ull, "u64");
    CHECK(value_of(g, "t.i64", &v) && v.type == STRATA_GGUF_INT64 &&
          v.v.i64 == -4611686018427387904ll, "i64");
    CHECK(value_of(g, "t.f64", &v) && v.type == STRATA_GGUF_FLOAT64 && v.v.f64 == 3.25, "f64");

    CHECK(value_of(g, "t.arr", &v) && v.type == STRATA_GGUF_ARRAY &&
          v.v.arr.elem_type == STRATA_GGUF_INT32 && v.v.arr.count == 3, "array header");
    strata_gguf_value e;
    const int64_t want[3] = {1, -2, 3};
    for (uint64_t i = 0; i < 3; i++)
        CHECK(strata_gguf_array_get(g, &v, i, &e) == STRATA_OK && e.type == STRATA_GGUF_INT32 &&
              e.v.i64 == want[i], "array elem %llu", (unsigned long long)i);
    CHECK(strata_gguf_array_get(g, &v, 3, &e) == STRATA_ERR_NOT_FOUND, "array out of range");
    strata_gguf_value notarr;
    value_of(g, "t.u8", &notarr);
    CHECK(strata_gguf_array_get(g, &notarr, 0, &e) == STRATA_ERR_TYPE, "array_get on scalar");
    CHECK(value_of(g, "t.strarr", &v) && v.v.arr.elem_type == STRATA_GGUF_STRING, "strarr");
    CHECK(strata_gguf_array_get(g, &v, 0, &e) == STRATA_OK && str_eq(&e, "a"), "strarr 0");
    CHECK(strata_gguf_array_get(g, &v, 1, &e) == STRATA_OK && str_eq(&e, ""), "strarr 1");
    CHECK(strata_gguf_array_get(g, &v, 2, &e) == STRATA_OK && str_eq(&e, "ccc"), "strarr 2");
    CHECK(strata_gguf_kv_value(g, 16, &v) == STRATA_ERR_NOT_FOUND, "kv_value range");
    CHECK(strcmp(strata_gguf_type_name(STRATA_GGUF_UINT32), "uint32") == 0, "type name");
    CHECK(strcmp(strata_gguf_type_name(STRATA_GGUF_FLOAT64), "float64") == 0, "type name f64");

    /* borrowed image gives the same values, pointing into the caller's bytes */
    strata_gguf *gb = NULL;
    CHECK(strata_gguf_open_memory(b.p, b.len, 1, NULL, &gb) == STRATA_OK, "borrow");
    if (gb) {
        CHECK(value_of(gb, "t.str", &v) && str_eq(&v, "hello") &&
              (const uint8_t *)v.v.str.ptr > b.p && (const uint8_t *)v.v.str.ptr < b.p + b.len,
              "borrowed string points into the image");
        strata_gguf_free(gb);
    }
    strata_gguf_free(g);
    gb_free(&b);
}

/* ==== typed getters ========================================================================== */

static void test_getters(void) {
    gb_buf b = {0};
    build_all_types(&b, 3);
    strata_gguf *g = open_mem(&b);
    if (!g) { gb_free(&b); return; }
    uint64_t u;
    int64_t i;
    double d;
    int bo;
    const char *p;
    uint64_t len;
    CHECK(strata_gguf_get_u64(g, "t.u8", &u) == STRATA_OK && u == 200, "u64<-u8");
    CHECK(strata_gguf_get_u64(g, "t.u64", &u) == STRATA_OK && u == 9223372036854775813ull, "u64");
    CHECK(strata_gguf_get_u64(g, "t.i8", &u) == STRATA_ERR_TYPE, "u64<-negative i8");
    CHECK(strstr(strata_last_error(), "t.i8") != NULL, "message names key: %s", strata_last_error());
    CHECK(strata_gguf_get_u64(g, "t.f32", &u) == STRATA_ERR_TYPE, "u64<-f32");
    CHECK(strata_gguf_get_u64(g, "t.str", &u) == STRATA_ERR_TYPE, "u64<-str");
    CHECK(strata_gguf_get_u64(g, "t.bool", &u) == STRATA_ERR_TYPE, "u64<-bool");
    CHECK(strata_gguf_get_u64(g, "missing", &u) == STRATA_ERR_NOT_FOUND, "u64 missing");
    CHECK(strstr(strata_last_error(), "missing") != NULL, "missing message");
    CHECK(strata_gguf_get_i64(g, "t.i8", &i) == STRATA_OK && i == -100, "i64<-i8");
    CHECK(strata_gguf_get_i64(g, "t.i16", &i) == STRATA_OK && i == -30000, "i64<-i16");
    CHECK(strata_gguf_get_i64(g, "t.i32", &i) == STRATA_OK && i == -2000000000, "i64<-i32");
    CHECK(strata_gguf_get_i64(g, "t.u32", &i) == STRATA_OK && i == 4000000000ll, "i64<-u32");
    CHECK(strata_gguf_get_i64(g, "t.u16", &i) == STRATA_OK && i == 60000, "i64<-u16");
    CHECK(strata_gguf_get_i64(g, "t.u64", &i) == STRATA_ERR_TYPE, "i64<-u64 too big");
    CHECK(strata_gguf_get_i64(g, "t.i64", &i) == STRATA_OK && i == -4611686018427387904ll, "i64");
    CHECK(strata_gguf_get_i64(g, "t.f64", &i) == STRATA_ERR_TYPE, "i64<-f64");
    CHECK(strata_gguf_get_f64(g, "t.f32", &d) == STRATA_OK && d == 1.5, "f64<-f32");
    CHECK(strata_gguf_get_f64(g, "t.f64", &d) == STRATA_OK && d == 3.25, "f64");
    CHECK(strata_gguf_get_f64(g, "t.u32", &d) == STRATA_ERR_TYPE, "f64<-u32");
    CHECK(strata_gguf_get_bool(g, "t.bool", &bo) == STRATA_OK && bo == 1, "bool");
    CHECK(strata_gguf_get_bool(g, "t.false", &bo) == STRATA_OK && bo == 0, "bool false");
    CHECK(strata_gguf_get_bool(g, "t.u8", &bo) == STRATA_ERR_TYPE, "bool<-u8");
    CHECK(strata_gguf_get_str(g, "t.str", &p, &len) == STRATA_OK && len == 5 &&
          memcmp(p, "hello", 5) == 0, "str");
    CHECK(strata_gguf_get_str(g, "t.arr", &p, &len) == STRATA_ERR_TYPE, "str<-array");
    CHECK(strstr(strata_last_error(), "array") != NULL, "type message: %s", strata_last_error());
    CHECK(strata_gguf_get_str(g, NULL, &p, &len) == STRATA_ERR_INVALID_ARG, "NULL key");
    CHECK(strata_gguf_get_u64(NULL, "t.u8", &u) == STRATA_ERR_INVALID_ARG, "NULL handle");
    strata_gguf_free(g);
    gb_free(&b);
}

/* ==== nested and large string arrays ========================================================= */

/* Array nesting `depth` levels (1 = a plain array of u32): two elements per level; leaves are
 * u32 values numbering them 0..2^depth-1 in order. */
static void gb_nested(gb_buf *b, int depth, uint32_t *next_leaf) {
    if (depth == 1) {
        gb_arr(b, 4, 2);
        gb_u32(b, (*next_leaf)++);
        gb_u32(b, (*next_leaf)++);
        return;
    }
    gb_arr(b, 9, 2);
    gb_nested(b, depth - 1, next_leaf);
    gb_nested(b, depth - 1, next_leaf);
}

static void test_nested(void) {
    for (int depth = 1; depth <= 9; depth++) {
        gb_buf b = {0};
        uint32_t leaf = 0;
        gb_header(&b, 3, 0, 1);
        gb_kv(&b, "nest", 9);
        gb_nested(&b, depth, &leaf);
        strata_gguf *g = NULL;
        strata_status st = strata_gguf_open_memory(b.p, b.len, 0, NULL, &g);
        if (depth == 9) {
            CHECK(st == STRATA_ERR_FORMAT, "depth 9 must be rejected: %s", strata_status_name(st));
            CHECK(strstr(strata_last_error(), "nest") && strstr(strata_last_error(), "deeper"),
                  "depth message: %s", strata_last_error());
            gb_free(&b);
            continue;
        }
        CHECK(st == STRATA_OK, "depth %d: %s", depth, strata_last_error());
        if (g) {
            /* walk the path of leaf number L: its bits from the top level down */
            int ok = 1;
            for (uint32_t L = 0; L < (1u << depth); L += 3) {
                strata_gguf_value v, e;
                strata_gguf_kv_value(g, 0, &v);
                for (int lvl = depth - 1; lvl >= 0 && ok; lvl--) {
                    uint32_t bit = (L >> lvl) & 1u;
                    ok &= strata_gguf_array_get(g, &v, bit, &e) == STRATA_OK;
                    v = e;
                }
                ok &= v.type == STRATA_GGUF_UINT32 && v.v.u64 == L;
            }
            CHECK(ok, "depth %d leaves read back", depth);
            strata_gguf_free(g);
        }
        gb_free(&b);
    }
}

static void test_big_string_array(void) {
    const uint64_t n = 150000;
    gb_buf b = {0};
    char s[32];
    gb_header(&b, 3, 0, 2);
    gb_kv(&b, "tokenizer.ggml.tokens", 9);
    gb_arr(&b, 8, n);
    for (uint64_t i = 0; i < n; i++) {
        snprintf(s, sizeof s, "tok%llu", (unsigned long long)(i * 7919));
        gb_str(&b, s);
    }
    gb_kv_u32(&b, "after", 77);
    strata_gguf *g = open_mem(&b);
    if (g) {
        strata_gguf_value v, e;
        CHECK(value_of(g, "tokenizer.ggml.tokens", &v) && v.v.arr.count == n, "count");
        int ok = 1;
        for (uint64_t i = n - 1; i < n; i -= 997) { /* backwards, sparse: random access */
            snprintf(s, sizeof s, "tok%llu", (unsigned long long)(i * 7919));
            ok &= strata_gguf_array_get(g, &v, i, &e) == STRATA_OK && str_eq(&e, s);
        }
        CHECK(ok, "random access into 150k strings");
        uint64_t u;
        CHECK(strata_gguf_get_u64(g, "after", &u) == STRATA_OK && u == 77, "kv after array");
        strata_gguf_free(g);
    }
    gb_free(&b);
}

/* ==== tensors and alignment ================================================================== */

/* Three tensors (f32 [4,2], q8_0 [64,3], f16 [8]) with recognisable bytes; alignment 0 = default.
 * Tensor data bytes: tensor t byte k = (t * 37 + k) & 0xff. */
static void build_tensor_file(gb_buf *b, uint32_t version, uint32_t alignment) {
    const uint64_t ne0[2] = {4, 2}, ne1[2] = {64, 3}, ne2[1] = {8};
    uint32_t a = alignment ? alignment : 32;
    uint64_t sz0 = 32, sz1 = 3 * 2 * 34, sz2 = 16;
    uint64_t off1 = (sz0 + a - 1) / a * a, off2 = (off1 + sz1 + a - 1) / a * a;
    gb_header(b, version, 3, alignment ? 2 : 1);
    gb_kv_str(b, "general.architecture", "test");
    if (alignment) gb_kv_u32(b, "general.alignment", alignment);
    gb_tensor(b, "t.f32", 2, ne0, 0, 0);
    gb_tensor(b, "blk.0.q8", 2, ne1, 8, off1);
    gb_tensor(b, "t.f16", 1, ne2, 1, off2);
    gb_pad(b, a);
    size_t start = b->len;
    const uint64_t offs[3] = {0, off1, off2}, szs[3] = {sz0, sz1, sz2};
    for (int t = 0; t < 3; t++) {
        while (b->len < start + offs[t]) gb_u8(b, 0xee);
        for (uint64_t k = 0; k < szs[t]; k++) gb_u8(b, (uint8_t)((t * 37 + k) & 0xff));
    }
}

static int data_ok(const strata_tensor_info *ti, int t) {
    const uint8_t *p = ti->data;
    for (uint64_t k = 0; k < ti->n_bytes; k++)
        if (p[k] != (uint8_t)((t * 37 + k) & 0xff)) return 0;
    return 1;
}

static void check_tensor_file(strata_gguf *g, uint32_t a, const uint8_t *image) {
    CHECK(strata_gguf_alignment(g) == a, "alignment %u want %u", strata_gguf_alignment(g), a);
    CHECK(strata_gguf_tensor_count(g) == 3, "tensor count");
    strata_tensor_info ti;
    CHECK(strata_gguf_tensor_info(g, 0, &ti) == STRATA_OK, "info 0");
    CHECK(strcmp(ti.name, "t.f32") == 0 && ti.type == STRATA_TYPE_F32 && ti.n_dims == 2 &&
          ti.ne[0] == 4 && ti.ne[1] == 2 && ti.ne[2] == 1 && ti.ne[3] == 1 &&
          ti.n_elements == 8 && ti.n_bytes == 32 && ti.offset == 0 && ti.shard == 0,
          "tensor 0 fields");
    CHECK(ti.file_offset % a == 0, "data section aligned: %llu", (unsigned long long)ti.file_offset);
    CHECK(data_ok(&ti, 0), "tensor 0 bytes");
    if (image) CHECK((const uint8_t *)ti.data == image + ti.file_offset, "data = image + offset");
    uint64_t start = ti.file_offset;
    CHECK(strata_gguf_tensor_info(g, 1, &ti) == STRATA_OK, "info 1");
    CHECK(strcmp(ti.name, "blk.0.q8") == 0 && ti.type == STRATA_TYPE_Q8_0 && ti.ne[0] == 64 &&
          ti.ne[1] == 3 && ti.n_elements == 192 && ti.n_bytes == 204 && ti.offset % a == 0 &&
          ti.offset >= 32 && ti.file_offset == start + ti.offset, "tensor 1 fields");
    CHECK(data_ok(&ti, 1), "tensor 1 bytes");
    CHECK(strata_gguf_tensor_info(g, 2, &ti) == STRATA_OK, "info 2");
    CHECK(strcmp(ti.name, "t.f16") == 0 && ti.type == STRATA_TYPE_F16 && ti.n_dims == 1 &&
          ti.ne[0] == 8 && ti.ne[1] == 1 && ti.n_bytes == 16 && ti.offset % a == 0,
          "tensor 2 fields");
    CHECK(data_ok(&ti, 2), "tensor 2 bytes");
    CHECK(strata_gguf_tensor_info(g, 3, &ti) == STRATA_ERR_NOT_FOUND, "info range");
    CHECK(strata_gguf_tensor_find(g, "blk.0.q8") == 1, "find");
    CHECK(strata_gguf_tensor_find(g, "t.f16") == 2, "find 2");
    CHECK(strata_gguf_tensor_find(g, "nope") == -1, "find missing");
}

static void test_tensors(void) {
    const uint32_t aligns[4] = {0, 64, 1, 4096};
    for (int v = 2; v <= 3; v++)
        for (int k = 0; k < 4; k++) {
            gb_buf b = {0};
            build_tensor_file(&b, (uint32_t)v, aligns[k]);
            strata_gguf *g = NULL;
            strata_status st = strata_gguf_open_memory(b.p, b.len, 1, NULL, &g);
            CHECK(st == STRATA_OK, "v%d align %u: %s", v, aligns[k], strata_last_error());
            if (g) {
                check_tensor_file(g, aligns[k] ? aligns[k] : 32, b.p);
                strata_gguf_free(g);
            }
            gb_free(&b);
        }
    /* max_alignment param: 4096 rejected when the limit is 1024 */
    gb_buf b = {0};
    build_tensor_file(&b, 3, 4096);
    strata_gguf_params p = strata_gguf_default_params();
    CHECK(p.use_mmap == 1 && p.open_shards == 1 && p.max_alignment == (1u << 20), "defaults");
    p.max_alignment = 1024;
    strata_gguf *g = NULL;
    CHECK(strata_gguf_open_memory(b.p, b.len, 1, &p, &g) == STRATA_ERR_FORMAT && !g,
          "max_alignment respected");
    CHECK(strstr(strata_last_error(), "general.alignment") != NULL, "msg: %s", strata_last_error());
    gb_free(&b);
}

/* ==== files: mmap and read =================================================================== */

static char tmpdir[256];

static void test_files(void) {
    gb_buf b = {0};
    build_tensor_file(&b, 3, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/model.gguf", tmpdir);
    CHECK(gb_write_file(&b, path) == 0, "write %s", path);
    for (int mm = 0; mm <= 1; mm++) {
        strata_gguf_params p = strata_gguf_default_params();
        p.use_mmap = mm;
        strata_gguf *g = NULL;
        strata_status st = strata_gguf_open(path, &p, &g);
        CHECK(st == STRATA_OK, "open mmap=%d: %s", mm, strata_last_error());
        if (g) {
            check_tensor_file(g, 32, NULL);
            CHECK(strcmp(strata_gguf_shard_path(g, 0), path) == 0, "path");
            strata_gguf_free(g);
        }
    }
    strata_gguf *g = NULL;
    snprintf(path, sizeof path, "%s/absent.gguf", tmpdir);
    CHECK(strata_gguf_open(path, NULL, &g) == STRATA_ERR_IO && !g, "missing file");
    CHECK(strstr(strata_last_error(), "absent.gguf") && strstr(strata_last_error(), "No such"),
          "missing message: %s", strata_last_error());
    CHECK(strata_gguf_open(tmpdir, NULL, &g) == STRATA_ERR_IO, "directory");
    snprintf(path, sizeof path, "%s/empty.gguf", tmpdir);
    gb_buf e = {0};
    CHECK(gb_write_file(&e, path) == 0, "write empty");
    CHECK(strata_gguf_open(path, NULL, &g) == STRATA_ERR_FORMAT, "empty file");
    CHECK(strstr(strata_last_error(), "empty"), "empty msg: %s", strata_last_error());
    CHECK(strata_gguf_open(NULL, NULL, &g) == STRATA_ERR_INVALID_ARG, "NULL path");
    /* a truncated file on disk names the file in its message */
    snprintf(path, sizeof path, "%s/trunc.gguf", tmpdir);
    b.len -= 10;
    CHECK(gb_write_file(&b, path) == 0, "write trunc");
    CHECK(strata_gguf_open(path, NULL, &g) == STRATA_ERR_FORMAT, "truncated on disk");
    CHECK(strstr(strata_last_error(), "trunc.gguf") && strstr(strata_last_error(), "offset"),
          "trunc msg: %s", strata_last_error());
    strata_gguf_free(NULL);
    gb_free(&b);
}

/* ==== split models =========================================================================== */

typedef struct {
    int count_field;       /* split.count written (-1: omit) */
    int no_field;          /* split.no written (-1: omit) */
    int tensors_field;     /* split.tensors.count (-1: omit) */
} shard_meta;

/* Shard `no` of a split: kvs split.no (u16), split.count (u16), split.tensors.count (i32), then
 * general.name (all shards: shard-specific value) and shard.N.key (a key only this shard has).
 * Tensors: shard s holds tensors named names[s][*], f32 [8] each, bytes (s*50 + t*7 + k). */
static void build_shard(gb_buf *b, int no, shard_meta m, const char *const *names, int nt) {
    char key[64], val[64];
    int nkv = 2 + (m.count_field >= 0) + (m.no_field >= 0) + (m.tensors_field >= 0);
    gb_header(b, 3, (uint64_t)nt, (uint64_t)nkv);
    if (m.no_field >= 0) gb_kv_u16(b, "split.no", (uint16_t)m.no_field);
    if (m.count_field >= 0) gb_kv_u16(b, "split.count", (uint16_t)m.count_field);
    if (m.tensors_field >= 0) gb_kv_i32(b, "split.tensors.count", m.tensors_field);
    snprintf(val, sizeof val, "name-from-shard-%d", no);
    gb_kv_str(b, "general.name", val);
    snprintf(key, sizeof key, "shard.%d.key", no);
    gb_kv_u32(b, key, (uint32_t)(100 + no));
    const uint64_t ne[1] = {8};
    for (int t = 0; t < nt; t++) gb_tensor(b, names[t], 1, ne, 0, (uint64_t)t * 32);
    gb_pad(b, 32);
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < 32; k++) gb_u8(b, (uint8_t)(no * 50 + t * 7 + k));
}

static const char *const shard_names[3][2] = {{"a", "b"}, {"c", NULL}, {"d", "e"}};
static const int shard_nt[3] = {2, 1, 2};

/* Writes DIR/NAME-0000i-of-00003.gguf for i = 1..3; meta[s] per shard. */
static void write_split(const char *name, const shard_meta meta[3]) {
    for (int s = 0; s < 3; s++) {
        gb_buf b = {0};
        char path[512];
        build_shard(&b, s, meta[s], shard_names[s], shard_nt[s]);
        snprintf(path, sizeof path, "%s/%s-%05d-of-00003.gguf", tmpdir, name, s + 1);
        CHECK(gb_write_file(&b, path) == 0, "write %s", path);
        gb_free(&b);
    }
}

static void test_split(void) {
    const shard_meta good[3] = {{3, 0, 5}, {3, 1, 5}, {3, 2, -1}};
    write_split("m", good);
    for (int which = 1; which <= 3; which++) {
        char path[512];
        snprintf(path, sizeof path, "%s/m-%05d-of-00003.gguf", tmpdir, which);
        strata_gguf *g = NULL;
        strata_status st = strata_gguf_open(path, NULL, &g);
        CHECK(st == STRATA_OK, "open shard %d: %s", which, strata_last_error());
        if (!g) continue;
        CHECK(strata_gguf_shard_count(g) == 3, "shard count");
        for (uint32_t s = 0; s < 3; s++) {
            char want[512];
            snprintf(want, sizeof want, "%s/m-%05u-of-00003.gguf", tmpdir, s + 1);
            CHECK(strata_gguf_shard_path(g, s) && strcmp(strata_gguf_shard_path(g, s), want) == 0,
                  "shard path %u", s);
        }
        CHECK(strata_gguf_tensor_count(g) == 5, "tensors %lld", (long long)strata_gguf_tensor_count(g));
        const char *order[5] = {"a", "b", "c", "d", "e"};
        const uint32_t shard_of[5] = {0, 0, 1, 2, 2};
        const int t_in_shard[5] = {0, 1, 0, 0, 1};
        for (int t = 0; t < 5; t++) {
            strata_tensor_info ti;
            int64_t idx = strata_gguf_tensor_find(g, order[t]);
            CHECK(idx == t, "find %s -> %lld", order[t], (long long)idx);
            if (strata_gguf_tensor_info(g, t, &ti) != STRATA_OK) continue;
            const uint8_t *p = ti.data;
            int ok = 1;
            for (int k = 0; k < 32; k++)
                ok &= p[k] == (uint8_t)(shard_of[t] * 50 + (uint32_t)t_in_shard[t] * 7 + (uint32_t)k);
            CHECK(strcmp(ti.name, order[t]) == 0 && ti.shard == shard_of[t] && ok,
                  "tensor %s shard %u data", order[t], ti.shard);
        }
        /* kvs: shard 0's five, then shard.1.key and shard.2.key; no later split.* or general.name */
        CHECK(strata_gguf_kv_count(g) == 7, "kv count %lld", (long long)strata_gguf_kv_count(g));
        CHECK(strcmp(strata_gguf_kv_key(g, 5), "shard.1.key") == 0, "later shard key 1");
        CHECK(strcmp(strata_gguf_kv_key(g, 6), "shard.2.key") == 0, "later shard key 2");
        const char *s;
        uint64_t len, u;
        CHECK(strata_gguf_get_str(g, "general.name", &s, &len) == STRATA_OK &&
              len == strlen("name-from-shard-0") && memcmp(s, "name-from-shard-0", len) == 0,
              "shard 0 wins");
        CHECK(strata_gguf_get_u64(g, "split.no", &u) == STRATA_OK && u == 0, "split.no of shard 0");
        CHECK(strata_gguf_get_u64(g, "shard.2.key", &u) == STRATA_OK && u == 102, "shard 2 key");
        strata_gguf_free(g);
    }
    /* open_shards = 0: the named shard alone, as shard 0 of 1 */
    {
        char path[512];
        snprintf(path, sizeof path, "%s/m-00003-of-00003.gguf", tmpdir);
        strata_gguf_params p = strata_gguf_default_params();
        p.open_shards = 0;
        strata_gguf *g = NULL;
        CHECK(strata_gguf_open(path, &p, &g) == STRATA_OK, "alone: %s", strata_last_error());
        if (g) {
            strata_tensor_info ti;
            CHECK(strata_gguf_shard_count(g) == 1 && strata_gguf_tensor_count(g) == 2, "alone counts");
            CHECK(strata_gguf_tensor_info(g, 1, &ti) == STRATA_OK && strcmp(ti.name, "e") == 0 &&
                  ti.shard == 0, "alone tensor");
            strata_gguf_free(g);
        }
    }
    /* hostile splits */
    struct { const char *name; shard_meta m[3]; strata_status st; const char *msg; } bad[] = {
        {"cnt", {{3, 0, -1}, {4, 1, -1}, {3, 2, -1}}, STRATA_ERR_FORMAT, "split.count"},
        {"nocnt", {{-1, 0, -1}, {3, 1, -1}, {3, 2, -1}}, STRATA_ERR_FORMAT, "split.count"},
        {"no", {{3, 0, -1}, {3, 1, -1}, {3, 1, -1}}, STRATA_ERR_FORMAT, "split.no"},
        {"tc", {{3, 0, 4}, {3, 1, -1}, {3, 2, -1}}, STRATA_ERR_FORMAT, "split.tensors.count"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char path[512];
        write_split(bad[k].name, bad[k].m);
        snprintf(path, sizeof path, "%s/%s-00002-of-00003.gguf", tmpdir, bad[k].name);
        strata_gguf *g = NULL;
        strata_status st = strata_gguf_open(path, NULL, &g);
        CHECK(st == bad[k].st && !g, "split %s: %s", bad[k].name, strata_status_name(st));
        CHECK(strstr(strata_last_error(), bad[k].msg) != NULL, "split %s msg: %s", bad[k].name,
              strata_last_error());
    }
    /* a missing shard */
    {
        char path[512];
        write_split("miss", good);
        snprintf(path, sizeof path, "%s/miss-00003-of-00003.gguf", tmpdir);
        unlink(path);
        snprintf(path, sizeof path, "%s/miss-00001-of-00003.gguf", tmpdir);
        strata_gguf *g = NULL;
        CHECK(strata_gguf_open(path, NULL, &g) == STRATA_ERR_IO && !g, "missing shard");
        CHECK(strstr(strata_last_error(), "shard 2 of 3"), "missing msg: %s", strata_last_error());
    }
    /* a tensor name in two shards */
    {
        static const char *const dup0[2] = {"a", "x"}, *const dup2[2] = {"x", "e"};
        for (int s = 0; s < 3; s++) {
            gb_buf b = {0};
            char path[512];
            shard_meta m = {3, s, -1};
            build_shard(&b, s, m, s == 0 ? dup0 : s == 1 ? shard_names[1] : dup2, shard_nt[s]);
            snprintf(path, sizeof path, "%s/dup-%05d-of-00003.gguf", tmpdir, s + 1);
            gb_write_file(&b, path);
            gb_free(&b);
        }
        char path[512];
        snprintf(path, sizeof path, "%s/dup-00001-of-00003.gguf", tmpdir);
        strata_gguf *g = NULL;
        CHECK(strata_gguf_open(path, NULL, &g) == STRATA_ERR_FORMAT && !g, "dup across shards");
        CHECK(strstr(strata_last_error(), "duplicate tensor name 'x'"), "dup msg: %s",
              strata_last_error());
    }
    /* open_memory of a shard: validated alone; split.no >= split.count rejected */
    {
        gb_buf b = {0};
        shard_meta m = {3, 2, -1};
        build_shard(&b, 2, m, shard_names[2], 2);
        strata_gguf *g = open_mem(&b);
        if (g) {
            CHECK(strata_gguf_shard_count(g) == 1 && strata_gguf_tensor_count(g) == 2, "mem shard");
            strata_gguf_free(g);
        }
        gb_free(&b);
        shard_meta m2 = {2, 2, -1};
        build_shard(&b, 2, m2, shard_names[2], 2);
        CHECK(strata_gguf_open_memory(b.p, b.len, 1, NULL, &g) == STRATA_ERR_FORMAT,
              "split.no >= split.count");
        CHECK(strstr(strata_last_error(), "split.no"), "msg: %s", strata_last_error());
        gb_free(&b);
    }
}

/* ==== the real files of ../shared ============================================================ */

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void test_real_files(void) {
    const char *shared = getenv("STRATA_SHARED");
    if (!shared) shared = "../shared";
    struct stat sb;
    if (stat(shared, &sb) != 0) {
        SKIP("%s is absent: real GGUF files not tested", shared);
        return;
    }
    /* token counts, first and last tokens: read independently with the Python gguf package */
    struct { const char *file; uint64_t n_tokens; const char *first, *last; } files[] = {
        {"vocab/ggml-vocab-gpt-2.gguf", 50257, "!", "<|endoftext|>"},
        {"vocab/ggml-vocab-llama-bpe.gguf", 128256, "!", "<|reserved_special_token_250|>"},
        {"vocab/ggml-vocab-llama-spm.gguf", 32000, "<unk>", "\xe7\xbb\x99"},
        {"vocab/ggml-vocab-qwen2.gguf", 151936, "!", "[PAD151935]"},
        {"models/strata-tiny-moe-q8_0.gguf", 8192, "<|endoftext|>", "ett"},
    };
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", shared, files[k].file);
        FILE *fp = fopen(path, "rb");
        uint8_t hdr[24];
        if (!fp || fread(hdr, 1, 24, fp) != 24) {
            if (fp) fclose(fp);
            SKIP("%s unreadable", path);
            continue;
        }
        fclose(fp);
        struct stat fs;
        uint64_t fsize = stat(path, &fs) == 0 ? (uint64_t)fs.st_size : 0;
        strata_gguf *g = NULL;
        strata_status st = strata_gguf_open(path, NULL, &g);
        CHECK(st == STRATA_OK, "%s: %s", path, strata_last_error());
        if (!g) continue;
        CHECK((uint64_t)strata_gguf_tensor_count(g) == rd_u64(hdr + 8), "%s tensor count", path);
        CHECK((uint64_t)strata_gguf_kv_count(g) == rd_u64(hdr + 16), "%s kv count", path);
        strata_gguf_value v, e;
        int64_t i = strata_gguf_kv_find(g, "tokenizer.ggml.tokens");
        CHECK(i >= 0 && strata_gguf_kv_value(g, i, &v) == STRATA_OK &&
              v.type == STRATA_GGUF_ARRAY && v.v.arr.count == files[k].n_tokens,
              "%s token count", path);
        if (i >= 0) {
            CHECK(strata_gguf_array_get(g, &v, 0, &e) == STRATA_OK && str_eq(&e, files[k].first),
                  "%s first token", path);
            CHECK(strata_gguf_array_get(g, &v, v.v.arr.count - 1, &e) == STRATA_OK &&
                  str_eq(&e, files[k].last), "%s last token", path);
        }
        if (strata_gguf_tensor_count(g) > 0) {
            /* every tensor lies inside the file and can be found by name */
            int ok = 1;
            for (int64_t t = 0; t < strata_gguf_tensor_count(g); t++) {
                strata_tensor_info ti;
                ok &= strata_gguf_tensor_info(g, t, &ti) == STRATA_OK &&
                      strata_gguf_tensor_find(g, ti.name) == t &&
                      ti.file_offset + ti.n_bytes <= fsize &&
                      (int64_t)ti.n_bytes == strata_row_bytes(ti.type, ti.ne[0]) * ti.ne[1] *
                      ti.ne[2] * ti.ne[3];
            }
            CHECK(ok, "%s tensors consistent", path);
            CHECK(strata_gguf_tensor_find(g, "token_embd.weight") >= 0, "%s token_embd", path);
        }
        strata_gguf_free(g);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/strata-test-gguf-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_all_types(2);
    test_all_types(3);
    test_getters();
    test_nested();
    test_big_string_array();
    test_tensors();
    test_files();
    test_split();
    test_real_files();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report();
}
