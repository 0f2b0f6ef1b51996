/* text.h - the server's text helpers (text.c): where generated text may be cut for a stream,
 * model output made valid UTF-8 for JSON, and a chat answer's <think> part split from its content. */
#ifndef STRATA_SERVER_TEXT_H
#define STRATA_SERVER_TEXT_H

#include "yyjson.h"

#include <stddef.h>

/* The length of s's prefix (n bytes) that does not end inside a UTF-8 character. */
size_t srv_utf8_whole(const char *s, size_t n);
/* obj[key] = s (n bytes) as a JSON string, each byte sequence that is not UTF-8 as U+FFFD. */
void srv_add_text(yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *s, size_t n);
/* A chat answer t[0..n): its reasoning [*r0, *r1) and its content from *c0 (SIZE_MAX: none yet).
 * think 0: no reasoning (content from 0); 1: reasoning when t starts with <think>; 2: the prompt
 * opened one. Reasoning ends at </think>; the content starts past the blank lines after it. Not
 * final (a stream): a partial </think> at the end is held back, and a start that could still
 * become <think> decides nothing (returns 0; 1 otherwise). */
int srv_think_split(const char *t, size_t n, int think, int final, size_t *r0, size_t *r1, size_t *c0);

/* Tool calls written as Hermes / Qwen templates ask: <tool_call>JSON</tool_call> blocks. The
 * offset of the first "<tool_call>" in t[0..n) (or, not final, of a partial one at the end; n
 * when none). */
size_t srv_tool_start(const char *t, size_t n, int final);
/* The tool calls of t[0..n) from its first block on as a JSON array of OpenAI tool_calls
 * ({id, type, function: {name, arguments (a JSON string)}}) added to obj[key]; 0 with *n_calls
 * set when every block parsed as {"name", "arguments"} and nothing but blank text lies between
 * them, -1 otherwise (the caller keeps the text as content: nothing is lost). */
int srv_tool_calls(yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *t, size_t n, int *n_calls);

#endif /* STRATA_SERVER_TEXT_H */
