/* chat_context.h - the chat template's context (the JSON that template.h's tmpl_render reads) for
 * a model: the variables every rendering gets besides the conversation. Shared by the server's
 * /v1/chat/completions, `strata run --chat` and `strata template -m`, so the three render a
 * conversation alike. Public API and yyjson only: no server internals. */
#ifndef STRATA_SERVER_CHAT_CONTEXT_H
#define STRATA_SERVER_CHAT_CONTEXT_H

#include "strata.h"
#include "yyjson.h"

/* Adds to object o of document d whichever of these o does not have yet: bos_token and eos_token
 * (the model's texts, "" where it has none) and, when add_generation_prompt >= 0, that flag.
 * 0, or -1 when out of memory. */
int chat_context_defaults(yyjson_mut_doc *d, yyjson_mut_val *o, const strata_model *m, int add_generation_prompt);

#endif /* STRATA_SERVER_CHAT_CONTEXT_H */
