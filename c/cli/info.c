/* info.c - `strata info MODEL.gguf [--tensors]`: what a GGUF model file holds. Prints the file
 * facts, the architecture and its hyperparameters ("<arch>.*" keys), the tokenizer, a table of
 * the tensors grouped by kind with count and bytes per kind and per type, and (for a file that
 * loads as a model) the KV cache's bytes a token. */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Metadata values
 * ------------------------------------------------------------------------------------------- */

/* Prints a string value with at most max bytes, non-printable bytes escaped. */
static void print_str(const char *p, uint64_t len, uint64_t max) {
    putchar('"');
    for (uint64_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c >= 0x20 && c != 0x7f) putchar(c);
        else if (c == '\n') fputs("\\n", stdout);
        else printf("\\x%02x", c);
    }
    putchar('"');
    if (len > max) printf("... (%" PRIu64 " bytes)", len);
}

static void print_value(const strata_gguf *g, const strata_gguf_value *v) {
    switch (v->type) {
    case STRATA_GGUF_UINT8: case STRATA_GGUF_UINT16: case STRATA_GGUF_UINT32:
    case STRATA_GGUF_UINT64:
        printf("%" PRIu64, v->v.u64);
        break;
    case STRATA_GGUF_INT8: case STRATA_GGUF_INT16: case STRATA_GGUF_INT32: case STRATA_GGUF_INT64:
        printf("%" PRId64, v->v.i64);
        break;
    case STRATA_GGUF_FLOAT32: case STRATA_GGUF_FLOAT64:
        printf("%g", v->v.f64);
        break;
    case STRATA_GGUF_BOOL:
        fputs(v->v.u64 ? "true" : "false", stdout);
        break;
    case STRATA_GGUF_STRING:
        print_str(v->v.str.ptr, v->v.str.len, 60);
        break;
    case STRATA_GGUF_ARRAY: {
        printf("[%" PRIu64 " x %s]", v->v.arr.count, strata_gguf_type_name(v->v.arr.elem_type));
        uint64_t show = v->v.arr.count < 4 ? v->v.arr.count : 4;
        if (v->v.arr.elem_type == STRATA_GGUF_ARRAY) show = 0;
        for (uint64_t i = 0; i < show; i++) {
            strata_gguf_value e;
            if (strata_gguf_array_get(g, v, i, &e) != STRATA_OK) break;
            fputs(i ? ", " : " ", stdout);
            print_value(g, &e);
        }
        if (show && show < v->v.arr.count) fputs(", ...", stdout);
        break;
    }
    default:
        printf("(type %d)", (int)v->type);
    }
}

static void print_kv_line(const strata_gguf *g, const char *label, const char *key) {
    int64_t i = strata_gguf_kv_find(g, key);
    if (i < 0) return;
    strata_gguf_value v;
    if (strata_gguf_kv_value(g, i, &v) != STRATA_OK) return;
    printf("%-16s", label);
    print_value(g, &v);
    putchar('\n');
}

/* general.file_type: llama.cpp's LLAMA_FTYPE_* names (llama.h; gguf-py's LlamaFileType). */
static const char *ftype_name(uint64_t ft) {
    static const char *const names[] = {
        [0] = "ALL_F32", [1] = "MOSTLY_F16", [2] = "MOSTLY_Q4_0", [3] = "MOSTLY_Q4_1",
        [4] = "MOSTLY_Q4_1_SOME_F16", [7] = "MOSTLY_Q8_0", [8] = "MOSTLY_Q5_0", [9] = "MOSTLY_Q5_1",
        [10] = "MOSTLY_Q2_K", [11] = "MOSTLY_Q3_K_S", [12] = "MOSTLY_Q3_K_M", [13] = "MOSTLY_Q3_K_L",
        [14] = "MOSTLY_Q4_K_S", [15] = "MOSTLY_Q4_K_M", [16] = "MOSTLY_Q5_K_S",
        [17] = "MOSTLY_Q5_K_M", [18] = "MOSTLY_Q6_K", [19] = "MOSTLY_IQ2_XXS", [20] = "MOSTLY_IQ2_XS",
        [21] = "MOSTLY_Q2_K_S", [22] = "MOSTLY_IQ3_XS", [23] = "MOSTLY_IQ3_XXS", [24] = "MOSTLY_IQ1_S",
        [25] = "MOSTLY_IQ4_NL", [26] = "MOSTLY_IQ3_S", [27] = "MOSTLY_IQ3_M", [28] = "MOSTLY_IQ2_S",
        [29] = "MOSTLY_IQ2_M", [30] = "MOSTLY_IQ4_XS", [31] = "MOSTLY_IQ1_M", [32] = "MOSTLY_BF16",
        [36] = "MOSTLY_TQ1_0", [37] = "MOSTLY_TQ2_0", [38] = "MOSTLY_MXFP4_MOE", [39] = "MOSTLY_NVFP4",
        [40] = "MOSTLY_Q1_0",
    };
    if (ft == 1024) return "GUESSED";
    return ft < sizeof names / sizeof names[0] && names[ft] ? names[ft] : NULL;
}

/* "file type       MOSTLY_Q8_0 (7)", or the value as stored when it is not a known number. */
static void print_file_type(const strata_gguf *g) {
    int64_t i = strata_gguf_kv_find(g, "general.file_type");
    strata_gguf_value v;
    if (i < 0 || strata_gguf_kv_value(g, i, &v) != STRATA_OK) return;
    const int is_uint = v.type == STRATA_GGUF_UINT8 || v.type == STRATA_GGUF_UINT16 ||
                        v.type == STRATA_GGUF_UINT32 || v.type == STRATA_GGUF_UINT64;
    const int is_int = v.type == STRATA_GGUF_INT8 || v.type == STRATA_GGUF_INT16 ||
                       v.type == STRATA_GGUF_INT32 || v.type == STRATA_GGUF_INT64;
    const char *name = is_uint ? ftype_name(v.v.u64) : is_int && v.v.i64 >= 0 ? ftype_name((uint64_t)v.v.i64) : NULL;
    printf("%-16s", "file type");
    if (name) printf("%s (", name);
    else if (is_uint || is_int) fputs("unknown (", stdout);
    print_value(g, &v);
    puts(name || is_uint || is_int ? ")" : "");
}

static void info_usage(FILE *f) {
    fprintf(f,
        "usage: strata info MODEL.gguf [--tensors] [--gpu-mem SIZE [-c N]]\n"
        "\n"
        "What a GGUF file holds: file version, shards, alignment, architecture and its\n"
        "hyperparameters, file type, tokenizer, and the tensors grouped by kind (count and bytes\n"
        "per kind and type), then for a model Strata runs the KV cache's bytes a token (f16 and\n"
        "f32; MLA's latent row; qwen3next's fixed recurrent state besides). Split files\n"
        "(NAME-00001-of-0000N.gguf) are read whole.\n"
        "\n"
        "  --tensors    also list every tensor: type, shape, bytes, offset and shard\n"
        "  --gpu-mem SIZE  the static split a GPU session with --gpu-mem SIZE alone would use\n"
        "               (which layers' routed experts stay in RAM for the CPU), at context -c N\n"
        "               (default: the model's training context); no GPU needed\n");
}

/* ---------------------------------------------------------------------------------------------
 * Tensor kinds
 * ------------------------------------------------------------------------------------------- */

enum {
    KIND_EMBED, KIND_ATTN, KIND_NORM, KIND_FFN, KIND_ROUTER, KIND_EXPERTS, KIND_SHARED, KIND_OTHER,
    KIND_COUNT
};
static const char *const kind_names[KIND_COUNT] = {
    "embeddings/output", "attention", "norms", "dense FFN", "router", "experts",
    "shared experts", "other",
};

static int tensor_kind(const char *name) {
    if (strstr(name, "norm")) return KIND_NORM;
    if (strstr(name, "ffn_gate_inp") || strstr(name, "exp_probs_b")) return KIND_ROUTER;
    if (strstr(name, "_shexp")) return KIND_SHARED;
    if (strstr(name, "_exps")) return KIND_EXPERTS;
    if (strncmp(name, "token_embd", 10) == 0 || strncmp(name, "output.", 7) == 0 ||
        strcmp(name, "output") == 0 || strncmp(name, "pos_embd", 8) == 0)
        return KIND_EMBED;
    if (strstr(name, "attn_")) return KIND_ATTN;
    if (strstr(name, "ffn_gate") || strstr(name, "ffn_up") || strstr(name, "ffn_down"))
        return KIND_FFN;
    return KIND_OTHER;
}

typedef struct {
    int64_t count[KIND_COUNT][STRATA_TYPE_COUNT];
    uint64_t bytes[KIND_COUNT][STRATA_TYPE_COUNT];
} tensor_table;

static void print_tensor_table(const strata_gguf *g) {
    tensor_table *tt = calloc(1, sizeof *tt);
    if (!tt) return;
    int64_t n = strata_gguf_tensor_count(g);
    int64_t total_count = 0;
    uint64_t total_bytes = 0, total_params = 0;
    for (int64_t i = 0; i < n; i++) {
        strata_tensor_info t;
        if (strata_gguf_tensor_info(g, i, &t) != STRATA_OK) continue;
        int k = tensor_kind(t.name);
        int ty = (int)t.type >= 0 && (int)t.type < STRATA_TYPE_COUNT ? (int)t.type : 0;
        tt->count[k][ty]++;
        tt->bytes[k][ty] += t.n_bytes;
        total_count++;
        total_bytes += t.n_bytes;
        total_params += (uint64_t)t.n_elements;
    }
    char hb[32];
    printf("\n%-20s %8s %14s  %s\n", "tensors by kind", "count", "bytes", "");
    for (int k = 0; k < KIND_COUNT; k++) {
        int64_t c = 0;
        uint64_t b = 0;
        for (int ty = 0; ty < STRATA_TYPE_COUNT; ty++) { c += tt->count[k][ty]; b += tt->bytes[k][ty]; }
        if (c == 0) continue;
        printf("%-20s %8" PRId64 " %14" PRIu64 "  %s\n", kind_names[k], c, b,
               cli_human_bytes((double)b, hb, sizeof hb));
        for (int ty = 0; ty < STRATA_TYPE_COUNT; ty++) {
            if (!tt->count[k][ty]) continue;
            printf("  %-18s %8" PRId64 " %14" PRIu64 "  %s\n", strata_type_name((strata_type)ty),
                   tt->count[k][ty], tt->bytes[k][ty],
                   cli_human_bytes((double)tt->bytes[k][ty], hb, sizeof hb));
        }
    }
    printf("%-20s %8" PRId64 " %14" PRIu64 "  %s, %" PRIu64 " parameters\n", "total", total_count,
           total_bytes, cli_human_bytes((double)total_bytes, hb, sizeof hb), total_params);
    free(tt);
}

static void print_tensor_list(const strata_gguf *g) {
    int64_t n = strata_gguf_tensor_count(g);
    printf("\n%-40s %-8s %-22s %12s %12s %s\n", "tensor", "type", "shape (ne)", "bytes", "offset",
           "shard");
    for (int64_t i = 0; i < n; i++) {
        strata_tensor_info t;
        if (strata_gguf_tensor_info(g, i, &t) != STRATA_OK) continue;
        char shape[64];
        int len = 0;
        for (uint32_t d = 0; d < t.n_dims && len < (int)sizeof shape; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%" PRId64, d ? " x " : "",
                            t.ne[d]);
        printf("%-40s %-8s %-22s %12" PRIu64 " %12" PRIu64 " %u\n", t.name,
               strata_type_name(t.type), shape, t.n_bytes, t.file_offset, t.shard);
    }
}

/* ---------------------------------------------------------------------------------------------
 * The command
 * ------------------------------------------------------------------------------------------- */

/* --gpu-mem: the split strata_placement_fit chooses for the model at path, said in one line. */
static int info_fit(const char *path, int64_t gpu_mem, int64_t n_ctx) {
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = 1;
    strata_model *m = NULL;
    if (strata_model_load(path, &mp, &m) != STRATA_OK) return cli_fail("%s: %s", path, cli_lib_error());
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = (int32_t)n_ctx;
    sp.placement.gpu_mem = gpu_mem;
    int32_t n = 0;
    const strata_status st = strata_placement_fit(m, &sp, &n);
    strata_model_info mi;
    strata_model_get_info(m, &mi);
    strata_model_free(m);
    if (st != STRATA_OK) return cli_fail("--gpu-mem: %s", cli_lib_error());
    char hb[32];
    printf("%-16s--gpu-mem %s", "placement", cli_human_bytes((double)gpu_mem, hb, sizeof hb));
    if (n_ctx > 0) printf(" at -c %lld", (long long)n_ctx);
    if (n == 0) printf(": every layer's routed experts fit on the GPU\n");
    else if (n >= mi.n_layer) printf(": every layer's routed experts stay in RAM for the CPU (as --cpu-moe)\n");
    else printf(": the routed experts of layers 0..%d stay in RAM for the CPU, those of layers %d..%d on the GPU "
                "(as --n-cpu-moe %d)\n", (int)n - 1, (int)n, (int)mi.n_layer - 1, (int)n);
    return 0;
}

/* The KV cache's bytes a token in each kv_type and a recurrent model's state, where the file loads
 * as a model (nothing for files of another architecture or without weights). */
static void info_kv(const char *path) {
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = 1;
    strata_model *m = NULL;
    if (strata_model_load(path, &mp, &m) != STRATA_OK) return;
    const int64_t f16 = strata_model_kv_bytes_per_token(m, STRATA_TYPE_F16);
    const int64_t f32 = strata_model_kv_bytes_per_token(m, STRATA_TYPE_F32);
    const int64_t state = strata_model_state_bytes(m);
    strata_model_free(m);
    if (f16 < 0 || f32 < 0) return;
    char a[32], b[32], c[32];
    printf("%-16s%s a token (f16), %s (f32)", "KV cache", cli_human_bytes((double)f16, a, sizeof a),
           cli_human_bytes((double)f32, b, sizeof b));
    if (state > 0) printf(" + recurrent state %s a session", cli_human_bytes((double)state, c, sizeof c));
    putchar('\n');
}

int cli_cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int list = 0;
    int64_t gpu_mem = 0, n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gpu-mem") == 0 || strcmp(argv[i], "-c") == 0) {
            if (i + 1 >= argc) return cli_usage_error("%s needs a value", argv[i]);
            const char *a = argv[i++];
            int rc = 0;
            if (a[1] == 'c') {
                char *end;
                n_ctx = strtoll(argv[i], &end, 10);
                if (*end || n_ctx < 1 || n_ctx > (1LL << 30)) rc = cli_usage_error("bad value '%s' for -c", argv[i]);
            } else {
                rc = cli_parse_size(a, argv[i], &gpu_mem);
            }
            if (rc) return rc;
            continue;
        }
        if (strcmp(argv[i], "--tensors") == 0) list = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { info_usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("unknown option '%s'", argv[i]);
        else if (path) return cli_usage_error("info takes one model file ('%s' is extra)", argv[i]);
        else path = argv[i];
    }
    if (!path) return cli_usage_error("info needs a model file");
    int rc = cli_check_readable(path);
    if (rc) return rc;

    strata_gguf *g = NULL;
    strata_gguf_params params = strata_gguf_default_params();
    if (strata_gguf_open(path, &params, &g) != STRATA_OK)
        return cli_fail("%s: %s", path, strata_last_error());

    printf("%-16s%s\n", "file", path);
    printf("%-16s%u\n", "gguf version", strata_gguf_version(g));
    printf("%-16s%u\n", "shards", strata_gguf_shard_count(g));
    for (uint32_t s = 0; s < strata_gguf_shard_count(g) && strata_gguf_shard_count(g) > 1; s++)
        printf("  shard %u       %s\n", s, strata_gguf_shard_path(g, s));
    printf("%-16s%u\n", "alignment", strata_gguf_alignment(g));
    printf("%-16s%" PRId64 "\n", "metadata keys", strata_gguf_kv_count(g));
    printf("%-16s%" PRId64 "\n", "tensors", strata_gguf_tensor_count(g));

    /* architecture and its hyperparameters */
    const char *arch = NULL;
    uint64_t arch_len = 0;
    char prefix[128] = "";
    if (strata_gguf_get_str(g, "general.architecture", &arch, &arch_len) == STRATA_OK &&
        arch_len < sizeof prefix - 2) {
        memcpy(prefix, arch, (size_t)arch_len);
        prefix[arch_len] = '.';
        prefix[arch_len + 1] = '\0';
        printf("%-16s%.*s\n", "architecture", (int)arch_len, arch);
    } else {
        printf("%-16s(general.architecture not set)\n", "architecture");
    }
    print_kv_line(g, "name", "general.name");
    print_file_type(g);
    if (prefix[0]) {
        size_t plen = strlen(prefix);
        int header = 0;
        for (int64_t i = 0; i < strata_gguf_kv_count(g); i++) {
            const char *key = strata_gguf_kv_key(g, i);
            strata_gguf_value v;
            if (!key || strncmp(key, prefix, plen) != 0) continue;
            if (strata_gguf_kv_value(g, i, &v) != STRATA_OK) continue;
            if (!header) { printf("hyperparameters\n"); header = 1; }
            printf("  %-34s ", key + plen);
            print_value(g, &v);
            putchar('\n');
        }
    }

    /* tokenizer */
    const char *tok = NULL;
    uint64_t tok_len = 0;
    if (strata_gguf_get_str(g, "tokenizer.ggml.model", &tok, &tok_len) == STRATA_OK) {
        printf("%-16s%.*s", "tokenizer", (int)tok_len, tok);
        const char *pre = NULL;
        uint64_t pre_len = 0;
        if (strata_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len) == STRATA_OK)
            printf(" (pre-tokenizer %.*s)", (int)pre_len, pre);
        putchar('\n');
        int64_t ti = strata_gguf_kv_find(g, "tokenizer.ggml.tokens");
        strata_gguf_value v;
        if (ti >= 0 && strata_gguf_kv_value(g, ti, &v) == STRATA_OK && v.type == STRATA_GGUF_ARRAY)
            printf("%-16s%" PRIu64 " tokens\n", "vocab size", v.v.arr.count);
    } else {
        printf("%-16s(none)\n", "tokenizer");
    }

    print_tensor_table(g);
    if (list) print_tensor_list(g);
    strata_gguf_free(g);
    info_kv(path);
    return gpu_mem > 0 ? info_fit(path, gpu_mem, n_ctx) : 0;
}
