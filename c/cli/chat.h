/* chat.h - `strata run --chat`'s conversation: the system prompt and the user and assistant turns,
 * rendered each turn by the model's own chat template (tokenizer.chat_template or
 * --chat-template-file, through the server's Jinja renderer, c/server/template.h) or by a
 * built-in one (ChatML, Llama-2/Mistral [INST], plain text); what of the session's cache a turn
 * keeps, the tokens it reads, and the --chat-log lines. The generation itself is run.c's. */
#ifndef STRATA_CLI_CHAT_H
#define STRATA_CLI_CHAT_H

#include "options.h"

typedef struct cli_chat cli_chat;

/* cli_chat_user: the message cannot be rendered and was dropped (said on stderr). */
#define CLI_CHAT_DROPPED (-1)

/* The conversation of these options on model m (which template, said in one stderr line).
 * 0, or an exit code after printing why. */
int cli_chat_open(const cli_opts *o, const strata_model *m, cli_chat **out);
void cli_chat_free(cli_chat *c);

/* Adds user message msg. cache[0..n_cache) are the session's tokens in order. Returns 0 with the
 * tokens to read, *toks (malloc'd) of *n, after the first *keep of the cache (a rendering
 * template: the conversation rendered whole and tokenized, kept up to where it first differs
 * from the cache); CLI_CHAT_DROPPED when the template cannot render it (said on stderr, the
 * conversation as it was); else an exit code. */
int cli_chat_user(cli_chat *c, const char *msg, const strata_token *cache, int64_t n_cache,
                  int64_t *keep, strata_token **toks, int64_t *n);
/* The last user message was not read (too long): it leaves the conversation. */
void cli_chat_drop(cli_chat *c);
/* The answer to the last user message: text as printed; gen[0..n_gen) the tokens generated (in
 * the cache); closed: it ended with its end-of-generation token. Writes the --chat-log line.
 * 0, or an exit code. */
int cli_chat_answer(cli_chat *c, const char *text, const strata_token *gen, int64_t n_gen, int closed);

#endif /* STRATA_CLI_CHAT_H */
