/* text.h - the server's text helpers (text.c): where generated text may be cut for a stream,
 * model output made valid UTF-8 for JSON, a chat answer's <think> part split from its content,
 * and its tool calls (tool_calls.c). */
#ifndef STRATA_SERVER_TEXT_H
#define STRATA_SERVER_TEXT_H

#include "yyjson.h"

#include <stddef.h>

/* The length of s's prefix (n bytes) that does not end inside a UTF-8 character. */
size_t srv_utf8_whole(const char *s, size_t n);
/* obj[key] = s (n bytes) as a JSON string, each byte sequence that is not UTF-8 as U+FFFD. */
void srv_add_text(yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *s, size_t n);
/* s (n bytes) as a JSON string value of d, repaired as srv_add_text does. */
yyjson_mut_val *srv_text_val(yyjson_mut_doc *d, const char *s, size_t n);
/* A chat answer t[0..n): its reasoning [*r0, *r1) and its content from *c0 (SIZE_MAX: none yet).
 * think 0: no reasoning (content from 0); 1: reasoning when t starts with <think>; 2: the prompt
 * opened one; either | SRV_THINK_SEED: the tags are Seed-OSS's <seed:think> </seed:think>.
 * Reasoning ends at </think>; the content starts past the blank lines after it. Not
 * final (a stream): a partial </think> at the end is held back, and a start that could still
 * become <think> decides nothing (returns 0; 1 otherwise). */
enum { SRV_THINK_SEED = 4 };
int srv_think_split(const char *t, size_t n, int think, int final, size_t *r0, size_t *r1, size_t *c0);

/* Tool call formats, told from the chat template (srv_tool_format): none (calls stay content),
 * Hermes / Qwen <tool_call>{JSON}</tool_call> blocks, Llama 3.x's bare {"name", "parameters"}
 * object (after <|python_tag|> or as the whole answer), Mistral's [TOOL_CALLS] (a JSON array,
 * or name[CALL_ID]id[ARGS]{JSON} each), DeepSeek V3 / R1's <｜tool▁calls▁begin｜> tokens, GLM-4.5's <tool_call>NAME <arg_key>K</arg_key>
 * <arg_value>V</arg_value>... blocks, Qwen3-Coder's <tool_call><function=NAME><parameter=K>V
 * </parameter>...</function> blocks (their values: text where the tool's schema says string,
 * else JSON where they parse as it), Kimi-K2's <|tool_calls_section_begin|> <|tool_call_begin|>
 * functions.NAME:IDX <|tool_call_argument_begin|>{JSON} <|tool_call_end|>... (the id as written),
 * functionary v3.1's <function=NAME>{JSON}</function> (and <|python_tag|>CODE: python's
 * {"code"}), functionary v3.2's RECIPIENT\nBODY segments opened by >>> (all: content; a function:
 * {JSON}), Seed-OSS's <seed:tool_call> blocks of Qwen3-Coder's XML. */
enum { SRV_TOOLS_NONE, SRV_TOOLS_HERMES, SRV_TOOLS_LLAMA3, SRV_TOOLS_MISTRAL, SRV_TOOLS_DEEPSEEK, SRV_TOOLS_GLM,
       SRV_TOOLS_QWEN_XML, SRV_TOOLS_KIMI, SRV_TOOLS_FUNC31, SRV_TOOLS_FUNC32, SRV_TOOLS_SEED,
       SRV_TOOLS_HARMONY /* gpt-oss: read by srv_harmony_* below, not srv_tool_calls */ };
/* The format a chat template's text asks for, as llama.cpp tells it from marker strings. */
int srv_tool_format(const char *tmpl);
/* Where fmt's tool calls start in t[0..n) (not final: also a partial marker at the end, or, for
 * Llama 3.x, blank text so far; n when none): the content stops there. */
size_t srv_tool_start(int fmt, const char *t, size_t n, int final);
/* How many bytes at the start of t[0..n) frame the content rather than belong to it (functionary
 * v3.2's "all\n" recipient line; 0 for the other formats): the content is t[skip .. start). */
size_t srv_tool_skip(int fmt, const char *t, size_t n);
/* The tool calls of t[0..n) from where they start as a JSON array of OpenAI tool_calls
 * ({id, type, function: {name, arguments (a JSON string)}}) added to obj[key] (tools: the
 * request's, for the XML formats' value types; may be NULL); 0 with *n_calls
 * set when every call parsed and nothing but blanks lies between or after them, -1 otherwise
 * (the caller keeps the text as content: nothing is lost). */
int srv_tool_calls(int fmt, yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *t, size_t n,
                   yyjson_val *tools, int *n_calls);

/* Appends OpenAI tool call k ({id "call_k", type, function: {name, arguments}}) to arr, args
 * the arguments' JSON text (alen bytes). */
void srv_tool_call_add(yyjson_mut_doc *d, yyjson_mut_val *arr, int k, const char *name, size_t nlen, const char *args,
                       size_t alen);

/* gpt-oss's harmony answers (harmony.c), the text generated after the template's
 * <|start|>assistant. emit(u, reasoning, a, b): t[a..b) goes out as reasoning_content
 * (reasoning 1) or content. */
typedef void (*srv_emit_fn)(void *u, int reasoning, size_t a, size_t b);
/* Emits the answer's text past *pos (an offset in t, advanced): analysis messages' bodies as
 * reasoning (raw_reasoning: as content, with their <|channel|> headers and <|end|>, as llama.cpp's
 * reasoning_format none), final and commentary ones' as content, calls to functions.NAME held
 * (final: those whose arguments are not a JSON object as content; calls 0, the request without
 * tools: every one's body as content, as it comes), messages to other recipients
 * dropped, text that is not harmony as content. Not final (a stream): a header not whole yet and
 * what could still become a terminator or a UTF-8 character are held back. The ranges emitted
 * over a stream's calls, then a final one, are those one final call from 0 emits. */
void srv_harmony_walk(const char *t, size_t n, int final, int raw_reasoning, int calls, size_t *pos, srv_emit_fn emit,
                      void *u);
/* The answer's calls to functions.NAME with JSON object arguments as OpenAI tool_calls in
 * obj[key]; 0 with *n_calls set, -1 when there are none. */
int srv_harmony_calls(yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *t, size_t n, int *n_calls);

#endif /* STRATA_SERVER_TEXT_H */
