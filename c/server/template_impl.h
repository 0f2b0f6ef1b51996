/* template_impl.h - the chat template renderer's pieces (template.h): an arena, errors that
 * unwind to tmpl_render, the syntax tree template_parse.c builds from the source and
 * template_eval.c walks. */
#ifndef STRATA_SERVER_TEMPLATE_IMPL_H
#define STRATA_SERVER_TEMPLATE_IMPL_H

#include "template.h"

#include "yyjson.h"

#include <setjmp.h>
#include <stdint.h>

/* Every allocation of one render, freed at once at its end. */
typedef struct tmpl_block {
    struct tmpl_block *next;
    size_t used, cap;
    char data[];
} tmpl_block;

/* One render: its arena and its error exit (an error longjmps back to tmpl_render, which frees
 * the arena: nothing else is held). */
typedef struct {
    tmpl_block *arena;
    jmp_buf fail;
    char *err;
    size_t errsz;
} tmpl_ctx;

void *tmpl_alloc(tmpl_ctx *c, size_t n);
char *tmpl_strndup(tmpl_ctx *c, const char *s, size_t n);
_Noreturn void tmpl_fail(tmpl_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Syntax tree. Statements and expressions share one node type. */
typedef enum {
    /* statements */
    TN_BODY, TN_TEXT, TN_OUT, TN_IF, TN_FOR, TN_SET, TN_SET_BLOCK, TN_MACRO, TN_BREAK, TN_CONTINUE,
    TN_FILTER_BLOCK,
    /* expressions */
    TN_STR, TN_INT, TN_FLOAT, TN_BOOL, TN_NONE, TN_NAME, TN_ATTR, TN_ITEM, TN_SLICE, TN_CALL, TN_FILTER, TN_TEST,
    TN_BIN, TN_NOT, TN_NEG, TN_COND, TN_LIST, TN_DICT
} tmpl_kind;

typedef struct tmpl_node tmpl_node;
struct tmpl_node {
    tmpl_kind k;
    int line;
    const char *s;          /* TEXT, STR, NAME, ATTR's name, FILTER / TEST / BIN's name, SET's name */
    size_t n;               /* its length */
    int64_t i;              /* INT, BOOL; TEST: negated; FOR: recursive (unsupported) */
    double f;
    tmpl_node *a, *b, *c;   /* operands; IF: cond, then, else; FOR: iter, body, else; COND: then, cond,
                               else; SET: value (and a: the namespace of ns.attr); SLICE: obj, start,
                               stop (d: step) */
    tmpl_node *d;           /* FOR: its filter condition; SLICE: step */
    tmpl_node **kids;       /* BODY: statements; CALL / FILTER / TEST: arguments; LIST, DICT (keys then
                               values); MACRO: the parameters' defaults (NULL: none) */
    int nk;
    const char **names;     /* CALL / FILTER: the keyword of each argument (NULL: positional); FOR, SET:
                               the targets; MACRO: the parameter names */
    int nnames;
};

/* Parses src into the template's body (fails through c). */
tmpl_node *tmpl_parse(tmpl_ctx *c, const char *src, size_t len);

/* ---- values (template_value.c) -------------------------------------------------------------- */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_MACRO, V_FUNC } tv_kind;

typedef struct tval tval;
typedef struct { tval *v; size_t n, cap; } vlist;
typedef struct { tval *k, *v; size_t n, cap; int ns; } vdict; /* insertion order; ns: a namespace() */
struct tval {
    tv_kind t;
    int safe;                                   /* STR: jinja2's Markup (the safe filter): '+' with a
                                                   plain string HTML-escapes that string */
    union {
        int64_t i;                              /* BOOL, INT */
        double f;
        struct { const char *p; size_t n; } s;  /* STR: UTF-8 bytes (in the arena) */
        vlist *l;
        vdict *d;
        const tmpl_node *m;                     /* MACRO */
        int fn;                                 /* FUNC: a built-in (template_eval.c) */
    } u;
};

typedef struct { char *p; size_t n, cap; } tbuf; /* text growing in the arena */

/* json.dumps's options (transformers' tojson): indent < 0 none; the separators. */
typedef struct { int indent; const char *item_sep, *key_sep; int sort; } tv_json_opts;

extern const tval TV_UNDEF_V, TV_NONE_V;
tval tv_bool(int b);
tval tv_int(int64_t i);
tval tv_float(double f);
tval tv_str(const char *p, size_t n);
tval tv_cstr(const char *p);
tval tv_list(tmpl_ctx *c);
tval tv_dict(tmpl_ctx *c);
void tv_l_push(tmpl_ctx *c, vlist *l, tval x);
tval *tv_d_find(vdict *d, tval k);
void tv_d_set(tmpl_ctx *c, vdict *d, tval k, tval x);
tval tv_d_get(vdict *d, const char *key);
tval tv_from_json(tmpl_ctx *c, yyjson_val *j);
int tv_truthy(tval v);
int tv_is_num(tval v);
double tv_num(tval v);
int tv_eq(tval a, tval b);
const char *tv_type_name(tval v);
void tv_b_add(tmpl_ctx *c, tbuf *b, const char *p, size_t n);
void tv_b_cstr(tmpl_ctx *c, tbuf *b, const char *s);
tval tv_b_val(tbuf *b);
size_t tv_u8_len(const char *s, size_t n);                /* code points */
size_t tv_u8_off(const char *s, size_t n, size_t cp);     /* byte offset of code point cp */
void tv_float_repr(double f, char *out, size_t size);     /* Python's repr() of a float */
void tv_repr_of(tmpl_ctx *c, tbuf *b, tval v);            /* Python's repr() */
void tv_str_of(tmpl_ctx *c, tbuf *b, tval v);             /* Python's str() (undefined: "") */
tval tv_to_str(tmpl_ctx *c, tval v);
void tv_json_of(tmpl_ctx *c, tbuf *b, tval v, const tv_json_opts *o, int level);
int tv_key_cmp(const void *a, const void *b);             /* qsort of tvals by string */

#endif /* STRATA_SERVER_TEMPLATE_IMPL_H */
