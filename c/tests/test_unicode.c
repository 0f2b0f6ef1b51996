/* test_unicode.c - the tokenizer's Unicode layer and regex engine: code point flags from the
 * generated table against known categories, UTF-8 decoding of malformed input, and the regex
 * engine's matches (priority of alternatives, greedy backtracking, lookahead, counted repeats,
 * group repeats, classes) and its refusals of unsupported syntax. */
#include "test.h"
#include "pretok.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

static void test_flags(void) {
    struct { uint32_t cp; unsigned want; } cases[] = {
        {'a', ST_UF_L}, {'Z', ST_UF_L}, {'7', ST_UF_N}, {' ', ST_UF_Z | ST_UF_W},
        {'\t', ST_UF_C | ST_UF_W}, {'\n', ST_UF_C | ST_UF_W}, {0x1C, ST_UF_C}, {'~', ST_UF_S},
        {'$', ST_UF_S}, {'!', ST_UF_P}, {'_', ST_UF_P}, {0x85, ST_UF_C | ST_UF_W},
        {0xA0, ST_UF_Z | ST_UF_W}, {0xB2, ST_UF_N}, {0xBD, ST_UF_N}, {0x301, ST_UF_M},
        {0x4E2D, ST_UF_L}, {0x3000, ST_UF_Z | ST_UF_W}, {0x200B, ST_UF_C}, {0x2028, ST_UF_Z | ST_UF_W},
        {0x1F999, ST_UF_S}, {0x0378, ST_UF_U}, {0xE000, ST_UF_C}, {0x10FFFF, ST_UF_U},
        {0x110000, ST_UF_U}, {0x0663, ST_UF_N}, {0x2460, ST_UF_N}, {0x0E20, ST_UF_L},
    };
    for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++)
        CHECK(st_unicode_flags(cases[i].cp) == cases[i].want, "flags U+%04X = 0x%x, want 0x%x",
              cases[i].cp, st_unicode_flags(cases[i].cp), cases[i].want);
    int sorted = st_unicode_ranges[0].first == 0;
    for (int i = 1; i < st_unicode_n_ranges; i++)
        sorted &= st_unicode_ranges[i].first > st_unicode_ranges[i - 1].first &&
                  st_unicode_ranges[i].flags != st_unicode_ranges[i - 1].flags;
    CHECK(sorted, "range table sorted and merged");
    CHECK(strlen(st_unicode_version) >= 4, "unicode version noted");
}

static void test_utf8(void) {
    uint32_t cp;
    int bad;
    const uint8_t ok[] = {0xF0, 0x9F, 0xA6, 0x99};
    CHECK(st_utf8_decode(ok, 4, &cp, &bad) == 4 && cp == 0x1F999 && !bad, "4-byte");
    const uint8_t trunc[] = {0xE2, 0x82};
    CHECK(st_utf8_decode(trunc, 2, &cp, &bad) == 1 && cp == 0xFFFD && bad, "truncated");
    const uint8_t cont[] = {0x80, 'a'};
    CHECK(st_utf8_decode(cont, 2, &cp, &bad) == 1 && bad, "stray continuation");
    const uint8_t ff[] = {0xFF};
    CHECK(st_utf8_decode(ff, 1, &cp, &bad) == 1 && bad, "0xFF");
    const uint8_t badcont[] = {0xC3, 'a'};
    CHECK(st_utf8_decode(badcont, 2, &cp, &bad) == 1 && bad, "bad continuation");
    uint8_t u[4];
    CHECK(st_utf8_encode(0x20AC, u) == 3 && u[0] == 0xE2 && u[1] == 0x82 && u[2] == 0xAC, "encode");
    CHECK(st_utf8_encode(0x110000, u) == 0, "encode out of range");
}

/* Match pattern at byte offset 0 of s; returns the match length in code points or -1. */
static ptrdiff_t match(const char *pattern, const char *s) {
    st_regex *re = NULL;
    if (st_regex_compile(pattern, &re) != STRATA_OK) {
        CHECK(0, "compile '%s': %s", pattern, strata_last_error());
        return -2;
    }
    size_t len = strlen(s), n = 0;
    uint32_t *cps = malloc((len + 1) * sizeof *cps);
    uint16_t *fl = malloc((len + 1) * sizeof *fl);
    for (size_t i = 0; i < len;) {
        int bad;
        i += st_utf8_decode((const uint8_t *)s + i, len - i, &cps[n], &bad);
        fl[n] = (uint16_t)st_unicode_flags(cps[n]);
        n++;
    }
    ptrdiff_t r = st_regex_match_at(re, cps, fl, n, 0);
    free(cps);
    free(fl);
    st_regex_free(re);
    return r;
}

static void test_regex(void) {
    struct { const char *pat, *text; ptrdiff_t want; } cases[] = {
        {"a|ab", "ab", 1},                       /* first alternative wins */
        {"ab|a", "ab", 2},
        {"\\s+(?!\\S)", "   x", 2},             /* backtracks one space */
        {"\\s+(?!\\S)", "   ", 3},
        {"\\s+(?!\\S)", " x", -1},
        {"\\s*[\\r\\n]+", "  \n\n  x", 4},
        {"\\p{N}{1,3}", "12345", 3},
        {"x{2}", "xxx", 2},
        {"x{2,}", "xxxxx", 5},
        {"(?:ab)+", "ababa", 4},                 /* group repeat */
        {"(?:ab)+c", "ababc", 5},
        {"(?:a|ab)+c", "ababc", 5},              /* backtracking into a group repeat */
        {"[^\\s\\p{L}\\p{N}]+", "!?~$x", 4},
        {"[\\p{L}\\p{M}]+", "e\xcc\x81te!", 4},
        {" ?\\p{L}+", " h\xc3\xa9llo", 6},
        {"[A-Za-z\xc3\x80-\xc3\x96]+", "a\xc3\x84Z\xc3\x97", 3},
        {"'[sS]|'[tT]", "'T", 2},
        {"\\s+$", "  ", 2},
        {"\\s+$", "  a", -1},
        {"[\\-\\]\\\\]+", "-]\\a", 3},
        {"[!-/]+", "!/0", 2},
        {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", "\tabc1", 4},
        {"a(?=b)", "ab", 1},
        {"a(?=b)", "ac", -1},
        {"(a)(b)", "ab", 2},
        {".+", "ab\ncd", 2},
        {"\\P{L}+", "12ab", 2},
        {"[^\\S\\n]+", " \t\nx", 2},
        {"[^\\P{L}a-z]+", "\xc3\x89" "Ab", 2},       /* a letter other than a-z */
        {"[^\\P{L}A-Z]+", "a\xc3\xa9\xe4\xb8\x80Z", 3},
    };
    for (size_t i = 0; i < ST_ARRAY_LEN(cases); i++) {
        ptrdiff_t got = match(cases[i].pat, cases[i].text);
        CHECK(got == cases[i].want, "'%s' on '%s': %td, want %td", cases[i].pat, cases[i].text,
              got, cases[i].want);
    }
    /* a 100k-letter run matches without deep recursion */
    size_t n = 100000;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    big[n] = 0;
    CHECK(match("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+", big) == (ptrdiff_t)n, "100k letters");
    free(big);

    const char *bad[] = {"a+?", "a++", "\\d", "(?i:a)", "^a", "[a", "(a", "a)", "\\p{Lu}",
                         "x{3,1}", "*a", "\\"};
    for (size_t i = 0; i < ST_ARRAY_LEN(bad); i++) {
        st_regex *re = NULL;
        strata_status st = st_regex_compile(bad[i], &re);
        CHECK(st != STRATA_OK && re == NULL && strstr(strata_last_error(), bad[i]) != NULL,
              "'%s' refused with a message naming it (%s)", bad[i], strata_last_error());
        st_regex_free(re);
    }
    /* every shipped pattern compiles */
    for (int set = 0; st_pretok_patterns(set); set++) {
        st_pretok *p = NULL;
        CHECK(st_pretok_create(set, &p) == STRATA_OK, "set %d: %s", set, strata_last_error());
        st_pretok_free(p);
    }
    CHECK(st_pretok_find("qwen2", 5) && !st_pretok_find("qwen", 4), "pre lookup by exact name");
}

static void test_split(void) {
    const st_pretok_alias *a = st_pretok_find("gpt-2", 5);
    st_pretok *p = NULL;
    if (!a || st_pretok_create(a->set, &p)) { CHECK(0, "gpt-2 pre-tokenizer"); return; }
    const char *s = "Hello  world's 123!!\xff";
    size_t *ends = NULL, n = 0;
    CHECK(st_pretok_split(p, (const uint8_t *)s, strlen(s), &ends, &n) == STRATA_OK, "split");
    /* "Hello" " " " world" "'s" " 123" "!!\xff" (0xFF is U+FFFD's So: punctuation-ish) */
    size_t want[] = {5, 6, 12, 14, 18, 21};
    CHECK(n == ST_ARRAY_LEN(want) && memcmp(ends, want, sizeof want) == 0, "gpt-2 pieces (n=%zu)", n);
    free(ends);
    st_pretok_free(p);
}

int main(void) {
    test_flags();
    test_utf8();
    test_regex();
    test_split();
    return test_report();
}
