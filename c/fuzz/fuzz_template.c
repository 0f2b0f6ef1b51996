/* fuzz_template.c - libFuzzer harness of the chat template renderer (c/server/template*.c): the
 * input is a template, rendered with a fixed context (messages of every role with tool calls,
 * tools, add_generation_prompt, the special tokens); the output (or the error message) is
 * read whole, so ASan sees every byte the renderer hands back. A template that loops forever is
 * the one thing it cannot rule out: inputs are capped at 4 KiB and loops run over the context's
 * short lists.
 *
 *   make fuzz                                   clang -fsanitize=fuzzer,address,undefined
 *   ./build/fuzz_template DIR -runs=1000000 -max_len=4096
 *
 * Built with -DSTRATA_FUZZ_STANDALONE, main() renders each file named on the command line. */
#include "template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CONTEXT =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
    " \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]}, {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static volatile uint64_t fz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *out = NULL, err[256];
    const int rc = tmpl_render((const char *)data, size, CONTEXT, &out, err, sizeof err);
    const char *s = rc == 0 ? out : err;
    uint64_t h = 0;
    for (size_t i = 0; s[i]; i++) h = h * 31 + (unsigned char)s[i];
    fz_sink += h;
    free(out);
    return 0;
}

#if defined(STRATA_FUZZ_STANDALONE)
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) { fprintf(stderr, "fuzz_template: cannot open %s\n", argv[i]); return 1; }
        static uint8_t buf[4096];
        const size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz_template: %d inputs\n", argc - 1);
    return 0;
}
#endif
