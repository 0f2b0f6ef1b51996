/* cli.h - what every part of the ./strata command-line tool shares: the exit statuses, the
 * subcommand entry points that main.c dispatches to, the helpers of util.c (messages, files,
 * clock, JSON) and flags.c (library parameter names -> CLI flags). The CLI uses only the public
 * API (strata.h). Exit statuses: 0 done, 1 the command failed (bad file content, I/O), 2 usage
 * error (unknown command or option, missing argument or file).
 *
 * The model-running commands' own pieces have their own headers: options.h (the option set and
 * its parser), session_setup.h (model and session from the options), report.h (the start-up
 * lines), stats_print.h (stats footers, the [PROF] line), logprobs.h (top-K logprob dumps, KL). */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include "strata.h"
#include "strata_gguf.h"
#include "strata_quant.h"

#include <stdint.h>
#include <stdio.h>

#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* ---- subcommands: argv[0] is the command name; each returns the exit status ---------------- */
int cli_cmd_run(int argc, char **argv);        /* run.c */
int cli_cmd_default(void);                     /* run.c: `strata` without arguments */
int cli_cmd_perplexity(int argc, char **argv); /* perplexity.c */
int cli_cmd_bench(int argc, char **argv);      /* bench.c */
int cli_cmd_serve(int argc, char **argv);      /* serve.c: the HTTP server (c/server/) */
int cli_cmd_template(int argc, char **argv);   /* template_cmd.c: a chat template rendered */
int cli_cmd_tokenize(int argc, char **argv);   /* tokenize.c */
int cli_cmd_info(int argc, char **argv);       /* info.c */
int cli_cmd_quantize(int argc, char **argv);   /* quantize.c */
int cli_cmd_imatrix(int argc, char **argv);    /* imatrix.c */
int cli_cmd_version(void);                     /* help.c: --version */
/* help.c: the --help text. */
void cli_usage(FILE *f);

/* ---- util.c ------------------------------------------------------------------------------ */
/* "strata: MESSAGE (see strata --help)" on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "strata: MESSAGE" on stderr; returns CLI_EXIT_FAIL. */
int cli_fail(const char *fmt, ...) CLI_PRINTF(1, 2);
/* CLI_EXIT_USAGE with a message if path cannot be read, else 0. */
int cli_check_readable(const char *path);
/* A byte count for option name: a number, optionally with K, M or G (powers of 1024). Prints a
 * usage error and returns CLI_EXIT_USAGE for a bad one; 0 and *out otherwise (options.c). */
int cli_parse_size(const char *name, const char *v, int64_t *out);
/* Writes n bytes as "1.23 MiB" into buf. */
const char *cli_human_bytes(double n, char *buf, size_t size);
/* Monotonic seconds. */
double cli_now(void);
/* Peak resident set size of this process in bytes (getrusage). */
uint64_t cli_peak_rss(void);
/* Writes s as a JSON string literal (quotes included). */
void cli_json_string(FILE *f, const char *s);
/* Whole file into a NUL-terminated malloc'd buffer; NULL after printing why. */
char *cli_read_file(const char *path, size_t *len);

/* ---- flags.c: the library's messages name parameters, the CLI's flags set them ------------- */
/* The flag(s) of a parameter name (len bytes), or NULL. */
const char *cli_param_flag(const char *param, size_t len);
/* msg with the first mention of each parameter followed by its flag, "expert_cache
 * (--expert-cache)", outside '...' quotes; into buf, which it returns. */
const char *cli_flag_message(const char *msg, char *buf, size_t size);
/* strata_last_error() that way (a static buffer): what the CLI prints for a library error. */
const char *cli_lib_error(void);

#endif /* STRATA_CLI_H */
