/* vocab_impl.h - the inside of st_vocab, shared by the tokenizer's sources: vocab.c (loading,
 * special tokens, the public-facing tokenize/detokenize steps), vocab_bpe.c (byte-level BPE),
 * vocab_spm.c (SentencePiece) and vocab_api.c (the strata_* wrappers). Not for other modules:
 * they use vocab.h and the public API. */
#ifndef STRATA_VOCAB_IMPL_H
#define STRATA_VOCAB_IMPL_H

#include "vocab.h"
#include "pretok.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_VOCAB_SPM, ST_VOCAB_BPE } st_vocab_type;

/* Token attributes (bit set, as llama.cpp's llama_token_attr). */
#define ST_TOK_UNDEFINED    0x000u
#define ST_TOK_UNKNOWN      0x001u
#define ST_TOK_UNUSED       0x002u
#define ST_TOK_NORMAL       0x004u
#define ST_TOK_CONTROL      0x008u
#define ST_TOK_USER_DEFINED 0x010u
#define ST_TOK_BYTE         0x020u

/* Growable token list. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} st_tokens;

int st_tokens_push(st_tokens *t, int32_t id);

struct st_vocab {
    st_vocab_type type;
    int32_t n_tokens;
    /* per token [n_tokens] */
    const char **text;       /* NUL-terminated, into text_pool */
    uint32_t *text_len;
    float *score;
    uint32_t *attr;          /* ST_TOK_* */
    uint8_t *eog;            /* 1: ends generation */
    const char **piece;      /* token_to_piece(special = 1) bytes, into piece_pool */
    uint32_t *piece_len;
    char *text_pool;
    char *piece_pool;
    /* token text -> id, open addressing (capacity a power of two, -1 empty) */
    int32_t *hash;
    size_t hash_mask;
    /* BPE merges "left right" -> rank, open addressing over merge indices (-1 empty) */
    char *merge_pool;        /* the merge strings, each NUL-terminated */
    uint32_t *merge_off;     /* [n_merges] start in merge_pool */
    uint32_t *merge_split;   /* [n_merges] length of the left part (the space follows it) */
    uint32_t *merge_len;     /* [n_merges] total length */
    int32_t n_merges;
    int32_t *merge_hash;
    size_t merge_mask;
    /* special tokens, longest text first (control, user-defined, unknown) */
    int32_t *special;
    int32_t n_special;
    /* byte -> token: BPE: the byte's GPT-2 unicode char; SPM: <0xXX> or the raw byte; -1 none */
    int32_t byte_token[256];
    /* ids, -1 if none */
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    const st_pretok_alias *pre;  /* BPE only */
    st_pretok *pretok;           /* BPE only */
    char *pre_name;
    char *chat_template;         /* NULL if the file has none */
};

/* ---- lookups (vocab.c) ---------------------------------------------------------------------- */

/* The id of the token with exactly this text, or -1. */
int32_t st_vocab_find(const st_vocab *v, const char *s, size_t n);
/* The rank of merge (left, right), or -1. */
int32_t st_vocab_merge_rank(const st_vocab *v, const char *l, size_t nl, const char *r, size_t nr);

/* ---- merge queue shared by BPE and SentencePiece ------------------------------------------- */

/* A candidate merge of symbols left and right. BPE queues priority = -rank (lowest rank first),
 * SentencePiece priority = the merged piece's score (highest first); ties go to the leftmost.
 * size is the merged byte length when queued, to detect entries made stale by earlier merges. */
typedef struct {
    int left, right;
    double priority;
    size_t size;
} st_bigram;

typedef struct {
    st_bigram *v;
    size_t n, cap;
} st_bigram_heap;

/* Push returns -1 when out of memory. Pop needs n > 0. Free with free(h->v). */
int st_bigram_heap_push(st_bigram_heap *h, st_bigram x);
st_bigram st_bigram_heap_pop(st_bigram_heap *h);

/* ---- tokenizers ------------------------------------------------------------------------------ */

/* Appends the tokens of a raw-text fragment (no special tokens in it). */
strata_status st_bpe_tokenize(const st_vocab *v, const char *text, size_t len, st_tokens *out);
strata_status st_spm_tokenize(const st_vocab *v, const char *text, size_t len, st_tokens *out);

/* GPT-2's byte -> code point table (bytes_to_unicode) and its inverse (code point -> byte, -1). */
uint32_t st_bpe_byte_cp(uint8_t b);
int st_bpe_cp_byte(uint32_t cp);

/* ---- whole-text operations (vocab.c) ------------------------------------------------------- */

/* Tokenizes text as llama.cpp's llama_vocab::tokenize: special tokens split out first (control
 * and unknown ones only when parse_special), BOS/EOS per add_bos/add_eos when add_special. */
strata_status st_vocab_tokenize(const st_vocab *v, const char *text, size_t len, int add_special,
                                int parse_special, st_tokens *out);

#endif /* STRATA_VOCAB_IMPL_H */
