/* help.c - the top-level help text (`strata --help`) and `strata --version`: the version and
 * the compute backends compiled and available. Each subcommand's own --help is in its file. */
#include "cli.h"

#include <string.h>

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
        "        interactive chat (the model's own Jinja chat template); --logpos FILE\n"
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
        "           [--imatrix IMATRIX.gguf]\n"
        "        rewrite a model with its weights in TYPE (f32 .. q8_0, the K and IQ types,\n"
        "        mxfp4; `strata quantize --help` lists them and the per-kind mixes); norms\n"
        "        stay f32, routers f32; rows that do not fit fall back to q8_0;\n"
        "        --imatrix weighs the IQ types' errors by an importance matrix\n"
        "  imatrix -m MODEL.gguf -f TEXT -o IMATRIX.gguf [--chunks N] [-c 512]\n"
        "        an importance matrix like llama-imatrix's (its GGUF format) for\n"
        "        quantize --imatrix\n"
        "\n"
        "Options:\n"
        "  -h, --help     this text\n"
        "  --version      version and the compute backends compiled and available\n"
        "\n"
        "Exit status: 0 done, 1 the command failed, 2 usage error.\n",
        strata_version());
}

int cli_cmd_version(void) {
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
