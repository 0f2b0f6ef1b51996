/* pretok.c - the pre-tokenizers of byte-level BPE: which tokenizer.ggml.pre names exist, the
 * regex list llama.cpp (src/llama-vocab.cpp) applies for each, and how they cut text.
 *
 * Matching is a small backtracking regex engine over code points written for exactly the
 * constructs these patterns use (no regex library). A pattern compiles to nodes linked in
 * chains: SET (one code point from a class), ALT (alternatives, also every group), REP (a
 * quantified atom), NLA/PLA (lookahead) and EOS ($). Matching walks a chain; when a chain ends it
 * pops a continuation frame (the rest of the enclosing chain, or another iteration of a repeat),
 * so alternatives and repeats backtrack in priority order: the first match found is the one
 * PCRE/Python `regex`/std::regex report (leftmost alternative first, greedy quantifiers). A
 * quantified single class, the common case, is counted in a loop and backtracks by count, so a
 * 100 KB run of letters costs no recursion depth.
 *
 * llama.cpp runs two of these pattern lists through hand-written matchers (gpt2, llama3) and the
 * rest through std::regex over a "collapsed" text; all of them are meant to equal the pattern's
 * regex semantics, which is what this engine implements (with Unicode categories from the
 * generated table, so e.g. '~' is \p{S} here as in Unicode and Hugging Face's tokenizers). */
#include "pretok.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* =============================================================================================
 * Regex: compiled form
 * =========================================================================================== */

typedef enum { RX_SET, RX_ALT, RX_REP, RX_NLA, RX_PLA, RX_EOS } rx_kind;

typedef struct {
    uint32_t lo, hi;
} rx_range;

#define RX_MAX_NOT 4

typedef struct {
    int negate;
    unsigned any_flags;              /* matches if the code point has one of these flags */
    unsigned not_flags[RX_MAX_NOT];  /* matches if it lacks not_flags[i] (\S, \P{X}) */
    int n_not;
    int first_range, n_ranges;       /* into st_regex.ranges */
} rx_set;

typedef struct {
    rx_kind kind;
    int next;  /* next node of this chain, -1 at its end */
    int a;     /* SET: set index; ALT: first branch in st_regex.branches; REP, NLA, PLA: body */
    int b;     /* ALT: branch count; REP: min */
    int c;     /* REP: max (-1: unbounded) */
} rx_node;

struct st_regex {
    rx_node *nodes;
    int n_nodes, cap_nodes;
    rx_set *sets;
    int n_sets, cap_sets;
    rx_range *ranges;
    int n_ranges, cap_ranges;
    int *branches;                   /* chain heads of ALT nodes (-1: empty branch) */
    int n_branches, cap_branches;
    int root;                        /* chain head of the whole pattern */
};

/* =============================================================================================
 * Regex: parser
 * =========================================================================================== */

typedef struct {
    st_regex *re;
    const uint8_t *s;
    size_t n, i;
    const char *pattern;
    strata_status st;
    int depth;
} rx_parser;

#define RX_GROW(p, arr, n, cap)                                                           \
    do {                                                                                  \
        if ((p)->re->n == (p)->re->cap) {                                                 \
            int nc_ = (p)->re->cap ? (p)->re->cap * 2 : 16;                               \
            void *np_ = realloc((p)->re->arr, (size_t)nc_ * sizeof(*(p)->re->arr));       \
            if (!np_) return rx_fail_nomem(p);                                            \
            (p)->re->arr = np_;                                                           \
            (p)->re->cap = nc_;                                                           \
        }                                                                                 \
    } while (0)

static int rx_fail_nomem(rx_parser *p) {
    if (!p->st) p->st = st_error(STRATA_ERR_NOMEM, "regex: out of memory");
    return -1;
}

static int rx_fail(rx_parser *p, const char *what) {
    if (!p->st)
        p->st = st_error(STRATA_ERR_UNSUPPORTED, "regex '%s': %s at byte %zu", p->pattern, what,
                         p->i);
    return -1;
}

static int rx_new_node(rx_parser *p, rx_kind kind) {
    RX_GROW(p, nodes, n_nodes, cap_nodes);
    rx_node *nd = &p->re->nodes[p->re->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->next = -1;
    nd->c = -1;
    return p->re->n_nodes++;
}

static int rx_new_set(rx_parser *p) {
    RX_GROW(p, sets, n_sets, cap_sets);
    rx_set *s = &p->re->sets[p->re->n_sets];
    memset(s, 0, sizeof *s);
    s->first_range = p->re->n_ranges;
    return p->re->n_sets++;
}

static int rx_add_range(rx_parser *p, int set, uint32_t lo, uint32_t hi) {
    RX_GROW(p, ranges, n_ranges, cap_ranges);
    p->re->ranges[p->re->n_ranges].lo = lo;
    p->re->ranges[p->re->n_ranges].hi = hi;
    p->re->n_ranges++;
    p->re->sets[set].n_ranges++;
    return 0;
}

static int rx_eof(const rx_parser *p) { return p->i >= p->n; }

/* Next code point of the pattern (advances). */
static uint32_t rx_getc(rx_parser *p) {
    uint32_t cp;
    int bad;
    p->i += st_utf8_decode(p->s + p->i, p->n - p->i, &cp, &bad);
    return cp;
}

/* \p{X} / \P{X} after the 'p'/'P': the flag of X, or 0 on error. */
static unsigned rx_category(rx_parser *p) {
    if (rx_eof(p) || p->s[p->i] != '{') return (unsigned)rx_fail(p, "\\p without {...}"), 0u;
    size_t j = p->i + 1;
    while (j < p->n && p->s[j] != '}') j++;
    if (j >= p->n) return (unsigned)rx_fail(p, "unterminated \\p{"), 0u;
    size_t len = j - p->i - 1;
    char c = len == 1 ? (char)p->s[p->i + 1] : 0;
    unsigned f = 0;
    switch (c) {
        case 'L': f = ST_UF_L; break;
        case 'N': f = ST_UF_N; break;
        case 'P': f = ST_UF_P; break;
        case 'S': f = ST_UF_S; break;
        case 'M': f = ST_UF_M; break;
        case 'Z': f = ST_UF_Z; break;
        case 'C': f = ST_UF_C | ST_UF_U; break;
        default: return (unsigned)rx_fail(p, "unsupported Unicode property (only L N P S M Z C)"), 0u;
    }
    p->i = j + 1;
    return f;
}

/* A simple escaped character (after the backslash), or UINT32_MAX if c is not one. */
static uint32_t rx_escaped_literal(uint32_t c) {
    switch (c) {
        case 'r': return '\r';
        case 'n': return '\n';
        case 't': return '\t';
        case 'f': return '\f';
        case 'v': return '\v';
        default: break;
    }
    if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
        return c; /* escaped punctuation: itself */
    return UINT32_MAX;
}

/* Adds an escape (after the backslash) to set: \s \S \p \P or a literal. For classes, *lit
 * receives a literal (for ranges) or UINT32_MAX when the escape was a property. */
static int rx_set_escape(rx_parser *p, int set, uint32_t *lit) {
    if (rx_eof(p)) return rx_fail(p, "pattern ends with a backslash");
    uint32_t c = rx_getc(p);
    rx_set *s = &p->re->sets[set];
    *lit = UINT32_MAX;
    if (c == 's') { s->any_flags |= ST_UF_W; return 0; }
    if (c == 'S' || c == 'P') {
        unsigned f = ST_UF_W;
        if (c == 'P') { f = rx_category(p); if (!f) return -1; }
        if (s->n_not >= RX_MAX_NOT) return rx_fail(p, "too many negated escapes in a class");
        s->not_flags[s->n_not++] = f;
        return 0;
    }
    if (c == 'p') {
        unsigned f = rx_category(p);
        if (!f) return -1;
        p->re->sets[set].any_flags |= f;
        return 0;
    }
    uint32_t l = rx_escaped_literal(c);
    if (l == UINT32_MAX) return rx_fail(p, "unsupported escape");
    *lit = l;
    return 0;
}

/* [...] after the '['. */
static int rx_parse_class(rx_parser *p) {
    int set = rx_new_set(p);
    if (set < 0) return -1;
    if (!rx_eof(p) && p->s[p->i] == '^') { p->re->sets[set].negate = 1; p->i++; }
    for (;;) {
        if (rx_eof(p)) return rx_fail(p, "unterminated [");
        if (p->s[p->i] == ']') { p->i++; break; }
        uint32_t lo;
        if (p->s[p->i] == '\\') {
            p->i++;
            if (rx_set_escape(p, set, &lo)) return -1;
            if (lo == UINT32_MAX) continue; /* a property: no range */
        } else {
            lo = rx_getc(p);
        }
        uint32_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                if (rx_eof(p)) return rx_fail(p, "pattern ends with a backslash");
                hi = rx_escaped_literal(rx_getc(p));
                if (hi == UINT32_MAX) return rx_fail(p, "bad range end");
            } else {
                hi = rx_getc(p);
            }
            if (hi < lo) return rx_fail(p, "range out of order");
        }
        if (rx_add_range(p, set, lo, hi)) return -1;
    }
    int nd = rx_new_node(p, RX_SET);
    if (nd < 0) return -1;
    p->re->nodes[nd].a = set;
    return nd;
}

static int rx_parse_alt(rx_parser *p);

/* One atom (without its quantifier); returns its node. */
static int rx_parse_atom(rx_parser *p) {
    uint8_t c = p->s[p->i];
    if (c == '(') {
        p->i++;
        rx_kind kind = RX_ALT;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 >= p->n) return rx_fail(p, "unterminated group");
            uint8_t k = p->s[p->i + 1];
            if (k == ':') kind = RX_ALT;
            else if (k == '!') kind = RX_NLA;
            else if (k == '=') kind = RX_PLA;
            else return rx_fail(p, "unsupported group kind (only (?: (?! (?=)");
            p->i += 2;
        }
        if (++p->depth > 64) return rx_fail(p, "groups nested too deep");
        int body = rx_parse_alt(p);
        p->depth--;
        if (p->st) return -1;
        if (rx_eof(p) || p->s[p->i] != ')') return rx_fail(p, "missing )");
        p->i++;
        if (kind == RX_ALT) {
            /* rx_parse_alt always returns an ALT node (or a chain inside one) */
            return body;
        }
        int nd = rx_new_node(p, kind);
        if (nd < 0) return -1;
        p->re->nodes[nd].a = body;
        return nd;
    }
    if (c == '[') { p->i++; return rx_parse_class(p); }
    if (c == '$') { p->i++; return rx_new_node(p, RX_EOS); }
    if (c == '^') return rx_fail(p, "unsupported anchor ^");
    if (c == '*' || c == '+' || c == '?' || c == '{') return rx_fail(p, "quantifier without atom");
    int set = rx_new_set(p);
    if (set < 0) return -1;
    if (c == '.') {
        p->i++;
        p->re->sets[set].negate = 1;
        if (rx_add_range(p, set, '\n', '\n')) return -1;
    } else if (c == '\\') {
        p->i++;
        uint32_t lit;
        if (rx_set_escape(p, set, &lit)) return -1;
        if (lit != UINT32_MAX && rx_add_range(p, set, lit, lit)) return -1;
    } else {
        uint32_t cp = rx_getc(p);
        if (rx_add_range(p, set, cp, cp)) return -1;
    }
    int nd = rx_new_node(p, RX_SET);
    if (nd < 0) return -1;
    p->re->nodes[nd].a = set;
    return nd;
}

static int rx_parse_int(rx_parser *p, int *out) {
    if (rx_eof(p) || p->s[p->i] < '0' || p->s[p->i] > '9') return -1;
    long v = 0;
    while (!rx_eof(p) && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > 100000) return -1;
    }
    *out = (int)v;
    return 0;
}

/* A chain of quantified atoms up to '|' or ')' or the end; returns its head (-1 if empty). */
static int rx_parse_seq(rx_parser *p) {
    int head = -1, tail = -1;
    while (!rx_eof(p) && p->s[p->i] != '|' && p->s[p->i] != ')') {
        int atom = rx_parse_atom(p);
        if (p->st || atom < 0) return rx_fail(p, "bad atom");
        if (!rx_eof(p)) {
            uint8_t q = p->s[p->i];
            int mn = -1, mx = -1;
            if (q == '?') { mn = 0; mx = 1; p->i++; }
            else if (q == '*') { mn = 0; mx = -1; p->i++; }
            else if (q == '+') { mn = 1; mx = -1; p->i++; }
            else if (q == '{') {
                p->i++;
                if (rx_parse_int(p, &mn)) return rx_fail(p, "bad {n,m}");
                mx = mn;
                if (!rx_eof(p) && p->s[p->i] == ',') {
                    p->i++;
                    mx = -1;
                    if (!rx_eof(p) && p->s[p->i] != '}' && rx_parse_int(p, &mx))
                        return rx_fail(p, "bad {n,m}");
                }
                if (rx_eof(p) || p->s[p->i] != '}') return rx_fail(p, "bad {n,m}");
                p->i++;
                if (mx >= 0 && mx < mn) return rx_fail(p, "{n,m} with m < n");
            }
            if (mn >= 0) {
                if (!rx_eof(p) && (p->s[p->i] == '?' || p->s[p->i] == '+'))
                    return rx_fail(p, "lazy/possessive quantifiers are not supported");
                int r = rx_new_node(p, RX_REP);
                if (r < 0) return -1;
                p->re->nodes[r].a = atom;
                p->re->nodes[r].b = mn;
                p->re->nodes[r].c = mx;
                atom = r;
            }
        }
        if (tail >= 0) p->re->nodes[tail].next = atom;
        else head = atom;
        tail = atom;
    }
    return head;
}

/* seq ('|' seq)*: always an ALT node (one branch per alternative). */
static int rx_parse_alt(rx_parser *p) {
    int heads[256];
    int n = 0;
    for (;;) {
        int h = rx_parse_seq(p);
        if (p->st) return -1;
        if (n == (int)ST_ARRAY_LEN(heads)) return rx_fail(p, "too many alternatives");
        heads[n++] = h;
        if (!rx_eof(p) && p->s[p->i] == '|') { p->i++; continue; }
        break;
    }
    int nd = rx_new_node(p, RX_ALT);
    if (nd < 0) return -1;
    p->re->nodes[nd].a = p->re->n_branches;
    p->re->nodes[nd].b = n;
    for (int k = 0; k < n; k++) {
        RX_GROW(p, branches, n_branches, cap_branches);
        p->re->branches[p->re->n_branches++] = heads[k];
    }
    return nd;
}

void st_regex_free(st_regex *re) {
    if (!re) return;
    free(re->nodes);
    free(re->sets);
    free(re->ranges);
    free(re->branches);
    free(re);
}

strata_status st_regex_compile(const char *pattern, st_regex **out) {
    *out = NULL;
    st_regex *re = calloc(1, sizeof *re);
    if (!re) return st_error(STRATA_ERR_NOMEM, "regex: out of memory");
    rx_parser p = {re, (const uint8_t *)pattern, strlen(pattern), 0, pattern, STRATA_OK, 0};
    re->root = rx_parse_alt(&p);
    if (!p.st && !rx_eof(&p)) rx_fail(&p, "unbalanced )");
    if (p.st) {
        st_regex_free(re);
        return p.st;
    }
    *out = re;
    return STRATA_OK;
}

/* =============================================================================================
 * Regex: matcher
 * =========================================================================================== */

typedef struct rx_frame {
    int repeat;                  /* 0: continue with node; 1: iteration of REP node ended */
    int node;
    int count;                   /* REP: iterations done before the one that just ended */
    size_t start;                /* REP: where that iteration started */
    const struct rx_frame *up;
} rx_frame;

typedef struct {
    const st_regex *re;
    const uint32_t *cp;
    const uint16_t *fl;
    size_t end;
} rx_ctx;

static int rx_set_has(const st_regex *re, const rx_set *s, uint32_t cp, unsigned fl) {
    int m = (fl & s->any_flags) != 0;
    for (int i = 0; !m && i < s->n_not; i++) m = (fl & s->not_flags[i]) == 0;
    for (int i = 0; !m && i < s->n_ranges; i++) {
        const rx_range *r = &re->ranges[s->first_range + i];
        m = cp >= r->lo && cp <= r->hi;
    }
    return m != s->negate;
}

static ptrdiff_t rx_match(const rx_ctx *c, int n, size_t pos, const rx_frame *fr) {
    const st_regex *re = c->re;
    for (;;) {
        if (n < 0) { /* end of a chain: pop a frame */
            if (!fr) return (ptrdiff_t)pos;
            if (!fr->repeat) { n = fr->node; fr = fr->up; continue; }
            const rx_node *r = &re->nodes[fr->node];
            int done = fr->count + 1;
            if ((r->c < 0 || done < r->c) && pos != fr->start) {
                rx_frame more = {1, fr->node, done, pos, fr->up};
                ptrdiff_t res = rx_match(c, r->a, pos, &more);
                if (res >= 0) return res;
            }
            if (done < r->b) return -1;
            n = r->next;
            fr = fr->up;
            continue;
        }
        const rx_node *nd = &re->nodes[n];
        switch (nd->kind) {
            case RX_SET:
                if (pos >= c->end || !rx_set_has(re, &re->sets[nd->a], c->cp[pos], c->fl[pos]))
                    return -1;
                pos++;
                n = nd->next;
                continue;
            case RX_EOS:
                if (pos != c->end) return -1;
                n = nd->next;
                continue;
            case RX_NLA:
            case RX_PLA: {
                ptrdiff_t res = rx_match(c, nd->a, pos, NULL);
                if ((res >= 0) == (nd->kind == RX_NLA)) return -1;
                n = nd->next;
                continue;
            }
            case RX_ALT: {
                rx_frame k = {0, nd->next, 0, 0, fr};
                for (int b = 0; b < nd->b; b++) {
                    ptrdiff_t res = rx_match(c, re->branches[nd->a + b], pos, &k);
                    if (res >= 0) return res;
                }
                return -1;
            }
            case RX_REP: {
                const rx_node *body = &re->nodes[nd->a];
                if (body->kind == RX_SET && body->next < 0) {
                    /* count the longest run, then back off one at a time */
                    const rx_set *s = &re->sets[body->a];
                    size_t k = 0, lim = c->end - pos;
                    if (nd->c >= 0 && (size_t)nd->c < lim) lim = (size_t)nd->c;
                    while (k < lim && rx_set_has(re, s, c->cp[pos + k], c->fl[pos + k])) k++;
                    if (k < (size_t)nd->b) return -1;
                    for (;;) {
                        if (nd->next < 0 && !fr) return (ptrdiff_t)(pos + k);
                        ptrdiff_t res = rx_match(c, nd->next, pos + k, fr);
                        if (res >= 0) return res;
                        if (k == (size_t)nd->b) return -1;
                        k--;
                    }
                }
                if (nd->c != 0) {
                    rx_frame it = {1, n, 0, pos, fr};
                    ptrdiff_t res = rx_match(c, nd->a, pos, &it);
                    if (res >= 0) return res;
                }
                if (nd->b > 0) return -1;
                n = nd->next;
                continue;
            }
        }
        return -1;
    }
}

ptrdiff_t st_regex_match_at(const st_regex *re, const uint32_t *cps, const uint16_t *flags,
                            size_t end, size_t pos) {
    rx_ctx c = {re, cps, flags, end};
    return rx_match(&c, re->root, pos, NULL);
}

/* =============================================================================================
 * Pattern sets (llama.cpp's regex_exprs, copied as data) and tokenizer.ggml.pre names
 * =========================================================================================== */

enum {
    SET_DEFAULT,
    SET_GPT2,
    SET_LLAMA3,
    SET_QWEN2,
    SET_QWEN35,
    SET_STARCODER,
    SET_FALCON,
    SET_DEEPSEEK_LLM,
    SET_DEEPSEEK3,
    SET_GPT4O,
    SET_COUNT
};

#define PAT_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

static const char *const pat_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", PAT_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const pat_gpt2[] = {PAT_GPT2, NULL};
static const char *const pat_llama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pat_qwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pat_qwen35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const pat_starcoder[] = {"\\p{N}", PAT_GPT2, NULL};
static const char *const pat_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+", PAT_GPT2, "[0-9][0-9][0-9]", NULL};
static const char *const pat_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf"
    "\xc7\x84-\xca\x93\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf"
    "\xce\x86\xce\x88-\xce\x8a\xce\x8c\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81"
    "\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85\xe1\x8e\xa0-\xe1\x8f\xb5"
    "\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf"
    "\xe1\xb4\x80-\xe1\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a"
    "\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85"
    "\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b\xe1\xbd\x9d"
    "\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe"
    "\xe1\xbf\x82-\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93"
    "\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-\xe1\xbf\xac\xe1\xbf\xb2-\xe1\xbf\xb4"
    "\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95"
    "\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-\xe2\x84\xad"
    "\xe2\x84\xaf-\xe2\x84\xb4\xe2\x84\xb9\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-\xe2\x85\x89"
    "\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb\xe2\xb1\xbe-\xe2\xb3\xa4"
    "\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad"
    "\xea\x9a\x80-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87"
    "\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-\xea\xae\xbf\xef\xac\x80-\xef\xac\x86"
    "\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a"
    "\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93"
    "\xf0\x90\x93\x98-\xf0\x90\x93\xbb\xf0\x90\xb2\x80-\xf0\x90\xb2\xb2"
    "\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f"
    "\xf0\x9e\xa4\x80-\xf0\x9e\xa5\x83]+",
    "\\s?[!-/:-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f"
    "\xe3\x80\x80-\xe3\x80\x82]+",
    "\\s+$",
    "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+",
    "\\p{N}+",
    NULL};
static const char *const pat_deepseek3[] = {
    "\\p{N}{1,3}",
    "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};

/* llama.cpp's GPT4O list (o200k: gpt-4o, gpt-oss, llama4) with one rewrite: its
 * ((?=[\p{L}])([^a-z])) and ((?=[\p{L}])([^A-Z])) (a letter other than a-z / A-Z) are written as
 * the classes [^\P{L}a-z] and [^\P{L}A-Z], which match the same code points one at a time, so
 * a letter run is counted in a loop instead of recursing once per letter. */
#define PAT_CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
static const char *const pat_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]*[^\\P{L}A-Z]+" PAT_CONTRACTION "|"
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]+[^\\P{L}A-Z]*" PAT_CONTRACTION "|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};

static const char *const *const pat_sets[SET_COUNT] = {
    pat_default, pat_gpt2, pat_llama3, pat_qwen2, pat_qwen35, pat_starcoder, pat_falcon,
    pat_deepseek_llm, pat_deepseek3, pat_gpt4o};

/* tokenizer.ggml.pre values and what llama.cpp maps them to (pattern set and flags). Names whose
 * llama.cpp behaviour needs more than a pattern set (extra per-token attributes, SEP tokens,
 * other normalizers) are left out and rejected as unsupported. */
static const st_pretok_alias pre_aliases[] = {
    {"default", SET_DEFAULT, 0},
    /* GPT-2 pattern */
    {"gpt-2", SET_GPT2, 0},
    {"gpt2", SET_GPT2, 0},
    {"phi-2", SET_GPT2, 0},
    {"jina-es", SET_GPT2, 0},
    {"jina-de", SET_GPT2, 0},
    {"gigachat", SET_GPT2, 0},
    {"a.x-4.0", SET_GPT2, 0},
    {"mellum", SET_GPT2, 0},
    {"exaone4", SET_GPT2, 0},
    {"mpt", SET_GPT2, 0},
    {"olmo", SET_GPT2, 0},
    {"jais", SET_GPT2, 0},
    {"trillion", SET_GPT2, 0},
    {"granite-docling", SET_GPT2, 0},
    /* Llama 3 pattern */
    {"llama3", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"llama-v3", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"llama-bpe", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"falcon3", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"falcon-h1", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"pixtral", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"midm-2.0", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"lfm2", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"jina-v5-nano", SET_LLAMA3, ST_PRE_IGNORE_MERGES | ST_PRE_ADD_BOS},
    {"dbrx", SET_LLAMA3, 0},
    {"smaug-bpe", SET_LLAMA3, 0},
    {"glm4", SET_LLAMA3, ST_PRE_NO_BOS},
    {"chatglm-bpe", SET_LLAMA3, ST_PRE_NO_BOS},
    /* Qwen2 pattern */
    {"qwen2", SET_QWEN2, 0},
    {"deepseek-r1-qwen", SET_QWEN2, 0},
    {"kormo", SET_QWEN2, 0},
    {"f2llmv2", SET_QWEN2, 0},
    {"megrez", SET_QWEN2, 0},
    {"stablelm2", SET_QWEN2, 0},
    {"hunyuan", SET_QWEN2, 0},
    {"solar-open", SET_QWEN2, 0},
    {"grok-2", SET_QWEN2, 0},
    {"qwen35", SET_QWEN35, 0},
    /* StarCoder pattern (digits one by one, then GPT-2) */
    {"starcoder", SET_STARCODER, 0},
    {"refact", SET_STARCODER, 0},
    {"command-r", SET_STARCODER, 0},
    {"smollm", SET_STARCODER, 0},
    {"codeshell", SET_STARCODER, 0},
    {"exaone", SET_STARCODER, 0},
    {"minerva-7b", SET_STARCODER, 0},
    {"mellum2", SET_STARCODER, 0},
    {"falcon", SET_FALCON, 0},
    {"deepseek-llm", SET_DEEPSEEK_LLM, 0},
    {"deepseek-v3", SET_DEEPSEEK3, 0},
    {"hunyuan-dense", SET_DEEPSEEK3, 0},
    {"joyai-llm", SET_DEEPSEEK3, 0},
    {"hy_v4", SET_DEEPSEEK3, 0},
    /* o200k (GPT-4o, gpt-oss): letters split at lower->upper case changes, digits by 1-3 */
    {"gpt-4o", SET_GPT4O, 0},
    {"llama4", SET_GPT4O, 0},
    {"kanana2", SET_GPT4O, 0},
    {"talkie", SET_GPT4O, 0},
    {"minimax-m2", SET_GPT4O, 0},
};

const st_pretok_alias *st_pretok_find(const char *name, size_t len) {
    for (size_t i = 0; i < ST_ARRAY_LEN(pre_aliases); i++) {
        const char *a = pre_aliases[i].name;
        if (strlen(a) == len && memcmp(a, name, len) == 0) return &pre_aliases[i];
    }
    return NULL;
}

const char *const *st_pretok_patterns(int set) {
    return set >= 0 && set < SET_COUNT ? pat_sets[set] : NULL;
}

/* =============================================================================================
 * Splitting
 * =========================================================================================== */

#define ST_PRETOK_MAX_PATTERNS 8

struct st_pretok {
    int n;
    st_regex *re[ST_PRETOK_MAX_PATTERNS];
};

void st_pretok_free(st_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) st_regex_free(p->re[i]);
    free(p);
}

strata_status st_pretok_create(int set, st_pretok **out) {
    *out = NULL;
    const char *const *pats = st_pretok_patterns(set);
    if (!pats) return st_error(STRATA_ERR_INVALID_ARG, "pre-tokenizer: no pattern set %d", set);
    st_pretok *p = calloc(1, sizeof *p);
    if (!p) return st_error(STRATA_ERR_NOMEM, "pre-tokenizer: out of memory");
    for (; pats[p->n]; p->n++) {
        if (p->n == ST_PRETOK_MAX_PATTERNS) {
            st_pretok_free(p);
            return st_error(STRATA_ERR_INTERNAL, "pre-tokenizer: too many patterns");
        }
        strata_status st = st_regex_compile(pats[p->n], &p->re[p->n]);
        if (st) {
            st_pretok_free(p);
            return st;
        }
    }
    *out = p;
    return STRATA_OK;
}

typedef struct {
    size_t *v;
    size_t n, cap;
} st_sizes;

static int st_sizes_push(st_sizes *s, size_t x) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        size_t *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) return -1;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = x;
    return 0;
}

strata_status st_pretok_split(const st_pretok *p, const uint8_t *text, size_t len, size_t **ends,
                              size_t *n_ends) {
    *ends = NULL;
    *n_ends = 0;
    if (len == 0) return STRATA_OK;
    uint32_t *cps = malloc(len * sizeof *cps);
    uint16_t *fl = malloc(len * sizeof *fl);
    size_t *boff = malloc((len + 1) * sizeof *boff);
    st_sizes cur = {0}, nxt = {0};
    strata_status st = STRATA_OK;
    if (!cps || !fl || !boff) goto nomem;

    /* code points, their flags and byte offsets */
    size_t ncp = 0;
    for (size_t i = 0; i < len;) {
        int bad;
        size_t k = st_utf8_decode(text + i, len - i, &cps[ncp], &bad);
        fl[ncp] = (uint16_t)st_unicode_flags(cps[ncp]);
        boff[ncp++] = i;
        i += k;
    }
    boff[ncp] = len;

    /* piece ends in code points; start with the whole text */
    if (st_sizes_push(&cur, ncp)) goto nomem;
    for (int r = 0; r < p->n; r++) {
        rx_ctx c = {p->re[r], cps, fl, 0};
        nxt.n = 0;
        size_t a = 0;
        for (size_t k = 0; k < cur.n; k++) {
            size_t b = cur.v[k];
            c.end = b;
            size_t prev = a;
            for (size_t pos = a; pos < b; pos++) {
                ptrdiff_t e = rx_match(&c, c.re->root, pos, NULL);
                if (e <= (ptrdiff_t)pos) continue; /* no match here (empty matches are skipped) */
                if (pos > prev && st_sizes_push(&nxt, pos)) goto nomem;
                if (st_sizes_push(&nxt, (size_t)e)) goto nomem;
                prev = (size_t)e;
                pos = (size_t)e - 1;
            }
            if (prev < b && st_sizes_push(&nxt, b)) goto nomem;
            a = b;
        }
        st_sizes t = cur;
        cur = nxt;
        nxt = t;
    }
    for (size_t k = 0; k < cur.n; k++) cur.v[k] = boff[cur.v[k]];
    *ends = cur.v;
    *n_ends = cur.n;
    cur.v = NULL;
    goto done;
nomem:
    st = st_error(STRATA_ERR_NOMEM, "pre-tokenizer: out of memory for %zu bytes of text", len);
done:
    free(cps);
    free(fl);
    free(boff);
    free(cur.v);
    free(nxt.v);
    return st;
}
