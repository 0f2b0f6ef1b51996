/* tokenize.c - `strata tokenize -m FILE.gguf (-p TEXT | -f FILE) [--ids | --list] [--no-special]
 * [--parse-special]`: the token ids of a text under a model's vocabulary, one per line (--ids,
 * the default) or as a list "[1, 2, 3]" (--list). Loads only the vocabulary (vocab_only), so it
 * works on vocabulary-only GGUF files. --no-special: no BOS/EOS even where the vocabulary adds
 * them; --parse-special: text such as "<|im_start|>" becomes its control token. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static char *tok_read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return NULL; }
    *len = n;
    return buf;
}

int cli_cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    int list = 0, add_special = 1, parse_special = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) && i + 1 < argc) model_path = argv[++i];
        else if ((strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) && i + 1 < argc) prompt = argv[++i];
        else if ((strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) && i + 1 < argc) file = argv[++i];
        else if (strcmp(a, "--ids") == 0) list = 0;
        else if (strcmp(a, "--list") == 0) list = 1;
        else if (strcmp(a, "--no-special") == 0) add_special = 0;
        else if (strcmp(a, "--parse-special") == 0) parse_special = 1;
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: strata tokenize -m FILE.gguf (-p TEXT | -f FILE) [--ids | --list] "
                   "[--no-special] [--parse-special]\n");
            return 0;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "-p") == 0 || strcmp(a, "-f") == 0 ||
                   strcmp(a, "--model") == 0 || strcmp(a, "--prompt") == 0 ||
                   strcmp(a, "--file") == 0) {
            return cli_usage_error("tokenize: option '%s' needs a value", a);
        } else {
            return cli_usage_error("tokenize: unknown option '%s'", a);
        }
    }
    if (!model_path) return cli_usage_error("tokenize: -m FILE.gguf is required");
    if (!prompt == !file) return cli_usage_error("tokenize: give exactly one of -p TEXT or -f FILE");
    int rc = cli_check_readable(model_path);
    if (rc) return rc;
    if (file && (rc = cli_check_readable(file))) return rc;

    char *text_buf = NULL;
    size_t len;
    if (file) {
        text_buf = tok_read_all(file, &len);
        if (!text_buf) return cli_fail("tokenize: cannot read '%s'", file);
    } else {
        len = strlen(prompt);
    }
    const char *text = file ? text_buf : prompt;

    strata_model_params mp = strata_model_default_params();
    mp.vocab_only = 1;
    strata_model *model = NULL;
    if (strata_model_load(model_path, &mp, &model) != STRATA_OK) {
        free(text_buf);
        return cli_fail("tokenize: %s: %s", model_path, cli_lib_error());
    }
    int64_t n = 0;
    strata_status st = strata_tokenize(model, text, (int64_t)len, add_special, parse_special, NULL,
                                       0, &n);
    strata_token *ids = NULL;
    if (st == STRATA_OK || st == STRATA_ERR_RANGE) {
        ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
        st = ids ? strata_tokenize(model, text, (int64_t)len, add_special, parse_special, ids, n, &n)
                 : STRATA_ERR_NOMEM;
    }
    if (st != STRATA_OK) {
        rc = cli_fail("tokenize: %s", st == STRATA_ERR_NOMEM ? "out of memory" : strata_last_error());
    } else if (list) {
        putchar('[');
        for (int64_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)ids[i]);
        puts("]");
    } else {
        for (int64_t i = 0; i < n; i++) printf("%d\n", (int)ids[i]);
    }
    free(ids);
    free(text_buf);
    strata_model_free(model);
    return rc;
}
