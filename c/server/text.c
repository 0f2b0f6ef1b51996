/* text.c - the server's text helpers (text.h): UTF-8 boundaries and repair for JSON, and a chat
 * answer's reasoning split from its content. Pure functions over the caller's bytes. */
#include "text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of text's prefix that does not end inside a UTF-8 character. */
size_t srv_utf8_whole(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return n;
    const unsigned char lead = (unsigned char)s[i - 1];
    const size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return back + 1 >= want ? n : i - 1;
}

/* The length of the well-formed UTF-8 character at s[0..n) (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF, as yyjson's writer checks), 0 when there is none. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    const unsigned char c = s[0];
    if (c < 0x80) return 1;
    const size_t want = c >= 0xC2 && c <= 0xDF ? 2 : (c >> 4) == 14 ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!want || n < want) return 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t j = 2; j < want; j++)
        if ((s[j] & 0xC0) != 0x80) return 0;
    return want;
}

yyjson_mut_val *srv_text_val(yyjson_mut_doc *d, const char *s, size_t n) {
    char *t = malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; t && i < n;) {
        const size_t want = utf8_char((const unsigned char *)s + i, n - i);
        if (want) {
            memcpy(t + k, s + i, want);
            k += want;
            i += want;
        } else {
            memcpy(t + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    yyjson_mut_val *v = yyjson_mut_strncpy(d, t ? t : "", t ? k : 0);
    free(t);
    return v;
}

/* A token may end inside a character; a model's bytes may be anything. */
void srv_add_text(yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *s, size_t n) {
    yyjson_mut_obj_add_val(d, obj, key, srv_text_val(d, s, n));
}

/* A chat answer's reasoning (think: the template has <think> tags, or with SRV_THINK_SEED
 * Seed-OSS's <seed:think>; 2: the prompt opened one):
 * text[0..n) as reasoning [*r0, *r1) and content from *c0 (SIZE_MAX: none yet). Reasoning is there
 * when the prompt opened it or the text starts with <think>; it ends at </think>, after which the
 * content starts past blank lines. Not final: what could still become the tag is held back
 * (*r1 short of it), and a start that could still become <think> decides nothing (0 returned). */
int srv_think_split(const char *t, size_t n, int think, int final, size_t *r0, size_t *r1, size_t *c0) {
    const int seed = think & SRV_THINK_SEED;
    const char *open = seed ? "<seed:think>" : "<think>", *close = seed ? "</seed:think>" : "</think>";
    *r0 = *r1 = 0;
    *c0 = 0;
    think &= ~SRV_THINK_SEED;
    if (!think) return 1;
    size_t i = 0;
    while (i < n && (t[i] == ' ' || t[i] == '\n')) i++;
    const size_t lo = strlen(open), lc = strlen(close);
    int opened = think == 2;
    if (n - i >= lo && !memcmp(t + i, open, lo)) { opened = 1; i += lo; }
    else if (!final && !opened && n - i < lo && !memcmp(t + i, open, n - i)) return 0; /* "<th" so far */
    if (!opened) return 1;
    *r0 = i; /* (past the opening tag and the spaces before it) */
    while (*r0 < n && t[*r0] == '\n') (*r0)++;
    for (size_t k = *r0; k + lc <= n; k++)
        if (!memcmp(t + k, close, lc)) {
            *r1 = k;
            *c0 = k + lc;
            while (*c0 < n && (t[*c0] == '\n' || t[*c0] == ' ')) (*c0)++;
            return 1;
        }
    size_t hold = 0; /* a partial </think> at the end */
    for (size_t h = lc - 1; h > 0 && !final; h--)
        if (h <= n - *r0 && !memcmp(t + n - h, close, h)) { hold = h; break; }
    *r1 = n - hold;
    *c0 = SIZE_MAX;
    return 1;
}

