/* test_cli_quantize.c - the internal GGUF writer and strata_quantize_file, read back through the
 * GGUF reader: every value type, string and empty arrays, replacing and removing keys, custom
 * alignment, data from buffers and fill callbacks, a byte-identical copy of a file made from its
 * own values, argument errors, partial-file removal on failure, and quantizing the written file. */
#include "gguf_writer.h"
#include "strata.h"
#include "strata_gguf.h"
#include "strata_quant.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path_a[256], path_b[256], path_c[256];

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

static unsigned char *read_all(const char *p, long *size) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size + 1);
    if (b && fread(b, 1, (size_t)*size, f) != (size_t)*size) { free(b); b = NULL; }
    fclose(f);
    return b;
}

/* fills tensor bytes with q8_0 blocks of scale 1/64 and quants i - 16 */
static strata_status fill_q8(void *ctx, int64_t index, void *dst, uint64_t n_bytes) {
    (void)ctx; (void)index;
    uint8_t *p = dst;
    for (uint64_t b = 0; b < n_bytes / 34; b++) {
        uint16_t d = 0x2400; /* 2^-6 */
        memcpy(p + b * 34, &d, 2);
        for (int i = 0; i < 32; i++) p[b * 34 + 2 + i] = (uint8_t)(int8_t)(i - 16);
    }
    return STRATA_OK;
}

static strata_status fill_fail(void *ctx, int64_t index, void *dst, uint64_t n_bytes) {
    (void)ctx; (void)dst; (void)n_bytes;
    return st_error(STRATA_ERR_IO, "test: fill of tensor %lld failed on purpose", (long long)index);
}

static float f32_data[4 * 64];

static void write_file_a(void) {
    st_gguf_writer *w = NULL;
    CHECK(st_gguf_writer_create(path_a, 64, &w) == STRATA_OK, "create: %s", strata_last_error());
    if (!w) return;
    CHECK(st_gguf_writer_set_str(w, "general.architecture", "testarch") == STRATA_OK, "str");
    CHECK(st_gguf_writer_set_u8(w, "v.u8", 200) == STRATA_OK, "u8");
    CHECK(st_gguf_writer_set_i8(w, "v.i8", -100) == STRATA_OK, "i8");
    CHECK(st_gguf_writer_set_u16(w, "v.u16", 60000) == STRATA_OK, "u16");
    CHECK(st_gguf_writer_set_i16(w, "v.i16", -30000) == STRATA_OK, "i16");
    CHECK(st_gguf_writer_set_u32(w, "v.u32", 4000000000u) == STRATA_OK, "u32");
    CHECK(st_gguf_writer_set_i32(w, "v.i32", -2000000000) == STRATA_OK, "i32");
    CHECK(st_gguf_writer_set_u64(w, "v.u64", 18000000000000000000ull) == STRATA_OK, "u64");
    CHECK(st_gguf_writer_set_i64(w, "v.i64", -9000000000000000000ll) == STRATA_OK, "i64");
    CHECK(st_gguf_writer_set_f32(w, "v.f32", 0.15625f) == STRATA_OK, "f32");
    CHECK(st_gguf_writer_set_f64(w, "v.f64", 3.141592653589793) == STRATA_OK, "f64");
    CHECK(st_gguf_writer_set_bool(w, "v.bool", 7) == STRATA_OK, "bool");
    CHECK(st_gguf_writer_set_u32(w, "v.replaced", 1) == STRATA_OK, "first value");
    CHECK(st_gguf_writer_set_u32(w, "v.removed", 1) == STRATA_OK, "to remove");
    const int16_t arr[5] = {1, -2, 3, -4, 5};
    CHECK(st_gguf_writer_set_array(w, "a.i16", STRATA_GGUF_INT16, arr, 5) == STRATA_OK, "array");
    CHECK(st_gguf_writer_set_array(w, "a.empty", STRATA_GGUF_FLOAT32, NULL, 0) == STRATA_OK, "empty");
    const char *strs[3] = {"alpha", "", "\xce\xb3"};
    CHECK(st_gguf_writer_set_str_array(w, "a.str", strs, 3) == STRATA_OK, "str array");
    CHECK(st_gguf_writer_set_str(w, "v.replaced", "second") == STRATA_OK, "replace");
    CHECK(st_gguf_writer_remove(w, "v.removed") == STRATA_OK, "remove");
    CHECK(st_gguf_writer_remove(w, "v.never-there") == STRATA_OK, "remove absent");
    CHECK(st_gguf_writer_kv_count(w) == 16, "kv count %lld", (long long)st_gguf_writer_kv_count(w));

    /* argument errors */
    CHECK(st_gguf_writer_set_array(w, "bad", STRATA_GGUF_STRING, strs, 1) == STRATA_ERR_INVALID_ARG,
          "string elements through set_array");
    int64_t ne_bad[2] = {33, 2};
    CHECK(st_gguf_writer_add_tensor(w, "bad", STRATA_TYPE_Q8_0, 2, ne_bad, f32_data) ==
              STRATA_ERR_INVALID_ARG && strstr(strata_last_error(), "row length"), "row length");
    char long_name[80];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    int64_t ne1[1] = {4};
    CHECK(st_gguf_writer_add_tensor(w, long_name, STRATA_TYPE_F32, 1, ne1, f32_data) ==
              STRATA_ERR_INVALID_ARG, "long name");
    CHECK(st_gguf_writer_add_tensor(w, "t", STRATA_TYPE_F32, 5, ne1, f32_data) ==
              STRATA_ERR_INVALID_ARG, "n_dims 5");

    for (int i = 0; i < 4 * 64; i++) f32_data[i] = sinf((float)i) * 3.0f;
    int64_t ne_f[2] = {64, 4};
    CHECK(st_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", STRATA_TYPE_F32, 2, ne_f, f32_data) ==
              STRATA_OK, "f32 tensor: %s", strata_last_error());
    CHECK(st_gguf_writer_add_tensor(w, "blk.0.ffn_up.weight", STRATA_TYPE_F32, 2, ne_f, f32_data) ==
              STRATA_ERR_INVALID_ARG, "duplicate name");
    int64_t ne_n[1] = {3};
    CHECK(st_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", STRATA_TYPE_F32, 1, ne_n, f32_data) ==
              STRATA_OK, "norm");
    int64_t ne_q[3] = {64, 2, 3};
    CHECK(st_gguf_writer_add_tensor_fill(w, "blk.0.ffn_gate_exps.weight", STRATA_TYPE_Q8_0, 3, ne_q,
                                         fill_q8, NULL) == STRATA_OK, "q8 tensor");
    CHECK(st_gguf_writer_finish(w) == STRATA_OK, "finish: %s", strata_last_error());
    CHECK(st_gguf_writer_finish(w) == STRATA_ERR_INVALID_ARG, "finish twice");
    st_gguf_writer_free(w);
    CHECK(file_exists(path_a), "file kept after a successful finish");
}

static void check_file_a(void) {
    strata_gguf *g = NULL;
    CHECK(strata_gguf_open(path_a, NULL, &g) == STRATA_OK, "open: %s", strata_last_error());
    if (!g) return;
    CHECK(strata_gguf_version(g) == 3, "version");
    CHECK(strata_gguf_alignment(g) == 64, "alignment %u", strata_gguf_alignment(g));
    uint64_t u; int64_t i; double f; int b;
    CHECK(strata_gguf_get_u64(g, "v.u8", &u) == STRATA_OK && u == 200, "u8");
    CHECK(strata_gguf_get_i64(g, "v.i8", &i) == STRATA_OK && i == -100, "i8");
    CHECK(strata_gguf_get_u64(g, "v.u16", &u) == STRATA_OK && u == 60000, "u16");
    CHECK(strata_gguf_get_i64(g, "v.i16", &i) == STRATA_OK && i == -30000, "i16");
    CHECK(strata_gguf_get_u64(g, "v.u32", &u) == STRATA_OK && u == 4000000000u, "u32");
    CHECK(strata_gguf_get_i64(g, "v.i32", &i) == STRATA_OK && i == -2000000000, "i32");
    CHECK(strata_gguf_get_u64(g, "v.u64", &u) == STRATA_OK && u == 18000000000000000000ull, "u64");
    CHECK(strata_gguf_get_i64(g, "v.i64", &i) == STRATA_OK && i == -9000000000000000000ll, "i64");
    CHECK(strata_gguf_get_f64(g, "v.f32", &f) == STRATA_OK && f == 0.15625, "f32");
    CHECK(strata_gguf_get_f64(g, "v.f64", &f) == STRATA_OK && f == 3.141592653589793, "f64");
    CHECK(strata_gguf_get_bool(g, "v.bool", &b) == STRATA_OK && b == 1, "bool");
    CHECK(strata_gguf_get_u64(g, "general.alignment", &u) == STRATA_OK && u == 64, "general.alignment");
    const char *s; uint64_t len;
    CHECK(strata_gguf_get_str(g, "v.replaced", &s, &len) == STRATA_OK && len == 6 &&
              memcmp(s, "second", 6) == 0, "replaced value");
    CHECK(strata_gguf_kv_find(g, "v.removed") < 0, "removed key");
    /* replacing keeps the position: v.replaced comes right after v.bool */
    CHECK(strata_gguf_kv_find(g, "v.replaced") == strata_gguf_kv_find(g, "v.bool") + 1, "order");
    strata_gguf_value v, e;
    int64_t k = strata_gguf_kv_find(g, "a.i16");
    CHECK(k >= 0 && strata_gguf_kv_value(g, k, &v) == STRATA_OK && v.type == STRATA_GGUF_ARRAY &&
              v.v.arr.elem_type == STRATA_GGUF_INT16 && v.v.arr.count == 5, "i16 array");
    CHECK(strata_gguf_array_get(g, &v, 3, &e) == STRATA_OK && e.v.i64 == -4, "i16 element");
    k = strata_gguf_kv_find(g, "a.empty");
    CHECK(k >= 0 && strata_gguf_kv_value(g, k, &v) == STRATA_OK && v.v.arr.count == 0, "empty");
    k = strata_gguf_kv_find(g, "a.str");
    CHECK(k >= 0 && strata_gguf_kv_value(g, k, &v) == STRATA_OK && v.v.arr.count == 3, "strs");
    CHECK(strata_gguf_array_get(g, &v, 2, &e) == STRATA_OK && e.v.str.len == 2 &&
              memcmp(e.v.str.ptr, "\xce\xb3", 2) == 0, "utf-8 string element");
    CHECK(strata_gguf_array_get(g, &v, 1, &e) == STRATA_OK && e.v.str.len == 0, "empty string");

    CHECK(strata_gguf_tensor_count(g) == 3, "tensor count");
    strata_tensor_info t;
    CHECK(strata_gguf_tensor_info(g, 0, &t) == STRATA_OK && t.type == STRATA_TYPE_F32 &&
              t.ne[0] == 64 && t.ne[1] == 4 && t.n_bytes == sizeof f32_data &&
              memcmp(t.data, f32_data, sizeof f32_data) == 0, "f32 tensor bytes");
    CHECK(t.file_offset % 64 == 0, "data aligned");
    CHECK(strata_gguf_tensor_info(g, 1, &t) == STRATA_OK && t.n_bytes == 12 && t.offset % 64 == 0,
          "norm tensor at offset %llu", (unsigned long long)t.offset);
    CHECK(strata_gguf_tensor_info(g, 2, &t) == STRATA_OK && t.type == STRATA_TYPE_Q8_0 &&
              t.n_dims == 3 && t.ne[2] == 3 && t.n_bytes == 12 * 34 && t.offset % 64 == 0, "q8 info");
    float row[64];
    CHECK(strata_dequantize_row(STRATA_TYPE_Q8_0, t.data, row, 64) == STRATA_OK &&
              row[0] == -0.25f && row[31] == 15.0f / 64.0f, "q8 data from fill");
    strata_gguf_free(g);
}

/* A copy made from the file's own values and tensor bytes is byte-identical. */
static void check_copy(void) {
    strata_gguf *g = NULL;
    if (strata_gguf_open(path_a, NULL, &g) != STRATA_OK) { CHECK(0, "reopen"); return; }
    st_gguf_writer *w = NULL;
    CHECK(st_gguf_writer_create(path_b, strata_gguf_alignment(g), &w) == STRATA_OK, "create b");
    for (int64_t i = 0; i < strata_gguf_kv_count(g); i++) {
        strata_gguf_value v;
        strata_gguf_kv_value(g, i, &v);
        CHECK(st_gguf_writer_set_value(w, strata_gguf_kv_key(g, i), g, &v) == STRATA_OK,
              "copy key %s: %s", strata_gguf_kv_key(g, i), strata_last_error());
    }
    for (int64_t i = 0; i < strata_gguf_tensor_count(g); i++) {
        strata_tensor_info t;
        strata_gguf_tensor_info(g, i, &t);
        CHECK(st_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, t.data) == STRATA_OK,
              "copy tensor");
    }
    CHECK(st_gguf_writer_finish(w) == STRATA_OK, "finish b: %s", strata_last_error());
    st_gguf_writer_free(w);
    strata_gguf_free(g);
    long na = 0, nb = 0;
    unsigned char *a = read_all(path_a, &na), *b = read_all(path_b, &nb);
    CHECK(a && b && na == nb && memcmp(a, b, (size_t)na) == 0, "copy differs (%ld vs %ld bytes)",
          na, nb);
    free(a);
    free(b);
}

static void check_failure_cleanup(void) {
    st_gguf_writer *w = NULL;
    CHECK(st_gguf_writer_create(path_c, 32, &w) == STRATA_OK, "create c");
    CHECK(st_gguf_writer_create(path_c, 48, &(st_gguf_writer *){NULL}) == STRATA_ERR_INVALID_ARG,
          "alignment 48 refused");
    int64_t ne[2] = {32, 2};
    st_gguf_writer_add_tensor_fill(w, "x", STRATA_TYPE_Q8_0, 2, ne, fill_fail, NULL);
    strata_status st = st_gguf_writer_finish(w);
    CHECK(st == STRATA_ERR_IO && strstr(strata_last_error(), "on purpose"), "fill error: %d %s",
          st, strata_last_error());
    CHECK(!file_exists(path_c), "partial file removed");
    st_gguf_writer_free(w);
    /* an output that cannot be created */
    CHECK(st_gguf_writer_create("/nonexistent-dir/x.gguf", 32, &w) == STRATA_OK, "create d");
    CHECK(st_gguf_writer_finish(w) == STRATA_ERR_IO && strstr(strata_last_error(), "nonexistent-dir"),
          "unwritable path: %s", strata_last_error());
    st_gguf_writer_free(w);
}

static void check_quantize(void) {
    strata_quantize_stats stats;
    strata_quantize_params p = strata_quantize_default_params();
    CHECK(p.type == STRATA_TYPE_Q8_0 && p.n_threads == 0 && !p.allow_requantize && !p.stats,
          "defaults");
    p.stats = &stats;
    p.n_threads = 2;
    strata_status st = strata_quantize_file(path_a, path_b, &p);
    CHECK(st == STRATA_OK, "quantize: %s", strata_last_error());
    CHECK(stats.n_tensors == 3 && stats.n_quantized == 1 && stats.n_kept == 2, "stats %lld %lld %lld",
          (long long)stats.n_tensors, (long long)stats.n_quantized, (long long)stats.n_kept);
    strata_gguf *g = NULL;
    if (strata_gguf_open(path_b, NULL, &g) != STRATA_OK) { CHECK(0, "open quantized"); return; }
    uint64_t ft = 0;
    CHECK(strata_gguf_get_u64(g, "general.file_type", &ft) == STRATA_OK && ft == 7, "file type");
    CHECK(strata_gguf_alignment(g) == 64, "alignment kept");
    strata_tensor_info t;
    strata_gguf_tensor_info(g, 0, &t);
    CHECK(t.type == STRATA_TYPE_Q8_0, "f32 weight became q8_0");
    float back[64 * 4];
    strata_dequantize_row(STRATA_TYPE_Q8_0, t.data, back, 64 * 4);
    double err = 0;
    for (int i = 0; i < 64 * 4; i++) err = fmax(err, fabs(back[i] - f32_data[i]));
    CHECK(err <= 3.0 / 127.0 * 0.5 + 1e-3, "q8_0 error %g", err);
    strata_gguf_tensor_info(g, 1, &t);
    CHECK(t.type == STRATA_TYPE_F32, "norm kept");
    strata_gguf_free(g);

    p.type = STRATA_TYPE_Q4_K; /* the q8_0 experts: ne0 64 fits no K block: q8_0 kept, no error */
    st = strata_quantize_file(path_b, path_c, &p);
    CHECK(st == STRATA_OK, "q8_0 rows of 64 stay: %s", strata_last_error());
    p.type = STRATA_TYPE_Q8_K;
    CHECK(strata_quantize_file(path_a, path_c, &p) == STRATA_ERR_INVALID_ARG, "q8_K not a target");
    CHECK(strata_quantize_file(path_a, path_a, &p) == STRATA_ERR_INVALID_ARG, "same file");
    CHECK(strata_quantize_file(NULL, path_c, &p) == STRATA_ERR_INVALID_ARG, "NULL path");
}

int main(void) {
    snprintf(path_a, sizeof path_a, "/tmp/strata-test-writer-%d-a.gguf", (int)getpid());
    snprintf(path_b, sizeof path_b, "/tmp/strata-test-writer-%d-b.gguf", (int)getpid());
    snprintf(path_c, sizeof path_c, "/tmp/strata-test-writer-%d-c.gguf", (int)getpid());
    write_file_a();
    check_file_a();
    check_copy();
    check_failure_cleanup();
    check_quantize();
    remove(path_a);
    remove(path_b);
    remove(path_c);
    return test_report();
}
