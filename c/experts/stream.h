/* stream.h - reading experts from the GGUF file when they are not in RAM: large aligned O_DIRECT
 * reads (so the page cache neither hides nor doubles the cost), a few in flight, into any
 * destination (RAM slots, pinned staging for the GPU). A request is a list of byte ranges of the
 * file (an expert's gate, up and down slices live in three tensors); ranges are split into chunks
 * of chunk_bytes and shared out to queue_depth reader threads, each with its own aligned bounce
 * buffer; a chunk whose file offset, length and destination are all aligned is read straight
 * into the destination.
 *
 * A filesystem that refuses O_DIRECT (tmpfs, some overlays) falls back to ordinary reads; the
 * reader says so (st_reader_direct() = 0) rather than failing. Errors (a range past the end of the
 * file, a short read, an I/O error) are returned as a status naming the file and offset; library
 * code never prints. One st_reader_read at a time per reader (the call waits for its ranges). */
#ifndef STRATA_EXPERT_STREAM_H
#define STRATA_EXPERT_STREAM_H

#include "strata.h"

#include <stddef.h>
#include <stdint.h>

#define ST_READER_ALIGN 4096u

typedef struct st_reader st_reader;

typedef struct {
    uint64_t offset;           /* in the file */
    size_t bytes;
    void *dst;                 /* any alignment */
} st_read_range;

/* direct: 1 to try O_DIRECT; queue_depth 1..64 reader threads; chunk_bytes a multiple of
 * ST_READER_ALIGN (0: 4 MiB). */
strata_status st_reader_open(const char *path, int direct, int queue_depth, size_t chunk_bytes,
                             st_reader **out);
void st_reader_close(st_reader *r);
/* 1 if reads bypass the page cache (O_DIRECT accepted), 0 if they fall back to buffered reads. */
int st_reader_direct(const st_reader *r);
uint64_t st_reader_file_bytes(const st_reader *r);

/* Reads every range (in parallel), returns when all are complete. n == 0 is a no-op. */
strata_status st_reader_read(st_reader *r, const st_read_range *ranges, int n);

/* Bytes read from the file so far (aligned reads included) and the seconds spent in st_reader_read. */
void st_reader_totals(const st_reader *r, uint64_t *bytes, double *seconds);

#endif /* STRATA_EXPERT_STREAM_H */
