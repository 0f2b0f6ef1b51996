/* session_setup.h - a model and its session from the options (options.h), for the model-running
 * commands: the library's parameter structs filled by one table, the backend chosen (--gpu,
 * --cpu, -ngl, or the GPU when usable), the start-up report printed (report.h); and the token
 * helpers those commands share. */
#ifndef STRATA_CLI_SESSION_SETUP_H
#define STRATA_CLI_SESSION_SETUP_H

#include "options.h"

/* Loads o->model (params from the options); *load_s gets the seconds it took. Prints the failure
 * and returns CLI_EXIT_FAIL, or 0. */
int cli_load_model(const cli_opts *o, strata_model **model, double *load_s);
/* Session with the options' n_ctx, n_batch, kv_type, n_threads and backend: --gpu must get the
 * GPU (else it fails), auto takes the GPU when CUDA is usable and the model has GPU kernels and
 * otherwise says in one stderr line why it runs on the CPU; a CPU session names the GPU-only
 * flags given in one warning line (they are ignored), and a context past the model's training
 * context gets a warning line. Fills o->backend_desc. */
int cli_new_session(cli_opts *o, const strata_model *model, strata_session **out);
/* 1 when cli_new_session made a CUDA session (o->backend_desc "cuda (...)"). */
int cli_session_on_gpu(const cli_opts *o);
/* The CPU threads a session of these options uses: -t, else the online CPUs (the library's rule
 * for n_threads 0). */
int cli_threads_used(const cli_opts *o);

/* Tokenizes text into *toks (malloc'd), *n tokens. Prints failures, returns CLI_EXIT_FAIL or 0. */
int cli_tokenize(const strata_model *model, const char *text, size_t len, int add_special,
                 int parse_special, strata_token **toks, int64_t *n);
/* 1 if the vocabulary prepends BOS when tokenizing with add_special. */
int cli_model_adds_bos(const strata_model *model);

#endif /* STRATA_CLI_SESSION_SETUP_H */
