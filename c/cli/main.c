/* main.c - entry point of ./strata: global options (--help, --version) and dispatch to one
 * subcommand per file (info.c, quantize.c). */
#include "cli.h"
#include "common.h" /* run / perplexity / the embedded default (gen) */

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Shared helpers
 * ------------------------------------------------------------------------------------------- */

void cli_usage(FILE *f) {
    fprintf(f,
        "usage: strata [--help] [--version] COMMAND [ARGS]\n"
        "\n"
        "Strata %s - inference engine for Mixture-of-Experts models in GGUF files.\n"
        "\n"
        "Commands:\n"
        "  info MODEL.gguf [--tensors]\n"
        "        file version, shards, architecture, hyperparameters, tokenizer, and the\n"
        "        tensors grouped by kind (count and bytes per kind and type);\n"
        "        --tensors also lists every tensor\n"
        "  [run] -m MODEL.gguf [-p PROMPT | -f FILE] [-n N] [options]\n"
        "        generate text (streamed to stdout, stats on stderr); -i/--chat for an\n"
        "        interactive chat (templates: chatml, Llama-2/Mistral [INST]); --logpos FILE\n"
        "        dumps teacher-forced top-K logprobs; `strata run --help` lists the options;\n"
        "        `strata` with no arguments runs the embedded default model\n"
        "  perplexity -m MODEL.gguf -f TEXT [-c 512] [--stride N] [--kl-base F | --kl F]\n"
        "        perplexity like llama-perplexity, and top-K KL against a saved base run\n"
        "  bench -m MODEL.gguf [-p 512] [-n 128] [-d 0,16384] [-r 3] [--gpu|--cpu]\n"
        "        prompt and decode tok/s with llama-bench's flags, as a markdown table\n"
        "  tokenize -m FILE.gguf (-p TEXT | -f FILE) [--ids | --list] [--no-special]\n"
        "           [--parse-special]\n"
        "        token ids of a text, one per line (--ids) or as a list \"[1, 2]\" (--list);\n"
        "        --no-special: no BOS/EOS; --parse-special: \"<|im_start|>\" etc. become their\n"
        "        control tokens; loads only the vocabulary (vocabulary-only files work)\n"
        "  quantize IN.gguf OUT.gguf --type TYPE [-t N] [--allow-requantize]\n"
        "        rewrite a model with its weights in TYPE: f32, f16, bf16, q8_0, q4_0, q4_K,\n"
        "        q6_K (norms stay f32, routers f32; rows that do not fit fall back to q8_0);\n"
        "        -t/--threads N worker threads (default: all cores);\n"
        "        --allow-requantize lets already quantized weights change type\n"
        "\n"
        "Options:\n"
        "  -h, --help     this text\n"
        "  --version      version and the compute backends compiled and available\n"
        "\n"
        "Exit status: 0 done, 1 the command failed, 2 usage error.\n",
        strata_version());
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("strata: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see strata --help)\n", stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("strata: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

int cli_check_readable(const char *path) {
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "strata: cannot open '%s': %s\n", path, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    return 0;
}

const char *cli_human_bytes(double n, char *buf, size_t size) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024.0 && u < 4) { n /= 1024.0; u++; }
    if (u == 0) snprintf(buf, size, "%.0f B", n);
    else snprintf(buf, size, "%.2f %s", n, units[u]);
    return buf;
}

/* ---------------------------------------------------------------------------------------------
 * --version
 * ------------------------------------------------------------------------------------------- */

static int cmd_version(void) {
    printf("strata %s\n", strata_version());
    int rc = 0;
    for (int k = 0; k < STRATA_BACKEND_COUNT; k++) {
        strata_backend_info info;
        memset(&info, 0, sizeof info);
        if (strata_backend_query((strata_backend_kind)k, &info) != STRATA_OK) {
            rc = cli_fail("backend %d: %s", k, strata_last_error());
            continue;
        }
        printf("backend %-5s %s, %s%s%s\n", info.name ? info.name : "?",
               info.compiled ? "compiled" : "not compiled",
               info.available ? "available" : "not available",
               info.detail[0] ? ": " : "", info.detail);
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Dispatch
 * ------------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    if (argc < 2) return cli_cmd_default(); /* the embedded default model (run.c) */
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) return cmd_version();
    if (strcmp(cmd, "info") == 0) return cli_cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "quantize") == 0) return cli_cmd_quantize(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cli_cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0) return cli_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "perplexity") == 0) return cli_cmd_perplexity(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
    if (cmd[0] == '-') return cli_cmd_run(argc, argv); /* `strata -m MODEL ...` is run */
    return cli_usage_error("unknown command '%s'", cmd);
}
