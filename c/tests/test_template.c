/* test_template.c - the chat template renderer (c/server/template*.c) in C, so that `make asan`
 * watches it: Python's float repr and str of containers, json.dumps as tojson writes it (spacing,
 * indent, escapes, UTF-8 kept), whitespace control, loop scoping as jinja2 has it (a set inside
 * an iteration does not survive it), namespaces, macros with defaults, slicing by code point,
 * the errors that must name what failed, and the fuzz harness (c/fuzz/fuzz_template.c) over
 * crafted and broken templates. Compared with jinja2 on real templates in test_chat_template.py. */
#include "template.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *CTX = "{\"xs\": [1, 2.5, \"a'b\", null, true], \"d\": {\"k\": \"v\", \"n\": [1e-05, 1e16, 0.1]},"
                         " \"u\": \"h\\u00e9llo\"}";

static void same(const char *tmpl, const char *want) {
    char *out = NULL, err[256] = "";
    const int rc = tmpl_render(tmpl, strlen(tmpl), CTX, &out, err, sizeof err);
    CHECK(rc == 0 && out && !strcmp(out, want), "%s -> '%s' (want '%s'; %s)", tmpl, out ? out : "", want, err);
    free(out);
}

static void fails(const char *tmpl, const char *word) {
    char *out = NULL, err[256] = "";
    const int rc = tmpl_render(tmpl, strlen(tmpl), CTX, &out, err, sizeof err);
    CHECK(rc != 0 && !out && strstr(err, word), "%s: expected an error naming '%s', got '%s'", tmpl, word, err);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* s in a buffer of exactly its length, no NUL after it (as a GGUF string or libFuzzer's input):
 * rendered (want: the output, NULL: an error naming word), then through the fuzz harness. Under
 * ASan a read past the end fails here. */
static void exact(const char *s, const char *want, const char *word) {
    const size_t n = strlen(s);
    char *b = malloc(n ? n : 1), *out = NULL, err[256] = "";
    memcpy(b, s, n);
    const int rc = tmpl_render(b, n, CTX, &out, err, sizeof err);
    CHECK(want ? rc == 0 && out && !strcmp(out, want) : rc != 0 && !out && strstr(err, word),
          "'%s' unterminated: rc %d, '%s', '%s'", s, rc, out ? out : "", err);
    free(out);
    LLVMFuzzerTestOneInput((const uint8_t *)b, n);
    free(b);
}

int main(void) {
    same("{{ xs }}", "[1, 2.5, \"a'b\", None, True]");
    same("{{ d.n }}", "[1e-05, 1e+16, 0.1]");
    same("{{ d | tojson }}", "{\"k\": \"v\", \"n\": [1e-05, 1e+16, 0.1]}");
    same("{{ xs | tojson(indent=2) }}", "[\n  1,\n  2.5,\n  \"a'b\",\n  null,\n  true\n]");
    same("{{ u | tojson }}|{{ u | length }}|{{ u[1:3] }}|{{ u[::-1] }}", "\"h\xc3\xa9llo\"|5|\xc3\xa9l|oll\xc3\xa9h");
    same("  {%- if true %}\n  x{% endif %}\n", "  x");
    same("{% for x in [1,2] %}{% if x == 2 %}[{{ y }}]{% endif %}{% set y = x %}{% endfor %}|{{ y }}", "[]|");
    same("{% set ns = namespace(n=0) %}{% for x in xs if x is number %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
         "2");
    same("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}", "1B23");
    same("{{ 7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' }}", "3 2 3.5 abab 1x");
    same("{{ loop }}{% for k, v in d.items() %}{{ loop.index }}{{ k }}{% endfor %}", "1k2n");
    same("{{ ' a b '.strip().split(' ') }} {{ 'x'|safe + '<' }}", "['a', 'b'] x&lt;");
    fails("{% for x in xs %}", "endfor");
    fails("{{ xs | nosuch }}", "nosuch");
    fails("{{ raise_exception('no tools') }}", "no tools");
    fails("{{ 1 + 'a' }}", "unsupported operand");
    fails("{% include 'x' %}", "include");
    static const char *const fuzz[] = {"{{", "{%", "{#", "{{ [", "{{ {'a': ", "{% for %}", "{% set %}{% endset %}",
                                       "{{ ''[9:-9:-1] }}", "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
                                       "{{ xs[99] }}{{ d['zz'].q }}", "{{ 'x' | indent(2, true) }}"};
    for (size_t i = 0; i < sizeof fuzz / sizeof fuzz[0]; i++)
        LLVMFuzzerTestOneInput((const uint8_t *)fuzz[i], strlen(fuzz[i]));
    /* a number ending the source: libFuzzer's first finding (the lexer's strtod read past len) */
    exact("{{ 42 }}", "42", NULL);
    exact("{{ 4", NULL, "end");
    exact("{{ 1.5e", NULL, "end");
    exact("{% if loop.index % 2", NULL, "end");
    CHECK(1, "the fuzz harness's crafted templates ran (ASan / UBSan watch them)");
    return test_report();
}
