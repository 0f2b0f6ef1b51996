/* test_server_text.c - the server's text helpers (c/server/text.c): where a stream may cut UTF-8,
 * model bytes repaired for JSON (U+FFFD for what is not UTF-8), and a chat answer's <think>
 * reasoning split from its content: opened by the prompt or by the answer, closed by </think>,
 * the content past blank lines, a partial tag held back while streaming, an answer that never
 * thinks left whole (Seed-OSS's <seed:think> too); and tool calls (Hermes <tool_call> blocks,
 * Llama 3.x bare JSON, Mistral [TOOL_CALLS], DeepSeek's tokens, GLM's <arg_key> pairs, Qwen3-Coder's
 * XML, Kimi-K2's tokens, functionary v3.1's <function=> and v3.2's >>> segments, Seed-OSS's
 * <seed:tool_call> XML) read into OpenAI's tool_calls against written-out JSON, or, when
 * anything does not parse (malformed, truncated, hostile), left to the content; where a stream's
 * content stops (a partial mark held back); and each real template in ../shared/chat_templates
 * told as its family; each answer also through fuzz_tools's entry point (c/fuzz/fuzz_tools.c). */
#include "test.h"
#include "text.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
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


#define DS_(x) "<\xEF\xBD\x9Ctool\xE2\x96\x81" x "\xEF\xBD\x9C>"
#define DS_BEGIN DS_("calls\xE2\x96\x81" "begin")
#define DS_END DS_("calls\xE2\x96\x81" "end")
#define DS_CALL DS_("call\xE2\x96\x81" "begin")
#define DS_CALL_END DS_("call\xE2\x96\x81" "end")
#define DS_SEP DS_("sep")
 /* llama.cpp's message_assist_call: special_function(arg1 = 1) */
#define SF1_CALL "{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"special_function\",\"arguments\":" \
                 "\"{\\\"arg1\\\":1}\"}}"
#define SF1 "{\"c\":[" SF1_CALL "]}"
#define ONE_F "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]}"
#define KM_SECTION "<|tool_calls_section_begin|>"
#define KM_SECTION_END "<|tool_calls_section_end|>"
#define KM_CALL "<|tool_call_begin|>"
#define KM_ARGS "<|tool_call_argument_begin|>"
#define KM_CALL_END "<|tool_call_end|>"
#define CALL(id, name, args) "{\"id\":\"" id "\",\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"arguments\":\"" args "\"}}"
#define SF1_SEED "<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n</seed:tool_call>"

/* The request's tools the XML formats read their argument types from (llama.cpp's test tools:
 * special_function(arg1: integer), special_function_with_opt(arg1, arg2: integer), python(code:
 * string), and say(text: string, mode: an enum of strings)). */
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"special_function\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"arg1\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"special_function_with_opt\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"arg1\":{\"type\":\"integer\"},\"arg2\":{\"type\":\"integer\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"python\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"code\":{\"type\":\"string\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"say\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"text\":{\"type\":\"string\"},\"mode\":{\"enum\":[\"a\",\"b\"]}}}}}]";
static yyjson_val *g_tools;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* c/fuzz/fuzz_tools.c's entry point on one answer: fmt as the input's first byte, then t (n bytes;
 * it traps on a broken promise, ASan and UBSan watch the rest). */
static void fuzz_one(int fmt, const char *t, size_t n) {
    static uint8_t buf[4096];
    if (n + 1 > sizeof buf) return;
    buf[0] = (uint8_t)fmt;
    memcpy(buf + 1, t, n);
    LLVMFuzzerTestOneInput(buf, n + 1);
}

/* One answer through a format's parser: want calls (-1: none, the text stays content), the
 * tool_calls JSON written (NULL: not compared) and, with calls, the content's length before them. */
static void tool_case(int fmt, const char *t, size_t n, int calls, const char *json, size_t content) {
    yyjson_mut_doc *d = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    int k = 0;
    const int rc = srv_tool_calls(fmt, d, o, "c", t, n, g_tools, &k);
    char *js = yyjson_mut_write(d, 0, NULL);
    const size_t s = srv_tool_start(fmt, t, n, 1);
    const int ok = calls < 0 ? rc == -1 : rc == 0 && k == calls && (!json || !strcmp(js, json)) && s == content;
    CHECK(ok, "format %d, '%.80s': rc %d, %d calls, start %zu, %.300s", fmt, t, rc, k, s, js);
    free(js);
    yyjson_mut_doc_free(d);
}

static void tool_cases(void) {
    static const struct { int fmt; const char *t; int calls; const char *json; size_t content; } tc[] = {
        /* Hermes / Qwen */
        {SRV_TOOLS_HERMES, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", 1, ONE_F, 6},
        {SRV_TOOLS_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>\n<tool_call>{\"name\": \"b\", "
                           "\"arguments\": {}}</tool_call>\n", 2, NULL, 0},
        {SRV_TOOLS_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then text", -1, NULL, 0},
        {SRV_TOOLS_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": {}}", -1, NULL, 0},
        {SRV_TOOLS_HERMES, "<tool_call>{\"name\": 3}</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_HERMES, "<tool_call>not json</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_HERMES, "no calls at all", -1, NULL, 0},
        {SRV_TOOLS_NONE, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", -1, NULL, 0},
        /* Llama 3.x */
        {SRV_TOOLS_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"x\": 1}}", 1, ONE_F, 0},
        {SRV_TOOLS_LLAMA3, "  <|python_tag|>{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n", 1, ONE_F, 2},
        {SRV_TOOLS_LLAMA3, "Let me look.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}", 1, ONE_F, 12},
        {SRV_TOOLS_LLAMA3, "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"y\": [1]}}", 2, NULL, 0},
        {SRV_TOOLS_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"x\": 1}", -1, NULL, 0},     /* unclosed */
        {SRV_TOOLS_LLAMA3, "{\"answer\": 42}", -1, NULL, 0},                                /* JSON, not a call */
        {SRV_TOOLS_LLAMA3, "{\"name\": \"f\", \"parameters\": {}} trailing words", -1, NULL, 0},
        {SRV_TOOLS_LLAMA3, "The answer is {\"name\": \"f\"}", -1, NULL, 0},                 /* prose first */
        {SRV_TOOLS_LLAMA3, "<|python_tag|>", -1, NULL, 0},
        /* Mistral */
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"abcDEF123\"}]", 1,
         "{\"c\":[{\"id\":\"abcDEF123\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]}", 0},
        {SRV_TOOLS_MISTRAL, "Calling.\n[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": \"{}\"}]",
         2, NULL, 9},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS]f[ARGS]{\"x\": 1}", 1,
         "{\"c\":[{\"id\":\"call00000\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]}", 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS]a[CALL_ID]A1b2C3d4E[ARGS]{}[TOOL_CALLS]b[ARGS]{\"y\": 2}", 2,
         "{\"c\":[{\"id\":\"A1b2C3d4E\",\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}},"
         "{\"id\":\"call00001\",\"type\":\"function\",\"function\":{\"name\":\"b\",\"arguments\":\"{\\\"y\\\":2}\"}}]}", 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": }]", -1, NULL, 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] []", -1, NULL, 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS]f[AR", -1, NULL, 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS]f{\"x\": 1}", -1, NULL, 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CA", -1, NULL, 0},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}] more", -1, NULL, 0},
        /* DeepSeek */
        {SRV_TOOLS_DEEPSEEK, "Ok." DS_BEGIN DS_CALL "function" DS_SEP "f\n```json\n{\"x\": 1}\n```" DS_CALL_END DS_END, 1,
         ONE_F, 3},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function" DS_SEP "a\n```json\n{}\n```" DS_CALL_END "\n" DS_CALL "function"
         DS_SEP "b\n```json\n{\"y\": 2}\n```" DS_CALL_END DS_END "\n", 2, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "f" DS_SEP "{\"x\": 1}" DS_CALL_END DS_END, 1, ONE_F, 0}, /* V3.1 */
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function" DS_SEP "f\n```json\n{\"x\": 1\n```" DS_CALL_END DS_END, -1, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function" DS_SEP "f\n```json\n{\"x\": 1}\n```" DS_CALL_END, -1, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function" DS_SEP "f\n```json\n{\"x\": 1}", -1, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function", -1, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function" DS_SEP "f\n```json\n{\"x\": 1}\n" DS_CALL_END DS_END, -1, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_END, -1, NULL, 0},
        {SRV_TOOLS_DEEPSEEK, "<\xEF\xBD\x9Ctool", -1, NULL, 0},
        /* GLM-4.5 / 4.6 / 4.7 (llama.cpp tests/test-chat.cpp's GLM-4.6 and GLM-4.7-Flash answers) */
        {SRV_TOOLS_GLM, "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>", 1,
         SF1, 0},
        {SRV_TOOLS_GLM, "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>", 1, SF1, 0},
        {SRV_TOOLS_GLM, "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>"
                        "<tool_call>special_function_with_opt<arg_key>arg1</arg_key><arg_value>1</arg_value>"
                        "<arg_key>arg2</arg_key><arg_value>2</arg_value></tool_call>", 2,
         "{\"c\":[" SF1_CALL ",{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
         "\"special_function_with_opt\",\"arguments\":\"{\\\"arg1\\\":1,\\\"arg2\\\":2}\"}}]}", 0},
        {SRV_TOOLS_GLM, "Reading.\n<tool_call>read_file_diff_md</tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"read_file_diff_md\",\"arguments\":"
         "\"{}\"}}]}", 9},
        /* values: JSON where they parse (tojson wrote them), text where not or where the schema says string */
        {SRV_TOOLS_GLM, "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>[1, \"x\"]</arg_value>\n<arg_key>b</arg_key>\n"
                        "<arg_value>Paris, France</arg_value>\n<arg_key>c</arg_key><arg_value>{\"k\": null}</arg_value></tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
         "\"{\\\"a\\\":[1,\\\"x\\\"],\\\"b\\\":\\\"Paris, France\\\",\\\"c\\\":{\\\"k\\\":null}}\"}}]}", 0},
        {SRV_TOOLS_GLM, "<tool_call>say<arg_key>text</arg_key><arg_value>12</arg_value><arg_key>mode</arg_key>"
                        "<arg_value>true</arg_value></tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"say\",\"arguments\":"
         "\"{\\\"text\\\":\\\"12\\\",\\\"mode\\\":\\\"true\\\"}\"}}]}", 0},
        {SRV_TOOLS_GLM, "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>", -1, NULL, 0},     /* unclosed */
        {SRV_TOOLS_GLM, "<tool_call>f<arg_key>a</arg_key></tool_call>", -1, NULL, 0},              /* no value */
        {SRV_TOOLS_GLM, "<tool_call>f<arg_key>a</arg_key><arg_value>1</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_GLM, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", -1, NULL, 0},  /* Hermes JSON */
        {SRV_TOOLS_GLM, "<tool_call>f</tool_call> and then text", -1, NULL, 0},
        {SRV_TOOLS_GLM, "<tool_call></tool_call>", -1, NULL, 0},
        /* Qwen3-Coder XML (llama.cpp tests/test-chat.cpp's Qwen3-Coder answers) */
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n"
                             "</tool_call>", 1, SF1, 0},
        {SRV_TOOLS_QWEN_XML, "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>", 1,
         SF1, 0},
        {SRV_TOOLS_QWEN_XML, "Let me call it.\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n"
                             "</tool_call>", 1, SF1, 16},
        {SRV_TOOLS_QWEN_XML, "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n"
                             "<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>\n"
                             "<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>", 2,
         "{\"c\":[" SF1_CALL ",{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
         "\"special_function_with_opt\",\"arguments\":\"{\\\"arg1\\\":1,\\\"arg2\\\":2}\"}}]}", 0},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n    print(\"Hello, world!\")\n\n"
                             "hello()\n</parameter>\n</function>\n</tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"python\",\"arguments\":"
         "\"{\\\"code\\\":\\\"def hello():\\\\n    print(\\\\\\\"Hello, world!\\\\\\\")\\\\n\\\\nhello()\\\"}\"}}]}", 0},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=python>\n<parameter=code>\n\xe6\xa0\xbc\n</parameter>\n</function>\n</tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"python\",\"arguments\":"
         "\"{\\\"code\\\":\\\"\xe6\xa0\xbc\\\"}\"}}]}", 0},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=python>\n<parameter=code>\n1\n</parameter>\n</function>\n</tool_call>", 1,
         "{\"c\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":{\"name\":\"python\",\"arguments\":"
         "\"{\\\"code\\\":\\\"1\\\"}\"}}]}", 0},   /* a string by its schema */
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=f>\n</function>\n</tool_call>\n<function=g>\n</function>\n</tool_call>", -1,
         NULL, 0},                                                          /* only the first may leave out <tool_call> */
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=>\n</function>\n</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_QWEN_XML, "#include <functional>", -1, NULL, 0},
        /* Kimi-K2 (the marks of its templates and llama.cpp's parser): the id as written */
        {SRV_TOOLS_KIMI, "Let me check." KM_SECTION KM_CALL "functions.special_function:0" KM_ARGS "{\"arg1\": 1}"
                         KM_CALL_END KM_SECTION_END, 1,
         "{\"c\":[" CALL("functions.special_function:0", "special_function", "{\\\"arg1\\\":1}") "]}", 13},
        {SRV_TOOLS_KIMI, KM_SECTION "\n" KM_CALL "functions.a:0" KM_ARGS "{}" KM_CALL_END "\n" KM_CALL " functions.b_c:1 " KM_ARGS
                         " {\"y\": [2]}" KM_CALL_END KM_SECTION_END "\n", 2,
         "{\"c\":[" CALL("functions.a:0", "a", "{}") "," CALL("functions.b_c:1", "b_c", "{\\\"y\\\":[2]}") "]}", 0},
        {SRV_TOOLS_KIMI, KM_CALL "functions.f:12" KM_ARGS "{\"x\": 1}", 1,                     /* no section, no end marks */
         "{\"c\":[" CALL("functions.f:12", "f", "{\\\"x\\\":1}") "]}", 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "f" KM_ARGS "{}" KM_CALL_END KM_SECTION_END, -1, NULL, 0}, /* not functions.NAME:IDX */
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.f" KM_ARGS "{}" KM_CALL_END KM_SECTION_END, -1, NULL, 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.:0" KM_ARGS "{}" KM_CALL_END KM_SECTION_END, -1, NULL, 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.f:0" KM_ARGS "{\"x\": " KM_CALL_END KM_SECTION_END, -1, NULL, 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.f:0" KM_ARGS "[1]" KM_CALL_END KM_SECTION_END, -1, NULL, 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.f:0" KM_ARGS "{}" KM_CALL_END KM_SECTION_END " more", -1, NULL, 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_SECTION_END, -1, NULL, 0},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.f:0", -1, NULL, 0},
        /* functionary v3.1 */
        {SRV_TOOLS_FUNC31, "Sure. <function=special_function>{\"arg1\": 1}</function>", 1, SF1, 6},
        {SRV_TOOLS_FUNC31, "<function=a>{}</function>\n<function=b>{\"y\": 2}</function>\n", 2,
         "{\"c\":[" CALL("call_0", "a", "{}") "," CALL("call_1", "b", "{\\\"y\\\":2}") "]}", 0},
        {SRV_TOOLS_FUNC31, "<|python_tag|>print('hi')", 1, "{\"c\":[" CALL("call_0", "python", "{\\\"code\\\":\\\"print('hi')\\\"}") "]}",
         0},
        {SRV_TOOLS_FUNC31, "Running.<function=a>{}</function><|python_tag|>x = 1", 2,
         "{\"c\":[" CALL("call_0", "a", "{}") "," CALL("call_1", "python", "{\\\"code\\\":\\\"x = 1\\\"}") "]}", 8},
        {SRV_TOOLS_FUNC31, "<function=a>{\"x\": 1}", -1, NULL, 0},                              /* unclosed */
        {SRV_TOOLS_FUNC31, "<function=a b>{}</function>", -1, NULL, 0},
        {SRV_TOOLS_FUNC31, "<function=>{}</function>", -1, NULL, 0},
        {SRV_TOOLS_FUNC31, "<function=a>[1]</function>", -1, NULL, 0},
        {SRV_TOOLS_FUNC31, "<function=a>{}</function> then text", -1, NULL, 0},
        {SRV_TOOLS_FUNC31, "<|python_tag|> \n", -1, NULL, 0},
        {SRV_TOOLS_FUNC31, "<|python_tag|>\xff", -1, NULL, 0},                                    /* not UTF-8 */
        {SRV_TOOLS_FUNC31, "no calls", -1, NULL, 0},
        /* functionary v3.2: the prompt wrote the first >>> */
        {SRV_TOOLS_FUNC32, "special_function\n{\"arg1\": 1}", 1, SF1, 0},
        {SRV_TOOLS_FUNC32, "all\nLet me check.>>>special_function\n{\"arg1\": 1}", 1, SF1, 17},
        {SRV_TOOLS_FUNC32, "a\n{}>>>b\n{\"y\": 2}\n", 2,
         "{\"c\":[" CALL("call_0", "a", "{}") "," CALL("call_1", "b", "{\\\"y\\\":2}") "]}", 0},
        {SRV_TOOLS_FUNC32, "python\nprint(1)>>>f\n{}", 2,
         "{\"c\":[" CALL("call_0", "python", "{\\\"code\\\":\\\"print(1)\\\"}") "," CALL("call_1", "f", "{}") "]}", 0},
        {SRV_TOOLS_FUNC32, "all\nJust text.", -1, NULL, 0},
        {SRV_TOOLS_FUNC32, "f\n{\"x\": 1", -1, NULL, 0},
        {SRV_TOOLS_FUNC32, "f\nnot json", -1, NULL, 0},
        {SRV_TOOLS_FUNC32, "all\nA>>>all\nB", -1, NULL, 0},
        {SRV_TOOLS_FUNC32, "f\n{}>>>g\n[1]", -1, NULL, 0},
        {SRV_TOOLS_FUNC32, "f\n{} trailing", -1, NULL, 0},
        {SRV_TOOLS_FUNC32, "all\nA>>>g h\n{}", -1, NULL, 0},
        /* Seed-OSS: Qwen3-Coder's XML in <seed:tool_call> blocks, values typed as it types them */
        {SRV_TOOLS_SEED, SF1_SEED, 1, SF1, 0},
        {SRV_TOOLS_SEED, "Checking.\n" SF1_SEED "\n<seed:tool_call>\n<function=say>\n<parameter=text>12</parameter>\n"
                         "<parameter=mode>a</parameter>\n</function>\n</seed:tool_call>", 2,
         "{\"c\":[" SF1_CALL "," CALL("call_1", "say", "{\\\"text\\\":\\\"12\\\",\\\"mode\\\":\\\"a\\\"}") "]}", 10},
        {SRV_TOOLS_SEED, "<seed:tool_call>\n<function=python>\n<parameter=code>def f():\n    return 1\n</parameter>\n</function>\n"
                         "</seed:tool_call>", 1,
         "{\"c\":[" CALL("call_0", "python", "{\\\"code\\\":\\\"def f():\\\\n    return 1\\\"}") "]}", 0},
        {SRV_TOOLS_SEED, "<function=special_function>\n<parameter=arg1>1</parameter>\n</function>\n</seed:tool_call>", -1, NULL,
         0},                                                                             /* no bare first call */
        {SRV_TOOLS_SEED, "<seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</function>", -1, NULL, 0},
        {SRV_TOOLS_SEED, "<seed:tool_call>\n<function=f>\n<parameter=a>1</parameter>\n</seed:tool_call>", -1, NULL, 0},
        {SRV_TOOLS_SEED, "<seed:tool_call>\n<function=f>\n</function>\n</tool_call>", -1, NULL, 0},
        {SRV_TOOLS_SEED, "<seed:tool_call>{\"name\": \"f\", \"arguments\": {}}</seed:tool_call>", -1, NULL, 0},
    };
    for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++)
        tool_case(tc[i].fmt, tc[i].t, strlen(tc[i].t), tc[i].calls, tc[i].json, tc[i].content);
    for (size_t i = 0; i < sizeof tc / sizeof tc[0]; i++) fuzz_one(tc[i].fmt, tc[i].t, strlen(tc[i].t));
    static const char *const harmony[] = {
        "<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json"
        "<|message|>{\"x\": 1}<|call|>",
        "<|channel|>final<|message|>Hi \xe2\x82\xac<|end|><|start|>assistant<|channel|>fin",
        "<|channel|>commentary to=container.exec<|message|>ls<|end|><|channel|><|message|><|end|>",
        /* libFuzzer's: a malformed call closed before more messages, which the stream dropped */
        "<|channel|>comment\v<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.f<|channel|>"
        "commentary <|constrain|>json<|message|>{\"x\"ary t: 1}<|calo=container.exec<|message|>ls<|end|><|ch"
        "<seed:thage|>nnel|><|messal|>ge|><|end|>",
    };
    for (size_t i = 0; i < sizeof harmony / sizeof harmony[0]; i++)
        fuzz_one(SRV_TOOLS_HARMONY, harmony[i], strlen(harmony[i]));
    CHECK(1, "fuzz_tools's entry point ran on every answer above (ASan / UBSan watch it)");
    /* where a stream stops its content: partial markers held back, only while not final */
    CHECK(srv_tool_start(SRV_TOOLS_HERMES, "ab<tool_call>", 13, 1) == 2 &&
          srv_tool_start(SRV_TOOLS_HERMES, "ab<tool_c", 9, 0) == 2 && srv_tool_start(SRV_TOOLS_HERMES, "ab<tool_c", 9, 1) == 9 &&
          srv_tool_start(SRV_TOOLS_HERMES, "abc", 3, 0) == 3, "where Hermes calls start");
    CHECK(srv_tool_start(SRV_TOOLS_LLAMA3, " {", 2, 0) == 1 && srv_tool_start(SRV_TOOLS_LLAMA3, "  ", 2, 0) == 2 &&
          srv_tool_start(SRV_TOOLS_LLAMA3, "Hi <|pyth", 9, 0) == 3 && srv_tool_start(SRV_TOOLS_LLAMA3, "Hi <|pyth", 9, 1) == 9 &&
          srv_tool_start(SRV_TOOLS_LLAMA3, "Hi {", 4, 0) == 4, "where Llama 3.x calls start");
    CHECK(srv_tool_start(SRV_TOOLS_MISTRAL, "ok [TOOL", 8, 0) == 3 && srv_tool_start(SRV_TOOLS_MISTRAL, "ok [TOOL", 8, 1) == 8 &&
          srv_tool_start(SRV_TOOLS_MISTRAL, "a [b]", 5, 0) == 5, "where Mistral calls start");
    CHECK(srv_tool_start(SRV_TOOLS_DEEPSEEK, "ok<\xEF\xBD\x9Ctool\xE2", 10, 0) == 2 &&
          srv_tool_start(SRV_TOOLS_DEEPSEEK, "ok " DS_BEGIN, 3 + strlen(DS_BEGIN), 1) == 3, "where DeepSeek calls start");
    CHECK(srv_tool_start(SRV_TOOLS_NONE, "<tool_call>", 11, 0) == 11, "no format: no calls");
    CHECK(srv_tool_start(SRV_TOOLS_GLM, "ab<tool_c", 9, 0) == 2 && srv_tool_start(SRV_TOOLS_GLM, "ab<tool_c", 9, 1) == 9,
          "where GLM calls start");
    CHECK(srv_tool_start(SRV_TOOLS_QWEN_XML, "ab<tool_c", 9, 0) == 2 && srv_tool_start(SRV_TOOLS_QWEN_XML, "ab<func", 7, 0) == 2 &&
          srv_tool_start(SRV_TOOLS_QWEN_XML, "ab<func", 7, 1) == 7 && srv_tool_start(SRV_TOOLS_QWEN_XML, "a<function=f>", 13, 1) == 1 &&
          srv_tool_start(SRV_TOOLS_QWEN_XML, "<functional>", 12, 0) == 12, "where Qwen3-Coder calls start");
    CHECK(srv_tool_start(SRV_TOOLS_KIMI, "ok<|tool_ca", 11, 0) == 2 && srv_tool_start(SRV_TOOLS_KIMI, "ok<|tool_ca", 11, 1) == 11 &&
          srv_tool_start(SRV_TOOLS_KIMI, "ok<|tool_calls_sec", 18, 0) == 2 &&
          srv_tool_start(SRV_TOOLS_KIMI, "ok " KM_CALL, 3 + strlen(KM_CALL), 1) == 3, "where Kimi-K2 calls start");
    CHECK(srv_tool_start(SRV_TOOLS_FUNC31, "Hi <func", 8, 0) == 3 && srv_tool_start(SRV_TOOLS_FUNC31, "Hi <|pyt", 8, 0) == 3 &&
          srv_tool_start(SRV_TOOLS_FUNC31, "Hi <func", 8, 1) == 8 && srv_tool_start(SRV_TOOLS_FUNC31, "a <b>", 5, 0) == 5,
          "where functionary v3.1 calls start");
    CHECK(srv_tool_start(SRV_TOOLS_FUNC32, "al", 2, 0) == 0 && srv_tool_start(SRV_TOOLS_FUNC32, "all\nHi>", 7, 0) == 6 &&
          srv_tool_start(SRV_TOOLS_FUNC32, "all\nHi>", 7, 1) == 7 && srv_tool_start(SRV_TOOLS_FUNC32, "get_w", 5, 0) == 0 &&
          srv_tool_start(SRV_TOOLS_FUNC32, "f\n", 2, 0) == 0 && srv_tool_start(SRV_TOOLS_FUNC32, "f\n {", 4, 0) == 0 &&
          srv_tool_start(SRV_TOOLS_FUNC32, "Hello world", 11, 0) == 11 &&
          srv_tool_start(SRV_TOOLS_FUNC32, "Sure\nThe", 8, 0) == 8 && srv_tool_start(SRV_TOOLS_FUNC32, "al", 2, 1) == 2,
          "where functionary v3.2 calls start");
    CHECK(srv_tool_skip(SRV_TOOLS_FUNC32, "all\nx", 5) == 4 && srv_tool_skip(SRV_TOOLS_FUNC32, "all", 3) == 0 &&
          srv_tool_skip(SRV_TOOLS_FUNC32, "ball\n", 5) == 0 && srv_tool_skip(SRV_TOOLS_HERMES, "all\nx", 5) == 0,
          "functionary v3.2's all line is not content");
    CHECK(srv_tool_start(SRV_TOOLS_SEED, "ab<seed:tool", 12, 0) == 2 && srv_tool_start(SRV_TOOLS_SEED, "ab<seed:tool", 12, 1) == 12 &&
          srv_tool_start(SRV_TOOLS_SEED, "ab<tool_call>", 13, 0) == 13, "where Seed-OSS calls start");
}

/* Hostile answers: unterminated strings, deep nesting, lone markers, bytes cut short (read from
 * a buffer of exactly n bytes so ASan sees any read past it): each left as content, none crash. */
static void tool_hostile(void) {
    const size_t deep = 200000;
    char *b = malloc(2 * deep + 512); /* (the longest head is under 512 bytes) */
    if (!b) { CHECK(0, "out of memory"); return; }
    static const struct { int fmt; const char *head; } h[] = {
        {SRV_TOOLS_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": "}, {SRV_TOOLS_LLAMA3, "{\"name\": \"f\", \"parameters\": "},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS]f[ARGS]"}, {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": "},
        {SRV_TOOLS_DEEPSEEK, DS_BEGIN DS_CALL "function" DS_SEP "f\n```json\n"},
        {SRV_TOOLS_GLM, "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>"},
        {SRV_TOOLS_QWEN_XML, "<tool_call>\n<function=f>\n<parameter=a>\n"},
        {SRV_TOOLS_KIMI, KM_SECTION KM_CALL "functions.f:0" KM_ARGS}, {SRV_TOOLS_FUNC31, "<function=f>"},
        {SRV_TOOLS_FUNC32, "f\n{\"x\": "}, {SRV_TOOLS_FUNC32, "all\nText>>>f\n{\"x\": "},
        {SRV_TOOLS_SEED, "<seed:tool_call>\n<function=f>\n<parameter=a>"},
    };
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) {
        const size_t hl = strlen(h[i].head);
        memcpy(b, h[i].head, hl); /* nesting never closed */
        memset(b + hl, '[', deep);
        char *e = malloc(hl + deep);
        if (e) {
            memcpy(e, b, hl + deep);
            tool_case(h[i].fmt, e, hl + deep, -1, NULL, 0);
            for (size_t cut = 0; cut < hl; cut++) tool_case(h[i].fmt, e, cut, -1, NULL, 0); /* every truncation */
            free(e);
        }
        memcpy(b + hl, "\"unterminated \\\"string", 22);
        tool_case(h[i].fmt, b, hl + 22, -1, NULL, 0);
        memset(b + hl, '[', deep); /* nesting closed: arguments that are not an object */
        memset(b + hl + deep, ']', deep);
        tool_case(h[i].fmt, b, hl + 2 * deep, -1, NULL, 0);
    }
    free(b);
}

/* A file's bytes, NUL-terminated (NULL when it cannot be read). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1)) && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* The real templates (../shared/chat_templates, STRATA_CHAT_TEMPLATES to move it): each family's
 * files told as that family; every other file Hermes when it has <tool_call>, else none. */
static void tool_detect(void) {
    static const struct { const char *prefix; int fmt; } fam[] = {
        {"meta-llama-Llama-3.1", SRV_TOOLS_LLAMA3}, {"meta-llama-Llama-3.2", SRV_TOOLS_LLAMA3},
        {"meta-llama-Llama-3.3", SRV_TOOLS_LLAMA3}, {"mistralai-Mistral-Nemo", SRV_TOOLS_MISTRAL},
        {"Mistral-Small-3.2", SRV_TOOLS_MISTRAL}, {"mistralai-Ministral-3", SRV_TOOLS_MISTRAL},
        {"unsloth-mistral-Devstral", SRV_TOOLS_MISTRAL}, {"deepseek-ai-DeepSeek-R1", SRV_TOOLS_DEEPSEEK},
        {"deepseek-ai-DeepSeek-V3.1", SRV_TOOLS_DEEPSEEK}, {"llama-cpp-deepseek-r1", SRV_TOOLS_DEEPSEEK},
        {"NousResearch-Hermes-3-Llama-3.1", SRV_TOOLS_HERMES}, {"meetkai-functionary-medium-v3.1", SRV_TOOLS_FUNC31},
        {"meetkai-functionary-medium-v3.2", SRV_TOOLS_FUNC32}, {"moonshotai-Kimi-K2", SRV_TOOLS_KIMI},
        {"Kimi-K2-", SRV_TOOLS_KIMI},
        {"openai-gpt-oss", SRV_TOOLS_HARMONY}, {"GLM-4.6", SRV_TOOLS_GLM}, {"GLM-4.7", SRV_TOOLS_GLM},
        {"poolside-Laguna", SRV_TOOLS_GLM}, {"Qwen3-Coder", SRV_TOOLS_QWEN_XML}, {"Qwen3.5", SRV_TOOLS_QWEN_XML},
        {"NVIDIA-Nemotron-3", SRV_TOOLS_QWEN_XML}, {"StepFun3.5", SRV_TOOLS_QWEN_XML},
        {"NousResearch-Hermes-2-Pro", SRV_TOOLS_HERMES}, {"Qwen-Qwen2.5", SRV_TOOLS_HERMES}, {"Qwen-Qwen3-0.6B", SRV_TOOLS_HERMES},
        {"ByteDance-Seed-OSS", SRV_TOOLS_SEED},
    };
    const char *dir = getenv("STRATA_CHAT_TEMPLATES") ? getenv("STRATA_CHAT_TEMPLATES") : "../shared/chat_templates";
    DIR *dd = opendir(dir);
    if (!dd) { SKIP("no %s: template detection not checked", dir); return; }
    int seen[sizeof fam / sizeof fam[0]] = {0}, files = 0;
    for (struct dirent *e; (e = readdir(dd));) {
        const size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 6, ".jinja")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *t = slurp(path);
        if (!t) { CHECK(0, "cannot read %s", path); continue; }
        int want = strstr(t, "<tool_call>") ? SRV_TOOLS_HERMES : SRV_TOOLS_NONE;
        for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++)
            if (!strncmp(e->d_name, fam[i].prefix, strlen(fam[i].prefix))) { want = fam[i].fmt; seen[i]++; break; }
        const int got = srv_tool_format(t);
        CHECK(got == want, "%s: format %d, want %d", e->d_name, got, want);
        files++;
        free(t);
    }
    closedir(dd);
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) CHECK(seen[i] > 0, "no template %s* in %s", fam[i].prefix, dir);
    CHECK(files > 0, "no templates in %s", dir);
}

int main(void) {
    yyjson_doc *tools = yyjson_read(TOOLS, sizeof TOOLS - 1, 0);
    g_tools = yyjson_doc_get_root(tools);
    CHECK(yyjson_is_arr(g_tools), "the test's tools parse");
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
    split("<seed:think>hmm</seed:think>\n\nAnswer", 1 | SRV_THINK_SEED, 1, "hmm", "Answer", 1); /* Seed-OSS's tags */
    split("still</seed:thi", 2 | SRV_THINK_SEED, 0, "still", NULL, 1);
    split("<seed:th", 1 | SRV_THINK_SEED, 0, "", NULL, 0);
    split("<think>a</think>b", 1 | SRV_THINK_SEED, 1, "", "<think>a</think>b", 1);   /* not its tags */
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
    /* not UTF-8 though each lead byte has its continuation bytes: overlong, a surrogate, past
       U+10FFFF (yyjson's writer refuses them: libFuzzer's finding through fuzz_tools) */
    d = yyjson_mut_doc_new(NULL);
    o = yyjson_mut_obj(d);
    yyjson_mut_doc_set_root(d, o);
    srv_add_text(d, o, "t", "\xc1\x8c|\xe0\x80\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xf0\x9f\x98\x80", 20);
    s = yyjson_mut_write(d, 0, NULL);
#define FFFD "\xef\xbf\xbd"
    CHECK(s && !strcmp(s, "{\"t\":\"" FFFD FFFD "|" FFFD FFFD FFFD "|" FFFD FFFD FFFD "|" FFFD FFFD FFFD FFFD
                          "|\xf0\x9f\x98\x80\"}"), "ill-formed UTF-8 as U+FFFD: %s", s ? s : "(write failed)");
    free(s);
    yyjson_mut_doc_free(d);
    tool_case(SRV_TOOLS_MISTRAL, "[TOOL_CALLS]f\xc1\x8c[ARGS]{}", 23, 1,
              "{\"c\":[{\"id\":\"call00000\",\"type\":\"function\",\"function\":{\"name\":\"f" FFFD FFFD
              "\",\"arguments\":\"{}\"}}]}", 0);
#undef FFFD
    static const char crash[] = "<tool\xa1\x9c\x9e\x93\x93\xc1\x8c\x8f" "ecial_function<arg_key>arg1</arg_key>"
                                "<arg_value>1</arg_value></tool_call>";
    fuzz_one(SRV_TOOLS_GLM, crash, sizeof crash - 1); /* (the harness traps when the content's write fails) */
    tool_cases();
    tool_hostile();
    tool_detect();
    yyjson_doc_free(tools);
    return test_report();
}
