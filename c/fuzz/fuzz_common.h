/* fuzz_common.h - what the server's libFuzzer harnesses (fuzz_http.c, fuzz_template.c,
 * fuzz_tools.c) share: fz_touch, which reads every byte a reader hands out into a sink the
 * compiler cannot drop (so ASan sees each byte), and, in builds with -DSTRATA_FUZZ_STANDALONE
 * (any C compiler, no libFuzzer), fz_replay, the body of their main(): the harness's entry point
 * once over each file named on the command line. Header-only, static functions. */
#ifndef STRATA_FUZZ_COMMON_H
#define STRATA_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static volatile uint64_t fz_sink;

static void fz_touch(const char *p, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = h * 31 + (unsigned char)p[i];
    fz_sink += h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if defined(STRATA_FUZZ_STANDALONE)
/* Each file's first max bytes through the entry point; 1 if a file cannot be opened. */
static int fz_replay(const char *name, size_t max, int argc, char **argv) {
    uint8_t *buf = malloc(max);
    if (!buf) return 1;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "%s: cannot open %s\n", name, argv[i]);
            free(buf);
            return 1;
        }
        const size_t n = fread(buf, 1, max, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
    printf("%s: %d inputs\n", name, argc - 1);
    return 0;
}
#endif

#endif
