/* vocab.h - internal interface of the tokenizer: the vocabulary read from GGUF metadata
 * (tokenizer.ggml.*), BPE and SentencePiece tokenization, pre-tokenizers, detokenization. The
 * public strata_tokenize/strata_token_* functions (vocab_api.c) wrap these through model->vocab. */
#ifndef STRATA_VOCAB_H
#define STRATA_VOCAB_H

#include "common.h"

typedef struct st_vocab st_vocab;

/* Reads the vocabulary of g. Unknown tokenizer.ggml.model or tokenizer.ggml.pre values are
 * errors naming them. *out owns copies of everything it needs (g may be freed after). */
strata_status st_vocab_load(const strata_gguf *g, st_vocab **out);
void st_vocab_free(st_vocab *vocab);
int32_t st_vocab_n_tokens(const st_vocab *vocab);

#endif /* STRATA_VOCAB_H */
