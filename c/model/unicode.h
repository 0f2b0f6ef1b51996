/* unicode.h - the code point facts the tokenizer needs: UTF-8 decoding and encoding the way
 * llama.cpp's tokenizers step through text, and per code point property flags (general category
 * group, whitespace) from the generated table in unicode_tables.c. */
#ifndef STRATA_UNICODE_H
#define STRATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Property flags of one code point (one category bit, plus ST_UF_W for whitespace). */
#define ST_UF_L 0x001u   /* letter: Lu Ll Lt Lm Lo */
#define ST_UF_N 0x002u   /* number: Nd Nl No */
#define ST_UF_P 0x004u   /* punctuation: Pc Pd Ps Pe Pi Pf Po */
#define ST_UF_S 0x008u   /* symbol: Sm Sc Sk So */
#define ST_UF_M 0x010u   /* mark: Mn Mc Me */
#define ST_UF_Z 0x020u   /* separator: Zs Zl Zp */
#define ST_UF_C 0x040u   /* other: Cc Cf Co Cs */
#define ST_UF_U 0x080u   /* unassigned: Cn (and values above U+10FFFF) */
#define ST_UF_W 0x100u   /* White_Space (what \s matches) */

typedef struct {
    uint32_t first;  /* first code point of the range */
    uint16_t flags;
} st_unicode_range;

/* Generated (unicode_tables.c). */
extern const char st_unicode_version[];
extern const st_unicode_range st_unicode_ranges[];
extern const int st_unicode_n_ranges;

/* Flags of code point cp (ST_UF_U for anything outside 0..0x10FFFF). */
unsigned st_unicode_flags(uint32_t cp);

/* Length of the UTF-8 sequence that lead byte b starts, by its high nibble (llama.cpp's
 * unicode_len_utf8: 1 for ASCII and stray continuation bytes, 2, 3 or 4). */
static inline size_t st_utf8_len(uint8_t b) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[b >> 4];
}

/* Decodes one code point from s[0..n) (n >= 1). Returns the bytes consumed (1..4). A malformed
 * sequence (bad lead byte, missing or bad continuation bytes) consumes 1 byte and gives
 * *cp = 0xFFFD and *invalid = 1. Accepts what llama.cpp's decoder accepts. */
size_t st_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp, int *invalid);

/* Writes the UTF-8 form of cp (<= 0x10FFFF) to out; returns its length (1..4), 0 if invalid. */
int st_utf8_encode(uint32_t cp, uint8_t out[4]);

#endif /* STRATA_UNICODE_H */
