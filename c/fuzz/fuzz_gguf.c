/* fuzz_gguf.c - libFuzzer harness of the GGUF reader: strata_gguf_open_memory (borrowed bytes),
 * then a walk of every key/value pair (recursively through arrays, touching every string byte) and
 * every tensor info (touching the first and last data byte), so ASan sees every pointer the reader
 * hands out.
 *
 *   make fuzz                                   clang -fsanitize=fuzzer,address,undefined
 *   ./build/fuzz_gguf -seeds DIR                write a seed corpus of valid files to DIR
 *   ./build/fuzz_gguf DIR -runs=1000000 -max_len=4096
 *
 * Built with -DSTRATA_FUZZ_STANDALONE (any C compiler, no libFuzzer), main() runs the harness
 * once over each file named on the command line, and also supports -seeds DIR. See
 * docs/FUZZING.md. */
#include "strata.h"
#include "strata_gguf.h"
#include "../tests/gguf_build.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== harness ================================================================================ */

static volatile uint64_t fz_sink;

static uint64_t fz_value(const strata_gguf *g, const strata_gguf_value *v, int depth) {
    uint64_t h = (uint64_t)v->type;
    switch (v->type) {
    case STRATA_GGUF_STRING:
        for (uint64_t i = 0; i < v->v.str.len; i++) h = h * 31 + (unsigned char)v->v.str.ptr[i];
        break;
    case STRATA_GGUF_ARRAY:
        if (depth > 8) __builtin_trap(); /* the reader promised at most 8 levels */
        for (uint64_t i = 0; i < v->v.arr.count; i++) {
            strata_gguf_value e;
            if (strata_gguf_array_get(g, v, i, &e) != STRATA_OK) __builtin_trap();
            if (e.type != v->v.arr.elem_type) __builtin_trap();
            h += fz_value(g, &e, depth + 1);
        }
        break;
    case STRATA_GGUF_FLOAT32:
    case STRATA_GGUF_FLOAT64: h += (uint64_t)(v->v.f64 == v->v.f64); break;
    default: h += v->v.u64; break;
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    strata_gguf *g = NULL;
    strata_status st = strata_gguf_open_memory(data, size, 1, NULL, &g);
    if (st != STRATA_OK) {
        if (g || strata_last_error()[0] == '\0') __builtin_trap(); /* failures carry a message */
        return 0;
    }
    uint64_t h = strata_gguf_version(g) + strata_gguf_alignment(g);
    for (int64_t i = 0; i < strata_gguf_kv_count(g); i++) {
        strata_gguf_value v;
        const char *key = strata_gguf_kv_key(g, i);
        if (!key || strata_gguf_kv_find(g, key) != i) __builtin_trap();
        if (strata_gguf_kv_value(g, i, &v) != STRATA_OK) __builtin_trap();
        h += fz_value(g, &v, 1);
        uint64_t u;
        int64_t s;
        double d;
        int b;
        const char *p;
        uint64_t len;
        h += (uint64_t)strata_gguf_get_u64(g, key, &u) + (uint64_t)strata_gguf_get_i64(g, key, &s) +
             (uint64_t)strata_gguf_get_f64(g, key, &d) + (uint64_t)strata_gguf_get_bool(g, key, &b) +
             (uint64_t)strata_gguf_get_str(g, key, &p, &len);
    }
    for (int64_t i = 0; i < strata_gguf_tensor_count(g); i++) {
        strata_tensor_info ti;
        if (strata_gguf_tensor_info(g, i, &ti) != STRATA_OK) __builtin_trap();
        if (strata_gguf_tensor_find(g, ti.name) != i) __builtin_trap();
        const uint8_t *d = ti.data;
        if (ti.n_bytes == 0 || d < data || ti.file_offset + ti.n_bytes > size) __builtin_trap();
        h += d[0] + d[ti.n_bytes - 1] + (uint64_t)ti.ne[0];
    }
    fz_sink += h;
    strata_gguf_free(g);
    return 0;
}

/* ==== seed corpus ============================================================================ */

static int fz_write(const char *dir, const char *name, const gb_buf *b) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gb_write_file(b, path) != 0) {
        fprintf(stderr, "fuzz_gguf: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

/* Small valid files covering every value type, nested and string arrays, custom alignment and
 * several tensor types. */
static int fz_seeds(const char *dir) {
    int err = 0;
    gb_buf b = {0};
    const uint64_t ne8[1] = {8}, ne32x2[2] = {32, 2}, ne256[1] = {256};

    /* 1: every scalar type, v3 */
    gb_header(&b, 3, 0, 13);
    gb_kv(&b, "u8", 0); gb_u8(&b, 1);
    gb_kv(&b, "i8", 1); gb_u8(&b, 0xff);
    gb_kv(&b, "u16", 2); gb_u16(&b, 2);
    gb_kv(&b, "i16", 3); gb_u16(&b, 0xfffe);
    gb_kv_u32(&b, "u32", 3);
    gb_kv_i32(&b, "i32", -4);
    gb_kv_f32(&b, "f32", 0.5f);
    gb_kv(&b, "bool", 7); gb_u8(&b, 1);
    gb_kv_str(&b, "str", "text");
    gb_kv_u64(&b, "u64", 5);
    gb_kv(&b, "i64", 11); gb_u64(&b, (uint64_t)-6);
    gb_kv(&b, "f64", 12); gb_f64(&b, 0.25);
    gb_kv(&b, "arr", 9); gb_arr(&b, 4, 2); gb_u32(&b, 7); gb_u32(&b, 8);
    err |= fz_write(dir, "scalars_v3.gguf", &b);
    b.p[4] = 2; /* the same file as v2 */
    err |= fz_write(dir, "scalars_v2.gguf", &b);
    gb_free(&b);

    /* 2: string and nested arrays */
    gb_header(&b, 3, 0, 3);
    gb_kv(&b, "tokenizer.ggml.tokens", 9); gb_arr(&b, 8, 4);
    gb_str(&b, "a"); gb_str(&b, "bc"); gb_str(&b, ""); gb_str(&b, "def");
    gb_kv(&b, "nested", 9); gb_arr(&b, 9, 2);
    gb_arr(&b, 9, 1); gb_arr(&b, 8, 1); gb_str(&b, "x");
    gb_arr(&b, 7, 2); gb_u8(&b, 0); gb_u8(&b, 1);
    gb_kv(&b, "floats", 9); gb_arr(&b, 6, 2); gb_f32(&b, 1.0f); gb_f32(&b, -2.0f);
    err |= fz_write(dir, "arrays.gguf", &b);
    gb_free(&b);

    /* 3: tensors, default alignment */
    gb_header(&b, 3, 3, 1);
    gb_kv_str(&b, "general.architecture", "fuzz");
    gb_tensor(&b, "a", 1, ne8, 0, 0);
    gb_tensor(&b, "b", 2, ne32x2, 8, 32);
    gb_tensor(&b, "c", 1, ne256, 12, 128);
    gb_pad(&b, 32);
    gb_zeros(&b, 128 + 144);
    err |= fz_write(dir, "tensors.gguf", &b);
    gb_free(&b);

    /* 4: tensors, custom alignment, split metadata of a lone shard */
    gb_header(&b, 3, 2, 4);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_kv_u16(&b, "split.no", 0);
    gb_kv_u16(&b, "split.count", 1);
    gb_kv_i32(&b, "split.tensors.count", 2);
    gb_tensor(&b, "w.f16", 1, ne8, 1, 0);
    gb_tensor(&b, "w.q4_0", 2, ne32x2, 2, 64);
    gb_pad(&b, 64);
    gb_zeros(&b, 64 + 36);
    err |= fz_write(dir, "aligned_split.gguf", &b);
    gb_free(&b);
    return err;
}

/* ==== standalone driver ====================================================================== */

#if defined(STRATA_FUZZ_STANDALONE)
int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "-seeds") == 0) return fz_seeds(argv[2]);
    int n = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "fuzz_gguf: cannot open %s\n", argv[i]);
            return 1;
        }
        gb_buf b = {0};
        uint8_t chunk[65536];
        size_t r;
        while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) gb_bytes(&b, chunk, r);
        fclose(f);
        LLVMFuzzerTestOneInput(b.p ? b.p : (const uint8_t *)"", b.len);
        gb_free(&b);
        n++;
    }
    fprintf(stderr, "fuzz_gguf: ran %d inputs\n", n);
    return 0;
}
#else
/* Under libFuzzer, "-seeds DIR" as the first arguments writes the seed corpus instead. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (*argc >= 3 && strcmp((*argv)[1], "-seeds") == 0) exit(fz_seeds((*argv)[2]));
    return 0;
}
#endif
