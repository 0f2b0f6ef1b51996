/* pretok.h - pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre): the names
 * llama.cpp knows, the regex lists it applies for each, and the small regex engine (over code
 * points, no regex library) that runs them. */
#ifndef STRATA_PRETOK_H
#define STRATA_PRETOK_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>

/* ---- regex engine --------------------------------------------------------------------------- */

typedef struct st_regex st_regex;

/* Compiles a pattern (UTF-8). Supported: literals, escapes \r \n \t \f \v \\ and escaped
 * punctuation, \s \S, \p{L N P S M Z C} and \P{..}, classes [...] / [^...] with ranges and the
 * escapes above, '.', groups (...) and (?:...), alternation, ? * + {n} {n,} {n,m} (greedy),
 * lookahead (?!...) (?=...), and $ (end of the piece). Anything else is STRATA_ERR_UNSUPPORTED
 * naming the construct. */
strata_status st_regex_compile(const char *pattern, st_regex **out);
void st_regex_free(st_regex *re);

/* Matches re at cps[pos] within cps[0..end) (flags[i] = st_unicode_flags(cps[i])). Returns the
 * end of the match (the first one in the pattern's priority order, as backtracking engines
 * find it), or -1. */
ptrdiff_t st_regex_match_at(const st_regex *re, const uint32_t *cps, const uint16_t *flags,
                            size_t end, size_t pos);

/* ---- pre-tokenizers ------------------------------------------------------------------------- */

#define ST_PRE_IGNORE_MERGES 0x1u  /* a piece that is itself a token is emitted whole (llama3) */
#define ST_PRE_ADD_BOS       0x2u  /* add_bos defaults to true */
#define ST_PRE_NO_BOS        0x4u  /* the vocabulary has no BOS by default (glm4) */

typedef struct {
    const char *name;      /* tokenizer.ggml.pre value */
    int set;               /* pattern set */
    unsigned flags;        /* ST_PRE_* */
} st_pretok_alias;

/* The entry for a tokenizer.ggml.pre value (len bytes), or NULL if it is not supported. */
const st_pretok_alias *st_pretok_find(const char *name, size_t len);
/* The pattern strings of set (NULL-terminated list), for tests and error messages. */
const char *const *st_pretok_patterns(int set);

typedef struct st_pretok st_pretok;

strata_status st_pretok_create(int set, st_pretok **out);
void st_pretok_free(st_pretok *p);

/* Splits text[0..len) into pieces the way llama.cpp's unicode_regex_split does: the whole text
 * is one piece, then each pattern of the set in turn cuts every piece into its matches and the
 * unmatched stretches between them. Writes the byte offset where each piece ends into
 * *ends (malloc'd, caller frees; *n_ends pieces, the last ending at len). Invalid UTF-8 bytes
 * are single code points with U+FFFD's properties; the pieces keep the original bytes. */
strata_status st_pretok_split(const st_pretok *p, const uint8_t *text, size_t len, size_t **ends,
                              size_t *n_ends);

#endif /* STRATA_PRETOK_H */
