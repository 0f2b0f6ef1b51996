/* quantize_iq_grid.c - the search structures the IQ2 / IQ1 / IQ3 quantizers need: each grid
 * (iq_tables.c) as levels, the map from a level vector to its grid index, and for every level
 * vector off the grid the list of its nearest grid points. Ported from ggml's iq2xs_init_impl /
 * iq3xs_init_impl (llama.cpp, ggml/src/ggml-quants.c, MIT), built from the dequantization
 * tables instead of ggml's packed kgrid copies; built once per grid (pthread_once), freed at
 * library unload. */
#include "quant.h"

#include <pthread.h>
#include <stdlib.h>

/* How a grid is read from its table: entry k's element e is byte e of table[k]; level = the
 * position of that byte in `levels`. nwant: how many distinct distances a neighbour list spans
 * (ggml's values). max_level: the highest level a quantizer may ask about. */
typedef struct {
    const void *table;
    int n_grid, n_elem, bits, nwant, max_level;
    uint8_t levels[8];
    int n_levels;
} st_iq_grid_src;

static const st_iq_grid_src grid_src[ST_IQ_GRID_COUNT] = {
    [ST_IQ_GRID_IQ2XXS] = {st_iq2xxs_grid, 256, 8, 2, 2, 2, {0x08, 0x19, 0x2b}, 3},
    [ST_IQ_GRID_IQ2XS] = {st_iq2xs_grid, 512, 8, 2, 2, 2, {0x08, 0x19, 0x2b}, 3},
    [ST_IQ_GRID_IQ2S] = {st_iq2s_grid, 1024, 8, 2, 1, 2, {0x08, 0x19, 0x2b}, 3},
    [ST_IQ_GRID_IQ1S] = {st_iq1s_grid, 2048, 8, 2, 3, 2, {0xff, 0x00, 0x01}, 3},
    [ST_IQ_GRID_IQ3XXS] = {st_iq3xxs_grid, 256, 4, 3, 2, 7, {4, 12, 20, 28, 36, 44, 52, 62}, 8},
    [ST_IQ_GRID_IQ3S] = {st_iq3s_grid, 512, 4, 3, 3, 7, {1, 3, 5, 7, 9, 11, 13, 15}, 8},
};

/* The built grids; ok[i] is 1 once grids[i] is complete. Written only inside the once-routines. */
static st_iq_grid grids[ST_IQ_GRID_COUNT];
static int grid_ok[ST_IQ_GRID_COUNT];

static uint8_t table_byte(const st_iq_grid_src *s, int k, int e) {
    if (s->n_elem == 8) return (uint8_t)(((const uint64_t *)s->table)[k] >> (8 * e));
    return (uint8_t)(((const uint32_t *)s->table)[k] >> (8 * e));
}

/* grid (2 * level + 1 per element) and map (-1 everywhere off the grid). 0 on a bad table. */
static int fill_grid_and_map(const st_iq_grid_src *s, int8_t *grid, int32_t *map, int map_size) {
    for (int u = 0; u < map_size; u++) map[u] = -1;
    for (int k = 0; k < s->n_grid; k++) {
        int u = 0;
        for (int e = 0; e < s->n_elem; e++) {
            const uint8_t b = table_byte(s, k, e);
            int l = 0;
            while (l < s->n_levels && s->levels[l] != b) l++;
            if (l == s->n_levels) return 0;
            grid[k * s->n_elem + e] = (int8_t)(2 * l + 1);
            u |= l << (s->bits * e);
        }
        map[u] = k;
    }
    return 1;
}

/* Appends to *list (growing it) u's neighbours: the grid points at the nwant smallest distinct
 * squared distances from u's point, by distance then index (ggml's qsort order). Returns the
 * new length, or -1 when memory ran out. dist: n_grid scratch. */
static int64_t append_neighbours(const st_iq_grid_src *s, const int8_t *grid, int u, int *dist,
                                 uint16_t **list, int64_t len, int64_t *cap) {
    enum { MAXD = 1024 }; /* 4 x 14^2 (IQ3) and 8 x 4^2 (IQ2, IQ1) are below */
    int8_t pos[8];
    for (int e = 0; e < s->n_elem; e++)
        pos[e] = (int8_t)(2 * ((u >> (s->bits * e)) & ((1 << s->bits) - 1)) + 1);
    uint8_t used[MAXD];
    memset(used, 0, sizeof used);
    for (int j = 0; j < s->n_grid; j++) {
        int d2 = 0;
        for (int e = 0; e < s->n_elem; e++) {
            const int d = grid[j * s->n_elem + e] - pos[e];
            d2 += d * d;
        }
        dist[j] = d2;
        used[d2] = 1;
    }
    int have = 0, dmax = 0;
    for (int d = 0; d < MAXD && have < s->nwant; d++)
        if (used[d]) { have++; dmax = d; }
    const int64_t start = len++;
    for (int d = 0; d <= dmax; d++) {
        if (!used[d]) continue;
        for (int j = 0; j < s->n_grid; j++) {
            if (dist[j] != d) continue;
            if (len >= *cap) {
                const int64_t nc = *cap * 2;
                uint16_t *p = realloc(*list, (size_t)nc * sizeof *p);
                if (!p) return -1;
                *list = p;
                *cap = nc;
            }
            (*list)[len++] = (uint16_t)j;
        }
    }
    (*list)[start] = (uint16_t)(len - start - 1);
    return len;
}

/* 1 if every element of u has a level the quantizers may ask about. */
static int queryable(const st_iq_grid_src *s, int u) {
    for (int e = 0; e < s->n_elem; e++)
        if (((u >> (s->bits * e)) & ((1 << s->bits) - 1)) > s->max_level) return 0;
    return 1;
}

static void build_grid(int which) {
    const st_iq_grid_src *s = &grid_src[which];
    const int map_size = 1 << (s->bits * s->n_elem);
    int8_t *grid = malloc((size_t)s->n_grid * (size_t)s->n_elem);
    int32_t *map = malloc((size_t)map_size * sizeof *map);
    int *dist = malloc((size_t)s->n_grid * sizeof *dist);
    int64_t cap = 1 << 16, len = 0;
    uint16_t *list = malloc((size_t)cap * sizeof *list);
    int ok = grid && map && dist && list && fill_grid_and_map(s, grid, map, map_size);
    for (int u = 0; ok && u < map_size; u++) {
        if (map[u] >= 0 || !queryable(s, u)) continue;
        const int64_t at = len;
        len = append_neighbours(s, grid, u, dist, &list, len, &cap);
        ok = len >= 0;
        map[u] = (int32_t)(-(at + 1));
    }
    free(dist);
    if (!ok) {
        free(grid);
        free(map);
        free(list);
        return;
    }
    grids[which] = (st_iq_grid){s->n_grid, s->n_elem, s->bits, grid, map, list};
    grid_ok[which] = 1;
}

static void build_iq2xxs(void) { build_grid(ST_IQ_GRID_IQ2XXS); }
static void build_iq2xs(void) { build_grid(ST_IQ_GRID_IQ2XS); }
static void build_iq2s(void) { build_grid(ST_IQ_GRID_IQ2S); }
static void build_iq1s(void) { build_grid(ST_IQ_GRID_IQ1S); }
static void build_iq3xxs(void) { build_grid(ST_IQ_GRID_IQ3XXS); }
static void build_iq3s(void) { build_grid(ST_IQ_GRID_IQ3S); }

static pthread_once_t grid_once[ST_IQ_GRID_COUNT] = {
    PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
    PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
};
static void (*const grid_builder[ST_IQ_GRID_COUNT])(void) = {
    build_iq2xxs, build_iq2xs, build_iq2s, build_iq1s, build_iq3xxs, build_iq3s,
};

const st_iq_grid *st_iq_grid_get(int which) {
    if (which < 0 || which >= ST_IQ_GRID_COUNT) return NULL;
    pthread_once(&grid_once[which], grid_builder[which]);
    return grid_ok[which] ? &grids[which] : NULL;
}

/* At library unload (or process exit). */
__attribute__((destructor)) static void free_grids(void) {
    for (int i = 0; i < ST_IQ_GRID_COUNT; i++) {
        if (!grid_ok[i]) continue;
        free((void *)grids[i].grid);
        free((void *)grids[i].map);
        free((void *)grids[i].neighbours);
        grid_ok[i] = 0;
    }
}
