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
#include "fuzz_common.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *out = NULL, err[256];
    const int rc = tmpl_render((const char *)data, size, CONTEXT, &out, err, sizeof err);
    const char *s = rc == 0 ? out : err;
    fz_touch(s, strlen(s));
    free(out);
    return 0;
}

#if defined(STRATA_FUZZ_STANDALONE)
int main(int argc, char **argv) { return fz_replay("fuzz_template", 4096, argc, argv); }
#endif
