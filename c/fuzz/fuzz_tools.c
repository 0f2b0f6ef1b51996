/* fuzz_tools.c - libFuzzer harness of the server's readers of model output (c/server/tool_calls.c,
 * harmony.c, text.c): the input's first byte picks a tool call format (SRV_TOOLS_*), the rest is
 * the generated text. Each input goes through where the calls start (streamed and final), the
 * framing skipped, the calls parsed into OpenAI tool_calls (written out whole, read back: name
 * and arguments strings), the <think> split of every mode, and the text
 * made valid UTF-8. For harmony (gpt-oss) answers the stream, cut at every byte and then
 * finished, must emit what one final walk emits, each range inside the text and going forward.
 *
 *   make fuzz                                   clang -fsanitize=fuzzer,address,undefined
 *   ./build/fuzz_tools DIR -dict=c/fuzz/tools.dict -max_len=2048
 *
 * Built with -DSTRATA_FUZZ_STANDALONE (any C compiler, no libFuzzer), main() runs the harness
 * once over each file named on the command line. See docs/FUZZING.md. */
#include "text.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The request's tools, which the XML formats read for their values' types. */
static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"properties\": {\"x\": {\"type\":"
    " [\"string\", \"null\"]}}}}}]";

/* The calls write out as JSON that reads back, each with a string name and arguments (a string
 * the model wrote as the arguments goes out as is, as llama.cpp's does: it need not be JSON). */
static void fz_check_calls(yyjson_mut_doc *d) {
    size_t len = 0;
    char *js = yyjson_mut_write(d, 0, &len);
    if (!js) __builtin_trap();
    yyjson_doc *r = yyjson_read(js, len, 0);
    if (!r) __builtin_trap(); /* what the server sends must be JSON */
    yyjson_val *arr = yyjson_obj_get(yyjson_doc_get_root(r), "tool_calls");
    size_t i, max;
    yyjson_val *c;
    yyjson_arr_foreach(arr, i, max, c) {
        yyjson_val *fn = yyjson_obj_get(c, "function");
        yyjson_val *a = yyjson_obj_get(fn, "arguments");
        if (!yyjson_is_str(yyjson_obj_get(fn, "name")) || !yyjson_is_str(a)) __builtin_trap();
    }
    yyjson_doc_free(r);
    free(js);
}

static void fz_calls(int fmt, const char *t, size_t n, yyjson_val *tools) {
    const size_t s0 = srv_tool_start(fmt, t, n, 0), s1 = srv_tool_start(fmt, t, n, 1);
    if (s0 > n || s1 > n || srv_tool_skip(fmt, t, s1) > s1) __builtin_trap();
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    int k = 0;
    const int rc = fmt == SRV_TOOLS_HARMONY ? srv_harmony_calls(d, o, "tool_calls", t, n, &k)
                                            : srv_tool_calls(fmt, d, o, "tool_calls", t, n, tools, &k);
    if (rc == 0) {
        if (k <= 0) __builtin_trap();
        fz_check_calls(d);
    }
    yyjson_mut_doc_free(d);
}

typedef struct {
    size_t n;  /* the text's length */
    char *out; /* what was emitted: 'r' or 'c' per byte, then the bytes' offsets */
    size_t *off, len, cap;
    size_t last; /* where the last range ended */
} fz_sink_t;

static void fz_emit(void *u, int reasoning, size_t a, size_t b) {
    fz_sink_t *s = u;
    if (b <= a || b > s->n || a < s->last) __builtin_trap(); /* inside the text, going forward */
    s->last = b;
    for (size_t i = a; i < b; i++) {
        if (s->len == s->cap) __builtin_trap(); /* more bytes out than the text has */
        s->out[s->len] = reasoning ? 'r' : 'c';
        s->off[s->len++] = i;
    }
}

/* A harmony answer: streamed byte by byte, then finished, it emits what one final walk does. */
static void fz_harmony(const char *t, size_t n) {
    fz_sink_t w = {n, malloc(n + 1), malloc((n + 1) * sizeof(size_t)), 0, n, 0};
    fz_sink_t s = {n, malloc(n + 1), malloc((n + 1) * sizeof(size_t)), 0, n, 0};
    for (int calls = 0; calls <= 1; calls++) {
        const int raw = calls; /* (both settings of each, in two passes) */
        size_t pos = 0, spos = 0;
        w.len = w.last = s.len = s.last = 0;
        srv_harmony_walk(t, n, 1, raw, calls, &pos, fz_emit, &w);
        if (pos > n) __builtin_trap();
        if (n <= 1024)
            for (size_t cut = 0; cut <= n; cut++) srv_harmony_walk(t, cut, 0, raw, calls, &spos, fz_emit, &s);
        else
            srv_harmony_walk(t, n / 2, 0, raw, calls, &spos, fz_emit, &s);
        srv_harmony_walk(t, n, 1, raw, calls, &spos, fz_emit, &s);
        if (s.len != w.len || memcmp(s.out, w.out, w.len) || memcmp(s.off, w.off, w.len * sizeof(size_t)))
            __builtin_trap();
    }
    free(w.out);
    free(w.off);
    free(s.out);
    free(s.off);
}

static void fz_think(const char *t, size_t n) {
    static const int modes[] = {0, 1, 2, 1 | SRV_THINK_SEED, 2 | SRV_THINK_SEED};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (int final = 0; final <= 1; final++) {
            size_t r0 = 0, r1 = 0, c0 = 0;
            if (!srv_think_split(t, n, modes[m], final, &r0, &r1, &c0)) continue;
            if (r0 > r1 || r1 > n || (c0 != SIZE_MAX && (c0 > n || c0 < r1))) __builtin_trap();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    static yyjson_doc *tools;
    if (!tools) tools = yyjson_read(TOOLS, sizeof TOOLS - 1, 0);
    const int fmt = data[0] % (SRV_TOOLS_HARMONY + 1);
    const size_t n = size - 1;
    char *t = malloc(n ? n : 1); /* exactly n bytes: ASan sees a read past the end */
    if (!t) return 0;
    memcpy(t, data + 1, n);
    fz_calls(fmt, t, n, yyjson_doc_get_root(tools));
    if (fmt == SRV_TOOLS_HARMONY) fz_harmony(t, n);
    fz_think(t, n);
    fz_touch(t, srv_utf8_whole(t, n));
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    srv_add_text(d, o, "content", t, n);
    size_t len = 0;
    char *js = yyjson_mut_write(d, 0, &len);
    if (!js || !yyjson_mut_obj_get(o, "content")) __builtin_trap();
    fz_touch(js, len);
    free(js);
    yyjson_mut_doc_free(d);
    free(t);
    return 0;
}

#if defined(STRATA_FUZZ_STANDALONE)
int main(int argc, char **argv) { return fz_replay("fuzz_tools", 4096, argc, argv); }
#endif
