/* template_value.c - the chat template renderer's values (template_impl.h): Python-like undefined,
 * none, bool, int, float, str, list, dict (with namespaces); equality and truth as Python has them;
 * the arena's text buffers; str(), repr() and json.dumps (transformers' tojson) written as Python
 * writes them. */
#include "template_impl.h"

#include "yyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const tval TV_UNDEF_V = {V_UNDEF, 0, {0}};
const tval TV_NONE_V = {V_NONE, 0, {0}};

/* ---- values --------------------------------------------------------------------------------- */

tval tv_bool(int b) { tval v = {V_BOOL, 0, {0}}; v.u.i = b != 0; return v; }
tval tv_int(int64_t i) { tval v = {V_INT, 0, {0}}; v.u.i = i; return v; }
tval tv_float(double f) { tval v = {V_FLOAT, 0, {0}}; v.u.f = f; return v; }
tval tv_str(const char *p, size_t n) { tval v = {V_STR, 0, {0}}; v.u.s.p = p; v.u.s.n = n; return v; }
tval tv_cstr(const char *p) { return tv_str(p, strlen(p)); }

tval tv_list(tmpl_ctx *c) {
    tval v = {V_LIST, 0, {0}};
    v.u.l = tmpl_alloc(c, sizeof *v.u.l);
    return v;
}

tval tv_dict(tmpl_ctx *c) {
    tval v = {V_DICT, 0, {0}};
    v.u.d = tmpl_alloc(c, sizeof *v.u.d);
    return v;
}

void tv_l_push(tmpl_ctx *c, vlist *l, tval x) {
    if (l->n == l->cap) {
        const size_t cap = l->cap ? l->cap * 2 : 8;
        tval *v = tmpl_alloc(c, sizeof *v * cap);
        if (l->n) memcpy(v, l->v, sizeof *v * l->n);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}


tval *tv_d_find(vdict *d, tval k) {
    for (size_t i = 0; i < d->n; i++)
        if (tv_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}

void tv_d_set(tmpl_ctx *c, vdict *d, tval k, tval x) {
    tval *p = tv_d_find(d, k);
    if (p) { *p = x; return; }
    if (d->n == d->cap) {
        const size_t cap = d->cap ? d->cap * 2 : 8;
        tval *nk = tmpl_alloc(c, sizeof *nk * cap), *nv = tmpl_alloc(c, sizeof *nv * cap);
        if (d->n) { memcpy(nk, d->k, sizeof *nk * d->n); memcpy(nv, d->v, sizeof *nv * d->n); }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = x;
}

tval tv_d_get(vdict *d, const char *key) {
    tval *p = tv_d_find(d, tv_cstr(key));
    return p ? *p : TV_UNDEF_V;
}

tval tv_from_json(tmpl_ctx *c, yyjson_val *j) {
    switch (yyjson_get_type(j)) {
    case YYJSON_TYPE_NULL: return TV_NONE_V;
    case YYJSON_TYPE_BOOL: return tv_bool(yyjson_get_bool(j));
    case YYJSON_TYPE_NUM:
        if (yyjson_is_real(j)) return tv_float(yyjson_get_real(j));
        return tv_int(yyjson_is_uint(j) ? (int64_t)yyjson_get_uint(j) : yyjson_get_sint(j));
    case YYJSON_TYPE_STR: return tv_str(tmpl_strndup(c, yyjson_get_str(j), yyjson_get_len(j)), yyjson_get_len(j));
    case YYJSON_TYPE_ARR: {
        tval l = tv_list(c);
        size_t i, max;
        yyjson_val *x;
        yyjson_arr_foreach(j, i, max, x) tv_l_push(c, l.u.l, tv_from_json(c, x));
        return l;
    }
    case YYJSON_TYPE_OBJ: {
        tval d = tv_dict(c);
        size_t i, max;
        yyjson_val *k, *x;
        yyjson_obj_foreach(j, i, max, k, x) tv_d_set(c, d.u.d, tv_from_json(c, k), tv_from_json(c, x));
        return d;
    }
    default: return TV_NONE_V;
    }
}

int tv_truthy(tval v) {
    switch (v.t) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0.0;
    case V_STR: return v.u.s.n != 0;
    case V_LIST: return v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

int tv_is_num(tval v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
double tv_num(tval v) { return v.t == V_FLOAT ? v.u.f : (double)v.u.i; }

int tv_eq(tval a, tval b) {
    if (tv_is_num(a) && tv_is_num(b)) return tv_num(a) == tv_num(b);
    if (a.t != b.t) return (a.t == V_UNDEF && b.t == V_UNDEF);
    switch (a.t) {
    case V_NONE: case V_UNDEF: return 1;
    case V_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case V_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tv_eq(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case V_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tval *o = tv_d_find(b.u.d, a.u.d->k[i]);
            if (!o || !tv_eq(*o, a.u.d->v[i])) return 0;
        }
        return 1;
    default: return a.u.m == b.u.m;
    }
}

const char *tv_type_name(tval v) {
    static const char *const n[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                    "macro", "function"};
    return n[v.t];
}

/* ---- text: buffers, UTF-8, str / repr / json.dumps ------------------------------------------- */

void tv_b_add(tmpl_ctx *c, tbuf *b, const char *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = tmpl_alloc(c, cap);
        if (b->n) memcpy(q, b->p, b->n);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void tv_b_cstr(tmpl_ctx *c, tbuf *b, const char *s) { tv_b_add(c, b, s, strlen(s)); }

tval tv_b_val(tbuf *b) { return tv_str(b->p ? b->p : "", b->n); }

/* Code points of UTF-8 text, and the byte offset of code point i. */
size_t tv_u8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t tv_u8_off(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    while (i < n && cp > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        cp--;
    }
    return i;
}

/* Python's repr of a float: the shortest digits that read back, in its own notation. */
void tv_float_repr(double f, char *out, size_t size) {
    if (isnan(f)) { snprintf(out, size, "nan"); return; }
    if (isinf(f)) { snprintf(out, size, f > 0 ? "inf" : "-inf"); return; }
    char e[40];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e: [-]d.ddde[+-]XX: digits and exponent */
    char digits[24];
    int nd = 0;
    const char *q = e;
    const int neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    const int ex = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char *o = out;
    size_t left = size;
/* Appends printf output to out[] (o, left: where, room), dropping what does not fit. */
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ > 0 && (size_t)w_ < left) { o += w_; left -= (size_t)w_; } } while (0)
    if (neg) PUT("-");
    if (ex < -4 || ex >= 16) { /* scientific, as Python: 1e+16, 1.5e-05 */
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    } else if (ex < 0) {
        PUT("0.");
        for (int i = 0; i < -ex - 1; i++) PUT("0");
        PUT("%s", digits);
    } else {
        for (int i = 0; i <= ex; i++) PUT("%c", i < nd ? digits[i] : '0');
        PUT(".");
        if (nd > ex + 1) PUT("%s", digits + ex + 1);
        else PUT("0");
    }
#undef PUT
}


void tv_repr_str(tmpl_ctx *c, tbuf *b, const char *p, size_t n) {
    int has_s = memchr(p, '\'', n) != NULL, has_d = memchr(p, '"', n) != NULL;
    const char q = has_s && !has_d ? '"' : '\'';
    tv_b_add(c, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)p[i];
        char e[8];
        if (ch == '\\') tv_b_cstr(c, b, "\\\\");
        else if (ch == (unsigned char)q) { e[0] = '\\'; e[1] = q; tv_b_add(c, b, e, 2); }
        else if (ch == '\n') tv_b_cstr(c, b, "\\n");
        else if (ch == '\r') tv_b_cstr(c, b, "\\r");
        else if (ch == '\t') tv_b_cstr(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) { snprintf(e, sizeof e, "\\x%02x", ch); tv_b_cstr(c, b, e); }
        else tv_b_add(c, b, (const char *)&ch, 1);
    }
    tv_b_add(c, b, &q, 1);
}

void tv_repr_of(tmpl_ctx *c, tbuf *b, tval v) {
    if (v.t == V_STR) { tv_repr_str(c, b, v.u.s.p, v.u.s.n); return; }
    if (v.t == V_LIST) {
        tv_b_cstr(c, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) tv_b_cstr(c, b, ", ");
            tv_repr_of(c, b, v.u.l->v[i]);
        }
        tv_b_cstr(c, b, "]");
        return;
    }
    if (v.t == V_DICT) {
        if (v.u.d->ns) { tv_b_cstr(c, b, "<Namespace>"); return; }
        tv_b_cstr(c, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) tv_b_cstr(c, b, ", ");
            tv_repr_of(c, b, v.u.d->k[i]);
            tv_b_cstr(c, b, ": ");
            tv_repr_of(c, b, v.u.d->v[i]);
        }
        tv_b_cstr(c, b, "}");
        return;
    }
    tv_str_of(c, b, v);
}

void tv_str_of(tmpl_ctx *c, tbuf *b, tval v) {
    char t[48];
    switch (v.t) {
    case V_UNDEF: return;
    case V_NONE: tv_b_cstr(c, b, "None"); return;
    case V_BOOL: tv_b_cstr(c, b, v.u.i ? "True" : "False"); return;
    case V_INT: snprintf(t, sizeof t, "%lld", (long long)v.u.i); tv_b_cstr(c, b, t); return;
    case V_FLOAT: tv_float_repr(v.u.f, t, sizeof t); tv_b_cstr(c, b, t); return;
    case V_STR: tv_b_add(c, b, v.u.s.p, v.u.s.n); return;
    case V_LIST: case V_DICT: tv_repr_of(c, b, v); return;
    default: tmpl_fail(c, "cannot print a %s", tv_type_name(v));
    }
}

tval tv_to_str(tmpl_ctx *c, tval v) {
    if (v.t == V_STR) return v;
    tbuf b = {0};
    tv_str_of(c, &b, v);
    return tv_b_val(&b);
}

/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson. */


void tv_json_of(tmpl_ctx *c, tbuf *b, tval v, const tv_json_opts *o, int level) {
    char t[48];
    switch (v.t) {
    case V_NONE: case V_UNDEF: tv_b_cstr(c, b, "null"); return;
    case V_BOOL: tv_b_cstr(c, b, v.u.i ? "true" : "false"); return;
    case V_INT: snprintf(t, sizeof t, "%lld", (long long)v.u.i); tv_b_cstr(c, b, t); return;
    case V_FLOAT:
        if (isnan(v.u.f) || isinf(v.u.f)) tv_b_cstr(c, b, isnan(v.u.f) ? "NaN" : v.u.f > 0 ? "Infinity" : "-Infinity");
        else { tv_float_repr(v.u.f, t, sizeof t); tv_b_cstr(c, b, t); }
        return;
    case V_STR:
        tv_b_cstr(c, b, "\"");
        for (size_t i = 0; i < v.u.s.n; i++) {
            const unsigned char ch = (unsigned char)v.u.s.p[i];
            if (ch == '"') tv_b_cstr(c, b, "\\\"");
            else if (ch == '\\') tv_b_cstr(c, b, "\\\\");
            else if (ch == '\n') tv_b_cstr(c, b, "\\n");
            else if (ch == '\r') tv_b_cstr(c, b, "\\r");
            else if (ch == '\t') tv_b_cstr(c, b, "\\t");
            else if (ch == '\b') tv_b_cstr(c, b, "\\b");
            else if (ch == '\f') tv_b_cstr(c, b, "\\f");
            else if (ch < 0x20) { snprintf(t, sizeof t, "\\u%04x", ch); tv_b_cstr(c, b, t); }
            else tv_b_add(c, b, (const char *)&ch, 1);
        }
        tv_b_cstr(c, b, "\"");
        return;
    case V_LIST: case V_DICT: {
        const int dict = v.t == V_DICT;
        const size_t n = dict ? v.u.d->n : v.u.l->n;
        tv_b_cstr(c, b, dict ? "{" : "[");
        if (n == 0) { tv_b_cstr(c, b, dict ? "}" : "]"); return; }
        size_t *ord = tmpl_alloc(c, sizeof *ord * n);
        for (size_t i = 0; i < n; i++) ord[i] = i;
        if (dict && o->sort) { /* by key (strings) */
            struct { tval k; size_t i; } *kv = tmpl_alloc(c, sizeof *kv * n);
            for (size_t i = 0; i < n; i++) { kv[i].k = v.u.d->k[i]; kv[i].i = i; }
            qsort(kv, n, sizeof *kv, tv_key_cmp);
            for (size_t i = 0; i < n; i++) ord[i] = kv[i].i;
        }
        for (size_t j = 0; j < n; j++) {
            const size_t i = ord[j];
            if (j) tv_b_cstr(c, b, o->item_sep);
            if (o->indent >= 0) {
                tv_b_cstr(c, b, "\n");
                for (int s = 0; s < o->indent * (level + 1); s++) tv_b_cstr(c, b, " ");
            }
            if (dict) {
                tval k = v.u.d->k[i];
                if (k.t != V_STR) k = tv_to_str(c, k);
                tv_json_of(c, b, k, o, level + 1);
                tv_b_cstr(c, b, o->key_sep);
                tv_json_of(c, b, v.u.d->v[i], o, level + 1);
            } else {
                tv_json_of(c, b, v.u.l->v[i], o, level + 1);
            }
        }
        if (o->indent >= 0) {
            tv_b_cstr(c, b, "\n");
            for (int s = 0; s < o->indent * level; s++) tv_b_cstr(c, b, " ");
        }
        tv_b_cstr(c, b, dict ? "}" : "]");
        return;
    }
    default: tmpl_fail(c, "tojson: a %s is not JSON", tv_type_name(v));
    }
}

int tv_key_cmp(const void *a, const void *b) {
    const tval *x = a, *y = b;
    if (x->t != V_STR || y->t != V_STR) return 0;
    const size_t n = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
    const int r = memcmp(x->u.s.p, y->u.s.p, n);
    return r ? r : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
}

