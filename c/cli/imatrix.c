/* imatrix.c - `strata imatrix -m MODEL -f TEXT -o imatrix.gguf [--chunks N] [-c CTX]
 * [--process-output]`: an importance matrix the way llama-imatrix computes one. The text is
 * tokenized whole (no BOS) and cut into chunks of -c tokens (default 512), each read from an
 * empty cache with its first token replaced by BOS when the vocabulary adds one (llama-imatrix's
 * chunks); a CPU session's activation trace (strata_session_set_act_trace) gives every weight
 * matrix's input rows, whose squared values are summed per column, and counted, per tensor and,
 * for expert tensors, per expert over only the tokens routed to it. Tensors of blk.* are kept
 * (output.weight too with --process-output), as llama-imatrix does. The result is written in
 * llama.cpp's GGUF imatrix format (strata_imatrix_write), which `strata quantize --imatrix` and
 * llama-quantize --imatrix read. */
#include "session_setup.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void imatrix_usage(FILE *f) {
    fprintf(f, "usage: strata imatrix -m MODEL.gguf -f TEXT -o IMATRIX.gguf [--chunks N] [-c N]\n"
               "                      [-b N] [-t N] [--process-output]\n\n"
               "Sums, per weight matrix and input column, the squared activations the matrix\n"
               "multiplies while the model reads TEXT in chunks of -c tokens (default 512; at most\n"
               "--chunks of them, default all), per expert for expert tensors (only the tokens\n"
               "routed to it), and writes them in llama.cpp's imatrix format for\n"
               "`strata quantize --imatrix` (or llama-quantize --imatrix). Runs on the CPU.\n"
               "Attention of deepseek2 (latent) and qwen3next layers is not traced.\n\n"
               "  -o, --output FILE     the imatrix file to write\n"
               "  --chunks N            read at most N chunks\n"
               "  --process-output      also sum output.weight's input (llama-imatrix's option)\n");
}

/* ---------------------------------------------------------------------------------------------
 * Accumulation
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;  /* the model's name string: its pointer identifies the tensor */
    int64_t n_cols, n_mat;
    double *sums;      /* [n_mat][n_cols] */
    int64_t *counts;   /* [n_mat] */
} im_entry;

typedef struct {
    im_entry *v;
    int64_t n, cap;
    int32_t n_expert;
    int process_output;
    int failed;        /* out of memory or inconsistent shapes: the message is printed once */
} im_state;

static im_entry *im_find(im_state *s, const char *name, int64_t n_cols, int64_t n_mat) {
    for (int64_t i = 0; i < s->n; i++)
        if (s->v[i].name == name) return s->v[i].n_cols == n_cols && s->v[i].n_mat == n_mat ? &s->v[i] : NULL;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        im_entry *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        s->v = v;
        s->cap = cap;
    }
    im_entry *e = &s->v[s->n];
    e->name = name;
    e->n_cols = n_cols;
    e->n_mat = n_mat;
    e->sums = calloc((size_t)(n_cols * n_mat), sizeof *e->sums);
    e->counts = calloc((size_t)n_mat, sizeof *e->counts);
    if (!e->sums || !e->counts) {
        free(e->sums);
        free(e->counts);
        return NULL;
    }
    s->n++;
    return e;
}

static void im_trace(const char *tensor, int32_t expert, const float *x, int64_t n_cols, int64_t n,
                     const int32_t *rows, void *user_data) {
    im_state *s = user_data;
    if (s->failed) return;
    if (strncmp(tensor, "blk.", 4) != 0 && !(s->process_output && strcmp(tensor, "output.weight") == 0))
        return;
    const int64_t n_mat = expert >= 0 ? s->n_expert : 1;
    im_entry *e = im_find(s, tensor, n_cols, n_mat);
    if (!e || expert >= n_mat) {
        s->failed = 1;
        cli_fail("imatrix: %s for '%s' (%lld columns, expert %d)", e ? "expert out of range" :
                 "out of memory or a changed shape", tensor, (long long)n_cols, (int)expert);
        return;
    }
    const int64_t m = expert >= 0 ? expert : 0;
    double *acc = e->sums + m * n_cols;
    for (int64_t i = 0; i < n; i++) {
        const float *r = x + (rows ? rows[i] : i) * n_cols;
        for (int64_t j = 0; j < n_cols; j++) acc[j] += (double)r[j] * (double)r[j];
    }
    e->counts[m] += n;
}

static void im_free(im_state *s) {
    for (int64_t i = 0; i < s->n; i++) {
        free(s->v[i].sums);
        free(s->v[i].counts);
    }
    free(s->v);
}

/* The entries as f32 sums, written with the run's metadata. */
static int im_write(const im_state *s, const char *path, const char *dataset, uint32_t chunks,
                    uint32_t chunk_size) {
    strata_imatrix_entry *out = calloc((size_t)(s->n ? s->n : 1), sizeof *out);
    if (!out) return cli_fail("out of memory");
    int rc = 0;
    for (int64_t i = 0; i < s->n && !rc; i++) {
        const im_entry *e = &s->v[i];
        float *f = malloc((size_t)(e->n_cols * e->n_mat) * sizeof *f);
        if (!f) { rc = cli_fail("out of memory"); break; }
        for (int64_t j = 0; j < e->n_cols * e->n_mat; j++) f[j] = (float)e->sums[j];
        out[i] = (strata_imatrix_entry){e->name, e->n_cols, e->n_mat, f, e->counts};
    }
    if (!rc && strata_imatrix_write(path, out, s->n, &dataset, 1, chunks, chunk_size) != STRATA_OK)
        rc = cli_fail("%s", cli_lib_error());
    for (int64_t i = 0; i < s->n; i++) free((void *)out[i].sums);
    free(out);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *out;
    long max_chunks;  /* 0: all */
    int process_output;
} im_args;

/* The command line into o and a. 0 to go on, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, cli_opts *o, im_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) { imatrix_usage(stdout); return -1; }
        if (strcmp(s, "-o") == 0 || strcmp(s, "--output") == 0 || strcmp(s, "--chunks") == 0) {
            if (i + 1 >= argc) return cli_usage_error("option '%s' needs a value", s);
            const char *v = argv[++i];
            if (strcmp(s, "--chunks") != 0) { a->out = v; continue; }
            char *end;
            errno = 0;
            a->max_chunks = strtol(v, &end, 10);
            if (errno || *end || end == v || a->max_chunks < 1)
                return cli_usage_error("bad --chunks '%s'", v);
            continue;
        }
        if (strcmp(s, "--process-output") == 0) { a->process_output = 1; continue; }
        int rc = cli_opts_parse(o, argc, argv, &i);
        if (rc == 1) continue;
        if (rc) return rc;
        if (s[0] == '-' && s[1]) return cli_usage_error("unknown option '%s'", s);
        return cli_usage_error("unexpected argument '%s'", s);
    }
    if (!o->model) return cli_usage_error("imatrix needs -m MODEL.gguf");
    if (!o->prompt_file) return cli_usage_error("imatrix needs -f TEXT_FILE");
    if (!a->out) return cli_usage_error("imatrix needs -o IMATRIX.gguf");
    if (!o->n_ctx) o->n_ctx = 512;
    if (o->n_ctx < 2) return cli_usage_error("-c %d is too small (>= 2)", o->n_ctx);
    if (o->n_batch > o->n_ctx) o->n_batch = o->n_ctx;
    o->gpu = 0; /* the trace is the CPU session's */
    return 0;
}

/* Reads the chunks with the trace on; *chunks_done the number read. */
static int im_read_chunks(const cli_opts *o, const im_args *a, strata_model *model, strata_session *sess,
                          const strata_token *toks, int64_t n_tok, im_state *st, uint32_t *chunks_done) {
    const int n_ctx = o->n_ctx;
    int64_t n_chunks = n_tok / n_ctx;
    if (a->max_chunks && n_chunks > a->max_chunks) n_chunks = a->max_chunks;
    if (n_chunks == 0)
        return cli_fail("'%s' has %lld tokens; imatrix needs at least -c %d", o->prompt_file,
                        (long long)n_tok, n_ctx);
    strata_token *chunk = malloc((size_t)n_ctx * sizeof *chunk);
    float *logits = NULL; /* --process-output: the head runs on every row */
    if (a->process_output) {
        strata_model_info mi;
        strata_model_get_info(model, &mi);
        logits = malloc((size_t)n_ctx * (size_t)mi.n_vocab * sizeof *logits);
    }
    if (!chunk || (a->process_output && !logits)) {
        free(chunk);
        free(logits);
        return cli_fail("out of memory");
    }
    const int add_bos = cli_model_adds_bos(model);
    int rc = 0;
    const double t0 = cli_now();
    for (int64_t c = 0; c < n_chunks && !rc; c++) {
        memcpy(chunk, toks + c * n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (add_bos) chunk[0] = strata_token_bos(model);
        strata_session_reset(sess);
        if (strata_session_decode(sess, chunk, n_ctx, logits, logits != NULL) != STRATA_OK)
            rc = cli_fail("chunk %lld: decode: %s", (long long)c, strata_last_error());
        else if (st->failed)
            rc = 1;
        *chunks_done = (uint32_t)(c + 1);
    }
    if (!rc)
        fprintf(stderr, "imatrix: %u chunks of %d tokens in %.2f s\n", (unsigned)*chunks_done, n_ctx,
                cli_now() - t0);
    free(logits);
    free(chunk);
    return rc;
}

/* Experts that saw no token, over all expert entries (llama-imatrix's "partial data"). */
static void im_report(const im_state *st, const char *path) {
    int64_t unseen = 0, slots = 0;
    for (int64_t i = 0; i < st->n; i++) {
        if (st->v[i].n_mat < 2) continue;
        for (int64_t m = 0; m < st->v[i].n_mat; m++) unseen += st->v[i].counts[m] == 0;
        slots += st->v[i].n_mat;
    }
    printf("wrote %s: %lld tensors", path, (long long)st->n);
    if (slots) printf(", %lld of %lld expert matrices saw no token (importance 1 there)",
                      (long long)unseen, (long long)slots);
    printf("\n");
}

int cli_cmd_imatrix(int argc, char **argv) {
    cli_opts o;
    cli_opts_init(&o);
    im_args a = {NULL, 0, 0};
    int rc = parse_args(argc, argv, &o, &a);
    if (rc) return rc < 0 ? 0 : rc;
    size_t text_len = 0;
    char *text = cli_read_file(o.prompt_file, &text_len);
    if (!text) return CLI_EXIT_USAGE;
    strata_model *model = NULL;
    strata_session *sess = NULL;
    strata_token *toks = NULL;
    int64_t n_tok = 0;
    im_state st;
    memset(&st, 0, sizeof st);
    st.process_output = a.process_output;
    double load_s = 0;
    uint32_t chunks = 0;
    rc = cli_load_model(&o, &model, &load_s);
    if (!rc) {
        strata_model_info mi;
        strata_model_get_info(model, &mi);
        st.n_expert = mi.n_expert;
        rc = cli_tokenize(model, text, text_len, 0, 0, &toks, &n_tok);
    }
    if (!rc) rc = cli_new_session(&o, model, &sess);
    if (!rc && strata_session_set_act_trace(sess, im_trace, &st) != STRATA_OK)
        rc = cli_fail("%s", cli_lib_error());
    if (!rc) rc = im_read_chunks(&o, &a, model, sess, toks, n_tok, &st, &chunks);
    if (!rc) rc = im_write(&st, a.out, o.prompt_file, chunks, (uint32_t)o.n_ctx);
    if (!rc) im_report(&st, a.out);
    im_free(&st);
    free(toks);
    strata_session_free(sess);
    strata_model_free(model);
    free(text);
    return rc;
}
