/* hparams.h - internal interface between the model loader (model.c) and the hyperparameter reader
 * (hparams.c). Not part of the public ABI. */
#ifndef STRATA_HPARAMS_H
#define STRATA_HPARAMS_H

#include "model.h"

/* Reads the <arch>.* hyperparameters of g into *hp with llama.cpp's key names and defaults, and
 * checks them (positive sizes, heads dividing, top-k <= experts, rope scaling type known).
 * hp->n_vocab is left 0: the loader sets it from the vocabulary or the embedding tensor. */
strata_status st_hparams_load(const strata_gguf *g, const st_arch *arch, st_hparams *hp);

#endif /* STRATA_HPARAMS_H */
