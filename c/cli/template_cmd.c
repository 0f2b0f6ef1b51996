/* template_cmd.c - `strata template`: a chat template rendered with a JSON context, as the server
 * renders it for /v1/chat/completions (c/server/template.h): the model's own template
 * (tokenizer.chat_template, with its BOS and EOS texts) or a template file. For checking what a
 * model will read, and for the tests against jinja2. */
#include "cli.h"
#include "template.h"
#include "chat_context.h"
#include "yyjson.h"

#include <stdlib.h>
#include <string.h>

static void usage(void) {
    printf("usage: strata template (-m MODEL.gguf | --template FILE.jinja) --context FILE.json\n\n"
           "Prints the chat template rendered with the context: a JSON object such as\n"
           "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": true}\n"
           "(with -m, bos_token and eos_token are the model's unless the context sets them).\n");
}

/* The context with the model's bos_token and eos_token texts where it has none (NULL: as it is). */
static char *with_tokens(const strata_model *m, const char *ctx) {
    yyjson_doc *d = yyjson_read(ctx, strlen(ctx), 0);
    yyjson_mut_doc *md = d ? yyjson_doc_mut_copy(d, NULL) : NULL;
    yyjson_doc_free(d);
    yyjson_mut_val *root = md ? yyjson_mut_doc_get_root(md) : NULL;
    char *out = NULL;
    if (root && yyjson_mut_is_obj(root) && chat_context_defaults(md, root, m, -1) == 0)
        out = yyjson_mut_write(md, 0, NULL);
    yyjson_mut_doc_free(md);
    return out;
}

int cli_cmd_template(int argc, char **argv) {
    const char *model = NULL, *tfile = NULL, *cfile = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        if (i + 1 >= argc) return cli_usage_error("option '%s' needs a value (or is unknown)", a);
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
        else if (!strcmp(a, "--template")) tfile = argv[++i];
        else if (!strcmp(a, "--context")) cfile = argv[++i];
        else return cli_usage_error("unknown option '%s' for template", a);
    }
    if (!model == !tfile) return cli_usage_error("give -m MODEL.gguf or --template FILE.jinja");
    if (!cfile) return cli_usage_error("no --context FILE.json");
    size_t clen = 0, tlen = 0;
    char *ctx = cli_read_file(cfile, &clen), *src = NULL;
    if (!ctx) return CLI_EXIT_USAGE;
    if (tfile) {
        src = cli_read_file(tfile, &tlen);
    } else {
        strata_model_params mp = strata_model_default_params();
        mp.vocab_only = 1;
        strata_model *m = NULL;
        if (strata_model_load(model, &mp, &m) != STRATA_OK) {
            free(ctx);
            return cli_fail("cannot load %s: %s", model, cli_lib_error());
        }
        const char *t = strata_model_chat_template(m);
        if (t) src = strdup(t);
        if (t) tlen = strlen(t);
        char *with = t ? with_tokens(m, ctx) : NULL;
        strata_model_free(m);
        if (with) { free(ctx); ctx = with; }
        if (!t) { free(ctx); return cli_fail("%s has no tokenizer.chat_template", model); }
    }
    if (!src) { free(ctx); return CLI_EXIT_USAGE; }
    char *out = NULL, err[512];
    const int rc = tmpl_render(src, tlen, ctx, &out, err, sizeof err);
    free(src);
    free(ctx);
    if (rc != 0) return cli_fail("template: %s", err);
    fputs(out, stdout);
    free(out);
    return 0;
}
