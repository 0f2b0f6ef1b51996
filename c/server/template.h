/* template.h - chat templates: the Jinja subset GGUF files' tokenizer.chat_template use, rendered
 * as transformers' apply_chat_template renders them (jinja2 with trim_blocks and lstrip_blocks,
 * the loop controls, tojson as json.dumps with ensure_ascii off, raise_exception, strftime_now).
 * A template that uses something this renderer does not have fails with a message naming it:
 * never a silently different prompt. The context is JSON (messages, tools, add_generation_prompt,
 * bos_token, eos_token, and whatever else the caller adds).
 *
 *   char *out = NULL, err[256];
 *   if (tmpl_render(src, strlen(src), context_json, &out, err, sizeof err) != 0) fail(err);
 *   ... free(out);
 */
#ifndef STRATA_SERVER_TEMPLATE_H
#define STRATA_SERVER_TEMPLATE_H

#include <stddef.h>

/* Renders template src (len bytes) with the variables of context_json (a JSON object, NUL-
 * terminated). 0 with *out (malloc'd, NUL-terminated); -1 with err set (a parse error with its
 * line, a feature not supported, raise_exception's message, or an error of the template's own
 * logic such as adding a string to a number). */
int tmpl_render(const char *src, size_t len, const char *context_json, char **out, char *err, size_t errsz);

#endif /* STRATA_SERVER_TEMPLATE_H */
