/* main.c - entry point of ./strata: picks the subcommand from argv[1] and calls it. The commands
 * live one per file (run.c, perplexity.c, bench.c, serve.c, tokenize.c, info.c, quantize.c; --help and
 * --version in help.c); what they share is in util.c and the files their headers name. */
#include "cli.h"

#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) return cli_cmd_default(); /* the embedded default model (run.c) */
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) return cli_cmd_version();
    if (strcmp(cmd, "info") == 0) return cli_cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "quantize") == 0) return cli_cmd_quantize(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cli_cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0) return cli_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "perplexity") == 0) return cli_cmd_perplexity(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0) return cli_cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "template") == 0) return cli_cmd_template(argc - 1, argv + 1);
    if (cmd[0] == '-') return cli_cmd_run(argc, argv); /* `strata -m MODEL ...` is run */
    return cli_usage_error("unknown command '%s'", cmd);
}
