/* cli.h - shared pieces of the ./strata command-line tool: the subcommand entry points, usage
 * text and error reporting. The CLI uses only the public API (strata.h). Exit statuses: 0 done,
 * 1 the command failed (bad file content, I/O), 2 usage error (unknown command or option,
 * missing argument or file). */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include "strata.h"
#include "strata_gguf.h"
#include "strata_quant.h"

#include <stdio.h>

#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* Subcommands: argv[0] is the command name. Return the exit status. */
int cli_cmd_info(int argc, char **argv);
int cli_cmd_quantize(int argc, char **argv);
int cli_cmd_tokenize(int argc, char **argv); /* tokenize.c */

/* The --help text. */
void cli_usage(FILE *f);
/* "strata: MESSAGE (see strata --help)" on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "strata: MESSAGE" on stderr; returns CLI_EXIT_FAIL. */
int cli_fail(const char *fmt, ...) CLI_PRINTF(1, 2);
/* CLI_EXIT_USAGE with a message if path cannot be read, else 0. */
int cli_check_readable(const char *path);
/* Writes n bytes as "1.23 MiB" into buf. */
const char *cli_human_bytes(double n, char *buf, size_t size);

/* flags.c: the library's messages name parameters, the CLI's flags set them. The flag(s) of a
 * parameter name (len bytes), or NULL. */
const char *cli_param_flag(const char *param, size_t len);
/* msg with the first mention of each parameter followed by its flag, "expert_cache
 * (--expert-cache)", outside '...' quotes; into buf, which it returns. */
const char *cli_flag_message(const char *msg, char *buf, size_t size);
/* strata_last_error() that way (a static buffer): what the CLI prints for a library error. */
const char *cli_lib_error(void);

#endif /* STRATA_CLI_H */
