/* template_parse.c - the chat template's source into a syntax tree (template_impl.h): the lexer
 * (text, {{ }}, {% %}, {# #}; whitespace control with -, trim_blocks and lstrip_blocks as
 * transformers sets them) and a recursive-descent parser of jinja2's statements and expressions
 * (its operator precedence: if-else, or, and, not, comparisons, ~, + -, * / // %, **, unary,
 * then postfix, filters and tests). */
#include "template_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the arena and errors ------------------------------------------------------------------- */

void *tmpl_alloc(tmpl_ctx *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    tmpl_block *b = c->arena;
    if (!b || b->used + n > b->cap) {
        const size_t cap = n > (1u << 16) ? n : (1u << 16);
        b = malloc(sizeof *b + cap);
        if (!b) tmpl_fail(c, "out of memory");
        b->next = c->arena;
        b->used = 0;
        b->cap = cap;
        c->arena = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *tmpl_strndup(tmpl_ctx *c, const char *s, size_t n) {
    char *p = tmpl_alloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void tmpl_fail(tmpl_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errsz, fmt, ap);
    va_end(ap);
    longjmp(c->fail, 1);
}

/* ---- the lexer ------------------------------------------------------------------------------ */

typedef enum { TK_TEXT, TK_VAR, TK_VAR_END, TK_BLOCK, TK_BLOCK_END, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP, TK_EOF } tk_kind;

typedef struct {
    tk_kind k;
    const char *s;
    size_t n;
    int line;
    int64_t i;
    double f;
} tk;

typedef struct {
    tmpl_ctx *c;
    const char *src;
    size_t len, pos;
    int line;
    tk *t;
    int nt, cap;
} lexer;

static void lx_push(lexer *L, tk t) {
    if (L->nt == L->cap) {
        const int cap = L->cap ? L->cap * 2 : 256;
        tk *nt = tmpl_alloc(L->c, sizeof *nt * (size_t)cap);
        if (L->nt) memcpy(nt, L->t, sizeof *nt * (size_t)L->nt);
        L->t = nt;
        L->cap = cap;
    }
    L->t[L->nt++] = t;
}

static int lx_line(const lexer *L, size_t upto) {
    int line = 1;
    for (size_t i = 0; i < upto && i < L->len; i++) line += L->src[i] == '\n';
    return line;
}

/* A string literal at L->pos (quote included): its decoded bytes. */
static void lx_string(lexer *L) {
    const char q = L->src[L->pos++];
    char *buf = tmpl_alloc(L->c, L->len - L->pos + 1);
    size_t n = 0;
    while (L->pos < L->len && L->src[L->pos] != q) {
        char ch = L->src[L->pos++];
        if (ch == '\\' && L->pos < L->len) {
            const char e = L->src[L->pos++];
            ch = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == '0' ? '\0' : e;
            if (e == 'u' || e == 'x' || e == 'U')
                tmpl_fail(L->c, "line %d: \\%c escapes in string literals are not supported", lx_line(L, L->pos), e);
        }
        buf[n++] = ch;
    }
    if (L->pos >= L->len) tmpl_fail(L->c, "line %d: unterminated string", lx_line(L, L->pos));
    L->pos++;
    lx_push(L, (tk){TK_STR, buf, n, 0, 0, 0});
}

static int is_name0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* The tokens of a tag's inside up to its end (end: "}}", "%}" or "#}"), with '-' before it
 * noted in *strip_after. */
static void lx_tag(lexer *L, const char *end, int *strip_after) {
    int depth = 0;
    for (;;) {
        while (L->pos < L->len && (L->src[L->pos] == ' ' || L->src[L->pos] == '\t' || L->src[L->pos] == '\n' ||
                                   L->src[L->pos] == '\r'))
            L->pos++;
        if (L->pos >= L->len) tmpl_fail(L->c, "line %d: a tag without its end '%s'", lx_line(L, L->pos), end);
        const char *p = L->src + L->pos;
        const size_t left = L->len - L->pos;
        if (depth == 0 && left >= 3 && p[0] == '-' && p[1] == end[0] && p[2] == end[1]) {
            *strip_after = 1;
            L->pos += 3;
            return;
        }
        if (depth == 0 && left >= 2 && p[0] == end[0] && p[1] == end[1]) {
            L->pos += 2;
            return;
        }
        if (p[0] == '\'' || p[0] == '"') { lx_string(L); continue; }
        if (is_name0(p[0])) {
            size_t n = 1;
            while (n < left && (is_name0(p[n]) || is_digit(p[n]))) n++;
            lx_push(L, (tk){TK_NAME, p, n, 0, 0, 0});
            L->pos += n;
            continue;
        }
        if (is_digit(p[0])) {
            /* strtod / strtoll read a NUL-terminated copy: the source ends at len, unterminated */
            size_t span = 1;
            while (span < left && (is_digit(p[span]) || (p[span] && strchr("._+-eExXpPabcdfABCDF", p[span])))) span++;
            const char *q = tmpl_strndup(L->c, p, span);
            char *e;
            const double f = strtod(q, &e);
            size_t n = (size_t)(e - q);
            int is_float = 0;
            for (size_t i = 0; i < n; i++) is_float |= p[i] == '.' || p[i] == 'e' || p[i] == 'E';
            if (is_float && n > 0 && p[n - 1] == '.') { n--; is_float = 0; } /* "1." then an attribute */
            tk t = {is_float ? TK_FLOAT : TK_INT, p, n, 0, is_float ? 0 : strtoll(q, NULL, 10), f};
            lx_push(L, t);
            L->pos += n;
            continue;
        }
        static const char *const two[] = {"**", "//", "==", "!=", "<=", ">=", NULL};
        size_t n = 1;
        for (int k = 0; two[k]; k++)
            if (left >= 2 && p[0] == two[k][0] && p[1] == two[k][1]) n = 2;
        if (n == 1 && !strchr("+-*/%~<>=()[]{},.:|", p[0]))
            tmpl_fail(L->c, "line %d: unexpected character '%c'", lx_line(L, L->pos), p[0]);
        if (n == 1 && (p[0] == '(' || p[0] == '[' || p[0] == '{')) depth++;
        if (n == 1 && (p[0] == ')' || p[0] == ']' || p[0] == '}') && depth > 0) depth--;
        lx_push(L, (tk){TK_OP, p, n, 0, 0, 0});
        L->pos += n;
    }
}

/* Text before a tag, with the tag's left whitespace control: '-' strips all whitespace before
 * it; a block or comment tag (lstrip_blocks, unless '+') strips the spaces and tabs between the
 * line's start and the tag. */
static void lx_text(lexer *L, size_t from, size_t to, int strip, int lstrip) {
    if (strip) {
        while (to > from && strchr(" \t\r\n", L->src[to - 1])) to--;
    } else if (lstrip) {
        size_t k = to;
        while (k > from && (L->src[k - 1] == ' ' || L->src[k - 1] == '\t')) k--;
        if (k == 0 || L->src[k - 1] == '\n') to = k;
    }
    if (to > from) lx_push(L, (tk){TK_TEXT, L->src + from, to - from, 0, 0, 0});
}

static void lex(lexer *L) {
    size_t text_from = 0;
    for (;;) {
        const char *open = NULL;
        for (size_t i = L->pos; i + 1 < L->len; i++)
            if (L->src[i] == '{' && (L->src[i + 1] == '{' || L->src[i + 1] == '%' || L->src[i + 1] == '#')) {
                open = L->src + i;
                break;
            }
        if (!open) {
            lx_text(L, text_from, L->len, 0, 0);
            break;
        }
        const size_t at = (size_t)(open - L->src);
        const char kind = open[1];
        L->pos = at + 2;
        const int minus = L->pos < L->len && L->src[L->pos] == '-', plus = L->pos < L->len && L->src[L->pos] == '+';
        if (minus || plus) L->pos++;
        lx_text(L, text_from, at, minus, kind != '{' && !plus);
        int strip_after = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t i = L->pos; i + 1 < L->len; i++)
                if (L->src[i] == '#' && L->src[i + 1] == '}') { e = L->src + i; break; }
            if (!e) tmpl_fail(L->c, "line %d: a comment without its end", lx_line(L, at));
            strip_after = e > L->src + L->pos && e[-1] == '-';
            L->pos = (size_t)(e - L->src) + 2;
        } else {
            lx_push(L, (tk){kind == '{' ? TK_VAR : TK_BLOCK, open, 2, 0, 0, 0});
            lx_tag(L, kind == '{' ? "}}" : "%}", &strip_after);
            lx_push(L, (tk){kind == '{' ? TK_VAR_END : TK_BLOCK_END, NULL, 0, 0, 0, 0});
        }
        if (strip_after) {
            while (L->pos < L->len && strchr(" \t\r\n", L->src[L->pos])) L->pos++;
        } else if (kind != '{') { /* trim_blocks: the newline after a block or comment tag */
            if (L->pos < L->len && L->src[L->pos] == '\n') L->pos++;
            else if (L->pos + 1 < L->len && L->src[L->pos] == '\r' && L->src[L->pos + 1] == '\n') L->pos += 2;
        }
        text_from = L->pos;
    }
    lx_push(L, (tk){TK_EOF, NULL, 0, 0, 0, 0});
}

/* ---- the parser ----------------------------------------------------------------------------- */

typedef struct {
    tmpl_ctx *c;
    tk *t;
    int p;
    int line;
} parser;

static const tk *peek(parser *P) { return &P->t[P->p]; }
static const tk *peek2(parser *P) { return P->t[P->p].k == TK_EOF ? &P->t[P->p] : &P->t[P->p + 1]; }
static const tk *next(parser *P) {
    const tk *t = &P->t[P->p];
    if (t->k != TK_EOF) P->p++;
    return t;
}
static int is_op(const tk *t, const char *op) { return t->k == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static int is_name(const tk *t, const char *w) { return t->k == TK_NAME && t->n == strlen(w) && !memcmp(t->s, w, t->n); }

static void expect_op(parser *P, const char *op) {
    const tk *t = next(P);
    if (!is_op(t, op))
        tmpl_fail(P->c, "line %d: expected '%s', found '%.*s'", P->line, op, (int)(t->n ? t->n : 3), t->n ? t->s : "end");
}

static tmpl_node *node(parser *P, tmpl_kind k) {
    tmpl_node *n = tmpl_alloc(P->c, sizeof *n);
    n->k = k;
    n->line = P->line;
    return n;
}

/* A growing array of nodes (and keyword names) in the arena. */
typedef struct {
    tmpl_node **v;
    const char **names;
    int n, cap;
} nodes;

static void nodes_add(parser *P, nodes *a, tmpl_node *x, const char *name) {
    if (a->n == a->cap) {
        const int cap = a->cap ? a->cap * 2 : 8;
        tmpl_node **v = tmpl_alloc(P->c, sizeof *v * (size_t)cap);
        const char **nm = tmpl_alloc(P->c, sizeof *nm * (size_t)cap);
        if (a->n) {
            memcpy(v, a->v, sizeof *v * (size_t)a->n);
            memcpy(nm, a->names, sizeof *nm * (size_t)a->n);
        }
        a->v = v;
        a->names = nm;
        a->cap = cap;
    }
    a->v[a->n] = x;
    a->names[a->n++] = name;
}

static tmpl_node *expr(parser *P);
static tmpl_node *unary(parser *P, int with_filter);

/* Call arguments after '(' up to ')': positional and name=value. */
static void args(parser *P, tmpl_node *n) {
    nodes a = {0};
    while (!is_op(peek(P), ")")) {
        const char *kw = NULL;
        if (peek(P)->k == TK_NAME && is_op(peek2(P), "=")) {
            const tk *k = next(P);
            kw = tmpl_strndup(P->c, k->s, k->n);
            next(P); /* = */
        }
        nodes_add(P, &a, expr(P), kw);
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    expect_op(P, ")");
    n->kids = a.v;
    n->names = a.names;
    n->nk = a.n;
}

static tmpl_node *primary(parser *P) {
    const tk *t = next(P);
    tmpl_node *n;
    if (t->k == TK_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            n = node(P, TN_BOOL);
            n->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = node(P, TN_NONE);
        } else {
            n = node(P, TN_NAME);
            n->s = tmpl_strndup(P->c, t->s, t->n);
            n->n = t->n;
        }
    } else if (t->k == TK_STR) { /* adjacent literals concatenate */
        size_t len = t->n;
        const char *s = t->s;
        while (peek(P)->k == TK_STR) {
            const tk *u = next(P);
            char *j = tmpl_alloc(P->c, len + u->n + 1);
            memcpy(j, s, len);
            memcpy(j + len, u->s, u->n);
            s = j;
            len += u->n;
        }
        n = node(P, TN_STR);
        n->s = s;
        n->n = len;
    } else if (t->k == TK_INT) {
        n = node(P, TN_INT);
        n->i = t->i;
    } else if (t->k == TK_FLOAT) {
        n = node(P, TN_FLOAT);
        n->f = t->f;
    } else if (is_op(t, "(")) { /* a parenthesized expression or a tuple (a list here) */
        if (is_op(peek(P), ")")) { next(P); return node(P, TN_LIST); }
        tmpl_node *e = expr(P);
        if (!is_op(peek(P), ",")) { expect_op(P, ")"); return e; }
        nodes a = {0};
        nodes_add(P, &a, e, NULL);
        while (is_op(peek(P), ",")) {
            next(P);
            if (is_op(peek(P), ")")) break;
            nodes_add(P, &a, expr(P), NULL);
        }
        expect_op(P, ")");
        n = node(P, TN_LIST);
        n->kids = a.v;
        n->nk = a.n;
    } else if (is_op(t, "[")) {
        nodes a = {0};
        while (!is_op(peek(P), "]")) {
            nodes_add(P, &a, expr(P), NULL);
            if (!is_op(peek(P), ",")) break;
            next(P);
        }
        expect_op(P, "]");
        n = node(P, TN_LIST);
        n->kids = a.v;
        n->nk = a.n;
    } else if (is_op(t, "{")) {
        nodes k = {0}, v = {0};
        while (!is_op(peek(P), "}")) {
            nodes_add(P, &k, expr(P), NULL);
            expect_op(P, ":");
            nodes_add(P, &v, expr(P), NULL);
            if (!is_op(peek(P), ",")) break;
            next(P);
        }
        expect_op(P, "}");
        n = node(P, TN_DICT);
        n->nk = k.n;
        n->kids = tmpl_alloc(P->c, sizeof *n->kids * (size_t)(2 * k.n + 1));
        for (int i = 0; i < k.n; i++) { n->kids[i] = k.v[i]; n->kids[k.n + i] = v.v[i]; }
    } else {
        tmpl_fail(P->c, "line %d: unexpected '%.*s' in an expression", P->line, (int)(t->n ? t->n : 3),
                  t->n ? t->s : "end");
    }
    return n;
}

/* Attribute access, subscripts and slices, calls. */
static tmpl_node *postfix(parser *P, tmpl_node *n) {
    for (;;) {
        if (is_op(peek(P), ".")) {
            next(P);
            const tk *t = next(P);
            if (t->k != TK_NAME && t->k != TK_INT) tmpl_fail(P->c, "line %d: a name after '.'", P->line);
            tmpl_node *a = node(P, t->k == TK_INT ? TN_ITEM : TN_ATTR);
            a->a = n;
            if (t->k == TK_INT) {
                a->b = node(P, TN_INT);
                a->b->i = t->i;
            } else {
                a->s = tmpl_strndup(P->c, t->s, t->n);
                a->n = t->n;
            }
            n = a;
        } else if (is_op(peek(P), "[")) {
            next(P);
            tmpl_node *parts[3] = {NULL, NULL, NULL};
            int colons = 0;
            while (!is_op(peek(P), "]")) {
                if (is_op(peek(P), ":")) {
                    if (++colons > 2) tmpl_fail(P->c, "line %d: a slice of more than 3 parts", P->line);
                    next(P);
                    continue;
                }
                parts[colons] = expr(P);
            }
            expect_op(P, "]");
            tmpl_node *a = node(P, colons ? TN_SLICE : TN_ITEM);
            a->a = n;
            a->b = parts[0];
            a->c = parts[1];
            a->d = parts[2];
            if (!colons && !parts[0]) tmpl_fail(P->c, "line %d: an empty subscript", P->line);
            n = a;
        } else if (is_op(peek(P), "(")) {
            next(P);
            tmpl_node *a = node(P, TN_CALL);
            a->a = n;
            args(P, a);
            n = a;
        } else {
            return n;
        }
    }
}

/* Filters (| name(args)) and tests (is [not] name [arg]) after an operand. */
static tmpl_node *filters(parser *P, tmpl_node *n) {
    for (;;) {
        if (is_op(peek(P), "|")) {
            next(P);
            const tk *t = next(P);
            if (t->k != TK_NAME) tmpl_fail(P->c, "line %d: a filter name after '|'", P->line);
            tmpl_node *f = node(P, TN_FILTER);
            f->a = n;
            f->s = tmpl_strndup(P->c, t->s, t->n);
            f->n = t->n;
            if (is_op(peek(P), "(")) { next(P); args(P, f); }
            n = postfix(P, f);
        } else if (is_name(peek(P), "is")) {
            next(P);
            tmpl_node *f = node(P, TN_TEST);
            if (is_name(peek(P), "not")) { next(P); f->i = 1; }
            const tk *t = next(P);
            if (t->k != TK_NAME) tmpl_fail(P->c, "line %d: a test name after 'is'", P->line);
            f->a = n;
            f->s = tmpl_strndup(P->c, t->s, t->n);
            f->n = t->n;
            const tk *u = peek(P);
            if (is_op(u, "(")) {
                next(P);
                args(P, f);
            } else if (u->k == TK_STR || u->k == TK_INT || u->k == TK_FLOAT ||
                       (u->k == TK_NAME && !is_name(u, "and") && !is_name(u, "or") && !is_name(u, "else") &&
                        !is_name(u, "if") && !is_name(u, "in") && !is_name(u, "not") && !is_name(u, "is"))) {
                f->kids = tmpl_alloc(P->c, sizeof *f->kids);
                f->names = tmpl_alloc(P->c, sizeof *f->names);
                f->kids[0] = primary(P);
                f->nk = 1;
            }
            n = f;
        } else {
            return n;
        }
    }
}

static tmpl_node *bin(parser *P, const char *op, tmpl_node *a, tmpl_node *b) {
    tmpl_node *n = node(P, TN_BIN);
    n->s = op;
    n->a = a;
    n->b = b;
    return n;
}

static tmpl_node *unary(parser *P, int with_filter) {
    tmpl_node *n;
    if (is_op(peek(P), "-")) {
        next(P);
        n = node(P, TN_NEG);
        n->a = unary(P, 0);
    } else if (is_op(peek(P), "+")) {
        next(P);
        n = unary(P, 0);
    } else {
        n = postfix(P, primary(P));
    }
    return with_filter ? filters(P, n) : n;
}

static tmpl_node *power(parser *P) {
    tmpl_node *n = unary(P, 1);
    while (is_op(peek(P), "**")) { next(P); n = bin(P, "**", n, unary(P, 1)); }
    return n;
}

static tmpl_node *mul(parser *P) {
    tmpl_node *n = power(P);
    for (;;) {
        const tk *t = peek(P);
        if (!is_op(t, "*") && !is_op(t, "/") && !is_op(t, "//") && !is_op(t, "%")) return n;
        const char *op = is_op(t, "*") ? "*" : is_op(t, "/") ? "/" : is_op(t, "//") ? "//" : "%";
        next(P);
        n = bin(P, op, n, power(P));
    }
}

static tmpl_node *add(parser *P) {
    tmpl_node *n = mul(P);
    while (is_op(peek(P), "+") || is_op(peek(P), "-")) {
        const char *op = is_op(next(P), "+") ? "+" : "-";
        n = bin(P, op, n, mul(P));
    }
    return n;
}

static tmpl_node *concat(parser *P) {
    tmpl_node *n = add(P);
    while (is_op(peek(P), "~")) { next(P); n = bin(P, "~", n, add(P)); }
    return n;
}

static tmpl_node *compare(parser *P) {
    tmpl_node *n = concat(P);
    for (;;) {
        const tk *t = peek(P);
        static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
        const char *op = NULL;
        for (int k = 0; ops[k] && !op; k++)
            if (is_op(t, ops[k])) op = ops[k];
        if (op) {
            next(P);
        } else if (is_name(t, "in")) {
            next(P);
            op = "in";
        } else if (is_name(t, "not") && is_name(peek2(P), "in")) {
            next(P);
            next(P);
            op = "not in";
        } else {
            return n;
        }
        n = bin(P, op, n, concat(P));
    }
}

static tmpl_node *not_(parser *P) {
    if (is_name(peek(P), "not")) {
        next(P);
        tmpl_node *n = node(P, TN_NOT);
        n->a = not_(P);
        return n;
    }
    return compare(P);
}

static tmpl_node *and_(parser *P) {
    tmpl_node *n = not_(P);
    while (is_name(peek(P), "and")) { next(P); n = bin(P, "and", n, not_(P)); }
    return n;
}

static tmpl_node *or_(parser *P) {
    tmpl_node *n = and_(P);
    while (is_name(peek(P), "or")) { next(P); n = bin(P, "or", n, and_(P)); }
    return n;
}

static tmpl_node *expr(parser *P) {
    tmpl_node *n = or_(P);
    if (is_name(peek(P), "if")) {
        next(P);
        tmpl_node *c = node(P, TN_COND);
        c->a = n;
        c->b = or_(P);
        if (is_name(peek(P), "else")) { next(P); c->c = expr(P); }
        return c;
    }
    return n;
}

/* ---- statements ----------------------------------------------------------------------------- */

static tmpl_node *body(parser *P, const char *const *ends);

static void end_tag(parser *P) {
    const tk *t = next(P);
    if (t->k != TK_BLOCK_END) tmpl_fail(P->c, "line %d: expected the end of the tag", P->line);
}

static const char *name_of(parser *P) {
    const tk *t = next(P);
    if (t->k != TK_NAME) tmpl_fail(P->c, "line %d: expected a name", P->line);
    return tmpl_strndup(P->c, t->s, t->n);
}

static tmpl_node *stmt_if(parser *P) {
    tmpl_node *n = node(P, TN_IF);
    n->a = expr(P);
    end_tag(P);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    n->b = body(P, ends);
    const tk *t = next(P); /* elif, else or endif (body stopped at it, after the block's start) */
    if (is_name(t, "elif")) {
        n->c = stmt_if(P);
        return n;
    }
    if (is_name(t, "else")) {
        end_tag(P);
        static const char *const e2[] = {"endif", NULL};
        n->c = body(P, e2);
        next(P);
    }
    end_tag(P);
    return n;
}

static tmpl_node *stmt_for(parser *P) {
    tmpl_node *n = node(P, TN_FOR);
    nodes t = {0};
    do {
        nodes_add(P, &t, NULL, name_of(P));
    } while (is_op(peek(P), ",") && next(P));
    n->names = t.names;
    n->nnames = t.n;
    if (!is_name(next(P), "in")) tmpl_fail(P->c, "line %d: 'for' without 'in'", P->line);
    n->a = or_(P); /* (not expr: "for x in y if cond" filters) */
    if (is_name(peek(P), "if")) { next(P); n->d = expr(P); }
    if (is_name(peek(P), "recursive")) tmpl_fail(P->c, "line %d: recursive loops are not supported", P->line);
    end_tag(P);
    static const char *const ends[] = {"else", "endfor", NULL};
    n->b = body(P, ends);
    if (is_name(next(P), "else")) {
        end_tag(P);
        static const char *const e2[] = {"endfor", NULL};
        n->c = body(P, e2);
        next(P);
    }
    end_tag(P);
    return n;
}

static tmpl_node *stmt_set(parser *P) {
    nodes t = {0};
    tmpl_node *ns = NULL;
    const char *first = name_of(P);
    if (is_op(peek(P), ".")) { /* set ns.attr = value */
        next(P);
        ns = node(P, TN_NAME);
        ns->s = first;
        ns->n = strlen(first);
        first = name_of(P);
    }
    nodes_add(P, &t, NULL, first);
    while (!ns && is_op(peek(P), ",")) {
        next(P);
        nodes_add(P, &t, NULL, name_of(P));
    }
    tmpl_node *n = node(P, TN_SET);
    n->names = t.names;
    n->nnames = t.n;
    n->a = ns;
    if (peek(P)->k == TK_BLOCK_END && !ns && t.n == 1) { /* {% set x %}...{% endset %} */
        next(P);
        n->k = TN_SET_BLOCK;
        static const char *const ends[] = {"endset", NULL};
        n->b = body(P, ends);
        next(P);
        end_tag(P);
        return n;
    }
    expect_op(P, "=");
    n->b = expr(P);
    if (is_op(peek(P), ",")) { /* set a = x, y: a tuple */
        tmpl_node *l = node(P, TN_LIST);
        nodes v = {0};
        nodes_add(P, &v, n->b, NULL);
        while (is_op(peek(P), ",")) { next(P); nodes_add(P, &v, expr(P), NULL); }
        l->kids = v.v;
        l->nk = v.n;
        n->b = l;
    }
    end_tag(P);
    return n;
}

static tmpl_node *stmt_macro(parser *P) {
    tmpl_node *n = node(P, TN_MACRO);
    n->s = name_of(P);
    n->n = strlen(n->s);
    expect_op(P, "(");
    nodes p = {0};
    while (!is_op(peek(P), ")")) {
        const char *nm = name_of(P);
        tmpl_node *def = NULL;
        if (is_op(peek(P), "=")) { next(P); def = expr(P); }
        nodes_add(P, &p, def, nm);
        if (!is_op(peek(P), ",")) break;
        next(P);
    }
    expect_op(P, ")");
    end_tag(P);
    n->kids = p.v;
    n->names = p.names;
    n->nnames = n->nk = p.n;
    static const char *const ends[] = {"endmacro", NULL};
    n->b = body(P, ends);
    next(P);
    end_tag(P);
    return n;
}

/* One statement tag (its {% consumed). */
static tmpl_node *statement(parser *P) {
    const tk *t = next(P);
    if (is_name(t, "if")) return stmt_if(P);
    if (is_name(t, "for")) return stmt_for(P);
    if (is_name(t, "set")) return stmt_set(P);
    if (is_name(t, "macro")) return stmt_macro(P);
    if (is_name(t, "break") || is_name(t, "continue")) {
        tmpl_node *n = node(P, t->s[0] == 'b' ? TN_BREAK : TN_CONTINUE);
        end_tag(P);
        return n;
    }
    if (is_name(t, "generation")) { /* transformers' assistant-mask marker: its body as is */
        end_tag(P);
        static const char *const ends[] = {"endgeneration", NULL};
        tmpl_node *n = body(P, ends);
        next(P);
        end_tag(P);
        return n;
    }
    if (is_name(t, "filter")) {
        tmpl_node *n = node(P, TN_FILTER_BLOCK);
        n->s = name_of(P);
        n->n = strlen(n->s);
        end_tag(P);
        static const char *const ends[] = {"endfilter", NULL};
        n->b = body(P, ends);
        next(P);
        end_tag(P);
        return n;
    }
    tmpl_fail(P->c, "line %d: the '%.*s' statement is not supported", P->line, (int)(t->n ? t->n : 3),
              t->n ? t->s : "end");
}

/* Statements until a {% tag whose name is one of ends (the tag's {% consumed, its name not) or,
 * with ends NULL, the end of the template. */
static tmpl_node *body(parser *P, const char *const *ends) {
    tmpl_node *b = node(P, TN_BODY);
    nodes a = {0};
    for (;;) {
        const tk *t = peek(P);
        P->line = t->line ? t->line : P->line;
        if (t->k == TK_EOF) {
            if (ends) { /* (the closing tag: the last of them) */
                int k = 0;
                while (ends[k + 1]) k++;
                tmpl_fail(P->c, "line %d: the template ended without its '%s'", P->line, ends[k]);
            }
            break;
        }
        if (t->k == TK_TEXT) {
            next(P);
            tmpl_node *n = node(P, TN_TEXT);
            n->s = t->s;
            n->n = t->n;
            nodes_add(P, &a, n, NULL);
        } else if (t->k == TK_VAR) {
            next(P);
            tmpl_node *n = node(P, TN_OUT);
            n->a = expr(P);
            if (next(P)->k != TK_VAR_END) tmpl_fail(P->c, "line %d: expected '}}'", P->line);
            nodes_add(P, &a, n, NULL);
        } else if (t->k == TK_BLOCK) {
            const tk *w = peek2(P);
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(w, ends[k])) {
                    next(P);
                    goto done;
                }
            next(P);
            nodes_add(P, &a, statement(P), NULL);
        } else {
            tmpl_fail(P->c, "line %d: unexpected token", P->line);
        }
    }
done:
    b->kids = a.v;
    b->nk = a.n;
    return b;
}

tmpl_node *tmpl_parse(tmpl_ctx *c, const char *src, size_t len) {
    lexer L = {c, src, len, 0, 1, NULL, 0, 0};
    lex(&L);
    /* the lines of the tags, for messages */
    int line = 1;
    size_t at = 0;
    for (int i = 0; i < L.nt; i++) {
        if ((L.t[i].k == TK_VAR || L.t[i].k == TK_BLOCK) && L.t[i].s) {
            const size_t to = (size_t)(L.t[i].s - src);
            for (; at < to; at++) line += src[at] == '\n';
            L.t[i].line = line;
        }
    }
    parser P = {c, L.t, 0, 1};
    return body(&P, NULL);
}
