/* test_server_harmony.c - gpt-oss's harmony answers (c/server/harmony.c): analysis as reasoning,
 * final and commentary as content, calls to functions.NAME (recipient in the role or the channel
 * header, with or without <|constrain|>) as OpenAI tool_calls, built-in recipients dropped, stray
 * headers, reasoning_format none, a request without tools (its calls' bodies content); each
 * answer also streamed cut at every byte, the deltas' sum compared with the whole answer's (a
 * partial header or terminator never goes out). Most answers
 * and their expected messages are llama.cpp's (tests/test-chat.cpp, "GPT-OSS format tests", MIT). */
#include "test.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *t;
    char r[1024], c[1024];
    size_t rn, cn;
    int bad; /* a range outside t, or one that goes back */
} sink;

static void emit(void *u, int reasoning, size_t a, size_t b) {
    sink *s = u;
    char *dst = reasoning ? s->r : s->c;
    size_t *dn = reasoning ? &s->rn : &s->cn;
    if (b <= a || *dn + (b - a) >= sizeof s->r) { s->bad = 1; return; }
    memcpy(dst + *dn, s->t + a, b - a);
    *dn += b - a;
    dst[*dn] = 0;
}

#define SF1 "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"special_function\",\"arguments\":" \
            "\"{\\\"arg1\\\":1}\"}}]}"

static int g_calls = 1; /* whether the request has tools (0: calls are content; not read) */

/* One answer: its reasoning and content whole, the same streamed byte by byte, its calls (json
 * NULL: none). */
static void answer(const char *t, int raw, const char *want_r, const char *want_c, const char *json) {
    const size_t n = strlen(t);
    sink w = {.t = t}, s = {.t = t};
    size_t pos = 0, spos = 0;
    srv_harmony_walk(t, n, 1, raw, g_calls, &pos, emit, &w);
    for (size_t cut = 0; cut <= n; cut++) srv_harmony_walk(t, cut, 0, raw, g_calls, &spos, emit, &s);
    srv_harmony_walk(t, n, 1, raw, g_calls, &spos, emit, &s);
    CHECK(!w.bad && !strcmp(w.r, want_r) && !strcmp(w.c, want_c), "'%s': reasoning '%s', content '%s'", t, w.r, w.c);
    CHECK(!s.bad && !strcmp(s.r, w.r) && !strcmp(s.c, w.c), "'%s' streamed: reasoning '%s', content '%s'", t, s.r, s.c);
    if (!g_calls) return; /* (generate.c reads no calls then) */
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    int k = 0;
    const int rc = srv_harmony_calls(d, o, "c", t, n, &k);
    char *js = yyjson_mut_write(d, 0, NULL);
    CHECK(json ? rc == 0 && k > 0 && !strcmp(js, json) : rc == -1, "'%s': calls rc %d, %s", t, rc, js);
    free(js);
    yyjson_mut_doc_free(d);
}

/* Every prefix of an answer, streamed: what went out is always a prefix of the whole answer's. */
static void prefixes(const char *t) {
    const size_t n = strlen(t);
    sink w = {.t = t};
    size_t pos = 0;
    srv_harmony_walk(t, n, 1, 0, 1, &pos, emit, &w);
    for (size_t cut = 0; cut <= n; cut++) {
        sink s = {.t = t};
        size_t sp = 0;
        srv_harmony_walk(t, cut, 0, 0, 1, &sp, emit, &s);
        CHECK(!s.bad && !strncmp(s.r, w.r, s.rn) && !strncmp(s.c, w.c, s.cn), "'%.*s': '%s' / '%s'", (int)cut, t, s.r, s.c);
    }
}

int main(void) {
    /* llama.cpp's vectors */
    answer("<|channel|>final<|message|>Hello, world!\nWhat's up?", 0, "", "Hello, world!\nWhat's up?", NULL);
    answer("<|channel|>commentary<|message|>Hello, world!\nWhat's up?", 0, "", "Hello, world!\nWhat's up?", NULL);
    answer("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\n"
           "What's up?", 0, "I'm\nthinking", "Hello, world!\nWhat's up?", NULL);
    answer("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!\n"
           "What's up?", 1, "", "<|channel|>analysis<|message|>I'm\nthinking<|end|>Hello, world!\nWhat's up?", NULL);
    answer("<|channel|>analysis<|message|>I'm\nthinking", 0, "I'm\nthinking", "", NULL);
    answer(" to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}", 0, "", "", SF1);
    answer("<|channel|>analysis to=functions.special_function<|message|>{\"arg1\": 1}", 0, "", "", SF1);
    answer(" to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{\"arg1\": 1}", 0, "", "", SF1);
    answer("<|channel|>commentary to=functions.special_function<|message|>{\"arg1\": 1}", 0, "", "", SF1);
    answer("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function<|channel|>"
           "analysis<|message|>{\"arg1\": 1}", 0, "I'm\nthinking", "", SF1);
    answer("<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.edit <|constrain|>json<|message|>{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": "
           "\"if (part < 4) {\", \"replaceAll\": false}", 0, "Thinking about edit...", "",
           "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"edit\",\"arguments\":\"{\\\"oldString\\\":"
           "\\\"if (part < railCount - 1) {\\\",\\\"newString\\\":\\\"if (part < 4) {\\\",\\\"replaceAll\\\":false}\"}}]}");
    answer("<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant<|channel|>"
           "final <|constrain|>json<|message|>{\"amount\": 123.45, \"date\": \"2025-12-03\"}", 0,
           "I need to output the invoice details in JSON", "{\"amount\": 123.45, \"date\": \"2025-12-03\"}", NULL);
    answer("<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec"
           "<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'", 0, "I will execute python to say hello", "", NULL);
    answer("<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>commentary "
           "to=python <|constrain|>code<|message|>print(\"hello\")", 0, "I will execute python to say hello", "", NULL);
    answer("<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>"
           "final<|message|>Hello, world!\nWhat's up?", 0, "I'm\nthinking", "Hello, world!\nWhat's up?", NULL);
    answer("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>commentary to=assistant<|channel|>"
           "final<|message|>Hello, world!\nWhat's up?", 0, "I'm\nthinking", "Hello, world!\nWhat's up?", NULL);
    /* ours: two calls (the second after <|call|> rendered), a preamble, UTF-8, malformed calls kept */
    answer("<|channel|>analysis<|message|>a\xc3\xa9<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
           "<|start|>assistant<|channel|>commentary to=functions.special_function <|constrain|>json<|message|>{\"arg1\": 1}"
           "<|call|><|start|>assistant<|channel|>commentary to=functions.g json<|message|>{}", 0, "a\xc3\xa9", "Checking.",
           "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"special_function\",\"arguments\":"
           "\"{\\\"arg1\\\":1}\"}},{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}");
    answer("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": ", 0, "", "{\"x\": ", NULL);
    answer("<|channel|>commentary to=functions.f<|message|>[1, 2]", 0, "", "[1, 2]", NULL);
    answer("<|channel|>commentary to=functions.<|message|>{}", 0, "", "", NULL); /* no name: another recipient */
    /* a malformed call closed before another message: content, streamed too (fuzz_tools found the
       stream dropping it) */
    answer("<|channel|>commentary to=functions.f<|message|>{\"x\" 1}<|end|><|start|>assistant<|channel|>final"
           "<|message|>ok", 0, "", "{\"x\" 1}ok", NULL);
    answer("<|channel|>commentary to=functions.f<|message|>[1]<|call|><|start|>assistant<|channel|>commentary "
           "to=functions.g<|message|>{}", 0, "", "[1]",
           "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}");
    answer("Plain text, no channels.", 0, "", "Plain text, no channels.", NULL);
    answer("", 0, "", "", NULL);
    answer("<|channel|>final<|message|>", 0, "", "", NULL);
    answer("<|channel|>analysis<|message|>cut <|en", 0, "cut <|en", "", NULL);  /* final: a partial marker is text */
    answer("<|channel|>fin", 0, "", "<|channel|>fin", NULL);                    /* a header never finished: text */
    /* the request without tools: a call's body is content like any other message's (the
       built-in recipients' still dropped) */
    g_calls = 0;
    answer("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function<|channel|>"
           "analysis<|message|>{\"arg1\": 1}", 0, "I'm\nthinking", "{\"arg1\": 1}", NULL);
    answer("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.f "
           "<|constrain|>json<|message|>{\"x\": 2}<|call|>", 0, "", "Checking.{\"x\": 2}", NULL);
    answer("<|start|>assistant to=container.exec<|channel|>commentary<|message|>ls<|end|>", 0, "", "", NULL);
    g_calls = 1;
    prefixes("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hi \xe2\x82\xac!");
    /* a header that never ends is not one: the rest is text */
    char big[700];
    memcpy(big, "<|channel|>", 11);
    memset(big + 11, 'x', sizeof big - 12);
    big[sizeof big - 1] = 0;
    sink s = {.t = big};
    size_t pos = 0;
    srv_harmony_walk(big, strlen(big), 0, 0, 1, &pos, emit, &s);
    CHECK(!s.bad && s.cn == strlen(big) && pos == strlen(big), "a header past 512 bytes: %zu bytes of content", s.cn);
    return test_report();
}
