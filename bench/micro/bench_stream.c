/* bench_stream.c - the disk read rate of experts, as the expert reader (c/experts/stream.c)
 * sees it: random routed experts of a MoE GGUF (each one its gate, up and down slices, three
 * ranges), read with O_DIRECT at queue depths 1, 2, 4 and 8, and the same with buffered reads of
 * a cold region for comparison. Prints a markdown table of GB/s and experts/s.
 *
 *   bench_stream MODEL.gguf [--seconds S] [--buffered]
 *
 * The reader bypasses the page cache, so repeated runs measure the disk, not RAM. */
#include "stream.h"
#include "strata.h"
#include "strata_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct { uint64_t off[3]; size_t bytes[3]; } expert_loc;

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_stream MODEL.gguf [--seconds S] [--buffered]\n"); return 2; }
    double secs = 2.0;
    int buffered = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--buffered")) buffered = 1;
    }
    strata_gguf *g = NULL;
    if (strata_gguf_open(argv[1], NULL, &g) != STRATA_OK) { fprintf(stderr, "%s\n", strata_last_error()); return 1; }
    /* every (layer, expert) of the merged expert tensors */
    expert_loc *locs = NULL;
    int64_t n_locs = 0, cap = 0;
    const char *kinds[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int layer = 0;; layer++) {
        strata_tensor_info ti[3];
        int found = 0;
        for (int k = 0; k < 3; k++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", layer, kinds[k]);
            int64_t i = strata_gguf_tensor_find(g, name);
            if (i >= 0 && strata_gguf_tensor_info(g, i, &ti[k]) == STRATA_OK && ti[k].shard == 0) found++;
        }
        if (found < 3) break;
        const int64_t X = ti[0].ne[2];
        for (int64_t e = 0; e < X; e++) {
            if (n_locs == cap) { cap = cap ? 2 * cap : 1024; locs = realloc(locs, sizeof *locs * (size_t)cap); }
            for (int k = 0; k < 3; k++) {
                const uint64_t per = ti[k].n_bytes / (uint64_t)X;
                locs[n_locs].off[k] = ti[k].file_offset + (uint64_t)e * per;
                locs[n_locs].bytes[k] = (size_t)per;
            }
            n_locs++;
        }
    }
    if (n_locs == 0) { fprintf(stderr, "%s: no merged expert tensors\n", argv[1]); return 1; }
    const size_t eb = locs[0].bytes[0] + locs[0].bytes[1] + locs[0].bytes[2];
    printf("%s: %lld experts of %.2f MiB\n\n", argv[1], (long long)n_locs, (double)eb / 1048576.0);
    printf("| mode | queue depth | experts in flight | GB/s | experts/s |\n|---|---:|---:|---:|---:|\n");
    const int qds[4] = {1, 2, 4, 8};
    uint8_t *dst = malloc(eb * 8 + 4096);
    unsigned long long rng = 12345;
    for (int qi = 0; qi < 4; qi++) {
        st_reader *r = NULL;
        if (st_reader_open(argv[1], !buffered, qds[qi], 0, &r) != STRATA_OK) { fprintf(stderr, "%s\n", strata_last_error()); return 1; }
        const int batch = qds[qi]; /* experts per request: one per reader thread */
        int64_t done = 0;
        const double t0 = now();
        while (now() - t0 < secs) {
            st_read_range rg[24];
            for (int b = 0; b < batch; b++) {
                rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                const expert_loc *l = &locs[(rng >> 33) % (unsigned long long)n_locs];
                uint8_t *d = dst + (size_t)b * eb;
                for (int k = 0; k < 3; k++) {
                    rg[b * 3 + k].offset = l->off[k];
                    rg[b * 3 + k].bytes = l->bytes[k];
                    rg[b * 3 + k].dst = d;
                    d += l->bytes[k];
                }
            }
            if (st_reader_read(r, rg, batch * 3) != STRATA_OK) { fprintf(stderr, "%s\n", strata_last_error()); return 1; }
            done += batch;
        }
        const double dt = now() - t0;
        printf("| %s | %d | %d | %.2f | %.0f |\n", st_reader_direct(r) ? "O_DIRECT" : "buffered", qds[qi],
               batch, (double)done * (double)eb / dt / 1e9, (double)done / dt);
        st_reader_close(r);
    }
    free(dst);
    free(locs);
    strata_gguf_free(g);
    return 0;
}
