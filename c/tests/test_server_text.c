/* test_server_text.c - the server's text helpers (c/server/text.c): where a stream may cut UTF-8,
 * model bytes repaired for JSON (U+FFFD for what is not UTF-8), and a chat answer's <think>
 * reasoning split from its content: opened by the prompt or by the answer, closed by </think>,
 * the content past blank lines, a partial tag held back while streaming, an answer that never
 * thinks left whole; and tool calls in <tool_call> blocks read into OpenAI's tool_calls (or, when
 * anything does not parse, left to the content). */
#include "test.h"
#include "text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void split(const char *t, int think, int final, const char *want_r, const char *want_c, int want_rc) {
    size_t r0, r1, c0;
    const int rc = srv_think_split(t, strlen(t), think, final, &r0, &r1, &c0);
    char r[256] = "", c[256] = "";
    if (rc && r1 > r0) memcpy(r, t + r0, r1 - r0);
    if (rc && c0 != SIZE_MAX) strcpy(c, t + c0);
    const int ok = rc == want_rc && (!rc || (!strcmp(r, want_r) && (want_c ? c0 != SIZE_MAX && !strcmp(c, want_c)
                                                                         : c0 == SIZE_MAX)));
    CHECK(ok, "'%s' (think %d, final %d): rc %d, reasoning '%s', content '%s'", t, think, final, rc, r,
          c0 == SIZE_MAX ? "(none)" : c);
}

int main(void) {
    split("Hello", 0, 0, "", "Hello", 1);
    split("Hello", 1, 0, "", "Hello", 1);                                /* never thought */
    split("<think>\nhmm</think>\n\nAnswer", 1, 1, "hmm", "Answer", 1);
    split("  <think>a</think>b", 1, 1, "a", "b", 1);
    split("reasoning here</think>\n\nAnswer", 2, 1, "reasoning here", "Answer", 1); /* the prompt opened it */
    split("still thinking</thi", 2, 0, "still thinking", NULL, 1);       /* the partial tag held back */
    split("still thinking</thi", 2, 1, "still thinking</thi", NULL, 1);  /* final: all of it */
    split("<th", 1, 0, "", NULL, 0);                                     /* could still be <think> */
    split("<th", 1, 1, "", "<th", 1);
    split("<think>no end", 1, 1, "no end", NULL, 1);
    CHECK(srv_utf8_whole("a\xc3\xa9", 3) == 3 && srv_utf8_whole("a\xc3", 2) == 1 &&
          srv_utf8_whole("\xe2\x82", 2) == 0 && srv_utf8_whole("ab", 2) == 2, "UTF-8 cut points");
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    srv_add_text(d, o, "t", "ok\xff\xc3\xa9\xe2\x82", 7);
    char *s = yyjson_mut_write(d, 0, NULL);
    CHECK(s && !strcmp(s, "{\"t\":\"ok\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\"}"), "invalid bytes as U+FFFD: %s", s);
    free(s);
    yyjson_mut_doc_free(d);
    /* tool calls */
    static const struct { const char *t; int calls; const char *json; } tc[] = {
        {"Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]}"},
        {"<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}"
         "</tool_call>\n", 2, NULL},
        {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then text", -1, NULL},
        {"<tool_call>{\"name\": \"a\", \"arguments\": {}}", -1, NULL},
        {"<tool_call>{\"name\": 3}</tool_call>", -1, NULL},
        {"<tool_call>not json</tool_call>", -1, NULL},
        {"no calls at all", -1, NULL},
    };
    for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) {
        yyjson_mut_doc *td = yyjson_mut_doc_new(NULL);
        yyjson_mut_val *to = yyjson_mut_obj(td);
        yyjson_mut_doc_set_root(td, to);
        int k = 0;
        const int rc = srv_tool_calls(td, to, "c", tc[i].t, strlen(tc[i].t), &k);
        char *js = yyjson_mut_write(td, 0, NULL);
        const int ok = tc[i].calls < 0 ? rc == -1 : rc == 0 && k == tc[i].calls && (!tc[i].json || !strcmp(js, tc[i].json));
        CHECK(ok, "tool calls of '%s': rc %d, %d calls, %s", tc[i].t, rc, k, js);
        free(js);
        yyjson_mut_doc_free(td);
    }
    CHECK(srv_tool_start("ab<tool_call>", 13, 1) == 2 && srv_tool_start("ab<tool_c", 9, 0) == 2 &&
          srv_tool_start("ab<tool_c", 9, 1) == 9 && srv_tool_start("abc", 3, 0) == 3, "where tool calls start");
    return test_report();
}
