/* main.c - entry point of ./strata: picks the subcommand from argv[1] and calls it. The commands
 * live one per file (run.c, perplexity.c, bench.c, serve.c, tokenize.c, info.c, quantize.c, imatrix.c; --help and
 * --version in help.c); what they share is in util.c and the files their headers name. */
#include "cli.h"

#include <string.h>

/* `strata [run] ... --serve ...`: the same options served over HTTP (serve.c); argv without the
 * command and --serve, as serve reads it. 0 when --serve is not there. */
static int serve_flag(int argc, char **argv, int *rc) {
    int at = -1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--serve") == 0) at = i;
    if (at < 0) return 0;
    for (int i = at; i + 1 < argc; i++) argv[i] = argv[i + 1];
    argc--;
    const int skip = strcmp(argv[1], "run") == 0; /* argv[0] of serve's is its command's name */
    *rc = cli_cmd_serve(argc - skip, argv + skip);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) return cli_cmd_default(); /* the embedded default model (run.c) */
    const char *cmd = argv[1];
    int rc = 0;
    if ((strcmp(cmd, "run") == 0 || cmd[0] == '-') && serve_flag(argc, argv, &rc)) return rc;
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) return cli_cmd_version();
    if (strcmp(cmd, "info") == 0) return cli_cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "quantize") == 0) return cli_cmd_quantize(argc - 1, argv + 1);
    if (strcmp(cmd, "imatrix") == 0) return cli_cmd_imatrix(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cli_cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0) return cli_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "perplexity") == 0) return cli_cmd_perplexity(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cli_cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "template") == 0) return cli_cmd_template(argc - 1, argv + 1);
    if (cmd[0] == '-') return cli_cmd_run(argc, argv); /* `strata -m MODEL ...` is run */
    return cli_usage_error("unknown command '%s'", cmd);
}
