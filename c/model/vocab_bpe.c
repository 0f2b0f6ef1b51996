/* vocab_bpe.c - byte-level BPE as llama.cpp's llm_tokenizer_bpe_session does it: the
 * pre-tokenizer cuts the text into pieces (pretok.c); each piece's bytes become GPT-2's
 * byte-to-unicode characters; adjacent symbols merge by the rank of their pair in
 * tokenizer.ggml.merges (lowest rank first, leftmost on ties) until no ranked pair is left; each
 * final symbol is its token, or, if the vocabulary lacks it, the single-byte tokens of its
 * bytes. With ignore_merges (llama3 pre-tokenizers) a piece that is itself a token is taken
 * whole. */
#include "vocab_impl.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* =============================================================================================
 * GPT-2 bytes_to_unicode
 * =========================================================================================== */

/* Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes,
 * in order, to U+0100, U+0101, ... */
static int st_bpe_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t st_bpe_byte_cp(uint8_t b) {
    if (st_bpe_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++) n += !st_bpe_printable(c);
    return 256 + n;
}

int st_bpe_cp_byte(uint32_t cp) {
    if (cp < 256) return st_bpe_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    for (unsigned c = 0; c < 256; c++)
        if (!st_bpe_printable(c) && n-- == 0) return (int)c;
    return -1;
}

/* =============================================================================================
 * Merging
 * =========================================================================================== */

typedef struct {
    int prev, next;
    size_t off, n;   /* bytes in the mapped piece; n == 0: merged away */
} st_sym;

typedef struct {
    const st_vocab *v;
    const char *s;   /* mapped piece */
    st_sym *sym;
    st_bigram_heap heap;
} st_bpe_ctx;

static int st_bpe_add(st_bpe_ctx *c, int left, int right) {
    if (left < 0 || right < 0) return 0;
    const st_sym *l = &c->sym[left], *r = &c->sym[right];
    int32_t rank = st_vocab_merge_rank(c->v, c->s + l->off, l->n, c->s + r->off, r->n);
    if (rank < 0) return 0;
    st_bigram b = {left, right, -(double)rank, l->n + r->n};
    return st_bigram_heap_push(&c->heap, b);
}

strata_status st_bpe_tokenize(const st_vocab *v, const char *text, size_t len, st_tokens *out) {
    size_t *ends = NULL, n_ends = 0;
    ST_TRY(st_pretok_split(v->pretok, (const uint8_t *)text, len, &ends, &n_ends));
    st_bpe_ctx c = {v, NULL, NULL, {0}};
    char *map = NULL;
    size_t map_cap = 0, sym_cap = 0;
    size_t start = 0;
    for (size_t p = 0; p < n_ends; p++) {
        const uint8_t *w = (const uint8_t *)text + start;
        size_t wn = ends[p] - start;
        start = ends[p];
        /* bytes -> GPT-2 characters (at most 2 UTF-8 bytes each) */
        if (2 * wn > map_cap) {
            map_cap = 2 * wn + 64;
            char *nm = realloc(map, map_cap);
            if (!nm) goto nomem;
            map = nm;
        }
        if (wn > sym_cap) {
            sym_cap = wn + 64;
            st_sym *ns = realloc(c.sym, sym_cap * sizeof *ns);
            if (!ns) goto nomem;
            c.sym = ns;
        }
        size_t mn = 0;
        for (size_t i = 0; i < wn; i++) {
            uint8_t u[4];
            int k = st_utf8_encode(st_bpe_byte_cp(w[i]), u);
            c.sym[i].prev = (int)i - 1;
            c.sym[i].next = i + 1 < wn ? (int)i + 1 : -1;
            c.sym[i].off = mn;
            c.sym[i].n = (size_t)k;
            memcpy(map + mn, u, (size_t)k);
            mn += (size_t)k;
        }
        c.s = map;
        if (v->ignore_merges) {
            int32_t id = st_vocab_find(v, map, mn);
            if (id >= 0) {
                if (st_tokens_push(out, id)) goto nomem;
                continue;
            }
        }
        c.heap.n = 0;
        for (size_t i = 1; i < wn; i++)
            if (st_bpe_add(&c, (int)i - 1, (int)i)) goto nomem;
        while (c.heap.n) {
            st_bigram b = st_bigram_heap_pop(&c.heap);
            st_sym *l = &c.sym[b.left], *r = &c.sym[b.right];
            if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* outdated */
            l->n += r->n;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0) c.sym[r->next].prev = b.left;
            if (st_bpe_add(&c, l->prev, b.left) || st_bpe_add(&c, b.left, l->next)) goto nomem;
        }
        for (int i = wn ? 0 : -1; i >= 0; i = c.sym[i].next) {
            const st_sym *s = &c.sym[i];
            int32_t id = st_vocab_find(v, map + s->off, s->n);
            if (id >= 0) {
                if (st_tokens_push(out, id)) goto nomem;
                continue;
            }
            /* not in the vocabulary: the tokens of its single bytes, where they exist */
            for (size_t k = 0; k < s->n; k++) {
                int32_t b = st_vocab_find(v, map + s->off + k, 1);
                if (b >= 0 && st_tokens_push(out, b)) goto nomem;
            }
        }
    }
    free(ends);
    free(map);
    free(c.sym);
    free(c.heap.v);
    return STRATA_OK;
nomem:
    free(ends);
    free(map);
    free(c.sym);
    free(c.heap.v);
    return st_error(STRATA_ERR_NOMEM, "BPE: out of memory for %zu bytes of text", len);
}
