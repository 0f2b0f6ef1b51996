/* vocab_spm.c - SentencePiece (BPE-by-score) tokenization as llama.cpp's
 * llm_tokenizer_spm_session does it. The caller (vocab.c) has already added the space prefix and
 * escaped spaces to U+2581. The text splits into UTF-8 characters (malformed bytes one by one,
 * where llama.cpp trusts the lead byte's length; valid text splits the same); every adjacent pair whose concatenation is a token is queued by that token's
 * score; the best pair (highest score, leftmost on ties) merges and its neighbours are queued
 * again, until nothing merges. A final symbol that is not a token falls back to its bytes'
 * <0xXX> tokens (or the byte as a one-character token, else the unknown token). */
#include "vocab_impl.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int prev, next;
    size_t off, n;   /* n == 0: merged away */
} st_ssym;

static int st_spm_add(const st_vocab *v, const char *s, const st_ssym *sym, st_bigram_heap *h,
                      int left, int right) {
    if (left < 0 || right < 0) return 0;
    size_t n = sym[left].n + sym[right].n;
    int32_t id = st_vocab_find(v, s + sym[left].off, n);
    if (id < 0) return 0;
    st_bigram b = {left, right, v->score[id], n};
    return st_bigram_heap_push(h, b);
}

strata_status st_spm_tokenize(const st_vocab *v, const char *text, size_t len, st_tokens *out) {
    if (len == 0) return STRATA_OK;
    st_ssym *sym = malloc(len * sizeof *sym);
    st_bigram_heap h = {0};
    if (!sym) goto nomem;
    int ns = 0;
    for (size_t off = 0; off < len;) {
        /* one symbol per UTF-8 character; a malformed byte is a symbol of its own (llama.cpp
         * takes the lead byte's length blindly, which can swallow the next escaped space) */
        uint32_t cp;
        int bad;
        size_t k = st_utf8_decode((const uint8_t *)text + off, len - off, &cp, &bad);
        sym[ns].off = off;
        sym[ns].n = k;
        sym[ns].prev = ns - 1;
        off += k;
        sym[ns].next = off == len ? -1 : ns + 1;
        ns++;
    }
    for (int i = 1; i < ns; i++)
        if (st_spm_add(v, text, sym, &h, i - 1, i)) goto nomem;
    while (h.n) {
        st_bigram b = st_bigram_heap_pop(&h);
        st_ssym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (st_spm_add(v, text, sym, &h, l->prev, b.left) ||
            st_spm_add(v, text, sym, &h, b.left, l->next))
            goto nomem;
    }
    for (int i = 0; i >= 0; i = sym[i].next) {
        int32_t id = st_vocab_find(v, text + sym[i].off, sym[i].n);
        if (id >= 0) {
            if (st_tokens_push(out, id)) goto nomem;
            continue;
        }
        for (size_t k = 0; k < sym[i].n; k++) {
            int32_t b = v->byte_token[(uint8_t)text[sym[i].off + k]];
            if (b < 0) b = v->unk;
            if (b >= 0 && st_tokens_push(out, b)) goto nomem;
        }
    }
    free(sym);
    free(h.v);
    return STRATA_OK;
nomem:
    free(sym);
    free(h.v);
    return st_error(STRATA_ERR_NOMEM, "SentencePiece: out of memory for %zu bytes of text", len);
}
