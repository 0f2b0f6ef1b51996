/* template_eval.c - rendering a parsed chat template (template.h): scopes (the globals from the
 * context, a frame per loop iteration, a macro's frame over the globals), expressions with
 * Python's operators, the filters, tests, methods and built-ins published templates use, the
 * statements, and tmpl_render. Anything else fails with a message naming it. */
#include "template_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FN_RANGE, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };

typedef struct frame {
    struct frame *up;
    const char **names;
    tval *vals;
    int n, cap;
} frame;

typedef struct {
    tmpl_ctx *c;
    frame *globals;
    tbuf *out;
    int brk, cont, depth;
} rs;

/* The render's context (arena, error exit), named C in every function that has the render R. */
#define C (R->c)

static tval *f_find(frame *f, const char *name) {
    for (; f; f = f->up)
        for (int i = f->n - 1; i >= 0; i--)
            if (!strcmp(f->names[i], name)) return &f->vals[i];
    return NULL;
}

static void f_set(tmpl_ctx *c, frame *f, const char *name, tval v) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        const int cap = f->cap ? f->cap * 2 : 8;
        const char **nn = tmpl_alloc(c, sizeof *nn * (size_t)cap);
        tval *nv = tmpl_alloc(c, sizeof *nv * (size_t)cap);
        if (f->n) { memcpy(nn, f->names, sizeof *nn * (size_t)f->n); memcpy(nv, f->vals, sizeof *nv * (size_t)f->n); }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

static frame *f_new(tmpl_ctx *c, frame *up) {
    frame *f = tmpl_alloc(c, sizeof *f);
    f->up = up;
    return f;
}

static tval eval(rs *R, frame *F, const tmpl_node *n);
static void render(rs *R, frame *F, const tmpl_node *n);

/* ---- helpers -------------------------------------------------------------------------------- */

static const char *S(tval v) { return v.t == V_STR ? v.u.s.p : ""; }

static int64_t as_int(rs *R, tval v, const char *what) {
    if (v.t == V_INT || v.t == V_BOOL) return v.u.i;
    if (v.t == V_FLOAT) return (int64_t)v.u.f;
    tmpl_fail(C, "%s: expected an integer, not %s", what, tv_type_name(v));
}

/* The items a for loop or a filter walks: a list's, a dict's keys, a string's characters. */
static vlist *items_of(rs *R, tval v, const char *what) {
    if (v.t == V_LIST) return v.u.l;
    tval l = tv_list(C);
    if (v.t == V_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) tv_l_push(C, l.u.l, v.u.d->k[i]);
    } else if (v.t == V_STR) {
        const size_t n = tv_u8_len(v.u.s.p, v.u.s.n);
        for (size_t i = 0; i < n; i++) {
            const size_t a = tv_u8_off(v.u.s.p, v.u.s.n, i), b = tv_u8_off(v.u.s.p, v.u.s.n, i + 1);
            tv_l_push(C, l.u.l, tv_str(v.u.s.p + a, b - a));
        }
    } else if (v.t != V_UNDEF) {
        tmpl_fail(C, "%s: a %s is not iterable", what, tv_type_name(v));
    }
    return l.u.l;
}

static tval cat(rs *R, tval a, tval b) {
    tbuf o = {0};
    tv_str_of(C, &o, a);
    tv_str_of(C, &o, b);
    return tv_b_val(&o);
}

static int has_sub(tval hay, tval needle) {
    if (needle.u.s.n == 0) return 1;
    for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
        if (!memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n)) return 1;
    return 0;
}

static int contains(rs *R, tval hay, tval x) {
    if (hay.t == V_STR) {
        if (x.t != V_STR) tmpl_fail(C, "'in <string>' needs a string on the left, not %s", tv_type_name(x));
        return has_sub(hay, x);
    }
    if (hay.t == V_LIST) {
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (tv_eq(hay.u.l->v[i], x)) return 1;
        return 0;
    }
    if (hay.t == V_DICT) return tv_d_find(hay.u.d, x) != NULL;
    if (hay.t == V_UNDEF) return 0; /* (jinja2: an undefined value iterates as empty) */
    tmpl_fail(C, "'in' a %s", tv_type_name(hay));
}

static int cmp(rs *R, tval a, tval b, const char *op) {
    if (tv_is_num(a) && tv_is_num(b)) return (tv_num(a) > tv_num(b)) - (tv_num(a) < tv_num(b));
    if (a.t == V_STR && b.t == V_STR) return tv_key_cmp(&a, &b);
    tmpl_fail(C, "'%s' between %s and %s", op, tv_type_name(a), tv_type_name(b));
}

/* ---- operators ------------------------------------------------------------------------------ */

/* s's text HTML-escaped as jinja2's Markup escapes a plain string joined to it. */
static void add_escaped(rs *R, tbuf *o, tval s) {
    for (size_t i = 0; i < s.u.s.n; i++) {
        const char ch = s.u.s.p[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                      : ch == '\'' ? "&#39;" : NULL;
        if (e) tv_b_cstr(C, o, e);
        else tv_b_add(C, o, &ch, 1);
    }
}

static tval arith(rs *R, const char *op, tval a, tval b) {
    if (a.t == V_UNDEF || b.t == V_UNDEF) tmpl_fail(C, "'%s' with an undefined value", op);
    if (!strcmp(op, "+")) {
        if (a.t == V_STR && b.t == V_STR) {
            const int markup = a.safe || b.safe;
            tbuf o = {0};
            if (markup && !a.safe) add_escaped(R, &o, a);
            else tv_b_add(C, &o, a.u.s.p, a.u.s.n);
            if (markup && !b.safe) add_escaped(R, &o, b);
            else tv_b_add(C, &o, b.u.s.p, b.u.s.n);
            tval r = o.p ? tv_b_val(&o) : tv_cstr("");
            r.safe = markup;
            return r;
        }
        if (a.t == V_LIST && b.t == V_LIST) {
            tval l = tv_list(C);
            for (size_t i = 0; i < a.u.l->n; i++) tv_l_push(C, l.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) tv_l_push(C, l.u.l, b.u.l->v[i]);
            return l;
        }
    }
    if (!strcmp(op, "*") && ((a.t == V_STR && b.t == V_INT) || (a.t == V_INT && b.t == V_STR))) {
        const tval s = a.t == V_STR ? a : b;
        const int64_t k = a.t == V_INT ? a.u.i : b.u.i;
        tbuf o = {0};
        for (int64_t i = 0; i < k; i++) tv_b_add(C, &o, s.u.s.p, s.u.s.n);
        return o.p ? tv_b_val(&o) : tv_cstr("");
    }
    if (!tv_is_num(a) || !tv_is_num(b))
        tmpl_fail(C, "unsupported operand types for %s: %s and %s", op, tv_type_name(a), tv_type_name(b));
    const int ints = a.t != V_FLOAT && b.t != V_FLOAT;
    const double x = tv_num(a), y = tv_num(b);
    if (!strcmp(op, "+")) return ints ? tv_int(a.u.i + b.u.i) : tv_float(x + y);
    if (!strcmp(op, "-")) return ints ? tv_int(a.u.i - b.u.i) : tv_float(x - y);
    if (!strcmp(op, "*")) return ints ? tv_int(a.u.i * b.u.i) : tv_float(x * y);
    if ((!strcmp(op, "/") || !strcmp(op, "//") || !strcmp(op, "%")) && y == 0) tmpl_fail(C, "division by zero");
    if (!strcmp(op, "/")) return tv_float(x / y);
    if (!strcmp(op, "//")) {
        if (ints) {
            int64_t q = a.u.i / b.u.i;
            if ((a.u.i % b.u.i != 0) && ((a.u.i < 0) != (b.u.i < 0))) q--;
            return tv_int(q);
        }
        return tv_float(floor(x / y));
    }
    if (!strcmp(op, "%")) {
        if (ints) {
            int64_t m = a.u.i % b.u.i;
            if (m != 0 && ((m < 0) != (b.u.i < 0))) m += b.u.i;
            return tv_int(m);
        }
        return tv_float(x - y * floor(x / y));
    }
    if (ints && b.u.i >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.u.i; i++) r *= a.u.i;
        return tv_int(r);
    }
    return tv_float(pow(x, y));
}

static tval binop(rs *R, frame *F, const tmpl_node *n) {
    const char *op = n->s;
    if (!strcmp(op, "and")) {
        const tval a = eval(R, F, n->a);
        return tv_truthy(a) ? eval(R, F, n->b) : a;
    }
    if (!strcmp(op, "or")) {
        const tval a = eval(R, F, n->a);
        return tv_truthy(a) ? a : eval(R, F, n->b);
    }
    const tval a = eval(R, F, n->a), b = eval(R, F, n->b);
    if (!strcmp(op, "~")) return cat(R, a, b);
    if (!strcmp(op, "==")) return tv_bool(tv_eq(a, b));
    if (!strcmp(op, "!=")) return tv_bool(!tv_eq(a, b));
    if (!strcmp(op, "in")) return tv_bool(contains(R, b, a));
    if (!strcmp(op, "not in")) return tv_bool(!contains(R, b, a));
    if (!strcmp(op, "<")) return tv_bool(cmp(R, a, b, op) < 0);
    if (!strcmp(op, ">")) return tv_bool(cmp(R, a, b, op) > 0);
    if (!strcmp(op, "<=")) return tv_bool(cmp(R, a, b, op) <= 0);
    if (!strcmp(op, ">=")) return tv_bool(cmp(R, a, b, op) >= 0);
    return arith(R, op, a, b);
}

/* ---- attribute, item, slice ----------------------------------------------------------------- */

static tval item(rs *R, tval obj, tval key) {
    if (obj.t == V_DICT) {
        tval *p = tv_d_find(obj.u.d, key);
        return p ? *p : TV_UNDEF_V;
    }
    if ((obj.t == V_LIST || obj.t == V_STR) && (key.t == V_INT || key.t == V_BOOL)) {
        const int64_t n = obj.t == V_LIST ? (int64_t)obj.u.l->n : (int64_t)tv_u8_len(obj.u.s.p, obj.u.s.n);
        int64_t i = key.u.i < 0 ? key.u.i + n : key.u.i;
        if (i < 0 || i >= n) return TV_UNDEF_V;
        if (obj.t == V_LIST) return obj.u.l->v[i];
        const size_t a = tv_u8_off(obj.u.s.p, obj.u.s.n, (size_t)i), b = tv_u8_off(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
        return tv_str(obj.u.s.p + a, b - a);
    }
    if (obj.t == V_UNDEF) return TV_UNDEF_V;
    if (obj.t == V_LIST || obj.t == V_STR) tmpl_fail(C, "a %s index must be an integer", tv_type_name(obj));
    return TV_UNDEF_V;
}

static tval slice(rs *R, frame *F, const tmpl_node *n) {
    const tval obj = eval(R, F, n->a);
    if (obj.t != V_LIST && obj.t != V_STR) tmpl_fail(C, "line %d: slicing a %s", n->line, tv_type_name(obj));
    const int64_t len = obj.t == V_LIST ? (int64_t)obj.u.l->n : (int64_t)tv_u8_len(obj.u.s.p, obj.u.s.n);
    const int64_t step = n->d ? as_int(R, eval(R, F, n->d), "slice step") : 1;
    if (step == 0) tmpl_fail(C, "line %d: slice step 0", n->line);
    int64_t lo, hi;
    const int64_t def_lo = step > 0 ? 0 : len - 1, def_hi = step > 0 ? len : -1 - len;
    lo = n->b ? as_int(R, eval(R, F, n->b), "slice start") : def_lo;
    hi = n->c ? as_int(R, eval(R, F, n->c), "slice stop") : def_hi;
    if (n->b && lo < 0) lo += len;
    if (n->c && hi < 0) hi += len;
    if (step > 0) {
        lo = lo < 0 ? 0 : lo > len ? len : lo;
        hi = hi < 0 ? 0 : hi > len ? len : hi;
    } else {
        lo = lo < -1 ? -1 : lo > len - 1 ? len - 1 : lo;
        hi = hi < -1 ? -1 : hi > len - 1 ? len - 1 : hi;
    }
    tval l = tv_list(C);
    tbuf o = {0};
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
        if (obj.t == V_LIST) tv_l_push(C, l.u.l, obj.u.l->v[i]);
        else {
            const size_t a = tv_u8_off(obj.u.s.p, obj.u.s.n, (size_t)i), b = tv_u8_off(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
            tv_b_add(C, &o, obj.u.s.p + a, b - a);
        }
    }
    if (obj.t == V_LIST) return l;
    return o.p ? tv_b_val(&o) : tv_cstr("");
}

/* ---- arguments ----------------------------------------------------------------------------- */

/* A call's arguments evaluated: positional ones in pos[], keyword ones by name. */
typedef struct {
    tval pos[8];
    int np;
    const char *kw[8];
    tval kv[8];
    int nkw;
} targs;

static void eval_args(rs *R, frame *F, const tmpl_node *n, targs *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < n->nk; i++) {
        const tval v = eval(R, F, n->kids[i]);
        if (n->names && n->names[i]) {
            if (a->nkw == 8) tmpl_fail(C, "line %d: too many keyword arguments", n->line);
            a->kw[a->nkw] = n->names[i];
            a->kv[a->nkw++] = v;
        } else {
            if (a->np == 8) tmpl_fail(C, "line %d: too many arguments", n->line);
            a->pos[a->np++] = v;
        }
    }
}

/* Argument i (positional; i < 0: keyword only) or its keyword name, else dflt. */
static tval arg(const targs *a, int i, const char *name, tval dflt) {
    if (i >= 0 && i < a->np) return a->pos[i];
    for (int k = 0; name && k < a->nkw; k++)
        if (!strcmp(a->kw[k], name)) return a->kv[k];
    return dflt;
}

/* ---- string methods ------------------------------------------------------------------------- */

static int in_set(char ch, tval chars) {
    if (chars.t != V_STR) return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
    return memchr(chars.u.s.p, ch, chars.u.s.n) != NULL;
}

static tval strip(tval s, tval chars, int left, int right) {
    size_t a = 0, b = s.u.s.n;
    while (left && a < b && in_set(s.u.s.p[a], chars)) a++;
    while (right && b > a && in_set(s.u.s.p[b - 1], chars)) b--;
    return tv_str(s.u.s.p + a, b - a);
}

static tval split(rs *R, tval s, tval sep, int64_t maxsplit) {
    tval l = tv_list(C);
    const char *p = s.u.s.p, *e = p + s.u.s.n;
    if (sep.t != V_STR) { /* runs of whitespace, none empty */
        while (p < e) {
            while (p < e && in_set(*p, TV_UNDEF_V)) p++;
            if (p >= e) break;
            const char *q = p;
            if (maxsplit >= 0 && (int64_t)l.u.l->n == maxsplit) q = e;
            else while (q < e && !in_set(*q, TV_UNDEF_V)) q++;
            tv_l_push(C, l.u.l, tv_str(p, (size_t)(q - p)));
            p = q;
        }
        return l;
    }
    if (sep.u.s.n == 0) tmpl_fail(C, "split: empty separator");
    for (;;) {
        const char *q = NULL;
        if (maxsplit < 0 || (int64_t)l.u.l->n < maxsplit)
            for (const char *x = p; x + sep.u.s.n <= e; x++)
                if (!memcmp(x, sep.u.s.p, sep.u.s.n)) { q = x; break; }
        if (!q) { tv_l_push(C, l.u.l, tv_str(p, (size_t)(e - p))); return l; }
        tv_l_push(C, l.u.l, tv_str(p, (size_t)(q - p)));
        p = q + sep.u.s.n;
    }
}

static tval replace(rs *R, tval s, tval old, tval rep, int64_t count) {
    if (old.t != V_STR || rep.t != V_STR) tmpl_fail(C, "replace: strings expected");
    tbuf o = {0};
    const char *p = s.u.s.p, *e = p + s.u.s.n;
    int64_t done = 0;
    while (p < e) {
        if (old.u.s.n && (count < 0 || done < count) && p + old.u.s.n <= e && !memcmp(p, old.u.s.p, old.u.s.n)) {
            tv_b_add(C, &o, rep.u.s.p, rep.u.s.n);
            p += old.u.s.n;
            done++;
        } else {
            tv_b_add(C, &o, p++, 1);
        }
    }
    return o.p ? tv_b_val(&o) : tv_cstr("");
}

static tval change_case(rs *R, tval s, int mode) { /* 0 lower, 1 upper, 2 title, 3 capitalize */
    char *p = tmpl_strndup(C, s.u.s.p, s.u.s.n);
    int start = 1;
    for (size_t i = 0; i < s.u.s.n; i++) {
        const char ch = p[i];
        const int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        int up = mode == 1 || (mode == 2 && start) || (mode == 3 && i == 0);
        if (up && ch >= 'a' && ch <= 'z') p[i] = (char)(ch - 32);
        if (!up && ch >= 'A' && ch <= 'Z') p[i] = (char)(ch + 32);
        start = !alpha;
    }
    return tv_str(p, s.u.s.n);
}

static int prefix_match(tval s, tval x, int end) {
    if (x.t == V_LIST) {
        for (size_t i = 0; i < x.u.l->n; i++)
            if (prefix_match(s, x.u.l->v[i], end)) return 1;
        return 0;
    }
    if (x.t != V_STR || x.u.s.n > s.u.s.n) return 0;
    return !memcmp(s.u.s.p + (end ? s.u.s.n - x.u.s.n : 0), x.u.s.p, x.u.s.n);
}

/* "{} and {0}"-style str.format with positional arguments only. */
static tval format(rs *R, tval s, const targs *a) {
    tbuf o = {0};
    int next = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
        const char ch = s.u.s.p[i];
        if (ch == '{' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '{') { tv_b_add(C, &o, "{", 1); i++; continue; }
        if (ch == '}' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '}') { tv_b_add(C, &o, "}", 1); i++; continue; }
        if (ch != '{') { tv_b_add(C, &o, &ch, 1); continue; }
        size_t j = i + 1;
        int idx = -1;
        if (j < s.u.s.n && s.u.s.p[j] >= '0' && s.u.s.p[j] <= '9') idx = 0;
        while (j < s.u.s.n && s.u.s.p[j] >= '0' && s.u.s.p[j] <= '9') idx = idx * 10 + (s.u.s.p[j++] - '0');
        if (j >= s.u.s.n || s.u.s.p[j] != '}') tmpl_fail(C, "format: only {} and {N} fields are supported");
        if (idx < 0) idx = next++;
        if (idx >= a->np) tmpl_fail(C, "format: field %d without an argument", idx);
        tv_str_of(C, &o, a->pos[idx]);
        i = j;
    }
    return o.p ? tv_b_val(&o) : tv_cstr("");
}

static tval str_method(rs *R, tval s, const char *m, const targs *a, int line) {
    if (!strcmp(m, "strip")) return strip(s, arg(a, 0, NULL, TV_UNDEF_V), 1, 1);
    if (!strcmp(m, "lstrip")) return strip(s, arg(a, 0, NULL, TV_UNDEF_V), 1, 0);
    if (!strcmp(m, "rstrip")) return strip(s, arg(a, 0, NULL, TV_UNDEF_V), 0, 1);
    if (!strcmp(m, "split")) {
        const tval sep = arg(a, 0, "sep", TV_NONE_V), mx = arg(a, 1, "maxsplit", tv_int(-1));
        return split(R, s, sep.t == V_STR ? sep : TV_UNDEF_V, as_int(R, mx, "split"));
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) return tv_bool(prefix_match(s, arg(a, 0, NULL, TV_NONE_V), m[0] == 'e'));
    if (!strcmp(m, "replace"))
        return replace(R, s, arg(a, 0, NULL, TV_NONE_V), arg(a, 1, NULL, TV_NONE_V), as_int(R, arg(a, 2, NULL, tv_int(-1)), "replace"));
    if (!strcmp(m, "lower")) return change_case(R, s, 0);
    if (!strcmp(m, "upper")) return change_case(R, s, 1);
    if (!strcmp(m, "title")) return change_case(R, s, 2);
    if (!strcmp(m, "capitalize")) return change_case(R, s, 3);
    if (!strcmp(m, "format")) return format(R, s, a);
    if (!strcmp(m, "join")) {
        vlist *l = items_of(R, arg(a, 0, NULL, TV_NONE_V), "join");
        tbuf o = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (i) tv_b_add(C, &o, s.u.s.p, s.u.s.n);
            tv_str_of(C, &o, l->v[i]);
        }
        return o.p ? tv_b_val(&o) : tv_cstr("");
    }
    if (!strcmp(m, "count") || !strcmp(m, "find")) {
        const tval x = arg(a, 0, NULL, TV_NONE_V);
        if (x.t != V_STR) tmpl_fail(C, "line %d: %s needs a string", line, m);
        int64_t k = 0, first = -1;
        for (size_t i = 0; x.u.s.n && i + x.u.s.n <= s.u.s.n;) {
            if (!memcmp(s.u.s.p + i, x.u.s.p, x.u.s.n)) {
                if (first < 0) first = (int64_t)tv_u8_len(s.u.s.p, i);
                k++;
                i += x.u.s.n;
            } else {
                i++;
            }
        }
        return tv_int(m[0] == 'c' ? k : first);
    }
    tmpl_fail(C, "line %d: the string method '%s' is not supported", line, m);
}

static tval method(rs *R, tval obj, const char *m, const targs *a, int line) {
    if (obj.t == V_STR) return str_method(R, obj, m, a, line);
    if (obj.t == V_DICT) {
        if (!strcmp(m, "get")) {
            tval *p = tv_d_find(obj.u.d, arg(a, 0, NULL, TV_NONE_V));
            return p ? *p : arg(a, 1, NULL, TV_NONE_V);
        }
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            tval l = tv_list(C);
            for (size_t i = 0; i < obj.u.d->n; i++) {
                if (m[0] == 'k') tv_l_push(C, l.u.l, obj.u.d->k[i]);
                else if (m[0] == 'v') tv_l_push(C, l.u.l, obj.u.d->v[i]);
                else {
                    tval p = tv_list(C);
                    tv_l_push(C, p.u.l, obj.u.d->k[i]);
                    tv_l_push(C, p.u.l, obj.u.d->v[i]);
                    tv_l_push(C, l.u.l, p);
                }
            }
            return l;
        }
    }
    if (obj.t == V_LIST) {
        if (!strcmp(m, "append")) {
            tv_l_push(C, obj.u.l, arg(a, 0, NULL, TV_NONE_V));
            return TV_NONE_V;
        }
        if (!strcmp(m, "pop")) {
            if (obj.u.l->n == 0) tmpl_fail(C, "line %d: pop from an empty list", line);
            int64_t i = as_int(R, arg(a, 0, NULL, tv_int(-1)), "pop");
            if (i < 0) i += (int64_t)obj.u.l->n;
            if (i < 0 || i >= (int64_t)obj.u.l->n) tmpl_fail(C, "line %d: pop index out of range", line);
            const tval v = obj.u.l->v[i];
            memmove(obj.u.l->v + i, obj.u.l->v + i + 1, sizeof(tval) * (obj.u.l->n - (size_t)i - 1));
            obj.u.l->n--;
            return v;
        }
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            const tval x = arg(a, 0, NULL, TV_NONE_V);
            int64_t k = 0;
            for (size_t i = 0; i < obj.u.l->n; i++)
                if (tv_eq(obj.u.l->v[i], x)) {
                    if (m[0] == 'i') return tv_int((int64_t)i);
                    k++;
                }
            if (m[0] == 'i') tmpl_fail(C, "line %d: list.index: not in the list", line);
            return tv_int(k);
        }
    }
    tmpl_fail(C, "line %d: the method '%s' of a %s is not supported", line, m, tv_type_name(obj));
}

/* ---- filters -------------------------------------------------------------------------------- */

static int test(rs *R, const char *name, tval v, const targs *a, int line);

static tval attr_of(rs *R, tval v, tval name) {
    (void)R;
    if (v.t != V_DICT) return TV_UNDEF_V;
    tval *p = tv_d_find(v.u.d, name);
    return p ? *p : TV_UNDEF_V;
}

/* selectattr / rejectattr / select / reject. */
static tval select_items(rs *R, tval seq, const targs *a, int attr, int keep, int line) {
    vlist *l = items_of(R, seq.t == V_NONE ? TV_UNDEF_V : seq, "select"); /* (jinja2: none selects nothing) */
    tval out = tv_list(C);
    targs rest = *a; /* the test's own arguments follow the attribute and the test's name */
    const int skip = attr + 1;
    rest.np = a->np > skip ? a->np - skip : 0;
    for (int i = 0; i < rest.np; i++) rest.pos[i] = a->pos[i + skip];
    const tval tn = arg(a, attr, NULL, TV_NONE_V);
    for (size_t i = 0; i < l->n; i++) {
        const tval x = attr ? attr_of(R, l->v[i], a->pos[0]) : l->v[i];
        const int ok = tn.t == V_STR ? test(R, S(tn), x, &rest, line) : tv_truthy(x);
        if (ok == keep) tv_l_push(C, out.u.l, l->v[i]);
    }
    return out;
}

static tval filter_tojson(rs *R, tval v, const targs *a) {
    const tval ind = arg(a, 0, "indent", TV_NONE_V), seps = arg(a, 1, "separators", TV_NONE_V);
    tv_json_opts o = {ind.t == V_INT ? (int)ind.u.i : -1, ", ", ": ", tv_truthy(arg(a, 2, "sort_keys", tv_bool(0)))};
    if (o.indent >= 0) o.item_sep = ",";
    if (seps.t == V_LIST && seps.u.l->n == 2) {
        o.item_sep = tmpl_strndup(C, S(seps.u.l->v[0]), seps.u.l->v[0].u.s.n);
        o.key_sep = tmpl_strndup(C, S(seps.u.l->v[1]), seps.u.l->v[1].u.s.n);
    }
    tbuf b = {0};
    tv_json_of(C, &b, v, &o, 0);
    return tv_b_val(&b);
}

static int sort_cmp_ci(const void *x, const void *y) {
    const tval *a = x, *b = y;
    const size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    for (size_t i = 0; i < n; i++) {
        int p = (unsigned char)a->u.s.p[i], q = (unsigned char)b->u.s.p[i];
        if (p >= 'A' && p <= 'Z') p += 32;
        if (q >= 'A' && q <= 'Z') q += 32;
        if (p != q) return p - q;
    }
    return (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

static tval filter(rs *R, const char *f, tval v, const targs *a, int line);

/* The filters of one value (text, JSON, defaults): 1 with *out set, 0 when f is not one of them. */
static int filter_value(rs *R, const char *f, tval v, const targs *a, int line, tval *out) {
    if (!strcmp(f, "safe")) {
        tval s = tv_to_str(C, v);
        s.safe = 1;
        return *out = s, 1;
    }
    if (!strcmp(f, "e") || !strcmp(f, "escape")) tmpl_fail(C, "line %d: the escape filter is not supported", line);
    if (!strcmp(f, "min") || !strcmp(f, "max")) {
        vlist *l = items_of(R, v, f);
        if (l->n == 0) return *out = TV_UNDEF_V, 1;
        tval best = l->v[0];
        for (size_t i = 1; i < l->n; i++) {
            const int c = cmp(R, l->v[i], best, f);
            if (f[1] == 'i' ? c < 0 : c > 0) best = l->v[i];
        }
        return *out = best, 1;
    }
    if (!strcmp(f, "tojson")) return *out = filter_tojson(R, v, a), 1;
    if (!strcmp(f, "string")) return *out = tv_to_str(C, v), 1;
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (v.t == V_STR) return *out = tv_int((int64_t)tv_u8_len(v.u.s.p, v.u.s.n)), 1;
        if (v.t == V_LIST) return *out = tv_int((int64_t)v.u.l->n), 1;
        if (v.t == V_DICT) return *out = tv_int((int64_t)v.u.d->n), 1;
        if (v.t == V_UNDEF) return *out = tv_int(0), 1;
        tmpl_fail(C, "line %d: length of a %s", line, tv_type_name(v));
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        const int boolean = tv_truthy(arg(a, 1, "boolean", tv_bool(0)));
        return *out = (v.t == V_UNDEF || (boolean && !tv_truthy(v))) ? arg(a, 0, "default_value", tv_cstr("")) : v, 1;
    }
    if (!strcmp(f, "trim")) {
        const tval s = tv_to_str(C, v);
        return *out = strip(s, arg(a, 0, "chars", TV_UNDEF_V), 1, 1), 1;
    }
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "title") || !strcmp(f, "capitalize"))
        return *out = change_case(R, tv_to_str(C, v), f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 't' ? 2 : 3), 1;
    if (!strcmp(f, "replace"))
        return *out = replace(R, tv_to_str(C, v), arg(a, 0, NULL, TV_NONE_V), arg(a, 1, NULL, TV_NONE_V),
                              as_int(R, arg(a, 2, "count", tv_int(-1)), "replace")), 1;
    if (!strcmp(f, "join")) {
        vlist *l = items_of(R, v, "join");
        const tval sep = arg(a, 0, "d", tv_cstr("")), at = arg(a, 1, "attribute", TV_NONE_V);
        tbuf o = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (i) tv_str_of(C, &o, sep);
            tv_str_of(C, &o, at.t == V_STR ? attr_of(R, l->v[i], at) : l->v[i]);
        }
        return *out = o.p ? tv_b_val(&o) : tv_cstr(""), 1;
    }
    return 0;
}

/* The filters of sequences (and numbers): 1 with *out set, 0 when f is not one of them. */
static int filter_seq(rs *R, const char *f, tval v, const targs *a, int line, tval *out) {
    if (!strcmp(f, "list")) {
        vlist *l = items_of(R, v, "list");
        tval o = tv_list(C);
        for (size_t i = 0; i < l->n; i++) tv_l_push(C, o.u.l, l->v[i]);
        return *out = o, 1;
    }
    if (!strcmp(f, "items")) {
        if (v.t == V_UNDEF) return *out = tv_list(C), 1;
        if (v.t != V_DICT) tmpl_fail(C, "line %d: items of a %s", line, tv_type_name(v));
        targs none = {0};
        return *out = method(R, v, "items", &none, line), 1;
    }
    if (!strcmp(f, "dictsort")) {
        if (v.t != V_DICT) tmpl_fail(C, "line %d: dictsort of a %s", line, tv_type_name(v));
        tval *keys = tmpl_alloc(C, sizeof *keys * (v.u.d->n + 1));
        for (size_t i = 0; i < v.u.d->n; i++) keys[i] = v.u.d->k[i];
        qsort(keys, v.u.d->n, sizeof *keys, sort_cmp_ci);
        tval o = tv_list(C);
        for (size_t i = 0; i < v.u.d->n; i++) {
            tval p = tv_list(C);
            tv_l_push(C, p.u.l, keys[i]);
            tv_l_push(C, p.u.l, *tv_d_find(v.u.d, keys[i]));
            tv_l_push(C, o.u.l, p);
        }
        return *out = o, 1;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        vlist *l = items_of(R, v, f);
        return *out = l->n ? l->v[f[0] == 'f' ? 0 : l->n - 1] : TV_UNDEF_V, 1;
    }
    if (!strcmp(f, "reverse")) {
        vlist *l = items_of(R, v, "reverse");
        tval o = tv_list(C);
        for (size_t i = l->n; i > 0; i--) tv_l_push(C, o.u.l, l->v[i - 1]);
        if (v.t == V_STR) {
            tbuf b = {0};
            for (size_t i = 0; i < o.u.l->n; i++) tv_str_of(C, &b, o.u.l->v[i]);
            return *out = b.p ? tv_b_val(&b) : tv_cstr(""), 1;
        }
        return *out = o, 1;
    }
    if (!strcmp(f, "unique")) {
        vlist *l = items_of(R, v, "unique");
        tval o = tv_list(C);
        for (size_t i = 0; i < l->n; i++)
            if (!contains(R, o, l->v[i])) tv_l_push(C, o.u.l, l->v[i]);
        return *out = o, 1;
    }
    if (!strcmp(f, "map")) {
        vlist *l = items_of(R, v, "map");
        const tval at = arg(a, -1, "attribute", TV_NONE_V);
        tval o = tv_list(C);
        for (size_t i = 0; i < l->n; i++) {
            if (at.t == V_STR) { tv_l_push(C, o.u.l, attr_of(R, l->v[i], at)); continue; }
            const tval fn = arg(a, 0, NULL, TV_NONE_V);
            if (fn.t != V_STR) tmpl_fail(C, "line %d: map needs a filter name or attribute=", line);
            targs rest = *a;
            rest.np = a->np - 1;
            for (int k = 0; k < rest.np; k++) rest.pos[k] = a->pos[k + 1];
            tv_l_push(C, o.u.l, filter(R, S(fn), l->v[i], &rest, line));
        }
        return *out = o, 1;
    }
    if (!strcmp(f, "selectattr")) return *out = select_items(R, v, a, 1, 1, line), 1;
    if (!strcmp(f, "rejectattr")) return *out = select_items(R, v, a, 1, 0, line), 1;
    if (!strcmp(f, "select")) return *out = select_items(R, v, a, 0, 1, line), 1;
    if (!strcmp(f, "reject")) return *out = select_items(R, v, a, 0, 0, line), 1;
    if (!strcmp(f, "int")) {
        if (v.t == V_STR) return *out = tv_int(strtoll(tmpl_strndup(C, v.u.s.p, v.u.s.n), NULL, 10)), 1;
        return *out = tv_is_num(v) ? tv_int((int64_t)tv_num(v)) : arg(a, 0, "default", tv_int(0)), 1;
    }
    if (!strcmp(f, "float")) {
        if (v.t == V_STR) return *out = tv_float(strtod(tmpl_strndup(C, v.u.s.p, v.u.s.n), NULL)), 1;
        return *out = tv_is_num(v) ? tv_float(tv_num(v)) : arg(a, 0, "default", tv_float(0)), 1;
    }
    if (!strcmp(f, "abs")) return *out = v.t == V_INT ? tv_int(v.u.i < 0 ? -v.u.i : v.u.i) : tv_float(fabs(tv_num(v))), 1;
    if (!strcmp(f, "indent")) {
        const int64_t w = as_int(R, arg(a, 0, "width", tv_int(4)), "indent");
        const int first = tv_truthy(arg(a, 1, "first", tv_bool(0)));
        const tval s = tv_to_str(C, v);
        tbuf o = {0};
        for (size_t i = 0; i < s.u.s.n; i++) {
            if ((i == 0 && first) || (i > 0 && s.u.s.p[i - 1] == '\n' && s.u.s.p[i] != '\n'))
                for (int64_t k = 0; k < w; k++) tv_b_add(C, &o, " ", 1);
            tv_b_add(C, &o, s.u.s.p + i, 1);
        }
        return *out = o.p ? tv_b_val(&o) : tv_cstr(""), 1;
    }
    return 0;
}

static tval filter(rs *R, const char *f, tval v, const targs *a, int line) {
    tval out;
    if (filter_value(R, f, v, a, line, &out) || filter_seq(R, f, v, a, line, &out)) return out;
    tmpl_fail(C, "line %d: the filter '%s' is not supported", line, f);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static int test(rs *R, const char *name, tval v, const targs *a, int line) {
    if (!strcmp(name, "defined")) return v.t != V_UNDEF;
    if (!strcmp(name, "undefined")) return v.t == V_UNDEF;
    if (!strcmp(name, "none")) return v.t == V_NONE;
    if (!strcmp(name, "string")) return v.t == V_STR;
    if (!strcmp(name, "mapping")) return v.t == V_DICT;
    if (!strcmp(name, "sequence")) return v.t == V_LIST || v.t == V_STR || v.t == V_DICT;
    if (!strcmp(name, "iterable")) return v.t == V_LIST || v.t == V_STR || v.t == V_DICT;
    if (!strcmp(name, "number")) return v.t == V_INT || v.t == V_FLOAT;
    if (!strcmp(name, "integer")) return v.t == V_INT;
    if (!strcmp(name, "float")) return v.t == V_FLOAT;
    if (!strcmp(name, "boolean")) return v.t == V_BOOL;
    if (!strcmp(name, "true")) return v.t == V_BOOL && v.u.i;
    if (!strcmp(name, "false")) return v.t == V_BOOL && !v.u.i;
    if (!strcmp(name, "callable")) return v.t == V_MACRO || v.t == V_FUNC;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "sameas"))
        return tv_eq(v, arg(a, 0, NULL, TV_NONE_V));
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !tv_eq(v, arg(a, 0, NULL, TV_NONE_V));
    if (!strcmp(name, "in")) return contains(R, arg(a, 0, NULL, TV_NONE_V), v);
    if (!strcmp(name, "odd") || !strcmp(name, "even")) return (as_int(R, v, name) % 2 != 0) == (name[0] == 'o');
    if (!strcmp(name, "divisibleby")) {
        const int64_t d = as_int(R, arg(a, 0, NULL, TV_NONE_V), name);
        return d != 0 && as_int(R, v, name) % d == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v.t != V_STR) return 0;
        for (size_t i = 0; i < v.u.s.n; i++)
            if ((name[0] == 'l' && v.u.s.p[i] >= 'A' && v.u.s.p[i] <= 'Z') ||
                (name[0] == 'u' && v.u.s.p[i] >= 'a' && v.u.s.p[i] <= 'z'))
                return 0;
        return 1;
    }
    tmpl_fail(C, "line %d: the test '%s' is not supported", line, name);
}

/* ---- calls ---------------------------------------------------------------------------------- */

static tval call_macro(rs *R, const tmpl_node *m, const targs *a, int line) {
    if (++R->depth > 64) tmpl_fail(C, "line %d: macros nested past 64 calls", line);
    frame *F = f_new(C, R->globals);
    if (a->np > m->nnames) tmpl_fail(C, "line %d: macro %s takes %d arguments, %d given", line, m->s, m->nnames, a->np);
    for (int i = 0; i < m->nnames; i++) {
        tval v = TV_UNDEF_V;
        int given = 0;
        if (i < a->np) { v = a->pos[i]; given = 1; }
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kw[k], m->names[i])) { v = a->kv[k]; given = 1; }
        if (!given && m->kids[i]) v = eval(R, F, m->kids[i]);
        f_set(C, F, m->names[i], v);
    }
    for (int k = 0; k < a->nkw; k++) {
        int known = 0;
        for (int i = 0; i < m->nnames; i++) known |= !strcmp(a->kw[k], m->names[i]);
        if (!known) tmpl_fail(C, "line %d: macro %s has no argument '%s'", line, m->s, a->kw[k]);
    }
    tbuf out = {0}, *saved = R->out;
    R->out = &out;
    render(R, F, m->b);
    R->out = saved;
    R->depth--;
    return out.p ? tv_b_val(&out) : tv_cstr("");
}

static tval call_builtin(rs *R, int fn, const targs *a, int line) {
    switch (fn) {
    case FN_RANGE: {
        int64_t lo = 0, hi, st = 1;
        if (a->np == 1) hi = as_int(R, a->pos[0], "range");
        else if (a->np >= 2) {
            lo = as_int(R, a->pos[0], "range");
            hi = as_int(R, a->pos[1], "range");
            if (a->np >= 3) st = as_int(R, a->pos[2], "range");
        } else tmpl_fail(C, "line %d: range needs arguments", line);
        if (st == 0) tmpl_fail(C, "line %d: range step 0", line);
        tval l = tv_list(C);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) tv_l_push(C, l.u.l, tv_int(i));
        return l;
    }
    case FN_NAMESPACE: case FN_DICT: {
        tval d = tv_dict(C);
        d.u.d->ns = fn == FN_NAMESPACE;
        if (a->np == 1 && a->pos[0].t == V_DICT) /* namespace(other) */
            for (size_t i = 0; i < a->pos[0].u.d->n; i++) tv_d_set(C, d.u.d, a->pos[0].u.d->k[i], a->pos[0].u.d->v[i]);
        for (int k = 0; k < a->nkw; k++) tv_d_set(C, d.u.d, tv_cstr(a->kw[k]), a->kv[k]);
        return d;
    }
    case FN_RAISE: {
        tbuf b = {0};
        tv_str_of(C, &b, arg(a, 0, NULL, tv_cstr("")));
        tmpl_fail(C, "the template raised an exception: %s", b.p ? b.p : "");
    }
    default: { /* strftime_now */
        const tval f = arg(a, 0, NULL, tv_cstr("%Y-%m-%d"));
        char out[128];
        const time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        const size_t n = strftime(out, sizeof out, S(f), &tm);
        return tv_str(tmpl_strndup(C, out, n), n);
    }
    }
}

static tval call(rs *R, frame *F, const tmpl_node *n) {
    targs a;
    if (n->a->k == TN_ATTR) { /* a method of its object, or a macro in a namespace */
        const tval obj = eval(R, F, n->a->a);
        const tval m = obj.t == V_DICT ? tv_d_get(obj.u.d, n->a->s) : TV_UNDEF_V;
        eval_args(R, F, n, &a);
        if (m.t == V_MACRO) return call_macro(R, m.u.m, &a, n->line);
        if (obj.t == V_UNDEF) tmpl_fail(C, "line %d: '%s' called on an undefined value", n->line, n->a->s);
        return method(R, obj, n->a->s, &a, n->line);
    }
    const tval f = eval(R, F, n->a);
    eval_args(R, F, n, &a);
    if (f.t == V_MACRO) return call_macro(R, f.u.m, &a, n->line);
    if (f.t == V_FUNC) return call_builtin(R, f.u.fn, &a, n->line);
    if (n->a->k == TN_NAME) tmpl_fail(C, "line %d: '%s' is not a macro or a function this renderer has", n->line, n->a->s);
    tmpl_fail(C, "line %d: calling a %s", n->line, tv_type_name(f));
}

/* ---- expressions ---------------------------------------------------------------------------- */

static tval name(frame *F, const tmpl_node *n) {
    tval *p = f_find(F, n->s);
    if (p) return *p;
    static const char *const fns[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};
    for (int k = 0; fns[k]; k++)
        if (!strcmp(n->s, fns[k])) { tval v = {V_FUNC, 0, {0}}; v.u.fn = k; return v; }
    return TV_UNDEF_V;
}

static tval eval(rs *R, frame *F, const tmpl_node *n) {
    switch (n->k) {
    case TN_STR: return tv_str(n->s, n->n);
    case TN_INT: return tv_int(n->i);
    case TN_FLOAT: return tv_float(n->f);
    case TN_BOOL: return tv_bool((int)n->i);
    case TN_NONE: return TV_NONE_V;
    case TN_NAME: return name(F, n);
    case TN_ATTR: {
        const tval o = eval(R, F, n->a);
        return o.t == V_DICT ? tv_d_get(o.u.d, n->s) : TV_UNDEF_V;
    }
    case TN_ITEM: {
        const tval o = eval(R, F, n->a);
        return item(R, o, eval(R, F, n->b));
    }
    case TN_SLICE: return slice(R, F, n);
    case TN_CALL: return call(R, F, n);
    case TN_FILTER: {
        const tval v = eval(R, F, n->a);
        targs a;
        eval_args(R, F, n, &a);
        return filter(R, n->s, v, &a, n->line);
    }
    case TN_TEST: {
        const tval v = eval(R, F, n->a);
        targs a;
        eval_args(R, F, n, &a);
        return tv_bool(test(R, n->s, v, &a, n->line) != (int)n->i);
    }
    case TN_BIN: return binop(R, F, n);
    case TN_NOT: return tv_bool(!tv_truthy(eval(R, F, n->a)));
    case TN_NEG: {
        const tval v = eval(R, F, n->a);
        if (v.t == V_INT || v.t == V_BOOL) return tv_int(-v.u.i);
        if (v.t == V_FLOAT) return tv_float(-v.u.f);
        tmpl_fail(C, "line %d: negating a %s", n->line, tv_type_name(v));
    }
    case TN_COND: return tv_truthy(eval(R, F, n->b)) ? eval(R, F, n->a) : n->c ? eval(R, F, n->c) : TV_UNDEF_V;
    case TN_LIST: {
        tval l = tv_list(C);
        for (int i = 0; i < n->nk; i++) tv_l_push(C, l.u.l, eval(R, F, n->kids[i]));
        return l;
    }
    case TN_DICT: {
        tval d = tv_dict(C);
        for (int i = 0; i < n->nk; i++) tv_d_set(C, d.u.d, eval(R, F, n->kids[i]), eval(R, F, n->kids[n->nk + i]));
        return d;
    }
    default: tmpl_fail(C, "line %d: not an expression", n->line);
    }
}

/* ---- statements ----------------------------------------------------------------------------- */

static void assign(rs *R, frame *F, const tmpl_node *n, tval v) {
    if (n->nnames == 1) { f_set(C, F, n->names[0], v); return; }
    if (v.t != V_LIST || (int)v.u.l->n != n->nnames)
        tmpl_fail(C, "line %d: cannot unpack a %s into %d names", n->line, tv_type_name(v), n->nnames);
    for (int i = 0; i < n->nnames; i++) f_set(C, F, n->names[i], v.u.l->v[i]);
}

static void loop_vars(rs *R, frame *I, vlist *l, size_t i) {
    tval lp = tv_dict(C);
    vdict *d = lp.u.d;
    const int64_t n = (int64_t)l->n;
    tv_d_set(C, d, tv_cstr("index"), tv_int((int64_t)i + 1));
    tv_d_set(C, d, tv_cstr("index0"), tv_int((int64_t)i));
    tv_d_set(C, d, tv_cstr("revindex"), tv_int(n - (int64_t)i));
    tv_d_set(C, d, tv_cstr("revindex0"), tv_int(n - (int64_t)i - 1));
    tv_d_set(C, d, tv_cstr("first"), tv_bool(i == 0));
    tv_d_set(C, d, tv_cstr("last"), tv_bool((int64_t)i == n - 1));
    tv_d_set(C, d, tv_cstr("length"), tv_int(n));
    tv_d_set(C, d, tv_cstr("previtem"), i > 0 ? l->v[i - 1] : TV_UNDEF_V);
    tv_d_set(C, d, tv_cstr("nextitem"), (int64_t)i + 1 < n ? l->v[i + 1] : TV_UNDEF_V);
    f_set(C, I, "loop", lp);
}

static void stmt_for(rs *R, frame *F, const tmpl_node *n) {
    vlist *all = items_of(R, eval(R, F, n->a), "for");
    vlist *l = all;
    if (n->d) { /* for x in y if cond: the loop sees only the items that pass */
        tval kept = tv_list(C);
        for (size_t i = 0; i < all->n; i++) {
            frame *I = f_new(C, F);
            assign(R, I, n, all->v[i]);
            if (tv_truthy(eval(R, I, n->d))) tv_l_push(C, kept.u.l, all->v[i]);
        }
        l = kept.u.l;
    }
    for (size_t i = 0; i < l->n; i++) {
        frame *I = f_new(C, F); /* each iteration's own assignments */
        assign(R, I, n, l->v[i]);
        loop_vars(R, I, l, i);
        render(R, I, n->b);
        R->cont = 0;
        if (R->brk) { R->brk = 0; break; }
    }
    if (l->n == 0 && n->c) render(R, F, n->c);
}

static void render(rs *R, frame *F, const tmpl_node *n) {
    switch (n->k) {
    case TN_BODY:
        for (int i = 0; i < n->nk && !R->brk && !R->cont; i++) render(R, F, n->kids[i]);
        return;
    case TN_TEXT: tv_b_add(C, R->out, n->s, n->n); return;
    case TN_OUT: tv_str_of(C, R->out, eval(R, F, n->a)); return;
    case TN_IF:
        if (tv_truthy(eval(R, F, n->a))) render(R, F, n->b);
        else if (n->c) render(R, F, n->c);
        return;
    case TN_FOR: stmt_for(R, F, n); return;
    case TN_SET:
        if (n->a) { /* ns.attr = value */
            const tval ns = eval(R, F, n->a);
            if (ns.t != V_DICT || !ns.u.d->ns) tmpl_fail(C, "line %d: set %s.%s: not a namespace", n->line, n->a->s, n->names[0]);
            tv_d_set(C, ns.u.d, tv_cstr(n->names[0]), eval(R, F, n->b));
        } else {
            assign(R, F, n, eval(R, F, n->b));
        }
        return;
    case TN_SET_BLOCK: {
        tbuf out = {0}, *saved = R->out;
        R->out = &out;
        render(R, F, n->b);
        R->out = saved;
        f_set(C, F, n->names[0], out.p ? tv_b_val(&out) : tv_cstr(""));
        return;
    }
    case TN_MACRO: {
        tval m = {V_MACRO, 0, {0}};
        m.u.m = n;
        f_set(C, F, n->s, m);
        return;
    }
    case TN_BREAK: R->brk = 1; return;
    case TN_CONTINUE: R->cont = 1; return;
    case TN_FILTER_BLOCK: {
        tbuf out = {0}, *saved = R->out;
        R->out = &out;
        render(R, F, n->b);
        R->out = saved;
        targs none = {0};
        tv_str_of(C, R->out, filter(R, n->s, out.p ? tv_b_val(&out) : tv_cstr(""), &none, n->line));
        return;
    }
    default: tmpl_fail(C, "line %d: not a statement", n->line);
    }
}

int tmpl_render(const char *src, size_t len, const char *context_json, char **out, char *err, size_t errsz) {
    tmpl_ctx c;
    memset(&c, 0, sizeof c);
    c.err = err;
    c.errsz = errsz;
    *out = NULL;
    yyjson_doc *volatile doc = NULL; /* (set after setjmp, read after a longjmp) */
    volatile int rc = -1;
    if (setjmp(c.fail) == 0) {
        tmpl_node *root = tmpl_parse(&c, src, len);
        doc = yyjson_read(context_json, strlen(context_json), 0);
        if (!doc || !yyjson_is_obj(yyjson_doc_get_root(doc))) tmpl_fail(&c, "the context is not a JSON object");
        rs R = {&c, NULL, NULL, 0, 0, 0};
        R.globals = f_new(&c, NULL);
        const tval ctx = tv_from_json(&c, yyjson_doc_get_root(doc));
        for (size_t i = 0; i < ctx.u.d->n; i++)
            f_set(&c, R.globals, tmpl_strndup(&c, ctx.u.d->k[i].u.s.p, ctx.u.d->k[i].u.s.n), ctx.u.d->v[i]);
        tbuf o = {0};
        R.out = &o;
        render(&R, R.globals, root);
        *out = malloc(o.n + 1);
        if (*out) {
            memcpy(*out, o.p ? o.p : "", o.n);
            (*out)[o.n] = '\0';
            rc = 0;
        } else {
            snprintf(err, errsz, "out of memory");
        }
    }
    yyjson_doc_free(doc);
    while (c.arena) {
        tmpl_block *b = c.arena;
        c.arena = b->next;
        free(b);
    }
    return rc;
}
