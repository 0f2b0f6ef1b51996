/* unicode.c - UTF-8 decoding/encoding and the code point flag lookup over the generated range
 * table (unicode_tables.c). Pure functions; thread-safe. */
#include "unicode.h"

unsigned st_unicode_flags(uint32_t cp) {
    if (cp >= 0x110000u) return ST_UF_U;
    /* last range with first <= cp (ranges[0].first == 0) */
    int lo = 0, hi = st_unicode_n_ranges - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (st_unicode_ranges[mid].first <= cp) lo = mid;
        else hi = mid - 1;
    }
    return st_unicode_ranges[lo].flags;
}

size_t st_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp, int *invalid) {
    uint8_t b0 = s[0];
    *invalid = 0;
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t len;
    uint32_t v;
    if ((b0 & 0xE0) == 0xC0) { len = 2; v = b0 & 0x1Fu; }
    else if ((b0 & 0xF0) == 0xE0) { len = 3; v = b0 & 0x0Fu; }
    else if ((b0 & 0xF8) == 0xF0) { len = 4; v = b0 & 0x07u; }
    else goto bad; /* continuation byte or 0xF8..0xFF as lead */
    if (len > n) goto bad;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
bad:
    *cp = 0xFFFD;
    *invalid = 1;
    return 1;
}

int st_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp < 0x110000) {
        out[0] = (uint8_t)(0xF0 | (cp >> 18));
        out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (uint8_t)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}
