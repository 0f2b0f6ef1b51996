/* gguf_split.c - obtaining GGUF images (mmap, read into memory, caller's memory) and assembling a
 * strata_gguf from one or more validated images: split models NAME-0000N-of-0000M.gguf (llama.cpp's
 * naming), their cross-shard checks, and the merged key/value and tensor lists.
 *
 * Split policy
 *   - strata_gguf_open on a path matching NAME-NNNNN-of-MMMMM.gguf (5 digits each, 1 <= N <= M,
 *     M > 1) with params.open_shards = 1 opens all M shards, whichever one was named. Every shard is
 *     validated alone first, then: each shard must have split.count == M and split.no == its 0-based
 *     index (any non-negative integer type; llama.cpp writes u16), split.tensors.count (where
 *     present) must equal the total tensor count, and tensor names must be unique across shards.
 *   - The key/value list is shard 0's pairs in file order, followed by the pairs of later shards
 *     (in shard then file order) whose key neither starts with "split." nor is already present.
 *   - Any other case (open_memory, open_shards = 0, a name without the pattern, M = 1) validates the
 *     one image alone, split.* keys included for internal consistency, and reports its tensors as
 *     shard 0 of 1: the caller asked for exactly this image, and its tensors are all that exist. */
#include "gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_SPLIT_SUFFIX_LEN 20 /* "-00001-of-00003.gguf" */

/* ==== images ================================================================================= */

static void st_image_release(st_gguf_file *f) {
    if (f->data) {
        if (f->kind == ST_IMG_MMAP) munmap((void *)f->data, (size_t)f->size);
        else if (f->kind == ST_IMG_MALLOC) free((void *)f->data);
    }
    f->data = NULL;
    free(f->path);
    f->path = NULL;
}

/* Transparent huge pages for [p, p + size) where the kernel offers them (MADV_HUGEPAGE; file
 * mappings need its read-only file THP support): best effort, a refusal changes nothing else. */
static void st_image_hugepages(void *p, uint64_t size) {
#ifdef MADV_HUGEPAGE
    (void)madvise(p, (size_t)size, MADV_HUGEPAGE);
#else
    (void)p;
    (void)size;
#endif
}

/* Locks an image's pages in RAM (params.mlock): every page is read in now and never paged out. */
static strata_status st_image_mlock(const st_gguf_file *f, const char *label) {
    if (mlock(f->data, (size_t)f->size) == 0) return STRATA_OK;
    const int e = errno;
    struct rlimit rl;
    char lim[64] = "unknown";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
        else snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)rl.rlim_cur);
    }
    return st_error(STRATA_ERR_IO, "gguf: cannot lock %s (%llu bytes) in RAM: %s (RLIMIT_MEMLOCK: %s; "
                    "raise it with ulimit -l, or load without mlock)", label,
                    (unsigned long long)f->size, strerror(e), lim);
}

/* Maps or reads path into f. label names the file in messages ("'x.gguf'" or "shard 2 of 3
 * 'x.gguf'"). hugepages: ask for transparent huge pages (read images: anonymous memory advised
 * before the read); mlock: lock the image in RAM afterwards (an error when the kernel refuses). */
static strata_status st_image_load(st_gguf_file *f, const char *path, const char *label,
                                   int use_mmap, int hugepages, int mlock_it) {
    f->path = strdup(path);
    if (!f->path) return st_error(STRATA_ERR_NOMEM, "gguf: out of memory copying a path");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return st_error(STRATA_ERR_IO, "gguf: cannot open %s: %s", label, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return st_error(STRATA_ERR_IO, "gguf: cannot stat %s: %s", label, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return st_error(STRATA_ERR_IO, "gguf: %s is not a regular file", label);
    }
    if (sb.st_size == 0) {
        close(fd);
        return st_error(STRATA_ERR_FORMAT, "gguf: empty file (0 bytes): %s", label);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return st_error(STRATA_ERR_IO, "gguf: %s is too large (%llu bytes)", label,
                        (unsigned long long)size);
    }
    if (use_mmap) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        int e = errno;
        close(fd);
        if (p == MAP_FAILED)
            return st_error(STRATA_ERR_IO, "gguf: cannot mmap %s (%llu bytes): %s", label,
                            (unsigned long long)size, strerror(e));
        f->data = p;
        f->kind = ST_IMG_MMAP;
        if (hugepages) st_image_hugepages(p, size);
    } else {
        uint8_t *p = NULL;
        if (hugepages) { /* anonymous pages, advised before the read faults them in */
            void *a = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (a != MAP_FAILED) {
                st_image_hugepages(a, size);
                p = a;
            }
        } else {
            p = malloc((size_t)size);
        }
        if (!p) {
            close(fd);
            return st_error(STRATA_ERR_NOMEM, "gguf: out of memory reading %s (%llu bytes)", label,
                            (unsigned long long)size);
        }
        const st_img_kind kind = hugepages ? ST_IMG_MMAP : ST_IMG_MALLOC;
        uint64_t got = 0;
        while (got < size) {
            ssize_t r = read(fd, p + got, (size_t)(size - got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int e = errno;
                if (kind == ST_IMG_MMAP) munmap(p, (size_t)size);
                else free(p);
                close(fd);
                if (r == 0)
                    return st_error(STRATA_ERR_IO, "gguf: reading %s: end of file at offset %llu "
                                    "of %llu (file shrank?)", label, (unsigned long long)got,
                                    (unsigned long long)size);
                return st_error(STRATA_ERR_IO, "gguf: reading %s at offset %llu: %s", label,
                                (unsigned long long)got, strerror(e));
            }
            got += (uint64_t)r;
        }
        close(fd);
        f->data = p;
        f->kind = kind;
    }
    f->size = size;
    return mlock_it ? st_image_mlock(f, label) : STRATA_OK;
}

/* ==== handle assembly ======================================================================== */

static const char *st_merged_kv_name(const void *ctx, int64_t i) {
    return ((const st_gguf_kv *const *)ctx)[i]->key;
}
static const char *st_merged_tensor_name(const void *ctx, int64_t i) {
    return ((const strata_tensor_info *)ctx)[i].name;
}

void strata_gguf_free(strata_gguf *g) {
    if (!g) return;
    for (uint32_t i = 0; i < g->n_shards; i++) {
        st_gguf_file_release(&g->shards[i]);
        st_image_release(&g->shards[i]);
    }
    free(g->shards);
    free(g->kvs);
    free(g->tensors);
    st_name_index_free(&g->kv_index);
    st_name_index_free(&g->tensor_index);
    free(g);
}

static int st_is_split_key(const char *k) { return strncmp(k, "split.", 6) == 0; }

/* Builds the merged kv and tensor lists and their indexes over g->shards[0..n_shards). */
static strata_status st_merge(strata_gguf *g) {
    int64_t nkv = 0, nt = 0;
    for (uint32_t s = 0; s < g->n_shards; s++) {
        nkv += g->shards[s].n_kv;
        nt += g->shards[s].n_tensors;
    }
    g->kvs = malloc((size_t)(nkv ? nkv : 1) * sizeof *g->kvs);
    g->tensors = malloc((size_t)(nt ? nt : 1) * sizeof *g->tensors);
    if (!g->kvs || !g->tensors)
        return st_error(STRATA_ERR_NOMEM, "gguf: out of memory merging %lld keys and %lld tensors",
                        (long long)nkv, (long long)nt);
    ST_TRY(st_name_index_init(&g->kv_index, nkv));
    g->n_kv = 0;
    for (uint32_t s = 0; s < g->n_shards; s++) {
        const st_gguf_file *f = &g->shards[s];
        for (int64_t i = 0; i < f->n_kv; i++) {
            if (s > 0 && st_is_split_key(f->kvs[i].key)) continue;
            g->kvs[g->n_kv] = &f->kvs[i];
            /* shard 0 has no duplicates (validated); later repeats are dropped */
            if (st_name_index_insert(&g->kv_index, g->n_kv, st_merged_kv_name, g->kvs) < 0)
                g->n_kv++;
        }
    }
    g->n_tensors = 0;
    for (uint32_t s = 0; s < g->n_shards; s++) {
        const st_gguf_file *f = &g->shards[s];
        for (int64_t i = 0; i < f->n_tensors; i++) {
            strata_tensor_info *t = &g->tensors[g->n_tensors++];
            *t = f->tensors[i];
            t->shard = s;
            t->file_offset = f->data_start + t->offset;
            t->data = f->data + t->file_offset;
        }
    }
    int64_t a = -1, b = -1;
    strata_status st = st_name_index_build(&g->tensor_index, g->n_tensors, st_merged_tensor_name,
                                           g->tensors, &a, &b);
    if (st == STRATA_ERR_FORMAT) {
        char nm[128];
        st_gguf_printable(nm, sizeof nm, g->tensors[a].name, strlen(g->tensors[a].name));
        return st_error(st, "gguf: duplicate tensor name '%s' across shards: in shard %u '%s' "
                        "(data at file offset %llu) and in shard %u '%s' (data at file offset "
                        "%llu)", nm, g->tensors[a].shard, g->shards[g->tensors[a].shard].path,
                        (unsigned long long)g->tensors[a].file_offset, g->tensors[b].shard,
                        g->shards[g->tensors[b].shard].path,
                        (unsigned long long)g->tensors[b].file_offset);
    }
    return st;
}

static strata_status st_params_resolve(const strata_gguf_params *in, strata_gguf_params *out) {
    *out = in ? *in : strata_gguf_default_params();
    if (out->max_alignment == 0) out->max_alignment = ST_GGUF_DEFAULT_MAX_ALIGNMENT;
    return STRATA_OK;
}

strata_gguf_params strata_gguf_default_params(void) {
    strata_gguf_params p;
    p.use_mmap = 1;
    p.open_shards = 1;
    p.max_alignment = ST_GGUF_DEFAULT_MAX_ALIGNMENT;
    p.mlock = 0;
    p.hugepages = 0;
    return p;
}

static strata_gguf *st_handle_new(uint32_t n_shards) {
    strata_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->shards = calloc(n_shards, sizeof *g->shards);
    if (!g->shards) {
        free(g);
        return NULL;
    }
    g->n_shards = n_shards;
    return g;
}

/* ==== split names ============================================================================ */

static int st_digits5(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 5; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        x = x * 10 + (uint32_t)(p[i] - '0');
    }
    *v = x;
    return 1;
}

/* 1 if path ends in -NNNNN-of-MMMMM.gguf with 1 <= N <= M: *prefix_len, *no (1-based), *count. */
static int st_split_name(const char *path, size_t *prefix_len, uint32_t *no, uint32_t *count) {
    size_t len = strlen(path);
    if (len < ST_SPLIT_SUFFIX_LEN) return 0;
    const char *s = path + len - ST_SPLIT_SUFFIX_LEN;
    if (s[0] != '-' || memcmp(s + 6, "-of-", 4) != 0 || memcmp(s + 15, ".gguf", 5) != 0) return 0;
    if (!st_digits5(s + 1, no) || !st_digits5(s + 10, count)) return 0;
    if (*no < 1 || *no > *count) return 0;
    *prefix_len = len - ST_SPLIT_SUFFIX_LEN;
    return 1;
}

/* ==== open =================================================================================== */

static strata_status st_open_single(const char *path, const strata_gguf_params *p,
                                    strata_gguf **out) {
    strata_gguf *g = st_handle_new(1);
    if (!g) return st_error(STRATA_ERR_NOMEM, "gguf: out of memory opening '%s'", path);
    char label[300];
    snprintf(label, sizeof label, "'%s'", path);
    strata_status st = st_image_load(&g->shards[0], path, label, p->use_mmap, p->hugepages, p->mlock);
    if (st == STRATA_OK) st = st_gguf_file_parse(&g->shards[0], p);
    if (st == STRATA_OK) st = st_merge(g);
    if (st != STRATA_OK) {
        strata_gguf_free(g);
        return st;
    }
    *out = g;
    return STRATA_OK;
}

/* Cross-shard checks of shard s of M (see the policy at the top). */
static strata_status st_check_shard(const strata_gguf *g, uint32_t s, uint64_t total_tensors) {
    const st_gguf_file *f = &g->shards[s];
    uint32_t m = g->n_shards;
    uint64_t v;
    int64_t ki = -1;
    int h = st_gguf_file_get_uint(f, "split.count", &v, &ki);
    if (h == 0)
        return st_error(STRATA_ERR_FORMAT, "gguf: shard %u of %u has no split.count key (file "
                        "'%s')", s, m, f->path);
    if (v != m)
        return st_error(STRATA_ERR_FORMAT, "gguf: shard %u of %u: split.count (key at offset %llu) "
                        "is %llu, but the file name says %u shards (file '%s')", s, m,
                        (unsigned long long)f->kvs[ki].key_offset, (unsigned long long)v, m,
                        f->path);
    h = st_gguf_file_get_uint(f, "split.no", &v, &ki);
    if (h == 0)
        return st_error(STRATA_ERR_FORMAT, "gguf: shard %u of %u has no split.no key (file '%s')",
                        s, m, f->path);
    if (v != s)
        return st_error(STRATA_ERR_FORMAT, "gguf: shard %u of %u: split.no (key at offset %llu) is "
                        "%llu, expected %u (file '%s')", s, m,
                        (unsigned long long)f->kvs[ki].key_offset, (unsigned long long)v, s,
                        f->path);
    h = st_gguf_file_get_uint(f, "split.tensors.count", &v, &ki);
    if (h > 0 && v != total_tensors)
        return st_error(STRATA_ERR_FORMAT, "gguf: shard %u of %u: split.tensors.count (key at "
                        "offset %llu) is %llu, but the shards hold %llu tensors (file '%s')", s, m,
                        (unsigned long long)f->kvs[ki].key_offset, (unsigned long long)v,
                        (unsigned long long)total_tensors, f->path);
    return STRATA_OK;
}

static strata_status st_open_split(const char *path, size_t prefix_len, uint32_t m,
                                   const strata_gguf_params *p, strata_gguf **out) {
    strata_gguf *g = st_handle_new(m);
    if (!g) return st_error(STRATA_ERR_NOMEM, "gguf: out of memory opening %u shards", m);
    strata_status st = STRATA_OK;
    size_t cap = prefix_len + ST_SPLIT_SUFFIX_LEN + 1;
    char *sp = malloc(cap);
    if (!sp) st = st_error(STRATA_ERR_NOMEM, "gguf: out of memory for a shard path");
    uint64_t total = 0;
    for (uint32_t s = 0; st == STRATA_OK && s < m; s++) {
        char label[400];
        snprintf(sp, cap, "%.*s-%05u-of-%05u.gguf", (int)prefix_len, path, s + 1, m);
        snprintf(label, sizeof label, "shard %u of %u '%s'", s, m, sp);
        st = st_image_load(&g->shards[s], sp, label, p->use_mmap, p->hugepages, p->mlock);
        if (st == STRATA_OK) st = st_gguf_file_parse(&g->shards[s], p);
        if (st == STRATA_OK) total += (uint64_t)g->shards[s].n_tensors;
    }
    free(sp);
    for (uint32_t s = 0; st == STRATA_OK && s < m; s++) st = st_check_shard(g, s, total);
    if (st == STRATA_OK) st = st_merge(g);
    if (st != STRATA_OK) {
        strata_gguf_free(g);
        return st;
    }
    *out = g;
    return STRATA_OK;
}

strata_status strata_gguf_open(const char *path, const strata_gguf_params *params,
                               strata_gguf **out) {
    if (out) *out = NULL;
    if (!path || !out) return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_open: NULL argument");
    strata_gguf_params p;
    ST_TRY(st_params_resolve(params, &p));
    size_t prefix_len;
    uint32_t no, count;
    if (p.open_shards && st_split_name(path, &prefix_len, &no, &count) && count > 1)
        return st_open_split(path, prefix_len, count, &p, out);
    return st_open_single(path, &p, out);
}

strata_status strata_gguf_open_memory(const void *data, size_t size, int borrow,
                                      const strata_gguf_params *params, strata_gguf **out) {
    if (out) *out = NULL;
    if (!out || (!data && size > 0))
        return st_error(STRATA_ERR_INVALID_ARG, "strata_gguf_open_memory: NULL argument");
    strata_gguf_params p;
    ST_TRY(st_params_resolve(params, &p));
    if (size == 0) return st_error(STRATA_ERR_FORMAT, "gguf: empty file (0 bytes): <memory>");
    strata_gguf *g = st_handle_new(1);
    if (!g) return st_error(STRATA_ERR_NOMEM, "gguf: out of memory opening an image");
    st_gguf_file *f = &g->shards[0];
    strata_status st = STRATA_OK;
    f->path = strdup("<memory>");
    if (!f->path) st = st_error(STRATA_ERR_NOMEM, "gguf: out of memory");
    if (st == STRATA_OK && borrow) {
        f->data = data;
        f->kind = ST_IMG_BORROWED;
    } else if (st == STRATA_OK) {
        void *copy = malloc(size);
        if (!copy)
            st = st_error(STRATA_ERR_NOMEM, "gguf: out of memory copying a %llu-byte image",
                          (unsigned long long)size);
        else {
            memcpy(copy, data, size);
            f->data = copy;
            f->kind = ST_IMG_MALLOC;
        }
    }
    f->size = size;
    if (st == STRATA_OK) st = st_gguf_file_parse(f, &p);
    if (st == STRATA_OK) st = st_merge(g);
    if (st != STRATA_OK) {
        strata_gguf_free(g);
        return st;
    }
    *out = g;
    return STRATA_OK;
}
