/* chat.c - `strata run --chat`'s conversation (chat.h): the model's own chat template rendered
 * with the whole conversation each turn (the server's renderer and context, so `strata serve`
 * and `strata template` read the same prompt), the built-in templates (ChatML, Llama-2/Mistral
 * [INST], plain continuation) as fallbacks and overrides, the cache prefix a turn keeps, the
 * answer as the history holds it (harmony's final channel), and the --chat-log lines. */
#include "chat.h"
#include "session_setup.h"

#include "chat_context.h"
#include "template.h"
#include "yyjson.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TPL_NONE, TPL_CHATML, TPL_INST, TPL_JINJA } chat_tpl;

struct cli_chat {
    const cli_opts *o;
    const strata_model *m;
    chat_tpl tpl;
    const char *jinja_name;  /* "model" or the template file's path */
    char *src;               /* the Jinja template (TPL_JINJA) */
    int strict;              /* --chat-template model or a file: no built-in fallback */
    const char *note;        /* why a built-in template, for the start-up line */
    int harmony;             /* the template writes harmony's channels (gpt-oss) */
    yyjson_mut_doc *doc;     /* the context: {"messages": [...], bos_token, ...} */
    yyjson_mut_val *msgs;
    int turn, closed;        /* user turns read; the last answer ended with its end token */
    FILE *log;               /* --chat-log */
    char *text;              /* the last turn's text tokenized, for the log */
    int64_t keep, n_fed;
    strata_token *fed;
};

/* ---------------------------------------------------------------------------------------------
 * Built-in templates
 * ------------------------------------------------------------------------------------------- */

static chat_tpl builtin_like(const char *t) {
    if (t && strstr(t, "<|im_start|>")) return TPL_CHATML;
    if (t && strstr(t, "[INST]")) return TPL_INST;
    return TPL_NONE;
}

static const char *tpl_name(chat_tpl t) {
    return t == TPL_CHATML ? "chatml" : t == TPL_INST ? "inst (Llama-2/Mistral)" : "none";
}

/* Appends a, b and c to a malloc'd string. */
static int str_add3(char **s, size_t *len, const char *a, const char *b, const char *c) {
    const size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *p = realloc(*s, *len + la + lb + lc + 1);
    if (!p) return -1;
    memcpy(p + *len, a, la);
    memcpy(p + *len + la, b, lb);
    memcpy(p + *len + la + lb, c, lc);
    *len += la + lb + lc;
    p[*len] = '\0';
    *s = p;
    return 0;
}

/* The text of one user turn in a built-in template. turn: 0 for the first; closed: the previous
 * answer ended with its end-of-turn token (already in the cache). */
static char *format_turn(chat_tpl tpl, const char *system, const char *msg, int turn, int closed) {
    char *s = NULL;
    size_t n = 0;
    int bad = 0;
    if (tpl == TPL_CHATML) {
        if (turn > 0) bad |= str_add3(&s, &n, closed ? "\n" : "<|im_end|>\n", "", "");
        if (turn == 0 && system) bad |= str_add3(&s, &n, "<|im_start|>system\n", system, "<|im_end|>\n");
        bad |= str_add3(&s, &n, "<|im_start|>user\n", msg, "<|im_end|>\n<|im_start|>assistant\n");
    } else if (tpl == TPL_INST) {
        /* Mistral form: <s>[INST] msg [/INST] answer</s>[INST] msg2 [/INST] (BOS from add_special);
         * a system prompt goes in front of the first message, as Llama-2's <<SYS>> block */
        if (turn > 0 && !closed) bad |= str_add3(&s, &n, "</s>", "", "");
        if (turn == 0 && system) {
            bad |= str_add3(&s, &n, "[INST] <<SYS>>\n", system, "\n<</SYS>>\n\n");
            bad |= str_add3(&s, &n, msg, " [/INST]", "");
        } else {
            bad |= str_add3(&s, &n, "[INST] ", msg, " [/INST]");
        }
    } else {
        bad |= str_add3(&s, &n, turn > 0 ? "\n" : "", msg, "");
    }
    if (bad) { free(s); return NULL; }
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Opening
 * ------------------------------------------------------------------------------------------- */

static int add_message(cli_chat *c, const char *role, const char *content) {
    yyjson_mut_val *x = yyjson_mut_obj(c->doc);
    if (!x || !yyjson_mut_obj_add_str(c->doc, x, "role", role) ||
        !yyjson_mut_obj_add_strcpy(c->doc, x, "content", content) || !yyjson_mut_arr_append(c->msgs, x))
        return cli_fail("out of memory");
    return 0;
}

/* The Jinja source: the file's, else the model's (NULL: none). */
static int chat_source(cli_chat *c) {
    const cli_opts *o = c->o;
    if (o->chat_template_file) {
        size_t len = 0;
        if (!(c->src = cli_read_file(o->chat_template_file, &len))) return CLI_EXIT_USAGE;
        c->jinja_name = o->chat_template_file;
        return 0;
    }
    const char *t = strata_model_chat_template(c->m);
    if (t && !(c->src = strdup(t))) return cli_fail("out of memory");
    c->jinja_name = "model (tokenizer.chat_template)";
    return 0;
}

static int chat_setup(cli_chat *c) {
    const cli_opts *o = c->o;
    const char *want = o->chat_template ? o->chat_template : "auto";
    if (o->chat_template_file && strcmp(want, "auto") && strcmp(want, "model"))
        return cli_usage_error("--chat-template-file and --chat-template %s: give one", want);
    if (!strcmp(want, "chatml")) c->tpl = TPL_CHATML;
    else if (!strcmp(want, "inst")) c->tpl = TPL_INST;
    else if (!strcmp(want, "none")) c->tpl = TPL_NONE;
    else {
        int rc = chat_source(c);
        if (rc) return rc;
        c->strict = !strcmp(want, "model") || o->chat_template_file;
        if (c->src) c->tpl = TPL_JINJA;
        else if (c->strict) return cli_fail("%s has no tokenizer.chat_template (--chat-template auto "
                                            "falls back to the built-in ones)", o->model);
        else c->tpl = TPL_NONE, c->note = " (the model has no tokenizer.chat_template)";
    }
    if (c->tpl == TPL_JINJA) {
        c->harmony = strstr(c->src, "<|channel|>") != NULL;
        c->doc = yyjson_mut_doc_new(NULL);
        yyjson_mut_val *root = c->doc ? yyjson_mut_obj(c->doc) : NULL;
        c->msgs = root ? yyjson_mut_arr(c->doc) : NULL;
        if (!c->msgs || !yyjson_mut_obj_add_val(c->doc, root, "messages", c->msgs) ||
            chat_context_defaults(c->doc, root, c->m, 1) != 0)
            return cli_fail("out of memory");
        yyjson_mut_doc_set_root(c->doc, root);
        if (o->system) return add_message(c, "system", o->system);
    }
    return 0;
}

int cli_chat_open(const cli_opts *o, const strata_model *m, cli_chat **out) {
    *out = NULL;
    cli_chat *c = calloc(1, sizeof *c);
    if (!c) return cli_fail("out of memory");
    c->o = o;
    c->m = m;
    int rc = chat_setup(c);
    if (!rc && o->chat_log && !(c->log = fopen(o->chat_log, "w")))
        rc = cli_fail("cannot write '%s': %s", o->chat_log, strerror(errno));
    if (rc) { cli_chat_free(c); return rc; }
    if (c->tpl == TPL_JINJA)
        fprintf(stderr, "strata: chat with template %s; an empty line or end of input quits\n", c->jinja_name);
    else
        fprintf(stderr, "strata: chat with template %s%s; an empty line or end of input quits\n", tpl_name(c->tpl),
                c->note ? c->note : "");
    *out = c;
    return 0;
}

void cli_chat_free(cli_chat *c) {
    if (!c) return;
    if (c->log) fclose(c->log);
    yyjson_mut_doc_free(c->doc);
    free(c->src);
    free(c->text);
    free(c->fed);
    free(c);
}

/* ---------------------------------------------------------------------------------------------
 * Turns
 * ------------------------------------------------------------------------------------------- */

/* The conversation through the Jinja template: 0 with *text (malloc'd), or -1 with err set. */
static int render(cli_chat *c, char **text, char *err, size_t errsz) {
    char *ctx = yyjson_mut_write(c->doc, 0, NULL);
    if (!ctx) return snprintf(err, errsz, "out of memory"), -1;
    const int rc = tmpl_render(c->src, strlen(c->src), ctx, text, err, errsz);
    free(ctx);
    return rc;
}

/* Leaves the Jinja template for the built-in one it looks like (before the first turn only). */
static void fall_back(cli_chat *c, const char *why) {
    c->tpl = builtin_like(c->src);
    fprintf(stderr, "strata: the chat template cannot be rendered (%s): chat with the built-in template %s "
            "instead\n", why, tpl_name(c->tpl));
}

enum { CHAT_FELL_BACK = -2 }; /* jinja_turn: the turn goes to the built-in template */

/* The whole conversation's tokens, kept up to where they first differ from the cache. */
static int jinja_turn(cli_chat *c, const char *msg, const strata_token *cache, int64_t n_cache,
                      int64_t *keep, strata_token **toks, int64_t *n) {
    int rc = add_message(c, "user", msg);
    if (rc) return rc;
    char *text = NULL, err[512];
    if (render(c, &text, err, sizeof err) != 0) {
        yyjson_mut_arr_remove_last(c->msgs);
        if (c->turn == 0 && !c->strict) {
            fall_back(c, err);
            return CHAT_FELL_BACK;
        }
        fprintf(stderr, "strata: the chat template cannot render this conversation (%s); the message was "
                "dropped, the conversation goes on\n", err);
        return CLI_CHAT_DROPPED;
    }
    strata_token *all = NULL;
    int64_t n_all = 0;
    /* as the server: the template writes BOS where the model wants it */
    if ((rc = cli_tokenize(c->m, text, strlen(text), 0, 1, &all, &n_all))) {
        free(text);
        return rc;
    }
    if (n_all == 0) {
        free(text);
        free(all);
        yyjson_mut_arr_remove_last(c->msgs);
        fprintf(stderr, "strata: the chat template rendered nothing; the message was dropped\n");
        return CLI_CHAT_DROPPED;
    }
    int64_t k = 0;
    while (k < n_cache && k < n_all && cache[k] == all[k]) k++;
    if (k == n_all) k--; /* the last token is read again, for its logits */
    memmove(all, all + k, sizeof *all * (size_t)(n_all - k));
    free(c->text);
    c->text = text;
    *keep = k;
    *toks = all;
    *n = n_all - k;
    return 0;
}

int cli_chat_user(cli_chat *c, const char *msg, const strata_token *cache, int64_t n_cache,
                  int64_t *keep, strata_token **toks, int64_t *n) {
    *toks = NULL;
    *n = 0;
    int rc = c->tpl == TPL_JINJA ? jinja_turn(c, msg, cache, n_cache, keep, toks, n) : CHAT_FELL_BACK;
    if (rc == CHAT_FELL_BACK) {
        char *text = format_turn(c->tpl, c->o->system, msg, c->turn, c->closed);
        if (!text) return cli_fail("out of memory");
        rc = cli_tokenize(c->m, text, strlen(text), c->turn == 0 && !c->o->no_bos, 1, toks, n);
        free(c->text);
        c->text = text;
        *keep = n_cache;
    }
    if (rc || !c->log) return rc;
    free(c->fed); /* for the log line */
    if (!(c->fed = malloc(sizeof *c->fed * (size_t)(*n + 1)))) return cli_fail("out of memory");
    memcpy(c->fed, *toks, sizeof *c->fed * (size_t)*n);
    c->keep = *keep;
    c->n_fed = *n;
    return 0;
}

void cli_chat_drop(cli_chat *c) {
    if (c->tpl == TPL_JINJA) yyjson_mut_arr_remove_last(c->msgs);
}

/* Harmony (gpt-oss): the history holds the final channel's text, the last message of the answer
 * (its analysis is dropped, as the template drops it); NULL when the answer has no channels. */
static char *harmony_content(const strata_model *m, const strata_token *gen, int64_t n_gen) {
    int64_t len = 0;
    if (strata_detokenize(m, gen, n_gen, 1, 0, NULL, 0, &len) == STRATA_ERR_INTERNAL) return NULL;
    char *raw = malloc((size_t)len + 1);
    if (!raw || strata_detokenize(m, gen, n_gen, 1, 0, raw, len, &len) != STRATA_OK) {
        free(raw);
        return NULL;
    }
    raw[len] = '\0';
    char *msg = NULL;
    for (char *p = raw; (p = strstr(p, "<|message|>")); p += 11) msg = p + 11;
    char *out = NULL;
    if (msg) {
        size_t end = strlen(msg);
        const char *marks[3] = {"<|end|>", "<|return|>", "<|call|>"};
        for (int k = 0; k < 3; k++) {
            const char *e = strstr(msg, marks[k]);
            if (e && (size_t)(e - msg) < end) end = (size_t)(e - msg);
        }
        out = strndup(msg, end);
    }
    free(raw);
    return out;
}

static int log_turn(cli_chat *c, const char *answer) {
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = d ? yyjson_mut_obj(d) : NULL;
    yyjson_mut_val *fed = o ? yyjson_mut_arr_with_sint32(d, c->fed, (size_t)c->n_fed) : NULL;
    char *line = NULL;
    if (fed) {
        yyjson_mut_doc_set_root(d, o);
        yyjson_mut_obj_add_int(d, o, "turn", c->turn);
        yyjson_mut_obj_add_str(d, o, "template", c->tpl == TPL_JINJA ? "jinja" : tpl_name(c->tpl));
        yyjson_mut_obj_add_str(d, o, "text", c->text ? c->text : "");
        yyjson_mut_obj_add_int(d, o, "keep", c->keep);
        yyjson_mut_obj_add_val(d, o, "fed", fed);
        yyjson_mut_obj_add_str(d, o, "answer", answer);
        line = yyjson_mut_write(d, 0, NULL);
    }
    yyjson_mut_doc_free(d);
    if (!line) return cli_fail("out of memory");
    const int bad = fprintf(c->log, "%s\n", line) < 0 || fflush(c->log) != 0;
    free(line);
    return bad ? cli_fail("cannot write '%s': %s", c->o->chat_log, strerror(errno)) : 0;
}

int cli_chat_answer(cli_chat *c, const char *text, const strata_token *gen, int64_t n_gen, int closed) {
    char *content = c->tpl == TPL_JINJA && c->harmony ? harmony_content(c->m, gen, n_gen) : NULL;
    int rc = c->tpl == TPL_JINJA ? add_message(c, "assistant", content ? content : text) : 0;
    if (!rc && c->log) rc = log_turn(c, content ? content : text);
    free(content);
    c->turn++;
    c->closed = closed;
    return rc;
}
